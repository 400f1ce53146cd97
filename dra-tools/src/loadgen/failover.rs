//! Gateway failover between two DRAs (RFC 6733 §5.5.4, RFC 3539): the sans-IO core of
//! one gateway that holds a connection to each of two DRA hosts.
//!
//! - [`DraMode::Primary`]: new requests go to the first DRA while it is in service, to
//!   the second otherwise; [`DraMode::Split`]: new requests alternate between the DRAs in
//!   service (both active).
//! - A DRA leaves service when its transport is lost or its watchdog turns SUSPECT
//!   (RFC 3539 §3.4: no DWA within Tw). Its pending requests are then sent again to the
//!   other DRA with the T flag set ("potentially retransmitted", RFC 6733 §3), with the
//!   same Hop-by-Hop and End-to-End identifiers (the gateway draws both from one counter
//!   for its two connections, so a Hop-by-Hop is unique on either). With no other DRA in
//!   service they are lost.
//! - A DRA comes back into service when its connection is open again and its watchdog
//!   is OKAY (after a reconnect, RFC 3539 REOPEN: three DWAs); traffic that had failed
//!   over returns to it (a failback).
//!
//! The tokio shell is in [`super::client`]; this part is driven with the time and the
//! links' events and unit-tested below.

use std::collections::{HashMap, VecDeque};
use std::str::FromStr;
use std::time::{Duration, Instant};

use dra_common::wire::flags;

use super::scenario::Class;
use super::session::SessionKey;
pub use dra_report::client::FailoverCounts;

/// Offset of the command flags in a Diameter header (RFC 6733 §3).
const FLAGS_AT: usize = 4;

/// How a gateway uses its two DRAs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DraMode {
    /// Primary + secondary: the second DRA only while the first is out of service.
    #[default]
    Primary,
    /// Both active: new requests alternate between the DRAs in service.
    Split,
}

impl FromStr for DraMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "primary" => Ok(DraMode::Primary),
            "split" => Ok(DraMode::Split),
            _ => Err(format!("{s:?}: expected primary or split")),
        }
    }
}

/// A request waiting for its answer.
#[derive(Clone, Debug)]
struct Pending {
    key: SessionKey,
    class: Class,
    sent: Instant,
    deadline: Instant,
    /// The encoded request, for a resend.
    bytes: Vec<u8>,
    /// The DRA it was (last) sent to.
    via: usize,
}

/// What became of a request the core gave up on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gone {
    /// Its session.
    pub key: SessionKey,
    /// Its class.
    pub class: Class,
}

/// An answer matched to its request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Matched {
    /// Its session.
    pub key: SessionKey,
    /// Its class.
    pub class: Class,
    /// Time since the request was first sent.
    pub latency: Duration,
}

/// Bytes to write on one DRA connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    /// Which DRA (0 or 1).
    pub link: usize,
    /// One encoded request.
    pub bytes: Vec<u8>,
}

/// One gateway's view of its DRAs and its requests in flight.
#[derive(Debug)]
pub struct Failover {
    mode: DraMode,
    links: usize,
    in_service: [bool; 2],
    /// Left service while carrying traffic; coming back is a failback.
    failed: [bool; 2],
    next_hbh: u32,
    next_e2e: u32,
    rr: usize,
    timeout: Duration,
    pending: HashMap<u32, Pending>,
    deadlines: VecDeque<(Instant, u32)>,
    last_answer: [Option<Instant>; 2],
    /// After a failover to link `.0`: the last answer through the failed DRA.
    gap_from: Option<(usize, Instant)>,
    counts: FailoverCounts,
}

impl Failover {
    /// A gateway with `links` DRAs (1 or 2), requests timing out after `timeout`;
    /// `hbh` and `e2e` are the first identifiers.
    pub fn new(mode: DraMode, links: usize, timeout: Duration, hbh: u32, e2e: u32) -> Failover {
        Failover {
            mode,
            links: links.clamp(1, 2),
            in_service: [false; 2],
            failed: [false; 2],
            next_hbh: hbh,
            next_e2e: e2e,
            rr: 0,
            timeout,
            pending: HashMap::new(),
            deadlines: VecDeque::new(),
            last_answer: [None; 2],
            gap_from: None,
            counts: FailoverCounts::default(),
        }
    }

