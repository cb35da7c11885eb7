-- The JSON Schemas of a node's handlers' payloads, by handler, as a JSON
-- object (TypedJob::payload_schema), written when it registers: the admin
-- surface checks a payload against the schema of the newest live node that
-- offers its handler. NULL when the node published none. Not read with the
-- node's other columns, which every heartbeat reads.
ALTER TABLE quartz_node ADD COLUMN payload_schemas MEDIUMTEXT NULL;
