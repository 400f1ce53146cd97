//! The metrics endpoint over real TCP on loopback: what a Prometheus scrape sees.
//!
//! Each test starts its own server on 127.0.0.1:0, sets known state through the public
//! setters, scrapes with a minimal HTTP/1.1 client and checks the OpenMetrics text with
//! a small parser (families, `# TYPE` lines, label sets and values, exactly).

use std::{
    collections::{BTreeMap, HashMap},
    io::{Read, Write},
    net::{Shutdown, SocketAddr, TcpStream},
    time::Duration,
};

use dra::{
    control::{OnMissing, Reason, ThrottleEvent},
    metrics::{
        CONTENT_TYPE, Direction, FastPathState, MAX_REQUEST_HEAD, Metrics, MetricsError, PeerState,
        ServerHandle, class_label, serve,
    },
};
use dra_common::{maps::ClassCounters, stats::Counter, wire::MsgClass};

// ---- minimal HTTP client ----------------------------------------------------------

/// A parsed HTTP response.
struct HttpResponse {
    status: u16,
    headers: HashMap<String, String>,
    body: String,
}

/// Sends raw bytes, reads until the server closes, parses the response.
fn exchange(addr: SocketAddr, request: &[u8]) -> HttpResponse {
    let mut s = TcpStream::connect(addr).expect("connect");
    // Guards against a hung server only; no test depends on time.
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(request).expect("send request");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read response");
    parse_response(&raw)
}

