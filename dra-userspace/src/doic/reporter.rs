//! The DRA as a DOIC reporting node towards its gateways (RFC 7683 §5, RFC 8581 peer
//! reports, RFC 8582 rate algorithm), sans-IO.
//!
//! Citations: the RFC 7683 sections below were checked against its text (§5.1.2,
//! §5.2.1.3, §5.2.1.4, §5.2.3, §6, §7.5); RFC 8581 and RFC 8582 are cited by name
//! only, their rules as remembered — unverified (only their first pages were available
//! to check against).
//!
//! # Driving table
//!
//! - [`Reporter::on_request`], every request from a gateway (marked ones too):
//!   remembers its DOIC announcement, counts the request (total, per limited class).
//! - [`Reporter::set_throttle`], when the DRL controller changes a gateway's throttle:
//!   the classes DRL scales are then limited to `static × (100 − t) / 100`.
//! - [`Reporter::tick`], once per measurement window (the agent: every second):
//!   recomputes each gateway's report from the window's counts.
//! - [`Reporter::decorate`], every answer to a gateway (relayed or the agent's own):
//!   adds OC-Supported-Features and, while a report is live, the OC-OLR.
//!
//! Time is an argument everywhere (`Duration` since an arbitrary start).
//!
//! # What the report says
//!
//! The report is what the ingress limits currently enforce on the gateway, expressed in
//! the algorithm the gateway and we agreed on:
//!
//! - The gateway's *offered* rate is estimated from the window's arrivals. With the loss
//!   algorithm a compliant gateway already drops the share `r` we last reported, so the
//!   offered rate is `arrived / (1 − r)` (per limited class too); with the rate algorithm
//!   what arrives is taken as offered.
//! - The *admitted* rate is what the limits let through from that offered traffic: each
//!   limited class at most its effective rate (`static × (100 − throttle) / 100` for the
//!   classes DRL scales), the rest as offered, everything at most the overall limit.
//! - **Loss** (RFC 7683 §6, OC-Reduction-Percentage):
//!   `⌈100 × (offered − admitted) / offered⌉`, at most 99 (a 100 % report would leave
//!   us nothing to measure).
//! - **Rate** (RFC 8582, OC-Maximum-Rate): the rate the limits admit. Per limited class
//!   the smaller of its effective rate and the highest rate it was offered during the
//!   report, plus the highest rate of the gateway's other requests during the report,
//!   at most the overall limit. (Highest, so the report does not shrink each time the
//!   gateway's demand dips under a cap it obeys; with only an overall limit, the report
//!   is that limit.)
//!
//! A report starts in the first window where the offered traffic exceeds what is
//! admitted. It stays while that holds (loss), or while the gateway still uses at least
//! 90 % of its maximum rate (rate: an obeying gateway never exceeds it). After
//! [`END_AFTER_WINDOWS`] windows without overload the end is reported explicitly:
//! OC-Validity-Duration 0 (and OC-Reduction-Percentage 0 for loss) with a new sequence
//! number (RFC 7683 §5.2.1.4, §5.2.3), carried for one validity period, after which the
//! gateway's copy would have expired anyway and answers carry no OC-OLR again.
//!
//! # Capability and selection
//!
//! - Answers carry OC-Supported-Features only for gateways whose request carried one
//!   (RFC 7683 §5.1.2: a reporting node never announces DOIC to a node that did not):
//!   gateways without DOIC see nothing new. For the agent's own answers that is the
//!   request itself; for relayed answers, the latest request from that gateway (RFC
//!   7683 §5.1.1: a reacting node puts OC-Supported-Features in every request).
//! - Peer reports need the gateway to announce OLR_PEER_REPORT with its own identity
//!   as SourceID (RFC 8581: a SourceID that is not the sending peer's means the
//!   announcement came through a non-supporting agent and must be ignored). Such a
//!   gateway gets OLR_PEER_REPORT, our SourceID and OC-Peer-Algo back; a DOIC gateway
//!   without it gets the loss bit only and no OC-OLR (a host report would be misread
//!   as the server's).
//! - The peer-report algorithm is the first of our configured algorithms the gateway
//!   supports; loss when none (every DOIC node supports loss, RFC 7683 §4.2, §6.1).
//! - A relayed answer that already has OC-Supported-Features (a DOIC server's
//!   selection for its host/realm reports) keeps its feature vector; we add the peer
//!   bit, our SourceID and OC-Peer-Algo, replacing the server's (RFC 8581: the peer
//!   members describe the adjacent peer). A peer report of the server in it was meant
//!   for us and is removed; its host and realm reports are relayed unchanged.
//!
//! # Sequence numbers
//!
//! Per gateway, starting at a base the caller chooses (the agent: milliseconds since
//! the Unix epoch at start, so a restarted agent's reports are newer than the old
//! ones, RFC 7683 §5.2.1.4; receivers drop reports whose number is not higher,
//! §5.2.1.3). Every change of the report's content takes the next number, and so does
//! an unchanged report once half its validity has passed, so the gateway's copy (timed
//! from the first receipt of a number, §7.5) never expires under it.

