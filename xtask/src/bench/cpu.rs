//! CPU time from /proc: of one process (the agent), of the lab's processes and of the
//! whole machine (the context stored with every run; per field for the flood bench).

use anyhow::{Context, Result, ensure};

use crate::lab;

/// utime + stime (clock ticks) of a `/proc/<pid>/stat` line. The command name (field 2)
/// is in parentheses and may contain spaces or ')', so fields are counted after the
/// last ')': state is field 3, utime field 14, stime field 15 (proc(5)).
pub fn proc_stat_cpu_ticks(stat: &str) -> Result<u64> {
    let (_, rest) = stat
        .rsplit_once(')')
        .context("no ')' after the command name")?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    ensure!(
        f.len() >= 13,
        "only {} fields after the command name",
        f.len()
    );
    let utime: u64 = f[11]
        .parse()
        .with_context(|| format!("utime {:?}", f[11]))?;
    let stime: u64 = f[12]
        .parse()
        .with_context(|| format!("stime {:?}", f[12]))?;
    Ok(utime + stime)
}

/// The fields of the first (`cpu`) line of a `/proc/stat` text, at least `min` of them.
fn cpu_line(stat: &str, min: usize) -> Result<Vec<u64>> {
    let line = stat
        .lines()
        .find(|l| l.starts_with("cpu "))
        .context("no aggregate cpu line")?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .context("cpu line")?;
    ensure!(v.len() >= min, "cpu line too short");
    Ok(v)
}

/// Busy and total jiffies of the first (`cpu`) line of `/proc/stat`: busy = total −
/// idle − iowait (proc(5): user nice system idle iowait irq softirq steal …).
pub fn proc_stat_busy_total(stat: &str) -> Result<(u64, u64)> {
    let v = cpu_line(stat, 5)?;
    // guest/guest_nice (fields 9, 10) are already counted in user/nice.
    let total: u64 = v.iter().take(8).sum();
    Ok((total - v[3] - v[4], total))
}

/// The aggregate `cpu` line of `/proc/stat` in seconds (all CPUs), per field.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuFields {
    pub user: f64,
    pub nice: f64,
    pub system: f64,
    pub idle: f64,
    pub iowait: f64,
    pub irq: f64,
    pub softirq: f64,
    pub steal: f64,
}

impl CpuFields {
    /// Parses the first (`cpu`) line of a `/proc/stat` text, clock ticks ÷ `ticks_per_s`.
    pub fn parse(stat: &str, ticks_per_s: f64) -> Result<CpuFields> {
        let v: Vec<f64> = cpu_line(stat, 8)?
            .into_iter()
            .map(|x| x as f64 / ticks_per_s)
            .collect();
        Ok(CpuFields {
            user: v[0],
            nice: v[1],
            system: v[2],
            idle: v[3],
            iowait: v[4],
            irq: v[5],
            softirq: v[6],
            steal: v[7],
        })
    }

    /// Now, from /proc/stat.
    pub fn now() -> Result<CpuFields> {
        let s = std::fs::read_to_string("/proc/stat").context("read /proc/stat")?;
        CpuFields::parse(&s, clock_ticks_per_s())
    }

    /// Field by field `self − earlier`.
    pub fn since(&self, earlier: &CpuFields) -> CpuFields {
        CpuFields {
            user: self.user - earlier.user,
            nice: self.nice - earlier.nice,
            system: self.system - earlier.system,
            idle: self.idle - earlier.idle,
            iowait: self.iowait - earlier.iowait,
            irq: self.irq - earlier.irq,
            softirq: self.softirq - earlier.softirq,
            steal: self.steal - earlier.steal,
        }
    }

    /// Everything but idle and iowait (as [`proc_stat_busy_total`]).
    pub fn busy(&self) -> f64 {
        self.user + self.nice + self.system + self.irq + self.softirq + self.steal
    }
}

/// Busy CPU seconds of the whole machine so far (all CPUs).
pub(crate) fn machine_busy_s() -> Result<f64> {
    let s = std::fs::read_to_string("/proc/stat").context("read /proc/stat")?;
    Ok(proc_stat_busy_total(&s)?.0 as f64 / clock_ticks_per_s())
}

/// CPU seconds used so far by every process in the lab's namespaces (agent, Redis,
/// simulators, load generator).
pub(crate) fn lab_processes_cpu_s() -> f64 {
    lab::namespaces()
        .iter()
        .flat_map(|ns| {
            lab::sh(&["ip", "netns", "pids", ns])
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok())
                .collect::<Vec<_>>()
        })
        .filter_map(|pid| cpu_seconds(pid).ok())
        .sum()
}

pub(crate) fn clock_ticks_per_s() -> f64 {
    // SAFETY: sysconf only reads a system constant.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

pub(crate) fn cpu_seconds(pid: u32) -> Result<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("read /proc/{pid}/stat"))?;
    Ok(proc_stat_cpu_ticks(&s)? as f64 / clock_ticks_per_s())
}

/// The 1, 5 and 15 minute load averages, as /proc/loadavg gives them.
pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_gives_utime_plus_stime_even_with_spaces_and_parens_in_the_name() {
        // Fields 14 (utime) = 1234 and 15 (stime) = 56.
        let stat = "4242 (dra (run) x) S 1 4242 4242 0 -1 4194560 9000 0 0 0 \
                    1234 56 0 0 20 0 6 0 31337 1000000 500 18446744073709551615 \
                    1 1 0 0 0 0 0 4096 0 0 0 0 17 1 0 0 0 0 0";
        assert_eq!(proc_stat_cpu_ticks(stat).unwrap(), 1290);
        assert!(proc_stat_cpu_ticks("4242 (dra) S 1 2").is_err());
        assert!(proc_stat_cpu_ticks("no parens at all").is_err());
    }

    #[test]
    fn our_own_stat_line_parses() {
        let s = std::fs::read_to_string("/proc/self/stat").unwrap();
        proc_stat_cpu_ticks(&s).unwrap();
    }

    #[test]
    fn machine_busy_leaves_out_idle_and_iowait() {
        let stat = "cpu  100 5 50 1000 20 3 7 2 9 0\ncpu0 50 2 25 500 10 1 3 1 0 0\nintr 1 2\n";
        // total = 100+5+50+1000+20+3+7+2 (guest not added again), busy = total − idle − iowait.
        assert_eq!(proc_stat_busy_total(stat).unwrap(), (167, 1187));
        assert!(proc_stat_busy_total("intr 1 2").is_err());
        let f = CpuFields::parse(stat, 100.0).unwrap();
        assert_eq!((f.user, f.softirq, f.steal), (1.0, 0.07, 0.02));
        assert!((f.busy() - 1.67).abs() < 1e-9);
        let later = CpuFields { softirq: 0.5, ..f };
        assert!((later.since(&f).softirq - 0.43).abs() < 1e-9);
        assert_eq!(later.since(&f).user, 0.0);
    }
}
