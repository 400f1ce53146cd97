//! Ingress limits enforced by the agent itself, for hosts where the XDP fast path is not
//! attached (no `[fast_path] interface`). Same limits, same semantics as the kernel:
//!
//! * built from the same [`Plan`] the fast path's maps are written from: peers by
//!   source prefix (longest prefix wins, as the kernel's LPM tries), one overall slot
//!   and one "other" counting slot per peer, class slots keyed by (peer id, class);
//! * a request must fit the peer's overall bucket, then its class bucket; if the class
//!   bucket is over, the overall charge is given back (`dra-ebpf/src/admit.rs`
//!   `decide`);
//! * buckets are GCRA (virtual scheduling) on one shared TAT per slot, updated with a
//!   compare-and-swap, exactly `dra-ebpf/src/bucket.rs` ([`gcra`] is that rule as a
//!   pure function);
//! * every request from a known peer is charged (base-protocol requests such as CER and
//!   DWR too, on the overall bucket, as the kernel does); answers are never limited;
//! * only connections to a configured Diameter port are looked at (the kernel sees
//!   traffic *to* those ports: the agent's own outbound connections are not limited);
//!   a source that is no peer's follows `unknown_peer` (`pass`, or `drop`: every
//!   message it sends is discarded);
//! * classification is [`dra_common::wire::classify`], the scanner the kernel runs.
//!
//! Over-limit requests are marked with [`flags::RATE_LIMIT_MARK`] (action `reject`: the
//! agent's marked path answers them) or held back (action `drop`): as XDP_DROP on TCP is
//! back-pressure, not loss (the sender retransmits; docs/architecture.md §3), the reader
//! stops reading that connection until the buckets have room for the held request
//! ([`Filter::Hold`], [`Limiter::retry`]), so TCP flow control slows the sender and
//! nothing is lost. A held request counts once as `dropped`, and as seen/admitted when
//! it passes. Userspace has no packets: each message is judged on its own (the kernel's
//! "all-or-nothing per packet" has no equivalent). An unknown source under
//! `unknown_peer = "drop"` is the one case where messages are discarded.
//!
//! Before its limits every request is judged against the agent's overload control
//! ([`ShedTable`], `crate::overload`; as `dra-ebpf/src/overload.rs` does in the kernel):
//! a shed request charges no bucket and is marked to be answered 3004 or discarded.
//!
//! The DRL controller rewrites rates live with [`Limiter::set_rate`] (the slot keeps
//! its TAT, as `Maps::set_rate` keeps the kernel's state).

use std::{
    collections::{BTreeSet, HashMap},
    net::IpAddr,
    sync::{
        RwLock,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use dra_common::{
    maps::{Action, BucketConfig, ClassCounters, MAX_SLOTS, NO_SLOT, PeerInfo, UnknownPeerPolicy},
    stats::Counter,
    wire::{self, MsgClass, flags},
};
use ipnet::IpNet;

use crate::dataplane::{Plan, Slot, plan::ClassKey};
use crate::overload::{Shed, ShedTable};

/// What one bucket charge did (the kernel's `bucket::Charge`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Charge {
    /// No bucket in this slot, or the slot only counts (interval 0).
    Unlimited,
    /// Conforms; the slot's TAT becomes `tat`.
    Charged {
        /// The new theoretical arrival time.
        tat: u64,
    },
    /// Does not fit; nothing charged.
    Over {
        /// What the slot's profile does with it.
        action: Action,
    },
}

/// One message against a slot's bucket: [`dra_common::gcra::conforms`], the rule the
/// kernel's `bucket::charge` applies too, with the slot's action when it does not fit.
/// An interval of 0 is unlimited. Pure: time is an argument.
pub fn gcra(tat: u64, now_ns: u64, cfg: &BucketConfig) -> Charge {
    if cfg.interval_ns == 0 {
        return Charge::Unlimited;
    }
    match dra_common::gcra::conforms(tat, now_ns, cfg.interval_ns, cfg.tolerance_ns) {
        Some(tat) => Charge::Charged { tat },
        None => Charge::Over {
            action: Action::from_u32(cfg.action),
        },
    }
}

/// What the limiter decided for one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Fits every bucket (or is not limited): deliver as is.
    Admit,
    /// Over a `reject` limit: deliver marked, the agent answers it.
    Mark,
    /// Over a `drop` limit: discard.
    Drop,
    /// Shed by the overload control: deliver marked, the agent answers 3004.
    Shed,
    /// Shed beyond the answer budget: deliver marked, the reader discards it.
    Discard,
}

/// What the reader does with one framed message ([`Limiter::filter`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Filter {
    /// Deliver it (possibly marked).
    Pass,
    /// Discard it (an unknown source under `unknown_peer = "drop"`).
    Discard,
    /// Over a `drop` limit: keep it, read nothing more from the connection, and ask
    /// [`Limiter::retry`] again after [`Limiter::hold_for`].
    Hold,
}

