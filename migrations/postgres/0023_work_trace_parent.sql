-- The W3C trace context (traceparent) of the span that enqueued a piece of
-- work (Work::trace_parent): each of its fires' spans links to that span.
ALTER TABLE quartz_work ADD COLUMN trace_parent VARCHAR(55) NULL;
