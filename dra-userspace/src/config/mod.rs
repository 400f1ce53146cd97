//! The agent's configuration: one TOML file, validated as a whole.
//!
//! [`load`] / [`parse`] return either a [`Config`] whose values are already resolved
//! and checked (addresses are [`IpNet`]/[`SocketAddr`], durations are [`Duration`],
//! names are enums, every peer and group reference exists), or [`ConfigErrors`]: every
//! problem found, each as `file:line:column: reason`.
//!
//! [`load_for`] / [`parse_for`] (`dra check-config`, `dra run`) check more: that some
//! part of the [`Setup`] the config runs with enforces every limit (docs/config.md,
//! "Which part enforces a limit"). [`parse`] leaves that out, so that tests and tools
//! can build configs for one part alone (a TC fixture, an agent without XDP).
//!
//! The tables are named after the Cisco CPS vDRA CRD tables of the seed scenario
//! (peer / message rate limit profiles, dynamic peer rate limit profile, dynamic
//! throttling DB CPU profile). `docs/config.md` is the reference for every key.

/// Implements [`ConfigName`] for an enum: `config_names!(T { Variant => "name", ... })`.
macro_rules! config_names {
    ($t:ty { $($v:ident => $n:literal),* $(,)? }) => {
        impl $crate::config::ConfigName for $t {
            const ALL: &'static [Self] = &[$(<$t>::$v),*];
            fn name(self) -> &'static str {
                match self { $(<$t>::$v => $n),* }
            }
        }
    };
}

mod cpu_source;
pub mod diff;
mod error;
mod raw;
mod summary;
mod validate;
pub mod values;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use dra_common::maps::{Action, BucketConfig};
use dra_common::wire::{MsgClass, app, cmd};
use ipnet::IpNet;

pub use cpu_source::{CpuSource, ProcTarget};
pub use error::{ConfigError, ConfigErrors};
pub use values::RequestType;

/// Default Diameter port (RFC 6733 §2.1).
pub const DEFAULT_DIAMETER_PORT: u16 = 3868;
/// Default Result-Code of a rejected request: DIAMETER_UNABLE_TO_DELIVER (RFC 6733 §7.1.3).
pub const DEFAULT_RESULT_CODE: u32 = 3002;
/// Default product name (Product-Name AVP in CER/CEA).
pub const DEFAULT_PRODUCT_NAME: &str = "dra-xdp";

/// A validated configuration. Plain data: every reference has been checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// `[global]`.
    pub global: Global,
    /// `[fast_path]`.
    pub fast_path: FastPath,
    /// `[metrics]`.
    pub metrics: Metrics,
    /// `[control]`.
    pub control: Control,
    /// `[session_store]`: where Gx/Gy session bindings live (docs/architecture.md §9).
    pub session_store: SessionStore,
    /// `[[listener]]`, in file order.
    pub listeners: Vec<Listener>,
    /// `[[peer]]`, in file order.
    pub peers: Vec<Peer>,
    /// `[[peer_group]]`, in file order.
    pub peer_groups: Vec<PeerGroup>,
    /// `[[peer_rate_limit_profile]]`: overall limits of a peer or group.
    pub peer_rate_limits: Vec<PeerRateLimit>,
    /// `[[message_rate_limit_profile]]`: limits of one message class.
    pub message_rate_limits: Vec<MessageRateLimit>,
    /// `[[dynamic_peer_rate_limit_profile]]`: which peers/classes DRL throttles.
    pub dynamic_peer_rate_limits: Vec<DynamicPeerRateLimit>,
    /// `[dynamic_throttling_db_cpu_profile]`.
    pub db_cpu_profile: Option<DbCpuProfile>,
    /// `[[route]]`, in file order.
    pub routes: Vec<Route>,
    /// `[overload]`: the agent's own overload control.
    pub overload: Overload,
}