/// How the limiter treats one connection, decided once when it is accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// A configured peer: its requests are charged.
    Peer(PeerInfo),
    /// Not a configured Diameter port: not looked at.
    NotDiameter,
    /// An unknown source under `unknown_peer = "pass"`: passed, counted.
    UnknownPass,
    /// An unknown source under `unknown_peer = "drop"`: everything it sends is
    /// discarded.
    DropAll,
}

/// One slot: shared TAT, its bucket config (rewritten live) and its counters.
#[derive(Debug, Default)]
struct SlotState {
    tat: AtomicU64,
    interval_ns: AtomicU64,
    tolerance_ns: AtomicU64,
    action: AtomicU64,
    seen: AtomicU64,
    admitted: AtomicU64,
    marked: AtomicU64,
    dropped: AtomicU64,
    bytes: AtomicU64,
    shed_answered: AtomicU64,
    shed_discarded: AtomicU64,
}

impl SlotState {
    /// The slot's bucket. The three fields are read separately: a rate change racing
    /// with a charge may pair an old interval with a new tolerance for that one
    /// charge, as a BPF array update racing with the kernel's read does.
    fn config(&self) -> BucketConfig {
        BucketConfig {
            interval_ns: self.interval_ns.load(Ordering::Relaxed),
            tolerance_ns: self.tolerance_ns.load(Ordering::Relaxed),
            action: self.action.load(Ordering::Relaxed) as u32,
            _pad: 0,
        }
    }

    /// A new bucket in a reused slot: full, no counts.
    fn reset(&self) {
        for a in [
            &self.tat,
            &self.seen,
            &self.admitted,
            &self.marked,
            &self.dropped,
            &self.bytes,
        ] {
            a.store(0, Ordering::Relaxed);
        }
    }

    fn set_config(&self, c: BucketConfig) {
        self.interval_ns.store(c.interval_ns, Ordering::Relaxed);
        self.tolerance_ns.store(c.tolerance_ns, Ordering::Relaxed);
        self.action.store(u64::from(c.action), Ordering::Relaxed);
    }

    /// Charges one message at `now` if it fits (compare-and-swap on the TAT: exact
    /// when several connections of one peer are read on several threads).
    fn charge(&self, now: u64) -> Charge {
        let cfg = self.config();
        let mut cur = self.tat.load(Ordering::Relaxed);
        loop {
            match gcra(cur, now, &cfg) {
                Charge::Charged { tat } => {
                    match self.tat.compare_exchange_weak(
                        cur,
                        tat,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => return Charge::Charged { tat },
                        Err(v) => cur = v,
                    }
                }
                other => return other,
            }
        }
    }

    /// Gives one charge back (the kernel's `bucket::refund`).
    fn refund(&self) {
        let d = self.interval_ns.load(Ordering::Relaxed);
        let _ = self
            .tat
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                Some(dra_common::gcra::refund(t, d))
            });
    }

    fn count(&self, v: Verdict, len: u64) {
        if v == Verdict::Drop {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.seen.fetch_add(1, Ordering::Relaxed);
        match v {
            Verdict::Admit => &self.admitted,
            Verdict::Shed => &self.shed_answered,
            Verdict::Discard => &self.shed_discarded,
            _ => &self.marked,
        }
        .fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(len, Ordering::Relaxed);
    }

    fn counters(&self) -> ClassCounters {
        ClassCounters {
            seen: self.seen.load(Ordering::Relaxed),
            admitted: self.admitted.load(Ordering::Relaxed),
            marked: self.marked.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            shed_answered: self.shed_answered.load(Ordering::Relaxed),
            shed_discarded: self.shed_discarded.load(Ordering::Relaxed),
        }
    }
}

/// Global counters, named like the fast path's ([`Counter`]), counted per message.
#[derive(Debug, Default)]
struct Globals {
    requests: AtomicU64,
    answers: AtomicU64,
    marked: AtomicU64,
    dropped: AtomicU64,
    malformed: AtomicU64,
    unknown_pass: AtomicU64,
    unknown_drop: AtomicU64,
    shed_answered: AtomicU64,
    shed_discarded: AtomicU64,
}

/// What a reload replaces ([`Limiter::relayout`]): ports, sources, class slots,
/// labels. Bucket states live in [`Limiter`]'s slots, by index, and stay.
#[derive(Debug)]
struct Layout {
    ports: [u16; 4],
    unknown: UnknownPeerPolicy,
    /// (prefix, peer), longest prefix first.
    prefixes: Vec<(IpNet, PeerInfo)>,
    class_slots: HashMap<(u32, ClassKey), u32>,
    /// Ingress slots with their metrics labels (owner, class), published as counters.
    labels: Vec<(u32, String, String)>,
}

