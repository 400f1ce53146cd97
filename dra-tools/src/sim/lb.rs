//! The load-balancing model: clients pick servers through the real [`Selector`] and see
//! server load only as of their last heartbeat (docomo's proposal, docs/architecture.md
//! §7; RFC 8583).
//!
//! Time unit: the mean inter-arrival time of the aggregate request stream (IAT). Requests
//! arrive as one Poisson process of rate 1; each request belongs to a client drawn with
//! probability proportional to the client's weight (heavy clients weigh
//! [`LbConfig::heavy_factor`], the others 1). This is the same as every client sending its
//! own Poisson stream.
//!
//! Heartbeats: client `c` refreshes its view of *every* server at `phase_c + k·H`
//! (k = 0, 1, …): one DWR/DWA round per client, answered instantly, carrying each
//! server's Load-Value (RFC 8583 §6.1 piggybacks the Load AVP on any answer, here the
//! DWA). `phase_c` is uniform in `[0, H)` per client ([`HeartbeatPhase::Random`]) or 0 for
//! every client ([`HeartbeatPhase::Aligned`]). Between two heartbeats the client decides
//! on what it saw last. `H = 0` means the client reads the current load before every
//! decision. At time 0 every client has a report of the idle state. A heartbeat that falls
//! on the same instant as an arrival is seen by that arrival.
//!
//! What a client knows without heartbeats: its own requests in flight to each server
//! (`PeerView::pending`, kept locally by the agent), which `p2c` uses to break ties.
//!
//! Priority order: client `c` lists the servers starting at `c mod K`
//! (`c, c+1, …`), all with the same route weight, the way a static design spreads
//! primaries. `priority` always takes the first; the others choose inside that tier.
//!
//! Randomness: one seed drives everything. Arrival times, client choice, job sizes, heavy
//! clients and heartbeat phases come from streams that do not depend on the strategy, so
//! every strategy sees the same traffic (common random numbers); each client's
//! [`Selector`] gets its own seed derived from the same seed.

use std::{collections::VecDeque, fmt, str::FromStr, time::Duration};

use dra::routing::{
    Candidate, LOAD_VALUE_IDLE, LoadInfo, PeerId, PeerTable, Selector, SplitMix64, Strategy,
};

/// Wall-clock length of one time unit (one mean inter-arrival time) as handed to the
/// [`Selector`]. Only differences matter (load-report age); no maximum age is set.
pub const TICK: Duration = Duration::from_millis(1);

/// Which server model to simulate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Variant {
    /// docomo's setting: a server's load is the number of requests it has
    /// received so far; no service, no queue.
    Seed002,
    /// Servers with capacities and FIFO queues; load is the number of requests in the
    /// server (waiting + in service).
    Queue,
}

impl Variant {
    /// Both variants.
    pub const ALL: [Variant; 2] = [Self::Seed002, Self::Queue];

    /// The command-line name (`seed002`, `queue`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Seed002 => "seed002",
            Self::Queue => "queue",
        }
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Variant {
    type Err = SimError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        by_name(Self::ALL, Self::name, s, "variant", "seed002 or queue")
    }
}

/// The one of `all` whose `name` is `s`; else the parameter `param` is invalid.
fn by_name<T: Copy>(
    all: impl IntoIterator<Item = T>,
    name: fn(T) -> &'static str,
    s: &str,
    param: &'static str,
    expected: &'static str,
) -> Result<T, SimError> {
    all.into_iter()
        .find(|&v| name(v) == s)
        .ok_or_else(|| SimError::InvalidParameter {
            name: param,
            value: s.to_owned(),
            expected,
        })
}

/// How heartbeat instants of different clients relate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum HeartbeatPhase {
    /// Each client has its own phase, uniform in `[0, H)` (independent watchdog timers).
    #[default]
    Random,
    /// Every client refreshes at the same instants `k·H` (worst case for herding).
    Aligned,
}

impl HeartbeatPhase {
    /// Both phases.
    pub const ALL: [HeartbeatPhase; 2] = [Self::Random, Self::Aligned];