use std::time::Duration;

use dra_common::wire::MsgClass;

use super::avps::{Olr, ReportType, SupportedFeatures};
use crate::diameter::dictionary::enums::oc_feature;
use crate::diameter::{Message, avp_code as c};

/// Windows without overload before the end of a report is announced.
pub const END_AFTER_WINDOWS: u32 = 2;
/// A reduction above this is never reported (see the module docs).
pub const MAX_REDUCTION: u32 = 99;
/// With the rate algorithm, a gateway sending at least this share of its maximum rate
/// is still held by it.
const RATE_IN_USE: f64 = 0.9;

/// A traffic abatement algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// RFC 7683 loss (OLR_DEFAULT_ALGO): drop a percentage of the requests.
    Loss,
    /// RFC 8582 rate (OLR_RATE_ALGORITHM): send at most N requests per second.
    Rate,
}

impl Algorithm {
    /// Its OC-Feature-Vector bit.
    pub fn bit(self) -> u64 {
        match self {
            Algorithm::Loss => oc_feature::LOSS,
            Algorithm::Rate => oc_feature::RATE,
        }
    }

    /// The config and metrics name.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Loss => "loss",
            Algorithm::Rate => "rate",
        }
    }

    /// From the config name.
    pub fn from_name(s: &str) -> Option<Algorithm> {
        match s {
            "loss" => Some(Algorithm::Loss),
            "rate" => Some(Algorithm::Rate),
            _ => None,
        }
    }
}

/// One ingress class limit of a gateway.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassLimit {
    /// The class (request type 0 = any request type of that command).
    pub class: MsgClass,
    /// Static rate, requests per second.
    pub rate: f64,
    /// DRL scales it.
    pub dynamic: bool,
}

/// A gateway's DOIC settings and the ingress limits the report describes.
#[derive(Clone, Debug, PartialEq)]
pub struct GatewayConfig {
    /// Its Origin-Host (checked against the SourceID it announces).
    pub origin_host: String,
    /// Algorithms we offer it, in order of preference (never empty).
    pub algorithms: Vec<Algorithm>,
    /// OC-Validity-Duration of its reports, seconds (1..=86,400).
    pub validity_secs: u32,
    /// Its overall ingress limit, requests per second.
    pub overall: Option<f64>,
    /// Its ingress class limits.
    pub classes: Vec<ClassLimit>,
}

/// The report a gateway is given.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Report {
    /// Shed this percentage (loss).
    Reduction(u32),
    /// Send at most this many requests per second (rate).
    MaxRate(u32),
}

#[derive(Clone, Debug, PartialEq)]
enum State {
    Idle,
    Active {
        report: Report,
        /// When the current sequence number was issued.
        issued: Duration,
        /// Windows in a row without overload.
        calm: u32,
    },
    Ending {
        algorithm: Algorithm,
        until: Duration,
    },
}

