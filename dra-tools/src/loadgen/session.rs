//! Sans-IO session book-keeping of the client (a gateway's view): sessions open on a
//! successful CCA-I, CCR-U picks a random idle open session, CCR-T closes one; a gateway
//! flush terminates every open session. And the CCR builder.

use std::collections::HashMap;

use dra::diameter::{Avp, Message, avp_code as c};
use dra::routing::SplitMix64;
use dra_common::wire::cmd;

use super::scenario::{App, Class, Flush, Kind};
pub use dra_report::client::SessionCounts;

/// Session key inside the pool.
pub type SessionKey = u64;

/// One session.
#[derive(Clone, Debug)]
pub struct Session {
    /// Session-Id (RFC 6733 §8.8).
    pub id: String,
    /// The client peer (connection index) that owns it.
    pub peer: usize,
    /// Its application.
    pub app: App,
    /// CC-Request-Number of the next request (RFC 4006 §8.2).
    pub next_number: u32,
    /// Origin-Host of the server that answered the CCR-I.
    pub server: Option<String>,
    /// A request of this session is in flight.
    pub busy: bool,
    /// Opened (CCA-I 2001 received).
    pub open: bool,
    /// Flushed: a CCR-T is owed as soon as it is idle.
    pub terminate: bool,
}

/// What the pool needs to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Send {
    /// The session.
    pub key: SessionKey,
    /// Class of the request.
    pub class: Class,
    /// Session-Id.
    pub session_id: String,
    /// The peer to send on.
    pub peer: usize,
    /// CC-Request-Number.
    pub number: u32,
}

/// Sessions of every peer and application.
#[derive(Debug)]
pub struct SessionPool {
    sessions: HashMap<SessionKey, Session>,
    /// Idle open sessions per (app, peer).
    idle: HashMap<(App, usize), Vec<SessionKey>>,
    /// Flushed sessions waiting for their CCR-T.
    terminate: Vec<SessionKey>,
    next_key: SessionKey,
    high: u32,
    rng: SplitMix64,
    counts: SessionCounts,
}

impl SessionPool {
    /// An empty pool. `high` is the high 32 bits of every Session-Id (e.g. the start
    /// time in seconds), `seed` drives the random choice of sessions.
    pub fn new(high: u32, seed: u64) -> SessionPool {
        SessionPool {
            sessions: HashMap::new(),
            idle: HashMap::new(),
            terminate: Vec::new(),
            next_key: 1,
            high,
            rng: SplitMix64::new(seed),
            counts: SessionCounts::default(),
        }
    }

    /// Counters so far.
    pub fn counts(&self) -> SessionCounts {
        self.counts
    }

    /// Open sessions of `app`.
    pub fn open_count(&self, app: App) -> usize {
        self.sessions
            .values()
            .filter(|s| s.open && s.app == app)
            .count()
    }

    /// The session, if it still exists.
    pub fn get(&self, key: SessionKey) -> Option<&Session> {
        self.sessions.get(&key)
    }

    /// A new session for a CCR-I on `peer` whose Origin-Host is `origin_host`.
    pub fn initial(&mut self, app: App, peer: usize, origin_host: &str) -> Send {
        let key = self.next_key;
        self.next_key += 1;
        // RFC 6733 §8.8: <DiameterIdentity>;<high 32 bits>;<low 32 bits>[;<optional>]
        let id = format!(
            "{origin_host};{};{};{key}",
            self.high,
            (key & 0xffff_ffff) as u32
        );
        self.sessions.insert(
            key,
            Session {
                id: id.clone(),
                peer,
                app,
                next_number: 1,
                server: None,
                busy: true,
                open: false,
                terminate: false,
            },
        );
        Send {
            key,
            class: Class::of(app, Kind::Initial),
            session_id: id,
            peer,
            number: 0,
        }
    }

    /// `n` Gx sessions of `peer` (Origin-Host `origin_host`) open and idle at once: sessions
    /// established before the scenario began (e.g. before the DRA restarted), which
    /// CCR-U and CCR-T use from the first second. Not counted as opened.
    pub fn preopen(&mut self, peer: usize, origin_host: &str, n: u64) {
        for _ in 0..n {
            let key = self.initial(App::Gx, peer, origin_host).key;
            if let Some(s) = self.sessions.get_mut(&key) {
                s.busy = false;
                s.open = true;
            }
            self.make_idle(key);
        }
    }

