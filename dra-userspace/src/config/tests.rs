//! Defaults, resolution and error collection of `parse`, on small inline configs.

use super::testing::{client, global, gx_ccr_limit, peer_limit, server};
use super::*;

/// The agent, the client pgw1 (role on line 14) and the server pcrf1 in group pcrf (its
/// `group` on line 23).
fn head() -> String {
    [
        global(""),
        client("pgw1", &["198.18.1.2", "2001:db8:1::2"], ""),
        server(
            "pcrf1",
            &[],
            "group = \"pcrf\"\nconnect = \"198.18.2.2:3868\"\n",
        ),
        "\n[[peer_group]]\nname = \"pcrf\"\n".into(),
    ]
    .concat()
}

/// The `target` lines of the limits.
const PGW1: &str = "peer = \"pgw1\"";
const PCRF: &str = "group = \"pcrf\"";

const DB: &str = r#"
[dynamic_throttling_db_cpu_profile]
thresholds = [{ cpu = 50, throttle = 20 }]
source = { kind = "procfs", process = "redis-server" }
"#;

fn ok(extra: &str) -> Config {
    let text = format!("{}{extra}", head());
    parse(&text, "t.toml").unwrap_or_else(|e| panic!("{e}"))
}

fn errs(extra: &str) -> Vec<String> {
    let text = format!("{}{extra}", head());
    match parse(&text, "t.toml") {
        Ok(_) => panic!("accepted:\n{extra}"),
        Err(e) => e.errors.into_iter().map(|e| e.message).collect(),
    }
}

/// The 1-based line of `text` that starts with `prefix`.
fn line_of(text: &str, prefix: &str) -> usize {
    text.lines()
        .position(|l| l.starts_with(prefix))
        .expect("the line")
        + 1
}

/// `[global] watchdog`: Tw of RFC 3539, 6 s at least, 30 s by default; a bad one is
/// refused at its line and column.
#[test]
fn the_watchdog_interval_is_30s_by_default_and_at_least_6s() {
    assert_eq!(ok("").global.watchdog, Duration::from_secs(30));
    let with = |tw: &str| {
        head().replace(
            "origin_realm = \"lab.example\"",
            &format!("origin_realm = \"lab.example\"\nwatchdog = \"{tw}\""),
        )
    };
    let c = parse(&with("6s"), "t.toml").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.global.watchdog, Duration::from_secs(6));
    for (bad, why) in [
        (
            "5s",
            "watchdog must be between 6s (RFC 3539 §3.4.1) and 3600s",
        ),
        (
            "2h",
            "watchdog must be between 6s (RFC 3539 §3.4.1) and 3600s",
        ),
        ("soon", "bad duration for watchdog \"soon\""),
    ] {
        let text = with(bad);
        let e = parse(&text, "t.toml").expect_err(bad);
        let line = line_of(&text, "watchdog");
        assert_eq!((e.errors[0].line, e.errors[0].column), (line, 12), "{e}");
        assert!(e.errors[0].message.contains(why), "{bad}: {e}");
    }
}

/// `[global] startup_wait`: 10 s by default, 0 to 60 s; a bad one is refused at its
/// line and column.
#[test]
fn the_startup_wait_is_10s_by_default_and_at_most_60s() {
    assert_eq!(ok("").global.startup_wait, Duration::from_secs(10));
    let with = |w: &str| {
        head().replace(
            "origin_realm = \"lab.example\"",
            &format!("origin_realm = \"lab.example\"\nstartup_wait = \"{w}\""),
        )
    };
    for (good, d) in [("0s", 0), ("60s", 60)] {
        let c = parse(&with(good), "t.toml").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.global.startup_wait, Duration::from_secs(d));
    }
    for (bad, why) in [
        ("61s", "startup_wait must be at most 60s"),
        ("later", "bad duration for startup_wait \"later\""),
    ] {
        let text = with(bad);
        let e = parse(&text, "t.toml").expect_err(bad);
        let line = line_of(&text, "startup_wait");
        assert_eq!((e.errors[0].line, e.errors[0].column), (line, 16), "{e}");
        assert!(e.errors[0].message.contains(why), "{bad}: {e}");
    }
}

