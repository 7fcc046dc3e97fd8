//! The `process_*` metrics every Prometheus client library exports (CPU, memory, file
//! descriptors, start time), read from Linux's `/proc` when `/metrics` is scraped. Elsewhere
//! they are absent rather than wrong.

use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Linux reports CPU times in `/proc` in USER_HZ, 100 a second on every architecture.
const TICKS_PER_SECOND: f64 = 100.0;

/// What one read of `/proc` says about this process.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ProcessSample {
    pub cpu_seconds: f64,
    pub resident_bytes: f64,
    pub virtual_bytes: f64,
    pub start_time_seconds: f64,
    pub open_fds: f64,
    pub max_fds: f64,
}

/// From `/proc/self/stat`: user and system CPU seconds, start ticks after boot, virtual bytes.
/// The command name (field 2) may hold spaces and parentheses: fields are counted after its
/// last `)`.
pub fn parse_stat(stat: &str) -> Option<(f64, f64, f64)> {
    let after = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // After the name: state is field 3, so field n is fields[n - 3].
    let field = |n: usize| fields.get(n - 3)?.parse::<f64>().ok();
    let cpu = (field(14)? + field(15)?) / TICKS_PER_SECOND;
    let start_ticks = field(22)?;
    Some((cpu, start_ticks, field(23)?))
}

/// `btime` from `/proc/stat`: when the machine booted, in Unix seconds.
pub fn parse_boot_time(stat: &str) -> Option<f64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// `VmRSS` from `/proc/self/status`, in bytes.
pub fn parse_resident(status: &str) -> Option<f64> {
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kb * 1024.0)
}

/// The soft limit of open files from `/proc/self/limits`.
pub fn parse_max_fds(limits: &str) -> Option<f64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Reads this process's sample, or `None` where there is no `/proc`.
pub fn read() -> Option<ProcessSample> {
    let (cpu_seconds, start_ticks, virtual_bytes) =
        parse_stat(&std::fs::read_to_string("/proc/self/stat").ok()?)?;
    let boot = parse_boot_time(&std::fs::read_to_string("/proc/stat").ok()?)?;
    Some(ProcessSample {
        cpu_seconds,
        resident_bytes: parse_resident(&std::fs::read_to_string("/proc/self/status").ok()?)?,
        virtual_bytes,
        start_time_seconds: boot + start_ticks / TICKS_PER_SECOND,
        open_fds: std::fs::read_dir("/proc/self/fd").ok()?.count() as f64,
        max_fds: parse_max_fds(&std::fs::read_to_string("/proc/self/limits").ok()?)?,
    })
}

type FloatGauge = Gauge<f64, AtomicU64>;

/// The families, registered without Headroom's prefix, as the convention names them.
#[derive(Debug, Default)]
pub struct ProcessMetrics {
    cpu_seconds: Counter<f64, AtomicU64>,
    resident_bytes: FloatGauge,
    virtual_bytes: FloatGauge,
    start_time_seconds: FloatGauge,
    open_fds: FloatGauge,
    max_fds: FloatGauge,
}

impl ProcessMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            self.cpu_seconds.clone(),
        );
        registry.register(
            "process_resident_memory_bytes",
            "Resident memory size in bytes",
            self.resident_bytes.clone(),
        );
        registry.register(
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes",
            self.virtual_bytes.clone(),
        );
        registry.register(
            "process_start_time_seconds",
            "Start time of the process since the Unix epoch in seconds",
            self.start_time_seconds.clone(),
        );
        registry.register(
            "process_open_fds",
            "Number of open file descriptors",
            self.open_fds.clone(),
        );
        registry.register(
            "process_max_fds",
            "Maximum number of open file descriptors",
            self.max_fds.clone(),
        );
    }

    /// Brings the families to `sample`; the CPU counter only moves forward.
    pub fn update(&self, sample: &ProcessSample) {
        let counted = self.cpu_seconds.get();
        if sample.cpu_seconds > counted {
            self.cpu_seconds.inc_by(sample.cpu_seconds - counted);
        }
        self.resident_bytes.set(sample.resident_bytes);
        self.virtual_bytes.set(sample.virtual_bytes);
        self.start_time_seconds.set(sample.start_time_seconds);
        self.open_fds.set(sample.open_fds);
        self.max_fds.set(sample.max_fds);
    }
}

#[cfg(test)]
mod tests {
    use super::{
        ProcessMetrics, ProcessSample, parse_boot_time, parse_max_fds, parse_resident, parse_stat,
        read,
    };

    #[test]
    fn proc_files_are_read_as_the_kernel_writes_them() {
        // A command name with a space and a parenthesis, as `comm` may hold.
        let stat = "4242 (head room) S 1 4242 4242 0 -1 4194560 2507 0 0 0 250 130 0 0 20 0 9 0 81234 1234567168 9000 18446744073709551615";
        assert_eq!(parse_stat(stat), Some((3.8, 81234.0, 1_234_567_168.0)));
        assert_eq!(
            parse_boot_time("cpu  1 2 3\nbtime 1796112000\nprocesses 9\n"),
            Some(1_796_112_000.0)
        );
        assert_eq!(
            parse_resident("Name:\theadroom\nVmRSS:\t   20480 kB\n"),
            Some(20_971_520.0)
        );
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \nMax open files            1048576              1048576              files     \n";
        assert_eq!(parse_max_fds(limits), Some(1_048_576.0));
    }

    #[test]
    fn this_process_reads_itself() {
        let sample = read().expect("/proc on Linux");
        assert!(sample.resident_bytes > 1_000_000.0, "{sample:?}");
        assert!(
            sample.open_fds >= 3.0 && sample.max_fds >= sample.open_fds,
            "{sample:?}"
        );
        assert!(sample.start_time_seconds > 1_700_000_000.0, "{sample:?}");
        let metrics = ProcessMetrics::default();
        metrics.update(&sample);
        metrics.update(&ProcessSample {
            cpu_seconds: 0.0,
            ..sample
        });
        assert_eq!(
            metrics.cpu_seconds.get(),
            sample.cpu_seconds,
            "never backwards"
        );
    }
}
