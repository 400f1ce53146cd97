//! Scenario files: phases with durations and per-class rates (steady or ramps), bursts,
//! gateway flushes and reconnect storms; and the sans-IO [`Schedule`] that turns a
//! scenario into "how many requests of each class are due by time t". The format is
//! documented in `docs/loadgen.md`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use dra_common::wire::app;
use serde::{Deserialize, Serialize};

/// A request class the load generator sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// Gx (16777238) CCR-INITIAL: opens a session.
    GxCcrI,
    /// Gx CCR-UPDATE on an open session.
    GxCcrU,
    /// Gx CCR-TERMINATION: closes a session.
    GxCcrT,
    /// Gy (4) CCR-INITIAL.
    GyCcrI,
    /// Gy CCR-UPDATE.
    GyCcrU,
    /// Gy CCR-TERMINATION.
    GyCcrT,
}

/// The two credit-control applications.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum App {
    /// Gx, Application-Id 16777238 (3GPP TS 29.212).
    Gx,
    /// Gy, Application-Id 4 (RFC 4006 DCCA).
    Gy,
}

impl App {
    /// The Application-Id.
    pub const fn id(self) -> u32 {
        match self {
            App::Gx => app::GX,
            App::Gy => app::GY,
        }
    }

    /// "gx" / "gy".
    pub const fn name(self) -> &'static str {
        match self {
            App::Gx => "gx",
            App::Gy => "gy",
        }
    }
}

/// CC-Request-Type (RFC 4006 §8.3) of a class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// INITIAL_REQUEST (1).
    Initial,
    /// UPDATE_REQUEST (2).
    Update,
    /// TERMINATION_REQUEST (3).
    Termination,
}

impl Kind {
    /// The CC-Request-Type value (RFC 4006 §8.3).
    pub const fn code(self) -> u32 {
        match self {
            Kind::Initial => 1,
            Kind::Update => 2,
            Kind::Termination => 3,
        }
    }
}

impl Class {
    /// Every class, in report order.
    pub const ALL: [Class; 6] = [
        Class::GxCcrI,
        Class::GxCcrU,
        Class::GxCcrT,
        Class::GyCcrI,
        Class::GyCcrU,
        Class::GyCcrT,
    ];

    /// The name used in scenario files, rows and reports ("gx_ccr_i", …).
    pub const fn name(self) -> &'static str {
        match self {
            Class::GxCcrI => "gx_ccr_i",
            Class::GxCcrU => "gx_ccr_u",
            Class::GxCcrT => "gx_ccr_t",
            Class::GyCcrI => "gy_ccr_i",
            Class::GyCcrU => "gy_ccr_u",
            Class::GyCcrT => "gy_ccr_t",
        }
    }

    /// Index into [`Class::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The application.
    pub const fn app(self) -> App {
        match self {
            Class::GxCcrI | Class::GxCcrU | Class::GxCcrT => App::Gx,
            Class::GyCcrI | Class::GyCcrU | Class::GyCcrT => App::Gy,
        }
    }

    /// The CC-Request-Type.
    pub const fn kind(self) -> Kind {
        match self {
            Class::GxCcrI | Class::GyCcrI => Kind::Initial,
            Class::GxCcrU | Class::GyCcrU => Kind::Update,
            Class::GxCcrT | Class::GyCcrT => Kind::Termination,
        }
    }

    /// The class of `app` and `kind`.
    pub const fn of(app: App, kind: Kind) -> Class {
        match (app, kind) {
            (App::Gx, Kind::Initial) => Class::GxCcrI,
            (App::Gx, Kind::Update) => Class::GxCcrU,
            (App::Gx, Kind::Termination) => Class::GxCcrT,
            (App::Gy, Kind::Initial) => Class::GyCcrI,
            (App::Gy, Kind::Update) => Class::GyCcrU,
            (App::Gy, Kind::Termination) => Class::GyCcrT,
        }
    }
}

/// A rate in requests per second during a phase: a constant, or a linear ramp.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum Rate {
    /// The same rate for the whole phase.
    Steady(f64),
    /// Linear from `from` at the phase start to `to` at its end.
    Ramp {
        /// Rate at the start of the phase.
        from: f64,
        /// Rate at the end of the phase.
        to: f64,
    },
}

impl Rate {
    /// Requests due in the first `t` seconds of a phase lasting `d` seconds (the integral
    /// of the rate).
    fn integral(self, t: f64, d: f64) -> f64 {
        match self {
            Rate::Steady(r) => r * t,
            Rate::Ramp { from, to } => {
                let slope = if d > 0.0 { (to - from) / d } else { 0.0 };
                from * t + slope * t * t / 2.0
            }
        }
    }

