//! `procfs` sources: a local process (by pid, pid file or name) or the whole host.

use std::collections::HashMap;
use std::io;
use std::path::PathBuf;
use std::time::Instant;

use super::{CpuSource, SourceError};

/// Cumulative `utime + stime` ticks keyed by (pid, start time), so a reused pid is a
/// different key.
type TicksByProcess = HashMap<(u32, u64), u64>;

/// Which local process(es) to measure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessSelector {
    /// A fixed pid.
    Pid(u32),
    /// A file holding the pid (re-read on every sample, so a restarted DB is followed).
    PidFile(PathBuf),
    /// Every process whose `/proc/PID/comm` equals this name. The kernel keeps at most
    /// 15 bytes of a command name, so a longer name is compared on its first 15 bytes.
    /// Re-resolved on every sample.
    Name(String),
}

impl std::fmt::Display for ProcessSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Pid(pid) => write!(f, "pid {pid}"),
            Self::PidFile(p) => write!(f, "pid file {}", p.display()),
            Self::Name(n) => write!(f, "name {n:?}"),
        }
    }
}

/// CPU of a local process, from `utime + stime` in `/proc/PID/stat`.
///
/// The value is the CPU time consumed between two calls (clock ticks ÷
/// `sysconf(_SC_CLK_TCK)`) over the wall time between them, in **percent of one core**:
/// a process using two full cores reads 200. The source does not clamp; the controller
/// clamps values above 100 (a DB using at least one full core is at the top of the
/// profile).
///
/// With [`ProcessSelector::Name`], all matching processes are summed. A process is only
/// counted over an interval if it existed at both readings (identified by pid and start
/// time, so a reused pid is not mistaken for the old process); CPU used by processes that
/// started or exited in between is not seen. If none of the processes from the previous
/// reading is still there (the DB restarted), the call returns `Ok(None)` and starts over.
#[derive(Debug)]
pub struct ProcessCpu {
    selector: ProcessSelector,
    proc_root: PathBuf,
    ticks_per_sec: f64,
    /// Previous reading: when, and cumulative ticks per process.
    last: Option<(Instant, TicksByProcess)>,
}

impl ProcessCpu {
    /// A source for `selector` reading `/proc`.
    pub fn new(selector: ProcessSelector) -> Self {
        Self {
            selector,
            proc_root: PathBuf::from("/proc"),
            ticks_per_sec: clock_ticks_per_sec(),
            last: None,
        }
    }

    fn resolve(&self) -> Result<Vec<u32>, SourceError> {
        match &self.selector {
            ProcessSelector::Pid(pid) => Ok(vec![*pid]),
            ProcessSelector::PidFile(path) => {
                let ctx = format!("{}: reading pid file", self.describe());
                let text = std::fs::read_to_string(path).map_err(|e| SourceError::io(&ctx, e))?;
                let pid = text.trim().parse::<u32>().map_err(|_| {
                    SourceError::malformed(
                        &ctx,
                        format!("{:?} is not a pid", truncate(text.trim())),
                    )
                })?;
                Ok(vec![pid])
            }
            ProcessSelector::Name(name) => {
                let want = comm_prefix(name);
                let ctx = format!("{}: scanning {}", self.describe(), self.proc_root.display());
                let dir =
                    std::fs::read_dir(&self.proc_root).map_err(|e| SourceError::io(&ctx, e))?;
                let mut pids = Vec::new();
                for entry in dir.flatten() {
                    let Some(pid) = entry
                        .file_name()
                        .to_str()
                        .and_then(|s| s.parse::<u32>().ok())
                    else {
                        continue;
                    };
                    // Processes may exit during the scan: unreadable entries are skipped.
                    if let Ok(comm) = std::fs::read_to_string(entry.path().join("comm"))
                        && comm.trim_end_matches('\n') == want
                    {
                        pids.push(pid);
                    }
                }
                if pids.is_empty() {
                    return Err(SourceError::NoProcess {
                        selector: self.selector.to_string(),
                    });
                }
                Ok(pids)
            }
        }
    }

    fn read_ticks(&self, pids: &[u32]) -> Result<TicksByProcess, SourceError> {
        let mut out = HashMap::with_capacity(pids.len());
        for &pid in pids {
            let path = self.proc_root.join(pid.to_string()).join("stat");
            let ctx = format!("{}: reading {}", self.describe(), path.display());
            match std::fs::read_to_string(&path) {
                Ok(text) => {
                    let t = parse_pid_stat(&text)
                        .map_err(|detail| SourceError::malformed(&ctx, detail))?;
                    out.insert((pid, t.start_time), t.utime + t.stime);
                }
                // A process found by name exited between the scan and this read.
                Err(e)
                    if e.kind() == io::ErrorKind::NotFound
                        && matches!(self.selector, ProcessSelector::Name(_)) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    return Err(SourceError::NoProcess {
                        selector: self.selector.to_string(),
                    });
                }
                Err(e) => return Err(SourceError::io(ctx, e)),
            }
        }
        if out.is_empty() {
            return Err(SourceError::NoProcess {
                selector: self.selector.to_string(),
            });
        }
        Ok(out)
    }
}

