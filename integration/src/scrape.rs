//! The daemons' metrics and probe endpoints, read through their health sockets.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// `GET path` on a daemon's health socket: status and body.
pub fn get(socket: &Path, path: &str) -> anyhow::Result<(u16, String)> {
    graft_telemetry::probe::get(socket, path, Duration::from_secs(5)).map_err(anyhow::Error::msg)
}

/// The metrics text.
pub fn metrics(socket: &Path) -> anyhow::Result<String> {
    match get(socket, "/metrics")? {
        (200, body) => Ok(body),
        (code, body) => bail!("/metrics answered {code}: {body}"),
    }
}

/// The value of one series, named with its labels as the text shows them
/// (`graft_nri_containers_injected_total`, `x_count{event="create_container"}`).
pub fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// [`value`], or an error that shows the text.
pub fn need(text: &str, series: &str) -> anyhow::Result<f64> {
    value(text, series).with_context(|| format!("{series} not in the metrics:\n{text}"))
}

/// Waits until /readyz answers 200; returns its body.
pub fn wait_ready(socket: &Path, limit: Duration) -> anyhow::Result<String> {
    let start = Instant::now();
    loop {
        let last = get(socket, "/readyz");
        if let Ok((200, body)) = &last {
            return Ok(body.clone());
        }
        if start.elapsed() > limit {
            bail!("{} not ready after {limit:?}: {last:?}", socket.display());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn series_values() {
        let t = "a_total 3\na_count{event=\"x\"} 2\na_count{event=\"y\"} 5.5\n";
        assert_eq!(super::value(t, "a_total"), Some(3.0));
        assert_eq!(super::value(t, "a_count{event=\"y\"}"), Some(5.5));
        assert_eq!(super::value(t, "a"), None);
    }
}
