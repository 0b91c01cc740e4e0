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

/// `GET path` over TCP (a hostNetwork daemon's port on this node): status and body.
pub fn tcp_get(addr: &str, path: &str) -> anyhow::Result<(u16, String)> {
    use std::io::{Read, Write};
    let addr: std::net::SocketAddr = addr.parse()?;
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .with_context(|| format!("connecting to {addr}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = String::new();
    s.take(4 << 20).read_to_string(&mut raw)?;
    let (head, body) = raw.split_once("\r\n\r\n").context("incomplete answer")?;
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .context("not an HTTP answer")?;
    Ok((code, body.to_string()))
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

/// The cumulative buckets `(le, count)` of histogram `name` whose labels include `label`
/// (`result="ok"`), in the order the text lists them (ascending `le`).
pub fn buckets(text: &str, name: &str, label: &str) -> Vec<(f64, f64)> {
    let prefix = format!("{name}_bucket{{");
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(&prefix)?;
            let (labels, value) = rest.split_once("} ")?;
            if !labels.split(',').any(|x| x == label) {
                return None;
            }
            let le = labels
                .split(',')
                .find_map(|x| x.strip_prefix("le=\""))?
                .trim_end_matches('"');
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, value.split_whitespace().next()?.parse().ok()?))
        })
        .collect()
}

/// The `q` quantile (0..=1) of what a histogram counted between two scrapes, interpolated
/// within its bucket the way Prometheus' `histogram_quantile` does; `None` when nothing
/// was counted. Its resolution is the bucket's width: read it as "at most the bound".
pub fn quantile(before: &[(f64, f64)], after: &[(f64, f64)], q: f64) -> Option<f64> {
    let delta: Vec<(f64, f64)> = after
        .iter()
        .map(|&(le, n)| {
            let was = before.iter().find(|b| b.0 == le).map_or(0.0, |b| b.1);
            (le, n - was)
        })
        .collect();
    let total = delta.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let (mut lower, mut below) = (0.0, 0.0);
    for (le, cum) in delta {
        if cum >= rank {
            if le.is_infinite() {
                return Some(lower);
            }
            let inside = cum - below;
            let frac = if inside > 0.0 {
                (rank - below) / inside
            } else {
                1.0
            };
            return Some(lower + (le - lower) * frac);
        }
        (lower, below) = (le, cum);
    }
    Some(lower)
}

#[cfg(test)]
mod tests {
    #[test]
    fn histogram_quantiles() {
        let t = "h_bucket{result=\"ok\",le=\"0.01\"} 1\nh_bucket{result=\"ok\",le=\"0.1\"} 3\n\
                 h_bucket{result=\"ok\",le=\"+Inf\"} 4\nh_bucket{result=\"err\",le=\"0.01\"} 9\n";
        let after = super::buckets(t, "h", "result=\"ok\"");
        assert_eq!(after, vec![(0.01, 1.0), (0.1, 3.0), (f64::INFINITY, 4.0)]);
        let before = vec![(0.01, 1.0), (0.1, 1.0), (f64::INFINITY, 1.0)];
        // Since `before`: two in (0.01, 0.1], one above.
        let p50 = super::quantile(&before, &after, 0.5).unwrap();
        assert!((p50 - 0.0775).abs() < 1e-9, "{p50}");
        assert_eq!(super::quantile(&before, &after, 0.99), Some(0.1));
        assert_eq!(super::quantile(&after, &after, 0.5), None);
    }

    #[test]
    fn series_values() {
        let t = "a_total 3\na_count{event=\"x\"} 2\na_count{event=\"y\"} 5.5\n";
        assert_eq!(super::value(t, "a_total"), Some(3.0));
        assert_eq!(super::value(t, "a_count{event=\"y\"}"), Some(5.5));
        assert_eq!(super::value(t, "a"), None);
    }
}
