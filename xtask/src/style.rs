//! The tree's habits, checked by `cargo xtask test`: rustfmt's layout (`rustfmt.toml`,
//! `cargo fmt --check`) and Rust lines of at most [`MAX_COLUMNS`] columns (rustfmt
//! leaves long string literals and comments alone, so they are counted here).

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The widest a line of Rust may be (rustfmt.toml's `max_width`).
pub const MAX_COLUMNS: usize = 100;

/// rustfmt for the userspace toolchain: the default rustup profile has it, a minimal one
/// does not (then it is added, and said why).
pub fn ensure_rustfmt() -> Result<()> {
    let have = Command::new("cargo")
        .args(["fmt", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if have {
        return Ok(());
    }
    eprintln!("setup: adding rustfmt (rustup): cargo xtask test checks the layout");
    let st = Command::new("rustup")
        .args(["component", "add", "rustfmt"])
        .status()
        .context("rustup component add rustfmt")?;
    if !st.success() {
        bail!("setup: run `rustup component add rustfmt` by hand");
    }
    Ok(())
}

/// Lines of `text` wider than `max` columns (characters, not bytes): (line number, width).
pub fn long_lines(text: &str, max: usize) -> Vec<(usize, usize)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.chars().count()))
        .filter(|&(_, w)| w > max)
        .collect()
}

/// Every Rust file git tracks (or would track) under `root` has lines of at most
/// [`MAX_COLUMNS`] columns; the offenders are listed as `path:line: N columns`.
pub fn check_line_width(root: &Path) -> Result<()> {
    let files = netlab::output(
        Command::new("git")
            .args([
                "ls-files",
                "--cached",
                "--others",
                "--exclude-standard",
                "*.rs",
            ])
            .current_dir(root),
    )?;
    let mut bad = Vec::new();
    for f in files.lines() {
        let path = root.join(f);
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue; // deleted in the work tree
        };
        for (n, w) in long_lines(&text, MAX_COLUMNS) {
            bad.push(format!("{f}:{n}: {w} columns"));
        }
    }
    if !bad.is_empty() {
        bail!(
            "{} line(s) of Rust wider than {MAX_COLUMNS} columns:\n  {}",
            bad.len(),
            bad.join("\n  ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_characters_not_bytes_and_reports_line_numbers() {
        let wide = "x".repeat(101);
        let text = format!("ok\n{}\n{wide}\n", "é".repeat(100));
        assert_eq!(long_lines(&text, 100), vec![(3, 101)]);
    }
}
