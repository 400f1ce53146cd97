//! The agent protects itself (docs/architecture.md §13): past its own capacity, a relay
//! that keeps reading works on requests whose gateways have already given up. The
//! overload control keeps the agent's work at what it can do in time, shedding the
//! least valuable requests at the cheapest point that can see them.
//!
//! - **Signal** ([`Controller`], sans-IO): how late the agent is — the age of a message
//!   when the core takes it (stamped when its bytes were read), the smallest over each
//!   100 ms interval (a standing queue, not a burst), and the kernel's queue before the
//!   readers in time at the rate they read.
//! - **Control**: when the delay first passes the target the agent admits (routes) the
//!   most it got done per interval over the last second, less a tenth, and keeps
//!   cutting (in proportion to how far past the target) while the queue does not drain
//!   (only half-way down from the most it routed while only the readers are late); at
//!   or below the target the admitted rate grows additively, until everything offered
//!   fits again.
//! - **Priority**: the admitted rate goes to the requests of the highest priority first
//!   (RFC 7944's scale: 0 the highest, 15 the lowest; a request's DRMP AVP, else its
//!   class's: terminations 4, updates 8, new sessions 12 by default). What does not fit
//!   is each priority's **shed share** ([`ShedPlan`]).
//! - **Where**: the XDP fast path judges every request it classifies against the shares
//!   (`dra-ebpf/src/overload.rs`) and marks the shed ones; where it is blind (TLS, no
//!   XDP) the agent's readers do the same before decoding ([`ShedTable`]). A shed
//!   request is answered 3004 DIAMETER_TOO_BUSY from its bytes while the answer budget
//!   (`answer_ratio` × the admitted rate) lasts, so the gateway may try its other DRA at
//!   once; beyond it, the reader discards it unread (the gateway's own timer decides).
//! - **Levels** (operators, alerts, the log): 0 nothing shed; 1 only priorities at or
//!   below `levels[0]` (new sessions); 2 down to `levels[1]` (updates); 3 more (terminations).
//!   Level 1 may be reached at once, level 2 after `escalate` of sustained lateness, level
//!   3 after twice that; a level falls after `hold` at a lower one.

pub mod controller;
pub mod table;

use dra_common::wire::MsgClass;

pub use controller::{Controller, INTERVAL, Settings, Tick};
pub use table::{Shed, ShedTable};

/// Priorities: RFC 7944's DRMP scale, 0 the highest … 15 the lowest.
pub const PRIORITIES: usize = dra_common::maps::PRIORITIES;

/// Counts per priority.
pub type Counts = [u64; PRIORITIES];

/// What the fast path and the readers apply: the share of each priority's requests to
/// shed, and how many shed requests per second are answered (3004); the rest are
/// discarded.
#[derive(Clone, Debug, PartialEq)]
pub struct ShedPlan {
    /// 0 (nothing) ..= 1 (every request of the priority).
    pub shares: [f64; PRIORITIES],
    /// 3004 answers per second at most.
    pub answer_rate: f64,
}

impl ShedPlan {
    /// Nothing shed.
    pub const NONE: ShedPlan = ShedPlan {
        shares: [0.0; PRIORITIES],
        answer_rate: 0.0,
    };

    /// Whether any share is shed.
    pub fn is_active(&self) -> bool {
        self.shares.iter().any(|s| *s > 0.0)
    }

    /// The shares in the fast path's units (1/[`dra_common::maps::SHARE_ONE`]).
    pub fn units(&self) -> [u32; PRIORITIES] {
        let one = f64::from(dra_common::maps::SHARE_ONE);
        self.shares
            .map(|s| (s.clamp(0.0, 1.0) * one).round() as u32)
    }
}

/// One class with a priority of its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassPriority {
    pub class: MsgClass,
    /// 0 (highest) ..= 15 (lowest).
    pub priority: u8,
    /// Its metrics label (`gx_ccr_i`).
    pub label: String,
}

/// The overload priority of every class: those listed, else `default`. Class *i* of
/// `classes` counts its shed requests at index *i* + 1 (0: every other class, "other").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Priorities {
    pub classes: Vec<ClassPriority>,
    pub default: u8,
}

impl Priorities {
    /// The class label of counter index `i`.
    pub fn label_of(&self, i: usize) -> &str {
        match i.checked_sub(1).and_then(|j| self.classes.get(j)) {
            Some(c) => &c.label,
            None => crate::metrics::CLASS_OTHER,
        }
    }

    /// The priority and counter index of `class`.
    pub fn of(&self, class: MsgClass) -> (u8, usize) {
        match self.classes.iter().position(|c| c.class == class) {
            Some(i) => (self.classes[i].priority, i + 1),
            None => (self.default, 0),
        }
    }
}

/// Shed requests of one class, by action, so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShedCount {
    pub class: String,
    /// Answered 3004.
    pub answered: u64,
    /// Discarded (beyond the answer budget).
    pub discarded: u64,
}

/// Where shed plans are applied and what was judged is counted: the fast path's maps,
/// or the agent's readers' [`ShedTable`].
pub trait ShedPort: Send + Sync + std::fmt::Debug {
    /// Requests judged so far, per priority.
    fn judged(&self) -> Counts;
    /// Requests shed so far, per class and action.
    fn shed(&self) -> Vec<ShedCount>;
    /// Applies a plan (nothing shed: [`ShedPlan::NONE`]).
    fn apply(&self, plan: &ShedPlan) -> Result<(), String>;
    /// The classes' priorities; `enabled` false turns the judging off.
    fn set_priorities(&self, p: &Priorities, enabled: bool) -> Result<(), String>;
}