#[test]
fn omitted_keys_take_documented_defaults() {
    let c = ok("");
    assert_eq!(c.global.product_name, DEFAULT_PRODUCT_NAME);
    assert_eq!(c.global.unknown_peer, UnknownPeer::Pass);
    assert_eq!(c.global.diameter_ports, vec![3868]);
    assert!(!c.global.dynamic_rate_limiting);
    assert_eq!(c.fast_path, FastPath::default());
    assert_eq!(c.fast_path.xdp_mode, XdpMode::Auto);
    assert_eq!(c.metrics.address, None);
    assert_eq!(c.control.socket, None);
    assert_eq!(c.listeners[0].transport, Transport::Tcp);
    let g = c.group("pcrf").unwrap();
    assert_eq!(g.answer_timeout, Duration::from_secs(2));
    assert_eq!(g.delay_tolerance, Duration::ZERO);
    assert_eq!(g.queue_limit, 1000);
    assert_eq!(g.max_outstanding, None);
    assert_eq!(g.selection, Selection::RoundRobin);
    let p = c.peer("pcrf1").unwrap();
    assert_eq!(p.weight, 1);
    assert!(p.addresses.is_empty());
    assert!(c.db_cpu_profile.is_none());
}

#[test]
fn bare_addresses_become_host_prefixes() {
    let c = ok("");
    let pgw1 = c.peer("pgw1").unwrap();
    let shown: Vec<String> = pgw1.addresses.iter().map(|a| a.to_string()).collect();
    assert_eq!(shown, ["198.18.1.2/32", "2001:db8:1::2/128"]);
}

#[test]
fn limit_defaults_name_the_limit_and_scale_the_burst() {
    let c = ok(&[
        gx_ccr_limit(PGW1, "initial", 200, ""),
        peer_limit(PGW1, "ingress", 5, ""),
        peer_limit(PCRF, "egress", 0.5, ""),
    ]
    .concat());
    let m = &c.message_rate_limits[0];
    assert_eq!(m.limit.burst, 20, "100 ms of traffic");
    assert_eq!(m.limit.action, Action::Reject);
    assert_eq!(m.limit.result_code, 3002);
    assert_eq!(
        m.limit.error_message,
        "rate limit exceeded: pgw1 Gx CCR-I 200/s"
    );
    assert_eq!(m.msg_class(), MsgClass::gx_ccr(1));
    assert_eq!(
        m.limit.bucket_config(),
        BucketConfig::new(200.0, 20, Action::Reject)
    );

    let p = &c.peer_rate_limits[0];
    assert_eq!(p.limit.burst, 1);
    assert_eq!(
        p.limit.error_message,
        "rate limit exceeded: pgw1 overall 5/s"
    );

    let g = &c.peer_rate_limits[1];
    assert_eq!(g.target, Target::Group("pcrf".into()));
    assert_eq!(g.limit.rate, 0.5);
    assert_eq!(g.limit.burst, 1);
    assert_eq!(
        g.limit.error_message,
        "rate limit exceeded: egress to pcrf overall 0.5/s"
    );
}

