//! Closed-loop client mode (gateways at a fixed concurrency): N peers, each its own TCP
//! connection and Origin-Host (CER/CEA, DWR/DWA, DPR/DPA through [`PeerConnection`]),
//! each keeping exactly W Gx requests in flight. A *slot* holds one request; when its
//! answer arrives the slot sends the next one at once, alternating CCR-I and CCR-T of its
//! own session (so a DRA's session bindings are created and removed as in service).
//!
//! This measures how fast the other end answers (requests/s at a given concurrency) and
//! the latency at that concurrency, which an open-loop [`super::client`] scenario cannot:
//! there the rate is given and the latency follows. Requests are pre-encoded per slot;
//! per send only the Hop-by-Hop and End-to-End identifiers (and the session counter in
//! the Session-Id of a CCR-I) are patched, so the simulator stays cheap next to the relay
//! it measures.
//!
//! Time: a warm-up (load runs, nothing recorded), then the measured window: a request
//! counts when it was sent and answered inside the window. After the window no new
//! request leaves; answers still in flight are awaited for at most [`ClosedConfig::drain`],
//! then every peer sends DPR.
//!
//! [`ClosedPeer`] is the sans-IO core of one connection (templates, slots, measurement);
//! [`run`] is the tokio shell. It spawns one task per peer and works on a current-thread
//! runtime (the relay benchmark runs clients and servers on one).

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dra::transport::Connection;
use dra_common::wire::{HEADER_LEN, app, avp as avp_code, cmd, flags};
use dra_report::closed::ClosedSummary;
use hdrhistogram::Histogram;

use super::conn::{Exit, Flow, Link, Mode, drive};
use super::{AllowList, loadgen_peer_config};
use dra::diameter::peer::{
    ConnectionOptions, DisconnectCause, PeerConfigError, PeerConnection, PeerEvent, Role,
};
use dra::diameter::{Avp, FramingError, Message};

/// CC-Request-Type INITIAL_REQUEST (RFC 4006 §8.3).
const CCR_I: i32 = 1;
/// CC-Request-Type TERMINATION_REQUEST (RFC 4006 §8.3).
const CCR_T: i32 = 3;
/// Hex digits of the per-slot session counter in a Session-Id.
const CYCLE_DIGITS: usize = 8;
/// Highest latency the histogram holds (60 s, in µs).
const MAX_LATENCY_US: u64 = 60_000_000;

/// Closed-loop client configuration.
#[derive(Clone, Debug)]
pub struct ClosedConfig {
    /// The DRA (or server) to connect to.
    pub connect: SocketAddr,
    /// Source address of every connection (None = chosen by the kernel).
    pub bind: Option<IpAddr>,
    /// Number of gateway peers (connections).
    pub peers: usize,
    /// Requests in flight per peer (total in flight = peers × window).
    pub window: usize,
    /// Origin-Host pattern; `{n}` becomes 1..=peers (e.g. "pgw{n}.lab.example").
    pub origin_host_pattern: String,
    /// Origin-Realm of every peer.
    pub origin_realm: String,
    /// Destination-Realm of every CCR.
    pub destination_realm: String,
    /// Destination-Host of every CCR, if any.
    pub destination_host: Option<String>,
    /// Load runs, nothing is recorded (counted from [`run`]'s start, so it also covers
    /// connecting and the capabilities exchange).
    pub warmup: Duration,
    /// The measured window, after the warm-up.
    pub measure: Duration,
    /// After the window, wait this long at most for answers still in flight.
    pub drain: Duration,
    /// Keep retrying a refused connect for this long (a relay may still be opening its
    /// listener).
    pub connect_timeout: Duration,
    /// Watchdog interval Tw (≥ 6 s).
    pub tw: Duration,
    /// Seed for the Hop-by-Hop / End-to-End identifiers.
    pub seed: u64,
    /// TLS towards the DRA; `None`: plain TCP.
    pub tls: Option<dra::transport::tls::Connector>,
    /// SCTP towards the DRA instead of TCP.
    pub sctp: Option<super::Sctp>,
}

impl ClosedConfig {
    /// Defaults: origin hosts pgw{n}.lab.example, realm lab.example, destination realm
    /// pcrf.lab.example, 2 s warm-up, 10 s measured, 3 s drain, 10 s connect retry,
    /// Tw 30 s.
    pub fn new(connect: SocketAddr, peers: usize, window: usize) -> ClosedConfig {
        ClosedConfig {
            connect,
            bind: None,
            peers,
            window,
            origin_host_pattern: "pgw{n}.lab.example".to_owned(),
            origin_realm: "lab.example".to_owned(),
            destination_realm: "pcrf.lab.example".to_owned(),
            destination_host: None,
            warmup: Duration::from_secs(2),
            measure: Duration::from_secs(10),
            drain: Duration::from_secs(3),
            connect_timeout: Duration::from_secs(10),
            tw: Duration::from_secs(30),
            seed: 1,
            tls: None,
            sctp: None,
        }
    }