    /// Whether some DRA is in service.
    pub fn up(&self) -> bool {
        self.in_service[..self.links].iter().any(|u| *u)
    }

    /// Whether DRA `link` is in service.
    pub fn in_service(&self, link: usize) -> bool {
        self.in_service.get(link).copied().unwrap_or(false)
    }

    /// Requests waiting for an answer.
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// The counters so far.
    pub fn counts(&self) -> &FailoverCounts {
        &self.counts
    }

    /// The DRA that carries new requests in primary mode (the first in service).
    fn active(&self) -> Option<usize> {
        (0..self.links).find(|&k| self.in_service[k])
    }

    fn other(&self, link: usize) -> Option<usize> {
        let o = 1 - link;
        (o < self.links && self.in_service[o]).then_some(o)
    }

    /// Where the next new request goes.
    fn pick(&mut self) -> Option<usize> {
        match self.mode {
            DraMode::Primary => self.active(),
            DraMode::Split => {
                let k = (0..self.links)
                    .map(|i| (self.rr + i) % self.links)
                    .find(|&k| self.in_service[k])?;
                self.rr = k + 1;
                Some(k)
            }
        }
    }

    /// A new request: `encode(hop_by_hop, end_to_end)` builds it. `None` when no DRA is
    /// in service (the request is lost).
    pub fn send(
        &mut self,
        now: Instant,
        key: SessionKey,
        class: Class,
        encode: impl FnOnce(u32, u32) -> Vec<u8>,
    ) -> Option<Write> {
        let link = self.pick()?;
        let (hbh, e2e) = (self.next_hbh, self.next_e2e);
        self.next_hbh = self.next_hbh.wrapping_add(1);
        self.next_e2e = self.next_e2e.wrapping_add(1);
        let bytes = encode(hbh, e2e);
        let deadline = now + self.timeout;
        self.deadlines.push_back((deadline, hbh));
        self.pending.insert(
            hbh,
            Pending {
                key,
                class,
                sent: now,
                deadline,
                bytes: bytes.clone(),
                via: link,
            },
        );
        Some(Write { link, bytes })
    }

    /// DRA `link` is in service (connection open, watchdog OKAY).
    pub fn link_up(&mut self, link: usize) {
        if link >= self.links || self.in_service[link] {
            return;
        }
        self.in_service[link] = true;
        if std::mem::take(&mut self.failed[link]) {
            let carries = match self.mode {
                DraMode::Primary => self.active() == Some(link),
                DraMode::Split => true,
            };
            if carries {
                self.counts.failbacks += 1;
            }
        }
    }

    /// DRA `link` left service (transport lost, watchdog SUSPECT or DOWN): its pending
    /// requests go to the other DRA with the T flag, or are lost without one.
    pub fn link_down(&mut self, link: usize, now: Instant) -> (Vec<Write>, Vec<Gone>) {
        if link >= self.links || !self.in_service[link] {
            return (Vec::new(), Vec::new());
        }
        let carried = match self.mode {
            DraMode::Primary => self.active() == Some(link),
            DraMode::Split => true,
        };
        self.in_service[link] = false;
        let other = self.other(link);
        if let (true, Some(o)) = (carried, other) {
            self.counts.failovers += 1;
            self.failed[link] = true;
            self.gap_from = Some((o, self.last_answer[link].unwrap_or(now)));
        }
        let mine: Vec<u32> = self
            .pending
            .iter()
            .filter(|(_, p)| p.via == link)
            .map(|(h, _)| *h)
            .collect();
        let (mut writes, mut gone) = (Vec::new(), Vec::new());
        for hbh in mine {
            match other {
                Some(o) => {
                    let p = self.pending.get_mut(&hbh).expect("listed above");
                    if let Some(f) = p.bytes.get_mut(FLAGS_AT) {
                        *f |= flags::T;
                    }
                    p.via = o;
                    p.deadline = now + self.timeout;
                    self.deadlines.push_back((p.deadline, hbh));
                    self.counts.resent_with_t += 1;
                    writes.push(Write {
                        link: o,
                        bytes: p.bytes.clone(),
                    });
                }
                None => {
                    let p = self.pending.remove(&hbh).expect("listed above");
                    self.counts.lost_no_dra += 1;
                    gone.push(Gone {
                        key: p.key,
                        class: p.class,
                    });
                }
            }
        }
        (writes, gone)
    }