#[test]
fn numeric_application_and_command_equal_their_names() {
    let c = ok(r#"
[[message_rate_limit_profile]]
peer = "pgw1"
direction = "ingress"
application = 4
command = 272
rate = 10

[[message_rate_limit_profile]]
peer = "pgw1"
direction = "egress"
application = "gy"
command = "ccr"
request_type = "any"
rate = 10
"#);
    assert_eq!(
        c.message_rate_limits[0].msg_class(),
        MsgClass::new(4, 272, 0)
    );
    assert_eq!(
        c.message_rate_limits[0].class,
        c.message_rate_limits[1].class
    );
    assert_eq!(c.message_rate_limits[0].class.to_string(), "Gy CCR");
}

#[test]
fn dynamic_profile_defaults_to_gx_ccr_i_and_t_and_covers_group_members() {
    let c = ok(&[
        gx_ccr_limit(PCRF, "initial", 1000, ""),
        gx_ccr_limit(PCRF, "termination", 1000, ""),
        format!("\n[[dynamic_peer_rate_limit_profile]]\n{PCRF}\n{DB}"),
    ]
    .concat());
    let d = c.dynamic_profile_for_peer("pcrf1").expect("via its group");
    assert_eq!(d.classes, [MessageClass::GX_CCR_I, MessageClass::GX_CCR_T]);
    assert!(c.dynamic_profile_for_peer("pgw1").is_none());
    let p = c.db_cpu_profile.as_ref().unwrap();
    assert_eq!(p.reversal_hold_time, Duration::from_secs(30));
    assert_eq!(p.reversal_step, 20);
    assert_eq!(p.sample_period, Duration::from_secs(1));
    assert_eq!(p.missing_after, 3);
    assert_eq!(p.on_missing, OnMissing::Hold);
    assert_eq!(p.ewma_alpha, None);
    assert_eq!(
        p.source,
        CpuSource::Procfs(ProcTarget::Process("redis-server".into()))
    );
}

#[test]
fn a_broken_entry_does_not_cause_follow_on_reference_errors() {
    // pgw2 fails to deserialize (weight is a string), but references to it resolve.
    let e = errs(
        &[
            client("pgw2", &[], "weight = \"heavy\"\n"),
            peer_limit("peer = \"pgw2\"", "ingress", 100, ""),
        ]
        .concat(),
    );
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].contains("invalid type: string \"heavy\", expected an integer"),
        "{e:?}"
    );
}

#[test]
fn every_unknown_key_of_a_table_is_reported() {
    let e = errs(
        r#"
[fast_path]
interfce = "eth0"
xdp_mod = "skb"
"#,
    );
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(e[0].contains("unknown key `interfce` in [fast_path]; did you mean `interface`?"));
    assert!(e[1].contains("unknown key `xdp_mod` in [fast_path]; did you mean `xdp_mode`?"));
}

#[test]
fn duplicate_profiles_and_routes_are_rejected() {
    let e = errs(&format!(
        r#"{}{}
[[route]]
realm = "PCRF.lab.example"
group = "pcrf"

[[route]]
realm = "pcrf.lab.example"
group = "pcrf"
"#,
        peer_limit(PGW1, "ingress", 100, ""),
        peer_limit(PGW1, "ingress", 200, ""),
    ));
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(
        e[0].starts_with("second ingress peer profile for peer \"pgw1\""),
        "{e:?}"
    );
    assert!(
        e[1].starts_with("duplicate route to group \"pcrf\""),
        "{e:?}"
    );
}

#[test]
fn routes_resolve_wildcards_and_weights() {
    let c = ok(r#"
[[route]]
realm = "*"
application = "gy"
peer = "pcrf1"
weight = 10
"#);
    let r = &c.routes[0];
    assert_eq!(r.realm, RouteRealm::Any);
    assert_eq!(r.application, Some(app::GY));
    assert_eq!(r.target, Target::Peer("pcrf1".into()));
    assert_eq!(r.weight, 10);
    let e = errs("[[route]]\nrealm = \"*.example\"\npeer = \"pcrf1\"\n");
    assert!(e[0].contains("the only wildcard is \"*\" alone"), "{e:?}");
}

#[test]
fn listener_port_must_be_a_diameter_port() {
    let text = head().replace("198.18.1.1:3868", "198.18.1.1:3870");
    let e = parse(&text, "t.toml").unwrap_err();
    assert_eq!(e.errors.len(), 1);
    assert!(
        e.errors[0]
            .message
            .contains("listener port 3870 is not in global.diameter_ports")
    );
}

#[test]
fn agent_origin_host_cannot_be_a_peer() {
    let text = head().replace("pgw1.lab.example", "DRA.lab.example");
    let e = parse(&text, "t.toml").unwrap_err();
    assert!(
        e.errors[0]
            .message
            .contains("is the agent's own global.origin_host"),
        "{e}"
    );
}

#[test]
fn source_kinds_take_only_their_keys() {
    let db = DB.replace(
        r#"{ kind = "procfs", process = "redis-server" }"#,
        r#"{ kind = "redis", address = "127.0.0.1:6379", process = "redis-server" }"#,
    );
    let e = errs(&db);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].contains("process does not apply to kind = \"redis\""),
        "{e:?}"
    );

    let db = DB.replace(
        r#"{ kind = "procfs", process = "redis-server" }"#,
        r#"{ kind = "prometheus", url = "http://127.0.0.1:9090", query = "db_cpu" }"#,
    );
    let c = ok(&db);
    assert_eq!(
        c.db_cpu_profile.unwrap().source,
        CpuSource::Prometheus {
            url: "http://127.0.0.1:9090".into(),
            query: "db_cpu".into()
        }
    );
}