    /// Origin-Host of peer `i` (0-based).
    pub fn origin_host(&self, i: usize) -> String {
        super::origin_host_of(&self.origin_host_pattern, i)
    }
}

/// The closed-loop client could not run, or a peer failed during the run.
#[derive(Debug, thiserror::Error)]
pub enum ClosedError {
    /// `peers`, `window` or the measured window is zero.
    #[error("peers, window and the measured time must be positive")]
    Empty,
    /// An Origin-Host or Tw the peer state machine refuses.
    #[error("peer configuration")]
    Peer {
        /// Why.
        #[source]
        source: PeerConfigError,
    },
    /// The TCP connection could not be made within `connect_timeout`.
    #[error("{origin_host}: cannot connect to {addr}")]
    Connect {
        /// The peer.
        origin_host: String,
        /// Where to.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The other end answered the CER with an error (RFC 6733 §5.3).
    #[error("{origin_host}: CER refused with {result_code} {error_message:?}")]
    Refused {
        /// The peer.
        origin_host: String,
        /// The CEA's Result-Code.
        result_code: u32,
        /// The CEA's Error-Message.
        error_message: Option<String>,
    },
    /// The other end closed the connection (or the watchdog gave up) before the end.
    #[error("{origin_host}: connection closed by the other end before the run ended")]
    Closed {
        /// The peer.
        origin_host: String,
    },
    /// Reading or writing the connection failed.
    #[error("{origin_host}: connection I/O")]
    Io {
        /// The peer.
        origin_host: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The byte stream is not Diameter (RFC 6733 §3).
    #[error("{origin_host}: framing")]
    Framing {
        /// The peer.
        origin_host: String,
        /// Why.
        #[source]
        source: FramingError,
    },
    /// A peer task panicked or was cancelled.
    #[error("peer task")]
    Task {
        /// Why.
        #[source]
        source: tokio::task::JoinError,
    },
}

/// The measured window, as instants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// Start (end of the warm-up).
    pub from: Instant,
    /// End: no new request leaves after it.
    pub to: Instant,
}

impl Window {
    /// Whether a request sent at `sent` and answered at `answered` is measured.
    pub fn counts(&self, sent: Instant, answered: Instant) -> bool {
        sent >= self.from && answered < self.to
    }
}

/// What a closed-loop run measured (all peers together).
#[derive(Clone, Debug)]
pub struct ClosedReport {
    /// Peers that ran.
    pub peers: usize,
    /// Requests in flight per peer.
    pub window: usize,
    /// Length of the measured window.
    pub measured: Duration,
    /// Requests sent inside the window.
    pub sent: u64,
    /// Answers to requests sent inside the window, received inside it, by Result-Code
    /// (Experimental-Result-Code when there is no Result-Code; 0 when neither).
    pub answered: BTreeMap<u32, u64>,
    /// Answers to requests sent inside the window whenever they arrived (the drain
    /// included), by Result-Code: what the other end decided of the window's requests,
    /// which a slow answer at the window's end does not take out (a limit's admitted
    /// rate is this over the window's length).
    pub answered_of_sent: BTreeMap<u32, u64>,
    /// Latency (send → answer, µs) of the answers in `answered`.
    pub latency_us: Histogram<u64>,
    /// Requests sent over the whole run (warm-up, window, none after it).
    pub total_sent: u64,
    /// Answers over the whole run (including the drain), by Result-Code.
    pub total_answered: BTreeMap<u32, u64>,
    /// Requests still unanswered when the drain ended.
    pub unanswered: u64,
    /// The most requests one peer ever had in flight (never above `window`).
    pub max_in_flight: usize,
    /// The longest time inside the window in which one peer sent nothing (from the
    /// window's start to its first request, between two requests, from its last request
    /// to the window's end): a sender that stalls offers nothing a limiter could admit.
    pub longest_send_gap: Duration,
}

impl ClosedReport {
    fn empty(peers: usize, window: usize, measured: Duration) -> ClosedReport {
        ClosedReport {
            peers,
            window,
            measured,
            sent: 0,
            answered: BTreeMap::new(),
            answered_of_sent: BTreeMap::new(),
            latency_us: new_histogram(),
            total_sent: 0,
            total_answered: BTreeMap::new(),
            unanswered: 0,
            max_in_flight: 0,
            longest_send_gap: Duration::ZERO,
        }
    }

    /// Adds another peer's (or run's) measurements to this one.
    pub fn merge(&mut self, other: &ClosedReport) {
        self.sent += other.sent;
        for (rc, n) in &other.answered {
            *self.answered.entry(*rc).or_default() += n;
        }
        for (rc, n) in &other.answered_of_sent {
            *self.answered_of_sent.entry(*rc).or_default() += n;
        }
        // Both histograms have the same bounds: adding cannot fail.
        let _ = self.latency_us.add(&other.latency_us);
        self.total_sent += other.total_sent;
        for (rc, n) in &other.total_answered {
            *self.total_answered.entry(*rc).or_default() += n;
        }
        self.unanswered += other.unanswered;
        self.max_in_flight = self.max_in_flight.max(other.max_in_flight);
        self.longest_send_gap = self.longest_send_gap.max(other.longest_send_gap);
    }

