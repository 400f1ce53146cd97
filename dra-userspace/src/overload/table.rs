//! The agent's own judge of the shed plan, for the connections the XDP fast path cannot
//! read (TLS, or no XDP attached): the same rule as `dra-ebpf/src/overload.rs`, applied
//! by the readers (through [`crate::limiter::Limiter`]) to each framed request before it
//! is decoded. A priority's share is shed deterministically (a credit grows by the share
//! per request; one is shed each time it reaches one); a shed request is answered while
//! the answer budget (a GCRA bucket of `answer_rate` per second) has room, else
//! discarded.

use std::collections::HashMap;
use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use dra_common::maps::{MAX_CLASS_PRIORITIES, SHARE_ONE};
use dra_common::wire::{MsgClass, app};

use super::{Counts, PRIORITIES, Priorities, ShedCount, ShedPlan, ShedPort};

/// What the overload control does with one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shed {
    /// Not shed: its limits decide.
    No,
    /// Shed, answered 3004.
    Answer,
    /// Shed beyond the answer budget: discarded.
    Discard,
}

/// The readers' shed table (see the module docs).
#[derive(Debug)]
pub struct ShedTable {
    enabled: AtomicBool,
    active: AtomicBool,
    shares: [AtomicU32; PRIORITIES],
    credit: [AtomicU32; PRIORITIES],
    judged: [AtomicU64; PRIORITIES],
    /// The answer budget: GCRA interval (0: none) and TAT.
    answer_interval_ns: AtomicU64,
    answer_tat: AtomicU64,
    priorities: RwLock<ClassTable>,
    /// (answered, discarded) by counter index.
    counts: Vec<(AtomicU64, AtomicU64)>,
}

/// Each class's (priority, counter index), the default priority, and the priorities
/// they came from (for the counters' labels).
type ClassTable = (HashMap<MsgClass, (u8, usize)>, u8, Priorities);

/// A burst of this many answers of the budget may go at once.
const ANSWER_BURST: f64 = 0.05;

impl Default for ShedTable {
    fn default() -> Self {
        ShedTable::new()
    }
}

impl ShedTable {
    /// A table that judges nothing until [`ShedPort::set_priorities`] enables it.
    pub fn new() -> ShedTable {
        let p = Priorities {
            classes: Vec::new(),
            default: 8,
        };
        ShedTable {
            enabled: AtomicBool::new(false),
            active: AtomicBool::new(false),
            shares: std::array::from_fn(|_| AtomicU32::new(0)),
            credit: std::array::from_fn(|_| AtomicU32::new(0)),
            judged: std::array::from_fn(|_| AtomicU64::new(0)),
            answer_interval_ns: AtomicU64::new(0),
            answer_tat: AtomicU64::new(0),
            priorities: RwLock::new((HashMap::new(), p.default, p)),
            counts: (0..MAX_CLASS_PRIORITIES)
                .map(|_| (AtomicU64::new(0), AtomicU64::new(0)))
                .collect(),
        }
    }

    /// Judges one request of `class` (its DRMP priority `drmp`, if it has one) at
    /// `now_ns` (the limiter's clock).
    pub fn judge(&self, class: MsgClass, drmp: Option<u8>, now_ns: u64) -> Shed {
        if !self.enabled.load(Ordering::Relaxed) || class.app_id == app::COMMON {
            return Shed::No;
        }
        let (own, index) = {
            let p = self.priorities.read().expect("priorities");
            p.0.get(&class).copied().unwrap_or((p.1, 0))
        };
        let prio = usize::from(drmp.unwrap_or(own)) & (PRIORITIES - 1);
        self.judged[prio].fetch_add(1, Ordering::Relaxed);
        if !self.active.load(Ordering::Relaxed) {
            return Shed::No;
        }
        let share = self.shares[prio].load(Ordering::Relaxed).min(SHARE_ONE);
        if share == 0 {
            return Shed::No;
        }
        let mut shed = false;
        let _ = self.credit[prio].fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
            let c = c.saturating_add(share);
            shed = c >= SHARE_ONE;
            Some(if shed { c - SHARE_ONE } else { c })
        });
        if !shed {
            return Shed::No;
        }
        let v = if self.answer_fits(now_ns) {
            Shed::Answer
        } else {
            Shed::Discard
        };
        if let Some((a, d)) = self.counts.get(index) {
            match v {
                Shed::Answer => a.fetch_add(1, Ordering::Relaxed),
                _ => d.fetch_add(1, Ordering::Relaxed),
            };
        }
        v
    }

    /// Charges one answer of the budget if it fits ([`dra_common::gcra`]).
    fn answer_fits(&self, now: u64) -> bool {
        let t = self.answer_interval_ns.load(Ordering::Relaxed);
        if t == 0 {
            return false;
        }
        let tolerance = t.saturating_mul(tolerance_of(t));
        self.answer_tat
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |tat| {
                dra_common::gcra::conforms(tat, now, t, tolerance)
            })
            .is_ok()
    }
}

