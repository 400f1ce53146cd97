//! The load generator's per-second rows (`dra-loadgen client --rows`, JSON lines) and the
//! small statistics taken over them.

use dra_report::client::{ClassRow, Row};

/// `class` in `row`; `None`: the class had no activity in that second (the client
/// leaves such classes out of a row), which is zero requests and zero answers.
fn class_in<'a>(row: &'a Row, class: &str) -> Option<&'a ClassRow> {
    row.classes.get(class)
}

/// Per second of `phase`: (t, requests of `class` sent, answers of `class` with
/// `code`). A second without the class counts 0 sent, 0 answered ([`class_in`]); a
/// code the second did not answer with counts 0 of it.
pub fn rows_per_second(rows: &[Row], phase: &str, class: &str, code: &str) -> Vec<(u64, u64, u64)> {
    rows.iter()
        .filter(|r| r.phase == phase)
        .map(|r| {
            let c = class_in(r, class);
            // Zero is right: the class, or the code, did not occur in that second.
            let sent = c.map_or(0, |c| c.sent);
            let ok = c.and_then(|c| c.answered.get(code)).copied().unwrap_or(0);
            (r.t, sent, ok)
        })
        .collect()
}

/// Per second of `phase`: the p99 latency (ms) the client rows give for `class`
/// (seconds without answers of that class are left out: they have no latency).
pub fn rows_p99(rows: &[Row], phase: &str, class: &str) -> Vec<f64> {
    rows.iter()
        .filter(|r| r.phase == phase)
        .filter_map(|r| class_in(r, class))
        .filter(|c| c.answered.values().sum::<u64>() > 0)
        .map(|c| c.p99_ms)
        .collect()
}

/// Median (mean of the middle two for an even count); None when empty.
pub fn median(v: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// |measured − target| / target.
pub fn relative_error(measured: f64, target: f64) -> f64 {
    (measured - target).abs() / target
}

/// a / b, None unless both are finite and b > 0.
pub fn ratio(a: f64, b: f64) -> Option<f64> {
    (a.is_finite() && b.is_finite() && b > 0.0).then(|| a / b)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::bench::window::INTERIOR;

    /// A row at `t` of `phase` with `class`: `sent`, answers by code, p99.
    pub(crate) fn row(
        t: u64,
        phase: &str,
        class: &str,
        sent: u64,
        answered: &[(&str, u64)],
    ) -> Row {
        row_p99(t, phase, class, sent, answered, 0.0)
    }

    fn row_p99(
        t: u64,
        phase: &str,
        class: &str,
        sent: u64,
        answered: &[(&str, u64)],
        p99_ms: f64,
    ) -> Row {
        let c = ClassRow {
            sent,
            answered: answered
                .iter()
                .map(|(k, v)| ((*k).to_owned(), *v))
                .collect(),
            p50_ms: 0.0,
            p99_ms,
            timeouts: 0,
            unanswered: 0,
            in_flight: 0,
            doic_shed: 0,
        };
        Row {
            t,
            phase: phase.to_owned(),
            classes: [(class.to_owned(), c)].into(),
            open_sessions: Default::default(),
            peers_up: 1,
        }
    }

    fn rows() -> Vec<Row> {
        let i = "gx_ccr_i";
        vec![
            row(5, "open", i, 400, &[("2001", 400)]),
            row(6, "measure", i, 5000, &[("2001", 510), ("3002", 4490)]),
            row(7, "measure", i, 5000, &[("2001", 502), ("3002", 4498)]),
            row(8, "measure", i, 5000, &[("2001", 498), ("3002", 4502)]),
            row(9, "measure", i, 4990, &[("2001", 504), ("3002", 4486)]),
            row(10, "measure", "gx_ccr_u", 1000, &[("2001", 1000)]),
            row(11, "measure", i, 5000, &[("2001", 300)]),
        ]
    }

    #[test]
    fn admitted_rate_and_error_come_from_the_interior_of_the_phase() {
        let ps = rows_per_second(&rows(), "measure", "gx_ccr_i", "2001");
        assert_eq!(
            ps.len(),
            6,
            "only rows of the phase, a second without CCR-I counts as 0"
        );
        assert_eq!(ps[0], (6, 5000, 510));
        assert_eq!(ps[4], (10, 0, 0));
        let ok: Vec<f64> = ps.iter().map(|r| r.2 as f64).collect();
        // The interior of the phase, without its first 2 s and its last 1 s: 498, 504, 0.
        assert_eq!(INTERIOR.mean(&ok), Some(334.0));
        assert!((relative_error(490.0, 500.0) - 0.02).abs() < 1e-12);
        assert!((relative_error(510.0, 500.0) - 0.02).abs() < 1e-12);
        assert_eq!(ratio(6.0, 2.0), Some(3.0));
        assert_eq!(ratio(6.0, 0.0), None);
    }

    #[test]
    fn per_second_p99_and_median() {
        let u = "gx_ccr_u";
        let rows = [
            row_p99(6, "measure", u, 1000, &[("2001", 990)], 12.5),
            row_p99(7, "measure", u, 1000, &[], 0.0),
            row_p99(8, "measure", u, 1000, &[("2001", 1000)], 80.0),
            row_p99(9, "measure", u, 1000, &[("2001", 1000)], 11.0),
            row_p99(5, "open", u, 1, &[("2001", 1)], 99.0),
        ];
        let v = rows_p99(&rows, "measure", "gx_ccr_u");
        assert_eq!(v, [12.5, 80.0, 11.0], "a second without answers has no p99");
        assert_eq!(median(&v), Some(12.5));
        assert_eq!(median(&[1.0, 4.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }
}