    /// The command-line name (`random`, `aligned`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Random => "random",
            Self::Aligned => "aligned",
        }
    }
}

impl FromStr for HeartbeatPhase {
    type Err = SimError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        by_name(Self::ALL, Self::name, s, "phases", "random or aligned")
    }
}

/// A parameter is out of range, or the selector misbehaved.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimError {
    /// A configuration value is not allowed.
    #[error("invalid simulation parameter {name} = {value}: expected {expected}")]
    InvalidParameter {
        /// The parameter (command-line option name without dashes).
        name: &'static str,
        /// The value given.
        value: String,
        /// What is allowed.
        expected: &'static str,
    },
    /// The selector returned no server although every server is in good state.
    #[error("strategy {strategy} selected no server at t = {at} although every server is good")]
    NoServerSelected {
        /// The strategy in use.
        strategy: Strategy,
        /// Simulated time (mean inter-arrival times).
        at: f64,
    },
}

/// One simulation run.
#[derive(Debug, Clone, PartialEq)]
pub struct LbConfig {
    /// Server model.
    pub variant: Variant,
    /// Selection strategy every client uses.
    pub strategy: Strategy,
    /// Number of requests (signals) in the run.
    pub signals: u64,
    /// Number of clients.
    pub clients: usize,
    /// Share of clients that are heavy: `round(clients × heavy_fraction)` clients, drawn at
    /// random from the seed.
    pub heavy_fraction: f64,
    /// Traffic of a heavy client relative to a normal one.
    pub heavy_factor: u32,
    /// Heartbeat period H in mean inter-arrival times; 0 = always fresh.
    pub heartbeat: f64,
    /// Heartbeat phases of the clients.
    pub phases: HeartbeatPhase,
    /// Number of servers in the `seed002` variant.
    pub servers: usize,
    /// Relative capacities (service rates) of the servers in the `queue` variant; the
    /// length of the list is the number of servers.
    pub capacities: Vec<f64>,
    /// Offered load / total capacity in the `queue` variant (e.g. 0.7).
    pub utilisation: f64,
    /// `queue` variant: requests in a server, per unit of capacity, at which it reports
    /// Load-Value 0 (see [`queue_load_value`]).
    pub queue_full: f64,
    /// `queue` variant: share of the requests at the start left out of the statistics.
    pub warmup: f64,
    /// `seed002` variant: window length in requests for [`RunResult::window_cv`]; 0 = off.
    pub window: u64,
    /// Seed of every random choice; the same seed gives the same result.
    pub seed: u64,
}

impl LbConfig {
    /// The defaults for a variant: 100,000 signals, 10 clients of which 10 % send 10×,
    /// fresh load (H = 0), random phases, `least_loaded`; `seed002` with 3 servers,
    /// `queue` with capacities 1:1:2 at 70 % utilisation.
    pub fn new(variant: Variant) -> Self {
        Self {
            variant,
            strategy: Strategy::LeastLoaded,
            signals: 100_000,
            clients: 10,
            heavy_fraction: 0.1,
            heavy_factor: 10,
            heartbeat: 0.0,
            phases: HeartbeatPhase::Random,
            servers: 3,
            capacities: vec![1.0, 1.0, 2.0],
            utilisation: 0.7,
            queue_full: 8.0,
            warmup: 0.1,
            window: 1000,
            seed: 1,
        }
    }

    /// Number of servers of this run's variant.
    pub fn server_count(&self) -> usize {
        match self.variant {
            Variant::Seed002 => self.servers,
            Variant::Queue => self.capacities.len(),
        }
    }