#[test]
fn prometheus_urls_the_source_cannot_open_are_refused() {
    let with_url = |url: &str| {
        DB.replace(
            r#"{ kind = "procfs", process = "redis-server" }"#,
            &format!(r#"{{ kind = "prometheus", url = "{url}", query = "db_cpu" }}"#),
        )
    };
    for (url, reason) in [
        (
            "https://prom:9090",
            "https is not supported: this source speaks plain HTTP (no TLS)",
        ),
        (
            "http://user@prom:9090",
            "user info (user@host) is not supported",
        ),
        (
            "http://prom:9090/?x=1",
            "a query or fragment is not supported",
        ),
        ("ftp://prom", "expected http://host:port"),
    ] {
        let e = errs(&with_url(url));
        assert_eq!(e.len(), 1, "{e:?}");
        let expected = format!("bad url \"{url}\": {reason}");
        assert!(e[0].starts_with(&expected), "{e:?}");
    }
    ok(&with_url("http://prom.lab.example/prom/"));
}

#[test]
fn every_source_kind_opens_and_is_summarised() {
    for (source, shown) in [
        (r#"{ kind = "procfs", host = true }"#, "procfs host"),
        (
            r#"{ kind = "procfs", process = "mongod" }"#,
            "procfs process mongod",
        ),
        (
            r#"{ kind = "procfs", pid_file = "/run/db.pid" }"#,
            "procfs pid file /run/db.pid",
        ),
        (
            r#"{ kind = "redis", address = "127.0.0.1:6379" }"#,
            "redis 127.0.0.1:6379",
        ),
        (
            r#"{ kind = "prometheus", url = "http://127.0.0.1:9090", query = "db" }"#,
            "prometheus http://127.0.0.1:9090 query \"db\"",
        ),
        (
            r#"{ kind = "file", path = "/run/db_cpu" }"#,
            "file /run/db_cpu",
        ),
    ] {
        let db = DB.replace(r#"{ kind = "procfs", process = "redis-server" }"#, source);
        let c = ok(&db);
        let p = c.db_cpu_profile.as_ref().unwrap();
        assert_eq!(p.source.to_string(), shown);
        assert!(c.summary().contains(&format!("db cpu profile: {shown}, ")));
        // Opening reads and connects nothing, so it works here for every kind.
        let opened = p.source.open(Duration::from_secs(1));
        assert!(opened.is_ok(), "{source}: {:?}", opened.err());
    }
}

#[test]
fn dynamic_profiles_need_a_db_cpu_profile() {
    let e = errs(&format!(
        r#"{}
[[dynamic_peer_rate_limit_profile]]
peer = "pgw1"
classes = [{{ application = "gx", command = "ccr", request_type = "initial" }}]
"#,
        gx_ccr_limit(PGW1, "initial", 1000, ""),
    ));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].contains("needs a [dynamic_throttling_db_cpu_profile]"),
        "{e:?}"
    );
}

#[test]
fn syntax_errors_come_alone_with_a_position() {
    let e = parse("[global]\norigin_host = \n", "s.toml").unwrap_err();
    assert_eq!(e.errors.len(), 1);
    assert_eq!((e.errors[0].line, e.errors[0].file.as_str()), (2, "s.toml"));
}

#[test]
fn summary_names_peers_limits_and_thresholds() {
    let c = ok(&format!("{}{DB}", peer_limit(PGW1, "ingress", 1000, "")));
    let s = c.summary();
    for needle in [
        "dra.lab.example",
        "pgw1",
        "client",
        "198.18.1.2/32",
        "pcrf: pcrf1",
        "ingress pgw1 overall: 1000/s burst 100 reject 3002",
        "50%→20%",
        "procfs process redis-server",
    ] {
        assert!(s.contains(needle), "summary lacks {needle:?}:\n{s}");
    }
    assert!(s.lines().count() <= 40, "more than a screen:\n{s}");
}

#[test]
fn hold_time_shorter_than_the_sample_period_is_rejected() {
    let e = errs(&DB.replace("source =", "sample_period = \"1m\"\nsource ="));
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(
        e[0],
        "reversal_hold_time 30s is shorter than sample_period 1m"
    );
}

#[test]
fn drop_limits_default_to_a_burst_that_outlasts_a_tcp_retransmission_timeout() {
    let c = ok(&gx_ccr_limit(PGW1, "initial", 500, "action = \"drop\"\n"));
    let l = &c.message_rate_limits[0].limit;
    assert_eq!(l.burst, 100, "200 ms of traffic for drop");
    assert!(c.warnings().is_empty(), "{:?}", c.warnings());
}

#[test]
fn a_drop_limit_with_a_small_burst_is_warned_about_and_reject_is_not() {
    let c = ok(&[
        gx_ccr_limit(PGW1, "initial", 500, "burst = 10\naction = \"drop\"\n"),
        peer_limit(PGW1, "ingress", 1000, "burst = 10\n"),
    ]
    .concat());
    let w = c.warnings();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].starts_with("pgw1 Gx CCR-I: drop limit 500/s with burst 10"),
        "{}",
        w[0]
    );
    assert!(w[0].contains("(100)"), "{}", w[0]);
}

