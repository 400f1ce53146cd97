//! Test harness for the `peer_*` tests: two `PeerConnection`s joined by a simulated
//! transport on fake time. Every message goes through `encode` → `decode`, so the wire
//! form is exercised; the harness plays the shell (writes transmits, closes the
//! transport after `Closed`, runs timers).
#![allow(dead_code)]

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use dra::diameter::peer::{
    ApplicationId, ConnectionOptions, Handled, KnownPeer, PeerConfig, PeerConnection, PeerEvent,
    Role, StaticPeerDirectory, VendorSpecificApplicationId,
};
use dra::diameter::{Message, decode, vendor};
use dra::routing::PeerId;
use dra_common::wire::app;

pub const PGW_HOST: &str = "pgw1.epc.example.net";
pub const DRA_HOST: &str = "dra1.epc.example.net";
pub const PCRF_HOST: &str = "pcrf1.epc.example.net";
pub const REALM: &str = "epc.example.net";
pub const PGW_ADDR: &str = "198.18.0.1";
pub const PGW_ADDR6: &str = "2001:db8::1";
pub const DRA_ADDR: &str = "198.18.0.2";
pub const PCRF_ADDR: &str = "198.18.0.3";
/// Wall-clock seconds handed to the connections for End-to-End ids.
pub const START_TIME: u64 = 1_700_000_000;

pub fn ip(s: &str) -> IpAddr {
    s.parse().expect("address")
}

/// A PGW: Gy as Auth-Application-Id, Gx as 3GPP Vendor-Specific-Application-Id.
pub fn pgw_config() -> PeerConfig {
    let mut c = PeerConfig::new(PGW_HOST, REALM, vec![ip(PGW_ADDR), ip(PGW_ADDR6)]);
    c.vendor_id = vendor::TGPP;
    c.product_name = "pgw-sim".to_owned();
    c.firmware_revision = Some(3);
    c.origin_state_id = Some(17);
    c.supported_vendor_ids = vec![vendor::TGPP];
    c.auth_application_ids = vec![app::GY];
    c.vendor_specific_application_ids = vec![VendorSpecificApplicationId {
        vendor_id: vendor::TGPP,
        application: ApplicationId::Auth(app::GX),
    }];
    c
}

/// The DRA: a relay (advertises 0xffffffff).
pub fn dra_config() -> PeerConfig {
    PeerConfig::new(DRA_HOST, REALM, vec![ip(DRA_ADDR)])
}

/// A PCRF serving Gx only.
pub fn pcrf_config() -> PeerConfig {
    let mut c = PeerConfig::new(PCRF_HOST, REALM, vec![ip(PCRF_ADDR)]);
    c.vendor_id = vendor::TGPP;
    c.product_name = "pcrf-sim".to_owned();
    c.auth_application_ids = vec![app::GX];
    c
}

/// A directory with one peer allowed from the given ranges.
pub fn directory(id: usize, name: &str, nets: &[&str]) -> Arc<StaticPeerDirectory> {
    Arc::new(StaticPeerDirectory::new().with(
        PeerId(id),
        name,
        nets.iter().map(|n| n.parse().expect("CIDR")),
    ))
}

/// One message as it crossed (or failed to cross) the simulated transport.
#[derive(Clone, Debug)]
pub struct Wire {
    pub at: Duration,
    pub from_client: bool,
    pub msg: Message,
    pub delivered: bool,
}

/// One end: the connection plus what the shell saw.
pub struct End {
    pub conn: PeerConnection,
    pub events: Vec<(Duration, PeerEvent)>,
    pub app_messages: Vec<Message>,
    /// Answer a valid CER at once (the shell's usual decision).
    pub auto_accept: bool,
    /// A `CerReceived` waiting for a decision.
    pub pending_cer: Option<KnownPeer>,
    /// The shell closed this end's transport (after `Closed`).
    pub closed: bool,
}

