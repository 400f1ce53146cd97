//! The reports `dra-loadgen` writes (its client's summary and per-second rows, the
//! closed loop's summary, the server's counters) and the results of the bench binaries
//! (`dra-bench`'s [`relay`], `xdp-bench`'s [`xdp`]), as types that derive both
//! `Serialize` and `Deserialize`: the writers serialize exactly these, and the benches
//! in xtask and the tests parse them back with [`parse`]. A field that is
//! missing, renamed or unknown fails the parse with an error that names it, so a
//! bench never reads a figure that is not there as zero.

pub mod client;
pub mod closed;
pub mod overload;
pub mod relay;
pub mod server;
pub mod xdp;

use std::fmt;

use serde::de::DeserializeOwned;

/// A report that does not parse: what it was, and serde's reason (which names the
/// field and the position).
#[derive(Debug)]
pub struct ParseError {
    /// What was parsed (e.g. a file's path and the report's kind).
    pub what: String,
    /// serde's reason.
    pub source: serde_json::Error,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: not a report of this kind: {}",
            self.what, self.source
        )
    }
}

impl std::error::Error for ParseError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Parses one report of type `T` from JSON `text`; `what` names it in the error.
pub fn parse<T: DeserializeOwned>(text: &str, what: &str) -> Result<T, ParseError> {
    serde_json::from_str(text).map_err(|source| ParseError {
        what: what.to_owned(),
        source,
    })
}

/// Parses JSON lines (`dra-loadgen client --rows`, `server --stats-every`): every
/// non-empty line one report of type `T`; `what` names them in the error, with the
/// line's number.
pub fn parse_lines<T: DeserializeOwned>(text: &str, what: &str) -> Result<Vec<T>, ParseError> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| parse(l, &format!("{what}, line {}", i + 1)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::client::{ClassSummary, Report};
    use super::*;

    fn report() -> Report {
        let mut r = Report {
            scenario: "storm".into(),
            duration_s: 12.5,
            ..Report::default()
        };
        r.classes.insert(
            "gx_ccr_i".into(),
            ClassSummary {
                sent: 10,
                answered: [("2001".to_owned(), 7), ("3002".to_owned(), 3)].into(),
                ..ClassSummary::default()
            },
        );
        r
    }

    #[test]
    fn a_report_parses_back_to_itself() {
        let r = report();
        let text = serde_json::to_string_pretty(&r).unwrap();
        assert_eq!(parse::<Report>(&text, "summary.json").unwrap(), r);
        assert_eq!(r.class("gx_ccr_i").answered_with(3002), 3);
        assert_eq!(r.class("gx_ccr_t"), ClassSummary::default());
    }

    #[test]
    fn a_renamed_or_missing_field_is_an_error_naming_it() {
        let text = serde_json::to_string(&report()).unwrap();
        let renamed = text.replace("\"timeouts\"", "\"time_outs\"");
        let e = parse::<Report>(&renamed, "pgw1-summary.json")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("pgw1-summary.json: "), "{e}");
        assert!(e.contains("time_outs"), "{e}");
        let missing = text.replace("\"duration_s\":12.5,", "");
        let e = parse::<Report>(&missing, "s").unwrap_err().to_string();
        assert!(e.contains("missing field `duration_s`"), "{e}");
    }

    #[test]
    fn json_lines_name_the_line_that_does_not_parse() {
        let good = serde_json::to_string(&report()).unwrap();
        let text = format!("{good}\n\n{}\n", good.replace("\"scenario\"", "\"name\""));
        let e = parse_lines::<Report>(&text, "rows.jsonl")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("rows.jsonl, line 3: "), "{e}");
        assert_eq!(
            parse_lines::<Report>(&format!("{good}\n"), "r")
                .unwrap()
                .len(),
            1
        );
    }
}