#[test]
fn host_share_scales_rate_and_burst_of_its_limit_on_this_host() {
    let c = ok(&[
        peer_limit(PGW1, "ingress", 1000, "burst = 150\nhost_share = 50\n"),
        gx_ccr_limit(PGW1, "initial", 200, "host_share = 33\n"),
        peer_limit(PCRF, "egress", 10, "burst = 1\nhost_share = 1\n"),
    ]
    .concat());
    let p = &c.peer_rate_limits[0].limit;
    assert_eq!((p.rate, p.burst), (500.0, 75));
    assert_eq!(
        p.bucket_config(),
        BucketConfig::new(500.0, 75, Action::Reject),
        "the fast path's bucket is this host's share"
    );
    assert_eq!(p.error_message, "rate limit exceeded: pgw1 overall 500/s");
    let m = &c.message_rate_limits[0].limit;
    assert_eq!(m.rate, 66.0);
    assert_eq!(m.burst, 7, "the default burst: 100 ms of this host's rate");
    let g = &c.peer_rate_limits[1].limit;
    assert_eq!((g.rate, g.burst), (0.1, 1), "burst rounds up, at least 1");
    // Default: the whole limit on every host.
    let c = ok(&peer_limit(PGW1, "ingress", 100, ""));
    assert_eq!(c.peer_rate_limits[0].limit.rate, 100.0);

    for bad in ["0", "101", "-5"] {
        let share = format!("host_share = {bad}\n");
        let text = head() + &peer_limit(PGW1, "ingress", 100, &share);
        let e = parse(&text, "t.toml").expect_err(bad);
        let line = line_of(&text, "host_share");
        assert_eq!((e.errors[0].line, e.errors[0].column), (line, 14), "{e}");
        assert!(
            e.errors[0].message.contains(&format!(
                "host_share must be between 1 and 100 (percent of the limit this DRA host \
                 enforces), got {bad}"
            )),
            "{e}"
        );
    }
    let text = head() + &peer_limit(PGW1, "ingress", 1, "host_share = \"half\"\n");
    let e = parse(&text, "t.toml").expect_err("a string share");
    let line = text
        .lines()
        .position(|l| l.starts_with("host_share"))
        .unwrap()
        + 1;
    assert_eq!(e.errors[0].line, line, "{e}");
    assert!(e.errors[0].message.contains("expected an integer"), "{e}");
}

