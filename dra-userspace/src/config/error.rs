//! Config errors: every problem found, each with `file:line:column`.

use std::fmt;
use std::ops::Range;

/// One problem in a config file.
///
/// `line` and `column` are 1-based; `column` counts characters (not bytes). Both are 0
/// for problems that have no position (the file could not be read).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// File name as given to [`super::load`] / [`super::parse`].
    pub file: String,
    /// 1-based line of the offending key or value (0: whole file).
    pub line: usize,
    /// 1-based column, in characters (0: whole file).
    pub column: usize,
    /// What is wrong, specific enough to fix it.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file, self.message)
        } else {
            write!(
                f,
                "{}:{}:{}: {}",
                self.file, self.line, self.column, self.message
            )
        }
    }
}

/// Every problem found in a config file, sorted by position.
///
/// `Display` prints one `FILE:LINE:COLUMN: reason` line per error, each ending with a
/// newline. A TOML syntax error stops parsing, so it comes alone; everything else
/// (unknown keys, types, values, references) is collected across the whole file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigErrors {
    /// The errors, in file order.
    pub errors: Vec<ConfigError>,
}

impl ConfigErrors {
    /// The errors as a slice (file order).
    pub fn errors(&self) -> &[ConfigError] {
        &self.errors
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for e in &self.errors {
            writeln!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// Collects errors for one file, turning byte spans into line:column.
pub(super) struct Errors<'a> {
    file: &'a str,
    text: &'a str,
    /// Byte offset where each line starts.
    line_starts: Vec<usize>,
    errors: Vec<ConfigError>,
    /// Valid settings that hold only under conditions the file cannot state (e.g. a
    /// command-line flag): reported, not refused.
    warnings: Vec<ConfigError>,
}

impl<'a> Errors<'a> {
    pub(super) fn new(file: &'a str, text: &'a str) -> Errors<'a> {
        let mut line_starts = vec![0];
        line_starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        Errors {
            file,
            text,
            line_starts,
            errors: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// 1-based (line, column) of a byte offset; the column counts characters.
    pub(super) fn position(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let line = self.line_starts.partition_point(|&s| s <= offset);
        let start = self.line_starts[line - 1];
        // Spans always fall on char boundaries; be safe anyway.
        let column = self
            .text
            .get(start..offset)
            .map_or(offset - start, |s| s.chars().count())
            + 1;
        (line, column)
    }

    /// 1-based line of a span's start (for "first defined at line N" hints).
    pub(super) fn line_of(&self, span: &Range<usize>) -> usize {
        self.position(span.start).0
    }

    /// Records an error at the start of `span`.
    pub(super) fn at(&mut self, span: &Range<usize>, message: impl Into<String>) {
        let e = self.entry(span, message.into());
        self.errors.push(e);
    }

    /// Records a warning at the start of `span` (same form as an error).
    pub(super) fn warn(&mut self, span: &Range<usize>, message: impl Into<String>) {
        let w = self.entry(span, message.into());
        self.warnings.push(w);
    }

    fn entry(&self, span: &Range<usize>, message: String) -> ConfigError {
        let (line, column) = self.position(span.start);
        ConfigError {
            file: self.file.to_string(),
            line,
            column,
            // One line per error, whatever the message holds.
            message: message.replace('\n', " "),
        }
    }

    /// The warnings recorded so far, sorted by position.
    pub(super) fn take_warnings(&mut self) -> Vec<ConfigError> {
        let mut w = std::mem::take(&mut self.warnings);
        w.sort_by_key(|e| (e.line, e.column));
        w
    }

    /// Records a TOML parse or deserialization error (they carry a span).
    pub(super) fn toml(&mut self, e: &toml::de::Error) {
        let span = e.span().unwrap_or(0..0);
        self.at(&span, e.message().trim_end().to_string());
    }

    pub(super) fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }

    /// The collected errors, sorted by position (stable for equal positions).
    pub(super) fn finish(mut self) -> ConfigErrors {
        self.errors.sort_by_key(|e| (e.line, e.column));
        ConfigErrors {
            errors: self.errors,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_one_based_and_count_characters() {
        let text = "a = 1\n# 日本語\nbb = \"x\"\n";
        let e = Errors::new("f.toml", text);
        assert_eq!(e.position(0), (1, 1));
        assert_eq!(e.position(4), (1, 5));
        // Line 2 starts at byte 6; "# " then three 3-byte characters.
        let third_line = text.find("bb").unwrap();
        assert_eq!(e.position(third_line), (3, 1));
        let quote = text.find('"').unwrap();
        assert_eq!(e.position(quote), (3, 6));
        let after_kanji = text.find("語").unwrap() + "語".len();
        assert_eq!(e.position(after_kanji), (2, 6));
    }

    #[test]
    fn display_is_one_line_per_error_with_trailing_newline() {
        let errs = ConfigErrors {
            errors: vec![
                ConfigError {
                    file: "a.toml".into(),
                    line: 3,
                    column: 9,
                    message: "bad".into(),
                },
                ConfigError {
                    file: "a.toml".into(),
                    line: 0,
                    column: 0,
                    message: "cannot read".into(),
                },
            ],
        };
        assert_eq!(errs.to_string(), "a.toml:3:9: bad\na.toml: cannot read\n");
    }
}
