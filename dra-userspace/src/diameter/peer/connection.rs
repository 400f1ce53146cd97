//! One Diameter transport connection to a peer: capabilities exchange, watchdog,
//! disconnect (RFC 6733 §5.3–§5.6, RFC 3539 §3.4). Sans-IO: see the module docs of
//! [`super`] for how a shell drives it.

use std::collections::VecDeque;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use dra_common::wire::{app, cmd};

use super::capabilities::{self, CapabilitiesError, CommonApplications, PeerIdentity};
use super::config::{PeerConfig, PeerConfigError};
use super::directory::{KnownPeer, PeerDirectory, Rejection};
use super::ids::IdGenerator;
use super::load;
use super::watchdog::{Watchdog, WatchdogOutput, WatchdogState};
use crate::diameter::dictionary::enums::disconnect_cause;
use crate::diameter::{
    Avp, Dictionary, Message, answer_for, avp_code as c, result_code, validate_request,
};
use crate::routing::{LoadInfo, SplitMix64};

/// Which end opened the transport connection (RFC 6733 §5.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// We connected and send the CER.
    Initiator,
    /// We accepted and wait for the CER.
    Responder,
}

/// Connection state, named after the RFC 6733 §5.6 peer state machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PeerState {
    /// Initiator: the transport connect is in progress (Wait-Conn-Ack).
    WaitConnAck,
    /// Responder: accepted, waiting for the CER.
    WaitCer,
    /// Responder: a CER passed every check and waits for the shell's decision
    /// ([`PeerConnection::accept_cer`], [`PeerConnection::reject_cer`],
    /// [`PeerConnection::abort`]); during an election this is Wait-Returns.
    CerReceived,
    /// Initiator: CER sent, waiting for the CEA (Wait-I-CEA).
    WaitCea,
    /// Capabilities exchanged (I-Open / R-Open).
    Open,
    /// DPR sent, waiting for the DPA (Closing).
    Closing,
    /// Finished (Closed). The shell closes the transport.
    Closed,
}

/// Disconnect-Cause of a DPR (RFC 6733 §5.4.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DisconnectCause {
    /// REBOOTING (0): a scheduled reboot; the receiver may reconnect.
    Rebooting,
    /// BUSY (1): the sender's resources are constrained; the receiver should not
    /// reconnect.
    Busy,
    /// DO_NOT_WANT_TO_TALK_TO_YOU (2): the connection is not needed; the receiver should
    /// not reconnect.
    DoNotWantToTalkToYou,
    /// Another value.
    Other(i32),
}

impl DisconnectCause {
    /// The Enumerated value on the wire.
    pub const fn code(self) -> i32 {
        match self {
            DisconnectCause::Rebooting => disconnect_cause::REBOOTING,
            DisconnectCause::Busy => disconnect_cause::BUSY,
            DisconnectCause::DoNotWantToTalkToYou => disconnect_cause::DO_NOT_WANT_TO_TALK_TO_YOU,
            DisconnectCause::Other(v) => v,
        }
    }

    /// The cause for a wire value.
    pub const fn from_code(code: i32) -> Self {
        match code {
            disconnect_cause::REBOOTING => DisconnectCause::Rebooting,
            disconnect_cause::BUSY => DisconnectCause::Busy,
            disconnect_cause::DO_NOT_WANT_TO_TALK_TO_YOU => DisconnectCause::DoNotWantToTalkToYou,
            v => DisconnectCause::Other(v),
        }
    }
}

