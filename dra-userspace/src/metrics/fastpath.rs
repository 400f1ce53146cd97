//! Fast-path counters: the latest snapshot of the BPF per-CPU maps, exported as counters.
//!
//! The kernel owns these counts; the agent only copies them. prometheus-client's
//! [`Counter`](prometheus_client::metrics::counter::Counter) can only be incremented, so
//! the snapshot is kept here and encoded on each scrape by a [`Collector`] as
//! [`ConstCounter`]s: the exposition type is `counter`, the value is exactly the last
//! snapshot (setting a smaller value, e.g. after the maps were recreated, is a counter
//! reset, which Prometheus handles).

use std::{
    collections::BTreeMap,
    sync::{PoisonError, RwLock},
};

use dra_common::{maps::ClassCounters, stats::Counter};
use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeMetric},
    metrics::{MetricType, counter::ConstCounter},
};

/// Family name of the per peer × class request counters (`_total` added on encoding).
pub(crate) const REQUESTS: &str = "dra_fastpath_requests";
/// Family name of the per peer × class byte counters.
pub(crate) const BYTES: &str = "dra_fastpath_bytes";
/// Family name of the global counters.
pub(crate) const PACKETS: &str = "dra_fastpath_packets";
/// Family name of the agent's out-of-band mark counters.
pub(crate) const OOB_MARKS: &str = "dra_fastpath_oob_marks";
/// Family name of the overload control's shed counters.
pub(crate) const OVERLOAD_SHED: &str = "dra_overload_shed";

/// The latest snapshot.
#[derive(Debug)]
struct Snapshot {
    /// (peer, class label) → counters summed over CPUs.
    classes: BTreeMap<(String, String), ClassCounters>,
    /// Global counters, indexed like [`Counter::ALL`].
    global: [u64; Counter::ALL.len()],
    /// Out-of-band marks read from the ring, applied, expired (XDP attached only).
    oob: Option<[u64; 3]>,
    /// Requests the overload control shed, per class: (answered, discarded).
    shed: BTreeMap<String, (u64, u64)>,
}

/// Holds the snapshot and encodes it on scrape.
#[derive(Debug)]
pub(crate) struct FastPathCollector {
    snap: RwLock<Snapshot>,
}

impl FastPathCollector {
    pub(crate) fn new() -> FastPathCollector {
        FastPathCollector {
            snap: RwLock::new(Snapshot {
                classes: BTreeMap::new(),
                global: [0; Counter::ALL.len()],
                oob: None,
                shed: BTreeMap::new(),
            }),
        }
    }

    pub(crate) fn set_class(&self, peer: &str, class: &str, c: &ClassCounters) {
        let mut s = self.snap.write().unwrap_or_else(PoisonError::into_inner);
        s.classes.insert((peer.to_string(), class.to_string()), *c);
    }

    pub(crate) fn replace_classes(&self, classes: BTreeMap<(String, String), ClassCounters>) {
        let mut s = self.snap.write().unwrap_or_else(PoisonError::into_inner);
        s.classes = classes;
    }

    pub(crate) fn set_overload_shed(&self, counts: &[crate::overload::ShedCount]) {
        let mut s = self.snap.write().unwrap_or_else(PoisonError::into_inner);
        s.shed = counts
            .iter()
            .map(|c| (c.class.clone(), (c.answered, c.discarded)))
            .collect();
    }

    pub(crate) fn set_oob(&self, received: u64, applied: u64, expired: u64) {
        let mut s = self.snap.write().unwrap_or_else(PoisonError::into_inner);
        s.oob = Some([received, applied, expired]);
    }

    /// Sets each listed counter; [`Counter::Count`] (not a counter) is ignored.
    pub(crate) fn set_global(&self, values: &[(Counter, u64)]) {
        let mut s = self.snap.write().unwrap_or_else(PoisonError::into_inner);
        for (c, v) in values {
            if let Some(i) = Counter::ALL.iter().position(|x| x == c) {
                s.global[i] = *v;
            }
        }
    }
}

impl Collector for FastPathCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = self.snap.read().unwrap_or_else(PoisonError::into_inner);
        if !s.classes.is_empty() {
            let mut m = encoder.encode_descriptor(
                REQUESTS,
                "Requests seen by the fast path per peer and message class, by outcome \
                 (seen, admitted, marked, dropped, shed_answered, shed_discarded); snapshot \
                 of the kernel's counters.",
                None,
                MetricType::Counter,
            )?;
            for ((peer, class), c) in &s.classes {
                for (outcome, v) in [
                    ("seen", c.seen),
                    ("admitted", c.admitted),
                    ("marked", c.marked),
                    ("dropped", c.dropped),
                    ("shed_answered", c.shed_answered),
                    ("shed_discarded", c.shed_discarded),
                ] {
                    let labels = [
                        ("peer", peer.as_str()),
                        ("class", class.as_str()),
                        ("outcome", outcome),
                    ];
                    ConstCounter::new(v).encode(m.encode_family(&labels)?)?;
                }
            }
        }
        if !s.classes.is_empty() {
            let mut m = encoder.encode_descriptor(
                BYTES,
                "Diameter bytes of the requests seen by the fast path per peer and message \
                 class; snapshot of the kernel's counters.",
                None,
                MetricType::Counter,
            )?;
            for ((peer, class), c) in &s.classes {
                let labels = [("peer", peer.as_str()), ("class", class.as_str())];
                ConstCounter::new(c.bytes).encode(m.encode_family(&labels)?)?;
            }
        }
        let mut m = encoder.encode_descriptor(
            PACKETS,
            "Fast-path global counters by reason (one per exit path of the programs); \
             snapshot of the kernel's counters.",
            None,
            MetricType::Counter,
        )?;
        for (c, v) in Counter::ALL.iter().zip(s.global) {
            let labels = [("reason", c.name())];
            ConstCounter::new(v).encode(m.encode_family(&labels)?)?;
        }
        if !s.shed.is_empty() {
            let mut m = encoder.encode_descriptor(
                OVERLOAD_SHED,
                "Requests the agent's overload control shed, per class and action: answered \
                 3004 DIAMETER_TOO_BUSY, or discarded beyond the answer budget (fast path \
                 and the agent's readers together).",
                None,
                MetricType::Counter,
            )?;
            for (class, (answered, discarded)) in &s.shed {
                for (action, v) in [("answer", answered), ("discard", discarded)] {
                    let labels = [("class", class.as_str()), ("action", action)];
                    ConstCounter::new(*v).encode(m.encode_family(&labels)?)?;
                }
            }
        }
        if let Some(oob) = s.oob {
            let mut m = encoder.encode_descriptor(
                OOB_MARKS,
                "Requests the fast path marked out of band (they straddled TCP segments), as \
                 the agent handled them: read from the ring, applied to a request, expired \
                 unapplied (connection gone).",
                None,
                MetricType::Counter,
            )?;
            for (outcome, v) in ["received", "applied", "expired"].iter().zip(oob) {
                ConstCounter::new(v).encode(m.encode_family(&[("outcome", *outcome)])?)?;
            }
        }
        Ok(())
    }
}
