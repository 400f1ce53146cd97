//! This node's identity and timers for peer connections (RFC 6733 §5.3, §2.1; RFC 3539
//! §3.4).

use std::net::IpAddr;
use std::time::Duration;

use dra_common::wire::app;

use super::capabilities::PeerIdentity;

/// Default watchdog interval Tw: 30 s (RFC 3539 §3.4.1).
pub const DEFAULT_TW: Duration = Duration::from_secs(30);
/// Lowest allowed Tw: 6 s (RFC 3539 §3.4.1).
pub const MIN_TW: Duration = Duration::from_secs(6);
/// Default jitter added to each Tw: up to ±2 s (RFC 3539 §3.4.1).
pub const DEFAULT_TW_JITTER: Duration = Duration::from_secs(2);
/// Default reconnect timer Tc: 30 s (RFC 6733 §2.1, §12).
pub const DEFAULT_TC: Duration = Duration::from_secs(30);

/// An application advertised in a capabilities exchange: Auth-Application-Id or
/// Acct-Application-Id (RFC 6733 §5.3.1, §6.8, §6.9).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ApplicationId {
    /// Auth-Application-Id.
    Auth(u32),
    /// Acct-Application-Id.
    Acct(u32),
}

impl ApplicationId {
    /// The numeric Application-Id.
    pub const fn id(self) -> u32 {
        match self {
            ApplicationId::Auth(id) | ApplicationId::Acct(id) => id,
        }
    }
}

/// A Vendor-Specific-Application-Id: a vendor and one application (RFC 6733 §6.11), e.g.
/// 3GPP Gx is `{ vendor_id: 10415, application: Auth(16777238) }`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VendorSpecificApplicationId {
    /// Vendor-Id.
    pub vendor_id: u32,
    /// The Auth- or Acct-Application-Id inside.
    pub application: ApplicationId,
}

/// This node's identity, advertised applications and peer timers. Shared by every
/// connection (`Arc<PeerConfig>`); checked by [`PeerConfig::validate`] when a connection
/// is created. Derefs to its [`PeerIdentity`]: `cfg.origin_host` is
/// `cfg.identity.origin_host`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerConfig {
    /// What our CER and CEA say about this node: Origin-Host, Origin-Realm, one
    /// Host-IP-Address per address, Vendor-Id (0 = none), Product-Name, Firmware-Revision
    /// and Origin-State-Id (increases on every restart; also sent in DWR/DWA) when set,
    /// and the advertised applications. A relay agent advertises only the Relay
    /// application `0xffffffff`, which matches every application (RFC 6733 §2.4, §5.3).
    pub identity: PeerIdentity,
    /// Watchdog interval Tw (RFC 3539 §3.4.1); at least [`MIN_TW`].
    pub tw: Duration,
    /// Each watchdog timer is Tw plus a uniform random offset in `-tw_jitter..=tw_jitter`
    /// (RFC 3539 §3.4.1: ±2 s); must be below `tw`.
    pub tw_jitter: Duration,
    /// Reconnect timer Tc (RFC 6733 §2.1): the hold-off suggested after a failure.
    pub tc: Duration,
    /// Responder: how long to wait for the CER after accepting a connection.
    pub cer_timeout: Duration,
    /// Initiator: how long to wait for the CEA (RFC 6733 §5.6 Wait-I-CEA Timeout).
    /// Responder: how long a valid CER may wait for the shell's decision.
    pub cea_timeout: Duration,
    /// How long to wait for the DPA after sending DPR (RFC 6733 §5.6 Closing Timeout).
    pub dpa_timeout: Duration,
    /// Suggested reconnect hold-off after a DPR with Disconnect-Cause BUSY.
    pub busy_hold_off: Duration,
    /// Suggested reconnect hold-off after a DPR with Disconnect-Cause
    /// DO_NOT_WANT_TO_TALK_TO_YOU.
    pub do_not_talk_hold_off: Duration,
}