    fn values(self) -> [f64; 2] {
        match self {
            Rate::Steady(r) => [r, r],
            Rate::Ramp { from, to } => [from, to],
        }
    }
}

/// Per-class rates of a phase (requests per second; absent = 0).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Rates {
    /// Gx CCR-I.
    pub gx_ccr_i: Option<Rate>,
    /// Gx CCR-U.
    pub gx_ccr_u: Option<Rate>,
    /// Gx CCR-T.
    pub gx_ccr_t: Option<Rate>,
    /// Gy CCR-I.
    pub gy_ccr_i: Option<Rate>,
    /// Gy CCR-U.
    pub gy_ccr_u: Option<Rate>,
    /// Gy CCR-T.
    pub gy_ccr_t: Option<Rate>,
}

impl Rates {
    /// The rate of `class`, if set.
    pub fn get(&self, class: Class) -> Option<Rate> {
        match class {
            Class::GxCcrI => self.gx_ccr_i,
            Class::GxCcrU => self.gx_ccr_u,
            Class::GxCcrT => self.gx_ccr_t,
            Class::GyCcrI => self.gy_ccr_i,
            Class::GyCcrU => self.gy_ccr_u,
            Class::GyCcrT => self.gy_ccr_t,
        }
    }
}

/// `count` extra requests of `class`, all due at `at_s` seconds into the phase.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Burst {
    /// Seconds after the phase start.
    #[serde(default)]
    pub at_s: f64,
    /// The class.
    pub class: Class,
    /// How many requests.
    pub count: u64,
}

/// Which sessions a gateway flush terminates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Flush {
    /// Every open Gx session.
    Gx,
    /// Every open Gy session.
    Gy,
    /// Every open session.
    All,
}

impl Flush {
    /// Whether sessions of `app` are flushed.
    pub fn covers(self, app: App) -> bool {
        matches!(
            (self, app),
            (Flush::All, _) | (Flush::Gx, App::Gx) | (Flush::Gy, App::Gy)
        )
    }
}

/// One phase of a scenario.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Phase {
    /// Name shown in rows and progress lines.
    #[serde(default)]
    pub name: String,
    /// Length in seconds.
    pub duration_s: f64,
    /// Rates per class.
    #[serde(default)]
    pub rates: Rates,
    /// Bursts within the phase.
    #[serde(default)]
    pub burst: Vec<Burst>,
    /// Gateway flush at the phase start: one CCR-T for every open session covered.
    #[serde(default)]
    pub flush: Option<Flush>,
    /// Reconnect storm at the phase start: every peer drops its connection (no DPR) and
    /// reconnects.
    #[serde(default)]
    pub reconnect: bool,
}

fn default_timeout_ms() -> u64 {
    2000
}

fn default_service_context() -> String {
    "32251@3gpp.org".to_owned()
}

fn default_reconnect_delay_ms() -> u64 {
    100
}

/// A whole scenario file.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Name shown in the summary.
    #[serde(default)]
    pub name: String,
    /// Destination-Realm of every CCR (of Gx CCRs when `gy_destination_realm` is set).
    pub destination_realm: String,
    /// Destination-Realm of Gy CCRs, when the OCS realm differs from the PCRF's.
    #[serde(default)]
    pub gy_destination_realm: Option<String>,
    /// Destination-Host of every CCR, when set.
    #[serde(default)]
    pub destination_host: Option<String>,
    /// Service-Context-Id of Gy CCRs (RFC 4006 §8.42).
    #[serde(default = "default_service_context")]
    pub service_context_id: String,
    /// A request without an answer after this long counts as a timeout.
    #[serde(default = "default_timeout_ms")]
    pub request_timeout_ms: u64,
    /// How long a dropped peer waits before it reconnects (storms and failures).
    #[serde(default = "default_reconnect_delay_ms")]
    pub reconnect_delay_ms: u64,
    /// Gx sessions open on every peer when the scenario begins (established before it,
    /// e.g. before the DRA restarted: no CCR-I is sent for them). CCR-U and CCR-T use
    /// them from the first second; their server binds them when they first arrive
    /// (a server with strict sessions answers them 5002).
    #[serde(default)]
    pub open_sessions: u64,
    /// The phases, in order.
    pub phase: Vec<Phase>,
}

