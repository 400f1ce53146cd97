//! The static limits, `[[peer_rate_limit_profile]]` and `[[message_rate_limit_profile]]`,
//! and `[[dynamic_peer_rate_limit_profile]]`, which names the message limits dynamic
//! throttling scales.

use std::collections::HashMap;

use dra_common::maps::Action;

use super::syntax::{choice, choice_or, class, int_in, text_or, u32_in};
use super::{Refs, Span, refuse_keys, target_label, unique};
use crate::config::error::Errors;
use crate::config::raw::{Item, RawClass, RawConfig, RawRateLimit};
use crate::config::{
    ConfigName, DEFAULT_RESULT_CODE, Direction, DynamicPeerRateLimit, Limit, MessageClass,
    MessageRateLimit, PeerRateLimit, Target, default_limit_burst,
};

/// Highest rate the fast path can represent (1 ns per message).
const MAX_RATE: f64 = 1e9;

/// The bucket and action keys shared by both static profile tables.
fn limit(
    e: &mut Errors<'_>,
    r: &RawRateLimit,
    target: Option<&Target>,
    direction: Option<Direction>,
    scope: &str,
) -> Option<Limit> {
    let rate = *r.rate.get_ref();
    let rate_ok = if !rate.is_finite() || rate <= 0.0 {
        e.at(
            &r.rate.span(),
            format!("rate must be > 0 messages/s, got {rate}"),
        );
        false
    } else if rate > MAX_RATE {
        e.at(
            &r.rate.span(),
            format!("rate must be at most {MAX_RATE} messages/s, got {rate}"),
        );
        false
    } else {
        true
    };
    let burst = u32_in(e, "burst", &r.burst, 1, u32::MAX, 1);
    // docs/architecture.md §9: each DRA host a peer talks to enforces its share of a
    // network-wide limit; this host's bucket is `host_share` percent of rate and burst.
    let share = match &r.host_share {
        None => 100,
        Some(v) => int_in(
            e,
            "host_share",
            v,
            1,
            100,
            " (percent of the limit this DRA host enforces)",
        )
        .unwrap_or(100),
    };
    let rate = rate * share as f64 / 100.0;
    let action = choice_or(e, "action", &r.action, Action::Reject);
    if action == Action::Drop {
        let keys = [
            ("result_code", r.result_code.as_ref().map(|v| v.span())),
            ("error_message", r.error_message.as_ref().map(|v| v.span())),
        ];
        refuse_keys(e, &keys, |key| {
            format!(
                "{key} has no effect with action = \"drop\" (a dropped request gets no \
                 answer); remove it or use action = \"reject\""
            )
        });
    }
    let result_code = match &r.result_code {
        None => Some(DEFAULT_RESULT_CODE),
        // RFC 6733 §7.1: 3xxx protocol errors, 4xxx transient and 5xxx permanent
        // failures. 1xxx (informational) and 2xxx (success) cannot reject a request.
        Some(v) => int_in(
            e,
            "result_code",
            v,
            3000,
            5999,
            " (a rejection needs a 3xxx protocol error, 4xxx transient or 5xxx permanent \
             failure, e.g. 3002, 3004, 5012; RFC 6733 §7.1)",
        )
        .map(|n| n as u32),
    };
    let error_message = text_or(e, "error_message", &r.error_message, || {
        target.zip(direction).map(|(t, d)| {
            let who = match d {
                Direction::Ingress => t.name().to_string(),
                Direction::Egress => format!("egress to {}", t.name()),
            };
            format!("rate limit exceeded: {who} {scope} {rate}/s")
        })
    });
    if !rate_ok {
        return None;
    }
    Some(Limit {
        rate,
        burst: if r.burst.is_some() {
            host_burst(burst, share)
        } else {
            default_limit_burst(rate, action)
        },
        action,
        result_code: result_code?,
        error_message: error_message?,
    })
}

/// `burst` scaled to `share` percent, rounded up, at least 1.
fn host_burst(burst: u32, share: i64) -> u32 {
    let b = (u64::from(burst) * share as u64).div_ceil(100);
    u32::try_from(b.max(1)).unwrap_or(u32::MAX)
}

/// `[[peer_rate_limit_profile]]`.
pub(super) fn peer_rate_limits(
    e: &mut Errors<'_>,
    raw: &RawConfig,
    refs: &Refs<'_>,
) -> Vec<PeerRateLimit> {
    let mut peer_rate_limits = Vec::new();
    let mut seen_plimits = HashMap::new();
    for Item { v: r, span } in &raw.peer_rate_limits {
        let keys = [
            ("application", r.application.as_ref().map(|v| v.span())),
            ("command", r.command.as_ref().map(|v| v.span())),
            ("request_type", r.request_type.as_ref().map(|v| v.span())),
        ];
        refuse_keys(e, &keys, |key| {
            format!(
                "{key} belongs in [[message_rate_limit_profile]]; a peer profile limits all \
                 requests of the peer or group"
            )
        });
        let target = refs.target(e, "peer_rate_limit_profile", span, &r.peer, &r.group);
        let direction = choice(e, "direction", &r.direction);
        let limit = limit(e, r, target.as_ref(), direction, "overall");
        if let (Some(target), Some(direction), Some(limit)) = (target, direction, limit)
            && unique(
                e,
                &mut seen_plimits,
                (target.clone(), direction),
                span,
                || {
                    format!(
                        "second {} peer profile for {}",
                        direction.name(),
                        target_label(&target)
                    )
                },
            )
        {
            peer_rate_limits.push(PeerRateLimit {
                target,
                direction,
                limit,
            });
        }
    }
    peer_rate_limits
}