/// `[overload]`: how the agent protects itself past its own capacity
/// (docs/architecture.md §13, [`crate::overload`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Overload {
    /// On (the default) or off.
    pub enabled: bool,
    /// The controller's settings.
    pub settings: crate::overload::Settings,
    /// Every class's priority (RFC 7944 scale).
    pub priorities: crate::overload::Priorities,
}

impl Default for Overload {
    fn default() -> Self {
        Overload {
            enabled: true,
            settings: crate::overload::Settings::default(),
            priorities: validate::overload::default_priorities(8),
        }
    }
}

/// `[global]`: the agent's identity and global switches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Global {
    /// The agent's Origin-Host (DiameterIdentity).
    pub origin_host: String,
    /// The agent's Origin-Realm.
    pub origin_realm: String,
    /// Product-Name sent in CER/CEA.
    pub product_name: String,
    /// The global dynamic rate limiting switch (the seed's Policy Builder checkbox).
    /// When false, no peer is dynamically throttled, whatever the profiles say.
    pub dynamic_rate_limiting: bool,
    /// What the fast path (without XDP: the agent's limiter) does with Diameter-port
    /// traffic from unknown sources.
    pub unknown_peer: UnknownPeer,
    /// TCP/SCTP ports the fast path treats as Diameter.
    pub diameter_ports: Vec<u16>,
    /// The watchdog interval Tw of every peer connection (RFC 3539 §3.4.1): a DWR after
    /// this long without anything from the peer (±2 s, at most a quarter of it).
    pub watchdog: Duration,
    /// How long a (re)started agent waits for an open connection in every routed group
    /// before it calls itself ready, and holds requests for a group whose first
    /// connection is still opening (docs/architecture.md, "Readiness"). Zero: ready once
    /// the listeners are bound; nothing is held.
    pub startup_wait: Duration,
}

/// Policy for Diameter-port packets whose source is not a configured peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnknownPeer {
    /// Pass to the stack (the agent still rejects unknown peers at CER).
    Pass,
    /// Drop in XDP; without XDP the agent discards what such a connection sends.
    Drop,
}

/// `[fast_path]`: where the XDP/TC programs attach.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct FastPath {
    /// Ingress interface for XDP; `None` = do not attach (agent only).
    pub interface: Option<String>,
    /// XDP attach mode.
    pub xdp_mode: XdpMode,
    /// Where the TC egress program attaches (with or without XDP); `None` = no egress
    /// program (the agent's RLF still applies the groups' overall egress limits).
    pub egress_interface: Option<String>,
    /// What `dra run` does when the kernel cannot load the XDP programs.
    pub fallback: Fallback,
}

/// `[fast_path] fallback`: what `dra run` does when this kernel cannot load the XDP
/// programs (a feature they need is missing: `dra verify` names it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Fallback {
    /// Refuse to start, naming the missing feature: a host that looks limited is never
    /// left unlimited.
    #[default]
    None,
    /// Start without XDP: the agent's own limiter enforces the ingress limits (said
    /// once in the log and in `dra status`); a limit only XDP can enforce (a
    /// connection guard) is refused as without an interface.
    Userspace,
}

/// XDP attach mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum XdpMode {
    /// Native (driver) mode if the driver supports it, else generic (skb).
    #[default]
    Auto,
    /// Native (driver) mode only.
    Native,
    /// Generic (skb) mode.
    Skb,
}

/// `[metrics]`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Metrics {
    /// Prometheus HTTP endpoint; `None` = no metrics endpoint.
    pub address: Option<SocketAddr>,
}

/// `[session_store]`: Session-Id → server bindings, local or shared by several DRA hosts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionStore {
    /// Where bindings live.
    pub kind: StoreKind,
    /// `host:port` of the Redis server (`redis`) or of the cluster's seed nodes
    /// (`redis_cluster`); empty for `memory`.
    pub addresses: Vec<String>,
    /// Time-to-live of a binding, refreshed by every CCR-U (the session timeout).
    pub ttl: Duration,
    /// Bound on every store call (connecting included).
    pub timeout: Duration,
    /// Prefix of the store's keys (`<prefix><Session-Id>`).
    pub key_prefix: String,
    /// When a new binding is written.
    pub write: StoreWrite,
    /// What a request needing the store gets while the store fails.
    pub on_error: StoreOnError,
    /// Result-Code answered with `on_error = "reject"`.
    pub result_code: u32,
    /// Error-Message answered with `on_error = "reject"`.
    pub error_message: String,
    /// Bindings held in the local cache (the whole store for `memory`).
    pub cache_capacity: usize,
}

