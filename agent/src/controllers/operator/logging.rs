//! JSON logs by default (what log pipelines parse); text for people at a terminal.

use tracing_subscriber::EnvFilter;

use super::config::LogFormat;

/// Installs the global subscriber once; later calls (several in-process agents in a test)
/// keep the first one.
pub fn init(format: LogFormat, level: &str) {
    let filter = EnvFilter::try_new(level)
        .or_else(|_| EnvFilter::try_new("info"))
        .unwrap_or_default();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder.try_init(),
    };
}
