//! Dynamic rate limiting through the real agent path: the `dra` binary attaches
//! XDP in a test namespace, reads the DB CPU from a `file` source, and rewrites
//! the bucket rates in the pinned maps, which the test reads back; and the closed
//! loop, where the admitted rate at a sink follows the throttle. Client and sink are
//! the project's simulator (`dra_tools::loadgen::script`); each connection starts with
//! CER/CEA (base protocol, passed by the fast path and not in any CCR count).

use std::{
    net::SocketAddr,
    path::PathBuf,
    time::{Duration, Instant},
};

use dra::dataplane::{Dataplane, Maps, Plan};
use dra_common::wire::{MsgClass, cc_request_type as rt};
use dra_tests::support::{Pins, TempDir, scaled};
use dra_tests::{
    agent::{Agent, metric, scrape},
    netns::{Netns, VethPair},
    sim::{PGW1, ScriptedPeer, ScriptedServer, Sent, Sim, gx_ccrs, unmarked_of_all},
};

/// The seed config (config/dra.toml) with a `file` CPU source, a short hold and a
/// fast sample period; optionally other static CCR-I rates and an extra port.
fn seed_config(
    cpu_file: &std::path::Path,
    hold: &str,
    pgw1_rate: u32,
    pgw1_burst: u32,
    extra_port: bool,
) -> String {
    let seed = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../config/dra.toml"))
        .unwrap();
    let mut s = seed
        .replace(
            "reversal_hold_time = \"30s\"",
            &format!("reversal_hold_time = \"{hold}\""),
        )
        .replace("sample_period = \"1s\"", "sample_period = \"250ms\"")
        .replace(
            "source = { kind = \"redis\", address = \"127.0.0.1:6379\" }",
            &format!(
                "source = {{ kind = \"file\", path = \"{}\" }}",
                cpu_file.display()
            ),
        )
        .replace(
            "socket = \"/run/dra/dra.sock\"",
            &format!("socket = \"{}\"", cpu_file.with_extension("sock").display()),
        )
        // No PCRF or OCS runs here: ready once the listeners are bound (the fast path
        // attached before that).
        .replace("startup_wait = \"10s\"", "startup_wait = \"0s\"");
    if pgw1_rate != 1000 {
        // Only pgw1's two static DRL rates are 1000 with no burst given.
        s = s.replace(
            "request_type = \"initial\"\nrate = 1000\n",
            &format!("request_type = \"initial\"\nrate = {pgw1_rate}\nburst = {pgw1_burst}\n"),
        );
    }
    if extra_port {
        s = s.replace("diameter_ports = [3868]", "diameter_ports = [3868, 3869]");
    }
    assert!(s.contains("kind = \"file\""), "seed config changed shape");
    s
}

/// A client namespace, a DRA namespace running `dra run` (XDP on its veth) with the
/// seed config and a `file` CPU source, and the pinned maps once attached.
struct DrlLab {
    client: Netns,
    dra_ns: Netns,
    veth: VethPair,
    tmp: TempDir,
    cpu: PathBuf,
    plan: Plan,
    pins: Pins,
    args: Vec<String>,
}

impl DrlLab {
    /// `pgw1_burst` applies when `pgw1_rate` is not the seed's 1000.
    fn new(prefix: &str, pgw1_rate: u32, pgw1_burst: u32, extra_port: bool) -> DrlLab {
        let client = Netns::new(&format!("{prefix}c")).unwrap();
        let dra_ns = Netns::new(&format!("{prefix}d")).unwrap();
        let veth = VethPair::new(&client, "198.18.1.2/24", &dra_ns, "198.18.1.1/24").unwrap();
        let tmp = TempDir::new("dra-drl-");
        let cpu = tmp.0.join("db_cpu");
        set_cpu(&cpu, 30.0);
        let cfg_text = seed_config(&cpu, "3s", pgw1_rate, pgw1_burst, extra_port);
        let cfg_path = tmp.0.join("dra.toml");
        std::fs::write(&cfg_path, &cfg_text).unwrap();
        let plan = Plan::new(&dra::config::parse(&cfg_text, "dra.toml").unwrap()).unwrap();
        let pins = Pins::new("dra-drl-");
        let args = vec![
            "--config".to_string(),
            cfg_path.display().to_string(),
            "--iface".to_string(),
            veth.b_if.clone(),
            "--pin-dir".to_string(),
            pins.0.display().to_string(),
        ];
        DrlLab {
            client,
            dra_ns,
            veth,
            tmp,
            cpu,
            plan,
            pins,
            args,
        }
    }