/// Default `[session_store] ttl`: a day, refreshed by every CCR-U.
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(24 * 3600);
/// Default `[session_store] timeout`.
pub const DEFAULT_STORE_TIMEOUT: Duration = Duration::from_millis(200);
/// Default `[session_store] key_prefix`.
pub const DEFAULT_KEY_PREFIX: &str = "dra:sess:";
/// Default `[session_store] result_code`: 3002 DIAMETER_UNABLE_TO_DELIVER.
pub const DEFAULT_STORE_RESULT_CODE: u32 = 3002;
/// Default `[session_store] error_message`.
pub const DEFAULT_STORE_ERROR_MESSAGE: &str = "session store unavailable";
/// Default `[session_store] cache_capacity`.
pub const DEFAULT_CACHE_CAPACITY: usize = 1_000_000;

impl Default for SessionStore {
    fn default() -> Self {
        Self {
            kind: StoreKind::Memory,
            addresses: Vec::new(),
            ttl: DEFAULT_SESSION_TTL,
            timeout: DEFAULT_STORE_TIMEOUT,
            key_prefix: DEFAULT_KEY_PREFIX.to_owned(),
            write: StoreWrite::BeforeForward,
            on_error: StoreOnError::Local,
            result_code: DEFAULT_STORE_RESULT_CODE,
            error_message: DEFAULT_STORE_ERROR_MESSAGE.to_owned(),
            cache_capacity: DEFAULT_CACHE_CAPACITY,
        }
    }
}

/// `[session_store] kind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StoreKind {
    /// In this agent only (one DRA host).
    Memory,
    /// One Redis server (standalone, or behind Sentinel-managed failover).
    Redis,
    /// A Redis Cluster (MOVED/ASK and replica failover handled by the client).
    RedisCluster,
}

/// `[session_store] write`: when a new binding (CCR-I, failover) reaches the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StoreWrite {
    /// Written and acknowledged before the request is forwarded, so a CCR-U reaching
    /// another DRA host a moment later finds it.
    BeforeForward,
    /// Forwarded at once, written in the background.
    Async,
}

/// `[session_store] on_error`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StoreOnError {
    /// Route with what this host knows and keep a local binding, written to the store
    /// when it is back.
    Local,
    /// Answer with `result_code` / `error_message`.
    Reject,
}

/// `[control]`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Control {
    /// Unix socket for status queries; `None` = no control socket.
    pub socket: Option<PathBuf>,
}

/// `[[listener]]`: where clients connect.
#[derive(Clone, Debug, PartialEq)]
pub struct Listener {
    /// Listening address.
    pub address: SocketAddr,
    /// Transport.
    pub transport: Transport,
    /// SCTP: the further local addresses the association may use (multihoming), on
    /// `address`'s port; empty for one address (and for TCP).
    pub multihome: Vec<IpAddr>,
    /// TLS from the first byte (RFC 6733 §13.1): its certificate, key and the CA the
    /// clients' certificates must chain to. `None`: plain TCP.
    pub tls: Option<Tls>,
}

/// `tls = { ... }` of a listener or of a peer (docs/config.md, "TLS").
#[derive(Clone, Debug, PartialEq)]
pub struct Tls {
    /// `cert`, `key`, `ca` as written: a listener's, or a peer's the agent dials.
    /// `None` for a peer that connects to the agent (its listener's are used).
    pub files: Option<TlsFiles>,
    /// What the files hold, read and checked when the config was loaded (a reload
    /// reads them again: new connections use the new ones).
    pub credentials: Option<crate::transport::tls::Credentials>,
    /// Peers: the name the peer's certificate must carry as a DNS subject alternative
    /// name; `None` = its `origin_host`.
    pub identity: Option<String>,
    /// Bound on the TLS handshake.
    pub handshake_timeout: Duration,
}

