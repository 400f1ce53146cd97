//! The load generator's per-second rows (`dra-loadgen client --rows`, JSON lines) and the
//! small statistics taken over them.

use serde_json::Value;

/// Per second of `phase` (client rows, JSON lines): (t, requests of `class` sent,
/// answers of `class` with `code`).
pub fn rows_per_second(rows: &str, phase: &str, class: &str, code: &str) -> Vec<(u64, u64, u64)> {
    rows.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r.get("phase").and_then(Value::as_str) == Some(phase))
        .map(|r| {
            let t = r.get("t").and_then(Value::as_u64).unwrap_or(0);
            let c = r.get("classes").and_then(|c| c.get(class));
            let sent = c
                .and_then(|c| c.get("sent"))
                .and_then(Value::as_u64)
                .unwrap_or(0);
            let ok = c
                .and_then(|c| c.get("answered"))
                .and_then(|a| a.get(code))
                .and_then(Value::as_u64)
                .unwrap_or(0);
            (t, sent, ok)
        })
        .collect()
}

/// Per second of `phase`: the p99 latency (ms) the client rows give for `class`
/// (seconds without answers of that class are left out).
pub fn rows_p99(rows: &str, phase: &str, class: &str) -> Vec<f64> {
    rows.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r.get("phase").and_then(Value::as_str) == Some(phase))
        .filter_map(|r| {
            let c = r.get("classes")?.get(class)?;
            let answered: u64 = c
                .get("answered")?
                .as_object()?
                .values()
                .filter_map(Value::as_u64)
                .sum();
            (answered > 0)
                .then(|| c.get("p99_ms").and_then(Value::as_f64))
                .flatten()
        })
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

/// Mean of `v` without its first `skip_first` and last `skip_last` values (None when
/// nothing is left).
pub fn interior_mean(v: &[f64], skip_first: usize, skip_last: usize) -> Option<f64> {
    let end = v.len().checked_sub(skip_last)?;
    let inner = v.get(skip_first..end)?;
    (!inner.is_empty()).then(|| inner.iter().sum::<f64>() / inner.len() as f64)
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
mod tests {
    use super::*;

    const ROWS: &str = concat!(
        r#"{"t":5,"phase":"open","classes":{"gx_ccr_i":{"sent":400,"answered":{"2001":400}}}}"#,
        r#"
{"t":6,"phase":"measure","classes":{"gx_ccr_i":{"sent":5000,"answered":{"2001":510,"3002":4490}}}}
{"t":7,"phase":"measure","classes":{"gx_ccr_i":{"sent":5000,"answered":{"2001":502,"3002":4498}}}}
{"t":8,"phase":"measure","classes":{"gx_ccr_i":{"sent":5000,"answered":{"2001":498,"3002":4502}}}}
{"t":9,"phase":"measure","classes":{"gx_ccr_i":{"sent":4990,"answered":{"2001":504,"3002":4486}}}}
{"t":10,"phase":"measure","classes":{"gx_ccr_u":{"sent":1000,"answered":{"2001":1000}}}}
{"t":11,"phase":"measure","classes":{"gx_ccr_i":{"sent":5000,"answered":{"2001":300}}}}
not json
"#
    );

    #[test]
    fn admitted_rate_and_error_come_from_the_interior_of_the_phase() {
        let ps = rows_per_second(ROWS, "measure", "gx_ccr_i", "2001");
        assert_eq!(
            ps.len(),
            6,
            "only rows of the phase, a second without CCR-I counts as 0"
        );
        assert_eq!(ps[0], (6, 5000, 510));
        assert_eq!(ps[4], (10, 0, 0));
        let ok: Vec<f64> = ps.iter().map(|r| r.2 as f64).collect();
        // Without the first 2 and the last 1: 498, 504, 0.
        assert_eq!(interior_mean(&ok, 2, 1), Some(334.0));
        assert_eq!(interior_mean(&ok[..4], 2, 1), Some(498.0));
        assert_eq!(interior_mean(&ok[..3], 2, 1), None);
        assert!((relative_error(490.0, 500.0) - 0.02).abs() < 1e-12);
        assert!((relative_error(510.0, 500.0) - 0.02).abs() < 1e-12);
        assert_eq!(ratio(6.0, 2.0), Some(3.0));
        assert_eq!(ratio(6.0, 0.0), None);
    }

    #[test]
    fn per_second_p99_and_median() {
        let rows = concat!(
            r#"{"t":6,"phase":"measure","classes":"#,
            r#"{"gx_ccr_u":{"sent":1000,"answered":{"2001":990},"p99_ms":12.5}}}"#,
            "\n",
            r#"{"t":7,"phase":"measure","classes":"#,
            r#"{"gx_ccr_u":{"sent":1000,"answered":{},"p99_ms":0.0}}}"#,
            "\n",
            r#"{"t":8,"phase":"measure","classes":"#,
            r#"{"gx_ccr_u":{"sent":1000,"answered":{"2001":1000},"p99_ms":80.0}}}"#,
            "\n",
            r#"{"t":9,"phase":"measure","classes":"#,
            r#"{"gx_ccr_u":{"sent":1000,"answered":{"2001":1000},"p99_ms":11.0}}}"#,
            "\n",
            r#"{"t":5,"phase":"open","classes":"#,
            r#"{"gx_ccr_u":{"sent":1,"answered":{"2001":1},"p99_ms":99.0}}}"#,
        );
        let v = rows_p99(rows, "measure", "gx_ccr_u");
        assert_eq!(v, [12.5, 80.0, 11.0], "a second without answers has no p99");
        assert_eq!(median(&v), Some(12.5));
        assert_eq!(median(&[1.0, 4.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }
}
