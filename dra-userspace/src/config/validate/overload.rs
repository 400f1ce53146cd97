//! `[overload]`: the agent's own overload control (docs/config.md, docs/architecture.md
//! §13).

use std::time::Duration;

use dra_common::wire::{MsgClass, cc_request_type as rt};

use super::syntax::{duration, int_in};
use crate::config::Overload;
use crate::config::error::Errors;
use crate::config::raw::{Item, RawConfig};
use crate::overload::{ClassPriority, Priorities, Settings};

/// The priorities of the Gx and Gy credit-control classes when the file names none
/// (RFC 7944's scale, 0 the highest): terminations 4, updates 8, new sessions and
/// one-shot events 12; every other request `default`.
pub fn default_priorities(default: u8) -> Priorities {
    let mut classes = Vec::new();
    for (of, app) in [
        (MsgClass::gx_ccr as fn(u8) -> MsgClass, "gx"),
        (MsgClass::gy_ccr, "gy"),
    ] {
        for (r, p, s) in [
            (rt::INITIAL, 12, "i"),
            (rt::UPDATE, 8, "u"),
            (rt::TERMINATION, 4, "t"),
            (rt::EVENT, 12, "e"),
        ] {
            classes.push(ClassPriority {
                class: of(r),
                priority: p,
                label: format!("{app}_ccr_{s}"),
            });
        }
    }
    Priorities { classes, default }
}

/// Longest accepted `target_delay` (a gateway's answer timer is a few seconds).
const MAX_TARGET: Duration = Duration::from_secs(1);

pub(in crate::config) fn overload(e: &mut Errors<'_>, raw: &RawConfig) -> Overload {
    let Some(Item { v: o, .. }) = &raw.overload else {
        return Overload::default();
    };
    let defaults = Settings::default();
    let target = duration(e, "target_delay", &o.target_delay, defaults.target);
    if let Some(v) = &o.target_delay
        && (target < Duration::from_millis(1) || target > MAX_TARGET)
    {
        e.at(
            &v.span(),
            format!(
                "target_delay must be between 1ms and {}ms",
                MAX_TARGET.as_millis()
            ),
        );
    }
    let hold = duration(e, "hold", &o.hold, defaults.hold);
    if let Some(v) = &o.hold
        && hold > Duration::from_secs(600)
    {
        e.at(&v.span(), "hold must be at most 600s");
    }
    let escalate = duration(e, "escalate", &o.escalate, defaults.escalate);
    if let Some(v) = &o.escalate
        && escalate > Duration::from_secs(60)
    {
        e.at(&v.span(), "escalate must be at most 60s");
    }
    let answer_ratio = match &o.answer_ratio {
        None => defaults.answer_ratio,
        Some(v) => {
            let r = *v.get_ref();
            if !(0.0..=10.0).contains(&r) {
                e.at(
                    &v.span(),
                    format!("answer_ratio must be between 0 and 10, got {r}"),
                );
            }
            r.clamp(0.0, 10.0)
        }
    };
    let priority = |e: &mut Errors<'_>, key: &str, v| {
        int_in(
            e,
            key,
            v,
            0,
            15,
            " (RFC 7944: 0 the highest, 15 the lowest)",
        )
        .map(|n| n as u8)
    };
    let mut levels = defaults.levels;
    if let Some(l) = &o.levels {
        let vals: Vec<Option<u8>> = l
            .get_ref()
            .iter()
            .map(|v| priority(e, "levels", v))
            .collect();
        match vals[..] {
            [Some(a), Some(b)] if a > b => levels = [a, b],
            [Some(_), Some(_)] => e.at(
                &l.span(),
                "levels = [l1, l2]: level 1 sheds priorities l1..15, level 2 l2..15; \
                 l1 must be greater than l2",
            ),
            [_, _] => {}
            _ => e.at(&l.span(), "levels must list two priorities, e.g. [10, 6]"),
        }
    }
    let default = match &o.default_priority {
        Some(v) => priority(e, "default_priority", v).unwrap_or(8),
        None => 8,
    };
    let mut priorities = default_priorities(default);
    if let Some(table) = &o.priority {
        for (k, v) in table.get_ref() {
            let Some(class) = crate::metrics::parse_class_label(k.get_ref()) else {
                e.at(
                    &k.span(),
                    format!(
                        "unknown class {:?} in [overload.priority]: a class label such as \
                         gx_ccr_i, gy_ccr_t, gx_ccr or 16777251_316",
                        k.get_ref()
                    ),
                );
                continue;
            };
            let Some(p) = priority(e, k.get_ref(), v) else {
                continue;
            };
            match priorities.classes.iter_mut().find(|c| c.class == class) {
                Some(c) => c.priority = p,
                None => priorities.classes.push(ClassPriority {
                    class,
                    priority: p,
                    label: k.get_ref().clone(),
                }),
            }
        }
    }
    Overload {
        enabled: o.enabled.as_ref().is_none_or(|v| *v.get_ref()),
        settings: Settings {
            target,
            answer_ratio,
            hold,
            escalate,
            levels,
        },
        priorities,
    }
}
