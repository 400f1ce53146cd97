//! `cargo xtask package`: the Debian package (dpkg-deb) with `dra`, `dra-loadgen`, the
//! systemd unit, the default config (a conffile), man pages generated from clap, the
//! operations docs and the monitoring kit (Prometheus rules, their tests, a Grafana
//! dashboard). docs/operations.md describes what it installs.
//!
//! The test (`cargo xtask test`) packages the debug build (no release build in the test
//! run), extracts the .deb into a scratch root with `dpkg -x`, checks the unit with
//! `systemd-analyze verify`, runs the extracted `dra --version` and `check-config`, and
//! the promtool unit tests of the extracted monitoring kit.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result, bail, ensure};

use netlab::output;

use crate::{cargo, monitoring, step};

/// What goes where (paths relative to the package root); binaries come from the build.
const UNIT: (&str, &str) = ("packaging/dra.service", "lib/systemd/system/dra.service");
const CONFIG: (&str, &str) = ("config/dra.toml", "etc/dra/dra.toml");
const DOCS: &[&str] = &["README.md", "docs/operations.md", "docs/config.md"];
const BINS: &[&str] = &["dra", "dra-loadgen"];

/// Which cargo profile the binaries come from.
#[derive(Clone, Copy)]
pub enum Profile {
    Release,
    /// Only for the test: the debug build is there already.
    Debug,
}

impl Profile {
    fn dir(self) -> &'static str {
        match self {
            Profile::Release => "release",
            Profile::Debug => "debug",
        }
    }
}

/// True when `bin` embeds an eBPF ELF object (e_machine 247, EM_BPF): a build with
/// `AYA_BUILD_SKIP=1` embeds an empty one and could not load the fast path.
fn embeds_bpf_object(bin: &[u8]) -> bool {
    const MAGIC: &[u8] = b"\x7fELF\x02\x01\x01";
    bin.windows(MAGIC.len())
        .enumerate()
        .skip(1)
        .any(|(i, w)| w == MAGIC && bin.get(i + 18..i + 20) == Some(&247u16.to_le_bytes()[..]))
}

/// Builds the binaries of `profile` (a no-op when they are up to date).
pub fn build(profile: Profile) -> Result<()> {
    if std::env::var_os("AYA_BUILD_SKIP").is_some_and(|v| v == "1" || v == "true") {
        bail!("AYA_BUILD_SKIP is set: the package needs the eBPF programs built in");
    }
    let mut c = cargo();
    c.args(["build", "-p", "dra-userspace", "-p", "dra-tools"]);
    for b in BINS {
        c.args(["--bin", b]);
    }
    if let Profile::Release = profile {
        c.arg("--release");
    }
    step(
        &format!("build dra, dra-loadgen ({})", profile.dir()),
        &mut c,
    )
}

fn copy(from: &Path, to: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(d) = to.parent() {
        std::fs::create_dir_all(d).with_context(|| d.display().to_string())?;
    }
    std::fs::copy(from, to)
        .with_context(|| format!("copy {} to {}", from.display(), to.display()))?;
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(mode))?;
    Ok(())
}

fn control_file(version: &str, arch: &str, installed_kib: u64) -> String {
    format!(
        "Package: dra\n\
         Version: {version}\n\
         Architecture: {arch}\n\
         Maintainer: dra-xdp developers <dra@example.invalid>\n\
         Installed-Size: {installed_kib}\n\
         Depends: libc6 (>= 2.34), libgcc-s1\n\
         Recommends: redis-server\n\
         Suggests: prometheus\n\
         Section: net\n\
         Priority: optional\n\
         Description: Diameter Routing Agent with an XDP rate-limiting fast path\n \
         dra routes and relays Diameter (RFC 6733) between gateways and PCRF/OCS\n \
         servers, limits request rates per peer and message class in an XDP program\n \
         (or in the agent without one), throttles dynamically from the database CPU\n \
         and publishes Prometheus metrics. dra-loadgen simulates gateways and servers.\n"
    )
}

fn dir_size(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let m = e.metadata()?;
        total += if m.is_dir() {
            dir_size(&e.path())?
        } else {
            m.len()
        };
    }
    Ok(total)
}