    fn slot(&self, peer: &str, req_type: u8) -> u32 {
        self.plan.slot_of(peer, MsgClass::gx_ccr(req_type)).unwrap()
    }

    /// Starts `dra run`; waits until it is ready (XDP attached) and wrote `slot` at
    /// `rate`.
    fn start_agent(&self, log: &str, slot: u32, rate: f64) -> (Agent, Maps) {
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        let mut agent = Agent::start(&self.dra_ns, &args, &self.tmp.0.join(log));
        agent.wait_ready(Duration::from_secs(20));
        let maps = Maps::open_pinned(&self.pins.0).unwrap_or_else(|e| {
            panic!(
                "pinned maps: {}; log:\n{}",
                dra::error_chain(&e),
                agent.log_text()
            )
        });
        let written = agent.wait_until(Duration::from_secs(20), || rate_of(&maps, slot) == rate);
        assert!(
            written,
            "slot {slot} at {} /s, not {rate}; log:\n{}",
            rate_of(&maps, slot),
            agent.log_text()
        );
        (agent, maps)
    }

    /// Waits until the agent's DRL controller has read `cpu` from the source
    /// (`dra_db_cpu_percent`): the throttle it decides from that sample follows.
    fn wait_sampled(&self, agent: &mut Agent, cpu: f64) {
        let mut page = String::new();
        let read = agent.wait_until(Duration::from_secs(5), || {
            page = scrape(&self.dra_ns, METRICS);
            metric(&page, "dra_db_cpu_percent") == Some(cpu)
        });
        assert!(
            read,
            "the controller never read {cpu} %: {:?}",
            metric(&page, "dra_db_cpu_percent")
        );
    }
}

/// The agent's metrics endpoint in its namespace (config/dra.toml's `[metrics]`).
const METRICS: &str = "127.0.0.1:9100";

fn rate_of(maps: &Maps, slot: u32) -> f64 {
    let c = maps.bucket_config(slot).unwrap();
    if c.interval_ns == 0 {
        f64::INFINITY
    } else {
        (1e9 / c.interval_ns as f64).round()
    }
}

/// The sink on the second Diameter port of the DRA namespace (the agent owns 3868).
const SINK_ADDR: &str = "198.18.1.1:3869";
/// Its Origin-Host/-Realm.
const SINK: (&str, &str) = ("sink.lab.example", "lab.example");

impl DrlLab {
    /// The sink in the DRA namespace: accepts pgw1, never answers a CCR.
    fn sink(&self, sim: &Sim) -> ScriptedServer {
        sim.sink(&self.dra_ns, SINK_ADDR.parse().unwrap(), SINK, PGW1.0)
    }

    /// pgw1 (198.18.1.2) connected to the sink, CER/CEA done.
    fn pgw1(&self, sim: &Sim) -> ScriptedPeer {
        let addr: SocketAddr = SINK_ADDR.parse().unwrap();
        sim.connect(
            &self.client,
            "198.18.1.2".parse().unwrap(),
            addr,
            PGW1,
            SINK.0,
            None,
            None,
        )
    }

    /// pgw1 offering Gx CCR-I at 1000/s for `seconds`, in the background.
    fn flood_ccr_i(&self, sim: &Sim, seconds: u64) -> tokio::task::JoinHandle<Sent> {
        let ccr_i = gx_ccrs(Duration::from_micros(1000), rt::INITIAL);
        sim.spawn_paced(self.pgw1(sim), vec![ccr_i], Duration::from_secs(seconds), 1)
    }
}

fn set_cpu(file: &std::path::Path, v: f64) {
    std::fs::write(file, format!("{v}\n")).unwrap();
}

