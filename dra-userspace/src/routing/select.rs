//! Peer selection among route candidates: StarOS weight tiers, docomo's load-aware
//! selection (docs/architecture.md §6, §7).
//!
//! Tier rule (StarOS, docs/architecture.md §6): only peers in good state count. The
//! highest weight that has at least one good peer is the only tier used; a lower weight
//! is used only when every peer of every higher weight is not good. Within the tier a
//! [`Strategy`] picks the peer.
//!
//! Load direction: RFC 8583 §7.3 Load-Value, 0..=65535, **higher = less loaded**
//! (65535 = idle, 0 = fully loaded); it is specified like a DNS SRV weight (RFC 2782),
//! i.e. it reads as available capacity.
//!
//! Missing or stale load (no report, or older than `max_load_age`): the peer is ranked
//! as if it had reported the mean Load-Value of the tier's usable (good, not excluded)
//! peers that have a fresh report. If no peer of the tier has one, all peers look alike:
//! `least_loaded` is then plain round-robin, `weighted_load` uniform random, `p2c`
//! decides by pending requests.
//! Rationale: an unknown peer is neither favoured (which would herd all traffic onto the
//! one peer that does not report) nor starved (a healthy peer without RFC 8583 support
//! still gets its share).

use std::{collections::HashMap, str::FromStr, time::Duration};

use super::{
    peers::{PeerId, PeerStates, PeerView},
    rng::SplitMix64,
    table::Candidate,
};

/// How a peer is picked inside the chosen weight tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Fixed order: the first good peer in config order (docomo's "priority fixed
    /// connection" baseline).
    Priority,
    /// Rotate among good peers (the StarOS default): N equal peers each get 1/N.
    #[default]
    RoundRobin,
    /// Highest reported Load-Value (lowest load, docomo's proposal); ties rotate
    /// round-robin. Note: with load refreshed only per heartbeat, every pick between two
    /// reports goes to the same peer (herding) — the simulator measures this.
    LeastLoaded,
    /// Random, proportional to Load-Value, like DNS SRV weights (RFC 8583 §7.3 →
    /// RFC 2782). A peer reporting 0 gets nothing while a tier peer has capacity.
    WeightedLoad,
    /// Power of two random choices: draw two distinct good peers, take the one with the
    /// higher Load-Value, then the one with fewer pending requests.
    #[serde(rename = "p2c")]
    P2c,
}

impl Strategy {
    /// All strategies, for simulations that compare them.
    pub const ALL: [Strategy; 5] = [
        Self::Priority,
        Self::RoundRobin,
        Self::LeastLoaded,
        Self::WeightedLoad,
        Self::P2c,
    ];

    /// The config name (`priority`, `round_robin`, `least_loaded`, `weighted_load`, `p2c`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Priority => "priority",
            Self::RoundRobin => "round_robin",
            Self::LeastLoaded => "least_loaded",
            Self::WeightedLoad => "weighted_load",
            Self::P2c => "p2c",
        }
    }
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown strategy name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown selection strategy {name:?} \
     (expected priority, round_robin, least_loaded, weighted_load or p2c)"
)]
pub struct UnknownStrategy {
    /// The name given.
    pub name: String,
}

impl FromStr for Strategy {
    type Err = UnknownStrategy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|st| st.name() == s)
            .ok_or_else(|| UnknownStrategy { name: s.to_owned() })
    }
}

/// Upper bound on remembered round-robin cursors (one per distinct tier); tiers come
/// from the config, so this is only a guard against unbounded growth.
const MAX_CURSORS: usize = 4096;

/// Picks a peer among route candidates. Holds the round-robin cursors and the PRNG, so
/// keep one per routing context (the agent: one per worker; the simulator: one per
/// simulated client) and reuse it.
#[derive(Debug, Clone)]
pub struct Selector {
    strategy: Strategy,
    max_load_age: Option<Duration>,
    rng: SplitMix64,
    cursors: HashMap<Box<[PeerId]>, usize>,
    // Scratch buffers, reused between calls.
    tier: Vec<PeerId>,
    slots: Vec<Option<PeerView>>,
    values: Vec<u16>,
    usable: Vec<usize>,
}

impl Selector {
    /// A selector with the given strategy and PRNG seed; load reports never go stale.
    pub fn new(strategy: Strategy, seed: u64) -> Self {
        Self {
            strategy,
            max_load_age: None,
            rng: SplitMix64::new(seed),
            cursors: HashMap::new(),
            tier: Vec::new(),
            slots: Vec::new(),
            values: Vec::new(),
            usable: Vec::new(),
        }
    }

    /// Treat load reports older than `age` as missing (e.g. 2–3 watchdog intervals).
    pub fn with_max_load_age(mut self, age: Duration) -> Self {
        self.max_load_age = Some(age);
        self
    }

    /// The strategy in use.
    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// Pick a peer for a new request, or `None` if no candidate is in good state (the
    /// caller answers 3002 DIAMETER_UNABLE_TO_DELIVER, RFC 6733 §7.1.3). `now` is the
    /// caller's monotonic time, used to judge load-report age.
    pub fn select<P: PeerStates + ?Sized>(
        &mut self,
        candidates: &[Candidate],
        peers: &P,
        now: Duration,
    ) -> Option<PeerId> {
        self.select_excluding(candidates, peers, now, &[])
    }

