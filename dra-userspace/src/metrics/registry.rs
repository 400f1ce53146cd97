//! [`Metrics`]: the agent's metric families and their setters.

use std::{
    collections::BTreeMap,
    sync::{Arc, PoisonError, RwLock, atomic::AtomicU64},
    time::Duration,
};

use dra_common::{maps::ClassCounters, stats::Counter as FastPathCounter};
use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric, text},
    metrics::{
        MetricType,
        counter::Counter,
        family::Family,
        gauge::{ConstGauge, Gauge},
        histogram::Histogram,
    },
    registry::{Registry, Unit},
};

use super::{
    fastpath::FastPathCollector,
    labels::{Direction, FastPathState, PeerState, reason_label},
};
use crate::{control::ThrottleEvent, transport::tls::Refusal};

/// One peer's per-message series (requests in and out, answers per Result-Code, answer
/// latency) as handles: a message costs an atomic add, not a label set built and looked
/// up under the family's lock. A series is created on its first count, as through
/// [`Metrics::inc_request`] and its siblings, and counts into the same family.
#[derive(Clone, Debug)]
pub struct PeerSeries {
    peer: String,
    /// In, out.
    requests: [Option<Counter>; 2],
    latency: Option<Histogram>,
    /// Per Result-Code seen so far (a handful per peer).
    answers: Vec<(u32, Counter)>,
}

impl PeerSeries {
    /// As [`Metrics::inc_request`].
    pub fn inc_request(&mut self, m: &Metrics, direction: Direction) {
        let i = match direction {
            Direction::In => 0,
            Direction::Out => 1,
        };
        self.requests[i]
            .get_or_insert_with(|| {
                m.inner
                    .requests
                    .get_or_create(&PeerDirectionLabels {
                        peer: self.peer.clone(),
                        direction: direction.name(),
                    })
                    .clone()
            })
            .inc();
    }

    /// As [`Metrics::inc_answer`].
    pub fn inc_answer(&mut self, m: &Metrics, result_code: u32) {
        if let Some((_, c)) = self.answers.iter().find(|(rc, _)| *rc == result_code) {
            c.inc();
            return;
        }
        let c = m
            .inner
            .answers
            .get_or_create(&PeerResultLabels {
                peer: self.peer.clone(),
                result_code,
            })
            .clone();
        c.inc();
        self.answers.push((result_code, c));
    }

    /// As [`Metrics::observe_answer_latency`].
    pub fn observe_answer_latency(&mut self, m: &Metrics, latency: Duration) {
        self.latency
            .get_or_insert_with(|| {
                m.inner
                    .answer_latency
                    .get_or_create(&PeerLabels {
                        peer: self.peer.clone(),
                    })
                    .clone()
            })
            .observe(latency.as_secs_f64());
    }
}