/// Why a connection ended (carried by [`PeerEvent::Closed`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CloseReason {
    /// Responder: we answered the CER with this error Result-Code (3010 unknown peer or
    /// wrong address, 5010 no common application, 5005/5004/3xxx malformed CER, or the
    /// shell's [`PeerConnection::reject_cer`]).
    Refused {
        /// The CEA's Result-Code.
        result_code: u32,
    },
    /// Initiator: the peer's CEA carried this Result-Code instead of DIAMETER_SUCCESS.
    Rejected {
        /// The CEA's Result-Code.
        result_code: u32,
    },
    /// Initiator: a successful CEA that does not describe its sender properly.
    BadCea {
        /// What is wrong.
        error: CapabilitiesError,
    },
    /// Initiator: the CEA's Origin-Host is not a configured peer at this address.
    UnknownPeer {
        /// The directory's answer.
        rejection: Rejection,
    },
    /// Initiator: the CEA advertises no application in common with ours (RFC 6733 §5.3).
    NoCommonApplication,
    /// Responder: no CER within `cer_timeout`.
    CerTimeout,
    /// Initiator: no CEA within `cea_timeout` (RFC 6733 §5.6 Wait-I-CEA Timeout).
    CeaTimeout,
    /// Responder: the shell did not decide on a valid CER within `cea_timeout`
    /// (RFC 6733 §5.6 Wait-Returns Timeout).
    DecisionTimeout,
    /// A message other than CER/CEA before the connection was open (RFC 6733 §5.6
    /// I-Rcv-Non-CEA), or a CER where none belongs.
    UnexpectedMessage {
        /// Its command code.
        command_code: u32,
        /// It was a request.
        request: bool,
    },
    /// Initiator: we won the election and closed the connection we initiated (RFC 6733
    /// §5.6.4).
    ElectionWon,
    /// The shell called [`PeerConnection::abort`] (e.g. R-Disc after a lost election,
    /// R-Reject of a duplicate connection, shutdown).
    Aborted,
    /// Two watchdog intervals without an answer (RFC 3539 §3.4.1 DOWN).
    WatchdogDown,
    /// We sent DPR; the DPA came, or it timed out, or the peer closed first.
    LocalDisconnect {
        /// The cause we sent.
        cause: DisconnectCause,
    },
    /// The peer sent DPR and we answered DPA (RFC 6733 §5.4).
    PeerDisconnect {
        /// The Disconnect-Cause received, if readable.
        cause: Option<DisconnectCause>,
    },
    /// The transport failed or the peer closed it ([`PeerConnection::handle_closed`]).
    TransportClosed,
}

/// Advice for the shell on reconnecting to this peer (only meaningful for peers it
/// connects to).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reconnect {
    /// Connect again after this hold-off (Tc after failures, RFC 6733 §2.1). Create the
    /// new connection with [`ConnectionOptions::reopen`] set (RFC 3539 §3.4.1).
    After(Duration),
    /// The peer asked not to be reconnected: DPR with Disconnect-Cause BUSY or
    /// DO_NOT_WANT_TO_TALK_TO_YOU (RFC 6733 §5.4.3 "SHOULD NOT attempt reconnection").
    /// If local policy reconnects anyway, wait at least `hold_off`.
    PeerAskedNot {
        /// The Disconnect-Cause received.
        cause: DisconnectCause,
        /// Suggested minimum wait (`busy_hold_off` / `do_not_talk_hold_off`).
        hold_off: Duration,
    },
    /// Closed on purpose here (our DPR, the election, a refused CER, abort): do not
    /// reconnect because of this connection.
    No,
}

/// Something the shell (and the routing layer) should know about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerEvent {
    /// Capabilities exchanged: the connection is open (RFC 6733 §5.6 I-Open / R-Open).
    /// Unless the connection was created with `reopen`, the peer is in service now.
    Opened {
        /// The directory entry of the peer.
        peer: KnownPeer,
        /// What the peer said about itself.
        identity: Box<PeerIdentity>,
        /// The applications both ends support.
        applications: CommonApplications,
    },
    /// Initiator: the peer answered our CER with an error; [`PeerEvent::Closed`] follows.
    Rejected {
        /// The CEA's Result-Code.
        result_code: u32,
        /// The CEA's Error-Message, if any.
        error_message: Option<String>,
    },
    /// The watchdog went unanswered (RFC 3539 SUSPECT): stop sending new requests to
    /// this peer and fail its pending requests over to another.
    WatchdogSuspect,
    /// The peer is in service again (RFC 3539 OKAY after SUSPECT, or after three DWAs
    /// in REOPEN).
    WatchdogOkay,
    /// The watchdog gave up (RFC 3539 DOWN); [`PeerEvent::Closed`] follows.
    WatchdogDown,
    /// The peer reported its load (RFC 8583).
    LoadReport(LoadInfo),
    /// The connection is finished. Close the transport once everything
    /// [`PeerConnection::poll_transmit`] returned has been written; then drop this
    /// object. Emitted exactly once.
    Closed {
        /// Why.
        reason: CloseReason,
        /// Whether and when to connect again.
        reconnect: Reconnect,
    },
}

/// Result of [`PeerConnection::handle_message`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use = "application messages must be routed, and a received CER needs a decision"]
pub enum Handled {
    /// A base protocol message, dealt with here (answers are in `poll_transmit`).
    Consumed,
    /// An application message (or an unknown base command) for the shell to route. The
    /// watchdog has already counted it as traffic.
    Application(Message),
    /// Responder: the CER passed every check (RFC 6733 §5.3) and names this peer. Call
    /// [`PeerConnection::accept_cer`] (usual case), or run the election (RFC 6733
    /// §5.6.4, see the module docs), or [`PeerConnection::reject_cer`] /
    /// [`PeerConnection::abort`].
    CerReceived {
        /// The directory entry of the peer.
        peer: KnownPeer,
    },
}