impl Scenario {
    /// The Destination-Realm of requests of `app`.
    pub fn destination_realm_of(&self, app: App) -> &str {
        match (app, &self.gy_destination_realm) {
            (App::Gy, Some(r)) => r,
            _ => &self.destination_realm,
        }
    }
}

/// A scenario that cannot be loaded or makes no sense.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("cannot read scenario {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The TOML does not parse or has unknown keys.
    #[error("scenario is not valid TOML for the format in docs/loadgen.md")]
    Parse {
        /// The parser's error.
        #[source]
        source: toml::de::Error,
    },
    /// A value out of range.
    #[error("scenario phase {phase}: {what}")]
    Invalid {
        /// Phase index (0-based).
        phase: usize,
        /// What is wrong.
        what: &'static str,
    },
    /// No phases.
    #[error("scenario has no phase")]
    NoPhase,
}

impl Scenario {
    /// Parses and checks a scenario from TOML text.
    pub fn from_toml(text: &str) -> Result<Scenario, ScenarioError> {
        let s: Scenario = toml::from_str(text).map_err(|source| ScenarioError::Parse { source })?;
        s.validate()?;
        Ok(s)
    }

    /// Reads and checks a scenario file.
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            path: path.to_owned(),
            source,
        })?;
        Scenario::from_toml(&text)
    }

    /// Checks durations, rates and bursts.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        if self.phase.is_empty() {
            return Err(ScenarioError::NoPhase);
        }
        for (i, p) in self.phase.iter().enumerate() {
            let bad = |what| Err(ScenarioError::Invalid { phase: i, what });
            if !(p.duration_s.is_finite() && p.duration_s > 0.0) {
                return bad("duration_s must be above 0");
            }
            for c in Class::ALL {
                if let Some(r) = p.rates.get(c)
                    && r.values().iter().any(|v| !v.is_finite() || *v < 0.0)
                {
                    return bad("rates must be finite and not negative");
                }
            }
            for b in &p.burst {
                if !(b.at_s.is_finite() && b.at_s >= 0.0 && b.at_s <= p.duration_s) {
                    return bad("burst at_s must lie within the phase");
                }
            }
        }
        Ok(())
    }

    /// The sum of the phase durations.
    pub fn duration(&self) -> Duration {
        Duration::from_secs_f64(self.phase.iter().map(|p| p.duration_s).sum())
    }

    /// Requests of `class` due in the first `t` of the scenario (not rounded).
    pub fn expected(&self, class: Class, t: Duration) -> f64 {
        let t = t.as_secs_f64();
        let mut start = 0.0;
        let mut total = 0.0;
        for p in &self.phase {
            if t <= start {
                break;
            }
            let within = (t - start).min(p.duration_s);
            if let Some(r) = p.rates.get(class) {
                total += r.integral(within, p.duration_s);
            }
            for b in p.burst.iter().filter(|b| b.class == class) {
                if start + b.at_s <= t {
                    total += b.count as f64;
                }
            }
            start += p.duration_s;
        }
        total
    }
}

/// A scenario event at a phase start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// Gateway flush.
    Flush(Flush),
    /// Every peer drops and reconnects.
    ReconnectStorm,
}

/// What became due since the previous [`Schedule::advance`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Due {
    /// New requests per class, indexed by [`Class::index`].
    pub requests: [u64; 6],
    /// Events whose time came, in order.
    pub events: Vec<Event>,
}

/// Sans-IO pacing of a scenario: call [`Schedule::advance`] with the time since the
/// start; it returns the requests that became due (integral of the rates, floor) and the
/// phase-start events.
#[derive(Clone, Debug)]
pub struct Schedule {
    scenario: Scenario,
    issued: [u64; 6],
    events_done: usize,
}

impl Schedule {
    /// A schedule at time zero.
    pub fn new(scenario: Scenario) -> Schedule {
        Schedule {
            scenario,
            issued: [0; 6],
            events_done: 0,
        }
    }

    /// The scenario.
    pub fn scenario(&self) -> &Scenario {
        &self.scenario
    }

    /// Index and name of the phase running at `t` (the last phase after the end).
    pub fn phase_at(&self, t: Duration) -> (usize, &str) {
        let t = t.as_secs_f64();
        let mut start = 0.0;
        for (i, p) in self.scenario.phase.iter().enumerate() {
            start += p.duration_s;
            if t < start {
                return (i, &p.name);
            }
        }
        let last = self.scenario.phase.len() - 1;
        (last, &self.scenario.phase[last].name)
    }

