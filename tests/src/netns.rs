//! Network namespaces for tests: the guards of the `netlab` crate (every namespace a test
//! creates is deleted when its guard drops, also when the test panics) and the
//! three-namespace topology most tests use.

pub use netlab::{Netns, VethPair, sh, unique};

/// A gateway, the agent and a server, each in a namespace of its own (named after
/// `prefix` with `g`, `d` and `s` appended): gw ⇄ dra on 198.18.`client_net`.0/24
/// (gw .2, dra .1) and dra ⇄ srv on 198.18.`server_net`.0/24 (dra .1, srv .2).
pub struct GwDraSrv {
    pub gw: Netns,
    pub dra: Netns,
    pub srv: Netns,
    /// gw (`a_if`) ⇄ dra (`b_if`: the interface the fast path attaches to).
    pub client: VethPair,
    /// dra (`a_if`: the servers' side) ⇄ srv (`b_if`).
    pub server: VethPair,
}

impl GwDraSrv {
    pub fn new(prefix: &str, client_net: u8, server_net: u8) -> GwDraSrv {
        let gw = Netns::new(&format!("{prefix}g")).unwrap();
        let dra = Netns::new(&format!("{prefix}d")).unwrap();
        let srv = Netns::new(&format!("{prefix}s")).unwrap();
        let net = |n: u8, host: u8| format!("198.18.{n}.{host}/24");
        let client = VethPair::new(&gw, &net(client_net, 2), &dra, &net(client_net, 1)).unwrap();
        let server = VethPair::new(&dra, &net(server_net, 1), &srv, &net(server_net, 2)).unwrap();
        GwDraSrv {
            gw,
            dra,
            srv,
            client,
            server,
        }
    }

    /// Full checksums on the gateway's link: computed by the gateway's stack (no TX
    /// offload) and verified by the agent's on receive, so that a wrong incremental
    /// checksum update by the fast path stalls the connection instead of passing
    /// unnoticed (and SCTP's CRC32c is computed, not offloaded).
    pub fn full_checksums(&self) {
        self.gw
            .exec(&["ethtool", "-K", &self.client.a_if, "tx", "off"])
            .unwrap();
        self.dra
            .exec(&["ethtool", "-K", &self.client.b_if, "rx", "off"])
            .unwrap();
    }
}