/// What one gateway's answers said, for metrics.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sent {
    /// The algorithm of the report.
    pub algorithm: Algorithm,
    /// The end-of-overload report (validity 0).
    pub end: bool,
}

struct Gateway {
    cfg: GatewayConfig,
    throttle: u8,
    /// OC-Supported-Features of its latest request (`None`: it had none).
    latest: Option<SupportedFeatures>,
    arrivals: u64,
    class_arrivals: Vec<u64>,
    /// Rate: the highest offered rate per limited class (then of the other requests)
    /// seen during the current report.
    peaks: Vec<f64>,
    state: State,
    sequence: u64,
}

/// The reporting node; gateways are addressed by the index the caller gave them.
pub struct Reporter {
    own_host: String,
    gateways: Vec<Option<Gateway>>,
    last_tick: Option<Duration>,
    /// The share of what arrives that the agent's own overload control admits (1:
    /// nothing shed; `crate::overload`).
    overload_admit: f64,
}

impl Reporter {
    /// `gateways[i]`: the settings of gateway `i`, `None` for peers without DOIC
    /// (`doic = false`, servers). `sequence_base`: the first sequence number.
    pub fn new(
        own_host: &str,
        gateways: Vec<Option<GatewayConfig>>,
        sequence_base: u64,
    ) -> Reporter {
        let gateways = gateways
            .into_iter()
            .map(|g| {
                g.map(|cfg| Gateway {
                    class_arrivals: vec![0; cfg.classes.len()],
                    peaks: vec![0.0; cfg.classes.len() + 1],
                    cfg,
                    throttle: 0,
                    latest: None,
                    arrivals: 0,
                    state: State::Idle,
                    sequence: sequence_base,
                })
            })
            .collect();
        Reporter {
            own_host: own_host.to_owned(),
            gateways,
            last_tick: None,
            overload_admit: 1.0,
        }
    }

    /// The share (0..=1) of the requests arriving that the agent's own overload control
    /// admits: a gateway is admitted at most that share of its arrivals, so its peer
    /// report asks it to shed the rest at the source (RFC 8581: the report is about the
    /// agent itself).
    pub fn set_overload(&mut self, admit: f64) {
        self.overload_admit = admit.clamp(0.0, 1.0);
    }

    /// Whether gateway `gw` has DOIC enabled.
    pub fn enabled(&self, gw: usize) -> bool {
        matches!(self.gateways.get(gw), Some(Some(_)))
    }

    /// A request from gateway `gw`: its capability is remembered and it is counted.
    /// Returns the request's OC-Supported-Features (`None` when it has none or a
    /// malformed one, which is treated as none).
    pub fn on_request(&mut self, gw: usize, req: &Message) -> Option<SupportedFeatures> {
        let caps = SupportedFeatures::of(req).and_then(Result::ok);
        self.on_request_of(gw, req.class(), caps)
    }

    /// [`Reporter::on_request`] for a request the agent did not decode: its class and
    /// its OC-Supported-Features (`None`: it had none).
    pub fn on_request_of(
        &mut self,
        gw: usize,
        class: MsgClass,
        caps: Option<SupportedFeatures>,
    ) -> Option<SupportedFeatures> {
        let Some(Some(g)) = self.gateways.get_mut(gw) else {
            return None;
        };
        g.latest = caps.clone();
        g.arrivals += 1;
        if let Some(i) = class_index(&g.cfg.classes, class) {
            g.class_arrivals[i] += 1;
        }
        caps
    }

    /// The OC-Supported-Features of gateway `gw`'s latest request.
    pub fn latest(&self, gw: usize) -> Option<&SupportedFeatures> {
        match self.gateways.get(gw) {
            Some(Some(g)) => g.latest.as_ref(),
            _ => None,
        }
    }

