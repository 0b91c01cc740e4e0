//! The usual `process_*` metrics of the daemon itself, read from /proc on each scrape:
//! memory is what operators of graft's small memory limits watch, CPU and open files the
//! rest. A read that fails leaves its metrics out of that scrape rather than failing it.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

/// Reads this process's figures at each scrape.
#[derive(Debug)]
struct Process;

/// One scrape's figures.
#[derive(Debug, Default, PartialEq)]
pub struct Figures {
    /// Resident set size, bytes.
    pub resident_bytes: i64,
    /// Virtual memory size, bytes.
    pub virtual_bytes: i64,
    /// User and system CPU time, seconds.
    pub cpu_seconds: f64,
    /// Start time, seconds since the Unix epoch.
    pub start_time_seconds: i64,
    /// Open file descriptors.
    pub open_fds: i64,
    /// The soft limit on open file descriptors.
    pub max_fds: i64,
}

/// This process's figures now.
pub fn figures() -> Result<Figures, procfs::ProcError> {
    let me = procfs::process::Process::myself()?;
    let stat = me.stat()?;
    let ticks = procfs::ticks_per_second() as f64;
    let page = procfs::page_size();
    let boot = procfs::boot_time_secs()?;
    let limits = me.limits()?;
    let max_fds = match limits.max_open_files.soft_limit {
        procfs::process::LimitValue::Value(v) => i64::try_from(v).unwrap_or(i64::MAX),
        procfs::process::LimitValue::Unlimited => i64::MAX,
    };
    let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    Ok(Figures {
        resident_bytes: n(stat.rss.saturating_mul(page)),
        virtual_bytes: n(stat.vsize),
        cpu_seconds: (stat.utime + stat.stime) as f64 / ticks,
        start_time_seconds: n(boot + stat.starttime / ticks as u64),
        open_fds: i64::try_from(me.fd_count()?).unwrap_or(i64::MAX),
        max_fds,
    })
}

impl Collector for Process {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let f = match figures() {
            Ok(f) => f,
            Err(e) => {
                tracing::debug!(error = %e, "reading /proc/self for the process metrics");
                return Ok(());
            }
        };
        let gauges = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                f.resident_bytes,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                f.virtual_bytes,
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since the Unix epoch in seconds",
                f.start_time_seconds,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors",
                f.open_fds,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors",
                f.max_fds,
            ),
        ];
        for (name, help, v) in gauges {
            let g = ConstGauge::new(v);
            g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)?;
        }
        let cpu = ConstCounter::new(f.cpu_seconds);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            None,
            cpu.metric_type(),
        )?)?;
        Ok(())
    }
}

/// Registers the `process_*` metrics (unprefixed, as every Prometheus client names them).
pub fn register_process(registry: &mut Registry) {
    registry.register_collector(Box::new(Process));
}
