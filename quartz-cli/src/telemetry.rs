//! What the `quartz` command reports about itself: its log on stderr, the
//! `metrics` recorder behind `/metrics`, and, with the `otel` feature (on
//! by default), OpenTelemetry over OTLP/HTTP (JSON): a trace span per fire
//! (its job, trigger, fire time, attempt, run kind, how late its handler
//! started and its outcome) and every metric `/metrics` exports, lateness as
//! a histogram.
//!
//! OpenTelemetry is configured by its standard variables and is off unless
//! an endpoint is named: `OTEL_EXPORTER_OTLP_ENDPOINT` (both signals, to
//! `/v1/traces` and `/v1/metrics` under it), or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`
//! (one signal each, as given); `OTEL_EXPORTER_OTLP_HEADERS`,
//! `OTEL_EXPORTER_OTLP_TIMEOUT`, `OTEL_SERVICE_NAME` (default `quartz`),
//! `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_METRIC_EXPORT_INTERVAL` (ms, default
//! 60,000), `OTEL_BSP_*` for the span batches; `OTEL_SDK_DISABLED=true`,
//! `OTEL_TRACES_EXPORTER=none` and `OTEL_METRICS_EXPORTER=none` turn it or a
//! signal off.

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// The Prometheus recorder's handle, once installed: what `/metrics`
/// renders.
pub static PROMETHEUS: std::sync::OnceLock<PrometheusHandle> = std::sync::OnceLock::new();

/// What must outlive the command: the exporters, flushed when dropped.
#[derive(Default)]
pub struct Telemetry {
    #[cfg(feature = "otel")]
    otel: Option<otel::Otel>,
}

impl Telemetry {
    /// The log on stderr at `log_level` (or `RUST_LOG`), and with
    /// `exports`, OpenTelemetry's traces as the variables configure them.
    /// Called once, outside any async runtime (the exporter's HTTP client
    /// runs its own).
    ///
    /// # Errors
    ///
    /// An exporter the variables configure wrongly.
    pub fn init(log_level: &str, exports: bool) -> anyhow::Result<Telemetry> {
        let log = tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(log_level)),
            );
        let registry = tracing_subscriber::registry().with(log);
        #[cfg(feature = "otel")]
        {
            let otel = if exports { otel::Otel::from_env()? } else { None };
            registry.with(otel.as_ref().and_then(otel::Otel::fire_spans)).init();
            Ok(Telemetry { otel })
        }
        #[cfg(not(feature = "otel"))]
        {
            let _ = exports;
            registry.init();
            Ok(Telemetry {})
        }
    }

    /// Installs the process's `metrics` recorder: Prometheus's, whose
    /// handle `/metrics` renders, and OpenTelemetry's beside it when
    /// exporting. Called once, inside the runtime (the Prometheus
    /// recorder's upkeep is a task).
    ///
    /// # Errors
    ///
    /// When a recorder is installed already.
    pub fn install_metrics(&self) -> anyhow::Result<PrometheusHandle> {
        let prometheus = PrometheusBuilder::new().build_recorder();
        let handle = prometheus.handle();
        let fanout = metrics_util::layers::FanoutBuilder::default().add_recorder(prometheus);
        #[cfg(feature = "otel")]
        let fanout = match self.otel.as_ref().and_then(otel::Otel::recorder) {
            Some(recorder) => fanout.add_recorder(recorder),
            None => fanout,
        };
        metrics::set_global_recorder(fanout.build())
            .map_err(|e| anyhow::anyhow!("a metrics recorder is installed already: {e}"))?;
        let upkeep = handle.clone();
        // Histograms are drained into their summaries by the upkeep.
        tokio::spawn(async move {
            let mut every = tokio::time::interval(std::time::Duration::from_secs(5));
            loop {
                every.tick().await;
                upkeep.run_upkeep();
            }
        });
        Ok(handle)
    }

    /// Whether traces or metrics are exported.
    pub fn exporting(&self) -> bool {
        #[cfg(feature = "otel")]
        return self.otel.is_some();
        #[cfg(not(feature = "otel"))]
        false
    }
}