    /// The DRL throttle of gateway `gw` (percent, 0..=100).
    pub fn set_throttle(&mut self, gw: usize, throttle: u8) {
        if let Some(Some(g)) = self.gateways.get_mut(gw) {
            g.throttle = throttle.min(100);
        }
    }

    /// The report gateway `gw` is given now (`None`: none, or the end is being
    /// reported).
    pub fn report(&self, gw: usize) -> Option<Report> {
        match self.gateways.get(gw) {
            Some(Some(Gateway {
                state: State::Active { report, .. },
                ..
            })) => Some(*report),
            _ => None,
        }
    }

    /// The current sequence number of gateway `gw`'s report.
    pub fn sequence(&self, gw: usize) -> Option<u64> {
        match self.gateways.get(gw) {
            Some(Some(g)) => Some(g.sequence),
            _ => None,
        }
    }

    /// Ends a measurement window: recomputes every gateway's report from the requests
    /// counted since the previous tick. The first tick only starts the first window.
    pub fn tick(&mut self, now: Duration) {
        let Some(last) = self.last_tick.replace(now) else {
            for g in self.gateways.iter_mut().flatten() {
                g.reset_counts();
            }
            return;
        };
        let secs = now.saturating_sub(last).as_secs_f64();
        if secs <= 0.0 {
            return;
        }
        for g in self.gateways.iter_mut().flatten() {
            g.tick(now, secs, self.overload_admit);
            g.reset_counts();
        }
    }

    /// Adds DOIC to an answer for gateway `gw`. `request_caps`: the OC-Supported-Features
    /// of the request it answers (for relayed answers, [`Reporter::latest`]). Returns
    /// what OC-OLR it carries, if any.
    pub fn decorate(
        &mut self,
        now: Duration,
        gw: usize,
        request_caps: Option<&SupportedFeatures>,
        answer: &mut Message,
    ) -> Option<Sent> {
        let Some(Some(g)) = self.gateways.get_mut(gw) else {
            return None;
        };
        // RFC 7683 §5.1.2: only to a request that announced DOIC.
        let caps = request_caps?;
        let peer_ok = peer_capable(caps, &g.cfg.origin_host);
        let algorithm = select(&g.cfg.algorithms, caps.features());
        // The server's own announcement (host/realm selection), if it made one.
        let pos = answer
            .avps
            .iter()
            .position(|a| a.is(c::OC_SUPPORTED_FEATURES, None));
        let server = pos.and_then(|i| SupportedFeatures::from_avp(&answer.avps[i]).ok());
        let mut ours = SupportedFeatures {
            feature_vector: Some(server.as_ref().map_or(oc_feature::LOSS, |s| {
                s.feature_vector.unwrap_or(oc_feature::LOSS) & !oc_feature::PEER_REPORT
            })),
            source_id: None,
            peer_algo: None,
        };
        if peer_ok {
            ours.feature_vector = ours.feature_vector.map(|v| v | oc_feature::PEER_REPORT);
            ours.source_id = Some(self.own_host.clone());
            ours.peer_algo = Some(algorithm.bit());
        }
        match pos {
            Some(i) => answer.avps[i] = ours.to_avp(),
            None => answer.push(ours.to_avp()),
        }
        // RFC 8581: a peer report names its source; the server's was for us.
        answer.avps.retain(|a| {
            !(a.is(c::OC_OLR, None)
                && Olr::from_avp(a).is_ok_and(|o| o.report_type == ReportType::Peer))
        });
        if !peer_ok {
            return None;
        }
        g.refresh(now);
        let (olr, sent) = match &g.state {
            State::Idle => return None,
            State::Active { report, .. } => {
                let (reduction, max_rate, algorithm) = match *report {
                    Report::Reduction(r) => (Some(r), None, Algorithm::Loss),
                    Report::MaxRate(r) => (None, Some(r), Algorithm::Rate),
                };
                let olr = Olr {
                    sequence: g.sequence,
                    report_type: ReportType::Peer,
                    reduction,
                    validity: Some(g.cfg.validity_secs),
                    source_id: Some(self.own_host.clone()),
                    max_rate,
                };
                (
                    olr,
                    Sent {
                        algorithm,
                        end: false,
                    },
                )
            }
            State::Ending { algorithm, .. } => {
                let olr = Olr {
                    sequence: g.sequence,
                    report_type: ReportType::Peer,
                    reduction: (*algorithm == Algorithm::Loss).then_some(0),
                    validity: Some(0),
                    source_id: Some(self.own_host.clone()),
                    max_rate: None,
                };
                (
                    olr,
                    Sent {
                        algorithm: *algorithm,
                        end: true,
                    },
                )
            }
        };
        answer.push(olr.to_avp());
        Some(sent)
    }
}