    /// Answers counted in the window, whatever their Result-Code.
    pub fn answered_total(&self) -> u64 {
        self.answered.values().sum()
    }

    /// Answers counted in the window with this Result-Code.
    pub fn answered_with(&self, rc: u32) -> u64 {
        self.answered.get(&rc).copied().unwrap_or(0)
    }

    /// Answers with Result-Code `rc` to requests sent inside the window, whenever they
    /// arrived ([`ClosedReport::answered_of_sent`]).
    pub fn decided_with(&self, rc: u32) -> u64 {
        self.answered_of_sent.get(&rc).copied().unwrap_or(0)
    }

    /// Answers in the window per second of the window.
    pub fn requests_per_s(&self) -> f64 {
        let s = self.measured.as_secs_f64();
        if s > 0.0 {
            self.answered_total() as f64 / s
        } else {
            0.0
        }
    }

    /// Latency at quantile `q` (0..=1) in milliseconds (0 when nothing was measured).
    pub fn latency_ms(&self, q: f64) -> f64 {
        self.latency_us.value_at_quantile(q) as f64 / 1000.0
    }

    /// The report's summary (requests/s, latency quantiles in ms, counts): what
    /// `dra-loadgen closed` writes.
    pub fn summary(&self) -> ClosedSummary {
        ClosedSummary {
            peers: self.peers,
            window: self.window,
            in_flight: self.peers * self.window,
            measured_s: self.measured.as_secs_f64(),
            requests_per_s: (self.requests_per_s() * 10.0).round() / 10.0,
            sent: self.sent,
            answered: self.answered.clone(),
            answered_of_sent: self.answered_of_sent.clone(),
            p50_ms: self.latency_ms(0.50),
            p90_ms: self.latency_ms(0.90),
            p99_ms: self.latency_ms(0.99),
            max_ms: self.latency_ms(1.0),
            total_sent: self.total_sent,
            total_answered: self.total_answered.clone(),
            unanswered: self.unanswered,
            max_in_flight: self.max_in_flight,
            longest_send_gap_ms: self.longest_send_gap.as_secs_f64() * 1000.0,
        }
    }

    /// A short human summary.
    pub fn to_text(&self) -> String {
        let codes = self
            .answered
            .iter()
            .map(|(k, v)| format!("{k}:{v}"))
            .collect::<Vec<_>>()
            .join(" ");
        format!(
            "closed loop: {} peers × {} in flight, {:.1} s measured\n\
             requests/s {:.0}  sent {}  answered {}  [{codes}]\n\
             latency ms p50 {:.3}  p90 {:.3}  p99 {:.3}  max {:.3}\n\
             whole run: sent {}  answered {}  unanswered at the end {}\n",
            self.peers,
            self.window,
            self.measured.as_secs_f64(),
            self.requests_per_s(),
            self.sent,
            self.answered_total(),
            self.latency_ms(0.50),
            self.latency_ms(0.90),
            self.latency_ms(0.99),
            self.latency_ms(1.0),
            self.total_sent,
            self.total_answered.values().sum::<u64>(),
            self.unanswered,
        )
    }
}

fn new_histogram() -> Histogram<u64> {
    // Constant bounds that hdrhistogram accepts (low 1 ≥ 1, high ≥ 2 × low, 3 digits).
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).expect("valid histogram bounds")
}

/// One slot's two pre-encoded requests.
struct Slot {
    /// CCR-I, then CCR-T of the same session.
    requests: [Vec<u8>; 2],
    /// Offset of the session counter digits in each request.
    cycle_at: [usize; 2],
    /// Which request goes next (0 = CCR-I, 1 = CCR-T).
    next: usize,
    /// Sessions this slot has opened.
    cycle: u32,
}

/// The pre-encoded Gx CCR of a slot, AVPs in the order of 3GPP TS 29.212 §5.6.2 (RFC
/// 4006 §3.1 for the credit-control AVPs).
fn ccr(sid: &str, origin_host: &str, cfg: &PeerTemplate, kind: i32, number: u32) -> Vec<u8> {
    let m = Message::request(cmd::CREDIT_CONTROL, app::GX, 0, 0)
        .proxiable()
        .with(Avp::utf8(avp_code::SESSION_ID, sid).mandatory())
        .with(Avp::u32(avp_code::AUTH_APPLICATION_ID, app::GX).mandatory())
        .with(Avp::utf8(avp_code::ORIGIN_HOST, origin_host).mandatory())
        .with(Avp::utf8(avp_code::ORIGIN_REALM, &cfg.origin_realm).mandatory())
        .with(Avp::utf8(avp_code::DESTINATION_REALM, &cfg.destination_realm).mandatory())
        .with(Avp::enumerated(avp_code::CC_REQUEST_TYPE, kind).mandatory())
        .with(Avp::u32(avp_code::CC_REQUEST_NUMBER, number).mandatory());
    match &cfg.destination_host {
        Some(h) => m.with(Avp::utf8(avp_code::DESTINATION_HOST, h).mandatory()),
        None => m,
    }
    .encode()
}