/// The three files of a `tls` table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// Certificate chain (PEM, end entity first).
    pub cert: PathBuf,
    /// Private key (PEM).
    pub key: PathBuf,
    /// CA certificates the other side's certificate must chain to (PEM).
    pub ca: PathBuf,
}

/// Transport of a listener or a peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Transport {
    /// TCP (RFC 6733 §2.1).
    #[default]
    Tcp,
    /// SCTP (RFC 6733 §2.1.1): one-to-one sockets, multihomed, PPID 46.
    Sctp,
}

/// `[[peer]]`: a Diameter peer the agent knows.
#[derive(Clone, Debug, PartialEq)]
pub struct Peer {
    /// Config name, used by every reference (`peer = "..."`).
    pub name: String,
    /// The peer's Origin-Host, checked at CER (RFC 6733 §5.3).
    pub origin_host: String,
    /// The peer's realm.
    pub realm: String,
    /// Source prefixes that identify the peer in the fast path (host addresses are
    /// `/32` or `/128`). May be empty (addresses then come from CER only).
    pub addresses: Vec<IpNet>,
    /// Client (connects to us) or server (we forward to it).
    pub role: Role,
    /// Peer group this peer belongs to.
    pub group: Option<String>,
    /// For servers: where the agent connects. `None` = the server connects to us.
    pub connect: Option<SocketAddr>,
    /// Connection guard: TCP SYN / SCTP INIT from this peer per second (burst), dropped
    /// in the fast path beyond it (stops reconnect storms before the stack).
    pub connection_guard: Option<Limit>,
    /// Weight within its group (for weighted selection), ≥ 1.
    pub weight: u32,
    /// DOIC towards this gateway (`doic = true`; clients only): the agent reports its
    /// own overload to it (docs/doic.md).
    pub doic: Option<Doic>,
    /// The peer speaks TLS (RFC 6733 §13.1): only over TLS, with a certificate that
    /// names it. `None`: plain TCP only.
    pub tls: Option<Tls>,
    /// How the peer connects or is dialled: TCP (also under TLS) or SCTP. A server
    /// dialled over SCTP is offered `connect` and its other host `addresses` on
    /// `connect`'s port (multihoming).
    pub transport: Transport,
}

impl Peer {
    /// The name a TLS peer's certificate must carry: its `identity`, else its
    /// Origin-Host. `None` for a plain peer.
    pub fn tls_name(&self) -> Option<&str> {
        let t = self.tls.as_ref()?;
        Some(t.identity.as_deref().unwrap_or(&self.origin_host))
    }
}

/// A gateway's DOIC settings (`doic`, `doic_algorithms`, `doic_validity`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Doic {
    /// Abatement algorithms offered, in order of preference (RFC 7683 loss, RFC 8582
    /// rate); the first the gateway supports is used, else loss.
    pub algorithms: Vec<crate::doic::Algorithm>,
    /// OC-Validity-Duration of the reports (whole seconds, 1 s ..= 24 h).
    pub validity: Duration,
}

impl Doic {
    /// Defaults: rate where the gateway supports it, else loss; 30 s validity
    /// (RFC 7683 §7.5's default).
    pub fn new() -> Doic {
        Doic {
            algorithms: vec![crate::doic::Algorithm::Rate, crate::doic::Algorithm::Loss],
            validity: Duration::from_secs(30),
        }
    }
}

impl Default for Doic {
    fn default() -> Self {
        Doic::new()
    }
}

/// Role of a peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// A gateway (PGW/SMF) sending requests to the agent.
    Client,
    /// A server (PCRF/OCS) the agent forwards requests to.
    Server,
}