/// Per-connection parameters that are not shared configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionOptions {
    /// Seed for this connection's randomness: watchdog jitter and identifier starts.
    pub seed: u64,
    /// Wall-clock seconds at agent start (read once by the shell); its low 12 bits start
    /// every End-to-End identifier (RFC 6733 §3).
    pub start_time_secs: u64,
    /// An earlier connection to this peer failed: the watchdog starts in DOWN and the
    /// open connection is REOPEN until three DWAs arrive (RFC 3539 §3.4.1).
    pub reopen: bool,
    /// Our RFC 8583 Load-Value (higher = less loaded) for DWAs; `None` sends no Load AVP.
    pub own_load: Option<u16>,
}

impl ConnectionOptions {
    /// Options for a first connection without a load report.
    pub const fn new(seed: u64, start_time_secs: u64) -> Self {
        ConnectionOptions {
            seed,
            start_time_secs,
            reopen: false,
            own_load: None,
        }
    }

    /// Sets [`ConnectionOptions::reopen`].
    #[must_use]
    pub const fn reopen(mut self, reopen: bool) -> Self {
        self.reopen = reopen;
        self
    }

    /// Sets [`ConnectionOptions::own_load`].
    #[must_use]
    pub const fn own_load(mut self, load_value: u16) -> Self {
        self.own_load = Some(load_value);
        self
    }
}

#[derive(Clone, Debug)]
struct OpenInfo {
    peer: KnownPeer,
    identity: PeerIdentity,
    applications: CommonApplications,
}

/// A CER that failed a check: what the CEA says.
struct Refusal {
    result_code: u32,
    error_message: Option<String>,
    failed_avp: Option<Avp>,
}

/// The peer state machine of one transport connection (RFC 6733 §5.6), with the
/// watchdog of RFC 3539 §3.4 and the DPR/DPA exchange of RFC 6733 §5.4. No I/O and no
/// clock: feed it with the `handle_*` methods, drain `poll_transmit` / `poll_event`, and
/// call `handle_timeout` at `poll_timeout`.
pub struct PeerConnection {
    config: Arc<PeerConfig>,
    directory: Arc<dyn PeerDirectory>,
    role: Role,
    remote: IpAddr,
    state: PeerState,
    rng: SplitMix64,
    ids: IdGenerator,
    watchdog: Watchdog,
    own_load: Option<u16>,
    open: Option<OpenInfo>,
    held_cer: Option<(Message, OpenInfo)>,
    /// Hop-by-Hop id of our CER (WaitCea) or DPR (Closing).
    outstanding: Option<u32>,
    local_cause: DisconnectCause,
    deadline: Option<Duration>,
    last_load: Option<LoadInfo>,
    transmits: VecDeque<Message>,
    events: VecDeque<PeerEvent>,
}

impl fmt::Debug for PeerConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeerConnection")
            .field("role", &self.role)
            .field("remote", &self.remote)
            .field("state", &self.state)
            .field("watchdog", &self.watchdog.state())
            .field("peer", &self.open.as_ref().map(|o| &o.peer.name))
            .finish_non_exhaustive()
    }
}

fn is_base(msg: &Message) -> bool {
    msg.application_id == app::COMMON
        && matches!(
            msg.command_code,
            cmd::CAPABILITIES_EXCHANGE | cmd::DEVICE_WATCHDOG | cmd::DISCONNECT_PEER
        )
}

impl PeerConnection {
    /// A connection with `remote`, opened by us ([`Role::Initiator`]) or accepted
    /// ([`Role::Responder`]). Call [`PeerConnection::handle_connected`] when the transport
    /// is up: an initiator sends its CER then; a responder starts its CER timer (call it
    /// at once).
    pub fn new(
        role: Role,
        config: Arc<PeerConfig>,
        directory: Arc<dyn PeerDirectory>,
        remote: IpAddr,
        options: ConnectionOptions,
    ) -> Result<Self, PeerConfigError> {
        config.validate()?;
        let mut rng = SplitMix64::new(options.seed);
        let ids = IdGenerator::new(options.start_time_secs, &mut rng);
        let watchdog = Watchdog::new(config.tw, config.tw_jitter, options.reopen);
        Ok(PeerConnection {
            config,
            directory,
            role,
            remote,
            state: match role {
                Role::Initiator => PeerState::WaitConnAck,
                Role::Responder => PeerState::WaitCer,
            },
            rng,
            ids,
            watchdog,
            own_load: options.own_load,
            open: None,
            held_cer: None,
            outstanding: None,
            local_cause: DisconnectCause::Rebooting,
            deadline: None,
            last_load: None,
            transmits: VecDeque::new(),
            events: VecDeque::new(),
        })
    }