/// Writes `n` as [`CYCLE_DIGITS`] lowercase hex digits.
fn put_hex(dst: &mut [u8], mut n: u32) {
    for d in dst.iter_mut().rev() {
        *d = b"0123456789abcdef"[(n & 0xf) as usize];
        n >>= 4;
    }
}

/// What every request of one peer shares.
#[derive(Clone, Debug)]
pub struct PeerTemplate {
    /// Origin-Realm.
    pub origin_realm: String,
    /// Destination-Realm.
    pub destination_realm: String,
    /// Destination-Host, if any.
    pub destination_host: Option<String>,
    /// Start time in seconds, the high part of every Session-Id (RFC 6733 §8.8).
    pub start_secs: u64,
}

/// Reads the Result-Code (or Experimental-Result-Code) of an encoded answer; 0 when it has
/// neither. Result-Code is looked up among the top-level AVPs without decoding the
/// message (the common case); otherwise the message is decoded.
pub fn answer_result_code(frame: &[u8]) -> u32 {
    // RFC 6733 §4.1: code (4), flags (1), length (3), vendor id (4, when V), data, padding.
    let mut at = HEADER_LEN;
    while at + 8 <= frame.len() {
        let code = u32::from_be_bytes([frame[at], frame[at + 1], frame[at + 2], frame[at + 3]]);
        let vendor = frame[at + 4] & 0x80 != 0;
        let len = u32::from_be_bytes([0, frame[at + 5], frame[at + 6], frame[at + 7]]) as usize;
        let head = if vendor { 12 } else { 8 };
        if len < head || at + len > frame.len() {
            break;
        }
        // RFC 6733 §7.1: Result-Code is Unsigned32, base protocol (no vendor).
        if code == avp_code::RESULT_CODE && !vendor && len == head + 4 {
            let v = &frame[at + head..at + len];
            return u32::from_be_bytes([v[0], v[1], v[2], v[3]]);
        }
        at += len.div_ceil(4) * 4;
    }
    Message::decode(frame)
        .ok()
        .and_then(|m| m.result_code().or(m.experimental_result().map(|e| e.1)))
        .unwrap_or(0)
}

/// The sans-IO core of one closed-loop connection: `window` slots, each with one request
/// in flight once started; measures the answers that fall in the [`Window`].
pub struct ClosedPeer {
    slots: Vec<Slot>,
    /// Hop-by-Hop → (slot, sent at).
    pending: HashMap<u32, (usize, Instant)>,
    window: Window,
    /// The last request sent inside the window.
    last_sent: Option<Instant>,
    report: ClosedReport,
}

impl ClosedPeer {
    /// `window` slots for the peer `origin_host`, measuring inside `measured`. Slot `s`
    /// uses the Session-Ids `<origin_host>;<start_secs>;<s>;<counter>`, the counter (8 hex
    /// digits) growing with every CCR-I, so each session is new (RFC 6733 §8.8).
    pub fn new(
        origin_host: &str,
        template: &PeerTemplate,
        window: usize,
        measured: Window,
    ) -> ClosedPeer {
        let slots = (0..window)
            .map(|s| {
                let sid = format!(
                    "{origin_host};{};{s};{}",
                    template.start_secs,
                    "0".repeat(CYCLE_DIGITS)
                );
                let requests = [
                    ccr(&sid, origin_host, template, CCR_I, 0),
                    ccr(&sid, origin_host, template, CCR_T, 1),
                ];
                let cycle_at = [0, 1].map(|k| {
                    let r = &requests[k];
                    r.windows(sid.len())
                        .position(|w| w == sid.as_bytes())
                        .expect("the Session-Id is in the request")
                        + sid.len()
                        - CYCLE_DIGITS
                });
                Slot {
                    requests,
                    cycle_at,
                    next: 0,
                    cycle: 0,
                }
            })
            .collect();
        ClosedPeer {
            slots,
            pending: HashMap::with_capacity(window * 2),
            window: measured,
            last_sent: None,
            report: ClosedReport::empty(1, window, measured.to.duration_since(measured.from)),
        }
    }

    /// Requests in flight now.
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// Whether every slot is idle after the window's end (nothing more will be sent).
    pub fn finished(&self, now: Instant) -> bool {
        now >= self.window.to && self.pending.is_empty()
    }

    /// Appends slot `s`'s next request to `out`, with identifiers from `ids`
    /// (Hop-by-Hop, End-to-End).
    fn send(
        &mut self,
        s: usize,
        now: Instant,
        ids: &mut impl FnMut() -> (u32, u32),
        out: &mut Vec<u8>,
    ) {
        let (hbh, e2e) = ids();
        let slot = &mut self.slots[s];
        let k = slot.next;
        if k == 0 {
            slot.cycle = slot.cycle.wrapping_add(1);
            let c = slot.cycle;
            for i in 0..2 {
                let at = slot.cycle_at[i];
                put_hex(&mut slot.requests[i][at..at + CYCLE_DIGITS], c);
            }
        }
        let at = out.len();
        out.extend_from_slice(&slot.requests[k]);
        // RFC 6733 §3: Hop-by-Hop at bytes 12..16, End-to-End at 16..20.
        out[at + 12..at + 16].copy_from_slice(&hbh.to_be_bytes());
        out[at + 16..at + 20].copy_from_slice(&e2e.to_be_bytes());
        self.pending.insert(hbh, (s, now));
        self.report.max_in_flight = self.report.max_in_flight.max(self.pending.len());
        self.report.total_sent += 1;
        if now >= self.window.from && now < self.window.to {
            self.report.sent += 1;
            self.note_gap(now);
            self.last_sent = Some(now);
        }
    }

