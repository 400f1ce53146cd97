//! The tree's habits, checked by `cargo xtask test`: rustfmt's layout (`rustfmt.toml`,
//! `cargo fmt --check`), Rust lines of at most [`MAX_COLUMNS`] columns (rustfmt
//! leaves long string literals and comments alone, so they are counted here), and no
//! reference to a document outside the repository ([`check_references`]).

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
    let files = tree_files(root, &["*.rs"])?;
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

/// The files git tracks (or would track) under `root` that match `pathspecs` (all files
/// when empty): the tree without `target/`, `.git/` or anything else ignored.
fn tree_files(root: &Path, pathspecs: &[&str]) -> Result<String> {
    netlab::output(
        Command::new("git")
            .args([
                "ls-files",
                "--cached",
                "--others",
                "--exclude-standard",
                "--",
            ])
            .args(pathspecs)
            .current_dir(root),
    )
}

/// What `line` cites that does not resolve in the repository, if anything: the external
/// design file or one of its sections (the tree cites docs/architecture.md §N instead),
/// one of the outside source documents by its number (the tree names them in words), or
/// a tracker issue by its number. Prose such as "an issue" or a random seed passes. The
/// patterns are built from pieces, so this file does not flag itself.
pub fn foreign_reference(line: &str) -> Option<&'static str> {
    let design = ["DES", "IGN"].concat();
    if line.contains(&format!("{design}.md")) {
        return Some("the external design file");
    }
    if line.contains(&format!("{design} §")) {
        return Some("a section of the external design file");
    }
    if numbered(line, &["iss", "ue"].concat(), "") {
        return Some("a tracker issue");
    }
    if numbered(line, &["se", "ed"].concat(), "00") {
        return Some("an outside source document by its number");
    }
    None
}

/// `line` has `word` (ASCII, any case, at the start of a word; plural too) followed by
/// one space, an optional `#`, `prefix` and a digit: "word 12", "words #3".
fn numbered(line: &str, word: &str, prefix: &str) -> bool {
    let b = line.as_bytes();
    let w = word.as_bytes();
    (0..b.len()).any(|i| {
        let Some(head) = b.get(i..i + w.len()) else {
            return false;
        };
        if !head.eq_ignore_ascii_case(w) || (i > 0 && b[i - 1].is_ascii_alphanumeric()) {
            return false;
        }
        let mut rest = &b[i + w.len()..];
        if let Some(r) = rest.strip_prefix(b"s") {
            rest = r;
        }
        let Some(r) = rest.strip_prefix(b" ") else {
            return false;
        };
        let r = r.strip_prefix(b"#").unwrap_or(r);
        r.strip_prefix(prefix.as_bytes())
            .and_then(|r| r.first())
            .is_some_and(u8::is_ascii_digit)
    })
}

/// No file of the tree (text files git tracks or would track) cites a document outside
/// the repository ([`foreign_reference`]); the offenders are listed as `path:line: what`.
pub fn check_references(root: &Path) -> Result<()> {
    let files = tree_files(root, &[])?;
    let mut bad = Vec::new();
    for f in files.lines() {
        let Ok(text) = std::fs::read_to_string(root.join(f)) else {
            continue; // deleted in the work tree, or not text
        };
        for (n, line) in text.lines().enumerate() {
            if let Some(what) = foreign_reference(line) {
                bad.push(format!("{f}:{}: {what}", n + 1));
            }
        }
    }
    if !bad.is_empty() {
        bail!(
            "{} reference(s) to documents outside the repository (cite docs/architecture.md \
             §N or a doc under docs/, name an outside source in words):\n  {}",
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

    #[test]
    fn flags_references_outside_the_tree_and_nothing_else() {
        let design = ["DES", "IGN"].concat();
        let issue = ["iss", "ue"].concat();
        let seed = ["se", "ed"].concat();
        for line in [
            format!("see {design}.md §3"),
            format!("// {design} §9: each host"),
            format!("//! Tests ({issue} 14 items 1–3)"),
            format!("{}ssue #7", "I"),
            format!("the {issue}s 11 and 12"),
            format!("# Overloaded elements ({seed} 000)"),
        ] {
            assert!(foreign_reference(&line).is_some(), "{line}");
        }
        for line in [
            "docs/architecture.md §5",
            "an issue with the clock",
            "the issue's goal",
            "tissue 5",
            "random seed 1, 100,000 signals",
            "seed002_cv.png",
            "DESIGNS 4",
            "",
        ] {
            assert_eq!(foreign_reference(line), None, "{line}");
        }
    }

    #[test]
    fn the_tree_cites_nothing_outside_it() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("workspace");
        check_references(root).unwrap();
    }
}