    /// Everything due by `t` that was not returned before.
    pub fn advance(&mut self, t: Duration) -> Due {
        let mut due = Due::default();
        let end = self.scenario.duration();
        let t = t.min(end);
        // Phase-start events (the phase starting exactly at `t` included).
        let secs = t.as_secs_f64();
        let mut start = 0.0;
        let mut events = Vec::new();
        for p in &self.scenario.phase {
            if start > secs {
                break;
            }
            if let Some(f) = p.flush {
                events.push(Event::Flush(f));
            }
            if p.reconnect {
                events.push(Event::ReconnectStorm);
            }
            start += p.duration_s;
        }
        due.events = events.split_off(self.events_done.min(events.len()));
        self.events_done += due.events.len();
        for c in Class::ALL {
            // A tiny epsilon so that 5 s × 100/s gives 500, not 499.
            let want = (self.scenario.expected(c, t) + 1e-6).floor() as u64;
            let i = c.index();
            due.requests[i] = want.saturating_sub(self.issued[i]);
            self.issued[i] = self.issued[i].max(want);
        }
        due
    }
}

/// Total requests per class a scenario schedules (by class name).
pub fn totals(scenario: &Scenario) -> BTreeMap<&'static str, u64> {
    Class::ALL
        .iter()
        .map(|&c| {
            (
                c.name(),
                (scenario.expected(c, scenario.duration()) + 1e-6).floor() as u64,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"
name = "t"
destination_realm = "pcrf.example.net"
[[phase]]
name = "steady"
duration_s = 2
rates = { gx_ccr_i = 100, gy_ccr_u = { from = 0, to = 200 } }
[[phase]]
name = "flush"
duration_s = 1
flush = "gx"
reconnect = true
burst = [{ at_s = 0.5, class = "gx_ccr_t", count = 30 }]
"#;

    #[test]
    fn gy_goes_to_its_own_realm_when_one_is_given() {
        let s = Scenario::from_toml(TEXT).unwrap();
        assert_eq!(s.destination_realm_of(App::Gy), "pcrf.example.net");
        let t = TEXT.replace(
            "destination_realm = \"pcrf.example.net\"",
            "destination_realm = \"pcrf.example.net\"\ngy_destination_realm = \"ocs.example.net\"",
        );
        let s = Scenario::from_toml(&t).unwrap();
        assert_eq!(s.destination_realm_of(App::Gx), "pcrf.example.net");
        assert_eq!(s.destination_realm_of(App::Gy), "ocs.example.net");
    }

    #[test]
    fn rates_ramps_and_bursts_integrate() {
        let s = Scenario::from_toml(TEXT).unwrap();
        assert_eq!(s.duration(), Duration::from_secs(3));
        let t = totals(&s);
        assert_eq!(t["gx_ccr_i"], 200);
        // Ramp 0→200 over 2 s: 200 requests.
        assert_eq!(t["gy_ccr_u"], 200);
        assert_eq!(t["gx_ccr_t"], 30);
        assert_eq!(t["gy_ccr_i"], 0);
    }

    #[test]
    fn schedule_pays_out_exactly_once_and_fires_events_at_phase_start() {
        let s = Scenario::from_toml(TEXT).unwrap();
        let mut sch = Schedule::new(s);
        let mut sent = [0u64; 6];
        let mut events = Vec::new();
        for ms in 0..=3500u64 {
            let d = sch.advance(Duration::from_millis(ms));
            for (a, b) in sent.iter_mut().zip(d.requests) {
                *a += b;
            }
            if !d.events.is_empty() {
                events.push((ms, d.events));
            }
        }
        assert_eq!(sent[Class::GxCcrI.index()], 200);
        assert_eq!(sent[Class::GyCcrU.index()], 200);
        assert_eq!(sent[Class::GxCcrT.index()], 30);
        assert_eq!(
            events,
            vec![(2000, vec![Event::Flush(Flush::Gx), Event::ReconnectStorm])]
        );
        let mut sch = Schedule::new(Scenario::from_toml(TEXT).unwrap());
        assert_eq!(sch.advance(Duration::from_millis(1000)).requests[0], 100);
        assert_eq!(sch.phase_at(Duration::from_millis(2500)).1, "flush");
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused() {
        let typo = TEXT.replace("gx_ccr_i = 100", "gx_ccri = 100");
        assert!(matches!(
            Scenario::from_toml(&typo),
            Err(ScenarioError::Parse { .. })
        ));
        let neg = TEXT.replace("duration_s = 1\n", "duration_s = 0\n");
        assert!(matches!(
            Scenario::from_toml(&neg),
            Err(ScenarioError::Invalid { phase: 1, .. })
        ));
    }
}