/// The answer budget's burst, in intervals: [`ANSWER_BURST`] of a second's worth.
fn tolerance_of(interval_ns: u64) -> u64 {
    let per_s = 1e9 / interval_ns as f64;
    (per_s * ANSWER_BURST).floor().max(0.0) as u64
}

/// The GCRA interval of `rate` per second (0: no budget).
pub(crate) fn interval_of(rate: f64) -> u64 {
    if rate > 0.0 {
        (1e9 / rate).round().max(1.0) as u64
    } else {
        0
    }
}

impl ShedPort for ShedTable {
    fn judged(&self) -> Counts {
        std::array::from_fn(|i| self.judged[i].load(Ordering::Relaxed))
    }

    fn shed(&self) -> Vec<ShedCount> {
        let p = self.priorities.read().expect("priorities");
        (0..=p.2.classes.len())
            .map(|i| ShedCount {
                class: p.2.label_of(i).to_owned(),
                answered: self.counts[i].0.load(Ordering::Relaxed),
                discarded: self.counts[i].1.load(Ordering::Relaxed),
            })
            .collect()
    }

    fn apply(&self, plan: &ShedPlan) -> Result<(), String> {
        for (s, u) in self.shares.iter().zip(plan.units()) {
            s.store(u, Ordering::Relaxed);
        }
        self.answer_interval_ns
            .store(interval_of(plan.answer_rate), Ordering::Relaxed);
        self.active.store(plan.is_active(), Ordering::Relaxed);
        Ok(())
    }

    fn set_priorities(&self, p: &Priorities, enabled: bool) -> Result<(), String> {
        let map = p
            .classes
            .iter()
            .take(MAX_CLASS_PRIORITIES as usize - 1)
            .enumerate()
            .map(|(i, c)| (c.class, (c.priority, i + 1)))
            .collect();
        *self.priorities.write().expect("priorities") = (map, p.default, p.clone());
        self.enabled.store(enabled, Ordering::Relaxed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::overload::ClassPriority;

    fn table() -> ShedTable {
        let t = ShedTable::new();
        let p = Priorities {
            classes: vec![
                ClassPriority {
                    class: MsgClass::gx_ccr(1),
                    priority: 12,
                    label: "gx_ccr_i".into(),
                },
                ClassPriority {
                    class: MsgClass::gx_ccr(3),
                    priority: 4,
                    label: "gx_ccr_t".into(),
                },
            ],
            default: 8,
        };
        t.set_priorities(&p, true).unwrap();
        t
    }

    /// A quarter of priority 12 shed, exactly and in order; priority 4 untouched; the
    /// DRMP priority overrides the class's; base-protocol messages are never judged.
    #[test]
    fn each_priority_loses_exactly_its_share() {
        let t = table();
        let mut plan = ShedPlan::NONE;
        plan.shares[12] = 0.25;
        plan.answer_rate = 1e6;
        t.apply(&plan).unwrap();
        let i: Vec<Shed> = (0..8)
            .map(|_| t.judge(MsgClass::gx_ccr(1), None, 0))
            .collect();
        assert_eq!(i.iter().filter(|v| **v == Shed::Answer).count(), 2, "{i:?}");
        assert!((0..8).all(|_| t.judge(MsgClass::gx_ccr(3), None, 0) == Shed::No));
        // A CCR-T carrying DRMP 12 is judged as priority 12.
        let d: Vec<Shed> = (0..4)
            .map(|_| t.judge(MsgClass::gx_ccr(3), Some(12), 0))
            .collect();
        assert_eq!(d.iter().filter(|v| **v != Shed::No).count(), 1, "{d:?}");
        assert_eq!(t.judge(MsgClass::new(0, 280, 0), None, 0), Shed::No);
        let j = t.judged();
        assert_eq!((j[12], j[4]), (12, 8));
        let shed = t.shed();
        assert_eq!(shed[1].class, "gx_ccr_i");
        assert_eq!((shed[1].answered, shed[2].answered), (2, 1));
    }

    /// Beyond the answer budget a shed request is discarded.
    #[test]
    fn beyond_the_answer_budget_shed_requests_are_discarded() {
        let t = table();
        let mut plan = ShedPlan::NONE;
        plan.shares[12] = 1.0;
        plan.answer_rate = 10.0;
        t.apply(&plan).unwrap();
        // 100 requests within 1 ms: one answer fits (burst of 5 % of 10/s = 0), the
        // rest are discarded.
        let v: Vec<Shed> = (0..100)
            .map(|k| t.judge(MsgClass::gx_ccr(1), None, k * 10_000))
            .collect();
        assert_eq!(v.iter().filter(|s| **s == Shed::Answer).count(), 1);
        assert_eq!(v.iter().filter(|s| **s == Shed::Discard).count(), 99);
        // A second later ten more answers fit.
        let later: Vec<Shed> = (0..10)
            .map(|k| t.judge(MsgClass::gx_ccr(1), None, 1_000_000_000 + k * 100_000_000))
            .collect();
        assert!(later.iter().all(|s| *s == Shed::Answer), "{later:?}");
        t.apply(&ShedPlan::NONE).unwrap();
        assert_eq!(t.judge(MsgClass::gx_ccr(1), None, 3_000_000_000), Shed::No);
    }
}