    // ----- queries -----

    /// Initiator or responder.
    pub fn role(&self) -> Role {
        self.role
    }

    /// The transport's remote address.
    pub fn remote_address(&self) -> IpAddr {
        self.remote
    }

    /// The RFC 6733 §5.6 state.
    pub fn state(&self) -> PeerState {
        self.state
    }

    /// Capabilities exchanged and not closing.
    pub fn is_open(&self) -> bool {
        self.state == PeerState::Open
    }

    /// The RFC 3539 watchdog state (DOWN once closed).
    pub fn watchdog_state(&self) -> WatchdogState {
        self.watchdog.state()
    }

    /// Open and watchdog OKAY: the routing layer's "good state" (docs/architecture.md §6).
    pub fn in_service(&self) -> bool {
        self.is_open() && self.watchdog.state() == WatchdogState::Okay
    }

    /// What the peer said in its CER/CEA, once open (kept after close).
    pub fn peer_identity(&self) -> Option<&PeerIdentity> {
        self.open.as_ref().map(|o| &o.identity)
    }

    /// The directory entry of the peer, once open.
    pub fn known_peer(&self) -> Option<&KnownPeer> {
        self.open.as_ref().map(|o| &o.peer)
    }

    /// The applications both ends support, once open.
    pub fn applications(&self) -> Option<&CommonApplications> {
        self.open.as_ref().map(|o| &o.applications)
    }

    /// The latest RFC 8583 load report from the peer.
    pub fn last_load(&self) -> Option<LoadInfo> {
        self.last_load
    }

    /// Our Load-Value for DWAs.
    pub fn own_load(&self) -> Option<u16> {
        self.own_load
    }

    /// Changes our Load-Value for the following DWAs (higher = less loaded).
    pub fn set_own_load(&mut self, load_value: u16) {
        self.own_load = Some(load_value);
    }

    /// A Hop-by-Hop id for a request the shell sends over this connection (e.g. a relayed
    /// request, RFC 6733 §6.1.9); shared with the watchdog so ids never collide.
    pub fn next_hop_by_hop(&mut self) -> u32 {
        self.ids.next_hop_by_hop()
    }

    /// An End-to-End id for a request this node originates (RFC 6733 §3).
    pub fn next_end_to_end(&mut self) -> u32 {
        self.ids.next_end_to_end()
    }

    // ----- outputs -----