    /// As [`Self::select`], treating the peers in `exclude` as not good (e.g. the peer
    /// that just failed, when retrying a request elsewhere, RFC 6733 §5.5.4).
    pub fn select_excluding<P: PeerStates + ?Sized>(
        &mut self,
        candidates: &[Candidate],
        peers: &P,
        now: Duration,
        exclude: &[PeerId],
    ) -> Option<PeerId> {
        let usable = |id: PeerId| -> Option<PeerView> {
            if exclude.contains(&id) {
                return None;
            }
            peers.view(id).filter(|v| v.good)
        };
        // StarOS: the highest weight that has a good peer.
        let top = candidates
            .iter()
            .filter(|c| usable(c.peer).is_some())
            .map(|c| c.weight)
            .max()?;

        self.tier.clear();
        self.slots.clear();
        for c in candidates.iter().filter(|c| c.weight == top) {
            if !self.tier.contains(&c.peer) {
                self.tier.push(c.peer);
                self.slots.push(usable(c.peer));
            }
        }

        let idx = match self.strategy {
            Strategy::Priority => self.slots.iter().position(Option::is_some),
            Strategy::RoundRobin => {
                let slots = &self.slots;
                rotate(&mut self.cursors, &self.tier, |i| slots[i].is_some())
            }
            Strategy::LeastLoaded => {
                self.fill_values(now);
                let (slots, values) = (&self.slots, &self.values);
                let best = (0..slots.len())
                    .filter(|&i| slots[i].is_some())
                    .map(|i| values[i])
                    .max()?;
                rotate(&mut self.cursors, &self.tier, |i| {
                    slots[i].is_some() && values[i] == best
                })
            }
            Strategy::WeightedLoad => {
                self.fill_values(now);
                self.weighted_pick()
            }
            Strategy::P2c => {
                self.fill_values(now);
                self.p2c_pick()
            }
        }?;
        Some(self.tier[idx])
    }

    /// Effective Load-Value per tier slot: fresh report, else the tier's mean (module docs).
    fn fill_values(&mut self, now: Duration) {
        let max_age = self.max_load_age;
        let fresh = |v: &Option<PeerView>| -> Option<u16> {
            let load = v.as_ref()?.load?;
            max_age
                .is_none_or(|a| load.age(now) <= a)
                .then_some(load.value)
        };
        let (mut sum, mut n) = (0u64, 0u64);
        for v in self.slots.iter().filter_map(fresh) {
            sum += u64::from(v);
            n += 1;
        }
        // The mean of u16 values fits in u16; with no fresh report every slot gets the same
        // value, so which one does not matter.
        let mean = sum
            .checked_div(n)
            .map_or(super::peers::LOAD_VALUE_IDLE, |m| m as u16);
        self.values.clear();
        self.values
            .extend(self.slots.iter().map(|s| fresh(s).unwrap_or(mean)));
    }

    /// RFC 2782-style weighted random draw with Load-Value as the weight (RFC 8583 §7.3).
    /// Unlike RFC 2782, which gives weight-0 records "a very small chance", a peer
    /// reporting 0 (fully loaded) gets nothing while a usable tier peer has capacity.
    fn weighted_pick(&mut self) -> Option<usize> {
        let usable = |i: &usize| self.slots[*i].is_some();
        let total: u64 = (0..self.slots.len())
            .filter(usable)
            .map(|i| u64::from(self.values[i]))
            .sum();
        if total == 0 {
            // Every usable peer reports full load: spread evenly rather than pile on one.
            let n = (0..self.slots.len()).filter(usable).count() as u64;
            let k = self.rng.below(n) as usize;
            return (0..self.slots.len()).filter(usable).nth(k);
        }
        let r = self.rng.below(total);
        let mut running = 0u64;
        for i in (0..self.slots.len()).filter(usable) {
            running += u64::from(self.values[i]);
            if running > r {
                return Some(i);
            }
        }
        None
    }

    /// Power of two choices (Mitzenmacher 2001).
    fn p2c_pick(&mut self) -> Option<usize> {
        let mut usable = std::mem::take(&mut self.usable);
        usable.clear();
        usable.extend((0..self.slots.len()).filter(|&i| self.slots[i].is_some()));
        let picked = self.p2c_among(&usable);
        self.usable = usable;
        picked
    }

    fn p2c_among(&mut self, usable: &[usize]) -> Option<usize> {
        match usable.len() {
            0 => return None,
            1 => return Some(usable[0]),
            _ => {}
        }
        let n = usable.len() as u64;
        let a = self.rng.below(n) as usize;
        let mut b = self.rng.below(n - 1) as usize;
        if b >= a {
            b += 1;
        }
        let (a, b) = (usable[a], usable[b]);
        let pending = |i: usize| self.slots[i].map_or(u32::MAX, |v| v.pending);
        // Higher Load-Value (less loaded) wins; then fewer pending; then the first draw.
        let b_better = self.values[b] > self.values[a]
            || (self.values[b] == self.values[a] && pending(b) < pending(a));
        Some(if b_better { b } else { a })
    }
}

/// Round-robin over `tier`: the first index after the tier's cursor that satisfies
/// `eligible`. The rotation skips ineligible peers without losing its place, so N
/// eligible peers each get 1 of every N picks.
fn rotate(
    cursors: &mut HashMap<Box<[PeerId]>, usize>,
    tier: &[PeerId],
    eligible: impl Fn(usize) -> bool,
) -> Option<usize> {
    let n = tier.len();
    if n == 0 {
        return None;
    }
    let last = cursors
        .get(tier)
        .copied()
        .filter(|&c| c < n)
        .unwrap_or(n - 1);
    let idx = (1..=n).map(|k| (last + k) % n).find(|&i| eligible(i))?;
    match cursors.get_mut(tier) {
        Some(c) => *c = idx,
        None => {
            if cursors.len() >= MAX_CURSORS {
                cursors.clear();
            }
            cursors.insert(tier.into(), idx);
        }
    }
    Some(idx)
}
