//! Diameter Overload Indication Conveyance (DOIC): RFC 7683, with the peer report of
//! RFC 8581 and the rate algorithm of RFC 8582. Sans-IO, like the rest of the protocol
//! cores: no sockets, time is an argument.
//!
//! - [`avps`]: OC-Supported-Features and OC-OLR as typed, checked values.
//! - [`reporter`]: the DRA as a reporting node towards its gateways — its own overload
//!   (the ingress limits and DRL throttle it enforces on a gateway) as peer reports,
//!   loss or rate.
//! - [`reactor`]: the DRA as a reacting node towards its servers — their host, realm and
//!   peer reports (loss or rate) as overload control state and the abatement decision (wired
//!   into the agent by `agent::core::react`).
//!
//! What is implemented and what is not: `docs/doic.md`.

pub mod avps;
pub mod reactor;
pub mod reporter;

#[cfg(test)]
mod tests;

pub use avps::{DoicAvpError, Olr, ReportType, SupportedFeatures};
pub use reactor::{Asked, OcsKey, Reactor, ReactorStats, Received, Verdict};
pub use reporter::{Algorithm, ClassLimit, GatewayConfig, Report, Reporter, Sent};
