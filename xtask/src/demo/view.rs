//! What the demo shows: the live view, the CSVs and the PNG plot.

use std::{fmt::Write as _, path::Path};

use anyhow::{Context, Result};

use super::{
    profile::Profile,
    series::{Row, Sample},
};

pub(crate) fn render(row: &Row, profile: &Profile, total_s: f64) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "dra demo — t = {:>4.0} s of ~{:.0} s   phase: {}\n\
         DRL profile (DEMO, lower CPU than the seed): {}\n\
         reversal hold {} (SHORTENED, seed scenario 30 s), step {} %, CPU source = the lab's Redis \
         (INFO cpu)\n",
        row.t,
        total_s,
        row.phase,
        profile.describe(),
        profile.hold,
        profile.step
    );
    let _ = writeln!(
        s,
        "DB CPU (Redis) {:>5.1} %   pgw1 throttle {:>3.0} %   pgw1 Gx CCR-I/T effective \
         rate {:>5.0}/s\n",
        row.cpu, row.throttle, row.eff_rate
    );
    let _ = writeln!(
        s,
        "{:<6} {:<10} {:>10} {:>10} {:>10}",
        "peer", "class", "offered/s", "admitted/s", "rejected/s"
    );
    for (peer, classes) in &row.peers {
        for (class, [o, a, r]) in classes {
            let _ = writeln!(s, "{peer:<6} {class:<10} {o:>10.0} {a:>10.0} {r:>10.0}");
        }
    }
    let _ = writeln!(
        s,
        "\n{:<8} {:>10} {:>16}",
        "upstream", "answers/s", "mean latency ms"
    );
    for (up, (n, ms)) in &row.upstream {
        let ms = if ms.is_nan() {
            "-".to_owned()
        } else {
            format!("{ms:.2}")
        };
        let _ = writeln!(s, "{up:<8} {n:>10.0} {ms:>16}");
    }
    s
}

/// One line per row when stdout is not a terminal.
pub(crate) fn line(row: &Row) -> String {
    let (a, b) = (
        |i| row.rate("pgw1", "all", i),
        |i| row.rate("pgw2", "all", i),
    );
    format!(
        "t={:>4.0} {:<9} cpu={:>5.1}% throttle={:>2.0}% pgw1 {:>4.0}/{:>4.0}/{:>4.0} \
         pgw2 {:>4.0}/{:>4.0}/{:>4.0} (offered/admitted/rejected per s)",
        row.t,
        row.phase,
        row.cpu,
        row.throttle,
        a(0),
        a(1),
        a(2),
        b(0),
        b(1),
        b(2)
    )
}

pub(crate) fn write_csv(rows: &[Row], path: &Path) -> Result<()> {
    let mut s = String::from(
        "t_s,phase,db_cpu_percent,pgw1_throttle_percent,pgw1_ccr_i_effective_rate,\
         pgw1_offered,pgw1_admitted,pgw1_rejected,pgw2_offered,pgw2_admitted,pgw2_rejected,\
         pgw1_ccr_i_offered,pgw1_ccr_i_admitted,pgw2_ccr_i_offered,pgw2_ccr_i_admitted,\
         pcrf1_answers,pcrf1_latency_ms,pcrf2_answers,pcrf2_latency_ms\n",
    );
    for r in rows {
        let up = |p: &str| r.upstream.get(p).copied().unwrap_or((0.0, f64::NAN));
        let _ = writeln!(
            s,
            "{:.2},{},{:.2},{:.0},{:.0},{:.0},{:.0},{:.0},{:.0},{:.0},{:.0},{:.0},{:.0},{:.0},\
             {:.0},{:.0},{:.3},{:.0},{:.3}",
            r.t,
            r.phase,
            r.cpu,
            r.throttle,
            r.eff_rate,
            r.rate("pgw1", "all", 0),
            r.rate("pgw1", "all", 1),
            r.rate("pgw1", "all", 2),
            r.rate("pgw2", "all", 0),
            r.rate("pgw2", "all", 1),
            r.rate("pgw2", "all", 2),
            r.rate("pgw1", "gx_ccr_i", 0),
            r.rate("pgw1", "gx_ccr_i", 1),
            r.rate("pgw2", "gx_ccr_i", 0),
            r.rate("pgw2", "gx_ccr_i", 1),
            up("pcrf1").0,
            up("pcrf1").1,
            up("pcrf2").0,
            up("pcrf2").1
        );
    }
    std::fs::write(path, s).with_context(|| format!("write {}", path.display()))
}

/// Every scrape's DRL gauges (what the profile and reversal checks judged).
pub(crate) fn write_samples_csv(samples: &[Sample], path: &Path) -> Result<()> {
    let mut s = String::from(
        "t_s,db_cpu_percent,db_cpu_source_up,pgw1_throttle_percent,pgw2_throttle_percent,\
         pgw1_ccr_i_effective_rate\n",
    );
    for x in samples {
        let thr = |p: &str| {
            x.throttle_of(p)
                .map_or(String::new(), |v| format!("{v:.0}"))
        };
        let eff = x
            .eff
            .get(&("pgw1".to_owned(), "gx_ccr_i".to_owned()))
            .map_or(String::new(), |v| format!("{v:.0}"));
        let _ = writeln!(
            s,
            "{:.3},{},{},{},{},{eff}",
            x.t,
            x.cpu,
            u8::from(x.source_up),
            thr("pgw1"),
            thr("pgw2")
        );
    }
    std::fs::write(path, s).with_context(|| format!("write {}", path.display()))
}

/// The y axis of one panel of the plot (from 0).
struct YAxis {
    max: f64,
    desc: &'static str,
    decimals: usize,
}