    /// The next message to write to the transport, in order.
    pub fn poll_transmit(&mut self) -> Option<Message> {
        self.transmits.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<PeerEvent> {
        self.events.pop_front()
    }

    /// When [`PeerConnection::handle_timeout`] must be called next (same clock as the
    /// `now` arguments); `None` when no timer runs.
    pub fn poll_timeout(&self) -> Option<Duration> {
        match self.state {
            PeerState::Closed => None,
            PeerState::Open => match (self.deadline, self.watchdog.deadline()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
            _ => self.deadline,
        }
    }

    // ----- inputs -----

    /// The transport is up. Initiator: sends the CER (RFC 6733 §5.6 I-Rcv-Conn-Ack:
    /// I-Snd-CER) and waits `cea_timeout` for the CEA. Responder: starts the
    /// `cer_timeout` for the CER.
    pub fn handle_connected(&mut self, now: Duration) {
        match (self.role, self.state) {
            (Role::Initiator, PeerState::WaitConnAck) => {
                let hbh = self.ids.next_hop_by_hop();
                let e2e = self.ids.next_end_to_end();
                self.transmits
                    .push_back(capabilities::build_cer(&self.config, hbh, e2e));
                self.outstanding = Some(hbh);
                self.state = PeerState::WaitCea;
                self.deadline = Some(now + self.config.cea_timeout);
            }
            (Role::Responder, PeerState::WaitCer) if self.deadline.is_none() => {
                self.deadline = Some(now + self.config.cer_timeout);
            }
            _ => {}
        }
    }

    /// A decoded message from the peer.
    pub fn handle_message(&mut self, now: Duration, msg: Message) -> Handled {
        match self.state {
            PeerState::Closed => Handled::Consumed,
            PeerState::WaitCer
                if msg.command_code == cmd::CAPABILITIES_EXCHANGE && msg.is_request() =>
            {
                self.process_cer(now, msg)
            }
            PeerState::WaitCea
                if msg.command_code == cmd::CAPABILITIES_EXCHANGE && !msg.is_request() =>
            {
                // RFC 6733 §6.2.1: an answer to no request of ours is discarded.
                if Some(msg.hop_by_hop) == self.outstanding {
                    self.process_cea(now, &msg);
                }
                Handled::Consumed
            }
            PeerState::Open | PeerState::Closing => self.handle_open_message(now, msg),
            // RFC 6733 §5.6: before Open only CER (responder) or CEA (initiator) may
            // arrive; anything else is an error that closes the connection.
            PeerState::WaitConnAck
            | PeerState::WaitCer
            | PeerState::CerReceived
            | PeerState::WaitCea => {
                self.close(
                    CloseReason::UnexpectedMessage {
                        command_code: msg.command_code,
                        request: msg.is_request(),
                    },
                    self.failure_reconnect(),
                );
                Handled::Consumed
            }
        }
    }

    /// Application traffic from the peer that did not pass through
    /// [`PeerConnection::handle_message`]: restarts the watchdog timer like any received
    /// message (RFC 3539 §3.4.1). Traffic we send does not count — only what the peer
    /// sends proves it alive.
    pub fn handle_traffic(&mut self, now: Duration) {
        if self.state == PeerState::Open {
            let out = self.watchdog.on_receive(now, None, &mut self.rng);
            self.apply_watchdog(out);
        }
    }

    /// The caller's clock reached `now`: runs whatever timer expired.
    pub fn handle_timeout(&mut self, now: Duration) {
        if self.deadline.is_some_and(|d| now >= d) {
            self.deadline = None;
            match self.state {
                PeerState::WaitCer => self.close(CloseReason::CerTimeout, Reconnect::No),
                PeerState::CerReceived => self.close(CloseReason::DecisionTimeout, Reconnect::No),
                PeerState::WaitCea => self.close(CloseReason::CeaTimeout, self.failure_reconnect()),
                PeerState::Closing => self.close(
                    CloseReason::LocalDisconnect {
                        cause: self.local_cause,
                    },
                    Reconnect::No,
                ),
                _ => {}
            }
        }
        if self.state == PeerState::Open {
            let out = self.watchdog.on_timeout(now, &mut self.rng);
            self.apply_watchdog(out);
        }
    }

    /// The transport failed or the peer closed it (RFC 6733 §5.6 I-/R-Peer-Disc).
    pub fn handle_closed(&mut self, _now: Duration) {
        match self.state {
            PeerState::Closed => {}
            PeerState::Closing => self.close(
                CloseReason::LocalDisconnect {
                    cause: self.local_cause,
                },
                Reconnect::No,
            ),
            _ => self.close(CloseReason::TransportClosed, self.failure_reconnect()),
        }
    }

    /// Closes the connection gracefully (RFC 6733 §5.4): DPR with `cause`, then wait
    /// `dpa_timeout` for the DPA. Before the connection is open there is nothing to
    /// negotiate and it closes at once.
    pub fn start_disconnect(&mut self, now: Duration, cause: DisconnectCause) {
        match self.state {
            PeerState::Open => {
                let hbh = self.ids.next_hop_by_hop();
                let e2e = self.ids.next_end_to_end();
                let dpr = Message::request(cmd::DISCONNECT_PEER, app::COMMON, hbh, e2e)
                    .with(Avp::utf8(c::ORIGIN_HOST, &self.config.origin_host).mandatory())
                    .with(Avp::utf8(c::ORIGIN_REALM, &self.config.origin_realm).mandatory())
                    .with(Avp::enumerated(c::DISCONNECT_CAUSE, cause.code()).mandatory());
                self.transmits.push_back(dpr);
                self.outstanding = Some(hbh);
                self.local_cause = cause;
                self.state = PeerState::Closing;
                self.deadline = Some(now + self.config.dpa_timeout);
            }
            PeerState::Closing | PeerState::Closed => {}
            _ => self.close(CloseReason::LocalDisconnect { cause }, Reconnect::No),
        }
    }

    /// Closes at once without DPR (RFC 6733 §5.6 I-Disc / R-Disc).
    pub fn abort(&mut self, _now: Duration) {
        if self.state != PeerState::Closed {
            self.close(CloseReason::Aborted, Reconnect::No);
        }
    }

    /// Responder, after [`Handled::CerReceived`]: answers CEA DIAMETER_SUCCESS with our
    /// identity; the connection is open (RFC 6733 §5.6 R-Accept, R-Snd-CEA). Ignored in
    /// any other state.
    pub fn accept_cer(&mut self, now: Duration) {
        if self.state != PeerState::CerReceived {
            return;
        }
        if let Some((cer, info)) = self.held_cer.take() {
            let cea = capabilities::build_cea(&self.config, &cer, result_code::SUCCESS, None, None);
            self.transmits.push_back(cea);
            self.open(now, info);
        }
    }

    /// Responder, after [`Handled::CerReceived`]: answers the CER with `result_code`
    /// (an error; a 2xxx code is replaced by 5012 DIAMETER_UNABLE_TO_COMPLY) and closes.
    /// Ignored in any other state.
    pub fn reject_cer(&mut self, _now: Duration, result_code: u32, error_message: Option<&str>) {
        if self.state != PeerState::CerReceived {
            return;
        }
        if let Some((cer, _)) = self.held_cer.take() {
            let code = if result_code::is_success(result_code) {
                result_code::UNABLE_TO_COMPLY
            } else {
                result_code
            };
            self.refuse(
                &cer,
                Refusal {
                    result_code: code,
                    error_message: error_message.map(str::to_owned),
                    failed_avp: None,
                },
            );
        }
    }

    /// Initiator waiting for its CEA while a CER from the same peer arrived on another
    /// connection: the outcome of [`election_won`] (RFC 6733 §5.6.4). `won`: "the winner
    /// of the election MUST close the connection it initiated" — this connection closes
    /// ([`CloseReason::ElectionWon`]). Lost: keep waiting for the CEA here (Wait-Returns).
    /// Ignored unless this is an initiator before Open.
    pub fn handle_election(&mut self, _now: Duration, won: bool) {
        let waiting = matches!(self.state, PeerState::WaitConnAck | PeerState::WaitCea);
        if self.role == Role::Initiator && waiting && won {
            self.close(CloseReason::ElectionWon, Reconnect::No);
        }
    }

    // ----- internals -----

    fn failure_reconnect(&self) -> Reconnect {
        Reconnect::After(self.config.tc)
    }

    fn close(&mut self, reason: CloseReason, reconnect: Reconnect) {
        self.state = PeerState::Closed;
        self.deadline = None;
        self.outstanding = None;
        self.held_cer = None;
        self.watchdog.connection_down();
        self.events
            .push_back(PeerEvent::Closed { reason, reconnect });
    }

    fn open(&mut self, now: Duration, info: OpenInfo) {
        self.state = PeerState::Open;
        self.deadline = None;
        self.outstanding = None;
        self.events.push_back(PeerEvent::Opened {
            peer: info.peer.clone(),
            identity: Box::new(info.identity.clone()),
            applications: info.applications.clone(),
        });
        self.open = Some(info);
        let out = self.watchdog.connection_up(now, &mut self.rng);
        self.apply_watchdog(out);
    }

    fn apply_watchdog(&mut self, out: WatchdogOutput) {
        match out {
            WatchdogOutput::Nothing => {}
            WatchdogOutput::SendDwr => {
                let hbh = self.ids.next_hop_by_hop();
                let e2e = self.ids.next_end_to_end();
                // RFC 6733 §5.5.1: DWR.
                let mut dwr = Message::request(cmd::DEVICE_WATCHDOG, app::COMMON, hbh, e2e)
                    .with(Avp::utf8(c::ORIGIN_HOST, &self.config.origin_host).mandatory())
                    .with(Avp::utf8(c::ORIGIN_REALM, &self.config.origin_realm).mandatory());
                if let Some(s) = self.config.origin_state_id {
                    dwr.push(Avp::u32(c::ORIGIN_STATE_ID, s).mandatory());
                }
                self.transmits.push_back(dwr);
                self.watchdog.dwr_sent(hbh);
            }
            WatchdogOutput::Suspect => self.events.push_back(PeerEvent::WatchdogSuspect),
            WatchdogOutput::Okay => self.events.push_back(PeerEvent::WatchdogOkay),
            WatchdogOutput::Down => {
                self.events.push_back(PeerEvent::WatchdogDown);
                self.close(CloseReason::WatchdogDown, self.failure_reconnect());
            }
        }
    }

    /// RFC 6733 §5.3 checks of a CER, in order: message validity (§7), identity, peer
    /// directory (3010), applications (5010).
    fn check_cer(&self, cer: &Message) -> Result<OpenInfo, Refusal> {
        if let Err(e) = validate_request(cer, Dictionary::standard(), &[]) {
            return Err(Refusal {
                result_code: e.result_code(),
                error_message: Some(e.to_string()),
                failed_avp: e.failed_avp().cloned(),
            });
        }
        let identity = PeerIdentity::from_message(cer).map_err(|e| Refusal {
            result_code: e.result_code(),
            error_message: Some(e.to_string()),
            failed_avp: Some(e.failed_avp()),
        })?;
        let peer = self
            .directory
            .lookup(&identity.origin_host, self.remote)
            .map_err(|r| Refusal {
                result_code: r.result_code(),
                error_message: Some(r.to_string()),
                failed_avp: None,
            })?;
        let applications = CommonApplications::negotiate(&self.config, &identity);
        if applications.is_empty() {
            return Err(Refusal {
                result_code: result_code::NO_COMMON_APPLICATION,
                error_message: Some("no application in common".to_owned()),
                failed_avp: None,
            });
        }
        Ok(OpenInfo {
            peer,
            identity,
            applications,
        })
    }

    fn refuse(&mut self, cer: &Message, refusal: Refusal) {
        let cea = capabilities::build_cea(
            &self.config,
            cer,
            refusal.result_code,
            refusal.error_message.as_deref(),
            refusal.failed_avp,
        );
        self.transmits.push_back(cea);
        self.close(
            CloseReason::Refused {
                result_code: refusal.result_code,
            },
            Reconnect::No,
        );
    }

    fn process_cer(&mut self, now: Duration, cer: Message) -> Handled {
        match self.check_cer(&cer) {
            Ok(info) => {
                let peer = info.peer.clone();
                self.held_cer = Some((cer, info));
                self.state = PeerState::CerReceived;
                self.deadline = Some(now + self.config.cea_timeout);
                Handled::CerReceived { peer }
            }
            Err(refusal) => {
                self.refuse(&cer, refusal);
                Handled::Consumed
            }
        }
    }

    fn process_cea(&mut self, now: Duration, cea: &Message) {
        self.outstanding = None;
        match cea.result_code() {
            Some(result_code::SUCCESS) => {}
            None => {
                let error = CapabilitiesError::MissingAvp {
                    code: c::RESULT_CODE,
                    name: "Result-Code",
                };
                self.close(CloseReason::BadCea { error }, self.failure_reconnect());
                return;
            }
            Some(code) => {
                let error_message = cea
                    .find(c::ERROR_MESSAGE)
                    .and_then(|a| a.as_utf8().ok())
                    .map(str::to_owned);
                self.events.push_back(PeerEvent::Rejected {
                    result_code: code,
                    error_message,
                });
                self.close(
                    CloseReason::Rejected { result_code: code },
                    self.failure_reconnect(),
                );
                return;
            }
        }
        let identity = match PeerIdentity::from_message(cea) {
            Ok(i) => i,
            Err(error) => {
                self.close(CloseReason::BadCea { error }, self.failure_reconnect());
                return;
            }
        };
        let peer = match self.directory.lookup(&identity.origin_host, self.remote) {
            Ok(p) => p,
            Err(rejection) => {
                self.close(
                    CloseReason::UnknownPeer { rejection },
                    self.failure_reconnect(),
                );
                return;
            }
        };
        let applications = CommonApplications::negotiate(&self.config, &identity);
        if applications.is_empty() {
            // RFC 6733 §5.3: nothing can be exchanged over this connection.
            self.close(CloseReason::NoCommonApplication, self.failure_reconnect());
            return;
        }
        self.open(
            now,
            OpenInfo {
                peer,
                identity,
                applications,
            },
        );
    }

    fn take_load(&mut self, now: Duration, msg: &Message) {
        let Some(open) = &self.open else { return };
        if let Some(value) = load::peer_load_value(msg, &open.identity.origin_host) {
            let info = LoadInfo {
                value,
                received_at: now,
            };
            self.last_load = Some(info);
            self.events.push_back(PeerEvent::LoadReport(info));
        }
    }

    /// Our 2001 answer to a base-protocol request (DWA, DPA).
    fn success_answer(&self, req: &Message) -> Message {
        answer_for(
            req,
            result_code::SUCCESS,
            &self.config.origin_host,
            &self.config.origin_realm,
            None,
            None,
        )
    }

    fn handle_open_message(&mut self, now: Duration, msg: Message) -> Handled {
        let base = is_base(&msg);
        if self.state == PeerState::Open {
            let dwa = (base && msg.command_code == cmd::DEVICE_WATCHDOG && !msg.is_request())
                .then_some(msg.hop_by_hop);
            let out = self.watchdog.on_receive(now, dwa, &mut self.rng);
            self.apply_watchdog(out);
        }
        self.take_load(now, &msg);
        if !base {
            return Handled::Application(msg);
        }
        match (msg.command_code, msg.is_request()) {
            (cmd::DEVICE_WATCHDOG, true) => {
                // RFC 6733 §5.5.2: DWA, plus our RFC 8583 PEER load report.
                let mut dwa = self.success_answer(&msg);
                if let Some(s) = self.config.origin_state_id {
                    dwa.push(Avp::u32(c::ORIGIN_STATE_ID, s).mandatory());
                }
                if let Some(v) = self.own_load {
                    dwa.push(load::peer_load_avp(v, &self.config.origin_host));
                }
                self.transmits.push_back(dwa);
            }
            (cmd::DISCONNECT_PEER, true) => {
                // RFC 6733 §5.4: answer DPA, then the transport goes.
                let dpa = self.success_answer(&msg);
                self.transmits.push_back(dpa);
                if self.state == PeerState::Closing {
                    // Both ends sent DPR at once: ours is answered by theirs.
                    self.close(
                        CloseReason::LocalDisconnect {
                            cause: self.local_cause,
                        },
                        Reconnect::No,
                    );
                } else {
                    let cause = msg
                        .find(c::DISCONNECT_CAUSE)
                        .and_then(|a| a.as_i32().ok())
                        .map(DisconnectCause::from_code);
                    let reconnect = match cause {
                        Some(cause @ DisconnectCause::Busy) => Reconnect::PeerAskedNot {
                            cause,
                            hold_off: self.config.busy_hold_off,
                        },
                        Some(cause @ DisconnectCause::DoNotWantToTalkToYou) => {
                            Reconnect::PeerAskedNot {
                                cause,
                                hold_off: self.config.do_not_talk_hold_off,
                            }
                        }
                        _ => self.failure_reconnect(),
                    };
                    self.close(CloseReason::PeerDisconnect { cause }, reconnect);
                }
            }
            (cmd::DISCONNECT_PEER, false)
                if self.state == PeerState::Closing && Some(msg.hop_by_hop) == self.outstanding =>
            {
                self.close(
                    CloseReason::LocalDisconnect {
                        cause: self.local_cause,
                    },
                    Reconnect::No,
                );
            }
            (cmd::CAPABILITIES_EXCHANGE, true) => {
                // RFC 6733 §5.6 R-Open/I-Open + Rcv-CER: answer with a CEA. A CER that
                // no longer passes the checks ends the connection.
                let same_peer = |info: &OpenInfo| {
                    self.open
                        .as_ref()
                        .is_some_and(|o| o.peer.id == info.peer.id)
                };
                match self.check_cer(&msg) {
                    Ok(info) if !same_peer(&info) => self.refuse(
                        &msg,
                        Refusal {
                            result_code: result_code::UNKNOWN_PEER,
                            error_message: Some(
                                "Origin-Host differs from the open connection's".to_owned(),
                            ),
                            failed_avp: None,
                        },
                    ),
                    Ok(info) => {
                        let cea = capabilities::build_cea(
                            &self.config,
                            &msg,
                            result_code::SUCCESS,
                            None,
                            None,
                        );
                        self.transmits.push_back(cea);
                        self.open = Some(info);
                    }
                    Err(refusal) => self.refuse(&msg, refusal),
                }
            }
            // DWA (counted above), an unmatched DPA, a late CEA (RFC 6733 §5.6
            // Process-CEA): nothing to do.
            _ => {}
        }
        Handled::Consumed
    }
}

/// RFC 6733 §5.6.4 election, run by a node that is waiting for the CEA on a connection
/// it initiated when a CER from the same peer arrives on another connection: the local
/// node wins when its Origin-Host "lexicographically succeeds" the peer's, compared as
/// octet strings with ASCII letters case-folded. Equal identities: nobody wins.
pub fn election_won(local_host: &str, peer_host: &str) -> bool {
    let fold = |s: &str| {
        s.bytes()
            .map(|b| b.to_ascii_lowercase())
            .collect::<Vec<u8>>()
    };
    fold(local_host) > fold(peer_host)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn election_compares_case_insensitively() {
        assert!(election_won("dra2.example.net", "dra1.example.net"));
        assert!(!election_won("dra1.example.net", "dra2.example.net"));
        assert!(election_won("DRA2.example.net", "dra1.EXAMPLE.net"));
        // A longer identity with the other as prefix succeeds it.
        assert!(election_won("dra1.example.net.", "dra1.example.net"));
        assert!(!election_won("Dra1.example.net", "dra1.example.net"));
        assert!(!election_won("dra1.example.net", "DRA1.example.net"));
    }

    #[test]
    fn connections_can_move_between_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<PeerConnection>();
        assert_send_sync::<PeerEvent>();
    }

    #[test]
    fn disconnect_cause_codes() {
        for c in [
            DisconnectCause::Rebooting,
            DisconnectCause::Busy,
            DisconnectCause::DoNotWantToTalkToYou,
            DisconnectCause::Other(9),
        ] {
            assert_eq!(DisconnectCause::from_code(c.code()), c);
        }
        assert_eq!(DisconnectCause::DoNotWantToTalkToYou.code(), 2);
    }
}
