//! The agent's overload shedding (docs/architecture.md §13), applied to every request
//! before its limits: the agent writes a shed share per priority (`OVERLOAD`) and each
//! class's priority (`CLASS_PRIORITY`); a request's priority is its DRMP AVP's (RFC
//! 7944), else its class's, else the default. Every request judged is counted per
//! priority (the agent reads what is offered from that). Of the requests of a priority,
//! its share is shed deterministically: a per-CPU credit grows by the share with each
//! request and one is shed whenever it reaches one — exactly the share of each CPU's
//! requests, in order, with no random draw. A shed request is marked to be answered
//! 3004 while the answer budget's bucket has room, else to be discarded by the agent.
//! Base-protocol messages (application 0: CER, DWR, DPR) are never shed.

use dra_common::{
    maps::{ClassOverload, PRIORITIES, SHARE_ONE},
    wire::{MsgClass, app},
};

use crate::{
    admit::Verdict,
    bucket,
    maps::{CLASS_PRIORITY, OVERLOAD, OVERLOAD_CPU, SHED_COUNTS},
};

/// What the overload control does with a request of `class` (DRMP priority + 1 in
/// `drmp`, 0 without): [`Verdict::Admit`] (its limits decide), [`Verdict::Shed`] or
/// [`Verdict::Discard`].
#[inline(always)]
pub fn judge(class: MsgClass, drmp: u8, now: u64) -> Verdict {
    let Some(cfg) = OVERLOAD.get(0) else {
        return Verdict::Admit;
    };
    if cfg.enabled == 0 || class.app_id == app::COMMON {
        return Verdict::Admit;
    }
    // SAFETY: read-only copy of a plain value.
    let own = match unsafe { CLASS_PRIORITY.get(class) } {
        Some(c) => *c,
        None => ClassOverload {
            priority: cfg.default_priority,
            index: 0,
        },
    };
    let prio = if drmp != 0 {
        drmp as u32 - 1
    } else {
        own.priority
    };
    // Bounded for the verifier (and for a bad map value): 16 priorities.
    let prio = (prio as usize) & (PRIORITIES - 1);
    let Some(cpu) = OVERLOAD_CPU.get_ptr_mut(0) else {
        return Verdict::Admit;
    };
    // SAFETY: this CPU's value of a per-CPU array; XDP runs to completion.
    let cpu = unsafe { &mut *cpu };
    cpu.judged[prio] += 1;
    let share = cfg.shed[prio];
    if cfg.active == 0 || share == 0 {
        return Verdict::Admit;
    }
    let credit = &mut cpu.credit[prio];
    *credit = credit.saturating_add(if share > SHARE_ONE { SHARE_ONE } else { share });
    if *credit < SHARE_ONE {
        return Verdict::Admit;
    }
    *credit -= SHARE_ONE;
    let v = if bucket::take_loosely(cfg.answer_slot, now) {
        Verdict::Shed
    } else {
        Verdict::Discard
    };
    if let Some(c) = SHED_COUNTS.get_ptr_mut(own.index) {
        // SAFETY: this CPU's value of a per-CPU array.
        let c = unsafe { &mut *c };
        if v == Verdict::Shed {
            c.answered += 1;
        } else {
            c.discarded += 1;
        }
    }
    v
}