impl Layout {
    fn new(plan: &Plan) -> Layout {
        let mut prefixes: Vec<(IpNet, PeerInfo)> = plan
            .peers
            .iter()
            .flat_map(|p| p.prefixes.iter().map(move |n| (n.trunc(), p.info)))
            .collect();
        // Longest prefix first, as the LPM trie matches (the config refuses
        // overlapping prefixes of different peers, so this only orders one peer's).
        prefixes.sort_by_key(|(n, _)| std::cmp::Reverse(n.prefix_len()));
        let mut ingress: BTreeSet<u32> = BTreeSet::new();
        for p in &plan.peers {
            ingress.insert(p.info.overall_slot);
            ingress.insert(p.info.other_slot);
        }
        ingress.extend(plan.class_slots.values().copied());
        let labels = ingress
            .into_iter()
            .filter_map(|i| {
                plan.slot_at(i)
                    .map(|s| (i, s.owner.clone(), s.class_label.clone()))
            })
            .collect();
        Layout {
            ports: plan.global.ports,
            unknown: if plan.global.unknown_peer == UnknownPeerPolicy::Drop as u32 {
                UnknownPeerPolicy::Drop
            } else {
                UnknownPeerPolicy::Pass
            },
            prefixes,
            class_slots: plan.class_slots.iter().map(|(k, v)| (*k, *v)).collect(),
            labels,
        }
    }
}

/// The userspace limiter: shared by every connection's reader (`Arc<Limiter>`).
#[derive(Debug)]
pub struct Limiter {
    epoch: Instant,
    layout: RwLock<Layout>,
    /// Every slot index the fast path has ([`MAX_SLOTS`]): a reload's new buckets
    /// take free ones.
    slots: Vec<SlotState>,
    globals: Globals,
    /// The overload control's shed plan, judged first (`crate::overload`).
    shed: std::sync::Arc<ShedTable>,
}

impl Limiter {
    /// The limiter for `plan`, every bucket at its static rate and full.
    pub fn new(plan: &Plan) -> Limiter {
        let slots: Vec<SlotState> = (0..MAX_SLOTS).map(|_| SlotState::default()).collect();
        for s in &plan.slots {
            if let Some(st) = slots.get(s.index as usize) {
                st.set_config(s.bucket_at(None));
            }
        }
        Limiter {
            epoch: Instant::now(),
            layout: RwLock::new(Layout::new(plan)),
            slots,
            globals: Globals::default(),
            shed: std::sync::Arc::new(ShedTable::new()),
        }
    }

    /// The shed table this limiter judges requests against first: the overload
    /// control's port for the connections it reads ([`crate::overload::ShedPort`]).
    pub fn shed_table(&self) -> std::sync::Arc<ShedTable> {
        self.shed.clone()
    }

    /// A reload: `plan` (renumbered onto the running one,
    /// [`Plan::remap_onto`]) replaces the layout; every slot of it gets its static
    /// rate (the caller then applies the DRL throttle), the `fresh` ones start full
    /// with zero counters, the others keep their state. Connections accepted before
    /// keep their peer's slots (a kept peer's do not move).
    pub fn relayout(&self, plan: &Plan, fresh: &[u32]) {
        for &f in fresh {
            if let Some(s) = self.slot(f) {
                s.reset();
            }
        }
        for s in &plan.slots {
            if let Some(st) = self.slot(s.index) {
                st.set_config(s.bucket_at(None));
            }
        }
        *self.layout.write().expect("limiter layout") = Layout::new(plan);
    }

    /// Nanoseconds since the limiter was built: the clock [`Limiter::admit`] is fed
    /// from in the agent.
    pub fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// How a connection from `remote` to our port `local_port` is treated: only
    /// traffic to a configured Diameter port is looked at; the source is matched by
    /// longest prefix (IPv4-mapped IPv6 addresses as IPv4, as the kernel sees them).
    pub fn source(&self, remote: IpAddr, local_port: u16) -> Source {
        let layout = self.layout.read().expect("limiter layout");
        if local_port == 0 || !layout.ports.contains(&local_port) {
            return Source::NotDiameter;
        }
        let ip = remote.to_canonical();
        match layout.prefixes.iter().find(|(n, _)| n.contains(&ip)) {
            Some((_, info)) => Source::Peer(*info),
            None if layout.unknown == UnknownPeerPolicy::Drop => Source::DropAll,
            None => Source::UnknownPass,
        }
    }

    /// Judges one framed message from `src` at `now_ns` and applies the verdict to the
    /// frame: sets the mark bit for [`Verdict::Mark`]. Returns false when the frame
    /// must be discarded.
    pub fn filter(&self, src: &Source, frame: &mut [u8], now_ns: u64) -> Filter {
        match src {
            Source::NotDiameter => Filter::Pass,
            Source::UnknownPass => {
                self.globals.unknown_pass.fetch_add(1, Ordering::Relaxed);
                Filter::Pass
            }
            Source::DropAll => {
                self.globals.unknown_drop.fetch_add(1, Ordering::Relaxed);
                Filter::Discard
            }
            Source::Peer(peer) => match self.admit(peer, frame, now_ns) {
                Verdict::Admit => Filter::Pass,
                Verdict::Mark => {
                    mark(frame, flags::RATE_LIMIT_MARK);
                    Filter::Pass
                }
                Verdict::Shed => {
                    mark(frame, flags::OVERLOAD_SHED);
                    Filter::Pass
                }
                Verdict::Discard => {
                    mark(frame, flags::OVERLOAD_DISCARD);
                    Filter::Pass
                }
                Verdict::Drop => Filter::Hold,
            },
        }
    }