    /// Check every parameter.
    pub fn validate(&self) -> Result<(), SimError> {
        fn bad(name: &'static str, value: impl ToString, expected: &'static str) -> SimError {
            SimError::InvalidParameter {
                name,
                value: value.to_string(),
                expected,
            }
        }
        if self.signals < 2 {
            return Err(bad("signals", self.signals, "at least 2"));
        }
        if self.clients == 0 {
            return Err(bad("clients", self.clients, "at least 1"));
        }
        if !(0.0..=1.0).contains(&self.heavy_fraction) {
            return Err(bad("heavy-fraction", self.heavy_fraction, "0 ..= 1"));
        }
        if self.heavy_factor == 0 {
            return Err(bad("heavy-factor", self.heavy_factor, "at least 1"));
        }
        if !self.heartbeat.is_finite() || self.heartbeat < 0.0 {
            return Err(bad("heartbeat", self.heartbeat, "a finite number >= 0"));
        }
        match self.variant {
            Variant::Seed002 => {
                if self.servers == 0 {
                    return Err(bad("servers", self.servers, "at least 1"));
                }
            }
            Variant::Queue => {
                if self.capacities.is_empty() {
                    return Err(bad("capacities", "(empty)", "at least one capacity"));
                }
                if let Some(c) = self
                    .capacities
                    .iter()
                    .find(|c| !c.is_finite() || **c <= 0.0)
                {
                    return Err(bad("capacities", c, "finite numbers > 0"));
                }
                if !self.utilisation.is_finite() || self.utilisation <= 0.0 {
                    return Err(bad("utilisation", self.utilisation, "a finite number > 0"));
                }
                if !self.queue_full.is_finite() || self.queue_full <= 0.0 {
                    return Err(bad("queue-full", self.queue_full, "a finite number > 0"));
                }
                if !(0.0..1.0).contains(&self.warmup) {
                    return Err(bad("warmup", self.warmup, "0 ..= 1 (exclusive)"));
                }
                if self.warmup_count() + 1 >= self.signals {
                    return Err(bad(
                        "warmup",
                        self.warmup,
                        "a share that leaves at least 2 measured requests",
                    ));
                }
            }
        }
        Ok(())
    }

    fn warmup_count(&self) -> u64 {
        (self.warmup * self.signals as f64).floor() as u64
    }
}

/// What one server went through.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerStats {
    /// Requests sent to it over the whole run.
    pub received: u64,
    /// `queue`: busy time / measured time.
    pub utilisation: Option<f64>,
    /// `queue`: time-averaged number of requests in the server (waiting + in service).
    pub mean_queue: Option<f64>,
}

/// The outcome of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunResult {
    /// Per server, in server order.
    pub servers: Vec<ServerStats>,
    /// Coefficient of variation (population stddev / mean) of the per-server load:
    /// `seed002` requests received, `queue` utilisation.
    pub cv: f64,
    /// Max / mean of the same per-server load.
    pub max_over_mean: f64,
    /// `seed002`: mean over consecutive windows of [`LbConfig::window`] requests of the CV
    /// of what each server received inside the window (short-term imbalance).
    pub window_cv: Option<f64>,
    /// `queue`: CV of the time-averaged queue length per unit of capacity.
    pub queue_cv: Option<f64>,
    /// `queue`: 99th percentile of latency (waiting + service), mean inter-arrival times.
    pub p99: Option<f64>,
    /// `queue`: mean latency, mean inter-arrival times.
    pub mean_latency: Option<f64>,
}

/// Load-Value for the `seed002` variant: `65535 − ⌊received / q⌋` with
/// `q = max(1, ⌈signals / 65535⌉)`, so more received = lower value (RFC 8583 §7.3: higher
/// = less loaded), one step per request when `signals ≤ 65535`, never below 0.
pub fn seed002_load_value(received: u64, signals: u64) -> u16 {
    let q = signals.div_ceil(u64::from(LOAD_VALUE_IDLE)).max(1);
    let used = (received / q).min(u64::from(LOAD_VALUE_IDLE));
    LOAD_VALUE_IDLE - used as u16
}

