//! Booting a guest in qemu: KVM when this machine can, TCG (software emulation, `-cpu
//! max`) otherwise; the console (serial) read line by line into a log and a callback,
//! the guest stopped when it overruns its time.

use std::{
    io::{BufRead as _, BufReader, Write as _},
    path::Path,
    process::{Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use anyhow::{Context, Result};

/// How qemu runs the guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accel {
    Kvm,
    Tcg,
}

impl Accel {
    /// KVM if this CPU has hardware virtualisation (vmx or svm) and /dev/kvm can create
    /// a VM, else TCG. /dev/kvm alone is not enough: on a VM without nested
    /// virtualisation it may create VMs whose guests then stop on instructions it
    /// cannot emulate.
    pub fn detect() -> Accel {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let hw = cpuinfo
            .lines()
            .filter(|l| l.starts_with("flags"))
            .any(|l| l.split_whitespace().any(|f| f == "vmx" || f == "svm"));
        if !hw {
            return Accel::Tcg;
        }
        const KVM_GET_API_VERSION: libc::c_ulong = 0xAE00;
        const KVM_CREATE_VM: libc::c_ulong = 0xAE01;
        // SAFETY: open/ioctl/close on a path and the fds they return; no memory passed.
        unsafe {
            let fd = libc::open(c"/dev/kvm".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
            if fd < 0 {
                return Accel::Tcg;
            }
            let ok = libc::ioctl(fd, KVM_GET_API_VERSION, 0) == 12 && {
                let vm = libc::ioctl(fd, KVM_CREATE_VM, 0);
                if vm >= 0 {
                    libc::close(vm);
                }
                vm >= 0
            };
            libc::close(fd);
            if ok { Accel::Kvm } else { Accel::Tcg }
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        }
    }

    /// How much slower than this machine the guest runs, for the tests' waits (never
    /// their assertions): TCG emulates every instruction.
    pub fn time_scale(self) -> u32 {
        match self {
            Accel::Kvm => 2,
            Accel::Tcg => 10,
        }
    }
}

/// One boot.
pub struct Boot<'a> {
    pub vmlinuz: &'a Path,
    pub initrd: &'a Path,
    /// Shared read-write with the guest as 9p tag `job`.
    pub job_dir: &'a Path,
    pub accel: Accel,
    pub cpus: u32,
    pub mem_mib: u32,
    /// The console, as read.
    pub log: &'a Path,
    pub timeout: Duration,
}

/// How a boot ended.
pub enum Ended {
    /// qemu exited (the guest powered off, or its kernel panicked).
    Exited,
    /// The guest overran its time and was killed.
    TimedOut,
}

/// Boots the guest and passes each console line (escape sequences removed) to `line`
/// until qemu exits or the time is up.
pub fn boot(b: &Boot<'_>, mut line: impl FnMut(&str)) -> Result<Ended> {
    let mut cmd = Command::new("qemu-system-x86_64");
    cmd.args(["-machine", "q35", "-accel", b.accel.name(), "-cpu", "max"])
        .args(["-smp", &b.cpus.to_string(), "-m", &b.mem_mib.to_string()])
        .args(["-display", "none", "-vga", "none", "-monitor", "none"])
        .args(["-serial", "stdio", "-no-reboot", "-nic", "none"])
        .arg("-kernel")
        .arg(b.vmlinuz)
        .arg("-initrd")
        .arg(b.initrd)
        .args(["-append", "console=ttyS0 panic=-1 quiet loglevel=4"])
        .args([
            "-fsdev",
            "local,id=host,path=/,security_model=none,readonly=on,multidevs=remap",
            "-device",
            "virtio-9p-pci,fsdev=host,mount_tag=host",
        ])
        .arg("-fsdev")
        .arg(format!(
            "local,id=job,path={},security_model=none",
            b.job_dir.display()
        ))
        .args(["-device", "virtio-9p-pci,fsdev=job,mount_tag=job"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .context("starting qemu-system-x86_64 (Debian package qemu-system-x86)")?;
    let mut log = std::fs::File::create(b.log).with_context(|| format!("{}", b.log.display()))?;
    let (tx, rx) = mpsc::channel::<String>();
    let out = child.stdout.take().context("qemu stdout")?;
    let err = child.stderr.take().context("qemu stderr")?;
    for r in [
        Box::new(out) as Box<dyn std::io::Read + Send>,
        Box::new(err) as Box<dyn std::io::Read + Send>,
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for l in BufReader::new(r).split(b'\n').map_while(Result::ok) {
                if tx.send(printable(&l)).is_err() {
                    break;
                }
            }
        });
    }
    drop(tx);
    let end = Instant::now() + b.timeout;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) => {
                writeln!(log, "{l}")?;
                line(&l);
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                child.wait()?;
                return Ok(Ended::Exited);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                let _ = child.wait();
                return Ok(Ended::TimedOut);
            }
        }
    }
}

/// A console line without its escape sequences and control characters.
fn printable(raw: &[u8]) -> String {
    let s = String::from_utf8_lossy(raw);
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ parameters final-byte; other escapes: ESC and one character.
            if chars.peek() == Some(&'[') {
                chars.next();
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            } else {
                chars.next();
            }
        } else if !c.is_control() || c == '\t' {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::printable;

    #[test]
    fn console_lines_lose_escape_sequences_and_carriage_returns() {
        assert_eq!(printable(b"\x1bc\x1b[?7l\x1b[2JSeaBIOS\r"), "SeaBIOS");
        assert_eq!(
            printable(b"DRA-VM-STEP kernel 0 12\r"),
            "DRA-VM-STEP kernel 0 12"
        );
    }
}
