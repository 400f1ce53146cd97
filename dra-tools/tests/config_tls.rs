//! `tls = { ... }` in the config: its files read and checked with `file:line:column`
//! errors, what `check-config` and the fast path's plan make of TLS peers, and what a
//! reload sees when a certificate file is rewritten. Certificates from a CA made at run
//! time (`dra_tools::pki`).

use dra::config::{Setup, parse, parse_for};
use dra::dataplane::Plan;
use dra_common::maps::NO_SLOT;
use dra_tools::pki::{TestCa, TlsFiles};

/// A config with a TLS listener (`listener_tls`), the TLS gateway pgw1, the plain
/// gateway pgw2, the TLS server pcrf1 (`server_tls`), then `extra`.
fn text(listener_tls: &str, server_tls: &str, extra: &str) -> String {
    format!(
        r#"[global]
origin_host = "dra.test.example"
origin_realm = "test.example"

[[listener]]
address = "198.18.1.1:5868"
tls = {listener_tls}

[[listener]]
address = "198.18.1.1:3868"

[[peer]]
name = "pgw1"
origin_host = "pgw1.test.example"
realm = "test.example"
role = "client"
addresses = ["198.18.1.2"]
tls = {{}}

[[peer]]
name = "pgw2"
origin_host = "pgw2.test.example"
realm = "test.example"
role = "client"
addresses = ["198.18.1.3"]

[[peer]]
name = "pcrf1"
origin_host = "pcrf1.test.example"
realm = "pcrf.test.example"
role = "server"
connect = "198.18.2.2:5868"
tls = {server_tls}
{extra}"#
    )
}

struct Pki {
    ca: TestCa,
    dra: TlsFiles,
}

fn pki() -> Pki {
    let ca = TestCa::new("cfg").expect("CA");
    let dra = ca.issue("dra", &["dra.test.example"]).expect("cert");
    Pki { ca, dra }
}

/// (line, column, message) of every error of `t`, which must be refused.
fn errors(t: &str) -> Vec<(usize, usize, String)> {
    match parse(t, "t.toml") {
        Ok(_) => panic!("accepted:\n{t}"),
        Err(e) => e
            .errors
            .into_iter()
            .map(|e| (e.line, e.column, e.message))
            .collect(),
    }
}

/// 1-based line of the first line of `t` containing `needle`, after line `after`.
fn line_of(t: &str, needle: &str, after: usize) -> usize {
    t.lines()
        .enumerate()
        .skip(after)
        .find(|(_, l)| l.contains(needle))
        .map(|(i, _)| i + 1)
        .unwrap_or_else(|| panic!("{needle} not in the text"))
}

const LIMIT: &str = r#"
[[message_rate_limit_profile]]
peer = "pgw1"
direction = "ingress"
application = "gx"
command = "ccr"
request_type = "initial"
rate = 200
"#;

#[test]
fn a_valid_tls_config_and_where_its_limits_are_enforced() {
    let p = pki();
    let t = text(&p.dra.toml(), &p.dra.toml(), LIMIT);
    let cfg = parse(&t, "t.toml").unwrap_or_else(|e| panic!("{e}"));
    // With a TLS listener the IANA port of TLS is watched too.
    assert_eq!(cfg.global.diameter_ports, [3868, 5868]);
    assert!(cfg.listeners[0].tls.as_ref().unwrap().credentials.is_some());
    assert_eq!(cfg.peers[0].tls_name(), Some("pgw1.test.example"));
    assert_eq!(cfg.peers[1].tls_name(), None);
    // A TLS peer's limit is the agent's limiter's, with or without XDP.
    for xdp in [Some(true), Some(false), None] {
        assert_eq!(
            cfg.enforced_by(xdp),
            [(
                "ingress pgw1 Gx CCR-I".to_owned(),
                "agent limiter (TLS: XDP cannot read it)"
            )]
        );
    }
    assert!(
        cfg.summary()
            .contains("ingress pgw1 Gx CCR-I  agent limiter (TLS"),
        "{}",
        cfg.summary()
    );
    let plain = parse(&t.replace("tls = {}\n", ""), "t.toml").expect("valid");
    assert_eq!(plain.enforced_by(Some(true))[0].1, "XDP");
    // Accepted by the enforcement check in every setup.
    for setup in [
        Setup::File,
        Setup::Run { iface: None },
        Setup::Run {
            iface: Some("eth0".into()),
        },
    ] {
        parse_for(&t, "t.toml", &setup).unwrap_or_else(|e| panic!("{setup:?}: {e}"));
    }
}