/// Load-Value for the `queue` variant: `⌊65535 × (1 − min(1, n / (capacity × full)))⌋`
/// where `n` is the number of requests in the server (waiting + in service): the share of
/// a queue of `capacity × full` requests that is still free. Longer queue = lower value
/// (RFC 8583 §7.3); dividing by capacity makes a server twice as fast report half the
/// load for the same queue, since it drains it in half the time.
pub fn queue_load_value(in_server: usize, capacity: f64, full: f64) -> u16 {
    let used = (in_server as f64 / (capacity * full)).min(1.0);
    (f64::from(LOAD_VALUE_IDLE) * (1.0 - used)).floor() as u16
}

/// Coefficient of variation (population stddev / mean) and max / mean of `xs`;
/// `(0, 1)` when the mean is 0 (nothing to balance).
pub fn cv_and_max_over_mean(xs: &[f64]) -> (f64, f64) {
    if xs.is_empty() {
        return (0.0, 1.0);
    }
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    if mean <= 0.0 {
        return (0.0, 1.0);
    }
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    let max = xs.iter().copied().fold(f64::MIN, f64::max);
    (var.sqrt() / mean, max / mean)
}

/// Exp(1) variate from 53 random bits.
fn exp1(rng: &mut SplitMix64) -> f64 {
    let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    -(1.0 - u).ln()
}

/// Uniform in `[0, 1)`.
fn unit(rng: &mut SplitMix64) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

fn at(t: f64) -> Duration {
    TICK.mul_f64(t)
}

/// The simulated clients: their selectors, their (possibly stale) view of the servers,
/// their route candidates and their requests in flight.
struct Clients {
    cumulative_weight: Vec<u64>,
    views: Vec<PeerTable>,
    selectors: Vec<Selector>,
    candidates: Vec<Vec<Candidate>>,
    pending: Vec<Vec<u32>>,
}

impl Clients {
    fn new(cfg: &LbConfig, k: usize, setup: &mut SplitMix64, master: &mut SplitMix64) -> Self {
        let n = cfg.clients;
        // Heavy clients: a seeded partial Fisher–Yates draw of round(n × fraction).
        let heavy = ((n as f64 * cfg.heavy_fraction).round() as usize).min(n);
        let mut order: Vec<usize> = (0..n).collect();
        for i in 0..heavy {
            let j = i + setup.below((n - i) as u64) as usize;
            order.swap(i, j);
        }
        let mut weight = vec![1u64; n];
        for &c in &order[..heavy] {
            weight[c] = u64::from(cfg.heavy_factor);
        }
        let cumulative_weight = weight
            .iter()
            .scan(0u64, |acc, w| {
                *acc += w;
                Some(*acc)
            })
            .collect();
        let views = (0..n)
            .map(|_| {
                let mut t = PeerTable::new();
                for j in 0..k {
                    let id = t.add(&format!("server-{j}"));
                    t.set_good(id, true);
                }
                t
            })
            .collect();
        let selectors = (0..n)
            .map(|_| Selector::new(cfg.strategy, master.next_u64()))
            .collect();
        let candidates = (0..n)
            .map(|c| {
                (0..k)
                    .map(|i| Candidate {
                        peer: PeerId((c + i) % k),
                        weight: 1,
                    })
                    .collect()
            })
            .collect();
        Self {
            cumulative_weight,
            views,
            selectors,
            candidates,
            pending: vec![vec![0; k]; n],
        }
    }

    /// The client of the next request, proportional to weight.
    fn draw(&self, rng: &mut SplitMix64) -> usize {
        let total = *self.cumulative_weight.last().unwrap_or(&1);
        let r = rng.below(total);
        self.cumulative_weight.partition_point(|&cw| cw <= r)
    }

    /// Client `c` receives every server's current Load-Value at time `t`.
    fn refresh(&mut self, c: usize, t: f64, values: &[u16]) {
        let view = &mut self.views[c];
        for (j, &value) in values.iter().enumerate() {
            view.set_load(
                PeerId(j),
                Some(LoadInfo {
                    value,
                    received_at: at(t),
                }),
            );
        }
    }

