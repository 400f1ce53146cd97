//! `[dynamic_throttling_db_cpu_profile]`: thresholds, reversal and sampling settings.
//! Its `source` table is checked by `config/cpu_source.rs`, with everything else about
//! source kinds.

use std::time::Duration;

use super::Span;
use super::syntax::{choice_or, int_in, percent, positive_duration, u32_in};
use crate::config::error::Errors;
use crate::config::raw::{Item, RawConfig, RawDbCpuProfile, RawThreshold};
use crate::config::{DbCpuProfile, OnMissing, Threshold, cpu_source, values};

/// `[dynamic_throttling_db_cpu_profile]`, required when DRL is switched on or used.
pub(super) fn db_cpu_profile_table(e: &mut Errors<'_>, raw: &RawConfig) -> Option<DbCpuProfile> {
    let db_cpu_profile = raw
        .db_cpu_profile
        .as_ref()
        .and_then(|p| db_cpu_profile(e, p));
    if raw.db_cpu_profile.is_none() && !raw.db_cpu_profile_failed {
        let switch = raw
            .global
            .as_ref()
            .and_then(|g| g.v.dynamic_rate_limiting.as_ref())
            .filter(|v| *v.get_ref());
        if let Some(v) = switch {
            e.at(
                &v.span(),
                "dynamic_rate_limiting = true needs a [dynamic_throttling_db_cpu_profile] \
                 (thresholds and a CPU source)",
            );
        } else if let Some(first) = raw.dynamic_profiles.first() {
            e.at(
                &first.span,
                "[[dynamic_peer_rate_limit_profile]] needs a [dynamic_throttling_db_cpu_profile] \
                 (thresholds and a CPU source)",
            );
        }
    }
    db_cpu_profile
}

fn db_cpu_profile(e: &mut Errors<'_>, item: &Item<RawDbCpuProfile>) -> Option<DbCpuProfile> {
    const TABLE: &str = "[dynamic_throttling_db_cpu_profile]";
    let p = &item.v;
    let mut thresholds = Vec::new();
    let rows: &[Item<RawThreshold>] = match &p.thresholds {
        None => {
            e.at(
                &item.span,
                format!(
                    "missing key `thresholds` in {TABLE} (rows like {{ cpu = 50, throttle = 20 }})"
                ),
            );
            &[]
        }
        Some(list) => {
            if list.items.is_empty() && list.failed == 0 {
                e.at(
                    &list.span,
                    "thresholds must have at least one { cpu, throttle } row",
                );
            }
            &list.items
        }
    };
    let mut prev: Option<(u8, u8, Span)> = None;
    for row in rows {
        let r = &row.v;
        let (Some(cpu), Some(throttle)) = (
            percent(e, "cpu", &r.cpu),
            percent(e, "throttle", &r.throttle),
        ) else {
            continue;
        };
        if let Some((pcpu, pthrottle, pspan)) = &prev {
            let line = e.line_of(pspan);
            if cpu <= *pcpu {
                e.at(
                    &r.cpu.span(),
                    format!(
                        "threshold cpu values must strictly increase: {cpu} follows {pcpu} \
                         (line {line})"
                    ),
                );
                continue;
            }
            if throttle < *pthrottle {
                e.at(
                    &r.throttle.span(),
                    format!(
                        "throttle must not decrease as cpu rises: {throttle} at cpu {cpu} is \
                         below {pthrottle} at cpu {pcpu} (line {line})"
                    ),
                );
                continue;
            }
        }
        prev = Some((cpu, throttle, r.cpu.span()));
        thresholds.push(Threshold { cpu, throttle });
    }
    let sample_period =
        positive_duration(e, "sample_period", &p.sample_period, Duration::from_secs(1));
    let reversal_hold_time = positive_duration(
        e,
        "reversal_hold_time",
        &p.reversal_hold_time,
        Duration::from_secs(30),
    );
    if reversal_hold_time < sample_period
        && let Some(span) = p
            .reversal_hold_time
            .as_ref()
            .or(p.sample_period.as_ref())
            .map(|v| v.span())
    {
        e.at(
            &span,
            format!(
                "reversal_hold_time {} is shorter than sample_period {}",
                values::format_duration(reversal_hold_time),
                values::format_duration(sample_period)
            ),
        );
    }
    let reversal_step = match &p.reversal_step {
        None => Some(20),
        Some(v) => int_in(
            e,
            "reversal_step",
            v,
            1,
            100,
            " % (0 would never release the throttle)",
        )
        .map(|n| n as u8),
    };
    let ewma_alpha = match &p.ewma_alpha {
        None => None,
        Some(v) => {
            let a = *v.get_ref();
            if a.is_finite() && a > 0.0 && a <= 1.0 {
                Some(a)
            } else {
                e.at(
                    &v.span(),
                    format!("ewma_alpha must be in (0, 1] (1 = no smoothing), got {a}"),
                );
                None
            }
        }
    };
    let missing_after = u32_in(e, "missing_after", &p.missing_after, 1, 1_000_000, 3);
    let on_missing = choice_or(e, "on_missing", &p.on_missing, OnMissing::Hold);
    let source = match &p.source {
        None => {
            e.at(
                &item.span,
                format!(
                    "missing key `source` in {TABLE} (e.g. source = {{ kind = \"redis\", \
                     address = \"127.0.0.1:6379\" }})"
                ),
            );
            None
        }
        Some(None) => None,
        Some(Some(src)) => cpu_source::check(e, &src.v, &src.span),
    };
    Some(DbCpuProfile {
        thresholds,
        reversal_hold_time,
        reversal_step: reversal_step?,
        sample_period,
        ewma_alpha,
        missing_after,
        on_missing,
        source: source?,
    })
}