    /// A CCR-U or CCR-T on a random idle open session of `app` whose peer is `up`.
    pub fn pick(&mut self, class: Class, up: &[bool]) -> Option<Send> {
        let app = class.app();
        let peers: Vec<usize> = (0..up.len())
            .filter(|&p| up[p] && self.idle.get(&(app, p)).is_some_and(|v| !v.is_empty()))
            .collect();
        if peers.is_empty() {
            return None;
        }
        let peer = peers[self.rng.below(peers.len() as u64) as usize];
        let list = self.idle.get_mut(&(app, peer))?;
        let i = self.rng.below(list.len() as u64) as usize;
        let key = list.swap_remove(i);
        Some(self.start(key, class))
    }

    fn start(&mut self, key: SessionKey, class: Class) -> Send {
        let s = self
            .sessions
            .get_mut(&key)
            .expect("idle lists only hold live sessions");
        s.busy = true;
        let number = s.next_number;
        s.next_number += 1;
        Send {
            key,
            class,
            session_id: s.id.clone(),
            peer: s.peer,
            number,
        }
    }

    /// Gateway flush: every open session covered owes a CCR-T.
    pub fn flush(&mut self, which: Flush) {
        for (&key, s) in self.sessions.iter_mut() {
            if s.open && !s.terminate && which.covers(s.app) {
                s.terminate = true;
                if !s.busy {
                    self.terminate.push(key);
                }
            }
        }
        for ((app, _), list) in self.idle.iter_mut() {
            if which.covers(*app) {
                list.clear();
            }
        }
    }

    /// CCR-T owed by flushed sessions that are idle and whose peer is up.
    pub fn flush_sends(&mut self, up: &[bool]) -> Vec<Send> {
        let mut out = Vec::new();
        let mut keep = Vec::new();
        for key in std::mem::take(&mut self.terminate) {
            let Some(s) = self.sessions.get(&key) else {
                continue;
            };
            if up.get(s.peer).copied().unwrap_or(false) {
                let class = Class::of(s.app, Kind::Termination);
                out.push(self.start(key, class));
                self.counts.flush_ccr_t += 1;
            } else {
                keep.push(key);
            }
        }
        self.terminate = keep;
        out
    }

    /// The outcome of a request: `result_code` of the answer (`None` = timeout or lost)
    /// and the answering server's Origin-Host.
    pub fn complete(
        &mut self,
        key: SessionKey,
        class: Class,
        result_code: Option<u32>,
        server: Option<&str>,
    ) {
        let Some(s) = self.sessions.get_mut(&key) else {
            return;
        };
        s.busy = false;
        if let (Some(first), Some(now)) = (s.server.as_deref(), server)
            && !first.eq_ignore_ascii_case(now)
        {
            self.counts.server_switches += 1;
        }
        match class.kind() {
            Kind::Initial => {
                if result_code == Some(dra::diameter::result_code::SUCCESS) {
                    s.open = true;
                    s.server = server.map(str::to_owned);
                    self.counts.opened += 1;
                    self.make_idle(key);
                } else {
                    self.counts.failed_initial += 1;
                    self.sessions.remove(&key);
                }
            }
            Kind::Update => self.make_idle(key),
            Kind::Termination => {
                // The gateway forgets the session whatever the answer (RFC 4006 §5.5).
                self.counts.closed += 1;
                self.sessions.remove(&key);
            }
        }
    }

    fn make_idle(&mut self, key: SessionKey) {
        let Some(s) = self.sessions.get(&key) else {
            return;
        };
        if s.terminate {
            self.terminate.push(key);
        } else {
            self.idle.entry((s.app, s.peer)).or_default().push(key);
        }
    }
}

