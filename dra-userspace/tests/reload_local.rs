//! `dra reload` and SIGHUP on a real `dra run` without privileges (no fast path: the
//! userspace limiter; listeners and metrics on 127.0.0.1), docs/operations.md "Reload":
//! listeners added and removed, the metrics endpoint moved, a server re-dialled at its
//! new `connect` address (the test's TCP listeners), a change that needs a
//! restart refused with its reason and nothing applied, `dra status` and
//! `dra_config_reloads_total{outcome}`. The privileged test under traffic is
//! tests/tests/netns_reload.rs.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpListener, TcpStream},
    path::Path,
    process::{Child, Command},
    time::{Duration, Instant},
};

mod support;
use support::{TempDir, free_port, spawn_dra_run};

struct Ports {
    l1: u16,
    l2: u16,
    m1: u16,
    m2: u16,
}

fn config(
    sock: &Path,
    p: &Ports,
    origin: &str,
    listeners: &[u16],
    metrics: u16,
    connect: u16,
) -> String {
    let mut s = format!(
        "[global]\norigin_host = \"{origin}\"\norigin_realm = \"lab.example\"\n\
         diameter_ports = [{}, {}]\n\n[control]\nsocket = \"{}\"\n\n\
         [metrics]\naddress = \"127.0.0.1:{metrics}\"\n",
        p.l1,
        p.l2,
        sock.display()
    );
    for l in listeners {
        s.push_str(&format!("\n[[listener]]\naddress = \"127.0.0.1:{l}\"\n"));
    }
    s.push_str(&format!(
        "\n[[peer]]\nname = \"pcrf1\"\norigin_host = \"pcrf1.lab.example\"\n\
         realm = \"lab.example\"\nrole = \"server\"\nconnect = \"127.0.0.1:{connect}\"\n"
    ));
    s
}

/// Waits up to 10 s for the agent to dial `lst` (a TCP connect is enough: the test
/// never answers the CER).
fn dialled(lst: &TcpListener) -> Option<TcpStream> {
    lst.set_nonblocking(true).unwrap();
    let end = Instant::now() + Duration::from_secs(10);
    while Instant::now() < end {
        if let Ok((s, _)) = lst.accept() {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

struct Run(Child);

impl Drop for Run {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

fn wait_for(log: &Path, what: &str, n: usize) -> bool {
    let end = Instant::now() + Duration::from_secs(20);
    while Instant::now() < end {
        if std::fs::read_to_string(log)
            .unwrap_or_default()
            .matches(what)
            .count()
            >= n
        {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

fn listening(port: u16) -> bool {
    TcpStream::connect_timeout(
        &SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_secs(1),
    )
    .is_ok()
}

fn scrape(port: u16) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("metrics endpoint");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

fn dra(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_dra"))
        .args(args)
        .output()
        .expect("dra");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn listeners_metrics_and_refusals_through_sighup_and_dra_reload() {
    let dir = TempDir::new("dra-reload-");
    let sock = dir.0.join("dra.sock");
    let cfg = dir.0.join("dra.toml");
    let log = dir.0.join("stderr");
    let p = Ports {
        l1: free_port(),
        l2: free_port(),
        m1: free_port(),
        m2: free_port(),
    };
    let s1 = TcpListener::bind("127.0.0.1:0").unwrap();
    let s2 = TcpListener::bind("127.0.0.1:0").unwrap();
    let (c1, c2) = (
        s1.local_addr().unwrap().port(),
        s2.local_addr().unwrap().port(),
    );
    let conf = |origin: &str, listeners: &[u16], metrics: u16, connect: u16| {
        config(&sock, &p, origin, listeners, metrics, connect)
    };
    std::fs::write(&cfg, conf("dra.lab.example", &[p.l1], p.m1, c1)).unwrap();
    let child = spawn_dra_run(env!("CARGO_BIN_EXE_dra"), &[], &cfg, &log);
    let run = Run(child);
    let text = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(wait_for(&log, "diameter agent running", 1), "{}", text());
    let socket = sock.display().to_string();
    let status = || {
        let (ok, out, err) = dra(&["status", "--socket", &socket]);
        assert!(ok, "{err}");
        out
    };
    let st0 = status();
    assert!(st0.contains("last reload: none"), "{st0}");
    assert!(listening(p.l1) && !listening(p.l2));
    let _first = dialled(&s1).expect("pcrf1 never dialled");

    // SIGHUP: a second listener, the metrics endpoint moved, pcrf1 at another address.
    std::fs::write(&cfg, conf("dra.lab.example", &[p.l1, p.l2], p.m2, c2)).unwrap();
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(run.0.id() as i32, libc::SIGHUP) };
    assert!(wait_for(&log, "config reload", 1), "{}", text());
    assert!(listening(p.l1) && listening(p.l2), "{}", text());
    assert!(!listening(p.m1), "the old metrics address still answers");
    let m = scrape(p.m2);
    assert!(
        m.contains("dra_config_reloads_total{outcome=\"applied\"} 1"),
        "{m}"
    );
    assert!(
        dialled(&s2).is_some(),
        "pcrf1 not dialled at its new address"
    );
    let st1 = status();
    assert!(
        st1.contains("last reload: applied: peers~ 1, listeners+ 1, metrics address changed"),
        "{st1}"
    );

    // A new origin_host cannot change live: refused, nothing applied (the listener
    // removal in the same file neither).
    std::fs::write(&cfg, conf("dra2.lab.example", &[p.l2], p.m2, c2)).unwrap();
    let (ok, out, err) = dra(&["reload", "--config", &cfg.display().to_string()]);
    assert!(!ok, "{out}{err}");
    assert!(
        err.contains("refused: [global] origin_host: "),
        "no reason given:\n{err}"
    );
    assert!(listening(p.l1), "a refused reload closed a listener");
    let st2 = status();
    assert!(st2.contains("dra dra.lab.example"), "{st2}");
    assert!(st2.contains("last reload: refused"), "{st2}");

    // --dry-run of the listener removal: printed, not applied.
    std::fs::write(&cfg, conf("dra.lab.example", &[p.l2], p.m2, c2)).unwrap();
    let (ok, out, err) = dra(&["reload", "--dry-run", "--socket", &socket]);
    assert!(ok, "{err}");
    assert_eq!(out, format!("- listener 127.0.0.1:{}\n", p.l1));
    assert!(listening(p.l1));
    // Applied.
    let (ok, out, err) = dra(&["reload", "--socket", &socket]);
    assert!(ok, "{err}");
    assert!(out.starts_with("applied: listeners- 1\n"), "{out}");
    assert!(!listening(p.l1) && listening(p.l2));
    let m = scrape(p.m2);
    for (outcome, n) in [("applied", 2), ("refused", 1), ("dry_run", 1)] {
        let line = format!("dra_config_reloads_total{{outcome=\"{outcome}\"}} {n}");
        assert!(m.contains(&line), "no {line:?} in\n{m}");
    }
    // One log line per reload.
    let t = text();
    assert_eq!(t.matches("config reload").count(), 4, "{t}");
}
