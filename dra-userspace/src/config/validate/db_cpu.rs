//! `[dynamic_throttling_db_cpu_profile]`: thresholds, reversal and sampling settings,
//! and the CPU sample `source`.

use std::time::Duration;

use super::Span;
use super::syntax::{
    absolute_path, choice, choice_or, int_in, percent, positive_duration, socket_addr, u32_in,
};
use crate::config::error::Errors;
use crate::config::raw::{Item, RawConfig, RawDbCpuProfile, RawSource, RawThreshold};
use crate::config::values;
use crate::config::{CpuSource, DbCpuProfile, OnMissing, ProcTarget, Threshold};

#[derive(Clone, Copy, PartialEq, Eq)]
enum SourceKind {
    Procfs,
    Redis,
    Prometheus,
    File,
}

config_names!(SourceKind {
    Procfs => "procfs",
    Redis => "redis",
    Prometheus => "prometheus",
    File => "file",
});

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
        Some(Some(src)) => source(e, &src.v, &src.span),
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

fn source(e: &mut Errors<'_>, s: &RawSource, span: &Span) -> Option<CpuSource> {
    let kind = choice(e, "source kind", &s.kind)?;
    let kind_name = s.kind.get_ref();
    // Keys each kind accepts; any other key set is reported.
    let allowed: &[&str] = match kind {
        SourceKind::Procfs => &["process", "pid_file", "host"],
        SourceKind::Redis => &["address"],
        SourceKind::Prometheus => &["url", "query"],
        SourceKind::File => &["path"],
    };
    let present = [
        ("process", s.process.as_ref().map(|v| v.span())),
        ("pid_file", s.pid_file.as_ref().map(|v| v.span())),
        ("host", s.host.as_ref().map(|v| v.span())),
        ("address", s.address.as_ref().map(|v| v.span())),
        ("url", s.url.as_ref().map(|v| v.span())),
        ("query", s.query.as_ref().map(|v| v.span())),
        ("path", s.path.as_ref().map(|v| v.span())),
    ];
    let mut ok = true;
    for (key, sp) in present {
        if let Some(sp) = sp
            && !allowed.contains(&key)
        {
            e.at(
                &sp,
                format!(
                    "{key} does not apply to kind = \"{kind_name}\" (it takes {})",
                    allowed.join(", ")
                ),
            );
            ok = false;
        }
    }
    let missing = |e: &mut Errors<'_>, what: &str| {
        e.at(span, format!("source kind = \"{kind_name}\" needs {what}"));
    };
    let out = match kind {
        SourceKind::Procfs => {
            let host = s.host.as_ref().filter(|h| *h.get_ref());
            match (&s.process, &s.pid_file, host) {
                (Some(p), None, None) if !p.get_ref().is_empty() => {
                    Some(CpuSource::Procfs(ProcTarget::Process(p.get_ref().clone())))
                }
                (Some(p), None, None) => {
                    e.at(&p.span(), "process must not be empty");
                    None
                }
                (None, Some(f), None) => absolute_path(e, "pid_file", f)
                    .map(|p| CpuSource::Procfs(ProcTarget::PidFile(p))),
                (None, None, Some(_)) => Some(CpuSource::Procfs(ProcTarget::Host)),
                (None, None, None) => {
                    missing(
                        e,
                        "one of process = \"redis-server\", pid_file = \"/run/...\" or host = true",
                    );
                    None
                }
                _ => {
                    e.at(
                        span,
                        "procfs source takes exactly one of process, pid_file or host = true",
                    );
                    None
                }
            }
        }
        SourceKind::Redis => match &s.address {
            Some(a) => socket_addr(e, "address", a, "127.0.0.1:6379")
                .map(|address| CpuSource::Redis { address }),
            None => {
                missing(e, "address = \"127.0.0.1:6379\"");
                None
            }
        },
        SourceKind::Prometheus => match (&s.url, &s.query) {
            (Some(u), Some(q)) => {
                let url = u.get_ref();
                let rest = url
                    .strip_prefix("http://")
                    .or_else(|| url.strip_prefix("https://"));
                let url_ok = rest.is_some_and(|r| !r.is_empty() && !r.starts_with('/'));
                if !url_ok {
                    e.at(
                        &u.span(),
                        format!("bad url \"{url}\": expected http://host:port"),
                    );
                }
                if q.get_ref().trim().is_empty() {
                    e.at(&q.span(), "query must not be empty");
                }
                (url_ok && !q.get_ref().trim().is_empty()).then(|| CpuSource::Prometheus {
                    url: url.clone(),
                    query: q.get_ref().clone(),
                })
            }
            _ => {
                missing(e, "url = \"http://...\" and query = \"...\"");
                None
            }
        },
        SourceKind::File => match &s.path {
            Some(p) => absolute_path(e, "path", p).map(|path| CpuSource::File { path }),
            None => {
                missing(e, "path = \"/run/dra/db_cpu\"");
                None
            }
        },
    };
    if ok { out } else { None }
}
