//! Kernels of the matrix from Debian packages: resolved and downloaded with a private
//! apt state (target/vm/apt; the machine's sources are left alone), unpacked with
//! `dpkg -x`, their modules indexed with `depmod` so that `modprobe` works in the guest.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result, bail};

use super::matrix::{APT_SOURCES, Source};

/// An unpacked kernel package.
pub struct Unpacked {
    /// The package, e.g. `linux-image-6.1.0-57-amd64`.
    pub package: String,
    /// Its release (`uname -r`), e.g. `6.1.0-57-amd64`.
    pub release: String,
    pub vmlinuz: PathBuf,
    /// Its `lib/modules/<release>` (indexed by depmod).
    pub modules: PathBuf,
}

impl Unpacked {
    /// Module `name` (without `.ko`) and the modules it needs, those first, as paths
    /// relative to [`Unpacked::modules`]: empty if it is built into the kernel,
    /// `Ok(None)` if the kernel has no such module.
    pub fn module_closure(&self, name: &str) -> Result<Option<Vec<String>>> {
        let builtin =
            std::fs::read_to_string(self.modules.join("modules.builtin")).unwrap_or_default();
        let want = name.replace('-', "_");
        if builtin
            .lines()
            .any(|l| module_name(l).as_deref() == Some(&want))
        {
            return Ok(Some(Vec::new()));
        }
        let dep = self.modules.join("modules.dep");
        let text =
            std::fs::read_to_string(&dep).with_context(|| format!("reading {}", dep.display()))?;
        let mut deps: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for line in text.lines() {
            if let Some((m, d)) = line.split_once(':') {
                deps.insert(m, d.split_whitespace().collect());
            }
        }
        let Some(root) = deps
            .keys()
            .find(|p| module_name(p).as_deref() == Some(&want))
        else {
            return Ok(None);
        };
        let mut order = Vec::new();
        let mut seen = BTreeSet::new();
        fn visit<'a>(
            m: &'a str,
            deps: &BTreeMap<&'a str, Vec<&'a str>>,
            seen: &mut BTreeSet<&'a str>,
            order: &mut Vec<String>,
        ) {
            if !seen.insert(m) {
                return;
            }
            for d in deps.get(m).into_iter().flatten() {
                visit(d, deps, seen, order);
            }
            order.push(m.to_owned());
        }
        visit(root, &deps, &mut seen, &mut order);
        Ok(Some(order))
    }
}

/// The module a `modules.dep` or `modules.builtin` path names ("kernel/fs/9p/9p.ko.xz"
/// → "9p"; dashes as underscores, as the kernel names modules).
fn module_name(path: &str) -> Option<String> {
    let base = path.rsplit('/').next()?;
    base.split(".ko").next().map(|b| b.replace('-', "_"))
}

/// The private apt state's directory and the options that point apt at it.
fn apt_options(dir: &Path) -> Vec<String> {
    [
        ("Dir::Etc::SourceList", dir.join("sources.list")),
        ("Dir::Etc::SourceParts", dir.join("sources.list.d")),
        ("Dir::State::Lists", dir.join("lists")),
        ("Dir::Cache", dir.join("cache")),
    ]
    .into_iter()
    .flat_map(|(k, v)| ["-o".to_owned(), format!("{k}={}", v.display())])
    .collect()
}

fn apt_update(dir: &Path) -> Result<()> {
    for d in ["sources.list.d", "lists/partial", "cache/archives/partial"] {
        std::fs::create_dir_all(dir.join(d))?;
    }
    std::fs::write(dir.join("sources.list"), APT_SOURCES)?;
    netlab::output(
        Command::new("apt-get")
            .args(apt_options(dir))
            .args(["update", "-qq"]),
    )
    .context("apt-get update of the kernel matrix's sources")?;
    Ok(())
}

/// The newest package `prefix<N>suffix` (N a number, or dotted numbers) the private
/// sources list.
fn newest(dir: &Path, prefix: &str, suffix: &str) -> Result<String> {
    let names = netlab::output(
        Command::new("apt-cache")
            .args(apt_options(dir))
            .args(["pkgnames", prefix]),
    )?;
    let number = |n: &str| -> Option<Vec<u32>> {
        let mid = n.strip_prefix(prefix)?.strip_suffix(suffix)?;
        mid.split('.').map(|p| p.parse().ok()).collect()
    };
    names
        .lines()
        .filter_map(|n| Some((number(n)?, n)))
        .max()
        .map(|(_, n)| n.to_owned())
        .with_context(|| format!("no package {prefix}N{suffix} in the kernel matrix's sources"))
}

/// The kernel of `source` under `vm_dir` (target/vm), downloaded and unpacked unless an
/// earlier run did. `Ok(None)` for [`Source::Host`].
pub fn ensure(vm_dir: &Path, name: &str, source: &Source) -> Result<Option<Unpacked>> {
    let Source::Deb { prefix, suffix } = source else {
        return Ok(None);
    };
    let kernels = vm_dir.join("kernels");
    // An earlier run's package for this kernel: kept (a new ABI number on the mirror does
    // not make every run download again).
    let ready = kernels.join(format!("{name}.package"));
    let package = match std::fs::read_to_string(&ready) {
        Ok(p) if kernels.join(p.trim()).join(".unpacked").exists() => p.trim().to_owned(),
        _ => {
            let apt = vm_dir.join("apt");
            if !apt.join("lists").exists() {
                eprintln!("setup: fetching kernel package lists (Debian 11 and 12) for the matrix");
                apt_update(&apt)?;
            }
            let package = newest(&apt, prefix, suffix)?;
            eprintln!("setup: downloading {package} (apt, for the kernel matrix {name})");
            let dest = kernels.join(&package);
            let _ = std::fs::remove_dir_all(&dest);
            std::fs::create_dir_all(&dest)?;
            netlab::output(
                Command::new("apt-get")
                    .args(apt_options(&apt))
                    .args(["download", "-qq", &package])
                    .current_dir(&kernels),
            )
            .with_context(|| format!("downloading {package}"))?;
            let deb = std::fs::read_dir(&kernels)?
                .flatten()
                .map(|e| e.path())
                .find(|p| {
                    p.file_name().and_then(|f| f.to_str()).is_some_and(|f| {
                        f.starts_with(&format!("{package}_")) && f.ends_with(".deb")
                    })
                })
                .with_context(|| format!("{package}: apt-get download left no .deb"))?;
            netlab::output(Command::new("dpkg").arg("-x").arg(&deb).arg(&dest))?;
            std::fs::remove_file(&deb)?;
            let release = release_of(&dest)?;
            netlab::output(Command::new("depmod").arg("-b").arg(&dest).arg(&release))
                .with_context(|| format!("depmod for {package}"))?;
            std::fs::write(dest.join(".unpacked"), "")?;
            std::fs::write(&ready, &package)?;
            package
        }
    };
    let dest = kernels.join(&package);
    let release = release_of(&dest)?;
    Ok(Some(Unpacked {
        vmlinuz: dest.join(format!("boot/vmlinuz-{release}")),
        modules: dest.join(format!("lib/modules/{release}")),
        package,
        release,
    }))
}

/// The one release under `dest`/lib/modules.
fn release_of(dest: &Path) -> Result<String> {
    let mut releases: Vec<String> = std::fs::read_dir(dest.join("lib/modules"))
        .with_context(|| format!("{}: no lib/modules", dest.display()))?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    match releases.len() {
        1 => Ok(releases.remove(0)),
        n => bail!("{}: {n} kernel releases under lib/modules", dest.display()),
    }
}