    fn select(&mut self, c: usize, t: f64, strategy: Strategy) -> Result<usize, SimError> {
        let view = &mut self.views[c];
        for (j, &p) in self.pending[c].iter().enumerate() {
            view.set_pending(PeerId(j), p);
        }
        self.selectors[c]
            .select(&self.candidates[c], &self.views[c], at(t))
            .map(|id| id.0)
            .ok_or(SimError::NoServerSelected { strategy, at: t })
    }
}

/// Heartbeat instants of all clients in time order: the phases sorted once, then cycled.
struct Heartbeats {
    period: f64,
    /// (phase, client), sorted by phase then client.
    order: Vec<(f64, usize)>,
    idx: usize,
    cycle: u64,
}

impl Heartbeats {
    fn new(cfg: &LbConfig, setup: &mut SplitMix64) -> Self {
        let mut order: Vec<(f64, usize)> = (0..cfg.clients)
            .map(|c| {
                let phase = match cfg.phases {
                    HeartbeatPhase::Random => unit(setup) * cfg.heartbeat,
                    HeartbeatPhase::Aligned => 0.0,
                };
                (phase, c)
            })
            .collect();
        order.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        Self {
            period: cfg.heartbeat,
            order,
            idx: 0,
            cycle: 0,
        }
    }

    /// Time and client of the next heartbeat; `None` when H = 0 (always fresh).
    fn next(&self) -> Option<(f64, usize)> {
        if self.period <= 0.0 {
            return None;
        }
        let (phase, c) = self.order[self.idx];
        Some((phase + self.cycle as f64 * self.period, c))
    }

    fn advance(&mut self) {
        self.idx += 1;
        if self.idx == self.order.len() {
            self.idx = 0;
            self.cycle += 1;
        }
    }
}

/// Run one simulation.
pub fn run(cfg: &LbConfig) -> Result<RunResult, SimError> {
    cfg.validate()?;
    let mut master = SplitMix64::new(cfg.seed);
    let mut arrivals = SplitMix64::new(master.next_u64());
    let mut setup = SplitMix64::new(master.next_u64());
    let k = cfg.server_count();
    let clients = Clients::new(cfg, k, &mut setup, &mut master);
    let heartbeats = Heartbeats::new(cfg, &mut setup);
    match cfg.variant {
        Variant::Seed002 => run_seed002(cfg, k, clients, heartbeats, &mut arrivals),
        Variant::Queue => run_queue(cfg, clients, heartbeats, &mut arrivals),
    }
}

fn run_seed002(
    cfg: &LbConfig,
    k: usize,
    mut clients: Clients,
    mut hb: Heartbeats,
    arrivals: &mut SplitMix64,
) -> Result<RunResult, SimError> {
    let mut received = vec![0u64; k];
    let mut values = vec![seed002_load_value(0, cfg.signals); k];
    for c in 0..cfg.clients {
        clients.refresh(c, 0.0, &values);
    }
    let mut window = vec![0u64; k];
    let (mut in_window, mut window_cv_sum, mut windows) = (0u64, 0.0f64, 0u64);
    let mut scratch = vec![0.0f64; k];
    let mut t = 0.0f64;
    for _ in 0..cfg.signals {
        t += exp1(arrivals);
        let c = clients.draw(arrivals);
        let _work = exp1(arrivals); // keeps the arrival stream identical to `queue`
        while let Some((th, hc)) = hb.next().filter(|(th, _)| *th <= t) {
            clients.refresh(hc, th, &values);
            hb.advance();
        }
        if cfg.heartbeat <= 0.0 {
            clients.refresh(c, t, &values);
        }
        let j = clients.select(c, t, cfg.strategy)?;
        received[j] += 1;
        values[j] = seed002_load_value(received[j], cfg.signals);
        if cfg.window > 0 {
            window[j] += 1;
            in_window += 1;
            if in_window == cfg.window {
                for (s, w) in scratch.iter_mut().zip(&window) {
                    *s = *w as f64;
                }
                window_cv_sum += cv_and_max_over_mean(&scratch).0;
                windows += 1;
                window.fill(0);
                in_window = 0;
            }
        }
    }
    let loads: Vec<f64> = received.iter().map(|&r| r as f64).collect();
    let (cv, max_over_mean) = cv_and_max_over_mean(&loads);
    Ok(RunResult {
        servers: received
            .iter()
            .map(|&r| ServerStats {
                received: r,
                utilisation: None,
                mean_queue: None,
            })
            .collect(),
        cv,
        max_over_mean,
        window_cv: (windows > 0).then(|| window_cv_sum / windows as f64),
        queue_cv: None,
        p99: None,
        mean_latency: None,
    })
}