impl CpuSource for ProcessCpu {
    fn sample(&mut self) -> Result<Option<f64>, SourceError> {
        let pids = self.resolve()?;
        let ticks = self.read_ticks(&pids)?;
        let now = Instant::now();
        let value = self.last.as_ref().and_then(|(then, prev)| {
            let mut seen = false;
            let mut delta: u64 = 0;
            for (key, &cur) in &ticks {
                if let Some(&p) = prev.get(key) {
                    seen = true;
                    delta += cur.saturating_sub(p);
                }
            }
            let wall = now.duration_since(*then).as_secs_f64();
            (seen && wall > 0.0).then(|| delta as f64 / self.ticks_per_sec / wall * 100.0)
        });
        self.last = Some((now, ticks));
        Ok(value)
    }

    fn describe(&self) -> String {
        format!("procfs process {}", self.selector)
    }
}

/// CPU of the whole host from the aggregate `cpu` line of `/proc/stat`:
/// `(Δtotal − Δidle − Δiowait) / Δtotal × 100`, where total is
/// `user + nice + system + idle + iowait + irq + softirq + steal` (guest time is already
/// included in user/nice). Always in `0..=100` (percent of all CPUs). The first call, and
/// a call with no tick elapsed since the previous one, return `Ok(None)`.
#[derive(Debug)]
pub struct HostCpu {
    path: PathBuf,
    last: Option<HostTimes>,
}

impl HostCpu {
    /// A source reading `/proc/stat`.
    pub fn new() -> Self {
        Self {
            path: PathBuf::from("/proc/stat"),
            last: None,
        }
    }
}

impl Default for HostCpu {
    fn default() -> Self {
        Self::new()
    }
}

impl CpuSource for HostCpu {
    fn sample(&mut self) -> Result<Option<f64>, SourceError> {
        let ctx = self.describe();
        let text = std::fs::read_to_string(&self.path).map_err(|e| SourceError::io(&ctx, e))?;
        let cur = parse_proc_stat(&text).map_err(|d| SourceError::malformed(&ctx, d))?;
        let Some(prev) = self.last else {
            self.last = Some(cur);
            return Ok(None);
        };
        let total = cur.total.saturating_sub(prev.total);
        if total == 0 {
            // Keep the old baseline: the next call measures the longer interval.
            return Ok(None);
        }
        self.last = Some(cur);
        let busy = cur.busy.saturating_sub(prev.busy).min(total);
        Ok(Some(busy as f64 / total as f64 * 100.0))
    }

    fn describe(&self) -> String {
        format!("procfs host {}", self.path.display())
    }
}

/// Cumulative host CPU ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct HostTimes {
    busy: u64,
    total: u64,
}

/// Parses the aggregate `cpu ` line of `/proc/stat` (see proc(5)).
fn parse_proc_stat(text: &str) -> Result<HostTimes, String> {
    let line = text
        .lines()
        .find(|l| l.starts_with("cpu "))
        .ok_or_else(|| "no aggregate \"cpu\" line".to_owned())?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8) // user nice system idle iowait irq softirq steal
        .map(|f| {
            f.parse::<u64>()
                .map_err(|_| format!("bad field {f:?} in {line:?}"))
        })
        .collect::<Result<_, _>>()?;
    if fields.len() < 4 {
        return Err(format!("too few fields in {line:?}"));
    }
    let total: u64 = fields.iter().sum();
    let idle = fields[3] + fields.get(4).copied().unwrap_or(0);
    Ok(HostTimes {
        busy: total - idle,
        total,
    })
}

/// Fields of `/proc/PID/stat` we use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PidStat {
    utime: u64,
    stime: u64,
    start_time: u64,
}

/// Parses `/proc/PID/stat` (proc(5)): `pid (comm) state ...`; `comm` may contain spaces
/// and parentheses, so fields are counted after the *last* `)`. utime, stime and
/// starttime are fields 14, 15 and 22 (1-based).
fn parse_pid_stat(text: &str) -> Result<PidStat, String> {
    let rest = text
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| "no \")\" after comm".to_owned())?;
    // `rest` starts with field 3 (state).
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let get = |n: usize| -> Result<u64, String> {
        let f = fields
            .get(n - 3)
            .ok_or_else(|| format!("field {n} missing"))?;
        f.parse::<u64>()
            .map_err(|_| format!("field {n} {f:?} is not a number"))
    };
    Ok(PidStat {
        utime: get(14)?,
        stime: get(15)?,
        start_time: get(22)?,
    })
}