    /// Takes the time since the previous request in the window (or since its start)
    /// as a gap in the sending.
    fn note_gap(&mut self, now: Instant) {
        let since = self.last_sent.unwrap_or(self.window.from);
        let gap = now.saturating_duration_since(since);
        self.report.longest_send_gap = self.report.longest_send_gap.max(gap);
    }

    /// Fills every slot (once the connection is open). Nothing is sent after the
    /// window's end.
    pub fn start(&mut self, now: Instant, ids: &mut impl FnMut() -> (u32, u32), out: &mut Vec<u8>) {
        if now >= self.window.to {
            return;
        }
        for s in 0..self.slots.len() {
            if self.slots[s].next == 0 && !self.pending.values().any(|p| p.0 == s) {
                self.send(s, now, ids, out);
            }
        }
    }

    /// An incoming frame: when it answers one of our requests, measures it, sends the
    /// slot's next request (before the window's end) and returns true; otherwise
    /// returns false (a base-protocol message or a request for the [`PeerConnection`]).
    pub fn on_frame(
        &mut self,
        frame: &[u8],
        now: Instant,
        ids: &mut impl FnMut() -> (u32, u32),
        out: &mut Vec<u8>,
    ) -> bool {
        if frame.len() < HEADER_LEN || frame[4] & flags::R != 0 {
            return false;
        }
        let hbh = u32::from_be_bytes([frame[12], frame[13], frame[14], frame[15]]);
        let Some((s, sent)) = self.pending.remove(&hbh) else {
            return false;
        };
        let rc = answer_result_code(frame);
        *self.report.total_answered.entry(rc).or_default() += 1;
        if sent >= self.window.from {
            *self.report.answered_of_sent.entry(rc).or_default() += 1;
        }
        if self.window.counts(sent, now) {
            *self.report.answered.entry(rc).or_default() += 1;
            let us = now
                .duration_since(sent)
                .as_micros()
                .clamp(1, MAX_LATENCY_US as u128);
            let _ = self.report.latency_us.record(us as u64);
        }
        // The session ends with its CCR-T whatever the answer (a gateway forgets it).
        self.slots[s].next ^= 1;
        if now < self.window.to {
            self.send(s, now, ids, out);
        }
        true
    }

    /// The measurements; requests still in flight count as unanswered.
    pub fn into_report(mut self) -> ClosedReport {
        self.report.unanswered = self.pending.len() as u64;
        // The window's tail: nothing sent from the last request to its end.
        let to = self.window.to;
        self.note_gap(to);
        self.report
    }
}

/// Runs `cfg.peers` closed-loop peers against `cfg.connect` and returns their combined
/// report (needs a tokio runtime; a current-thread one is enough). Any peer failing
/// fails the run.
pub async fn run(cfg: ClosedConfig) -> Result<ClosedReport, ClosedError> {
    if cfg.peers == 0 || cfg.window == 0 || cfg.measure.is_zero() {
        return Err(ClosedError::Empty);
    }
    super::check_identity(
        &cfg.origin_host_pattern,
        &cfg.origin_realm,
        cfg.connect.ip(),
        cfg.tw,
    )
    .map_err(|source| ClosedError::Peer { source })?;
    let now = Instant::now();
    let window = Window {
        from: now + cfg.warmup,
        to: now + cfg.warmup + cfg.measure,
    };
    let template = PeerTemplate {
        origin_realm: cfg.origin_realm.clone(),
        destination_realm: cfg.destination_realm.clone(),
        destination_host: cfg.destination_host.clone(),
        start_secs: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    };
    let cfg = Arc::new(cfg);
    let tasks: Vec<_> = (0..cfg.peers)
        .map(|i| tokio::spawn(peer(cfg.clone(), template.clone(), i, window)))
        .collect();
    let mut report = ClosedReport::empty(cfg.peers, cfg.window, cfg.measure);
    let mut failed = None;
    for t in tasks {
        match t.await {
            Ok(Ok(r)) => report.merge(&r),
            Ok(Err(e)) => {
                failed.get_or_insert(e);
            }
            Err(source) => {
                failed.get_or_insert(ClosedError::Task { source });
            }
        }
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(report),
    }
}

