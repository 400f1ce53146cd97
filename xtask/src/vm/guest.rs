//! What a guest boots with: an initramfs (busybox, the modules that mount the host's
//! filesystem, xtask/vm/init) and a job directory shared read-write over 9p (the job
//! script, one log per step).

use std::{
    fmt::Write as _,
    io::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context, Result, bail};
use std::os::unix::fs::PermissionsExt as _;

use super::kernel::Unpacked;

/// The guest's init (busybox sh).
const INIT: &str = include_str!("../../vm/init");

/// What the initramfs loads: 9p over virtio for the host's filesystem, overlayfs for
/// the writable layer on top of it (each with the modules it needs).
const BOOT_MODULES: [&str; 4] = ["virtio_pci", "9pnet_virtio", "9p", "overlay"];

/// Modules the tests use, loaded before the first step (a kernel without one says so
/// in the console and the step that needs it fails): veth pairs, TC (clsact and the
/// BPF classifier, for TC egress without TCX), SCTP.
pub const TEST_MODULES: [&str; 4] = ["veth", "sch_ingress", "cls_bpf", "sctp"];

/// Builds `out` (a newc cpio archive) for `kernel`.
pub fn initramfs(kernel: &Unpacked, out: &Path) -> Result<()> {
    let stage = out.with_extension("d");
    let _ = std::fs::remove_dir_all(&stage);
    for d in ["bin", "modules", "proc", "sys", "dev"] {
        std::fs::create_dir_all(stage.join(d))?;
    }
    std::fs::copy("/bin/busybox", stage.join("bin/busybox"))
        .context("/bin/busybox (Debian package busybox-static)")?;
    let mut order = String::new();
    let mut loaded = Vec::new();
    for m in BOOT_MODULES {
        let closure = kernel
            .module_closure(m)?
            .with_context(|| format!("{}: no module {m}", kernel.package))?;
        for rel in closure {
            if loaded.contains(&rel) {
                continue;
            }
            let base = rel.rsplit('/').next().unwrap_or(&rel);
            let plain = base.split(".ko").next().unwrap_or(base).to_owned() + ".ko";
            unpack_module(
                &kernel.modules.join(&rel),
                &stage.join("modules").join(&plain),
            )?;
            writeln!(order, "{plain}")?;
            loaded.push(rel);
        }
    }
    std::fs::write(stage.join("modules/order"), order)?;
    let init = stage.join("init");
    std::fs::write(&init, INIT)?;
    std::fs::set_permissions(&init, std::fs::Permissions::from_mode(0o755))?;
    let list = netlab::output(Command::new("find").arg(".").current_dir(&stage))?;
    let archive = std::fs::File::create(out)?;
    let mut cpio = Command::new("busybox")
        .args(["cpio", "-o", "-H", "newc"])
        .current_dir(&stage)
        .stdin(Stdio::piped())
        .stdout(archive)
        .stderr(Stdio::null())
        .spawn()
        .context("busybox cpio")?;
    cpio.stdin
        .take()
        .context("cpio stdin")?
        .write_all(list.as_bytes())?;
    if !cpio.wait()?.success() {
        bail!("busybox cpio failed for {}", out.display());
    }
    std::fs::remove_dir_all(&stage)?;
    Ok(())
}

/// Copies module `src` to `dst`, decompressed (busybox's insmod takes plain `.ko`).
fn unpack_module(src: &Path, dst: &Path) -> Result<()> {
    let name = src.to_string_lossy();
    let tool = if name.ends_with(".xz") {
        Some("xz")
    } else if name.ends_with(".zst") {
        Some("zstd")
    } else {
        None
    };
    match tool {
        None => {
            std::fs::copy(src, dst).with_context(|| format!("{}", src.display()))?;
        }
        Some(t) => {
            let out = std::fs::File::create(dst)?;
            let ok = Command::new(t)
                .args(["-d", "-c"])
                .arg(src)
                .stdout(out)
                .status()
                .with_context(|| format!("{t} -d {}", src.display()))?
                .success();
            if !ok {
                bail!("{t} -d {} failed", src.display());
            }
        }
    }
    Ok(())
}

/// One step of a job: its name and command line (run from the privileged tests' crate
/// directory).
pub struct JobStep {
    pub name: String,
    pub argv: Vec<PathBuf>,
}

/// The guest's environment for a job.
pub struct JobEnv<'a> {
    pub kernel: &'a Unpacked,
    pub workspace: &'a Path,
    /// Variables exported to every step.
    pub vars: Vec<(&'static str, String)>,
    /// Bound on each step.
    pub step_timeout_s: u64,
}

/// Writes `dir`/job.sh: the guest's mounts, modules, environment, then each step with
/// its output in `dir/<step>.log`, announced on the console as `DRA-VM-STEP <name>
/// <exit status> <seconds>`.
pub fn write_job(dir: &Path, env: &JobEnv<'_>, steps: &[JobStep]) -> Result<()> {
    let q = |p: &Path| shell_quote(&p.to_string_lossy());
    let mut s = String::new();
    writeln!(
        s,
        "# Written by cargo xtask test (xtask/src/vm/guest.rs); run by xtask/vm/init."
    )?;
    writeln!(
        s,
        "export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    )?;
    writeln!(s, "export HOME=/root LANG=C.UTF-8")?;
    s.push_str(
        "mount -t bpf bpf /sys/fs/bpf\n\
         mount -t tmpfs tmpfs /run\n",
    );
    // The guest's /tmp is its own tmpfs: a workspace under this machine's /tmp is
    // carried over it (bound to /run first, then back to its own path).
    if env.workspace.starts_with("/tmp") {
        let ws = q(env.workspace);
        writeln!(
            s,
            "mkdir -p /run/dra-workspace\nmount --bind {ws} /run/dra-workspace\n\
             mount -t tmpfs tmpfs /tmp\nmkdir -p {ws}\nmount --bind /run/dra-workspace {ws}"
        )?;
    } else {
        s.push_str("mount -t tmpfs tmpfs /tmp\n");
    }
    s.push_str(
        "mkdir -p /run/netns /dev/pts /dev/shm\n\
         mount -t devpts devpts /dev/pts\n\
         mount -t tmpfs tmpfs /dev/shm\n\
         ip link set lo up\n",
    );
    let rel = &env.kernel.release;
    writeln!(s, "mkdir -p /lib/modules/{rel}")?;
    writeln!(
        s,
        "mount --bind {} /lib/modules/{rel}",
        q(&env.kernel.modules)
    )?;
    for m in TEST_MODULES {
        writeln!(
            s,
            "modprobe {m} 2>/dev/null || echo \"DRA-VM-NOTE no module {m}\""
        )?;
    }
    for (k, v) in &env.vars {
        writeln!(s, "export {k}={}", shell_quote(v))?;
    }
    writeln!(s, "cd {}", q(&env.workspace.join("tests")))?;
    writeln!(
        s,
        "step() {{\n    name=$1; shift\n    t0=$(date +%s)\n    \
         timeout -k 10 {} \"$@\" > /dra-job/$name.log 2>&1\n    rc=$?\n    \
         echo \"DRA-VM-STEP $name $rc $(( $(date +%s) - t0 ))\"\n}}",
        env.step_timeout_s
    )?;
    writeln!(s, "echo \"DRA-VM-KERNEL $(uname -r)\"")?;
    for st in steps {
        let argv: Vec<String> = st.argv.iter().map(|a| q(a)).collect();
        writeln!(s, "step {} {}", st.name, argv.join(" "))?;
    }
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("job.sh"), s)?;
    Ok(())
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}