/// `[[message_rate_limit_profile]]`.
pub(super) fn message_rate_limits(
    e: &mut Errors<'_>,
    raw: &RawConfig,
    refs: &Refs<'_>,
) -> Vec<MessageRateLimit> {
    let mut message_rate_limits = Vec::new();
    let mut seen_mlimits = HashMap::new();
    for Item { v: r, span } in &raw.message_rate_limits {
        let target = refs.target(e, "message_rate_limit_profile", span, &r.peer, &r.group);
        let direction = choice(e, "direction", &r.direction);
        let class = match (&r.application, &r.command) {
            (Some(a), Some(c)) => class(e, a, c, &r.request_type),
            (a, c) => {
                let missing: Vec<&str> = [("application", a.is_none()), ("command", c.is_none())]
                    .iter()
                    .filter(|(_, m)| *m)
                    .map(|(k, _)| *k)
                    .collect();
                e.at(
                    span,
                    format!(
                        "[[message_rate_limit_profile]] is missing {} (e.g. application = \"gx\", \
                         command = \"ccr\")",
                        missing.join(" and ")
                    ),
                );
                None
            }
        };
        let scope = class.map(|c| c.to_string()).unwrap_or_default();
        let limit = limit(e, r, target.as_ref(), direction, &scope);
        if let (Some(target), Some(direction), Some(class), Some(limit)) =
            (target, direction, class, limit)
            && unique(
                e,
                &mut seen_mlimits,
                (target.clone(), direction, class),
                span,
                || {
                    format!(
                        "second {} profile for {} {class}",
                        direction.name(),
                        target_label(&target)
                    )
                },
            )
        {
            message_rate_limits.push(MessageRateLimit {
                target,
                direction,
                class,
                limit,
            });
        }
    }
    message_rate_limits
}

/// `[[dynamic_peer_rate_limit_profile]]`: each class scales a static ingress rate.
pub(super) fn dynamic_profiles(
    e: &mut Errors<'_>,
    raw: &RawConfig,
    message_rate_limits: &[MessageRateLimit],
    refs: &Refs<'_>,
) -> Vec<DynamicPeerRateLimit> {
    let all_message_limits_valid = raw.message_limits_failed == 0
        && raw.message_rate_limits.len() == message_rate_limits.len();
    let mut dynamic_peer_rate_limits = Vec::new();
    let mut seen_dyn = HashMap::new();
    for Item { v: d, span } in &raw.dynamic_profiles {
        let target = refs.target(
            e,
            "dynamic_peer_rate_limit_profile",
            span,
            &d.peer,
            &d.group,
        );
        let mut classes = Vec::new();
        let mut class_spans: Vec<(MessageClass, Span)> = Vec::new();
        match &d.classes {
            None => {
                for c in [MessageClass::GX_CCR_I, MessageClass::GX_CCR_T] {
                    classes.push(c);
                    class_spans.push((c, span.clone()));
                }
            }
            Some(list) if list.items.is_empty() && list.failed == 0 => {
                e.at(
                    &list.span,
                    "classes is empty; omit it for the default (Gx CCR-I and Gx CCR-T)",
                );
            }
            Some(list) => {
                let mut seen = HashMap::new();
                for c in &list.items {
                    let RawClass {
                        application,
                        command,
                        request_type,
                    } = &c.v;
                    if let Some(mc) = class(e, application, command, request_type)
                        && unique(e, &mut seen, mc, &c.span, || {
                            format!("class {mc} listed twice")
                        })
                    {
                        classes.push(mc);
                        class_spans.push((mc, c.span.clone()));
                    }
                }
            }
        }
        let Some(target) = target else { continue };
        // Dynamic throttling scales a static ingress rate: each class needs one (only
        // checked when every message profile parsed, to avoid follow-on errors).
        if all_message_limits_valid {
            for (mc, cspan) in &class_spans {
                let has_static = message_rate_limits.iter().any(|m| {
                    m.target == target && m.direction == Direction::Ingress && m.class == *mc
                });
                if !has_static {
                    e.at(
                        cspan,
                        format!(
                            "no static rate for dynamic throttling to scale: add an ingress \
                             [[message_rate_limit_profile]] for {} {mc}",
                            target_label(&target)
                        ),
                    );
                }
            }
        }
        if unique(e, &mut seen_dyn, target.clone(), span, || {
            format!(
                "second [[dynamic_peer_rate_limit_profile]] for {}",
                target_label(&target)
            )
        }) {
            dynamic_peer_rate_limits.push(DynamicPeerRateLimit { target, classes });
        }
    }
    dynamic_peer_rate_limits
}