/// Connects to `to` (from `bind` when given; TLS with `tls`, SCTP with `sctp`),
/// retrying failures until
/// `timeout`.
async fn connect(
    to: SocketAddr,
    bind: Option<IpAddr>,
    timeout: Duration,
    tls: Option<&dra::transport::tls::Connector>,
    sctp: Option<&super::Sctp>,
) -> std::io::Result<Connection> {
    let t0 = Instant::now();
    loop {
        match super::dial(bind, to, None, tls, sctp).await {
            Ok(s) => return Ok(s),
            Err(e) if t0.elapsed() >= timeout => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// One peer: connect, CER/CEA, closed loop, drain, DPR/DPA.
async fn peer(
    cfg: Arc<ClosedConfig>,
    template: PeerTemplate,
    idx: usize,
    window: Window,
) -> Result<ClosedReport, ClosedError> {
    let host = cfg.origin_host(idx);
    let stream = connect(
        cfg.connect,
        cfg.bind,
        cfg.connect_timeout,
        cfg.tls.as_ref(),
        cfg.sctp.as_ref(),
    )
    .await
    .map_err(|source| ClosedError::Connect {
        origin_host: host.clone(),
        addr: cfg.connect,
        source,
    })?;
    let io = |source| ClosedError::Io {
        origin_host: host.clone(),
        source,
    };
    let local = stream.local.ip();
    let start = Instant::now();
    let pc = PeerConnection::new(
        Role::Initiator,
        Arc::new(loadgen_peer_config(&host, &cfg.origin_realm, local, cfg.tw)),
        Arc::new(AllowList::default()),
        cfg.connect.ip(),
        ConnectionOptions::new(
            cfg.seed.wrapping_mul(31).wrapping_add(idx as u64),
            template.start_secs,
        ),
    )
    .map_err(|source| ClosedError::Peer { source })?;
    let mut link = Link::direct(stream, pc, start, 256 * 1024);
    let hard_end = window.to + cfg.drain;
    let mut conn = Conn {
        core: ClosedPeer::new(&host, &template, cfg.window, window),
        host: host.clone(),
        hard_end,
        // DPR/DPA gets this long after the drain (RFC 6733 §5.4).
        give_up: hard_end + Duration::from_secs(2),
        disconnecting: false,
        failed: None,
    };
    let exit = drive(&mut link, &mut conn).await;
    let end = match exit {
        Exit::WriteFailed(source) => Some(io(source)),
        Exit::Closed if !conn.disconnecting => Some(ClosedError::Closed {
            origin_host: host.clone(),
        }),
        Exit::Closed | Exit::Ended => None,
    };
    // A refused CER or a framing error is what ended the connection.
    match conn.failed.or(end) {
        Some(e) => Err(e),
        None => Ok(conn.core.into_report()),
    }
}

/// The closed loop on one connection: [`ClosedPeer`] takes the answers to its requests
/// from the raw frames; the rest goes to the [`PeerConnection`].
struct Conn {
    core: ClosedPeer,
    /// Its Origin-Host, for errors.
    host: String,
    /// End of the drain: DPR.
    hard_end: Instant,
    /// No DPA by then: the run ends anyway.
    give_up: Instant,
    disconnecting: bool,
    /// What ends the run with an error (refused CER, framing).
    failed: Option<ClosedError>,
}

impl Mode for Conn {
    type Input = std::convert::Infallible;

    async fn on_input(&mut self, input: Self::Input, _link: &mut Link) -> Flow {
        match input {}
    }

    fn turn(&mut self, link: &mut Link) -> Flow {
        let now = Instant::now();
        if !self.disconnecting && (self.core.finished(now) || now >= self.hard_end) {
            self.disconnecting = true;
            let since = link.now();
            link.pc.start_disconnect(since, DisconnectCause::Rebooting);
        } else if self.disconnecting && now >= self.give_up {
            return Flow::End;
        }
        Flow::Continue
    }

    fn deadline(&self) -> Option<Instant> {
        Some(if self.disconnecting {
            self.give_up
        } else {
            self.hard_end
        })
    }

    fn on_event(&mut self, event: PeerEvent, link: &mut Link) {
        match event {
            PeerEvent::Opened { .. } => {
                let Link { pc, out, .. } = link;
                let mut ids = || (pc.next_hop_by_hop(), pc.next_end_to_end());
                self.core.start(Instant::now(), &mut ids, out);
            }
            PeerEvent::Rejected {
                result_code,
                error_message,
            } => {
                self.failed.get_or_insert(ClosedError::Refused {
                    origin_host: self.host.clone(),
                    result_code,
                    error_message,
                });
            }
            _ => {}
        }
    }

    fn on_frame(&mut self, frame: &[u8], at: Instant, link: &mut Link) -> bool {
        let Link { pc, out, .. } = link;
        let mut ids = || (pc.next_hop_by_hop(), pc.next_end_to_end());
        self.core.on_frame(frame, at, &mut ids, out)
    }

    fn on_framing_error(&mut self, source: FramingError, _link: &mut Link) -> Flow {
        self.failed.get_or_insert(ClosedError::Framing {
            origin_host: self.host.clone(),
            source,
        });
        Flow::End
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dra::diameter::{Framer, answer_for, avp_code as c, result_code};

    fn template() -> PeerTemplate {
        PeerTemplate {
            origin_realm: "lab.example".to_owned(),
            destination_realm: "pcrf.lab.example".to_owned(),
            destination_host: None,
            start_secs: 1_700_000_000,
        }
    }

    /// Identifiers 100, 101, … (Hop-by-Hop) and 1000 + the same (End-to-End).
    fn counter() -> impl FnMut() -> (u32, u32) {
        let mut n = 99u32;
        move || {
            n += 1;
            (n, n + 900)
        }
    }

    fn messages(bytes: &[u8]) -> Vec<(Vec<u8>, Message)> {
        let mut f = Framer::new();
        f.push(bytes);
        let mut v = Vec::new();
        while let Some(frame) = f.next_message().expect("frames") {
            let m = Message::decode(&frame).expect("decodes");
            v.push((frame, m));
        }
        v
    }

    fn answer(req: &Message, rc: u32) -> Vec<u8> {
        answer_for(req, rc, "pcrf1.lab.example", "pcrf.lab.example", None, None).encode()
    }

    /// pgw1 with `slots` slots, measuring from `from_ms` to `to_ms` after `t0`.
    fn pgw1(t0: Instant, slots: usize, from_ms: u64, to_ms: u64) -> ClosedPeer {
        let window = Window {
            from: t0 + Duration::from_millis(from_ms),
            to: t0 + Duration::from_millis(to_ms),
        };
        ClosedPeer::new("pgw1.lab.example", &template(), slots, window)
    }

    /// pgw1 with `slots` slots and a 1 s window, started at `t0`: the peer, its
    /// identifiers ([`counter`]) and the bytes it sent.
    fn started(t0: Instant, slots: usize) -> (ClosedPeer, impl FnMut() -> (u32, u32), Vec<u8>) {
        let mut p = pgw1(t0, slots, 0, 1000);
        let (mut ids, mut out) = (counter(), Vec::new());
        p.start(t0, &mut ids, &mut out);
        (p, ids, out)
    }

    #[test]
    fn start_fills_every_slot_with_a_ccr_i_of_a_session_of_its_own() {
        let t0 = Instant::now();
        let (mut p, mut ids, out) = started(t0, 3);
        let ms = messages(&out);
        assert_eq!(ms.len(), 3);
        assert_eq!(p.in_flight(), 3);
        let mut sids = Vec::new();
        for (i, (_, m)) in ms.iter().enumerate() {
            assert!(m.is_request());
            assert_eq!(m.command_code, cmd::CREDIT_CONTROL);
            assert_eq!(m.application_id, app::GX);
            assert_eq!(m.hop_by_hop, 100 + i as u32);
            assert_eq!(m.end_to_end, 1000 + i as u32);
            assert_eq!(m.cc_request_type(), Some(1));
            assert_eq!(m.origin_host(), Some("pgw1.lab.example"));
            assert_eq!(
                m.find(c::DESTINATION_REALM).and_then(|a| a.as_utf8().ok()),
                Some("pcrf.lab.example")
            );
            sids.push(m.session_id().expect("Session-Id").to_owned());
        }
        assert_eq!(
            sids,
            [
                "pgw1.lab.example;1700000000;0;00000001",
                "pgw1.lab.example;1700000000;1;00000001",
                "pgw1.lab.example;1700000000;2;00000001",
            ]
        );
        // Starting again while every slot is busy sends nothing.
        let mut more = Vec::new();
        p.start(t0, &mut ids, &mut more);
        assert!(more.is_empty());
    }

    #[test]
    fn a_slot_alternates_ccr_i_and_ccr_t_and_opens_a_new_session_each_time() {
        let t0 = Instant::now();
        let (mut p, mut ids, mut out) = started(t0, 1);
        let mut kinds = Vec::new();
        for _ in 0..4 {
            let (_, req) = messages(&out).pop().expect("one request");
            kinds.push((
                req.cc_request_type().expect("type"),
                req.find(c::CC_REQUEST_NUMBER)
                    .and_then(|a| a.as_u32().ok())
                    .expect("number"),
                req.session_id().expect("sid").to_owned(),
            ));
            out.clear();
            assert!(p.on_frame(&answer(&req, result_code::SUCCESS), t0, &mut ids, &mut out));
            assert_eq!(p.in_flight(), 1, "the window stays full");
        }
        let sid = |n| format!("pgw1.lab.example;1700000000;0;0000000{n}");
        assert_eq!(
            kinds,
            [
                (1, 0, sid(1)),
                (3, 1, sid(1)),
                (1, 0, sid(2)),
                (3, 1, sid(2))
            ]
        );
    }

    #[test]
    fn only_answers_inside_the_window_count_and_nothing_leaves_after_it() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut p = pgw1(t0, 1, 100, 200);
        let (mut ids, mut out) = (counter(), Vec::new());
        // Warm-up: sent before the window, answered inside it: not measured.
        p.start(t0, &mut ids, &mut out);
        let (_, r1) = messages(&out).pop().expect("r1");
        out.clear();
        assert!(p.on_frame(&answer(&r1, 2001), t0 + ms(150), &mut ids, &mut out));
        // Sent and answered inside: measured, 30 ms.
        let (_, r2) = messages(&out).pop().expect("r2");
        out.clear();
        assert!(p.on_frame(&answer(&r2, 5030), t0 + ms(180), &mut ids, &mut out));
        // Sent inside, answered after the end: not measured, and no new request.
        let (_, r3) = messages(&out).pop().expect("r3");
        out.clear();
        assert!(!p.finished(t0 + ms(250)));
        assert!(p.on_frame(&answer(&r3, 2001), t0 + ms(250), &mut ids, &mut out));
        assert!(out.is_empty(), "a request left after the window");
        assert!(p.finished(t0 + ms(250)));
        let r = p.into_report();
        assert_eq!(r.sent, 2);
        assert_eq!(r.answered, BTreeMap::from([(5030, 1)]));
        // r3's answer came after the window, to a request sent inside it.
        assert_eq!(r.answered_of_sent, BTreeMap::from([(2001, 1), (5030, 1)]));
        assert_eq!(r.latency_us.len(), 1);
        assert!(
            (29_900..=30_100).contains(&r.latency_us.max()),
            "{}",
            r.latency_us.max()
        );
        assert_eq!(r.total_sent, 3);
        assert_eq!(r.total_answered, BTreeMap::from([(2001, 2), (5030, 1)]));
        assert_eq!(r.unanswered, 0);
        assert_eq!(r.max_in_flight, 1);
        // Nothing sent from the window's start (100 ms) to r2 (150 ms): the longest
        // gap; r2 → r3 is 30 ms, r3 → the end 20 ms.
        assert_eq!(r.longest_send_gap, ms(50));
        assert!((r.requests_per_s() - 10.0).abs() < 1e-9);
    }

    #[test]
    fn requests_unknown_answers_and_nothing_at_all_are_left_to_the_peer_connection() {
        let t0 = Instant::now();
        let (mut p, mut ids, out) = started(t0, 1);
        let (frame, req) = messages(&out).pop().expect("request");
        let mut more = Vec::new();
        // Our own request echoed (R bit set), an answer with another Hop-by-Hop (e.g. a
        // DWA), a truncated frame.
        assert!(!p.on_frame(&frame, t0, &mut ids, &mut more));
        let mut other = req.clone();
        other.hop_by_hop = 7;
        assert!(!p.on_frame(&answer(&other, 2001), t0, &mut ids, &mut more));
        assert!(!p.on_frame(&frame[..10], t0, &mut ids, &mut more));
        assert!(more.is_empty());
        assert_eq!(p.in_flight(), 1);
        assert_eq!(p.into_report().unanswered, 1);
    }

    #[test]
    fn result_code_is_read_from_result_code_or_experimental_result() {
        let req = Message::request(cmd::CREDIT_CONTROL, app::GX, 1, 2)
            .with(Avp::utf8(c::SESSION_ID, "a;1;2").mandatory());
        assert_eq!(answer_result_code(&answer(&req, 3002)), 3002);
        // RFC 6733 §7.6: Experimental-Result { Vendor-Id, Experimental-Result-Code }.
        let exp = Message::answer(cmd::CREDIT_CONTROL, app::GX, 1, 2)
            .with(Avp::utf8(c::SESSION_ID, "a;1;2").mandatory())
            .with(Avp::grouped(
                c::EXPERIMENTAL_RESULT,
                [
                    Avp::u32(c::VENDOR_ID, 10415).mandatory(),
                    Avp::u32(c::EXPERIMENTAL_RESULT_CODE, 5065).mandatory(),
                ],
            ))
            .encode();
        assert_eq!(answer_result_code(&exp), 5065);
        let none = Message::answer(cmd::CREDIT_CONTROL, app::GX, 1, 2).encode();
        assert_eq!(answer_result_code(&none), 0);
    }

    #[test]
    fn reports_merge_counts_and_latencies() {
        let t0 = Instant::now();
        let one = |rc: u32| {
            let (mut p, mut ids, out) = started(t0, 2);
            let (_, req) = messages(&out).remove(0);
            p.on_frame(
                &answer(&req, rc),
                t0 + Duration::from_millis(5),
                &mut ids,
                &mut Vec::new(),
            );
            p.into_report()
        };
        let mut r = ClosedReport::empty(2, 2, Duration::from_secs(1));
        r.merge(&one(2001));
        r.merge(&one(3004));
        assert_eq!(r.answered, BTreeMap::from([(2001, 1), (3004, 1)]));
        assert_eq!(r.answered_with(2001), 1);
        assert_eq!(r.answered_total(), 2);
        assert_eq!(r.sent, 6, "2 + 1 per peer");
        assert_eq!(r.unanswered, 4, "two in flight per peer");
        assert_eq!(r.max_in_flight, 2);
        assert_eq!(r.latency_us.len(), 2);
        let j = r.summary();
        assert_eq!(j.answered_with(3004), 1);
        assert_eq!(j.in_flight, 4);
    }
}
