//! What the dra-tools tests share: the workspace's shared helpers (free port,
//! redis-server, temporary directory, config text), the agent's lab ([`agent`]),
//! dra-userspace's Diameter fixtures and peer harness, and tshark's verdict on what went
//! over the wire. Each test crate uses a different subset.
#![allow(dead_code)]

#[path = "../../../dra-userspace/tests/support/mod.rs"]
mod shared;

pub mod agent;
#[path = "../../../dra-userspace/tests/diameter_fixtures/mod.rs"]
pub mod diameter_fixtures;
pub mod freediameter;
#[path = "../../../dra-userspace/tests/peer_support/mod.rs"]
pub mod peer;
pub mod tls_lab;

#[allow(unused_imports)]
pub use shared::*;

use dra_tools::loadgen::scenario::Scenario;
use dra_tools::pcap::{tshark_available, tshark_decode_exchange, tshark_problem};

/// A loadgen scenario towards realm pcrf.lab.example (the other top-level keys at their
/// defaults) with `phases`, each the keys of one `[[phase]]` table on one line, e.g.
/// `name = "open", duration_s = 1, rates = { gx_ccr_i = 100 }`.
pub fn pcrf_scenario(phases: &[&str]) -> Scenario {
    let phases: Vec<String> = phases.iter().map(|p| format!("{{ {p} }}")).collect();
    let toml = format!(
        "destination_realm = \"pcrf.lab.example\"\nphase = [{}]\n",
        phases.join(", ")
    );
    Scenario::from_toml(&toml).expect("scenario")
}

/// What the in-process agent logged: a `tracing_subscriber` writer that keeps
/// everything in memory.
#[derive(Clone, Default)]
pub struct LogBuf(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl LogBuf {
    /// The log so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("log")).into_owned()
    }

    /// How many lines of the log contain `needle`.
    pub fn count(&self, needle: &str) -> usize {
        self.text().lines().filter(|l| l.contains(needle)).count()
    }
}

impl std::io::Write for LogBuf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log").extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The poll interval of every wait of these tests on a signal.
const POLL: std::time::Duration = std::time::Duration::from_millis(20);

/// The rounds of a wait on a signal (a count, a status line, a metric, another
/// program's output): the first at once, then one every [`POLL`] until `patience` has
/// passed. Every wait of these tests goes through here ([`poll_until`], or a loop
/// `while poll.next().await { … }` where the wait must be `Send`).
pub struct Poll {
    deadline: std::time::Instant,
    first: bool,
}

impl Poll {
    pub fn new(patience: std::time::Duration) -> Poll {
        Poll {
            deadline: std::time::Instant::now() + patience,
            first: true,
        }
    }

    /// Waits for the next round; false once the patience is over.
    pub async fn next(&mut self) -> bool {
        if std::mem::take(&mut self.first) {
            return true;
        }
        if std::time::Instant::now() >= self.deadline {
            return false;
        }
        // The poll interval of a wait on a signal (not a wait for anything itself).
        tokio::time::sleep(POLL).await;
        true
    }
}

/// Polls `cond` until it holds or `patience` passes: whether it held.
pub async fn poll_until(
    patience: std::time::Duration,
    mut cond: impl AsyncFnMut() -> bool,
) -> bool {
    let mut poll = Poll::new(patience);
    while poll.next().await {
        if cond().await {
            return true;
        }
    }
    false
}

/// [`poll_until`] on a thread that is not running a Tokio runtime (it runs one of its
/// own for the wait).
pub fn poll_until_blocking(patience: std::time::Duration, mut cond: impl FnMut() -> bool) -> bool {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime")
        .block_on(poll_until(patience, async || cond()))
}

/// Waits until `count` reaches `n`; after `patience` fails with `what` and the count
/// (e.g. "answers": "3 of 5 answers").
pub async fn wait_count(
    n: usize,
    what: &str,
    patience: std::time::Duration,
    mut count: impl FnMut() -> usize,
) {
    let mut got = 0;
    let reached = poll_until(patience, async || {
        got = count();
        got >= n
    })
    .await;
    assert!(reached, "{got} of {n} {what}");
}

/// Fails the test unless it runs as root: it creates `what` (e.g. "a network namespace").
pub fn require_root(what: &str) {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "this test creates {what}: run it as root (`sudo cargo xtask test`)"
    );
}

/// Runs the future `make` returns to its end on a two-worker Tokio runtime, in a thread
/// of its own that entered the namespace `ns` (the caller's thread stays where it is);
/// a panic there is the caller's.
pub fn run_in_netns<M, F>(ns: &dra_tools::netns::Netns, make: M) -> F::Output
where
    M: FnOnce() -> F + Send + 'static,
    F: std::future::Future,
    F::Output: Send + 'static,
{
    let nsfile = ns.file().expect("namespace file");
    std::thread::spawn(move || {
        dra_tools::netns::enter(&nsfile).expect("setns");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(make())
    })
    .join()
    .unwrap_or_else(|p| std::panic::resume_unwind(p))
}

/// Fails the test when tshark cannot be run: `cargo xtask setup` installs it, and a
/// test that passes without looking at the wire would claim what it did not check.
pub fn require_tshark() {
    assert!(
        tshark_available(),
        "tshark is not on PATH: `cargo xtask setup` installs it (Debian package tshark)"
    );
}

/// tshark's verbose decode of `exchange` ((from the client?, encoded message), in order)
/// written as one TCP connection into a pcap named after `tag`.
pub fn tshark_decode(tag: &str, exchange: &[(bool, Vec<u8>)]) -> String {
    tshark_decode_exchange(tag, exchange).expect("tshark")
}

/// Fails with the first problem tshark reports in `decoded` (malformed packet, expert
/// error or warning).
pub fn assert_clean(decoded: &str) {
    if let Some(problem) = tshark_problem(decoded) {
        panic!("{problem}");
    }
}

/// Fails unless each of `needles` stands in `decoded`, tshark's verbose decode of
/// `what`.
pub fn assert_decoded(decoded: &str, what: &str, needles: &[&str]) {
    for needle in needles {
        assert!(
            decoded.contains(needle),
            "tshark's decode of {what} lacks {needle:?}:\n{decoded}"
        );
    }
}

/// The Diameter PDUs of a verbose decode, in order.
pub fn diameter_pdus(decoded: &str) -> Vec<&str> {
    decoded.split("\nDiameter Protocol\n").skip(1).collect()
}

/// The rest of the first line of `pdu` that starts with `prefix` (indentation included,
/// e.g. `"    Flags: "`).
pub fn pdu_field<'a>(pdu: &'a str, prefix: &str) -> Option<&'a str> {
    pdu.lines().find_map(|l| l.strip_prefix(prefix))
}