/// The first 15 bytes of `name` (TASK_COMM_LEN − 1), cut at a char boundary.
fn comm_prefix(name: &str) -> &str {
    let mut end = name.len().min(15);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    &name[..end]
}

fn truncate(s: &str) -> String {
    s.chars().take(64).collect()
}

/// `sysconf(_SC_CLK_TCK)`, the unit of `/proc/PID/stat` times; 100 if unavailable.
fn clock_ticks_per_sec() -> f64 {
    // SAFETY: sysconf has no preconditions and only returns a system constant.
    let v = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if v > 0 { v as f64 } else { 100.0 }
}

/// For tests: a process source over another proc root.
#[cfg(test)]
impl ProcessCpu {
    fn with_proc_root(selector: ProcessSelector, root: &std::path::Path) -> Self {
        Self {
            proc_root: root.to_owned(),
            ..Self::new(selector)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pid_stat_fields_are_counted_after_the_last_paren() {
        let line = "1234 (a (weird) name) S 1 1234 1234 0 -1 4194560 100 0 0 0 \
                    250 75 0 0 20 0 4 0 98765 1000000 200 18446744073709551615";
        assert_eq!(
            parse_pid_stat(line).unwrap(),
            PidStat {
                utime: 250,
                stime: 75,
                start_time: 98765
            }
        );
        assert!(parse_pid_stat("1234 (x) S 1 2").is_err());
        assert!(parse_pid_stat("garbage").is_err());
    }

    #[test]
    fn proc_stat_busy_excludes_idle_and_iowait_and_guest() {
        let text = "cpu  100 10 50 800 40 5 5 0 30 0\ncpu0 1 2 3 4 5 6 7 8 9 10\nintr 1\n";
        // total = 100+10+50+800+40+5+5+0 = 1010, idle = 840, guest not added.
        assert_eq!(
            parse_proc_stat(text).unwrap(),
            HostTimes {
                busy: 170,
                total: 1010
            }
        );
        assert!(parse_proc_stat("cpu0 1 2 3 4\n").is_err());
        assert!(parse_proc_stat("cpu  1 x 3 4\n").is_err());
    }

    #[test]
    fn comm_names_are_compared_on_15_bytes() {
        assert_eq!(comm_prefix("redis-server"), "redis-server");
        assert_eq!(comm_prefix("a-very-long-process-name"), "a-very-long-pro");
        assert_eq!(comm_prefix("ééééééééé"), "ééééééé");
    }

    #[test]
    fn name_selector_sums_matching_processes_in_a_fake_proc() {
        let root = std::env::temp_dir().join(format!("dra-fakeproc-{}", std::process::id()));
        let write = |pid: u32, comm: &str, utime: u64, start: u64| {
            let d = root.join(pid.to_string());
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("comm"), format!("{comm}\n")).unwrap();
            std::fs::write(
                d.join("stat"),
                format!("{pid} ({comm}) S 1 1 1 0 -1 0 0 0 0 0 {utime} 0 0 0 20 0 1 0 {start} 0 0"),
            )
            .unwrap();
        };
        write(10, "db", 100, 5);
        write(11, "db", 200, 6);
        write(12, "other", 0, 7);
        std::fs::create_dir_all(root.join("self")).unwrap();
        let mut src = ProcessCpu::with_proc_root(ProcessSelector::Name("db".into()), &root);
        assert_eq!(src.resolve().unwrap().len(), 2);
        assert_eq!(src.sample().unwrap(), None);
        write(10, "db", 150, 5);
        write(11, "db", 260, 6);
        write(12, "other", 10_000, 7);
        let v = src.sample().unwrap().unwrap();
        assert!(v > 0.0, "110 ticks over a short interval must show: {v}");
        // Both db processes restarted (new start times): no common process, start over.
        write(10, "db", 1, 50);
        write(11, "db", 1, 60);
        assert_eq!(src.sample().unwrap(), None);
        std::fs::remove_dir_all(&root).unwrap();
        assert!(matches!(src.sample(), Err(SourceError::Io { .. })));
        let mut none = ProcessCpu::new(ProcessSelector::Name("no-such-proc-x".into()));
        assert!(matches!(none.sample(), Err(SourceError::NoProcess { .. })));
    }
}