fn request(addr: SocketAddr, method: &str, path: &str) -> HttpResponse {
    exchange(
        addr,
        format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: */*\r\n\r\n").as_bytes(),
    )
}

fn parse_response(raw: &[u8]) -> HttpResponse {
    let text = std::str::from_utf8(raw).expect("response is UTF-8");
    let (head, body) = text.split_once("\r\n\r\n").expect("complete response head");
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap();
    let mut parts = status_line.splitn(3, ' ');
    assert_eq!(
        parts.next(),
        Some("HTTP/1.1"),
        "status line {status_line:?}"
    );
    let status = parts.next().unwrap().parse().expect("status code");
    let headers: HashMap<String, String> = lines
        .map(|l| {
            let (k, v) = l.split_once(':').expect("header field");
            (k.to_ascii_lowercase(), v.trim().to_string())
        })
        .collect();
    HttpResponse {
        status,
        headers,
        body: body.to_string(),
    }
}

/// `GET /metrics`, checked for status, content type and length; returns the body.
fn scrape(addr: SocketAddr) -> Exposition {
    let r = request(addr, "GET", "/metrics");
    assert_eq!(r.status, 200);
    assert_eq!(r.headers["content-type"], CONTENT_TYPE);
    assert_eq!(
        r.headers["content-type"],
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert_eq!(r.headers["content-length"], r.body.len().to_string());
    assert_eq!(r.headers["connection"], "close");
    Exposition::parse(&r.body)
}

// ---- OpenMetrics text parser ------------------------------------------------------

#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

#[derive(Debug)]
struct Exposition {
    /// family → type from `# TYPE`.
    types: HashMap<String, String>,
    /// family → unit from `# UNIT`.
    units: HashMap<String, String>,
    samples: Vec<Sample>,
}

/// Parses `{k="v",…}` starting after the `{`; returns labels and the rest after `}`.
fn parse_labels(s: &str) -> (BTreeMap<String, String>, &str) {
    let mut labels = BTreeMap::new();
    let mut rest = s;
    loop {
        if let Some(r) = rest.strip_prefix('}') {
            return (labels, r);
        }
        let (key, r) = rest.split_once("=\"").expect("label key");
        let mut value = String::new();
        let mut chars = r.char_indices();
        let end = loop {
            let (i, c) = chars.next().expect("closed label value");
            match c {
                '\\' => match chars.next().expect("escape").1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                '"' => break i + 1,
                c => value.push(c),
            }
        };
        assert!(
            labels.insert(key.to_string(), value).is_none(),
            "duplicate label {key}"
        );
        rest = &r[end..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
}

fn parse_value(v: &str) -> f64 {
    match v {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().unwrap_or_else(|_| panic!("sample value {v:?}")),
    }
}

/// One sample line: `name{labels} value` (labels optional).
fn parse_sample(line: &str) -> Sample {
    let (name, labels, rest) = match line.find(['{', ' ']) {
        Some(i) if line.as_bytes()[i] == b'{' => {
            let (labels, rest) = parse_labels(&line[i + 1..]);
            (&line[..i], labels, rest)
        }
        Some(i) => (&line[..i], BTreeMap::new(), &line[i..]),
        None => panic!("sample without value: {line:?}"),
    };
    let value_text = rest.trim_start().split(' ').next().expect("value");
    Sample {
        name: name.to_string(),
        labels,
        value: parse_value(value_text),
    }
}

impl Exposition {
    fn parse(body: &str) -> Exposition {
        let mut types = HashMap::new();
        let mut units = HashMap::new();
        let mut samples = Vec::new();
        let lines: Vec<&str> = body.lines().collect();
        assert_eq!(
            lines.last(),
            Some(&"# EOF"),
            "exposition must end with # EOF"
        );
        assert!(body.ends_with("# EOF\n"));
        for line in &lines[..lines.len() - 1] {
            if let Some(meta) = line.strip_prefix("# ") {
                let mut parts = meta.splitn(3, ' ');
                let kind = parts.next().unwrap();
                let family = parts.next().expect("family name").to_string();
                let arg = parts.next().unwrap_or("").to_string();
                match kind {
                    "TYPE" => assert!(types.insert(family, arg).is_none(), "TYPE twice"),
                    "UNIT" => assert!(units.insert(family, arg).is_none(), "UNIT twice"),
                    "HELP" => {}
                    other => panic!("unknown metadata line # {other}"),
                }
                continue;
            }
            samples.push(parse_sample(line));
        }
        let exp = Exposition {
            types,
            units,
            samples,
        };
        for s in &exp.samples {
            let family = exp
                .family_of(&s.name)
                .unwrap_or_else(|| panic!("sample {} has no # TYPE", s.name));
            assert!(!s.value.is_nan(), "{} is NaN", s.name);
            let _ = family;
        }
        exp
    }

    /// The declared family a sample name belongs to (OpenMetrics suffixes).
    fn family_of(&self, sample: &str) -> Option<&str> {
        if let Some((f, _)) = self.types.get_key_value(sample) {
            return Some(f);
        }
        ["_total", "_bucket", "_count", "_sum", "_created"]
            .iter()
            .filter_map(|suf| sample.strip_suffix(suf))
            .find_map(|f| self.types.get_key_value(f).map(|(k, _)| k.as_str()))
    }

    fn type_of(&self, family: &str) -> &str {
        self.types
            .get(family)
            .unwrap_or_else(|| panic!("no # TYPE {family}"))
    }

    /// Samples named `name`.
    fn series(&self, name: &str) -> Vec<&Sample> {
        self.samples.iter().filter(|s| s.name == name).collect()
    }

    /// The value of the one sample named `name` with exactly `labels`.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let want: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let found: Vec<_> = self
            .samples
            .iter()
            .filter(|s| s.name == name && s.labels == want)
            .collect();
        assert_eq!(found.len(), 1, "{name}{want:?}: {found:?}");
        found[0].value
    }

    /// Each of `expected`, sample lines as exposed (`name{labels} value`), matches
    /// exactly one sample here, with that value.
    fn assert_samples(&self, expected: &[&str]) {
        for line in expected {
            let want = parse_sample(line);
            let found: Vec<_> = self
                .samples
                .iter()
                .filter(|s| s.name == want.name && s.labels == want.labels)
                .collect();
            assert_eq!(found.len(), 1, "{line}: {found:?}");
            assert_eq!(found[0].value, want.value, "{line}");
        }
    }

    fn has(&self, name: &str, labels: &[(&str, &str)]) -> bool {
        self.samples.iter().any(|s| {
            s.name == name
                && s.labels.len() == labels.len()
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(v))
        })
    }
}

fn start(metrics: &Metrics) -> ServerHandle {
    serve("127.0.0.1:0".parse().unwrap(), metrics.clone()).expect("serve on an ephemeral port")
}

fn counters(seen: u64, admitted: u64, marked: u64, dropped: u64, bytes: u64) -> ClassCounters {
    ClassCounters {
        seen,
        admitted,
        marked,
        dropped,
        bytes,
        ..ClassCounters::default()
    }
}

// ---- tests ------------------------------------------------------------------------

/// A peer's series handles count into the very series the setters do: the totals are
/// the sum of both, one series per label set, and nothing exists before its first count.
#[test]
fn peer_series_handles_count_into_the_setters_series() {
    let m = Metrics::new();
    let server = start(&m);
    let mut pgw1 = m.peer_series("pgw1");
    let mut pcrf1 = m.peer_series("pcrf1");
    let e = scrape(server.local_addr());
    assert!(e.series("dra_requests_total").is_empty());
    for _ in 0..4 {
        pgw1.inc_request(&m, Direction::In);
        pcrf1.inc_request(&m, Direction::Out);
        pgw1.inc_answer(&m, 2001);
    }
    m.inc_request("pgw1", Direction::In);
    m.inc_answer("pgw1", 2001);
    pgw1.inc_answer(&m, 3004);
    pgw1.inc_answer(&m, 3004);
    pcrf1.observe_answer_latency(&m, Duration::from_millis(3));
    m.observe_answer_latency("pcrf1", Duration::from_millis(30));
    let e = scrape(server.local_addr());
    e.assert_samples(&[
        r#"dra_requests_total{peer="pgw1",direction="in"} 5"#,
        r#"dra_requests_total{peer="pcrf1",direction="out"} 4"#,
        r#"dra_answers_total{peer="pgw1",result_code="2001"} 5"#,
        r#"dra_answers_total{peer="pgw1",result_code="3004"} 2"#,
        r#"dra_answer_latency_seconds_count{peer="pcrf1"} 2"#,
    ]);
    assert_eq!(e.series("dra_requests_total").len(), 2);
    assert_eq!(e.series("dra_answers_total").len(), 2);
}

#[test]
fn scrape_shows_the_state_that_was_set_with_types_labels_and_values() {
    let m = Metrics::new();
    let server = start(&m);
    let gx_ccr_i = class_label(MsgClass::gx_ccr(1));
    assert_eq!(gx_ccr_i, "gx_ccr_i");

    // Dynamic throttling: the seed's CPU 62 % row gives 40 % → 600/s.
    assert!(m.set_db_cpu_percent(62.5));
    m.set_db_cpu_source_up(true);
    m.inc_db_cpu_missing();
    m.set_throttle_percent("pgw1", 40);
    m.set_effective_rate("pgw1", &gx_ccr_i, 600.0);
    m.record_throttle_event(
        Some("pgw1"),
        &ThrottleEvent {
            at: Duration::from_secs(10),
            from: 0,
            to: 40,
            reason: Reason::Threshold {
                cpu: 62.5,
                row_cpu: 60.0,
            },
        },
    );
    m.record_throttle_event(
        None,
        &ThrottleEvent {
            at: Duration::from_secs(40),
            from: 40,
            to: 40,
            reason: Reason::SourceMissing {
                silent_for: Duration::from_secs(30),
                action: OnMissing::Hold,
            },
        },
    );

    // Fast path snapshot.
    m.set_fastpath_class("pgw1", &gx_ccr_i, &counters(1000, 600, 400, 0, 250_000));
    m.set_fastpath_class("pgw1", "all", &counters(1500, 1100, 400, 0, 390_000));
    m.set_fastpath_global(&[
        (Counter::Packets, 5000),
        (Counter::Requests, 1500),
        (Counter::Marked, 400),
    ]);

    // Agent.
    for _ in 0..5 {
        m.inc_request("pgw1", Direction::In);
    }
    for _ in 0..3 {
        m.inc_request("pcrf1", Direction::Out);
        m.inc_answer("pgw1", 2001);
    }
    m.inc_answer("pgw1", 3002);
    m.inc_answer("pgw1", 3002);
    m.set_pending_requests("pcrf1", 7);
    m.set_queue_depth("pcrf_group", 3);
    m.observe_answer_latency("pcrf1", Duration::from_millis(3));
    m.set_peer_state("pgw1", PeerState::Open);
    m.set_peer_state("pcrf1", PeerState::Suspect);

    let e = scrape(server.local_addr());

    // # TYPE lines (OpenMetrics family names: counters without `_total`).
    for (family, ty) in [
        ("dra_db_cpu_percent", "gauge"),
        ("dra_db_cpu_source_up", "gauge"),
        ("dra_db_cpu_missing", "counter"),
        ("dra_throttle_percent", "gauge"),
        ("dra_effective_rate", "gauge"),
        ("dra_throttle_events", "counter"),
        ("dra_fastpath_requests", "counter"),
        ("dra_fastpath_bytes", "counter"),
        ("dra_fastpath_packets", "counter"),
        ("dra_requests", "counter"),
        ("dra_answers", "counter"),
        ("dra_pending_requests", "gauge"),
        ("dra_queue_depth", "gauge"),
        ("dra_answer_latency_seconds", "histogram"),
        ("dra_peer_state", "gauge"),
        ("dra_unanswered_invariant_violations", "counter"),
    ] {
        assert_eq!(e.type_of(family), ty, "{family}");
    }
    assert_eq!(e.units["dra_answer_latency_seconds"], "seconds");

    e.assert_samples(&[
        "dra_db_cpu_percent 62.5",
        "dra_db_cpu_source_up 1",
        "dra_db_cpu_missing_total 1",
        r#"dra_throttle_percent{peer="pgw1"} 40"#,
        r#"dra_effective_rate{peer="pgw1",class="gx_ccr_i"} 600"#,
        r#"dra_throttle_events_total{peer="pgw1",reason="threshold"} 1"#,
        r#"dra_throttle_events_total{reason="source_missing"} 1"#,
    ]);
    assert_eq!(e.series("dra_throttle_percent").len(), 1);
    assert_eq!(e.series("dra_throttle_events_total").len(), 2);

    // Fast path per peer × class.
    for (outcome, v) in [
        ("seen", 1000.0),
        ("admitted", 600.0),
        ("marked", 400.0),
        ("dropped", 0.0),
    ] {
        let labels = [
            ("peer", "pgw1"),
            ("class", "gx_ccr_i"),
            ("outcome", outcome),
        ];
        assert_eq!(
            e.value("dra_fastpath_requests_total", &labels),
            v,
            "{outcome}"
        );
    }
    e.assert_samples(&[
        r#"dra_fastpath_requests_total{peer="pgw1",class="all",outcome="admitted"} 1100"#,
        r#"dra_fastpath_bytes_total{peer="pgw1",class="gx_ccr_i"} 250000"#,
        r#"dra_fastpath_bytes_total{peer="pgw1",class="all"} 390000"#,
    ]);
    // Two classes × six outcomes (seen, admitted, marked, dropped, shed_answered,
    // shed_discarded).
    assert_eq!(e.series("dra_fastpath_requests_total").len(), 12);

    // Fast path global: one series per counter, unset ones at 0.
    assert_eq!(
        e.series("dra_fastpath_packets_total").len(),
        Counter::ALL.len()
    );
    for c in Counter::ALL {
        let want = match c {
            Counter::Packets => 5000.0,
            Counter::Requests => 1500.0,
            Counter::Marked => 400.0,
            _ => 0.0,
        };
        assert_eq!(
            e.value("dra_fastpath_packets_total", &[("reason", c.name())]),
            want,
            "{}",
            c.name()
        );
    }

    // Agent.
    e.assert_samples(&[
        r#"dra_requests_total{peer="pgw1",direction="in"} 5"#,
        r#"dra_requests_total{peer="pcrf1",direction="out"} 3"#,
        r#"dra_answers_total{peer="pgw1",result_code="2001"} 3"#,
        r#"dra_answers_total{peer="pgw1",result_code="3002"} 2"#,
        r#"dra_pending_requests{peer="pcrf1"} 7"#,
        r#"dra_queue_depth{group="pcrf_group"} 3"#,
        "dra_unanswered_invariant_violations_total 0",
    ]);
    assert_eq!(e.series("dra_requests_total").len(), 2);

    // Histogram: 3 ms lands in every bucket from 5 ms up.
    let le = |b: &str| {
        e.value(
            "dra_answer_latency_seconds_bucket",
            &[("peer", "pcrf1"), ("le", b)],
        )
    };
    let buckets = e.series("dra_answer_latency_seconds_bucket");
    assert_eq!(
        buckets.len(),
        17,
        "16 bounds from 100 µs to 10 s, then +Inf"
    );
    let bounds: Vec<f64> = buckets
        .iter()
        .map(|s| parse_value(&s.labels["le"]))
        .collect();
    assert_eq!(bounds.first(), Some(&0.0001));
    assert_eq!(bounds[bounds.len() - 2], 10.0);
    assert_eq!(bounds.last(), Some(&f64::INFINITY));
    for (s, bound) in buckets.iter().zip(&bounds) {
        let want = if *bound >= 0.003 { 1.0 } else { 0.0 };
        assert_eq!(s.value, want, "le={bound}");
    }
    assert_eq!(le("+Inf"), 1.0);
    assert_eq!(
        e.value("dra_answer_latency_seconds_count", &[("peer", "pcrf1")]),
        1.0
    );
    assert!(
        (e.value("dra_answer_latency_seconds_sum", &[("peer", "pcrf1")]) - 0.003).abs() < 1e-12
    );

    // Peer state: one series per state, 1 for the current one.
    for (peer, current) in [("pgw1", "open"), ("pcrf1", "suspect")] {
        for state in ["closed", "wait_cea", "open", "suspect", "down", "reopen"] {
            let want = if state == current { 1.0 } else { 0.0 };
            assert_eq!(
                e.value("dra_peer_state", &[("peer", peer), ("state", state)]),
                want,
                "{peer} {state}"
            );
        }
    }
    assert_eq!(e.series("dra_peer_state").len(), 12);

    // State changes show in the next scrape.
    m.set_peer_state("pcrf1", PeerState::Open);
    m.inc_unanswered_invariant_violation();
    m.set_throttle_percent("pgw1", 20);
    let e = scrape(server.local_addr());
    e.assert_samples(&[
        r#"dra_peer_state{peer="pcrf1",state="open"} 1"#,
        r#"dra_peer_state{peer="pcrf1",state="suspect"} 0"#,
        "dra_unanswered_invariant_violations_total 1",
        r#"dra_throttle_percent{peer="pgw1"} 20"#,
    ]);
}

/// What the shipped alert rules (packaging/monitoring/) read besides the families
/// above: who enforces ingress, the configured peers with role and group, and the
/// counters of known events at 0 before the first one (so that rate() sees it).
#[test]
fn fast_path_state_peer_info_and_event_counters_start_as_the_alerts_need() {
    let m = Metrics::new();
    let server = start(&m);
    let e = scrape(server.local_addr());
    assert!(
        e.series("dra_fastpath_state").is_empty(),
        "unset: not exported"
    );
    assert!(e.series("dra_peer_info").is_empty(), "unset: not exported");
    assert_eq!(
        e.series("dra_tls_refused_total").len(),
        24,
        "2 sides × 12 reasons"
    );
    for side in ["accepted", "dialled"] {
        for reason in ["unknown_ca", "expired", "plain_tcp", "io"] {
            assert_eq!(
                e.value(
                    "dra_tls_refused_total",
                    &[("side", side), ("reason", reason)]
                ),
                0.0
            );
        }
    }
    e.assert_samples(&[
        r#"dra_connections_refused_total{reason="cer_backlog"} 0"#,
        r#"dra_connections_refused_total{reason="cer_backlog_per_source"} 0"#,
        r#"dra_session_store_fallbacks_total{on_error="local"} 0"#,
        r#"dra_session_store_fallbacks_total{on_error="reject"} 0"#,
        r#"dra_session_store_errors_total{op="set",kind="timeout"} 0"#,
    ]);
    assert_eq!(e.series("dra_session_store_errors_total").len(), 9);

    m.set_fastpath_state(FastPathState::Attached);
    m.set_peer_info([("pgw1", "client", None), ("pcrf1", "server", Some("pcrf"))]);
    m.inc_tls_refused("accepted", "expired");
    let e = scrape(server.local_addr());
    assert_eq!(e.type_of("dra_fastpath_state"), "gauge");
    assert_eq!(e.type_of("dra_peer_info"), "gauge");
    e.assert_samples(&[
        r#"dra_fastpath_state{state="attached"} 1"#,
        r#"dra_fastpath_state{state="detached"} 0"#,
        r#"dra_fastpath_state{state="fallback"} 0"#,
        r#"dra_fastpath_state{state="off"} 0"#,
        r#"dra_peer_info{peer="pgw1",role="client"} 1"#,
        r#"dra_peer_info{peer="pcrf1",role="server",group="pcrf"} 1"#,
        r#"dra_tls_refused_total{side="accepted",reason="expired"} 1"#,
    ]);

    // The program gone; a reload that removed pgw1.
    m.set_fastpath_state(FastPathState::Detached);
    m.set_peer_info([("pcrf1", "server", Some("pcrf"))]);
    let e = scrape(server.local_addr());
    e.assert_samples(&[
        r#"dra_fastpath_state{state="attached"} 0"#,
        r#"dra_fastpath_state{state="detached"} 1"#,
    ]);
    assert_eq!(e.series("dra_fastpath_state").len(), 4);
    let peers: Vec<&str> = e
        .series("dra_peer_info")
        .iter()
        .map(|s| s.labels["peer"].as_str())
        .collect();
    assert_eq!(peers, ["pcrf1"]);
}

#[test]
fn fastpath_snapshots_replace_the_exported_values() {
    let m = Metrics::new();
    let server = start(&m);
    m.set_fastpath_class("pgw1", "gx_ccr_i", &counters(100, 90, 10, 0, 20_000));
    m.set_fastpath_global(&[(Counter::Packets, 300), (Counter::Answers, 50)]);
    let first = scrape(server.local_addr());
    let seen = [("peer", "pgw1"), ("class", "gx_ccr_i"), ("outcome", "seen")];
    assert_eq!(first.value("dra_fastpath_requests_total", &seen), 100.0);

    // The next snapshot of the kernel's (cumulative) counters.
    m.set_fastpath_class("pgw1", "gx_ccr_i", &counters(250, 200, 40, 10, 51_000));
    m.set_fastpath_global(&[(Counter::Packets, 700)]);
    let second = scrape(server.local_addr());
    assert_eq!(second.value("dra_fastpath_requests_total", &seen), 250.0);
    assert_eq!(
        second.value(
            "dra_fastpath_requests_total",
            &[
                ("peer", "pgw1"),
                ("class", "gx_ccr_i"),
                ("outcome", "dropped")
            ]
        ),
        10.0
    );
    assert_eq!(
        second.value(
            "dra_fastpath_bytes_total",
            &[("peer", "pgw1"), ("class", "gx_ccr_i")]
        ),
        51_000.0
    );
    assert_eq!(
        second.value("dra_fastpath_packets_total", &[("reason", "packets")]),
        700.0
    );
    // Not in the second global snapshot: keeps its value.
    assert_eq!(
        second.value("dra_fastpath_packets_total", &[("reason", "answers")]),
        50.0
    );

    // A whole-map snapshot drops series that are gone (a removed peer).
    m.set_fastpath_class("pgw2", "all", &counters(5, 5, 0, 0, 900));
    m.set_fastpath_classes([("pgw2", "all", counters(8, 8, 0, 0, 1400))]);
    let third = scrape(server.local_addr());
    assert!(!third.has("dra_fastpath_requests_total", &seen));
    assert_eq!(third.series("dra_fastpath_requests_total").len(), 6);
    assert_eq!(
        third.value(
            "dra_fastpath_bytes_total",
            &[("peer", "pgw2"), ("class", "all")]
        ),
        1400.0
    );
}

#[test]
fn invalid_cpu_samples_keep_the_last_value() {
    let m = Metrics::new();
    let server = start(&m);
    assert!(m.set_db_cpu_percent(62.5));
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1.0] {
        assert!(!m.set_db_cpu_percent(bad), "{bad} accepted");
    }
    m.set_effective_rate("pgw1", "gx_ccr_i", f64::NAN);
    let e = scrape(server.local_addr());
    assert_eq!(e.value("dra_db_cpu_percent", &[]), 62.5);
    assert!(e.series("dra_effective_rate").is_empty());
}

#[test]
fn other_paths_are_404_and_other_methods_405() {
    let m = Metrics::new();
    let server = start(&m);
    let addr = server.local_addr();
    for path in ["/", "/metrics/", "/favicon.ico", "/metricsx"] {
        assert_eq!(request(addr, "GET", path).status, 404, "{path}");
    }
    for method in ["POST", "PUT", "DELETE", "OPTIONS"] {
        let r = request(addr, method, "/metrics");
        assert_eq!(r.status, 405, "{method}");
        assert_eq!(r.headers["allow"], "GET, HEAD");
    }
    // A body sent with a refused request does not disturb the response.
    let r = exchange(
        addr,
        b"POST /metrics HTTP/1.1\r\nContent-Length: 11\r\n\r\nhello world",
    );
    assert_eq!(r.status, 405);

    // HEAD: the GET headers, no body.
    let get = request(addr, "GET", "/metrics");
    let head = request(addr, "HEAD", "/metrics");
    assert_eq!(head.status, 200);
    assert_eq!(head.headers["content-type"], CONTENT_TYPE);
    assert_eq!(head.headers["content-length"], get.body.len().to_string());
    assert!(head.body.is_empty());

    // Query strings are ignored.
    assert_eq!(request(addr, "GET", "/metrics?name[]=x").status, 200);
}

#[test]
fn garbage_and_oversized_requests_do_not_stop_the_server() {
    let m = Metrics::new();
    m.set_throttle_percent("pgw1", 40);
    let server = start(&m);
    let addr = server.local_addr();

    assert_eq!(
        exchange(addr, b"\x16\x03\x01\x02\x00\x01garbage\r\n\r\n").status,
        400
    );
    assert_eq!(exchange(addr, b"GET /metrics HTTP/2.0\r\n\r\n").status, 505);

    // A head larger than the limit gets 431 (read before the whole thing is sent).
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut big = b"GET /metrics HTTP/1.1\r\nX-Filler: ".to_vec();
    big.resize(MAX_REQUEST_HEAD + 1, b'a');
    let _ = s.write_all(&big); // the server may close before taking it all
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    assert_eq!(parse_response(&raw).status, 431);

    // A client that sends half a request and hangs up gets nothing, harmlessly.
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /metr").unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let mut raw = Vec::new();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.read_to_end(&mut raw).unwrap();
    assert!(raw.is_empty());

    // The server still scrapes.
    let e = scrape(addr);
    assert_eq!(e.value("dra_throttle_percent", &[("peer", "pgw1")]), 40.0);
}

#[test]
fn a_stalled_client_does_not_block_scrapes_or_shutdown() {
    let m = Metrics::new();
    m.set_db_cpu_percent(48.0);
    let server = start(&m);
    let addr = server.local_addr();

    let mut stalled = TcpStream::connect(addr).unwrap();
    stalled
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x")
        .unwrap();
    let e = scrape(addr);
    assert_eq!(e.value("dra_db_cpu_percent", &[]), 48.0);

    // Dropping the handle closes the stalled connection and frees the port.
    drop(server);
    stalled
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut rest = Vec::new();
    let _ = stalled.read_to_end(&mut rest);
    assert!(rest.is_empty(), "no response to a half request");
    let again = serve(addr, m.clone()).expect("port free again after drop");
    assert_eq!(again.local_addr(), addr);
    assert_eq!(scrape(addr).value("dra_db_cpu_percent", &[]), 48.0);
}

#[test]
fn binding_an_address_in_use_fails_naming_the_address() {
    let m = Metrics::new();
    let server = start(&m);
    let addr = server.local_addr();
    let err = serve(addr, m.clone()).expect_err("second bind must fail");
    match &err {
        MetricsError::Bind { addr: a, source } => {
            assert_eq!(*a, addr);
            assert_eq!(source.kind(), std::io::ErrorKind::AddrInUse);
        }
        other => panic!("unexpected error {other:?}"),
    }
    assert!(err.to_string().contains(&addr.to_string()), "{err}");
    assert!(std::error::Error::source(&err).is_some());
    // The first server is unaffected.
    assert_eq!(request(addr, "GET", "/metrics").status, 200);
}