/// RFC 8581: the gateway supports peer reports and names itself as their source.
fn peer_capable(caps: &SupportedFeatures, origin_host: &str) -> bool {
    caps.features() & oc_feature::PEER_REPORT != 0
        && caps
            .source_id
            .as_deref()
            .is_some_and(|s| s.eq_ignore_ascii_case(origin_host))
}

/// The first of `ours` the gateway supports; loss, which every DOIC node supports
/// (RFC 7683 §6.1), when none is.
pub fn select(ours: &[Algorithm], features: u64) -> Algorithm {
    ours.iter()
        .copied()
        .find(|a| features & a.bit() != 0)
        .unwrap_or(Algorithm::Loss)
}

/// The class limit a request of class `mc` counts against: the exact class, else the
/// same command with any request type.
fn class_index(classes: &[ClassLimit], mc: MsgClass) -> Option<usize> {
    classes.iter().position(|l| l.class == mc).or_else(|| {
        let any = MsgClass::new(mc.app_id, mc.command_code, 0);
        classes.iter().position(|l| l.class == any)
    })
}

impl Gateway {
    fn reset_counts(&mut self) {
        self.arrivals = 0;
        self.class_arrivals.iter_mut().for_each(|n| *n = 0);
    }

    fn effective(&self, l: &ClassLimit) -> f64 {
        if l.dynamic {
            crate::control::effective_rate(l.rate, self.throttle)
        } else {
            l.rate
        }
    }

    /// A new sequence number for an unchanged report once half its validity is gone.
    fn refresh(&mut self, now: Duration) {
        let half = Duration::from_secs(u64::from(self.cfg.validity_secs)) / 2;
        if let State::Active { issued, .. } = &mut self.state
            && now.saturating_sub(*issued) >= half
        {
            *issued = now;
            self.sequence += 1;
        }
    }