/// `[[peer_group]]`: upstream selection and StarOS-style RLF settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerGroup {
    /// Config name.
    pub name: String,
    /// How long the agent waits for an upstream answer before answering 3002 itself.
    pub answer_timeout: Duration,
    /// How long a request may wait for egress tokens before it is rejected (0 = never
    /// queue: reject at once).
    pub delay_tolerance: Duration,
    /// Maximum number of requests queued for egress tokens.
    pub queue_limit: u32,
    /// Maximum pending (unanswered) requests per member peer.
    pub max_outstanding: Option<u32>,
    /// How a member is chosen.
    pub selection: Selection,
}

/// Member selection of a peer group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Selection {
    /// Round-robin among members in good state.
    #[default]
    RoundRobin,
    /// First member (file order) in good state.
    Priority,
    /// Member with the lowest reported load (RFC 8583 Load AVP).
    LeastLoaded,
    /// Random, weighted by `weight` × reported spare capacity.
    WeightedLoad,
    /// Power of two choices on reported load.
    P2c,
}

/// What a profile or route refers to.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    /// One peer, by name.
    Peer(String),
    /// A peer group, by name.
    Group(String),
}

impl Target {
    /// The referenced name.
    pub fn name(&self) -> &str {
        match self {
            Target::Peer(n) | Target::Group(n) => n,
        }
    }
}

/// Which way a limit applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Direction {
    /// Requests received from the peer/group (enforced in XDP, or by the agent's limiter
    /// without XDP).
    Ingress,
    /// Requests forwarded to the peer/group, after routing: a group's overall limit by
    /// the agent's RLF before sending, every other one (action drop) by the TC egress
    /// program as the request leaves.
    Egress,
}

/// A token bucket and what happens to requests that do not fit it.
#[derive(Clone, Debug, PartialEq)]
pub struct Limit {
    /// Messages per second (> 0).
    pub rate: f64,
    /// Bucket size in messages (≥ 1).
    pub burst: u32,
    /// Reject (answer with `result_code`) or drop.
    pub action: Action,
    /// Result-Code of the answer to a rejected request.
    pub result_code: u32,
    /// Error-Message of the answer to a rejected request.
    pub error_message: String,
}

impl Limit {
    /// The fast path's bucket for this limit at its static rate.
    pub fn bucket_config(&self) -> BucketConfig {
        BucketConfig::new(self.rate, self.burst, self.action)
    }
}

/// Default burst for a rate: 100 ms worth of messages, at least 1.
pub fn default_burst(rate: f64) -> u32 {
    burst_of(rate / 10.0)
}

/// Default burst of a limit: 100 ms worth of messages for `reject`, 200 ms for `drop`
/// (Linux's minimum TCP retransmission timeout: after a dropped segment the sender is
/// silent that long, and a smaller bucket would admit only a fraction of the rate;
/// docs/fast-path.md).
pub fn default_limit_burst(rate: f64, action: Action) -> u32 {
    match action {
        Action::Reject => default_burst(rate),
        Action::Drop => burst_of(rate / 5.0),
    }
}

fn burst_of(messages: f64) -> u32 {
    let b = messages.ceil();
    if b >= u32::MAX as f64 {
        u32::MAX
    } else if b >= 1.0 {
        b as u32
    } else {
        1
    }
}

/// `[[peer_rate_limit_profile]]`: the overall limit of a peer or group.
#[derive(Clone, Debug, PartialEq)]
pub struct PeerRateLimit {
    /// Limited peer or group.
    pub target: Target,
    /// Ingress or egress.
    pub direction: Direction,
    /// Bucket and action.
    pub limit: Limit,
}

/// A message class as the config names it: application, command, request type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MessageClass {
    /// Application id (e.g. [`app::GX`]).
    pub application: u32,
    /// Request command code (e.g. [`cmd::CREDIT_CONTROL`]).
    pub command: u32,
    /// CC-Request-Type for CCR; [`RequestType::Any`] otherwise.
    pub request_type: RequestType,
}

