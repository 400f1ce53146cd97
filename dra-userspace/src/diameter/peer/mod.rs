//! The Diameter peer state machine, sans-IO: one [`PeerConnection`] per transport
//! connection (RFC 6733 §5.6), with the capabilities exchange (§5.3), the watchdog of
//! RFC 3539 §3.4 (§5.5), disconnection (§5.4), the election (§5.6.4) and RFC 8583 load
//! reports on DWA.
//!
//! Nothing here reads a clock or touches a socket. Time is a `Duration` since any start
//! the shell likes, passed into every input; randomness (watchdog jitter, identifier
//! starts) comes from the seed in [`ConnectionOptions`].
//!
//! # Driving a connection (the shell's loop)
//!
//! ```text
//! create   PeerConnection::new(Role::Initiator, cfg, dir, remote, opts)   // we connect
//!          PeerConnection::new(Role::Responder, cfg, dir, remote, opts)   // we accepted
//! inputs   handle_connected(now)          transport up (initiator: CER goes out)
//!          handle_message(now, msg)       every decoded message -> Handled
//!          handle_timeout(now)            when now >= poll_timeout()
//!          handle_closed(now)             transport died / peer closed
//!          handle_traffic(now)            peer traffic that bypassed handle_message
//!          start_disconnect(now, cause)   graceful close (DPR)
//!          abort(now)                     close without DPR
//!          accept_cer / reject_cer        responder decision after Handled::CerReceived
//!          handle_election(now, won)      initiator side of an election
//! outputs  poll_transmit()  -> encode and write, in order
//!          poll_event()     -> Opened, Rejected, WatchdogSuspect/Okay/Down, LoadReport,
//!                              Closed { reason, reconnect }
//!          poll_timeout()   -> next deadline
//! queries  state(), is_open(), watchdog_state(), in_service(), peer_identity(),
//!          applications(), last_load()
//! ```
//!
//! After every input: write everything `poll_transmit` returns, handle every event, and
//! re-arm the timer from `poll_timeout`. On [`PeerEvent::Closed`] close the transport
//! after the pending writes. `handle_message` returns [`Handled::Application`] for
//! messages to route; base protocol messages are answered here.
//!
//! Reconnecting (initiator side): after a `Closed` with [`Reconnect::After`], connect
//! again after the hold-off with a new `PeerConnection` whose options have
//! [`ConnectionOptions::reopen`] set — RFC 3539 §3.4.1 then requires three DWAs before
//! the peer is back in service. Only the very first connection to a peer is created
//! without `reopen`.
//!
//! # Admission and the election (RFC 6733 §5.6.4)
//!
//! A responder never answers a valid CER by itself: [`PeerConnection::handle_message`]
//! returns [`Handled::CerReceived`] once the CER passed the checks (valid message, known
//! Origin-Host at this address, a common application), because only the shell knows the
//! peer's other connections. It then does, for that peer:
//!
//! ```text
//! no other connection                    r.accept_cer(now)              // R-Accept, R-Snd-CEA
//! another connection already open        r.abort(now)                   // R-Reject
//! our initiator i in WaitCea (Wait-I-CEA):
//!     won = election_won(&cfg.origin_host, &peer.name)
//!     i.handle_election(now, won)
//!     won  -> i closes (Closed{ElectionWon}: "the winner MUST close the connection
//!             it initiated"); r.accept_cer(now)                        // R-Open
//!     lost -> keep r waiting (state CerReceived = Wait-Returns), then
//!             i opens (Opened)   -> r.abort(now)                       // I-Rcv-CEA: R-Disc
//!             i closes first     -> r.accept_cer(now)                  // I-Peer-Disc: R-Snd-CEA
//! our initiator still connecting (Wait-Conn-Ack/Elect): hold r; when i connects its
//!     CER goes out and the election above runs; if the connect fails, r.accept_cer(now).
//! ```
//!
//! The peer runs the same election with the opposite outcome, so both ends keep the
//! connection initiated by the loser.
//!
//! The agent's shell (`agent/core/peers.rs`, `cer_received`) implements this table with
//! two simplifications: on a lost election it refuses the responder at once
//! (`r.abort`) instead of keeping it waiting for our CEA, and it does not hold a
//! responder while our initiator is still connecting (it accepts it). Both still end
//! with one connection per peer; the peer may have to reconnect once.

pub mod capabilities;
pub mod config;
pub mod connection;
pub mod directory;
pub mod ids;
pub mod load;
pub mod watchdog;

pub use capabilities::{CapabilitiesError, CommonApplications, PeerIdentity};
pub use config::{
    ApplicationId, DEFAULT_TC, DEFAULT_TW, DEFAULT_TW_JITTER, MIN_TW, PeerConfig, PeerConfigError,
    VendorSpecificApplicationId,
};
pub use connection::{
    CloseReason, ConnectionOptions, DisconnectCause, Handled, PeerConnection, PeerEvent, PeerState,
    Reconnect, Role, election_won,
};
pub use directory::{KnownPeer, PeerDirectory, Rejection, StaticPeerDirectory};
pub use ids::IdGenerator;
pub use load::{peer_load_avp, peer_load_value};
pub use watchdog::{REOPEN_DWAS, WatchdogState};