/// A request in a server.
struct Job {
    arrived: f64,
    /// Service demand; service time = work / service rate.
    work: f64,
    client: usize,
    measured: bool,
}

/// A FIFO single-server queue.
struct Server {
    rate: f64,
    capacity: f64,
    jobs: VecDeque<Job>,
    /// Completion time of the head job, if any.
    done_at: Option<f64>,
    received: u64,
    busy: f64,
    area: f64,
}

fn run_queue(
    cfg: &LbConfig,
    mut clients: Clients,
    mut hb: Heartbeats,
    arrivals: &mut SplitMix64,
) -> Result<RunResult, SimError> {
    // λ = 1; Σμ = 1 / utilisation, split in proportion to capacity.
    let total_cap: f64 = cfg.capacities.iter().sum();
    let mut servers: Vec<Server> = cfg
        .capacities
        .iter()
        .map(|&c| Server {
            rate: c / (cfg.utilisation * total_cap),
            capacity: c,
            jobs: VecDeque::new(),
            done_at: None,
            received: 0,
            busy: 0.0,
            area: 0.0,
        })
        .collect();
    let value_of = |s: &Server| queue_load_value(s.jobs.len(), s.capacity, cfg.queue_full);
    let mut values: Vec<u16> = servers.iter().map(value_of).collect();
    for c in 0..cfg.clients {
        clients.refresh(c, 0.0, &values);
    }

    let warm = cfg.warmup_count();
    let mut arrived = 0u64;
    let mut next_arrival = exp1(arrivals);
    let (mut measuring, mut start, mut end) = (false, 0.0f64, 0.0f64);
    let mut latencies: Vec<f64> = Vec::with_capacity((cfg.signals - warm) as usize);
    let mut last = 0.0f64;

    loop {
        let ta = if arrived < cfg.signals {
            next_arrival
        } else {
            f64::INFINITY
        };
        let hb_next = if arrived < cfg.signals {
            hb.next()
        } else {
            None
        };
        let th = hb_next.map_or(f64::INFINITY, |h| h.0);
        let (jd, td) = servers
            .iter()
            .enumerate()
            .filter_map(|(j, s)| s.done_at.map(|d| (j, d)))
            .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)))
            .unwrap_or((usize::MAX, f64::INFINITY));
        let t = ta.min(td).min(th);
        if t == f64::INFINITY {
            break;
        }
        if measuring {
            let dt = t - last;
            for s in &mut servers {
                s.area += s.jobs.len() as f64 * dt;
                if !s.jobs.is_empty() {
                    s.busy += dt;
                }
            }
        }
        last = t;

        // Same instant: heartbeat, then departure, then arrival.
        if let Some((_, hc)) = hb_next.filter(|_| th <= td && th <= ta) {
            clients.refresh(hc, t, &values);
            hb.advance();
        } else if td <= ta {
            let s = &mut servers[jd];
            let job = s.jobs.pop_front().expect("a departing server has a job");
            if job.measured {
                latencies.push(t - job.arrived);
            }
            clients.pending[job.client][jd] -= 1;
            s.done_at = s.jobs.front().map(|next| t + next.work / s.rate);
            values[jd] = value_of(s);
        } else {
            let c = clients.draw(arrivals);
            let work = exp1(arrivals);
            if arrived == warm {
                measuring = true;
                start = t;
            }
            if cfg.heartbeat <= 0.0 {
                clients.refresh(c, t, &values);
            }
            let j = clients.select(c, t, cfg.strategy)?;
            let s = &mut servers[j];
            s.jobs.push_back(Job {
                arrived: t,
                work,
                client: c,
                measured: arrived >= warm,
            });
            s.received += 1;
            if s.done_at.is_none() {
                s.done_at = Some(t + work / s.rate);
            }
            values[j] = value_of(s);
            clients.pending[c][j] += 1;
            arrived += 1;
            if arrived == cfg.signals {
                measuring = false;
                end = t;
            } else {
                next_arrival = t + exp1(arrivals);
            }
        }
    }

    let span = end - start;
    let utilisation: Vec<f64> = servers.iter().map(|s| s.busy / span).collect();
    let queue_per_cap: Vec<f64> = servers.iter().map(|s| s.area / span / s.capacity).collect();
    let (cv, max_over_mean) = cv_and_max_over_mean(&utilisation);
    let queue_cv = cv_and_max_over_mean(&queue_per_cap).0;
    let mean_latency = latencies.iter().sum::<f64>() / latencies.len() as f64;
    latencies.sort_by(f64::total_cmp);
    // Nearest-rank percentile.
    let rank = ((0.99 * latencies.len() as f64).ceil() as usize).clamp(1, latencies.len());
    let p99 = latencies[rank - 1];
    Ok(RunResult {
        servers: servers
            .iter()
            .zip(&utilisation)
            .map(|(s, &u)| ServerStats {
                received: s.received,
                utilisation: Some(u),
                mean_queue: Some(s.area / span),
            })
            .collect(),
        cv,
        max_over_mean,
        window_cv: None,
        queue_cv: Some(queue_cv),
        p99: Some(p99),
        mean_latency: Some(mean_latency),
    })
}