    /// A held request again (see [`Filter::Hold`]): true when it now fits (counted as
    /// seen and admitted, or marked if its limit became `reject` meanwhile), false if
    /// it is still over its `drop` limit (not counted again).
    pub fn retry(&self, src: &Source, frame: &mut [u8], now_ns: u64) -> bool {
        let Source::Peer(peer) = src else { return true };
        let Ok(c) = wire::classify(&&*frame, 0) else {
            return true;
        };
        let slot = self.class_slot(peer, c.class);
        let v = self.decide(peer, slot, now_ns);
        if v == Verdict::Drop {
            return false;
        }
        let len = u64::from(c.header.length);
        for s in [self.slot(slot), self.slot(peer.overall_slot)]
            .into_iter()
            .flatten()
        {
            s.count(v, len);
        }
        if v == Verdict::Mark {
            self.globals.marked.fetch_add(1, Ordering::Relaxed);
            mark(frame, flags::RATE_LIMIT_MARK);
        }
        true
    }

    /// How long a held request from `src` should wait before the next
    /// [`Limiter::retry`]: until its peer's overall bucket and its class bucket both
    /// have room for half their burst again (one message with a burst of 1), so that a
    /// held connection wakes once per half burst rather than once per message; at least
    /// 1 ms, at most 100 ms (a rate raised meanwhile is seen soon). Waiting longer than
    /// the first fit changes no count: every message is still charged by the GCRA.
    pub fn hold_for(&self, src: &Source, frame: &[u8], now_ns: u64) -> Duration {
        let mut wait = 0u64;
        if let (Source::Peer(peer), Ok(c)) = (src, wire::classify(&frame, 0)) {
            let slot = self.class_slot(peer, c.class);
            for s in [self.slot(slot), self.slot(peer.overall_slot)]
                .into_iter()
                .flatten()
            {
                let cfg = s.config();
                // GCRA: one message fits once tat − now ≤ τ; about half the burst
                // (τ = (burst − 1)·T) once tat − now ≤ τ/2.
                let ready = s
                    .tat
                    .load(Ordering::Relaxed)
                    .saturating_sub(cfg.tolerance_ns / 2);
                wait = wait.max(ready.saturating_sub(now_ns));
            }
        }
        Duration::from_nanos(wait).clamp(Duration::from_millis(1), Duration::from_millis(100))
    }

    /// Admission of one framed message from `peer` at `now_ns` (charges the buckets,
    /// counts). Answers, and bytes the scanner rejects (the decoder answers those),
    /// are admitted uncharged.
    pub fn admit(&self, peer: &PeerInfo, frame: &[u8], now_ns: u64) -> Verdict {
        let c = match wire::classify(&frame, 0) {
            Ok(c) => c,
            Err(_) => {
                self.globals.malformed.fetch_add(1, Ordering::Relaxed);
                return Verdict::Admit;
            }
        };
        if !c.header.is_request() {
            self.globals.answers.fetch_add(1, Ordering::Relaxed);
            return Verdict::Admit;
        }
        self.globals.requests.fetch_add(1, Ordering::Relaxed);
        let slot = self.class_slot(peer, c.class);
        // The overload control first: a shed request charges no bucket (as in XDP).
        let v = match self.shed.judge(c.class, c.drmp(), now_ns) {
            Shed::No => self.decide(peer, slot, now_ns),
            Shed::Answer => Verdict::Shed,
            Shed::Discard => Verdict::Discard,
        };
        let len = u64::from(c.header.length);
        if let Some(s) = self.slot(slot) {
            s.count(v, len);
        }
        if let Some(s) = self.slot(peer.overall_slot) {
            s.count(v, len);
        }
        match v {
            Verdict::Admit => {}
            Verdict::Mark => {
                self.globals.marked.fetch_add(1, Ordering::Relaxed);
            }
            Verdict::Drop => {
                self.globals.dropped.fetch_add(1, Ordering::Relaxed);
            }
            Verdict::Shed => {
                self.globals.shed_answered.fetch_add(1, Ordering::Relaxed);
            }
            Verdict::Discard => {
                self.globals.shed_discarded.fetch_add(1, Ordering::Relaxed);
            }
        }
        v
    }

    /// The overall bucket, then the class bucket; a class over its limit gives the
    /// overall charge back (the kernel's `admit::decide`).
    fn decide(&self, peer: &PeerInfo, class_slot: u32, now: u64) -> Verdict {
        let overall = self.slot(peer.overall_slot);
        let o = overall.map_or(Charge::Unlimited, |s| s.charge(now));
        if let Charge::Over { action } = o {
            return verdict_of(action);
        }
        match self
            .slot(class_slot)
            .map_or(Charge::Unlimited, |s| s.charge(now))
        {
            Charge::Over { action } => {
                if let (Charge::Charged { .. }, Some(s)) = (o, overall) {
                    s.refund();
                }
                verdict_of(action)
            }
            _ => Verdict::Admit,
        }
    }

