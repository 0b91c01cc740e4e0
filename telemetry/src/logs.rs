//! Both daemons' log output: human-readable text (the default) or one JSON object per line
//! for log collectors, at `RUST_LOG`'s level (info when unset). Lines inside a span (a
//! claim's prepare, a container's creation) carry its fields: inline in text, under `span`
//! in JSON.

use tracing_subscriber::fmt::writer::BoxMakeWriter;

/// `--log-format` / `GRAFT_LOG_FORMAT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the global subscriber writing to `writer`; `ansi`: colours in text (a terminal).
pub fn init(format: LogFormat, writer: BoxMakeWriter, ansi: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    match format {
        LogFormat::Text => builder.with_ansi(ansi).init(),
        // The event's fields at the top level, the current span's under "span".
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .init(),
    }
}