impl MessageClass {
    /// Gx CCR-I (the seed's default DRL class).
    pub const GX_CCR_I: MessageClass = MessageClass {
        application: app::GX,
        command: cmd::CREDIT_CONTROL,
        request_type: RequestType::Initial,
    };
    /// Gx CCR-T (the seed's default DRL class).
    pub const GX_CCR_T: MessageClass = MessageClass {
        application: app::GX,
        command: cmd::CREDIT_CONTROL,
        request_type: RequestType::Termination,
    };

    /// The fast path's class key (request type 0 = any).
    pub fn msg_class(&self) -> MsgClass {
        MsgClass::new(self.application, self.command, self.request_type.wire())
    }
}

impl std::fmt::Display for MessageClass {
    /// `Gx CCR-I`, `Gy CCR`, `app 5 cmd 300`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}{}",
            values::application_label(self.application),
            values::command_label(self.command),
            self.request_type.suffix()
        )
    }
}

/// `[[message_rate_limit_profile]]`: the limit of one message class of a peer or group.
#[derive(Clone, Debug, PartialEq)]
pub struct MessageRateLimit {
    /// Limited peer or group.
    pub target: Target,
    /// Ingress or egress.
    pub direction: Direction,
    /// The limited class.
    pub class: MessageClass,
    /// Bucket and action.
    pub limit: Limit,
}

impl MessageRateLimit {
    /// The fast path's class key of this profile.
    pub fn msg_class(&self) -> MsgClass {
        self.class.msg_class()
    }
}

/// `[[dynamic_peer_rate_limit_profile]]`: a DRL-enabled peer or group and the classes
/// dynamic throttling scales (each has a static ingress message profile).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DynamicPeerRateLimit {
    /// DRL-enabled peer or group.
    pub target: Target,
    /// Throttled classes (default Gx CCR-I and Gx CCR-T).
    pub classes: Vec<MessageClass>,
}

/// One row of the DB CPU profile: at `cpu` % or more, throttle by `throttle` %.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Threshold {
    /// CPU threshold, percent (0–100).
    pub cpu: u8,
    /// Throttle applied at or above it, percent (0–100).
    pub throttle: u8,
}

/// `[dynamic_throttling_db_cpu_profile]`.
#[derive(Clone, Debug, PartialEq)]
pub struct DbCpuProfile {
    /// Rows, cpu strictly increasing, throttle never decreasing.
    pub thresholds: Vec<Threshold>,
    /// Time continuously below the lowest threshold before each reversal step.
    pub reversal_hold_time: Duration,
    /// Percentage points removed from the throttle per reversal step (1–100).
    pub reversal_step: u8,
    /// How often the CPU is sampled.
    pub sample_period: Duration,
    /// Smoothing of samples (`s = α·x + (1−α)·s`); `None` = raw samples.
    pub ewma_alpha: Option<f64>,
    /// Samples missing in a row before the source counts as lost.
    pub missing_after: u32,
    /// What the controller does while the source is lost.
    pub on_missing: OnMissing,
    /// Where the CPU figure comes from.
    pub source: CpuSource,
}

/// Controller behaviour while CPU samples are missing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum OnMissing {
    /// Keep the current throttle.
    #[default]
    Hold,
    /// Release the throttle (back to static rates).
    Release,
}

/// Destination-Realm of a route.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RouteRealm {
    /// This realm (compared case-insensitively).
    Exact(String),
    /// `"*"`: any realm without an exact route ("peer-default").
    Any,
}

/// `[[route]]`: realm (+ application) routing to a peer or group (RFC 6733 §6.1.6).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// Destination-Realm.
    pub realm: RouteRealm,
    /// Application id; `None` = any application.
    pub application: Option<u32>,
    /// Where matching requests go.
    pub target: Target,
    /// Higher weights are used first; equal weights round-robin.
    pub weight: u32,
}

/// Enums spelled as fixed strings in the config file.
pub trait ConfigName: Copy + 'static {
    /// Every value, in the order error messages list them.
    const ALL: &'static [Self];
    /// The name the config file uses for this value.
    fn name(self) -> &'static str;
    /// The value with this config name.
    fn from_name(s: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|v| v.name() == s)
    }
}

