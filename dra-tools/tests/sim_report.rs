//! What `dra-sim lb` hands the user: markdown tables with a row per strategy, a CSV line
//! per run, and PNG plots.

use dra::routing::Strategy;
use dra_tools::sim::{LbConfig, Metric, Sweep, Variant, csv, markdown, plot_metric, run_sweep};

fn small_sweep() -> Sweep {
    Sweep {
        base: LbConfig {
            signals: 2_000,
            window: 200,
            ..LbConfig::new(Variant::Seed002)
        },
        variants: Variant::ALL.to_vec(),
        clients: vec![1, 5],
        heartbeats: vec![0.0, 10.0, 100.0],
        strategies: Strategy::ALL.to_vec(),
    }
}

/// The tables of `md`: (title, body lines).
fn tables(md: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for line in md.lines() {
        if let Some(title) = line.strip_prefix("### ") {
            out.push((title.to_owned(), Vec::new()));
        } else if line.starts_with('|')
            && let Some(last) = out.last_mut()
        {
            last.1.push(line.to_owned());
        }
    }
    out
}

#[test]
fn markdown_has_a_row_per_strategy_and_a_column_per_heartbeat_in_every_table() {
    let sweep = small_sweep();
    let rows = run_sweep(&sweep, |_| {}).expect("valid sweep");
    assert_eq!(rows.len(), 2 * 2 * 3 * 5);
    let md = markdown(&rows);
    let tables = tables(&md);
    // seed002: 3 metrics, queue: 5 metrics, each for 2 client counts.
    let expected = 2 * Metric::for_variant(Variant::Seed002).len()
        + 2 * Metric::for_variant(Variant::Queue).len();
    assert_eq!(tables.len(), expected, "{md}");
    for (title, lines) in &tables {
        assert_eq!(lines[0], "| strategy \\ H | 0 | 10 | 100 |", "{title}");
        let body = &lines[2..];
        assert_eq!(body.len(), Strategy::ALL.len(), "{title}");
        for (line, s) in body.iter().zip(Strategy::ALL) {
            assert!(line.starts_with(&format!("| {s} |")), "{title}: {line}");
            let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
            assert_eq!(cells.len(), 4, "{title}: {line}");
            for cell in &cells[1..] {
                assert!(cell.parse::<f64>().is_ok(), "{title}: {line}: {cell:?}");
            }
        }
    }
    // The p99 table of the queue model shows the p99 the run computed.
    let r = rows
        .iter()
        .find(|r| {
            r.config.variant == Variant::Queue
                && r.config.clients == 5
                && r.config.heartbeat == 10.0
                && r.config.strategy == Strategy::P2c
        })
        .expect("run in sweep");
    let (_, p99_table) = tables
        .iter()
        .find(|(t, _)| t.starts_with("queue, 5 clients — p99"))
        .expect("p99 table");
    let p2c_line = p99_table.iter().find(|l| l.starts_with("| p2c |")).unwrap();
    let shown: f64 = p2c_line.split('|').nth(3).unwrap().trim().parse().unwrap();
    let p99 = r.result.p99.unwrap();
    assert!(
        (shown - p99).abs() <= 1e-4_f64.max(p99 * 1e-3),
        "shown {shown}, computed {p99}"
    );
}

#[test]
fn same_seed_gives_the_same_tables_and_csv() {
    let a = run_sweep(&small_sweep(), |_| {}).expect("valid sweep");
    let b = run_sweep(&small_sweep(), |_| {}).expect("valid sweep");
    assert_eq!(markdown(&a), markdown(&b));
    assert_eq!(csv(&a), csv(&b));
    let mut other = small_sweep();
    other.base.seed = 7;
    let c = run_sweep(&other, |_| {}).expect("valid sweep");
    // Not just the seed column: the measured numbers differ.
    let results = |rows: &[dra_tools::sim::SweepRow]| -> Vec<dra_tools::sim::RunResult> {
        rows.iter().map(|r| r.result.clone()).collect()
    };
    assert_ne!(results(&a), results(&c));
}

#[test]
fn csv_has_one_line_per_run() {
    let rows = run_sweep(&small_sweep(), |_| {}).expect("valid sweep");
    let text = csv(&rows);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), rows.len() + 1);
    assert!(lines[0].starts_with("variant,clients,heartbeat,strategy,"));
    assert!(lines.iter().skip(1).all(|l| l.split(',').count() == 13));
}

#[test]
fn plot_writes_a_png_with_one_panel_per_client_count() {
    let sweep = Sweep {
        variants: vec![Variant::Queue],
        ..small_sweep()
    };
    let rows = run_sweep(&sweep, |_| {}).expect("valid sweep");
    let dir = std::env::temp_dir().join(format!("dra-sim-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("queue_p99.png");
    plot_metric(&rows, Variant::Queue, Metric::P99, &path).expect("plot drawn");
    let png = std::fs::read(&path).expect("PNG written");
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    // IHDR: width and height, big-endian, right after the chunk header.
    let width = u32::from_be_bytes(png[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(png[20..24].try_into().unwrap());
    assert_eq!((width, height), (2 * 640, 480));
    // No data for a metric of the other variant is an error, not an empty picture.
    assert!(plot_metric(&rows, Variant::Seed002, Metric::Cv, &path).is_err());
}