/// The docs/architecture.md §5 table through `dra run`, hold 3 s: pgw1's effective CCR-I
/// rate read back from the pinned bucket map at each row; pgw2 (no DRL) stays at 200/s.
#[test]
fn seed_table_through_the_agent_and_the_pinned_maps() {
    let lab = DrlLab::new("r", 1000, 20, false);
    let (pgw1_i, pgw1_t, pgw2_i) = (
        lab.slot("pgw1", rt::INITIAL),
        lab.slot("pgw1", rt::TERMINATION),
        lab.slot("pgw2", rt::INITIAL),
    );
    let (mut agent, maps) = lab.start_agent("agent.log", pgw1_i, 1000.0);
    let cpu = lab.cpu.clone();
    let t0 = Instant::now();
    let wait_rate = |agent: &mut Agent, want: f64, within: Duration, what: &str| {
        let start = Instant::now();
        // The controller writes the two classes' buckets one after the other (two map
        // updates): wait for both, so a read between the two writes is not a failure.
        let ok = agent.wait_until(within, || {
            rate_of(&maps, pgw1_i) == want && rate_of(&maps, pgw1_t) == want
        });
        assert!(
            ok,
            "{what}: pgw1 CCR-I rate {}, CCR-T rate {} after {within:?}, want {want} for both \
             (CCR-T follows CCR-I)",
            rate_of(&maps, pgw1_i),
            rate_of(&maps, pgw1_t)
        );
        assert_eq!(
            rate_of(&maps, pgw2_i),
            200.0,
            "{what}: pgw2 (no DRL) keeps its static rate"
        );
        start.elapsed()
    };
    // Row by row (docs/architecture.md §5), hold 3 s instead of 30 s.
    let a = &mut agent;
    wait_rate(a, 1000.0, Duration::from_secs(2), "CPU below thresholds");
    set_cpu(&cpu, 62.0);
    wait_rate(a, 600.0, Duration::from_secs(2), "CPU 62 %");
    set_cpu(&cpu, 63.5);
    lab.wait_sampled(a, 63.5);
    // The scenario: the CPU stays at 63.5 % for 600 ms more (two sample periods and
    // more), and the rate with it.
    std::thread::sleep(Duration::from_millis(600));
    wait_rate(a, 600.0, Duration::from_millis(100), "CPU stays 60-65 %");
    set_cpu(&cpu, 49.0);
    lab.wait_sampled(a, 49.0);
    // The scenario: 500 ms into the reversal's hold, the rate has not moved.
    std::thread::sleep(Duration::from_millis(500));
    wait_rate(
        a,
        600.0,
        Duration::from_millis(100),
        "CPU 49 % (reversal starts)",
    );
    let held = wait_rate(a, 800.0, Duration::from_secs(5), "3 s at 49 %");
    assert!(
        held >= Duration::from_millis(1800),
        "the reversal step came after {held:?}, before the hold"
    );
    set_cpu(&cpu, 57.0);
    wait_rate(a, 700.0, Duration::from_secs(2), "CPU 57 %");
    set_cpu(&cpu, 67.0);
    wait_rate(a, 500.0, Duration::from_secs(2), "CPU 67 %");
    set_cpu(&cpu, 55.0);
    wait_rate(a, 700.0, Duration::from_secs(2), "CPU 55 %");
    set_cpu(&cpu, 49.0);
    wait_rate(a, 900.0, Duration::from_secs(5), "3 s at 49 %");
    wait_rate(a, 1000.0, Duration::from_secs(5), "3 s more at 49 %");
    println!("seed table through the agent in {:?}", t0.elapsed());
    let st = agent.stop();
    assert!(
        st.is_some_and(|s| s.success()),
        "dra run exits cleanly on SIGINT; log:\n{}",
        agent.log_text()
    );
    // Default: the fast path stays attached and pinned after the agent exits.
    assert!(Dataplane::is_pinned(&lab.veth.b_if, &lab.pins.0));
}

/// Closed loop: a client floods CCR-I at 5× the static limit (200/s); the CPU
/// source says 62 % and the admitted rate at the sink drops to 120/s (±3 %); then
/// it says 40 % and after each hold the admitted rate steps up: 160/s, 200/s.
#[test]
fn admitted_rate_follows_the_db_cpu() {
    let lab = DrlLab::new("l", 200, 20, true);
    let slot = lab.slot("pgw1", rt::INITIAL);
    let (mut agent, maps) = lab.start_agent("agent.log", slot, 200.0);
    let cpu = &lab.cpu;
    let sim = Sim::new();
    let sink = lab.sink(&sim);
    let flood = lab.flood_ccr_i(&sim, 16);
    // The scenario: the flood runs 1.5 s at the static limit before the CPU rises.
    std::thread::sleep(Duration::from_millis(1500));
    let mut changes = Vec::new();
    let mut wait_for = |want: f64| {
        assert!(
            agent.wait_until(Duration::from_secs(6), || rate_of(&maps, slot) == want),
            "rate never became {want}"
        );
        changes.push((Instant::now(), want));
    };
    set_cpu(cpu, 62.0);
    wait_for(120.0);
    // The scenario: the CPU stays at 62 % for another 0.5 s before it falls.
    std::thread::sleep(Duration::from_millis(500));
    set_cpu(cpu, 40.0);
    wait_for(160.0);
    wait_for(200.0);
    let sent = sim.join(flood);
    assert_eq!(
        sink.arrivals
            .wait_for_blocking(sent.log.len(), scaled(Duration::from_secs(10))),
        sent.log.len(),
        "every CCR-I arrives"
    );
    let arr = sink.arrivals.snapshot();
    for (at, rate) in &changes {
        // Skip 0.5 s after the change (the bucket's burst drains in ~25 ms), count 2 s.
        let (from, to) = (
            *at + Duration::from_millis(500),
            *at + Duration::from_millis(2500),
        );
        let admitted = arr
            .iter()
            .filter(|a| !a.marked && a.at >= from && a.at < to)
            .count();
        let want = rate * 2.0;
        println!(
            "throttled to {rate}/s: admitted {admitted} in 2 s (want {want:.0}, {:+.1} %)",
            100.0 * (admitted as f64 - want) / want
        );
        assert!(
            ((admitted as f64 - want) / want).abs() <= 0.03,
            "admitted {admitted} at {rate}/s"
        );
    }
}