#[test]
fn xdp_is_given_only_the_connection_guard_of_a_tls_peer() {
    let p = pki();
    let t = text(&p.dra.toml(), &p.dra.toml(), LIMIT)
        .replace("tls = {}\n", "tls = {}\nconnection_rate = 10\n");
    let cfg = parse(&t, "t.toml").expect("valid");
    let plan = Plan::new(&cfg).expect("plan");
    let pgw1 = plan.peer("pgw1").expect("pgw1");
    assert!(pgw1.tls);
    // The limiter's layout keeps the slots…
    assert_ne!(pgw1.info.overall_slot, NO_SLOT);
    let class = plan
        .class_entries()
        .filter(|(k, _)| k.peer == pgw1.info.peer_id)
        .count();
    assert!(class > 0);
    // …XDP's does not: only the id and the guard.
    let xdp = plan
        .xdp_peers()
        .find(|(_, i)| i.peer_id == pgw1.info.peer_id)
        .unwrap()
        .1;
    assert_eq!((xdp.overall_slot, xdp.other_slot), (NO_SLOT, NO_SLOT));
    assert_eq!(xdp.conn_slot, pgw1.info.conn_slot);
    assert_ne!(xdp.conn_slot, NO_SLOT);
    assert!(
        plan.xdp_class_entries()
            .all(|(k, _)| k.peer != pgw1.info.peer_id)
    );
    let tls_slots: Vec<u32> = plan
        .slots
        .iter()
        .filter(|s| plan.is_tls_slot(s))
        .map(|s| s.index)
        .collect();
    assert!(tls_slots.contains(&pgw1.info.overall_slot));
    let pgw2 = plan.peer("pgw2").unwrap();
    assert!(!tls_slots.contains(&pgw2.info.overall_slot));
    let xdp2 = plan
        .xdp_peers()
        .find(|(_, i)| i.peer_id == pgw2.info.peer_id)
        .unwrap()
        .1;
    assert_eq!(xdp2, pgw2.info, "a plain peer is written as planned");
}

#[test]
fn tls_file_and_key_errors_name_their_position() {
    let p = pki();
    let other = p.ca.issue("other", &["other.test.example"]).expect("cert");
    let garbage = p.ca.dir().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").unwrap();
    let d = &p.dra;
    let listener = format!(
        "{{ cert = \"{}\", key = \"{}\", ca = \"{}\", identity = \"x.test.example\" }}",
        d.cert.display(),
        other.key.display(),
        garbage.display()
    );
    let server = format!(
        "{{ cert = \"relative.crt\", key = \"/nonexistent/dra.key\", ca = \"{}\", \
         handshake_timeout = \"0s\" }}",
        d.ca.display()
    );
    let t = text(&listener, &server, "");
    let e = errors(&t);
    let l = line_of(&t, "tls = { cert", 0);
    let s = line_of(&t, "tls = { cert = \"relative", 0);
    let col =
        |line: usize, needle: &str| t.lines().nth(line - 1).unwrap().find(needle).unwrap() + 1;
    let want = |line, column, start: &str| {
        assert!(
            e.iter()
                .any(|(a, b, m)| (*a, *b) == (line, column) && m.starts_with(start)),
            "no error at {line}:{column} starting {start:?} in {e:#?}"
        );
    };
    want(l, col(l, "\"x.test"), "identity is for a [[peer]]");
    want(l, col(l, &format!("\"{}", garbage.display())), "ca ");
    want(s, col(s, "\"relative"), "cert must be an absolute path");
    want(
        s,
        col(s, "\"/nonexistent"),
        "cannot read key /nonexistent/dra.key",
    );
    want(
        s,
        col(s, "\"0s\""),
        "handshake_timeout must be longer than 0s",
    );
    // The CA error says what is wrong with the file.
    assert!(
        e.iter().any(|(_, _, m)| m.contains("no PEM certificate")),
        "{e:#?}"
    );

    // A key that does not belong to the certificate: at the certificate.
    let mismatch = format!(
        "{{ cert = \"{}\", key = \"{}\", ca = \"{}\" }}",
        d.cert.display(),
        other.key.display(),
        d.ca.display()
    );
    let t = text(&mismatch, &d.toml(), "");
    let e = errors(&t);
    assert_eq!(e.len(), 1, "{e:#?}");
    assert_eq!(e[0].0, line_of(&t, "tls = { cert", 0));
    assert!(e[0].2.contains("with key"), "{}", e[0].2);
}

#[test]
fn tls_keys_that_do_not_belong_and_a_tls_peer_without_a_tls_listener() {
    let p = pki();
    let d = &p.dra;
    // A gateway's connections are accepted with the listener's files.
    let t = text(&d.toml(), &d.toml(), "").replace(
        "tls = {}\n",
        &format!("tls = {{ cert = \"{}\", certt = 1 }}\n", d.cert.display()),
    );
    let e = errors(&t);
    let line = line_of(&t, "certt", 0);
    assert!(
        e.iter()
            .any(|(l, _, m)| *l == line && m.starts_with("cert is not for a peer that connects")),
        "{e:#?}"
    );
    assert!(
        e.iter().any(|(l, _, m)| *l == line
            && m.contains("unknown key `certt` in tls; did you mean `cert`?")),
        "{e:#?}"
    );
    // Missing files: at the table.
    let t = text(
        &format!("{{ cert = \"{}\" }}", d.cert.display()),
        &d.toml(),
        "",
    );
    let e = errors(&t);
    let line = line_of(&t, "tls = { cert", 0);
    for key in ["key", "ca"] {
        assert!(
            e.iter().any(|(l, c, m)| (*l, *c) == (line, 7)
                && m.starts_with(&format!("missing key {key} in tls"))),
            "{key}: {e:#?}"
        );
    }
    // No TLS listener for a TLS gateway.
    let t = text(&d.toml(), &d.toml(), "").replace(
        &format!("address = \"198.18.1.1:5868\"\ntls = {}\n", d.toml()),
        "address = \"198.18.1.1:5868\"\n",
    );
    let e = errors(&t);
    assert!(
        e.iter().any(|(l, _, m)| *l == line_of(&t, "tls = {}", 0)
            && m.contains("connects to the agent over TLS, but no [[listener]] has tls")),
        "{e:#?}"
    );
}