    /// The slot a message of `class` from `peer` is charged and counted on: its own,
    /// else the peer's "other" slot (the kernel's `admit::class_slot`).
    pub fn class_slot(&self, peer: &PeerInfo, class: MsgClass) -> u32 {
        let key = (
            peer.peer_id,
            (class.app_id, class.command_code, class.req_type),
        );
        self.layout
            .read()
            .expect("limiter layout")
            .class_slots
            .get(&key)
            .copied()
            .unwrap_or(peer.other_slot)
    }

    fn slot(&self, index: u32) -> Option<&SlotState> {
        if index == NO_SLOT {
            return None;
        }
        self.slots.get(index as usize)
    }

    /// Rewrites one slot's rate (the dynamic controller), keeping its TAT: mirrors
    /// `Maps::set_rate`.
    pub fn set_rate(&self, slot: &Slot, rate: f64) {
        if let Some(s) = self.slot(slot.index) {
            s.set_config(slot.bucket_at(Some(rate)));
        }
    }

    /// The bucket a slot currently has (None: no such slot).
    pub fn bucket_config(&self, slot: u32) -> Option<BucketConfig> {
        self.slot(slot).map(SlotState::config)
    }

    /// A slot's counters (None: no such slot).
    pub fn slot_counters(&self, slot: u32) -> Option<ClassCounters> {
        self.slot(slot).map(SlotState::counters)
    }

    /// Counters of every ingress slot as (owner, class label, counters): the input of
    /// [`crate::metrics::Metrics::set_fastpath_classes`], labelled as the fast path's.
    pub fn class_counters(&self) -> Vec<(String, String, ClassCounters)> {
        self.layout
            .read()
            .expect("limiter layout")
            .labels
            .iter()
            .filter_map(|(i, o, c)| self.slot_counters(*i).map(|v| (o.clone(), c.clone(), v)))
            .collect()
    }

    /// The fast path's global counters this limiter has an equivalent for, counted
    /// per message: requests, answers, marked, dropped, malformed, unknown sources.
    pub fn global_counters(&self) -> Vec<(Counter, u64)> {
        let g = &self.globals;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        vec![
            (Counter::Requests, l(&g.requests)),
            (Counter::Answers, l(&g.answers)),
            (Counter::Marked, l(&g.marked)),
            (Counter::Dropped, l(&g.dropped)),
            (Counter::MalformedDiameter, l(&g.malformed)),
            (Counter::UnknownPeerPass, l(&g.unknown_pass)),
            (Counter::UnknownPeerDrop, l(&g.unknown_drop)),
            (Counter::ShedAnswered, l(&g.shed_answered)),
            (Counter::ShedDiscarded, l(&g.shed_discarded)),
        ]
    }
}

/// Sets an in-band mark `bit`, as the kernel does: the flags byte is the first of the
/// second header word (RFC 6733 §3).
fn mark(frame: &mut [u8], bit: u8) {
    if let Some(f) = frame.get_mut(4) {
        *f |= bit;
    }
}