impl End {
    fn new(conn: PeerConnection) -> Self {
        End {
            conn,
            events: Vec::new(),
            app_messages: Vec::new(),
            auto_accept: true,
            pending_cer: None,
            closed: false,
        }
    }

    /// Events without their times.
    pub fn event_list(&self) -> Vec<PeerEvent> {
        self.events.iter().map(|(_, e)| e.clone()).collect()
    }

    /// The `Closed` event, if any.
    pub fn closed_event(&self) -> Option<PeerEvent> {
        self.event_list()
            .into_iter()
            .find(|e| matches!(e, PeerEvent::Closed { .. }))
    }

    pub fn count(&self, f: impl Fn(&PeerEvent) -> bool) -> usize {
        self.events.iter().filter(|(_, e)| f(e)).count()
    }
}

/// A client (initiator) and a server (responder) on one simulated TCP connection.
pub struct Pair {
    pub now: Duration,
    pub client: End,
    pub server: End,
    pub wire: Vec<Wire>,
    /// Lose everything the server sends.
    pub drop_to_client: bool,
    /// Lose everything the client sends.
    pub drop_to_server: bool,
    transport_down: bool,
}

impl Pair {
    /// `client_cfg` connects from `client_addr` to a server configured with `server_cfg`
    /// at `server_addr`; each side checks the other with its directory.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client_cfg: PeerConfig,
        client_dir: Arc<StaticPeerDirectory>,
        client_opts: ConnectionOptions,
        client_addr: &str,
        server_cfg: PeerConfig,
        server_dir: Arc<StaticPeerDirectory>,
        server_opts: ConnectionOptions,
        server_addr: &str,
    ) -> Pair {
        let (client_cfg, server_cfg) = (Arc::new(client_cfg), Arc::new(server_cfg));
        let client = PeerConnection::new(
            Role::Initiator,
            client_cfg,
            client_dir,
            ip(server_addr),
            client_opts,
        );
        let server = PeerConnection::new(
            Role::Responder,
            server_cfg,
            server_dir,
            ip(client_addr),
            server_opts,
        );
        Pair {
            now: Duration::from_secs(1_000),
            client: End::new(client.expect("client config")),
            server: End::new(server.expect("server config")),
            wire: Vec::new(),
            drop_to_client: false,
            drop_to_server: false,
            transport_down: false,
        }
    }

    /// PGW → DRA, both knowing each other, default options (random seeds 1 and 2).
    pub fn pgw_to_dra() -> Pair {
        Self::pgw_to_dra_with(
            pgw_config(),
            dra_config(),
            ConnectionOptions::new(1, START_TIME),
        )
    }

    /// PGW → DRA with the given configs and client options.
    pub fn pgw_to_dra_with(pgw: PeerConfig, dra: PeerConfig, pgw_opts: ConnectionOptions) -> Pair {
        let dra_directory = directory(7, PGW_HOST, &["198.18.0.0/24", "2001:db8::/32"]);
        Self::pgw_to_dra_in(pgw, dra, pgw_opts, dra_directory)
    }

    /// PGW → DRA with the given configs and client options, the DRA knowing its peers
    /// from `dra_directory`.
    pub fn pgw_to_dra_in(
        pgw: PeerConfig,
        dra: PeerConfig,
        pgw_opts: ConnectionOptions,
        dra_directory: Arc<StaticPeerDirectory>,
    ) -> Pair {
        let dra_opts = ConnectionOptions::new(2, START_TIME);
        Self::pgw_to_dra_full(pgw, pgw_opts, dra, dra_directory, dra_opts)
    }

    /// PGW → DRA with each side's config and options given, the DRA knowing its peers
    /// from `dra_directory` (the PGW knows the DRA).
    pub fn pgw_to_dra_full(
        pgw: PeerConfig,
        pgw_opts: ConnectionOptions,
        dra: PeerConfig,
        dra_directory: Arc<StaticPeerDirectory>,
        dra_opts: ConnectionOptions,
    ) -> Pair {
        Pair::new(
            pgw,
            directory(0, DRA_HOST, &["198.18.0.2/32"]),
            pgw_opts,
            PGW_ADDR,
            dra,
            dra_directory,
            dra_opts,
            DRA_ADDR,
        )
    }

    /// Transport up on both ends, then exchange until quiet.
    pub fn connect(&mut self) {
        self.client.conn.handle_connected(self.now);
        self.server.conn.handle_connected(self.now);
        self.drive();
    }

    fn end(&mut self, client: bool) -> &mut End {
        if client {
            &mut self.client
        } else {
            &mut self.server
        }
    }

    /// Delivers `msg` (after encode/decode) to the client (`to_client`) or the server,
    /// as the shell would. Logged in `wire`.
    pub fn deliver(&mut self, to_client: bool, msg: Message) {
        let bytes = msg.encode();
        let decoded = decode(&bytes).expect("our encoding decodes");
        assert_eq!(decoded, msg, "encode/decode round trip");
        let dropped = if to_client {
            self.drop_to_client
        } else {
            self.drop_to_server
        };
        let now = self.now;
        let delivered = !dropped && !self.transport_down;
        self.wire.push(Wire {
            at: now,
            from_client: !to_client,
            msg: decoded.clone(),
            delivered,
        });
        if !delivered {
            return;
        }
        let end = self.end(to_client);
        match end.conn.handle_message(now, decoded) {
            Handled::Consumed => {}
            Handled::Application(m) => end.app_messages.push(m),
            Handled::CerReceived { peer } => {
                if end.auto_accept {
                    end.conn.accept_cer(now);
                } else {
                    end.pending_cer = Some(peer);
                }
            }
        }
    }

    /// Moves transmits across and collects events until nothing happens; closes the
    /// transport after an end reports `Closed` (its pending writes go first).
    pub fn drive(&mut self) {
        loop {
            let mut progress = false;
            for from_client in [true, false] {
                while let Some(m) = self.end(from_client).conn.poll_transmit() {
                    progress = true;
                    self.deliver(!from_client, m);
                }
            }
            let now = self.now;
            for client in [true, false] {
                let end = self.end(client);
                while let Some(e) = end.conn.poll_event() {
                    progress = true;
                    if matches!(e, PeerEvent::Closed { .. }) {
                        end.closed = true;
                    }
                    end.events.push((now, e));
                }
            }
            if !self.transport_down && (self.client.closed || self.server.closed) {
                self.transport_down = true;
                progress = true;
                for client in [true, false] {
                    let end = self.end(client);
                    if !end.closed {
                        end.conn.handle_closed(now);
                    }
                }
            }
            if !progress {
                break;
            }
        }
    }

    /// The earliest timer of either end.
    pub fn next_timeout(&self) -> Option<Duration> {
        [
            self.client.conn.poll_timeout(),
            self.server.conn.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Runs every timer due up to `t`, in time order, then sets the clock to `t`.
    pub fn run_until(&mut self, t: Duration) {
        while let Some(d) = self.next_timeout().filter(|&d| d <= t) {
            self.now = self.now.max(d);
            let now = self.now;
            self.client.conn.handle_timeout(now);
            self.server.conn.handle_timeout(now);
            self.drive();
        }
        self.now = self.now.max(t);
    }

    /// `run_until(now + dt)`.
    pub fn advance(&mut self, dt: Duration) {
        self.run_until(self.now + dt);
    }

    /// Messages of `command_code` with the given R bit, sent by the client or server.
    pub fn sent(&self, from_client: bool, command_code: u32, request: bool) -> Vec<&Wire> {
        self.wire
            .iter()
            .filter(|w| {
                w.from_client == from_client
                    && w.msg.command_code == command_code
                    && w.msg.is_request() == request
            })
            .collect()
    }

    /// (sender is client, command code, is request) of every message, in order.
    pub fn wire_summary(&self) -> Vec<(bool, u32, bool)> {
        self.wire
            .iter()
            .map(|w| (w.from_client, w.msg.command_code, w.msg.is_request()))
            .collect()
    }
}