/// pgw1's CCR-I limit in the restart test, and its burst: one second's worth, so that
/// a bucket that a restart reset (full again) admits 200 requests too many, far beyond
/// the count's jitter.
const RESTART_RATE: u32 = 200;
const RESTART_BURST: u32 = 200;

/// Agent restart: kill `dra run` (no cleanup) mid-flood and start it again. The
/// program stays attached, the restarted agent reuses the pinned maps, and the
/// buckets keep their state: the admitted count across the restart is the GCRA's for
/// one bucket over the whole flood (burst + rate × time), not that plus a second burst.
/// The flood offers 5× the limit, so the bucket is empty when the agent dies and any
/// reset shows as `RESTART_BURST` extra admissions.
#[test]
fn restart_keeps_the_program_attached_and_the_buckets() {
    let lab = DrlLab::new("s", RESTART_RATE, RESTART_BURST, true);
    let slot = lab.slot("pgw1", rt::INITIAL);
    let (mut first, maps) = lab.start_agent("agent1.log", slot, f64::from(RESTART_RATE));
    let (dra_ns, veth, pins, tmp) = (&lab.dra_ns, &lab.veth, &lab.pins, &lab.tmp);
    let args: Vec<&str> = lab.args.iter().map(String::as_str).collect();
    let sim = Sim::new();
    let sink = lab.sink(&sim);
    let flood = lab.flood_ccr_i(&sim, 8);
    // The scenario: the agent dies 3 s into the flood.
    std::thread::sleep(Duration::from_secs(3));
    // The bucket is empty (its theoretical arrival time ahead of now by about the
    // burst's worth) when the agent dies.
    let before = maps.bucket_state(slot).unwrap();
    first.kill();
    assert!(
        Dataplane::is_pinned(&veth.b_if, &pins.0),
        "the program stays attached after a crash"
    );
    // The scenario: the agent stays down 0.5 s before it is started again.
    std::thread::sleep(Duration::from_millis(500));
    let mut second = Agent::start(dra_ns, &args, &tmp.0.join("agent2.log"));
    second.wait_ready(Duration::from_secs(20));
    assert!(
        second_log_reused(&tmp.0.join("agent2.log")),
        "restarted agent did not reuse the pinned fast path; log:\n{}",
        second.log_text()
    );
    let after = maps.bucket_state(slot).unwrap();
    println!("bucket state before the kill {before:?}, after the restart {after:?}");
    let sent = sim.join(flood);
    let unmarked = unmarked_of_all(&sink, &sent);
    let rate = f64::from(RESTART_RATE);
    let burst = f64::from(RESTART_BURST);
    let expected = rate * (sent.last - sent.first).as_secs_f64() + burst;
    let reset = expected + burst;
    println!(
        "restart: {} CCR-I, unmarked {unmarked}, expected {expected:.0} (kept bucket) vs \
         {reset:.0} (reset bucket)",
        sent.log.len()
    );
    // Jitter of the count (send times vs the fast path's clock, pacing catch-up) is a
    // few requests; a quarter of the burst separates kept from reset with a margin on
    // both sides.
    let tolerance = burst / 4.0;
    assert!(
        (unmarked as f64 - expected).abs() <= tolerance,
        "unmarked {unmarked}, expected {expected:.0} ± {tolerance:.0} for a kept bucket \
         (a reset bucket gives about {reset:.0})"
    );
}

fn second_log_reused(log: &std::path::Path) -> bool {
    std::fs::read_to_string(log).is_ok_and(|s| s.contains("reused") && s.contains("true"))
}