    /// An answer with `hop_by_hop` arrived through DRA `link`; `None` when no request
    /// waits for it (late: timed out, or already answered through the other DRA).
    pub fn answer(&mut self, link: usize, hop_by_hop: u32, now: Instant) -> Option<Matched> {
        let p = self.pending.remove(&hop_by_hop)?;
        if link < 2 {
            self.counts.answers_via[link] += 1;
            self.last_answer[link] = Some(now);
        }
        if let Some((to, from)) = self.gap_from
            && to == link
        {
            self.gap_from = None;
            let ms = now.saturating_duration_since(from).as_secs_f64() * 1000.0;
            self.counts
                .failover_gaps_ms
                .push((ms * 1000.0).round() / 1000.0);
        }
        Some(Matched {
            key: p.key,
            class: p.class,
            latency: now.saturating_duration_since(p.sent),
        })
    }

    /// The next request deadline.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.front().map(|d| d.0)
    }

    /// Requests whose deadline passed (timeouts).
    pub fn expire(&mut self, now: Instant) -> Vec<Gone> {
        let mut out = Vec::new();
        while let Some(&(d, hbh)) = self.deadlines.front() {
            if d > now {
                break;
            }
            self.deadlines.pop_front();
            // A resent request has a later deadline further back in the queue.
            if self.pending.get(&hbh).is_some_and(|p| p.deadline == d) {
                let p = self.pending.remove(&hbh).expect("checked");
                out.push(Gone {
                    key: p.key,
                    class: p.class,
                });
            }
        }
        out
    }

    /// Every request still pending (the run ends).
    pub fn drain(&mut self) -> Vec<Gone> {
        self.deadlines.clear();
        self.pending
            .drain()
            .map(|(_, p)| Gone {
                key: p.key,
                class: p.class,
            })
            .collect()
    }
}

/// A server's duplicate detection (RFC 6733 §6.1.1 last paragraphs, Appendix C): every
/// recent request by (Origin-Host, End-to-End), in service or answered with a
/// Result-Code. A request seen before — a gateway resent it with the T flag after its
/// DRA died with the original in service or with its answer — is not applied twice: it
/// gets the original's Result-Code.
#[derive(Debug, Default)]
pub struct DuplicateCache {
    seen: HashMap<(String, u32), Option<u32>>,
    order: VecDeque<(String, u32)>,
    capacity: usize,
}

/// What [`DuplicateCache::begin`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// A new request (now recorded as in service).
    New,
    /// A duplicate of a request still in service.
    InService,
    /// A duplicate of a request answered with this Result-Code.
    Answered(u32),
}

impl DuplicateCache {
    /// Remembers the last `capacity` requests.
    pub fn new(capacity: usize) -> DuplicateCache {
        DuplicateCache {
            seen: HashMap::new(),
            order: VecDeque::new(),
            capacity: capacity.max(1),
        }
    }

    fn key(origin_host: &str, end_to_end: u32) -> (String, u32) {
        (origin_host.to_ascii_lowercase(), end_to_end)
    }

    /// A request arrives: new (recorded as in service) or a duplicate.
    pub fn begin(&mut self, origin_host: &str, end_to_end: u32) -> Seen {
        let k = Self::key(origin_host, end_to_end);
        match self.seen.get(&k) {
            Some(None) => return Seen::InService,
            Some(Some(rc)) => return Seen::Answered(*rc),
            None => {}
        }
        self.seen.insert(k.clone(), None);
        self.order.push_back(k);
        while self.order.len() > self.capacity {
            if let Some(old) = self.order.pop_front() {
                self.seen.remove(&old);
            }
        }
        Seen::New
    }

    /// The request was answered with `result_code`.
    pub fn finish(&mut self, origin_host: &str, end_to_end: u32, result_code: u32) {
        if let Some(v) = self.seen.get_mut(&Self::key(origin_host, end_to_end)) {
            *v = Some(result_code);
        }
    }