/// Stages and builds the .deb from the already built binaries of `profile`; returns
/// its path (`out_dir/dra_<version>_<arch>.deb`).
pub fn package(root: &Path, profile: Profile, out_dir: &Path) -> Result<PathBuf> {
    let version = env!("CARGO_PKG_VERSION");
    let arch = output(Command::new("dpkg").arg("--print-architecture"))?
        .trim()
        .to_owned();
    let bins = root.join("target").join(profile.dir());
    let stage = out_dir.join(format!("dra_{version}_{arch}"));
    if stage.exists() {
        std::fs::remove_dir_all(&stage).with_context(|| stage.display().to_string())?;
    }
    let dra = bins.join("dra");
    let bytes = std::fs::read(&dra).with_context(|| dra.display().to_string())?;
    ensure!(
        embeds_bpf_object(&bytes),
        "{} embeds no eBPF object (built with AYA_BUILD_SKIP=1?): rebuild without it",
        dra.display()
    );
    for b in BINS {
        copy(&bins.join(b), &stage.join("usr/bin").join(b), 0o755)?;
    }
    copy(&root.join(UNIT.0), &stage.join(UNIT.1), 0o644)?;
    copy(&root.join(CONFIG.0), &stage.join(CONFIG.1), 0o644)?;
    let cfg = std::fs::read_to_string(root.join(CONFIG.0))?;
    std::fs::write(
        stage.join(CONFIG.1),
        format!(
            "# /etc/dra/dra.toml: installed by the dra package from {}: the seed lab's\n\
             # addresses (198.18.0.0/15). Set the listeners, peers, limits and\n\
             # [fast_path] interface of this host, `dra check-config` it, then\n\
             # `systemctl enable --now dra` (/usr/share/doc/dra/operations.md).\n#\n{cfg}",
            CONFIG.0
        ),
    )?;
    for f in monitoring::FILES {
        copy(
            &root.join(monitoring::MONITORING_DIR).join(f),
            &stage.join(monitoring::INSTALL_DIR).join(f),
            0o644,
        )?;
    }
    let doc = stage.join("usr/share/doc/dra");
    for d in DOCS {
        let name = Path::new(d).file_name().expect("a file name");
        copy(&root.join(d), &doc.join(name), 0o644)?;
    }
    std::fs::write(
        doc.join("copyright"),
        format!(
            "dra-xdp {version}\nLicense: MIT OR Apache-2.0 (see the source repository)\n\
             The eBPF programs embedded in /usr/bin/dra are licensed GPL-2.0 OR MIT.\n"
        ),
    )?;
    // Man pages from clap (`dra man`, hidden), compressed as Debian policy asks.
    let man = stage.join("usr/share/man/man1");
    output(Command::new(&dra).arg("man").arg(&man))?;
    for e in std::fs::read_dir(&man)? {
        let p = e?.path();
        output(Command::new("gzip").args(["-9n", "-f"]).arg(&p))?;
    }
    let debian = stage.join("DEBIAN");
    std::fs::create_dir_all(&debian)?;
    std::fs::write(debian.join("conffiles"), format!("/{}\n", CONFIG.1))?;
    let kib = dir_size(&stage)?.div_ceil(1024);
    std::fs::write(debian.join("control"), control_file(version, &arch, kib))?;
    let deb = out_dir.join(format!("dra_{version}_{arch}.deb"));
    step(
        "dpkg-deb --build",
        Command::new("dpkg-deb")
            .args(["--build", "--root-owner-group", "-Zxz", "-z1"])
            .arg(&stage)
            .arg(&deb),
    )?;
    std::fs::remove_dir_all(&stage)?;
    Ok(deb)
}

/// `cargo xtask package [--check]`: release build, then
/// `target/package/dra_<version>_<arch>.deb`; `--check` then runs the package test's
/// checks on it.
pub fn cmd(root: &Path, args: &[String]) -> Result<()> {
    let check_it = match args {
        [] => false,
        [a] if a == "--check" => true,
        _ => bail!("usage: cargo xtask package [--check]"),
    };
    build(Profile::Release)?;
    let out = root.join("target/package");
    std::fs::create_dir_all(&out)?;
    let deb = package(root, Profile::Release, &out)?;
    eprintln!("xtask: wrote {}", deb.display());
    if check_it {
        let work = out.join("check");
        check(&deb, &work)?;
        std::fs::remove_dir_all(&work)?;
    }
    Ok(())
}

/// The package test of `cargo xtask test`, on the debug build (built there anyway).
pub fn test(root: &Path) -> Result<()> {
    build(Profile::Debug)?;
    let out = root.join("target/package-test");
    if out.exists() {
        std::fs::remove_dir_all(&out)?;
    }
    std::fs::create_dir_all(&out)?;
    let deb = package(root, Profile::Debug, &out)?;
    check(&deb, &out.join("check"))?;
    std::fs::remove_dir_all(&out)?;
    Ok(())
}