config_names!(UnknownPeer { Pass => "pass", Drop => "drop" });
config_names!(XdpMode { Auto => "auto", Native => "native", Skb => "skb" });
config_names!(Fallback { None => "none", Userspace => "userspace" });
config_names!(Transport { Tcp => "tcp", Sctp => "sctp" });
config_names!(StoreKind { Memory => "memory", Redis => "redis", RedisCluster => "redis_cluster" });
config_names!(StoreWrite { BeforeForward => "before_forward", Async => "async" });
config_names!(StoreOnError { Local => "local", Reject => "reject" });
config_names!(Role { Client => "client", Server => "server" });
config_names!(Selection {
    RoundRobin => "round_robin",
    Priority => "priority",
    LeastLoaded => "least_loaded",
    WeightedLoad => "weighted_load",
    P2c => "p2c",
});
config_names!(Direction { Ingress => "ingress", Egress => "egress" });
config_names!(Action { Reject => "reject", Drop => "drop" });
config_names!(OnMissing { Hold => "hold", Release => "release" });

impl Config {
    /// What of this config speaks SCTP ("listener 198.18.1.1:3868", "peer \"pcrf1\""),
    /// which the kernel must support.
    pub fn sctp_users(&self) -> Vec<String> {
        let listeners = self
            .listeners
            .iter()
            .filter(|l| l.transport == Transport::Sctp)
            .map(|l| format!("listener {}", l.address));
        let dialled = self
            .peers
            .iter()
            .filter(|p| p.transport == Transport::Sctp && p.connect.is_some())
            .map(|p| format!("peer \"{}\"", p.name));
        listeners.chain(dialled).collect()
    }
}

impl Config {
    /// The peer with this name.
    pub fn peer(&self, name: &str) -> Option<&Peer> {
        self.peers.iter().find(|p| p.name == name)
    }

    /// The group with this name.
    pub fn group(&self, name: &str) -> Option<&PeerGroup> {
        self.peer_groups.iter().find(|g| g.name == name)
    }

    /// Members of a group, in file order.
    pub fn group_members<'a>(&'a self, group: &'a str) -> impl Iterator<Item = &'a Peer> + 'a {
        self.peers
            .iter()
            .filter(move |p| p.group.as_deref() == Some(group))
    }

    /// The DRL profile covering a peer: its own, else its group's.
    pub fn dynamic_profile_for_peer(&self, peer: &str) -> Option<&DynamicPeerRateLimit> {
        let own = Target::Peer(peer.to_string());
        self.dynamic_peer_rate_limits
            .iter()
            .find(|d| d.target == own)
            .or_else(|| {
                let group = self.peer(peer)?.group.clone()?;
                let group = Target::Group(group);
                self.dynamic_peer_rate_limits
                    .iter()
                    .find(|d| d.target == group)
            })
    }

    /// A one-screen human summary: identity, listeners, peers, groups, limits, DRL,
    /// DB CPU profile, routes.
    pub fn summary(&self) -> String {
        summary::render(self)
    }

    /// Every limit and the part that enforces it (docs/config.md, "Which part enforces
    /// a limit"), one `(limit, part)` each: `xdp` attached (`Some(true)`), not
    /// (`Some(false)`), or not known (`None`: `dra check-config` on a file without
    /// `[fast_path] interface`).
    pub fn enforced_by(&self, xdp: Option<bool>) -> Vec<(String, &'static str)> {
        let name = |t: &Target| match t {
            Target::Peer(n) => n.clone(),
            Target::Group(n) => format!("group {n}"),
        };
        let part = |t: &Target, d: Direction, overall: bool| {
            let group_overall = overall && matches!(t, Target::Group(_));
            validate::enforcement::part(self, t, d, group_overall, xdp)
        };
        let overall = self.peer_rate_limits.iter().map(|p| {
            (
                format!("{} {} overall", p.direction.name(), name(&p.target)),
                part(&p.target, p.direction, true),
            )
        });
        let class = self.message_rate_limits.iter().map(|m| {
            (
                format!("{} {} {}", m.direction.name(), name(&m.target), m.class),
                part(&m.target, m.direction, false),
            )
        });
        let guards = self
            .peers
            .iter()
            .filter(|p| p.connection_guard.is_some())
            .map(|p| (format!("connection_rate {}", p.name), "XDP"));
        overall.chain(class).chain(guards).collect()
    }

    /// Valid but probably unintended settings, one line each (printed by `dra
    /// check-config` and logged by `dra run`).
    pub fn warnings(&self) -> Vec<String> {
        summary::warnings(self)
    }
}