/// A grid of runs: every variant × client count × heartbeat period × strategy, all with
/// the same seed and the other parameters of `base`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sweep {
    /// Parameters shared by every run (its variant, strategy, clients and heartbeat are
    /// replaced by the grid values).
    pub base: LbConfig,
    /// Variants to run.
    pub variants: Vec<Variant>,
    /// Client counts.
    pub clients: Vec<usize>,
    /// Heartbeat periods, mean inter-arrival times.
    pub heartbeats: Vec<f64>,
    /// Strategies.
    pub strategies: Vec<Strategy>,
}

impl Sweep {
    /// The standard sweep: both variants, 1 / 10 / 100 clients, H = 0 … 1000 mean
    /// inter-arrival times, every strategy, with [`LbConfig::new`] defaults.
    pub fn standard() -> Self {
        Self {
            base: LbConfig::new(Variant::Seed002),
            variants: Variant::ALL.to_vec(),
            clients: vec![1, 10, 100],
            heartbeats: vec![
                0.0, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0,
            ],
            strategies: Strategy::ALL.to_vec(),
        }
    }

    /// The configuration of every run, in output order (variant, clients, heartbeat,
    /// strategy).
    pub fn configs(&self) -> Vec<LbConfig> {
        let mut out = Vec::new();
        for &variant in &self.variants {
            for &clients in &self.clients {
                for &heartbeat in &self.heartbeats {
                    for &strategy in &self.strategies {
                        out.push(LbConfig {
                            variant,
                            strategy,
                            clients,
                            heartbeat,
                            ..self.base.clone()
                        });
                    }
                }
            }
        }
        out
    }
}

/// One run of a sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepRow {
    /// The run's parameters.
    pub config: LbConfig,
    /// What it measured.
    pub result: RunResult,
}

/// Run every configuration of `sweep`, calling `progress` after each run.
pub fn run_sweep(
    sweep: &Sweep,
    mut progress: impl FnMut(&SweepRow),
) -> Result<Vec<SweepRow>, SimError> {
    sweep
        .configs()
        .into_iter()
        .map(|config| {
            let result = run(&config)?;
            let row = SweepRow { config, result };
            progress(&row);
            Ok(row)
        })
        .collect()
}