    /// The Result-Code of an answered request (`None`: unknown or still in service).
    pub fn answered(&self, origin_host: &str, end_to_end: u32) -> Option<u32> {
        self.seen
            .get(&Self::key(origin_host, end_to_end))
            .copied()
            .flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dra::diameter::{Avp, Message, avp_code as c};
    use dra_common::wire::{app, cmd};

    const T: Duration = Duration::from_secs(2);

    fn ccr(hbh: u32, e2e: u32) -> Vec<u8> {
        Message::request(cmd::CREDIT_CONTROL, app::GX, hbh, e2e)
            .proxiable()
            .with(Avp::utf8(c::SESSION_ID, "pgw1;1;1").mandatory())
            .encode()
    }

    fn decode(w: &Write) -> Message {
        Message::decode(&w.bytes).expect("decodes")
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn both_up(mode: DraMode) -> Failover {
        let mut f = Failover::new(mode, 2, T, 100, 5000);
        f.link_up(0);
        f.link_up(1);
        f
    }

    #[test]
    fn primary_mode_sends_to_the_first_dra_while_it_is_in_service() {
        let t0 = Instant::now();
        let mut f = both_up(DraMode::Primary);
        for k in 0..3 {
            let w = f.send(t0, k, Class::GxCcrU, ccr).expect("sent");
            assert_eq!(w.link, 0);
            let m = decode(&w);
            assert_eq!(
                (m.hop_by_hop, m.end_to_end),
                (100 + k as u32, 5000 + k as u32)
            );
            assert!(!m.is_retransmit());
        }
        assert_eq!(f.in_flight(), 3);
    }

    #[test]
    fn split_mode_alternates_between_the_dras_in_service() {
        let t0 = Instant::now();
        let mut f = both_up(DraMode::Split);
        let links: Vec<usize> = (0..4)
            .map(|k| f.send(t0, k, Class::GxCcrI, ccr).expect("sent").link)
            .collect();
        assert_eq!(links, [0, 1, 0, 1]);
        let _ = f.link_down(1, t0);
        let links: Vec<usize> = (0..2)
            .map(|k| f.send(t0, k, Class::GxCcrI, ccr).expect("sent").link)
            .collect();
        assert_eq!(links, [0, 0]);
    }

    #[test]
    fn transport_loss_resends_pending_requests_to_the_other_dra_with_the_t_flag() {
        let t0 = Instant::now();
        let mut f = both_up(DraMode::Primary);
        let a = f.send(t0, 1, Class::GxCcrI, ccr).expect("a");
        let b = f.send(t0, 2, Class::GxCcrT, ccr).expect("b");
        // One answered through the primary before it fails.
        let got = f
            .answer(0, decode(&a).hop_by_hop, t0 + ms(5))
            .expect("matched");
        assert_eq!((got.key, got.class), (1, Class::GxCcrI));
        let (writes, gone) = f.link_down(0, t0 + ms(10));
        assert!(gone.is_empty());
        assert_eq!(writes.len(), 1);
        assert_eq!(writes[0].link, 1);
        let (orig, again) = (decode(&b), decode(&writes[0]));
        assert!(again.is_retransmit(), "T flag set");
        assert!(again.is_request() && again.is_proxiable());
        // RFC 6733 §5.5.4: the same request, the same identifiers.
        assert_eq!(
            (again.hop_by_hop, again.end_to_end),
            (orig.hop_by_hop, orig.end_to_end)
        );
        assert_eq!(again.session_id(), orig.session_id());
        assert_eq!(f.counts().failovers, 1);
        assert_eq!(f.counts().resent_with_t, 1);
        // New requests go to the secondary now.
        assert_eq!(
            f.send(t0 + ms(11), 3, Class::GxCcrU, ccr).expect("c").link,
            1
        );
        // The first answer through the secondary closes the failover gap: 5 ms → 40 ms.
        let m = f.answer(1, orig.hop_by_hop, t0 + ms(40)).expect("matched");
        assert_eq!((m.key, m.class, m.latency), (2, Class::GxCcrT, ms(40)));
        assert_eq!(f.counts().failover_gaps_ms, [35.0]);
        assert_eq!(f.counts().answers_via, [1, 1]);
        // The same answer again (e.g. through the old DRA): late.
        assert_eq!(f.answer(0, orig.hop_by_hop, t0 + ms(41)), None);
    }

    #[test]
    fn failback_when_the_primary_is_in_service_again() {
        let t0 = Instant::now();
        let mut f = both_up(DraMode::Primary);
        let _ = f.link_down(0, t0);
        assert_eq!(f.send(t0, 1, Class::GxCcrU, ccr).expect("sent").link, 1);
        f.link_up(0);
        assert_eq!(f.counts().failbacks, 1);
        assert_eq!(f.send(t0, 2, Class::GxCcrU, ccr).expect("sent").link, 0);
        // The secondary failing while idle is no failover, and its return no failback.
        let _ = f.link_down(1, t0);
        f.link_up(1);
        assert_eq!((f.counts().failovers, f.counts().failbacks), (1, 1));
    }

    #[test]
    fn watchdog_suspect_then_close_moves_requests_once() {
        let t0 = Instant::now();
        let mut f = both_up(DraMode::Primary);
        let _ = f.send(t0, 1, Class::GxCcrU, ccr).expect("sent");
        let (w1, _) = f.link_down(0, t0);
        let (w2, g2) = f.link_down(0, t0);
        assert_eq!((w1.len(), w2.len(), g2.len()), (1, 0, 0));
        assert_eq!(f.counts().resent_with_t, 1);
    }

    #[test]
    fn without_another_dra_pending_requests_are_lost_and_new_ones_refused() {
        let t0 = Instant::now();
        let mut f = Failover::new(DraMode::Primary, 2, T, 1, 1);
        assert!(
            f.send(t0, 1, Class::GxCcrI, ccr).is_none(),
            "nothing in service"
        );
        f.link_up(0);
        let _ = f.send(t0, 1, Class::GxCcrI, ccr).expect("sent");
        let (w, gone) = f.link_down(0, t0);
        assert!(w.is_empty());
        assert_eq!(
            gone,
            [Gone {
                key: 1,
                class: Class::GxCcrI
            }]
        );
        assert_eq!(f.counts().lost_no_dra, 1);
        assert_eq!(f.counts().failovers, 0);
        assert!(!f.up());
    }

    #[test]
    fn a_resent_request_times_out_on_its_new_deadline_only() {
        let t0 = Instant::now();
        let mut f = both_up(DraMode::Primary);
        let _ = f.send(t0, 1, Class::GxCcrU, ccr).expect("sent");
        let _ = f.link_down(0, t0 + ms(1500));
        assert!(
            f.expire(t0 + ms(2100)).is_empty(),
            "the old deadline no longer counts"
        );
        assert_eq!(f.in_flight(), 1);
        let gone = f.expire(t0 + ms(3600));
        assert_eq!(
            gone,
            [Gone {
                key: 1,
                class: Class::GxCcrU
            }]
        );
        assert_eq!(f.next_deadline(), None);
    }

    #[test]
    fn duplicate_cache_knows_requests_in_service_and_answered() {
        let mut d = DuplicateCache::new(2);
        assert_eq!(d.begin("PGW1.lab", 7), Seen::New);
        assert_eq!(
            d.begin("pgw1.lab", 7),
            Seen::InService,
            "case-insensitive host"
        );
        assert_eq!(d.answered("pgw1.lab", 7), None);
        d.finish("pgw1.lab", 7, 2001);
        assert_eq!(d.begin("pgw1.lab", 7), Seen::Answered(2001));
        assert_eq!(d.answered("pgw1.lab", 7), Some(2001));
        assert_eq!(d.begin("pgw2.lab", 7), Seen::New, "another Origin-Host");
        assert_eq!(d.begin("pgw1.lab", 8), Seen::New);
        assert_eq!(
            d.begin("pgw1.lab", 7),
            Seen::New,
            "the oldest was forgotten"
        );
    }

    #[test]
    fn modes_parse() {
        assert_eq!("primary".parse(), Ok(DraMode::Primary));
        assert_eq!("split".parse(), Ok(DraMode::Split));
        assert!("both".parse::<DraMode>().is_err());
    }
}