type Panel<'a, 'b> = plotters::chart::ChartContext<
    'a,
    plotters::backend::BitMapBackend<'b>,
    plotters::coord::cartesian::Cartesian2d<
        plotters::coord::types::RangedCoordf64,
        plotters::coord::types::RangedCoordf64,
    >,
>;

/// One panel of the plot: `caption` (text, font size) over a chart of 0..`t_max` seconds
/// by `y`, with its mesh drawn.
fn panel<'a, 'b>(
    area: &'a plotters::drawing::DrawingArea<
        plotters::backend::BitMapBackend<'b>,
        plotters::coord::Shift,
    >,
    caption: (&str, u32),
    t_max: f64,
    y: YAxis,
) -> Result<Panel<'a, 'b>, String> {
    use plotters::prelude::*;
    let mut c = ChartBuilder::on(area)
        .caption(caption.0, ("sans-serif", caption.1))
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..t_max, 0.0..y.max)
        .map_err(|x| x.to_string())?;
    c.configure_mesh()
        .x_desc("t (s)")
        .y_desc(y.desc)
        .y_label_formatter(&|v| format!("{v:.*}", y.decimals))
        .x_label_formatter(&|v| format!("{v:.0}"))
        .draw()
        .map_err(|x| x.to_string())?;
    Ok(c)
}

pub(crate) fn plot(rows: &[Row], samples: &[Sample], profile: &Profile, path: &Path) -> Result<()> {
    use plotters::prelude::*;
    plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
        .map_err(|_| anyhow::anyhow!("the embedded font could not be registered"))?;
    let t_max = rows.last().map_or(1.0, |r| r.t).max(1.0);
    let root = BitMapBackend::new(path, (1200, 1000)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
    let panels = root.split_evenly((3, 1));
    let e = |e: &dyn std::fmt::Display| anyhow::anyhow!("drawing {}: {e}", path.display());
    // 1. Rates.
    let r_max = rows
        .iter()
        .flat_map(|r| [r.rate("pgw1", "all", 0), r.rate("pgw2", "all", 0)])
        .fold(10.0, f64::max)
        * 1.1;
    let mut c = panel(
        &panels[0],
        ("requests/s at the fast path (Gx, all classes)", 18),
        t_max,
        YAxis {
            max: r_max,
            desc: "msgs/s",
            decimals: 0,
        },
    )
    .map_err(|x| e(&x))?;
    let lines: [(&str, &str, usize, RGBColor); 6] = [
        ("pgw1 offered", "pgw1", 0, RGBColor(31, 119, 180)),
        ("pgw1 admitted", "pgw1", 1, RGBColor(44, 160, 44)),
        ("pgw1 rejected (throttle)", "pgw1", 2, RGBColor(214, 39, 40)),
        ("pgw2 offered", "pgw2", 0, RGBColor(148, 103, 189)),
        ("pgw2 admitted", "pgw2", 1, RGBColor(140, 86, 75)),
        (
            "pgw2 rejected (static 3002)",
            "pgw2",
            2,
            RGBColor(255, 127, 14),
        ),
    ];
    for (label, peer, i, col) in lines {
        c.draw_series(LineSeries::new(
            rows.iter().map(|r| (r.t, r.rate(peer, "all", i))),
            col.stroke_width(2),
        ))
        .map_err(|x| e(&x))?
        .label(label)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], col.stroke_width(2)));
    }
    c.configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|x| e(&x))?;
    // 2. Throttle, every scrape.
    let caption = format!(
        "pgw1 dynamic throttle % (reversal hold {}, step {} %)",
        profile.hold, profile.step
    );
    let mut c = panel(
        &panels[1],
        (&caption, 18),
        t_max,
        YAxis {
            max: 100.0,
            desc: "throttle %",
            decimals: 0,
        },
    )
    .map_err(|x| e(&x))?;
    c.draw_series(LineSeries::new(
        samples
            .iter()
            .filter_map(|s| Some((s.t, s.throttle_of("pgw1")?))),
        RED.stroke_width(2),
    ))
    .map_err(|x| e(&x))?;
    // 3. CPU with the thresholds, every scrape.
    let cpu_max = samples.iter().map(|s| s.cpu).fold(
        profile.thresholds.iter().map(|t| t.0).fold(0.0, f64::max),
        f64::max,
    ) * 1.2;
    let caption = format!(
        "Redis CPU % of one core (demo thresholds {})",
        profile.describe()
    );
    let mut c = panel(
        &panels[2],
        (&caption, 16),
        t_max,
        YAxis {
            max: cpu_max.max(1.0),
            desc: "CPU %",
            decimals: 1,
        },
    )
    .map_err(|x| e(&x))?;
    for (cpu, _) in &profile.thresholds {
        c.draw_series(LineSeries::new(
            [(0.0, *cpu), (t_max, *cpu)],
            RGBColor(180, 180, 180),
        ))
        .map_err(|x| e(&x))?;
    }
    c.draw_series(LineSeries::new(
        samples.iter().map(|s| (s.t, s.cpu)),
        BLUE.stroke_width(2),
    ))
    .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demo::{LAB_CONFIG, profile::read_profile};

    #[test]
    fn the_plot_draws_its_three_panels_into_a_png() {
        let profile = read_profile(&crate::workspace_root().join(LAB_CONFIG)).unwrap();
        let rows: Vec<Row> = (1..=3)
            .map(|t| Row {
                t: f64::from(t),
                ..Row::default()
            })
            .collect();
        let samples = [Sample {
            t: 1.0,
            cpu: 3.5,
            ..Sample::default()
        }];
        let path = std::env::temp_dir().join(format!("xtask-plot-{}.png", std::process::id()));
        plot(&rows, &samples, &profile, &path).unwrap();
        let png = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    }
}