#[test]
fn session_store_defaults_to_memory_and_checks_each_key() {
    let c = ok("");
    assert_eq!(c.session_store, SessionStore::default());
    assert_eq!(c.session_store.kind, StoreKind::Memory);
    assert_eq!(c.session_store.ttl, DEFAULT_SESSION_TTL);

    let c = ok(r#"
[session_store]
kind = "redis_cluster"
addresses = ["198.18.0.10:7000", "redis-a.lab.example:7001", "[2001:db8::10]:7002"]
ttl = "2h"
timeout = "50ms"
key_prefix = "site1:"
write = "async"
on_error = "reject"
result_code = 3004
error_message = "try the other DRA"
cache_capacity = 5000
"#);
    let s = &c.session_store;
    assert_eq!(s.kind, StoreKind::RedisCluster);
    assert_eq!(s.addresses.len(), 3);
    assert_eq!(s.ttl, Duration::from_secs(7200));
    assert_eq!(s.timeout, Duration::from_millis(50));
    assert_eq!(s.key_prefix, "site1:");
    assert_eq!(s.write, StoreWrite::Async);
    assert_eq!(s.on_error, StoreOnError::Reject);
    assert_eq!(s.result_code, 3004);
    assert_eq!(s.error_message, "try the other DRA");
    assert_eq!(s.cache_capacity, 5000);

    let e = errs(
        r#"
[session_store]
kind = "redis"
addresses = ["198.18.0.10:6379", "198.18.0.11:6379", "nohost", "198.18.0.12:0"]
timeout = "30s"
result_code = 2001
cache_capacity = 0
"#,
    );
    let has = |needle: &str| e.iter().any(|m| m.contains(needle));
    assert!(has("needs exactly one address"), "{e:?}");
    assert!(has("bad store address \"nohost\""), "{e:?}");
    assert!(has("bad store address \"198.18.0.12:0\""), "{e:?}");
    assert!(has("timeout is at most 10s"), "{e:?}");
    assert!(
        has("result_code is only used with on_error = \"reject\""),
        "{e:?}"
    );
    assert!(has("cache_capacity must be between 1 and"), "{e:?}");

    for (store, error) in [
        (
            "kind = \"memory\"\naddresses = [\"198.18.0.10:6379\"]",
            "addresses are for kind",
        ),
        (
            "kind = \"redis_cluster\"",
            "needs the addresses of one or more cluster nodes",
        ),
        ("kind = \"sql\"", "kind = \"sql\" is not valid"),
        (
            "on_error = \"reject\"\nresult_code = 2001",
            "result_code must be between 3000 and 5999",
        ),
    ] {
        let e = errs(&format!("\n[session_store]\n{store}\n"));
        assert!(e[0].contains(error), "{e:?}");
    }
}

#[test]
fn redis_cluster_cpu_source_takes_seeds_and_an_aggregate() {
    let c = ok(&DB.replace(
        r#"{ kind = "procfs", process = "redis-server" }"#,
        r#"{ kind = "redis_cluster", addresses = ["198.18.0.10:7000"], aggregate = "mean" }"#,
    ));
    let src = &c.db_cpu_profile.as_ref().unwrap().source;
    assert_eq!(
        src.to_string(),
        "redis_cluster 198.18.0.10:7000 (mean of the masters)"
    );
    let e = errs(&DB.replace(
        r#"{ kind = "procfs", process = "redis-server" }"#,
        r#"{ kind = "redis_cluster", addresses = ["198.18.0.10:7000"], aggregate = "sum" }"#,
    ));
    assert!(e[0].contains("aggregate = \"sum\" is not valid"), "{e:?}");
    let e = errs(&DB.replace(
        r#"{ kind = "procfs", process = "redis-server" }"#,
        r#"{ kind = "redis_cluster", address = "198.18.0.10:7000" }"#,
    ));
    assert!(
        e.iter().any(|m| m.contains("address does not apply")),
        "{e:?}"
    );
}

/// [`head`] with `keys` added to the `pgw1` client (line 14 is its `role`).
fn doic_text(keys: &str) -> String {
    head().replacen(
        "role = \"client\"\n",
        &format!("role = \"client\"\n{keys}\n"),
        1,
    )
}

#[test]
fn doic_keys_default_and_parse() {
    let c = parse(&doic_text(""), "t.toml").unwrap();
    assert_eq!(c.peers[0].doic, None, "off unless asked for");
    let c = parse(&doic_text("doic = true"), "t.toml").unwrap();
    assert_eq!(c.peers[0].doic, Some(Doic::new()));
    assert_eq!(
        Doic::new().algorithms,
        vec![crate::doic::Algorithm::Rate, crate::doic::Algorithm::Loss]
    );
    let c = parse(
        &doic_text("doic = true\ndoic_algorithms = [\"loss\"]\ndoic_validity = \"5s\""),
        "t.toml",
    )
    .unwrap();
    let d = c.peers[0].doic.clone().unwrap();
    assert_eq!(d.algorithms, vec![crate::doic::Algorithm::Loss]);
    assert_eq!(d.validity, Duration::from_secs(5));
}

#[test]
fn doic_errors_name_file_line_column() {
    let bad = |keys: &str| match parse(&doic_text(keys), "t.toml") {
        Ok(_) => panic!("accepted {keys}"),
        Err(e) => e.to_string(),
    };
    // `role` of pgw1 is on line 14; the added keys start on line 15.
    assert_eq!(
        bad("doic = true\ndoic_algorithms = [\"loss\", \"fast\"]"),
        "t.toml:16:28: unknown DOIC algorithm \"fast\" (expected \"loss\" or \"rate\")\n"
    );
    assert_eq!(
        bad("doic = true\ndoic_algorithms = [\"loss\", \"loss\"]"),
        "t.toml:16:28: \"loss\" is listed twice\n"
    );
    assert_eq!(
        bad("doic = true\ndoic_algorithms = []"),
        "t.toml:16:19: doic_algorithms must list at least one of \"loss\", \"rate\"\n"
    );
    assert_eq!(
        bad("doic = true\ndoic_validity = \"1500ms\""),
        "t.toml:16:17: doic_validity must be whole seconds between 1s and 86400s \
         (RFC 7683 §7.5)\n"
    );
    assert_eq!(
        bad("doic = true\ndoic_validity = \"25h\""),
        "t.toml:16:17: doic_validity must be whole seconds between 1s and 86400s \
         (RFC 7683 §7.5)\n"
    );
    assert_eq!(
        bad("doic_validity = \"5s\""),
        "t.toml:15:17: doic_algorithms and doic_validity need doic = true\n"
    );
    // On a server.
    let text = head().replacen(
        "group = \"pcrf\"\nconnect",
        "group = \"pcrf\"\ndoic = true\nconnect",
        1,
    );
    let c = parse(&text, "t.toml").unwrap();
    let d = c.peers.iter().find_map(|p| p.doic.clone()).unwrap();
    assert_eq!(d.algorithms, vec![crate::doic::Algorithm::Loss]);
    // A server: loss only, no validity of ours.
    let text = head().replacen(
        "group = \"pcrf\"\nconnect",
        "group = \"pcrf\"\ndoic = true\ndoic_algorithms = [\"rate\"]\n\
         doic_validity = \"5s\"\nconnect",
        1,
    );
    let err = parse(&text, "t.toml").unwrap_err().to_string();
    assert!(
        err.starts_with("t.toml:23:20: on a server, doic_algorithms can only be"),
        "{err}"
    );
    assert!(
        err.contains("t.toml:24:17: doic_validity is for role = \"client\""),
        "{err}"
    );
}

/// `head()` with its listener over SCTP on two addresses and pgw1 over SCTP.
fn sctp_head() -> String {
    head()
        .replace(
            "address = \"198.18.1.1:3868\"\n",
            "address = \"198.18.1.1:3868\"\ntransport = \"sctp\"\nmultihome = [\"198.18.5.1\"]\n",
        )
        .replace(
            "role = \"client\"\n",
            "role = \"client\"\ntransport = \"sctp\"\n",
        )
}

#[test]
fn sctp_listener_and_peer_take_their_transport_and_paths() {
    let c = parse(&sctp_head(), "t.toml").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.listeners[0].transport, Transport::Sctp);
    assert_eq!(
        c.listeners[0].multihome,
        ["198.18.5.1".parse::<IpAddr>().unwrap()]
    );
    let pgw1 = c.peers.iter().find(|p| p.name == "pgw1").unwrap();
    assert_eq!(pgw1.transport, Transport::Sctp);
    assert_eq!(c.sctp_users(), ["listener 198.18.1.1:3868"]);
}