/// Links a fire's span to the span whose W3C trace context enqueued its
/// work (the node's [`SchedulerBuilder::link_spans`](quartz_core::engine::SchedulerBuilder::link_spans)):
/// an OpenTelemetry link, exported with the span. Nothing without the
/// exporter's layer, or for a context that does not parse.
#[cfg(feature = "otel")]
pub fn link(span: &tracing::Span, traceparent: &str) {
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    let [_, trace, id, flags] = traceparent.split('-').collect::<Vec<_>>()[..] else {
        return;
    };
    let (Ok(trace), Ok(id), Ok(flags)) = (
        TraceId::from_hex(trace),
        SpanId::from_hex(id),
        u8::from_str_radix(flags, 16),
    ) else {
        return;
    };
    span.add_link(SpanContext::new(
        trace,
        id,
        TraceFlags::new(flags),
        true,
        TraceState::default(),
    ));
}

#[cfg(feature = "otel")]
mod otel {
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_otlp::{MetricExporter, SpanExporter};
    use opentelemetry_sdk::Resource;
    use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
    use opentelemetry_sdk::trace::SdkTracerProvider;
    use tracing_subscriber::Layer as _;

    /// The service name when `OTEL_SERVICE_NAME` names none.
    const SERVICE: &str = "quartz";

    /// A variable's value, when set and not empty.
    fn var(name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.trim().is_empty())
    }

    /// The exporters of the two signals, each when configured.
    pub(super) struct Otel {
        traces: Option<SdkTracerProvider>,
        metrics: Option<SdkMeterProvider>,
    }

    impl Otel {
        /// The exporters the variables configure, or `None` when they name
        /// no endpoint (or turn the SDK off).
        pub(super) fn from_env() -> anyhow::Result<Option<Otel>> {
            if var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
                return Ok(None);
            }
            let any = var("OTEL_EXPORTER_OTLP_ENDPOINT").is_some();
            let wanted = |signal: &str| {
                var(&format!("OTEL_{signal}_EXPORTER")).is_none_or(|v| !v.eq_ignore_ascii_case("none"))
                    && (any || var(&format!("OTEL_EXPORTER_OTLP_{signal}_ENDPOINT")).is_some())
            };
            let (traces, metrics) = (wanted("TRACES"), wanted("METRICS"));
            if !traces && !metrics {
                return Ok(None);
            }
            let mut resource = Resource::builder();
            if var("OTEL_SERVICE_NAME").is_none() {
                resource = resource.with_service_name(SERVICE);
            }
            let resource = resource.build();
            let traces = if traces {
                let exporter = SpanExporter::builder()
                    .with_http()
                    .build()
                    .map_err(|e| anyhow::anyhow!("OpenTelemetry's span exporter: {e}"))?;
                Some(
                    SdkTracerProvider::builder()
                        .with_batch_exporter(exporter)
                        .with_resource(resource.clone())
                        .build(),
                )
            } else {
                None
            };
            let metrics = if metrics {
                let exporter = MetricExporter::builder()
                    .with_http()
                    .build()
                    .map_err(|e| anyhow::anyhow!("OpenTelemetry's metric exporter: {e}"))?;
                Some(
                    SdkMeterProvider::builder()
                        .with_reader(PeriodicReader::builder(exporter).build())
                        .with_resource(resource)
                        .build(),
                )
            } else {
                None
            };
            Ok(Some(Otel { traces, metrics }))
        }

        /// The layer exporting the fires' spans (only those: the log has
        /// the rest).
        pub(super) fn fire_spans<S>(&self) -> Option<Box<dyn tracing_subscriber::Layer<S> + Send + Sync>>
        where
            S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a> + Send + Sync,
        {
            let tracer = self.traces.as_ref()?.tracer("quartz");
            let only_fires = tracing_subscriber::filter::filter_fn(|meta| meta.is_span() && meta.name() == "fire");
            Some(
                tracing_opentelemetry::layer()
                    .with_tracer(tracer)
                    .with_filter(only_fires)
                    .boxed(),
            )
        }

        /// The `metrics` recorder feeding OpenTelemetry's meter.
        pub(super) fn recorder(&self) -> Option<metrics_exporter_otel::OpenTelemetryRecorder> {
            use opentelemetry::metrics::MeterProvider as _;
            Some(metrics_exporter_otel::OpenTelemetryRecorder::new(
                self.metrics.as_ref()?.meter("quartz"),
            ))
        }
    }

    impl Drop for Otel {
        /// Flushes what is buffered and stops the exporters.
        fn drop(&mut self) {
            if let Some(traces) = self.traces.take()
                && let Err(e) = traces.shutdown()
            {
                eprintln!("quartz: OpenTelemetry's traces were not all exported: {e}");
            }
            if let Some(metrics) = self.metrics.take()
                && let Err(e) = metrics.shutdown()
            {
                eprintln!("quartz: OpenTelemetry's metrics were not all exported: {e}");
            }
        }
    }
}