/// Extracts `deb` into a scratch root under `work` (`dpkg -x`) and checks it: every
/// file, the config a conffile that passes `check-config`, the unit passes
/// `systemd-analyze verify`, the extracted `dra --version` prints the version.
fn check(deb: &Path, work: &Path) -> Result<()> {
    if work.exists() {
        std::fs::remove_dir_all(work)?;
    }
    std::fs::create_dir_all(work)?;
    let scratch = work.join("root");
    output(Command::new("dpkg").arg("-x").arg(deb).arg(&scratch))?;
    for f in [
        "usr/bin/dra",
        "usr/bin/dra-loadgen",
        UNIT.1,
        CONFIG.1,
        "usr/share/man/man1/dra.1.gz",
        "usr/share/man/man1/dra-run.1.gz",
        "usr/share/doc/dra/operations.md",
        "usr/share/dra/monitoring/dra-alerts.yml",
        "usr/share/dra/monitoring/dra-rules.yml",
        "usr/share/dra/monitoring/dra-dashboard.json",
        "usr/share/dra/monitoring/tests/dra-alerts.test.yml",
        "usr/share/dra/monitoring/tests/dra-rules.test.yml",
    ] {
        ensure!(scratch.join(f).is_file(), "the package has no {f}");
    }
    let tested = check_monitoring(&scratch.join(monitoring::INSTALL_DIR))?;
    let conffiles = output(
        Command::new("dpkg-deb")
            .arg("--info")
            .arg(deb)
            .arg("conffiles"),
    )?;
    ensure!(
        conffiles.trim() == format!("/{}", CONFIG.1),
        "conffiles: {conffiles:?}"
    );
    let version = output(Command::new(scratch.join("usr/bin/dra")).arg("--version"))?;
    ensure!(
        version.trim() == format!("dra {}", env!("CARGO_PKG_VERSION")),
        "dra --version printed {version:?}"
    );
    let checked = output(
        Command::new(scratch.join("usr/bin/dra"))
            .arg("check-config")
            .arg(scratch.join(CONFIG.1)),
    )?;
    ensure!(
        checked.starts_with("ok\n"),
        "the packaged config: {checked}"
    );
    output(Command::new(scratch.join("usr/bin/dra-loadgen")).arg("--version"))?;
    verify_unit(work, &scratch)?;
    eprintln!(
        "xtask: package ok: {} extracted into a scratch root, unit verified, monitoring kit \
         {}, {}",
        deb.display(),
        if tested { "tested" } else { "not tested" },
        version.trim()
    );
    Ok(())
}

/// The installed monitoring kit works where it lands: its unit tests pass with promtool
/// from the installed directory (their rule_files are relative to it); skipped, said
/// so, where promtool is not installed. Returns whether they ran.
fn check_monitoring(dir: &Path) -> Result<bool> {
    if Command::new("promtool").arg("--version").output().is_err() {
        eprintln!("xtask: promtool not installed: the packaged rules not tested");
        return Ok(false);
    }
    output(
        Command::new("promtool")
            .args(["test", "rules"])
            .args(["tests/dra-alerts.test.yml", "tests/dra-rules.test.yml"])
            .current_dir(dir),
    )
    .context("promtool test rules in the extracted /usr/share/dra/monitoring")?;
    Ok(true)
}

/// `systemd-analyze verify` of the extracted unit (skipped, said so, where systemd is
/// not installed). `--root` would need the whole of systemd's units in the scratch root
/// (sysinit.target, ...), so the unit is verified against the host's units instead,
/// with its `/usr/bin/` commands pointed at the extracted binaries and `man` at the
/// extracted man pages (verify checks that `Documentation=man:` pages exist). Any
/// message fails the test, not only a non-zero exit.
fn verify_unit(work: &Path, scratch: &Path) -> Result<()> {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("xtask: systemd-analyze not installed: unit not verified");
        return Ok(());
    }
    let unit = std::fs::read_to_string(scratch.join(UNIT.1))?;
    let bin = scratch.join("usr/bin");
    let dir = work.join("verify");
    std::fs::create_dir_all(&dir)?;
    let copy = dir.join("dra.service");
    std::fs::write(
        &copy,
        unit.replace("/usr/bin/", &format!("{}/", bin.display())),
    )?;
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&copy)
        .env("MANPATH", scratch.join("usr/share/man"))
        .output()
        .context("systemd-analyze")?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        out.status.success() && err.trim().is_empty(),
        "systemd-analyze verify ({}):\n{err}",
        out.status
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_an_embedded_bpf_object_only() {
        let mut host = b"\x7fELF\x02\x01\x01".to_vec();
        host.resize(64, 0);
        host[18] = 62; // EM_X86_64: the binary itself, not an eBPF object
        assert!(!embeds_bpf_object(&host));
        let mut bpf = b"\x7fELF\x02\x01\x01".to_vec();
        bpf.resize(64, 0);
        bpf[18] = 247;
        host.extend(&bpf);
        assert!(embeds_bpf_object(&host));
        host.truncate(64 + 19);
        assert!(!embeds_bpf_object(&host));
    }
}