/// Upper bounds (seconds) of the answer-latency buckets: 1-2.5-5 steps from 100 µs to
/// 10 s (a `+Inf` bucket is added by the encoder).
pub const LATENCY_BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// A gauge holding an `f64`.
type FloatGauge = Gauge<f64, AtomicU64>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PeerLabels {
    peer: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PeerClassLabels {
    peer: String,
    class: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PeerDirectionLabels {
    peer: String,
    direction: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PeerResultLabels {
    peer: String,
    result_code: u32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GroupLabels {
    group: String,
}

/// Labels of `dra_throttle_events_total`: `peer` only when the event concerns one peer.
type EventLabels = Vec<(&'static str, String)>;

/// `dra_peer_state`: one state per peer, encoded as six 0/1 gauges on scrape.
#[derive(Debug, Default)]
struct PeerStateCollector {
    states: RwLock<BTreeMap<String, PeerState>>,
}

impl Collector for PeerStateCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let states = self.states.read().unwrap_or_else(PoisonError::into_inner);
        if states.is_empty() {
            return Ok(());
        }
        let mut m = encoder.encode_descriptor(
            "dra_peer_state",
            "Peer connection state: 1 for the current state, 0 for the others.",
            None,
            MetricType::Gauge,
        )?;
        for (peer, current) in states.iter() {
            for s in PeerState::ALL {
                let labels = [("peer", peer.as_str()), ("state", s.name())];
                ConstGauge::new(i64::from(s == *current)).encode(m.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}

/// `dra_fastpath_state`: who enforces the ingress limits, encoded as four 0/1 gauges on
/// scrape (exported once set).
#[derive(Debug, Default)]
struct FastPathStateCollector {
    state: RwLock<Option<FastPathState>>,
}

impl Collector for FastPathStateCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(current) = *self.state.read().unwrap_or_else(PoisonError::into_inner) else {
            return Ok(());
        };
        let mut m = encoder.encode_descriptor(
            "dra_fastpath_state",
            "Who enforces the ingress limits: attached (XDP), detached (XDP gone: nothing), \
             fallback (the agent: the kernel cannot load XDP), off (the agent: no interface); \
             1 for the current state, 0 for the others.",
            None,
            MetricType::Gauge,
        )?;
        for s in FastPathState::ALL {
            ConstGauge::new(i64::from(s == current))
                .encode(m.encode_family(&[("state", s.name())])?)?;
        }
        Ok(())
    }
}

/// One configured peer as `dra_peer_info` exports it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PeerInfo {
    peer: String,
    role: String,
    group: Option<String>,
}

/// `dra_peer_info`: 1 per configured peer, with its role and group (exported once set).
#[derive(Debug, Default)]
struct PeerInfoCollector {
    peers: RwLock<Vec<PeerInfo>>,
}

impl Collector for PeerInfoCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let peers = self.peers.read().unwrap_or_else(PoisonError::into_inner);
        if peers.is_empty() {
            return Ok(());
        }
        let mut m = encoder.encode_descriptor(
            "dra_peer_info",
            "A configured peer (always 1): its role (client, server) and peer group.",
            None,
            MetricType::Gauge,
        )?;
        for p in peers.iter() {
            let mut labels = vec![("peer", p.peer.as_str()), ("role", p.role.as_str())];
            if let Some(g) = &p.group {
                labels.push(("group", g.as_str()));
            }
            ConstGauge::new(1).encode(m.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

type HistogramCtor = fn() -> Histogram;

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

#[derive(Debug)]
struct Inner {
    registry: Registry,
    db_cpu_percent: FloatGauge,
    db_cpu_source_up: Gauge,
    db_cpu_missing: Counter,
    throttle_percent: Family<PeerLabels, Gauge>,
    effective_rate: Family<PeerClassLabels, FloatGauge>,
    throttle_events: Family<EventLabels, Counter>,
    fastpath: Arc<FastPathCollector>,
    requests: Family<PeerDirectionLabels, Counter>,
    answers: Family<PeerResultLabels, Counter>,
    pending_requests: Family<PeerLabels, Gauge>,
    queue_depth: Family<GroupLabels, Gauge>,
    answer_latency: Family<PeerLabels, Histogram, HistogramCtor>,
    peer_state: Arc<PeerStateCollector>,
    peer_info: Arc<PeerInfoCollector>,
    fastpath_state: Arc<FastPathStateCollector>,
    unanswered_violations: Counter,
    connections_refused: Family<ReasonLabels, Counter>,
    tls_refused: Family<TlsLabels, Counter>,
    connections_awaiting_cer: Gauge,
    ready: Gauge,
    overload_level: Gauge,
    overload_delay: FloatGauge,
    overload_admit: FloatGauge,
    config_reloads: Family<OutcomeLabels, Counter>,
    store: StoreFamilies,
    doic: DoicFamilies,
}

/// The DOIC reporting node's families (`dra_doic_*`).
#[derive(Debug, Default)]
struct DoicFamilies {
    olrs_sent: Family<DoicLabels, Counter>,
    reduction: Family<PeerLabels, Gauge>,
    max_rate: Family<PeerLabels, Gauge>,
    olrs_received: Family<DoicReceivedLabels, Counter>,
    server_reduction: Family<PeerLabels, Gauge>,
    abated: Family<DoicAbatedLabels, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DoicReceivedLabels {
    peer: String,
    report_type: &'static str,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DoicAbatedLabels {
    peer: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DoicLabels {
    peer: String,
    report_type: &'static str,
    algorithm: &'static str,
    kind: &'static str,
}

/// The session store's families (`dra_session_*`).
#[derive(Debug)]
struct StoreFamilies {
    latency: Family<OpLabels, Histogram, HistogramCtor>,
    errors: Family<OpKindLabels, Counter>,
    cache: Family<ResultLabels, Counter>,
    bindings: Family<OpLabels, Counter>,
    fallbacks: Family<OnErrorLabels, Counter>,
    up: Gauge,
    waiting: Gauge,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabels {
    op: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpKindLabels {
    op: &'static str,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OnErrorLabels {
    on_error: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TlsLabels {
    side: &'static str,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

/// The agent's metrics registry. Cheap to clone (an [`Arc`]); every setter takes
/// `&self` and may be called from any thread. See the [module docs](super) for the
/// families.
#[derive(Clone, Debug)]
pub struct Metrics {
    inner: Arc<Inner>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

/// Saturating conversion of a count to a gauge value.
fn gauge_value(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// `$registry.register(name, help, metric.clone())` for each `metric => name, help;`.
macro_rules! register {
    ($registry:ident; $($metric:expr => $name:literal, $help:literal;)+) => {
        $($registry.register($name, $help, $metric.clone());)+
    };
}

impl Metrics {
    /// A registry with every family registered and no series yet (except the
    /// fast-path global counters and the DB CPU gauges, which start at 0).
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let db_cpu_percent = FloatGauge::default();
        let db_cpu_source_up = Gauge::default();
        let db_cpu_missing = Counter::default();
        let throttle_percent = Family::<PeerLabels, Gauge>::default();
        let effective_rate = Family::<PeerClassLabels, FloatGauge>::default();
        let throttle_events = Family::<EventLabels, Counter>::default();
        let fastpath = Arc::new(FastPathCollector::new());
        let requests = Family::<PeerDirectionLabels, Counter>::default();
        let answers = Family::<PeerResultLabels, Counter>::default();
        let pending_requests = Family::<PeerLabels, Gauge>::default();
        let queue_depth = Family::<GroupLabels, Gauge>::default();
        let answer_latency =
            Family::<PeerLabels, Histogram, HistogramCtor>::new_with_constructor(latency_histogram);
        let peer_state = Arc::new(PeerStateCollector::default());
        let peer_info = Arc::new(PeerInfoCollector::default());
        let fastpath_state = Arc::new(FastPathStateCollector::default());
        let unanswered_violations = Counter::default();
        let connections_refused = Family::<ReasonLabels, Counter>::default();
        let tls_refused = Family::<TlsLabels, Counter>::default();
        let connections_awaiting_cer = Gauge::default();
        let ready = Gauge::default();
        let overload_level = Gauge::default();
        let overload_delay = FloatGauge::default();
        let overload_admit = FloatGauge::default();
        let config_reloads = Family::<OutcomeLabels, Counter>::default();
        let store = StoreFamilies {
            latency: Family::new_with_constructor(latency_histogram),
            errors: Family::default(),
            cache: Family::default(),
            bindings: Family::default(),
            fallbacks: Family::default(),
            up: Gauge::default(),
            waiting: Gauge::default(),
        };
        let doic = DoicFamilies::default();
        register!(registry;
            doic.olrs_sent => "dra_doic_olrs_sent",
                "Answers to a gateway that carried our OC-OLR, by report type, algorithm and \
                 kind (report, or end: the end of overload)";
            doic.reduction => "dra_doic_reduction_percent",
                "OC-Reduction-Percentage currently reported to a gateway (loss; 0 = none)";
            doic.max_rate => "dra_doic_max_rate",
                "OC-Maximum-Rate (requests/s) currently reported to a gateway (rate; 0 = none)";
            doic.olrs_received => "dra_doic_olrs_received",
                "OC-OLRs received from a server with doic = true, by report type and result \
                 (applied, ended, stale, duplicate, source_mismatch, unusable)";
            doic.server_reduction => "dra_doic_server_reduction_percent",
                "Largest loss reduction in force towards a server (its host and peer reports; \
                 0 = none)";
            doic.abated => "dra_doic_requests_abated",
                "Requests to a server abated by its DOIC reports, by outcome (diverted to \
                 another server, or rejected: answered 3004 by the agent)";
            db_cpu_percent => "dra_db_cpu_percent",
                "Last valid session-DB CPU sample (percent) used by dynamic throttling";
            db_cpu_source_up => "dra_db_cpu_source_up",
                "1 while the DB CPU source delivers valid samples, 0 while it is missing";
            db_cpu_missing => "dra_db_cpu_missing",
                "Times the DB CPU source was declared missing";
            throttle_percent => "dra_throttle_percent",
                "Current dynamic throttle (percent) of a DRL peer";
            effective_rate => "dra_effective_rate",
                "Rate limit (messages/s) written into the fast path for a peer and class";
            throttle_events => "dra_throttle_events",
                "Dynamic throttling controller events by reason";
            requests => "dra_requests",
                "Diameter requests received from (in) or sent to (out) a peer";
            answers => "dra_answers",
                "Diameter answers sent to a peer, by Result-Code";
            pending_requests => "dra_pending_requests",
                "Requests sent to a peer and not yet answered";
            queue_depth => "dra_queue_depth",
                "Requests queued for a peer group (rate-limit back-pressure)";
        );
        registry.register_with_unit(
            "dra_answer_latency",
            "Time from forwarding a request to a peer until its answer arrived",
            Unit::Seconds,
            answer_latency.clone(),
        );
        register!(registry;
            unanswered_violations => "dra_unanswered_invariant_violations",
                "Requests that ended without any answer (must stay 0: every request gets one)";
            connections_refused => "dra_connections_refused",
                "Connections closed at accept, by reason (cer_backlog: too many connections \
                 waiting for their CER; cer_backlog_per_source: too many from one address)";
            tls_refused => "dra_tls_refused",
                "TLS connections refused before or at CER, by side (accepted, dialled) and \
                 reason (unknown_ca, expired, not_yet_valid, not_for_peer, no_certificate, \
                 bad_certificate, peer_refused, handshake_timeout, plain_tcp, cer_identity, \
                 handshake, io)";
            config_reloads => "dra_config_reloads",
                "Config reloads (dra reload, SIGHUP) by outcome: applied, unchanged, dry_run, \
                 invalid (validation errors), refused (a change that needs a restart), failed";
            connections_awaiting_cer => "dra_connections_awaiting_cer",
                "Accepted connections waiting for their CER";
            ready => "dra_ready",
                "1 once the agent is ready: listeners bound and an open connection in every \
                 routed group, or its startup wait ended";
            overload_level => "dra_overload_level",
                "The agent's own overload level: 0 nothing shed, 1 shedding new sessions, 2 \
                 updates too, 3 down to terminations (docs/operations.md)";
            overload_delay => "dra_overload_delay_seconds",
                "How late the agent is: the age of the youngest message it took in the last \
                 100 ms (its overload signal)";
            overload_admit => "dra_overload_admit_rate",
                "Requests per second the overload control admits while it sheds (0: not \
                 shedding)";
        );
        registry.register_with_unit(
            "dra_session_store_latency",
            "Session store call duration by operation (get, set, del), errors included",
            Unit::Seconds,
            store.latency.clone(),
        );
        register!(registry;
            store.errors => "dra_session_store_errors",
                "Session store calls that failed, by operation and kind (timeout, unavailable, \
                 error)";
            store.cache => "dra_session_cache_lookups",
                "Session binding lookups in the local cache (hit, miss)";
            store.bindings => "dra_session_bindings",
                "Session bindings written to or deleted from the store (op: written, deleted)";
            store.fallbacks => "dra_session_store_fallbacks",
                "Requests that needed the store while it failed, by on_error action (local, \
                 reject)";
            store.up => "dra_session_store_up",
                "1 while the session store answers (always 1 for the in-memory store)";
            store.waiting => "dra_session_store_waiting_requests",
                "Requests waiting for a session store call before they are routed or forwarded";
        );

        registry.register_collector(Box::new(Arc::clone(&peer_state)));
        registry.register_collector(Box::new(Arc::clone(&peer_info)));
        registry.register_collector(Box::new(Arc::clone(&fastpath)));
        registry.register_collector(Box::new(Arc::clone(&fastpath_state)));

        // Counters of events whose labels are known in advance start at 0, so that
        // rate() and increase() see their first event (a series that appears at 1 has
        // no earlier sample to rise from) and dashboards show 0 rather than nothing.
        for reason in Refusal::LABELS {
            for side in ["accepted", "dialled"] {
                let _zero = tls_refused.get_or_create(&TlsLabels { side, reason });
            }
        }
        for reason in ["cer_backlog", "cer_backlog_per_source"] {
            let _zero = connections_refused.get_or_create(&ReasonLabels { reason });
        }
        for on_error in ["local", "reject"] {
            let _zero = store.fallbacks.get_or_create(&OnErrorLabels { on_error });
        }
        for op in ["get", "set", "del"] {
            for kind in ["timeout", "unavailable", "error"] {
                let _zero = store.errors.get_or_create(&OpKindLabels { op, kind });
            }
        }

        Metrics {
            inner: Arc::new(Inner {
                registry,
                db_cpu_percent,
                db_cpu_source_up,
                db_cpu_missing,
                throttle_percent,
                effective_rate,
                throttle_events,
                fastpath,
                requests,
                answers,
                pending_requests,
                queue_depth,
                answer_latency,
                peer_state,
                peer_info,
                fastpath_state,
                unanswered_violations,
                connections_refused,
                tls_refused,
                connections_awaiting_cer,
                ready,
                overload_level,
                overload_delay,
                overload_admit,
                config_reloads,
                store,
                doic,
            }),
        }
    }

    /// The whole registry in the OpenMetrics 1.0.0 text format (ends with `# EOF`),
    /// as served on `GET /metrics` with content type [`super::CONTENT_TYPE`].
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail; our collector and label sets do not error.
        if text::encode(&mut out, &self.inner.registry).is_err() {
            out.clear();
            out.push_str("# EOF\n");
        }
        out
    }

    // ---- dynamic throttling -------------------------------------------------------

    /// Records a DB CPU sample. Non-finite or negative values (rejected by the
    /// controller too) are ignored and the gauge keeps its last value; returns whether
    /// the value was taken.
    pub fn set_db_cpu_percent(&self, cpu: f64) -> bool {
        if cpu.is_finite() && cpu >= 0.0 {
            self.inner.db_cpu_percent.set(cpu);
            true
        } else {
            false
        }
    }

    /// Sets `dra_db_cpu_source_up` (1 when `up`).
    pub fn set_db_cpu_source_up(&self, up: bool) {
        self.inner.db_cpu_source_up.set(i64::from(up));
    }

    /// Counts one "source declared missing" (the controller's `SourceMissing` event).
    pub fn inc_db_cpu_missing(&self) {
        self.inner.db_cpu_missing.inc();
    }

    /// Sets the throttle percent of a DRL peer.
    pub fn set_throttle_percent(&self, peer: &str, throttle_pct: u8) {
        self.inner
            .throttle_percent
            .get_or_create(&PeerLabels {
                peer: peer.to_string(),
            })
            .set(i64::from(throttle_pct));
    }

    /// Sets the rate (msgs/s) written into the fast path for `peer` and `class`
    /// (a [`super::class_label`]). Non-finite or negative rates are ignored.
    pub fn set_effective_rate(&self, peer: &str, class: &str, rate: f64) {
        if rate.is_finite() && rate >= 0.0 {
            self.inner
                .effective_rate
                .get_or_create(&PeerClassLabels {
                    peer: peer.to_string(),
                    class: class.to_string(),
                })
                .set(rate);
        }
    }

    /// Counts a controller event by its reason kind ([`super::reason_label`]), with a
    /// `peer` label when `peer` is given. Only counts: the throttle gauge, source-up and
    /// missing counter have their own setters.
    pub fn record_throttle_event(&self, peer: Option<&str>, event: &ThrottleEvent) {
        let mut labels: EventLabels = Vec::with_capacity(2);
        if let Some(p) = peer {
            labels.push(("peer", p.to_string()));
        }
        labels.push(("reason", reason_label(&event.reason).to_string()));
        self.inner.throttle_events.get_or_create(&labels).inc();
    }

    // ---- fast path ----------------------------------------------------------------

    /// Sets the fast-path counters of `peer` × `class` to `counters` (a snapshot summed
    /// over CPUs). Replaces, never adds.
    pub fn set_fastpath_class(&self, peer: &str, class: &str, counters: &ClassCounters) {
        self.inner.fastpath.set_class(peer, class, counters);
    }

    /// Replaces the whole per peer × class snapshot at once: series not in `classes`
    /// disappear (e.g. a removed peer). Later entries for the same (peer, class) win.
    pub fn set_fastpath_classes<I, P, C>(&self, classes: I)
    where
        I: IntoIterator<Item = (P, C, ClassCounters)>,
        P: Into<String>,
        C: Into<String>,
    {
        let map: BTreeMap<(String, String), ClassCounters> = classes
            .into_iter()
            .map(|(p, c, v)| ((p.into(), c.into()), v))
            .collect();
        self.inner.fastpath.replace_classes(map);
    }

    /// Sets the listed fast-path global counters to their snapshot values (summed over
    /// CPUs); counters not listed keep their last value. Every [`FastPathCounter`] is
    /// exported (0 until set).
    pub fn set_fastpath_global(&self, values: &[(FastPathCounter, u64)]) {
        self.inner.fastpath.set_global(values);
    }

    /// Counts a connection refused at accept (`reason`: `cer_backlog`,
    /// `cer_backlog_per_source`).
    pub fn inc_connection_refused(&self, reason: &'static str) {
        self.inner
            .connections_refused
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    /// Counts a TLS connection refused (`side`: `accepted` by a TLS listener, or
    /// `dialled` to a TLS server; `reason`: [`crate::transport::tls::Refusal::label`]).
    pub fn inc_tls_refused(&self, side: &'static str, reason: &'static str) {
        self.inner
            .tls_refused
            .get_or_create(&TlsLabels { side, reason })
            .inc();
    }

    /// Counts a config reload by outcome (`applied`, `unchanged`, `dry_run`, `invalid`,
    /// `refused`, `failed`).
    pub fn inc_config_reload(&self, outcome: &'static str) {
        self.inner
            .config_reloads
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    /// Accepted connections waiting for their CER now.
    pub fn set_connections_awaiting_cer(&self, n: u64) {
        self.inner.connections_awaiting_cer.set(gauge_value(n));
    }

    /// The agent is ready (`dra_ready` 1) or not yet (0).
    pub fn set_ready(&self, ready: bool) {
        self.inner.ready.set(i64::from(ready));
    }

    /// The overload control's level, delay and admitted rate (0 when not shedding).
    pub fn set_overload(&self, level: u8, delay: std::time::Duration, admit: f64) {
        self.inner.overload_level.set(i64::from(level));
        self.inner.overload_delay.set(delay.as_secs_f64());
        self.inner.overload_admit.set(admit);
    }

    /// The requests the overload control shed so far, per class and action
    /// (`dra_overload_shed_total`).
    pub fn set_overload_shed(&self, counts: &[crate::overload::ShedCount]) {
        self.inner.fastpath.set_overload_shed(counts);
    }

    /// Sets the agent's out-of-band mark counters (`dra_fastpath_oob_marks_total`,
    /// exported from the first call on).
    pub fn set_oob_marks(&self, received: u64, applied: u64, expired: u64) {
        self.inner.fastpath.set_oob(received, applied, expired);
    }

    // ---- agent --------------------------------------------------------------------

    /// Counts one request received from (`In`) or sent to (`Out`) `peer`.
    pub fn inc_request(&self, peer: &str, direction: Direction) {
        self.inner
            .requests
            .get_or_create(&PeerDirectionLabels {
                peer: peer.to_string(),
                direction: direction.name(),
            })
            .inc();
    }

    /// Counts one answer sent to `peer` with `result_code` (relayed or generated).
    pub fn inc_answer(&self, peer: &str, result_code: u32) {
        self.inner
            .answers
            .get_or_create(&PeerResultLabels {
                peer: peer.to_string(),
                result_code,
            })
            .inc();
    }

    /// Counts an answer to gateway `peer` that carried our OC-OLR (`end`: the
    /// end-of-overload report).
    pub fn inc_doic_olr(
        &self,
        peer: &str,
        report_type: &'static str,
        algorithm: &'static str,
        end: bool,
    ) {
        self.inner
            .doic
            .olrs_sent
            .get_or_create(&DoicLabels {
                peer: peer.to_string(),
                report_type,
                algorithm,
                kind: if end { "end" } else { "report" },
            })
            .inc();
    }

    /// The report gateway `peer` is given now: reduction percent (loss) and maximum
    /// rate (rate), 0 for what is not reported.
    pub fn set_doic_report(&self, peer: &str, reduction: u32, max_rate: u32) {
        let labels = PeerLabels {
            peer: peer.to_string(),
        };
        let d = &self.inner.doic;
        d.reduction.get_or_create(&labels).set(i64::from(reduction));
        d.max_rate.get_or_create(&labels).set(i64::from(max_rate));
    }

    /// Counts an OC-OLR received from server `peer` (`result`: what became of it).
    pub fn inc_doic_olr_received(
        &self,
        peer: &str,
        report_type: &'static str,
        result: &'static str,
    ) {
        self.inner
            .doic
            .olrs_received
            .get_or_create(&DoicReceivedLabels {
                peer: peer.to_string(),
                report_type,
                result,
            })
            .inc();
    }

    /// The largest reduction in force towards server `peer`.
    pub fn set_doic_server_reduction(&self, peer: &str, reduction: u32) {
        self.inner
            .doic
            .server_reduction
            .get_or_create(&PeerLabels {
                peer: peer.to_string(),
            })
            .set(i64::from(reduction));
    }

    /// Counts a request to server `peer` abated by its reports (`outcome`: `diverted`
    /// or `rejected`).
    pub fn inc_doic_abated(&self, peer: &str, outcome: &'static str) {
        self.inner
            .doic
            .abated
            .get_or_create(&DoicAbatedLabels {
                peer: peer.to_string(),
                outcome,
            })
            .inc();
    }

    /// Sets the number of requests pending (sent, unanswered) at `peer`.
    pub fn set_pending_requests(&self, peer: &str, pending: u64) {
        self.inner
            .pending_requests
            .get_or_create(&PeerLabels {
                peer: peer.to_string(),
            })
            .set(gauge_value(pending));
    }

    /// Sets the number of requests queued for peer group `group`.
    pub fn set_queue_depth(&self, group: &str, depth: u64) {
        self.inner
            .queue_depth
            .get_or_create(&GroupLabels {
                group: group.to_string(),
            })
            .set(gauge_value(depth));
    }

    /// `peer`'s per-message series, each resolved on its first use and then counted
    /// through its handle (see [`PeerSeries`]).
    pub fn peer_series(&self, peer: &str) -> PeerSeries {
        PeerSeries {
            peer: peer.to_owned(),
            requests: [None, None],
            latency: None,
            answers: Vec::new(),
        }
    }

    /// Observes the time from forwarding a request to `peer` until its answer.
    pub fn observe_answer_latency(&self, peer: &str, latency: Duration) {
        self.inner
            .answer_latency
            .get_or_create(&PeerLabels {
                peer: peer.to_string(),
            })
            .observe(latency.as_secs_f64());
    }

    /// Sets `peer`'s state: its series for `state` becomes 1, the other states 0 (all
    /// six change together: a scrape never sees two states or none).
    pub fn set_peer_state(&self, peer: &str, state: PeerState) {
        let mut m = self
            .inner
            .peer_state
            .states
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        match m.get_mut(peer) {
            Some(s) => *s = state,
            None => {
                m.insert(peer.to_string(), state);
            }
        }
    }

    /// Replaces the configured peers `dra_peer_info` exports: (name, role, group).
    pub fn set_peer_info<'a>(
        &self,
        peers: impl IntoIterator<Item = (&'a str, &'a str, Option<&'a str>)>,
    ) {
        let v = peers
            .into_iter()
            .map(|(peer, role, group)| PeerInfo {
                peer: peer.to_string(),
                role: role.to_string(),
                group: group.map(str::to_string),
            })
            .collect();
        *self
            .inner
            .peer_info
            .peers
            .write()
            .unwrap_or_else(PoisonError::into_inner) = v;
    }

    /// Sets who enforces the ingress limits now (`dra_fastpath_state`).
    pub fn set_fastpath_state(&self, state: FastPathState) {
        *self
            .inner
            .fastpath_state
            .state
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Some(state);
    }

    /// Counts a request that ended without an answer (a broken invariant: every request
    /// gets exactly one answer).
    pub fn inc_unanswered_invariant_violation(&self) {
        self.inner.unanswered_violations.inc();
    }

    // ---- session store ------------------------------------------------------------

    /// Observes one store call (`op`: `get`, `set`, `del`) and its duration.
    pub fn observe_store_call(&self, op: &'static str, took: Duration) {
        self.inner
            .store
            .latency
            .get_or_create(&OpLabels { op })
            .observe(took.as_secs_f64());
    }

    /// Counts a failed store call (`kind`: `timeout`, `unavailable`, `error`).
    pub fn inc_store_error(&self, op: &'static str, kind: &'static str) {
        self.inner
            .store
            .errors
            .get_or_create(&OpKindLabels { op, kind })
            .inc();
    }

    /// Counts a lookup in the local binding cache (`hit` or `miss`).
    pub fn inc_session_cache(&self, hit: bool) {
        let result = if hit { "hit" } else { "miss" };
        self.inner
            .store
            .cache
            .get_or_create(&ResultLabels { result })
            .inc();
    }

    /// Counts a binding written to (`written`) or deleted from (`deleted`) the store.
    pub fn inc_session_binding(&self, op: &'static str) {
        self.inner
            .store
            .bindings
            .get_or_create(&OpLabels { op })
            .inc();
    }

    /// Counts a request that followed `on_error` (`local` or `reject`).
    pub fn inc_store_fallback(&self, on_error: &'static str) {
        self.inner
            .store
            .fallbacks
            .get_or_create(&OnErrorLabels { on_error })
            .inc();
    }

    /// Whether the session store answers.
    pub fn set_store_up(&self, up: bool) {
        self.inner.store.up.set(i64::from(up));
    }

    /// Requests waiting for a store call now.
    pub fn set_store_waiting(&self, n: u64) {
        self.inner.store.waiting.set(gauge_value(n));
    }
}