/// Builds a CCR (RFC 4006 §3.1; 3GPP TS 29.212 for Gx) with the given ids.
#[allow(clippy::too_many_arguments)]
pub fn build_ccr(
    send: &Send,
    origin_host: &str,
    origin_realm: &str,
    destination_realm: &str,
    destination_host: Option<&str>,
    service_context_id: &str,
    hop_by_hop: u32,
    end_to_end: u32,
) -> Message {
    let app = send.class.app();
    let mut m = Message::request(cmd::CREDIT_CONTROL, app.id(), hop_by_hop, end_to_end)
        .proxiable()
        .with(Avp::utf8(c::SESSION_ID, &send.session_id).mandatory())
        .with(Avp::u32(c::AUTH_APPLICATION_ID, app.id()).mandatory())
        .with(Avp::utf8(c::ORIGIN_HOST, origin_host).mandatory())
        .with(Avp::utf8(c::ORIGIN_REALM, origin_realm).mandatory())
        .with(Avp::utf8(c::DESTINATION_REALM, destination_realm).mandatory());
    if let Some(h) = destination_host {
        m.push(Avp::utf8(c::DESTINATION_HOST, h).mandatory());
    }
    if app == App::Gy {
        // RFC 4006 §8.42: Service-Context-Id is mandatory in Gy CCRs.
        m.push(Avp::utf8(c::SERVICE_CONTEXT_ID, service_context_id).mandatory());
    }
    m.push(Avp::enumerated(c::CC_REQUEST_TYPE, send.class.kind().code() as i32).mandatory());
    m.push(Avp::u32(c::CC_REQUEST_NUMBER, send.number).mandatory());
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sessions open before the scenario: CCR-U and CCR-T use them at once, each request
    /// numbered from 1 (the CCR-I came before), and a CCR-T closes one.
    #[test]
    fn sessions_open_at_the_start_take_updates_and_terminations_at_once() {
        let mut pool = SessionPool::new(7, 1);
        pool.preopen(0, "pgw1.lab.example", 3);
        assert_eq!(pool.open_count(App::Gx), 3);
        assert_eq!(pool.counts().opened, 0);
        let up = [true];
        let u = pool.pick(Class::GxCcrU, &up).unwrap();
        assert_eq!((u.number, u.peer), (1, 0));
        assert!(u.session_id.starts_with("pgw1.lab.example;7;"));
        let t = pool.pick(Class::GxCcrT, &up).unwrap();
        assert_ne!(t.key, u.key);
        pool.complete(t.key, t.class, Some(2001), Some("pcrf1"));
        assert_eq!(pool.open_count(App::Gx), 2);
        assert_eq!(pool.pick(Class::GyCcrU, &up), None);
    }

    #[test]
    fn life_cycle_update_terminate_and_flush() {
        let mut pool = SessionPool::new(7, 1);
        let up = [true, true];
        let a = pool.initial(App::Gx, 0, "pgw1.lab.example");
        assert!(a.session_id.starts_with("pgw1.lab.example;7;"));
        // Not open yet: nothing to update.
        assert_eq!(pool.pick(Class::GxCcrU, &up), None);
        pool.complete(a.key, a.class, Some(2001), Some("pcrf1"));
        let u = pool.pick(Class::GxCcrU, &up).unwrap();
        assert_eq!((u.key, u.number, u.peer), (a.key, 1, 0));
        // Busy: cannot be picked twice.
        assert_eq!(pool.pick(Class::GxCcrT, &up), None);
        pool.complete(u.key, u.class, Some(2001), Some("pcrf2"));
        assert_eq!(pool.counts().server_switches, 1);
        // Gy has no session.
        assert_eq!(pool.pick(Class::GyCcrT, &up), None);
        let b = pool.initial(App::Gx, 1, "pgw2.lab.example");
        pool.complete(b.key, b.class, Some(2001), Some("pcrf1"));
        let c = pool.initial(App::Gx, 1, "pgw2.lab.example");
        pool.complete(c.key, c.class, Some(3004), Some("pcrf1"));
        assert_eq!(pool.counts().failed_initial, 1);
        assert_eq!(pool.open_count(App::Gx), 2);
        pool.flush(Flush::Gx);
        assert_eq!(pool.pick(Class::GxCcrU, &up), None);
        let mut t = pool.flush_sends(&[true, false]);
        assert_eq!(t.len(), 1);
        t.extend(pool.flush_sends(&up));
        assert_eq!(t.len(), 2);
        assert!(t.iter().all(|s| s.class == Class::GxCcrT));
        for s in &t {
            pool.complete(s.key, s.class, None, None);
        }
        assert_eq!(pool.open_count(App::Gx), 0);
        assert_eq!(pool.counts().flush_ccr_t, 2);
        assert_eq!(pool.counts().closed, 2);
    }

    #[test]
    fn gy_ccr_carries_service_context() {
        let mut pool = SessionPool::new(1, 1);
        let s = pool.initial(App::Gy, 0, "pgw1");
        let m = build_ccr(&s, "pgw1", "lab", "ocs.net", None, "32251@3gpp.org", 1, 2);
        assert_eq!(m.application_id, 4);
        assert_eq!(m.cc_request_type(), Some(1));
        assert_eq!(
            m.find(c::SERVICE_CONTEXT_ID).unwrap().as_utf8().unwrap(),
            "32251@3gpp.org"
        );
        let back = Message::decode(&m.encode()).unwrap();
        assert_eq!(back.session_id(), Some(s.session_id.as_str()));
    }
}