    fn tick(&mut self, now: Duration, secs: f64, overload_admit: f64) {
        let caps = match &self.latest {
            Some(caps) if peer_capable(caps, &self.cfg.origin_host) => caps,
            // Not (or no longer) announcing DOIC with peer reports: nothing to report.
            _ => {
                self.state = State::Idle;
                return;
            }
        };
        let algorithm = select(&self.cfg.algorithms, caps.features());
        if let State::Ending { until, .. } = self.state {
            if now >= until {
                self.state = State::Idle;
            } else {
                // The end stays reported for its period; a new overload starts afresh.
                let m = self.measure(secs, 0.0, algorithm, overload_admit);
                if m.excess <= 0.0 {
                    return;
                }
                self.state = State::Idle;
            }
        }
        let reported_loss = match self.state {
            State::Active {
                report: Report::Reduction(r),
                ..
            } => f64::from(r) / 100.0,
            _ => 0.0,
        };
        let m = self.measure(secs, reported_loss, algorithm, overload_admit);
        let (prev, calm) = match &self.state {
            State::Active { report, calm, .. } => (Some(*report), *calm),
            _ => (None, 0),
        };
        if prev.is_none() {
            self.peaks.iter_mut().for_each(|p| *p = 0.0);
        }
        for (p, o) in self.peaks.iter_mut().zip(&m.per_class) {
            *p = p.max(*o);
        }
        let overloaded = m.excess > 0.0
            || matches!(prev, Some(Report::MaxRate(r)) if m.offered >= RATE_IN_USE * f64::from(r));
        let next = match algorithm {
            Algorithm::Loss => {
                let r = if m.offered > 0.0 {
                    // Ceiling, past floating-point noise (1000.0000001 is 1000).
                    (100.0 * m.excess / m.offered - 1e-6)
                        .ceil()
                        .clamp(0.0, f64::from(MAX_REDUCTION))
                } else {
                    0.0
                };
                Report::Reduction(r as u32)
            }
            Algorithm::Rate => {
                // Each limited class at most its limit, as much as it asked for.
                let n = self.cfg.classes.len();
                let mut cap = self.peaks[n];
                for (l, p) in self.cfg.classes.iter().zip(&self.peaks) {
                    cap += p.min(self.effective(l));
                }
                if let Some(o) = self.cfg.overall {
                    cap = cap.min(o);
                }
                // The agent's own overload: at most its admitted share of what arrives.
                if overload_admit < 1.0 {
                    cap = cap.min(self.arrivals as f64 / secs * overload_admit);
                }
                Report::MaxRate(cap.floor().max(0.0).min(f64::from(u32::MAX)) as u32)
            }
        };
        let live = overloaded && next != Report::Reduction(0);
        match (prev, live) {
            (None, false) => {}
            (None, true) => {
                self.sequence += 1;
                self.state = State::Active {
                    report: next,
                    issued: now,
                    calm: 0,
                };
            }
            (Some(p), true) => {
                let changed = p != next;
                if changed {
                    self.sequence += 1;
                }
                if let State::Active {
                    report,
                    issued,
                    calm,
                } = &mut self.state
                {
                    *report = next;
                    *calm = 0;
                    if changed {
                        *issued = now;
                    }
                }
            }
            (Some(p), false) => {
                if calm + 1 >= END_AFTER_WINDOWS {
                    // RFC 7683 §5.2.3: the end is reported, not left to expire.
                    self.sequence += 1;
                    let algorithm = match p {
                        Report::Reduction(_) => Algorithm::Loss,
                        Report::MaxRate(_) => Algorithm::Rate,
                    };
                    let until = now + Duration::from_secs(u64::from(self.cfg.validity_secs));
                    self.state = State::Ending { algorithm, until };
                } else if let State::Active { calm, .. } = &mut self.state {
                    *calm += 1;
                }
            }
        }
    }

    /// Offered and admitted rates of the window (see the module docs).
    fn measure(
        &self,
        secs: f64,
        reported_loss: f64,
        algorithm: Algorithm,
        overload_admit: f64,
    ) -> Measure {
        let scale = match algorithm {
            Algorithm::Loss if reported_loss < 1.0 => 1.0 / (1.0 - reported_loss),
            _ => 1.0,
        };
        let offered = self.arrivals as f64 / secs * scale;
        let mut in_classes = 0.0;
        let mut admitted_classes = 0.0;
        let mut per_class = Vec::with_capacity(self.cfg.classes.len() + 1);
        for (l, n) in self.cfg.classes.iter().zip(&self.class_arrivals) {
            let o = *n as f64 / secs * scale;
            in_classes += o;
            admitted_classes += o.min(self.effective(l));
            per_class.push(o);
        }
        let other = (offered - in_classes).max(0.0);
        per_class.push(other);
        let mut admitted = other + admitted_classes;
        if let Some(o) = self.cfg.overall {
            admitted = admitted.min(o);
        }
        // While the agent's own overload control sheds, it admits that share of what
        // arrives (`Reporter::set_overload`).
        if overload_admit < 1.0 {
            admitted = admitted.min(self.arrivals as f64 / secs * overload_admit);
        }
        Measure {
            offered,
            excess: offered - admitted,
            per_class,
        }
    }
}

struct Measure {
    offered: f64,
    excess: f64,
    /// Offered rate per limited class, then of the other requests.
    per_class: Vec<f64>,
}