#[test]
fn a_reload_cannot_change_a_listeners_transport_or_paths() {
    let old = parse(&sctp_head(), "t.toml").unwrap_or_else(|e| panic!("{e}"));
    for new in [
        sctp_head().replace(
            "multihome = [\"198.18.5.1\"]",
            "multihome = [\"198.18.5.9\"]",
        ),
        head(),
    ] {
        let new = parse(&new, "t.toml").unwrap_or_else(|e| panic!("{e}"));
        let d = super::diff::diff(&old, &new);
        assert!(
            d.refused
                .iter()
                .any(|r| r.starts_with("listener 198.18.1.1:3868 transport or multihome")),
            "{:?}",
            d.refused
        );
    }
}

/// Each SCTP misconfiguration, as (edit of `sctp_head()`, line:column, reason).
#[test]
fn sctp_misconfigurations_are_refused_at_their_value() {
    let cases: [(&str, &str, &str, &str); 5] = [
        (
            "transport = \"sctp\"\nmultihome",
            "multihome",
            "t.toml:8:13",
            "multihome needs transport = \"sctp\"",
        ),
        (
            "multihome = [\"198.18.5.1\"]",
            "multihome = [\"198.18.1.1\"]",
            "t.toml:9:14",
            "multihome address 198.18.1.1 listed twice",
        ),
        (
            "multihome = [\"198.18.5.1\"]",
            "multihome = [\"pgw1\"]",
            "t.toml:9:14",
            "bad multihome address \"pgw1\"",
        ),
        (
            "multihome = [\"198.18.5.1\"]\n",
            "multihome = [\"198.18.5.1\"]\ntls = { cert = \"/c\", key = \"/k\", ca = \"/a\" }\n",
            "t.toml:10:7",
            "tls over SCTP (DTLS, RFC 6083) is not supported",
        ),
        (
            "transport = \"sctp\"\nmultihome = [\"198.18.5.1\"]\n",
            "",
            "t.toml:15:13",
            "peer \"pgw1\" connects to the agent over SCTP, but no [[listener]] has \
             transport = \"sctp\"",
        ),
    ];
    for (from, to, at, reason) in cases {
        let text = sctp_head().replacen(from, to, 1);
        assert_ne!(text, sctp_head(), "{from}");
        let e = parse(&text, "t.toml").expect_err(to);
        let hit = e
            .errors
            .iter()
            .find(|x| x.message.contains(reason))
            .unwrap_or_else(|| panic!("no \"{reason}\" in:\n{e}"));
        assert_eq!(
            format!("{}:{}:{}", hit.file, hit.line, hit.column),
            at,
            "{e}"
        );
    }
}

#[test]
fn the_sctp_example_of_the_reference_is_a_valid_config() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/config.md");
    let doc = std::fs::read_to_string(path).expect(path);
    let section = doc.split("\n## SCTP\n").nth(1).expect("an SCTP section");
    let block = section
        .split("```toml\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a toml block in the SCTP section");
    let c = parse(block, "docs/config.md SCTP").unwrap_or_else(|e| panic!("{e}"));
    let users = c.sctp_users();
    assert!(
        c.listeners
            .iter()
            .any(|l| l.transport == Transport::Sctp && !l.multihome.is_empty())
            && c.peers
                .iter()
                .any(|p| p.transport == Transport::Sctp && p.connect.is_some())
            && c.peers
                .iter()
                .any(|p| p.transport == Transport::Sctp && p.connect.is_none()),
        "the example shows a multihomed listener, a gateway and a dialled server: {users:?}"
    );
}
