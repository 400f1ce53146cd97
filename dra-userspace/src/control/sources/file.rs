//! `file` source: the last number written to a file.

use std::path::PathBuf;

use super::{CpuSource, SourceError, parse_number};

/// Reads the CPU percentage from a file written by another tool (a cron job, an exporter
/// sidecar). The value is the **last** whitespace-separated token of the file, so the
/// writer may append lines or rewrite the file; a trailing `%` is allowed (`"62.5%"`).
/// A missing file, an empty file, or a last token that is not a finite number is an
/// error. The value is returned as is (no delta): every call returns `Some`.
#[derive(Debug, Clone)]
pub struct FileCpu {
    path: PathBuf,
}

impl FileCpu {
    /// A source reading `path` on every sample.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// Parses the file contents as [`CpuSource::sample`] does (public for tests;
    /// `dra check-config` does not read the file).
    pub fn parse(context: &str, text: &str) -> Result<f64, SourceError> {
        let token = text
            .split_whitespace()
            .next_back()
            .ok_or_else(|| SourceError::malformed(context, "file contains no value"))?;
        parse_number(context, token.strip_suffix('%').unwrap_or(token))
    }
}

impl CpuSource for FileCpu {
    fn sample(&mut self) -> Result<Option<f64>, SourceError> {
        let context = self.describe();
        let text = std::fs::read_to_string(&self.path).map_err(|e| SourceError::io(&context, e))?;
        Self::parse(&context, &text).map(Some)
    }

    fn describe(&self) -> String {
        format!("file {}", self.path.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_token_wins_and_percent_is_allowed() {
        assert_eq!(FileCpu::parse("t", "42").unwrap(), 42.0);
        assert_eq!(FileCpu::parse("t", "  17.5%\n").unwrap(), 17.5);
        assert_eq!(FileCpu::parse("t", "10\n20\n 30.25 \n\n").unwrap(), 30.25);
    }

    #[test]
    fn garbage_and_empty_are_errors() {
        let err = |text| FileCpu::parse("t", text).unwrap_err();
        for text in ["", " \n\t"] {
            assert!(
                matches!(err(text), SourceError::Malformed { .. }),
                "{text:?}"
            );
        }
        for text in ["12 high", "%"] {
            assert!(matches!(err(text), SourceError::Number { .. }), "{text:?}");
        }
        for text in ["NaN", "inf%"] {
            assert!(
                matches!(err(text), SourceError::NotFinite { .. }),
                "{text:?}"
            );
        }
    }
}