/// What `dra` runs a config with, as far as it decides which part enforces each
/// limit ([`parse_for`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Setup {
    /// `dra check-config`: only the file is known; where `[fast_path] interface` is not
    /// set, `dra run --iface` may still add XDP.
    File,
    /// `dra run`, with `--iface` (which overrides `[fast_path] interface`) or without.
    Run {
        /// The `--iface` given.
        iface: Option<String>,
    },
    /// `dra run` on a kernel that cannot load the XDP programs, with `[fast_path]
    /// fallback = "userspace"`: the agent's limiter enforces the ingress limits,
    /// whatever the interface.
    Fallback,
}

/// A config that passed [`parse_for`]: valid, and every limit enforced by its setup.
#[derive(Clone, Debug, PartialEq)]
pub struct Checked {
    /// The config.
    pub config: Config,
    /// Limits enforced only under conditions the file cannot state (a command-line
    /// flag, where traffic is routed): one positioned line each, printed by `dra
    /// check-config` and logged by `dra run` as warnings.
    pub warnings: Vec<ConfigError>,
}

fn read(path: &Path) -> Result<(String, String), ConfigErrors> {
    let file = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(text) => Ok((text, file)),
        Err(e) => Err(ConfigErrors {
            errors: vec![ConfigError {
                file,
                line: 0,
                column: 0,
                message: format!("cannot read config: {e}"),
            }],
        }),
    }
}

/// Reads and validates a config file. Errors name the file as given.
pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
    let (text, file) = read(path)?;
    parse(&text, &file)
}

/// [`load`], then the enforcement check of [`parse_for`].
pub fn load_for(path: &Path, setup: &Setup) -> Result<Checked, ConfigErrors> {
    let (text, file) = read(path)?;
    parse_for(&text, &file, setup)
}

/// Parses and validates config text; `file_name` is used in error messages. Does not
/// check that the limits are enforced ([`parse_for`] does).
pub fn parse(text: &str, file_name: &str) -> Result<Config, ConfigErrors> {
    parse_with(text, file_name, None).map(|c| c.config)
}

/// [`parse`], then — when the file is valid — that some part of `setup` enforces every
/// limit: a limit nothing would enforce (e.g. a per-peer egress `drop` limit without
/// `[fast_path] egress_interface`, an ingress limit on a peer without addresses, a
/// `connection_rate` when `dra run` has no XDP interface) is an error at its position;
/// one enforced only under conditions the file cannot state is a warning.
pub fn parse_for(text: &str, file_name: &str, setup: &Setup) -> Result<Checked, ConfigErrors> {
    parse_with(text, file_name, Some(setup))
}

fn parse_with(text: &str, file_name: &str, setup: Option<&Setup>) -> Result<Checked, ConfigErrors> {
    let mut errors = error::Errors::new(file_name, text);
    let doc = match toml::de::DeTable::parse(text) {
        Ok(doc) => doc,
        Err(e) => {
            errors.toml(&e);
            return Err(errors.finish());
        }
    };
    let raw = raw::RawConfig::from_document(doc, &mut errors);
    match validate::validate(raw, &mut errors, setup) {
        Some(config) if errors.is_empty() => Ok(Checked {
            config,
            warnings: errors.take_warnings(),
        }),
        _ => Err(errors.finish()),
    }
}

#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;
