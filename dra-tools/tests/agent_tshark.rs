//! What the agent puts on the wire, decoded by tshark's Diameter dissector: CEA and DWA
//! to a client, relayed answers and a 3002 answer to a marked request; CER and relayed
//! requests (Route-Record appended) to a server.

mod agent_support;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::Command;

use agent_support::*;
use dra_common::wire::flags;
use dra_tools::pcap::{PcapWriter, tshark_available};

/// Writes one TCP connection (the simulator is `sim_is_client`) and decodes it.
fn decode(name: &str, tap: &Tap, sim_is_client: bool) -> String {
    let mut w = PcapWriter::new(
        SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 1), 40_001),
        SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 2), 3868),
    );
    for (sent_by_sim, bytes) in tap.lock().expect("tap").iter() {
        if *sent_by_sim == sim_is_client {
            w.client_to_server(bytes);
        } else {
            w.server_to_client(bytes);
        }
    }
    let file = TempPath(
        std::env::temp_dir().join(format!("dra-agent-{name}-{}.pcap", std::process::id())),
    );
    w.write_to(&file.0).expect("write pcap");
    let out = Command::new("tshark")
        .args(["-n", "-V", "-r"])
        .arg(&file.0)
        .args([
            "-o",
            "diameter.tcp.port:3868",
            "-o",
            "tcp.check_checksum:TRUE",
        ])
        .output()
        .expect("tshark");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tshark_decodes_what_the_agent_sends() {
    if !tshark_available() {
        println!("SKIPPED tshark_decodes_what_the_agent_sends: tshark is not on PATH");
        return;
    }
    let server_tap: Tap = Tap::default();
    let client_tap: Tap = Tap::default();
    let lab = Lab::start(1, 0, None, "", Some(server_tap.clone())).await;
    let pgw = SimPeer::connect(
        lab.addr(),
        sim_config(&format!("pgw1.{REALM}"), REALM, &[GX, GY]),
        DRA_HOST,
        Some(client_tap.clone()),
    )
    .await
    .expect("open");
    pgw.request(dwr("pgw1.test.example", REALM))
        .await
        .expect("DWA");
    let a = pgw
        .request(ccr(
            "wire;1",
            GX,
            "pgw1.test.example",
            REALM,
            PCRF_REALM,
            cc::INITIAL,
            0,
        ))
        .await
        .expect("CCA");
    assert_eq!(a.result_code(), Some(2001));
    let mut marked = ccr(
        "wire;2",
        GX,
        "pgw1.test.example",
        REALM,
        PCRF_REALM,
        cc::INITIAL,
        0,
    );
    marked.flags |= flags::RATE_LIMIT_MARK;
    let a = pgw.request(marked).await.expect("3002");
    assert_eq!(a.result_code(), Some(3002));

    // Client side: the agent sent CEA, DWA, the relayed CCA and the 3002 CCA.
    let d = decode("client", &client_tap, true);
    assert_clean(&d);
    for needle in [
        "Command Code: Capabilities-Exchange (257)",
        "Command Code: Device-Watchdog (280)",
        "Command Code: Credit-Control (272)",
        "Origin-Host: dra.test.example",
        "Result-Code: DIAMETER_SUCCESS (2001)",
        "Result-Code: DIAMETER_UNABLE_TO_DELIVER (3002)",
        "Origin-Host: pcrf1.pcrf.test.example",
        "Session-Id: wire;2",
    ] {
        assert!(
            d.contains(needle),
            "missing {needle:?} in client-side decode:\n{d}"
        );
    }
    // Server side: the agent sent CER and the relayed CCR with Route-Record pgw1.
    let d = decode("server", &server_tap, false);
    assert_clean(&d);
    for needle in [
        "Command Code: Capabilities-Exchange (257)",
        "Origin-Host: dra.test.example",
        "Route-Record: pgw1.test.example",
        "Session-Id: wire;1",
    ] {
        assert!(
            d.contains(needle),
            "missing {needle:?} in server-side decode:\n{d}"
        );
    }
    assert!(
        !d.contains("Session-Id: wire;2"),
        "the marked request never went upstream"
    );
}

fn assert_clean(decoded: &str) {
    if let Some(problem) = dra_tools::pcap::tshark_problem(decoded) {
        panic!("{problem}");
    }
}