impl PeerConfig {
    /// A relay agent's configuration: advertises the Relay application only (RFC 6733
    /// §2.4), Product-Name "dra", no vendor, default timers (Tw 30 s ± 2 s, Tc 30 s, CER
    /// and CEA timeouts 10 s, DPA timeout 5 s, hold-offs 5 min for BUSY and 1 h for
    /// DO_NOT_WANT_TO_TALK_TO_YOU).
    pub fn new(origin_host: &str, origin_realm: &str, host_ip_addresses: Vec<IpAddr>) -> Self {
        PeerConfig {
            identity: PeerIdentity {
                origin_host: origin_host.to_owned(),
                origin_realm: origin_realm.to_owned(),
                host_ip_addresses,
                vendor_id: 0,
                product_name: "dra".to_owned(),
                firmware_revision: None,
                origin_state_id: None,
                supported_vendor_ids: Vec::new(),
                auth_application_ids: vec![app::RELAY],
                acct_application_ids: Vec::new(),
                vendor_specific_application_ids: Vec::new(),
            },
            tw: DEFAULT_TW,
            tw_jitter: DEFAULT_TW_JITTER,
            tc: DEFAULT_TC,
            cer_timeout: Duration::from_secs(10),
            cea_timeout: Duration::from_secs(10),
            dpa_timeout: Duration::from_secs(5),
            busy_hold_off: Duration::from_secs(300),
            do_not_talk_hold_off: Duration::from_secs(3600),
        }
    }

    /// Checks the values a capabilities exchange and the watchdog depend on.
    pub fn validate(&self) -> Result<(), PeerConfigError> {
        if self.origin_host.is_empty() {
            return Err(PeerConfigError::EmptyOriginHost);
        }
        if self.origin_realm.is_empty() {
            return Err(PeerConfigError::EmptyOriginRealm);
        }
        if self.host_ip_addresses.is_empty() {
            return Err(PeerConfigError::NoHostIpAddress);
        }
        if self.auth_applications().next().is_none() && self.acct_applications().next().is_none() {
            return Err(PeerConfigError::NoApplication);
        }
        if self.tw < MIN_TW {
            return Err(PeerConfigError::TwTooShort { tw: self.tw });
        }
        if self.tw_jitter >= self.tw {
            return Err(PeerConfigError::JitterTooLarge {
                jitter: self.tw_jitter,
                tw: self.tw,
            });
        }
        for (name, value) in [
            ("cer_timeout", self.cer_timeout),
            ("cea_timeout", self.cea_timeout),
            ("dpa_timeout", self.dpa_timeout),
        ] {
            if value.is_zero() {
                return Err(PeerConfigError::ZeroTimeout { name });
            }
        }
        Ok(())
    }
}

impl std::ops::Deref for PeerConfig {
    type Target = PeerIdentity;

    fn deref(&self) -> &PeerIdentity {
        &self.identity
    }
}

impl std::ops::DerefMut for PeerConfig {
    fn deref_mut(&mut self) -> &mut PeerIdentity {
        &mut self.identity
    }
}

/// A [`PeerConfig`] that cannot work.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PeerConfigError {
    /// Origin-Host is required in every message (RFC 6733 §6.3).
    #[error("Origin-Host is empty")]
    EmptyOriginHost,
    /// Origin-Realm is required in every message (RFC 6733 §6.4).
    #[error("Origin-Realm is empty")]
    EmptyOriginRealm,
    /// CER and CEA carry at least one Host-IP-Address (RFC 6733 §5.3.1, §5.3.2).
    #[error("no Host-IP-Address configured; CER/CEA need at least one (RFC 6733 §5.3.1)")]
    NoHostIpAddress,
    /// Without an application every capabilities exchange ends in 5010.
    #[error("no application advertised; every capabilities exchange would fail with 5010")]
    NoApplication,
    /// Tw below 6 s (RFC 3539 §3.4.1).
    #[error("Tw {tw:?} is below the 6 s minimum of RFC 3539 §3.4.1")]
    TwTooShort {
        /// The configured Tw.
        tw: Duration,
    },
    /// The jitter could make the watchdog timer zero or negative.
    #[error("watchdog jitter {jitter:?} must be below Tw {tw:?}")]
    JitterTooLarge {
        /// The configured jitter.
        jitter: Duration,
        /// The configured Tw.
        tw: Duration,
    },
    /// A timeout of zero would close every connection at once.
    #[error("{name} must be above zero")]
    ZeroTimeout {
        /// The field name.
        name: &'static str,
    },
}

/// Plain and vendor-specific application ids of one kind (`auth` or acct), without
/// the common application 0 (RFC 6733 §5.3: the base protocol is not advertised).
pub(crate) fn advertised<'a>(
    plain: &'a [u32],
    vendor_specific: &'a [VendorSpecificApplicationId],
    auth: bool,
) -> impl Iterator<Item = u32> + 'a {
    let vendor = vendor_specific
        .iter()
        .filter_map(move |v| match (v.application, auth) {
            (ApplicationId::Auth(id), true) | (ApplicationId::Acct(id), false) => Some(id),
            _ => None,
        });
    plain
        .iter()
        .copied()
        .chain(vendor)
        .filter(|&id| id != app::COMMON)
}
