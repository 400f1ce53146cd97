//! What the agent puts on the wire, decoded by tshark's Diameter dissector: CEA and DWA
//! to a client, relayed answers and a 3002 answer to a marked request; CER and relayed
//! requests (Route-Record appended) to a server.

mod support;

use dra_common::wire::flags;
use support::agent::*;
use support::{assert_clean, assert_decoded, require_tshark, tshark_decode};

/// tshark's decode of what the simulator (on the client side when `sim_is_client`)
/// wrote and read, as one TCP connection.
fn decode(name: &str, tap: &Tap, sim_is_client: bool) -> String {
    let exchange: Vec<(bool, Vec<u8>)> = tap
        .lock()
        .expect("tap")
        .iter()
        .map(|(sent_by_sim, bytes)| (*sent_by_sim == sim_is_client, bytes.clone()))
        .collect();
    tshark_decode(&format!("agent-{name}"), &exchange)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tshark_decodes_what_the_agent_sends() {
    require_tshark();
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
        .request(pgw1_gx_ccr("wire;1", cc::INITIAL, 0))
        .await
        .expect("CCA");
    assert_eq!(a.result_code(), Some(2001));
    let mut marked = pgw1_gx_ccr("wire;2", cc::INITIAL, 0);
    marked.flags |= flags::RATE_LIMIT_MARK;
    let a = pgw.request(marked).await.expect("3002");
    assert_eq!(a.result_code(), Some(3002));

    // Client side: the agent sent CEA, DWA, the relayed CCA and the 3002 CCA.
    let d = decode("client", &client_tap, true);
    assert_clean(&d);
    assert_decoded(
        &d,
        "the client side",
        &[
            "Command Code: Capabilities-Exchange (257)",
            "Command Code: Device-Watchdog (280)",
            "Command Code: Credit-Control (272)",
            "Origin-Host: dra.test.example",
            "Result-Code: DIAMETER_SUCCESS (2001)",
            "Result-Code: DIAMETER_UNABLE_TO_DELIVER (3002)",
            "Origin-Host: pcrf1.pcrf.test.example",
            "Session-Id: wire;2",
        ],
    );
    // Server side: the agent sent CER and the relayed CCR with Route-Record pgw1.
    let d = decode("server", &server_tap, false);
    assert_clean(&d);
    assert_decoded(
        &d,
        "the server side",
        &[
            "Command Code: Capabilities-Exchange (257)",
            "Origin-Host: dra.test.example",
            "Route-Record: pgw1.test.example",
            "Session-Id: wire;1",
        ],
    );
    assert!(
        !d.contains("Session-Id: wire;2"),
        "the marked request never went upstream"
    );
}