#[test]
fn a_group_limit_over_tls_and_plain_members_is_refused_with_xdp() {
    let p = pki();
    let t = text(&p.dra.toml(), &p.dra.toml(), "")
        .replace(
            "addresses = [\"198.18.1.2\"]\n",
            "addresses = [\"198.18.1.2\"]\ngroup = \"gw\"\n",
        )
        .replace(
            "addresses = [\"198.18.1.3\"]\n",
            "addresses = [\"198.18.1.3\"]\ngroup = \"gw\"\n",
        )
        + "\n[[peer_group]]\nname = \"gw\"\n\n[[peer_rate_limit_profile]]\ngroup = \"gw\"\n\
           direction = \"ingress\"\nrate = 100\n";
    parse(&t, "t.toml").unwrap_or_else(|e| panic!("{e}"));
    let line = line_of(
        &t,
        "group = \"gw\"",
        line_of(&t, "[[peer_rate_limit_profile]]", 0),
    );
    match parse_for(
        &t,
        "t.toml",
        &Setup::Run {
            iface: Some("eth0".into()),
        },
    ) {
        Ok(_) => panic!("accepted with XDP"),
        Err(e) => assert!(
            e.errors
                .iter()
                .any(|e| e.line == line && e.message.contains("covers TLS and plain TCP members")),
            "{e}"
        ),
    }
    // Without XDP the agent's limiter enforces it for all: one bucket.
    parse_for(&t, "t.toml", &Setup::Run { iface: None }).unwrap_or_else(|e| panic!("{e}"));
    let w = parse_for(&t, "t.toml", &Setup::File)
        .expect("a warning")
        .warnings;
    assert!(w.iter().any(|w| w.line == line), "{w:?}");
}

#[test]
fn a_rewritten_certificate_is_a_change_a_reload_applies() {
    let p = pki();
    let t = text(&p.dra.toml(), &p.dra.toml(), "");
    let old = parse(&t, "t.toml").expect("valid");
    let same = parse(&t, "t.toml").expect("valid");
    assert!(dra::config::diff::diff(&old, &same).is_empty());
    p.ca.issue("dra", &["dra.test.example"]).expect("renewed");
    let new = parse(&t, "t.toml").expect("valid");
    let d = dra::config::diff::diff(&old, &new);
    assert!(d.applicable(), "{:?}", d.refused);
    assert_eq!(
        d.listeners_tls_changed,
        ["198.18.1.1:5868".parse().unwrap()]
    );
    assert_eq!(
        d.peers_changed.len(),
        1,
        "pcrf1's own certificate too: {d:?}"
    );
    assert_eq!(d.peers_changed[0].keys, ["tls"]);
    assert!(
        d.to_string().contains("~ listener 198.18.1.1:5868: tls"),
        "{d}"
    );
}

/// The ```toml blocks of a document that name certificate files under /etc/dra/tls/.
fn tls_examples(doc: &str) -> Vec<String> {
    doc.split("```toml\n")
        .skip(1)
        .map(|rest| rest.split("```").next().unwrap().to_owned())
        .filter(|b| b.contains("/etc/dra/tls/"))
        .collect()
}

#[test]
fn the_tls_examples_of_the_docs_are_valid() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let ca = TestCa::new("docs").expect("CA");
    let dir = ca.dir().to_path_buf();
    ca.issue("dra", &["dra.test.example"]).expect("cert");
    for name in ["ca.crt", "cloud-ca.crt"] {
        std::fs::copy(ca.ca_path(), dir.join(name)).expect("copy");
    }
    let at = |b: &str| b.replace("/etc/dra/tls/", &format!("{}/", dir.display()));
    let global = "[global]\norigin_host = \"dra.lab.example\"\norigin_realm = \"lab.example\"\n\n";
    let mut checked = 0;
    for (doc, whole) in [("docs/config.md", true), ("README.md", false)] {
        let text = std::fs::read_to_string(root.join(doc)).expect(doc);
        for (i, b) in tls_examples(&text).iter().enumerate() {
            // README shows the TLS part of a config only.
            let b = if whole {
                at(b)
            } else {
                format!("{global}{}", at(b))
            };
            let cfg = parse(&b, &format!("{doc} TLS example {}", i + 1))
                .unwrap_or_else(|e| panic!("{e}"));
            assert!(cfg.peers.iter().any(|p| p.tls.is_some()), "{doc}");
            checked += 1;
        }
    }
    assert_eq!(checked, 2, "one TLS example in each document");
}