fn verdict_of(action: Action) -> Verdict {
    match action {
        Action::Drop => Verdict::Drop,
        Action::Reject => Verdict::Mark,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diameter::{Avp, Message, avp_code};
    use dra_common::wire::{app, cc_request_type, cmd};

    const MS: u64 = 1_000_000;
    const S: u64 = 1_000 * MS;

    fn plan(extra: &str) -> Plan {
        let text = format!(
            "[global]\norigin_host = \"dra.example\"\norigin_realm = \"example\"\n\
             diameter_ports = [3868]\n\
             unknown_peer = \"drop\"\n\n\
             [[listener]]\naddress = \"127.0.0.1:3868\"\n\n\
             [[peer]]\nname = \"pgw1\"\norigin_host = \"pgw1.example\"\nrealm = \"example\"\n\
             addresses = [\"10.0.0.0/8\"]\nrole = \"client\"\n\n\
             [[peer]]\nname = \"pgw2\"\norigin_host = \"pgw2.example\"\nrealm = \"example\"\n\
             addresses = [\"192.0.2.0/24\", \"2001:db8::/32\"]\nrole = \"client\"\n\n{extra}"
        );
        let cfg = crate::config::parse(&text, "t.toml").unwrap_or_else(|e| panic!("{e}\n{text}"));
        Plan::new(&cfg).expect("plan")
    }

    fn ccr(app_id: u32, rt: u32) -> Vec<u8> {
        Message::request(cmd::CREDIT_CONTROL, app_id, 1, 1)
            .with(Avp::utf8(avp_code::SESSION_ID, "s;1"))
            .with(Avp::utf8(avp_code::ORIGIN_HOST, "pgw1.example"))
            .with(Avp::u32(dra_common::wire::avp::CC_REQUEST_TYPE, rt))
            .try_encode()
            .expect("encode")
    }

    fn peer(l: &Limiter, ip: &str) -> PeerInfo {
        match l.source(ip.parse().expect("ip"), 3868) {
            Source::Peer(p) => p,
            other => panic!("{ip}: {other:?}"),
        }
    }

    /// A reload (`Limiter::relayout`): a kept bucket keeps its state at its new rate,
    /// a new one starts full, a new peer's source is known.
    #[test]
    fn relayout_keeps_kept_buckets_and_adds_new_ones() {
        let lim = |peer: &str, rate: u32| {
            format!(
                "[[message_rate_limit_profile]]\npeer = \"{peer}\"\ndirection = \"ingress\"\n\
                 application = \"gx\"\ncommand = \"ccr\"\nrequest_type = \"initial\"\n\
                 rate = {rate}\nburst = 2\n\n"
            )
        };
        let old = plan(&lim("pgw2", 200));
        let l = Limiter::new(&old);
        let p2 = peer(&l, "192.0.2.7");
        let f = ccr(app::GX, u32::from(cc_request_type::INITIAL));
        let slot = old.slot_of("pgw2", MsgClass::gx_ccr(1)).expect("slot");
        // Burst 2: two admitted at t = 1 s, the third marked.
        let got: Vec<Verdict> = (0..3).map(|_| l.admit(&p2, &f, S)).collect();
        assert_eq!(got, [Verdict::Admit, Verdict::Admit, Verdict::Mark]);
        let mut new = plan(&format!("{}{}", lim("pgw1", 50), lim("pgw2", 100)));
        let r = new.remap_onto(&old).expect("remap");
        l.relayout(&new, &r.fresh);
        assert_eq!(new.slot_of("pgw2", MsgClass::gx_ccr(1)), Some(slot));
        let cfg = l.bucket_config(slot).expect("config");
        assert_eq!(cfg.interval_ns, S / 100, "the new rate");
        // Same instant: the kept TAT (1 s + 10 ms) leaves room for one more at the new
        // tolerance (10 ms); a bucket reset by the reload would admit two.
        let got: Vec<Verdict> = (0..2).map(|_| l.admit(&p2, &f, S)).collect();
        assert_eq!(got, [Verdict::Admit, Verdict::Mark]);
        // pgw1's new bucket starts full.
        let p1 = peer(&l, "10.1.2.3");
        let s1 = new.slot_of("pgw1", MsgClass::gx_ccr(1)).expect("slot");
        assert!(r.fresh.contains(&s1));
        assert_eq!(l.class_slot(&p1, MsgClass::gx_ccr(1)), s1);
        let got: Vec<Verdict> = (0..3).map(|_| l.admit(&p1, &f, S)).collect();
        assert_eq!(got, [Verdict::Admit, Verdict::Admit, Verdict::Mark]);
        assert_eq!(l.slot_counters(s1).expect("counters").admitted, 2);
    }

    #[test]
    fn gcra_rate_10_burst_3_at_100_per_s_for_10_s_admits_burst_plus_rate_times_time() {
        let cfg = BucketConfig::new(10.0, 3, Action::Reject);
        let mut tat = 0;
        let mut admitted = 0;
        // 1000 arrivals, one every 10 ms, t = 0 .. 9.99 s.
        for i in 0..1000u64 {
            if let Charge::Charged { tat: t } = gcra(tat, i * 10 * MS, &cfg) {
                tat = t;
                admitted += 1;
            }
        }
        // 3 at once (the burst), then one per 100 ms at 0.1 s .. 9.9 s: 3 + 99.
        assert_eq!(admitted, 102);
    }

    #[test]
    fn gcra_unlimited_and_over_action() {
        assert_eq!(gcra(5 * S, 0, &BucketConfig::UNLIMITED), Charge::Unlimited);
        let drop = BucketConfig::new(1.0, 1, Action::Drop);
        assert_eq!(gcra(0, 0, &drop), Charge::Charged { tat: S });
        assert_eq!(
            gcra(S, S / 2, &drop),
            Charge::Over {
                action: Action::Drop
            }
        );
        assert_eq!(gcra(S, S, &drop), Charge::Charged { tat: 2 * S });
        // Idle time does not accumulate beyond the burst.
        assert_eq!(gcra(S, 100 * S, &drop), Charge::Charged { tat: 101 * S });
    }

    #[test]
    fn sources_by_longest_prefix_port_and_unknown_policy() {
        let p = plan("");
        let l = Limiter::new(&p);
        let (id1, id2) = (
            p.peer("pgw1").expect("pgw1").info.peer_id,
            p.peer("pgw2").expect("pgw2").info.peer_id,
        );
        assert_eq!(peer(&l, "10.1.2.3").peer_id, id1);
        assert_eq!(peer(&l, "192.0.2.77").peer_id, id2);
        assert_eq!(
            peer(&l, "::ffff:192.0.2.77").peer_id,
            id2,
            "IPv4-mapped is IPv4"
        );
        assert_eq!(peer(&l, "2001:db8::1").peer_id, id2);
        assert_eq!(
            l.source("198.51.100.1".parse().expect("ip"), 3868),
            Source::DropAll
        );
        assert_eq!(
            l.source("10.1.2.3".parse().expect("ip"), 3869),
            Source::NotDiameter,
            "not a Diameter port"
        );
        let mut f = ccr(app::GX, 1);
        assert_eq!(l.filter(&Source::DropAll, &mut f, 0), Filter::Discard);
        let g = l.global_counters();
        assert!(g.contains(&(Counter::UnknownPeerDrop, 1)), "{g:?}");
    }

    const GX_CCR_I: &str = "[[message_rate_limit_profile]]\npeer = \"pgw1\"\n\
        direction = \"ingress\"\napplication = \"gx\"\ncommand = \"ccr\"\n\
        request_type = \"initial\"\nrate = 10\nburst = 3\n";

    #[test]
    fn reject_marks_the_frame_and_counts_on_class_and_overall() {
        let p = plan(GX_CCR_I);
        let l = Limiter::new(&p);
        let pgw1 = Source::Peer(peer(&l, "10.0.0.1"));
        let mut marks = Vec::new();
        for _ in 0..5 {
            let mut f = ccr(app::GX, 1);
            assert_eq!(l.filter(&pgw1, &mut f, 0), Filter::Pass);
            marks.push(f[4] & flags::RATE_LIMIT_MARK != 0);
        }
        assert_eq!(marks, [false, false, false, true, true]);
        // CCR-U has no limit of its own: counted on "other", never marked.
        let mut u = ccr(app::GX, 2);
        assert_eq!(l.filter(&pgw1, &mut u, 0), Filter::Pass);
        assert_eq!(u[4] & flags::RATE_LIMIT_MARK, 0);
        // An answer is never limited nor counted per slot.
        let mut a = ccr(app::GX, 1);
        a[4] &= !flags::R;
        assert_eq!(l.filter(&pgw1, &mut a, 0), Filter::Pass);
        let i = p
            .slot_of("pgw1", MsgClass::gx_ccr(cc_request_type::INITIAL))
            .expect("slot");
        let c = l.slot_counters(i).expect("counters");
        assert_eq!((c.seen, c.admitted, c.marked, c.dropped), (5, 3, 2, 0));
        assert_eq!(c.bytes, 5 * ccr(app::GX, 1).len() as u64);
        let info = p.peer("pgw1").expect("pgw1").info;
        let o = l.slot_counters(info.overall_slot).expect("overall");
        assert_eq!((o.seen, o.admitted, o.marked), (6, 4, 2));
        let other = l.slot_counters(info.other_slot).expect("other");
        assert_eq!((other.seen, other.admitted), (1, 1));
        let labelled = l.class_counters();
        assert!(
            labelled
                .iter()
                .any(|(o, c, v)| o == "pgw1" && c == "gx_ccr_i" && v.marked == 2),
            "{labelled:?}"
        );
    }

    #[test]
    fn drop_action_holds_the_request_until_it_fits() {
        let p = plan(&GX_CCR_I.replace("burst = 3", "burst = 1\naction = \"drop\""));
        let l = Limiter::new(&p);
        let pgw1 = Source::Peer(peer(&l, "10.0.0.1"));
        let mut f = ccr(app::GX, 1);
        assert_eq!(l.filter(&pgw1, &mut f, 0), Filter::Pass);
        let mut g = ccr(app::GX, 1);
        assert_eq!(
            l.filter(&pgw1, &mut g, 0),
            Filter::Hold,
            "second within 100 ms is over: held, not discarded"
        );
        assert_eq!(
            g[4] & flags::RATE_LIMIT_MARK,
            0,
            "a held frame is not marked"
        );
        // The hint (burst 1): the bucket takes it one interval (100 ms) after the first.
        assert_eq!(l.hold_for(&pgw1, &g, 0), Duration::from_millis(100));
        assert_eq!(l.hold_for(&pgw1, &g, 60 * MS), Duration::from_millis(40));
        assert!(!l.retry(&pgw1, &mut g, 60 * MS), "still over");
        assert!(
            l.retry(&pgw1, &mut g, 100 * MS),
            "one interval later it fits"
        );
        assert_eq!(g[4] & flags::RATE_LIMIT_MARK, 0);
        let i = p.slot_of("pgw1", MsgClass::gx_ccr(1)).expect("slot");
        let c = l.slot_counters(i).expect("counters");
        // Held once (counted once, however many retries), then admitted.
        assert_eq!((c.seen, c.admitted, c.dropped), (2, 2, 1));
        let o = l
            .slot_counters(p.peer("pgw1").expect("pgw1").info.overall_slot)
            .expect("overall");
        assert_eq!((o.seen, o.admitted, o.dropped), (2, 2, 1));
    }

    #[test]
    fn a_held_connection_wakes_when_half_the_burst_is_back() {
        // 100/s (T = 10 ms), burst 5 (τ = 40 ms), drop.
        let p = plan(&GX_CCR_I.replace(
            "rate = 10\nburst = 3",
            "rate = 100\nburst = 5\naction = \"drop\"",
        ));
        let l = Limiter::new(&p);
        let pgw1 = Source::Peer(peer(&l, "10.0.0.1"));
        let pass = |f: &mut Vec<u8>, now| l.filter(&pgw1, f, now) == Filter::Pass;
        for _ in 0..5 {
            assert!(pass(&mut ccr(app::GX, 1), 0));
        }
        let mut held = ccr(app::GX, 1);
        assert_eq!(l.filter(&pgw1, &mut held, 0), Filter::Hold);
        // One would fit at 10 ms; the reader sleeps until ~half the burst is back.
        let wake = l.hold_for(&pgw1, &held, 0);
        assert_eq!(wake, Duration::from_millis(30));
        let now = 30 * MS;
        assert!(l.retry(&pgw1, &mut held, now));
        assert!(pass(&mut ccr(app::GX, 1), now));
        assert!(pass(&mut ccr(app::GX, 1), now));
        assert_eq!(
            l.filter(&pgw1, &mut ccr(app::GX, 1), now),
            Filter::Hold,
            "3 at once, then full"
        );
    }

    #[test]
    fn class_over_refunds_the_overall_charge() {
        // Overall 10/s burst 2; CCR-I 1/s burst 1.
        let extra = format!(
            "[[peer_rate_limit_profile]]\npeer = \"pgw1\"\ndirection = \"ingress\"\n\
             rate = 10\nburst = 2\n\n{}",
            GX_CCR_I.replace("rate = 10\nburst = 3", "rate = 1\nburst = 1")
        );
        let p = plan(&extra);
        let l = Limiter::new(&p);
        let info = peer(&l, "10.0.0.1");
        let i = ccr(app::GX, 1);
        let u = ccr(app::GX, 2);
        assert_eq!(l.admit(&info, &i, 0), Verdict::Admit);
        // Over its class: the overall charge is given back...
        assert_eq!(l.admit(&info, &i, 0), Verdict::Mark);
        // ...so the overall burst still has room for one CCR-U; then it is full.
        assert_eq!(l.admit(&info, &u, 0), Verdict::Admit);
        assert_eq!(l.admit(&info, &u, 0), Verdict::Mark);
        let o = l.slot_counters(info.overall_slot).expect("overall");
        assert_eq!((o.admitted, o.marked), (2, 2));
    }

    #[test]
    fn base_protocol_requests_count_on_the_overall_bucket() {
        let extra = "[[peer_rate_limit_profile]]\npeer = \"pgw1\"\ndirection = \"ingress\"\n\
                     rate = 1\nburst = 1\n";
        let p = plan(extra);
        let l = Limiter::new(&p);
        let info = peer(&l, "10.0.0.1");
        let dwr = Message::request(cmd::DEVICE_WATCHDOG, app::COMMON, 2, 2)
            .with(Avp::utf8(avp_code::ORIGIN_HOST, "pgw1.example"))
            .try_encode()
            .expect("encode");
        assert_eq!(l.admit(&info, &dwr, 0), Verdict::Admit);
        assert_eq!(
            l.admit(&info, &dwr, 0),
            Verdict::Mark,
            "as the kernel: every request is charged"
        );
    }

    #[test]
    fn set_rate_changes_the_rate_mid_run_keeping_the_tat() {
        let p = plan(GX_CCR_I);
        let l = Limiter::new(&p);
        let info = peer(&l, "10.0.0.1");
        let slot = p.slots[p.slot_of("pgw1", MsgClass::gx_ccr(1)).expect("slot") as usize].clone();
        let f = ccr(app::GX, 1);
        // Offered 100/s; 5 s at the static 10/s, then 5 s throttled to 5/s.
        let mut admitted = [0u32; 2];
        for i in 0..1000u64 {
            let now = i * 10 * MS;
            if i == 500 {
                l.set_rate(&slot, 5.0);
                assert_eq!(
                    l.bucket_config(slot.index),
                    Some(BucketConfig::new(5.0, 3, Action::Reject))
                );
            }
            if l.admit(&info, &f, now) == Verdict::Admit {
                admitted[(i / 500) as usize] += 1;
            }
        }
        // First half: 3 at once, then one per 100 ms at 0.1 .. 4.9 s = 52; TAT 5.2 s.
        assert_eq!(admitted[0], 52);
        // Second half (interval 200 ms, tolerance 400 ms): TAT − now ≤ 400 ms admits
        // at 5.00 and 5.01 s (TAT 5.2 → 5.4 → 5.6), then one per 200 ms at 5.2 ..
        // 9.8 s (24): 26. The TAT carried over; the burst was not refilled.
        assert_eq!(admitted[1], 26);
    }
}
