//! Capabilities exchange contents (RFC 6733 §5.3): what a CER/CEA says about its sender,
//! the application intersection, and our own CER/CEA.

use std::net::IpAddr;

use dra_common::wire::{app, cmd, flags};

use super::config::{ApplicationId, PeerConfig, VendorSpecificApplicationId, advertised};
use crate::diameter::error::AvpDataError;
use crate::diameter::{Avp, Dictionary, Message, avp_code as c, result_code};

/// What a node says about itself in its CER or CEA (RFC 6733 §5.3.1, §5.3.2): a peer's,
/// read with [`PeerIdentity::from_message`], or ours ([`PeerConfig::identity`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerIdentity {
    /// Origin-Host.
    pub origin_host: String,
    /// Origin-Realm.
    pub origin_realm: String,
    /// Every Host-IP-Address, in order.
    pub host_ip_addresses: Vec<IpAddr>,
    /// Vendor-Id.
    pub vendor_id: u32,
    /// Product-Name.
    pub product_name: String,
    /// Firmware-Revision, if sent.
    pub firmware_revision: Option<u32>,
    /// Origin-State-Id, if sent (RFC 6733 §8.16).
    pub origin_state_id: Option<u32>,
    /// Supported-Vendor-Id values.
    pub supported_vendor_ids: Vec<u32>,
    /// Auth-Application-Id values (top level).
    pub auth_application_ids: Vec<u32>,
    /// Acct-Application-Id values (top level).
    pub acct_application_ids: Vec<u32>,
    /// Vendor-Specific-Application-Id values.
    pub vendor_specific_application_ids: Vec<VendorSpecificApplicationId>,
}

/// A CER or CEA that does not describe its sender properly.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CapabilitiesError {
    /// A required AVP is absent (RFC 6733 §5.3.1, §5.3.2).
    #[error("{name} ({code}) is missing")]
    MissingAvp {
        /// AVP code.
        code: u32,
        /// AVP name.
        name: &'static str,
    },
    /// An AVP's data cannot be read as its type.
    #[error("{name} ({code}) is malformed")]
    BadAvp {
        /// AVP code.
        code: u32,
        /// AVP name.
        name: &'static str,
        /// The offending AVP, for Failed-AVP (RFC 6733 §7.5).
        avp: Avp,
        /// What is wrong with it.
        #[source]
        source: AvpDataError,
    },
}

impl CapabilitiesError {
    /// The Result-Code for a CEA answering a CER with this problem: 5005
    /// DIAMETER_MISSING_AVP or 5004 DIAMETER_INVALID_AVP_VALUE (RFC 6733 §7.1.5).
    pub const fn result_code(&self) -> u32 {
        match self {
            CapabilitiesError::MissingAvp { .. } => result_code::MISSING_AVP,
            CapabilitiesError::BadAvp { .. } => result_code::INVALID_AVP_VALUE,
        }
    }

    /// The AVP to report in Failed-AVP (RFC 6733 §7.5): the bad AVP, or a zero-filled
    /// example of the missing one.
    pub fn failed_avp(&self) -> Avp {
        match self {
            CapabilitiesError::BadAvp { avp, .. } => avp.clone(),
            CapabilitiesError::MissingAvp { code, .. } => {
                crate::diameter::ProtocolError::missing(Dictionary::standard(), *code, None)
                    .failed_avp()
                    .cloned()
                    .unwrap_or_else(|| Avp::octets(*code, Vec::new()))
            }
        }
    }
}

fn name_of(code: u32) -> &'static str {
    Dictionary::standard().avp_name(code, None)
}

fn bad(avp: &Avp, source: AvpDataError) -> CapabilitiesError {
    CapabilitiesError::BadAvp {
        code: avp.code,
        name: name_of(avp.code),
        avp: avp.clone(),
        source,
    }
}

fn required(msg: &Message, code: u32) -> Result<&Avp, CapabilitiesError> {
    msg.find(code).ok_or(CapabilitiesError::MissingAvp {
        code,
        name: name_of(code),
    })
}

fn read_u32(avp: &Avp) -> Result<u32, CapabilitiesError> {
    avp.as_u32().map_err(|e| bad(avp, e))
}

fn read_utf8(avp: &Avp) -> Result<String, CapabilitiesError> {
    avp.as_utf8().map(str::to_owned).map_err(|e| bad(avp, e))
}

fn all_u32(msg: &Message, code: u32) -> Result<Vec<u32>, CapabilitiesError> {
    msg.find_all(code).map(read_u32).collect()
}

fn optional_u32(msg: &Message, code: u32) -> Result<Option<u32>, CapabilitiesError> {
    msg.find(code).map(read_u32).transpose()
}

/// RFC 6733 §6.11: Vendor-Id and one of Auth-/Acct-Application-Id.
fn vendor_specific(avp: &Avp) -> Result<Vec<VendorSpecificApplicationId>, CapabilitiesError> {
    let children = avp.as_grouped().map_err(|e| bad(avp, e))?;
    let find = |code| children.iter().find(|a| a.is(code, None));
    let vendor_id = read_u32(find(c::VENDOR_ID).ok_or(CapabilitiesError::MissingAvp {
        code: c::VENDOR_ID,
        name: name_of(c::VENDOR_ID),
    })?)?;
    let mut out = Vec::new();
    if let Some(a) = find(c::AUTH_APPLICATION_ID) {
        out.push(VendorSpecificApplicationId {
            vendor_id,
            application: ApplicationId::Auth(read_u32(a)?),
        });
    }
    if let Some(a) = find(c::ACCT_APPLICATION_ID) {
        out.push(VendorSpecificApplicationId {
            vendor_id,
            application: ApplicationId::Acct(read_u32(a)?),
        });
    }
    if out.is_empty() {
        return Err(CapabilitiesError::MissingAvp {
            code: c::AUTH_APPLICATION_ID,
            name: name_of(c::AUTH_APPLICATION_ID),
        });
    }
    Ok(out)
}

impl PeerIdentity {
    /// Reads the sender's identity from a CER or CEA.
    pub fn from_message(msg: &Message) -> Result<PeerIdentity, CapabilitiesError> {
        let origin_host = read_utf8(required(msg, c::ORIGIN_HOST)?)?;
        let origin_realm = read_utf8(required(msg, c::ORIGIN_REALM)?)?;
        required(msg, c::HOST_IP_ADDRESS)?;
        let host_ip_addresses = msg
            .find_all(c::HOST_IP_ADDRESS)
            .map(|a| a.as_address().map_err(|e| bad(a, e)))
            .collect::<Result<_, _>>()?;
        let vendor_id = read_u32(required(msg, c::VENDOR_ID)?)?;
        let product_name = read_utf8(required(msg, c::PRODUCT_NAME)?)?;
        let mut vendor_specific_application_ids = Vec::new();
        for a in msg.find_all(c::VENDOR_SPECIFIC_APPLICATION_ID) {
            vendor_specific_application_ids.extend(vendor_specific(a)?);
        }
        Ok(PeerIdentity {
            origin_host,
            origin_realm,
            host_ip_addresses,
            vendor_id,
            product_name,
            firmware_revision: optional_u32(msg, c::FIRMWARE_REVISION)?,
            origin_state_id: optional_u32(msg, c::ORIGIN_STATE_ID)?,
            supported_vendor_ids: all_u32(msg, c::SUPPORTED_VENDOR_ID)?,
            auth_application_ids: all_u32(msg, c::AUTH_APPLICATION_ID)?,
            acct_application_ids: all_u32(msg, c::ACCT_APPLICATION_ID)?,
            vendor_specific_application_ids,
        })
    }

    /// Every advertised Auth-Application-Id, plain and vendor-specific, without the
    /// common application 0 (RFC 6733 §5.3: the base protocol is not advertised).
    pub fn auth_applications(&self) -> impl Iterator<Item = u32> + '_ {
        advertised(
            &self.auth_application_ids,
            &self.vendor_specific_application_ids,
            true,
        )
    }

    /// Every advertised Acct-Application-Id, plain and vendor-specific, without 0.
    pub fn acct_applications(&self) -> impl Iterator<Item = u32> + '_ {
        advertised(
            &self.acct_application_ids,
            &self.vendor_specific_application_ids,
            false,
        )
    }
}

/// The applications both ends support (RFC 6733 §5.3): what may be sent over the
/// connection.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct CommonApplications {
    /// Common Auth-Application-Ids; `[0xffffffff]` when both ends are relays.
    pub auth: Vec<u32>,
    /// Common Acct-Application-Ids.
    pub acct: Vec<u32>,
}

fn dedup(ids: impl Iterator<Item = u32>) -> Vec<u32> {
    let mut out: Vec<u32> = Vec::new();
    for id in ids {
        if !out.contains(&id) {
            out.push(id);
        }
    }
    out
}

impl CommonApplications {
    /// Intersects our applications with the peer's. The Relay application
    /// (`0xffffffff`) on one side matches everything the other side advertises (RFC 6733
    /// §2.4, §5.3); relays on both sides share only Relay.
    pub fn negotiate(local: &PeerConfig, peer: &PeerIdentity) -> CommonApplications {
        let our_auth = dedup(local.auth_applications());
        let our_acct = dedup(local.acct_applications());
        let their_auth = dedup(peer.auth_applications());
        let their_acct = dedup(peer.acct_applications());
        let relay = |a: &[u32], b: &[u32]| a.contains(&app::RELAY) || b.contains(&app::RELAY);
        let strip = |v: Vec<u32>| v.into_iter().filter(|&id| id != app::RELAY).collect();
        match (relay(&our_auth, &our_acct), relay(&their_auth, &their_acct)) {
            (true, true) => CommonApplications {
                auth: vec![app::RELAY],
                acct: Vec::new(),
            },
            (true, false) => CommonApplications {
                auth: their_auth,
                acct: their_acct,
            },
            (false, true) => CommonApplications {
                auth: strip(our_auth),
                acct: strip(our_acct),
            },
            (false, false) => CommonApplications {
                auth: our_auth
                    .into_iter()
                    .filter(|id| their_auth.contains(id))
                    .collect(),
                acct: our_acct
                    .into_iter()
                    .filter(|id| their_acct.contains(id))
                    .collect(),
            },
        }
    }

    /// No application in common: the exchange fails with 5010 (RFC 6733 §5.3).
    pub fn is_empty(&self) -> bool {
        self.auth.is_empty() && self.acct.is_empty()
    }

    /// Messages of `application_id` may be sent over this connection (the common
    /// application 0 always may).
    pub fn supports(&self, application_id: u32) -> bool {
        application_id == app::COMMON
            || [&self.auth, &self.acct]
                .iter()
                .any(|l| l.contains(&application_id) || l.contains(&app::RELAY))
    }
}

fn m(avp: Avp) -> Avp {
    avp.mandatory()
}

/// Origin-Host … Origin-State-Id: the part of CER/CEA before Error-Message.
fn identity_head(cfg: &PeerIdentity) -> Vec<Avp> {
    let mut v = vec![
        m(Avp::utf8(c::ORIGIN_HOST, &cfg.origin_host)),
        m(Avp::utf8(c::ORIGIN_REALM, &cfg.origin_realm)),
    ];
    v.extend(
        cfg.host_ip_addresses
            .iter()
            .map(|&a| m(Avp::address(c::HOST_IP_ADDRESS, a))),
    );
    v.push(m(Avp::u32(c::VENDOR_ID, cfg.vendor_id)));
    // RFC 6733 §5.3.7: Product-Name has no M bit.
    v.push(Avp::utf8(c::PRODUCT_NAME, &cfg.product_name));
    if let Some(s) = cfg.origin_state_id {
        v.push(m(Avp::u32(c::ORIGIN_STATE_ID, s)));
    }
    v
}

/// Supported-Vendor-Id … Firmware-Revision: the applications and the tail.
fn identity_tail(cfg: &PeerIdentity) -> Vec<Avp> {
    let mut v: Vec<Avp> = cfg
        .supported_vendor_ids
        .iter()
        .map(|&id| m(Avp::u32(c::SUPPORTED_VENDOR_ID, id)))
        .collect();
    v.extend(
        cfg.auth_application_ids
            .iter()
            .map(|&id| m(Avp::u32(c::AUTH_APPLICATION_ID, id))),
    );
    v.extend(
        cfg.acct_application_ids
            .iter()
            .map(|&id| m(Avp::u32(c::ACCT_APPLICATION_ID, id))),
    );
    v.extend(cfg.vendor_specific_application_ids.iter().map(|vsa| {
        let inner = match vsa.application {
            ApplicationId::Auth(id) => m(Avp::u32(c::AUTH_APPLICATION_ID, id)),
            ApplicationId::Acct(id) => m(Avp::u32(c::ACCT_APPLICATION_ID, id)),
        };
        m(Avp::grouped(
            c::VENDOR_SPECIFIC_APPLICATION_ID,
            [m(Avp::u32(c::VENDOR_ID, vsa.vendor_id)), inner],
        ))
    }));
    if let Some(f) = cfg.firmware_revision {
        // RFC 6733 §5.3.4: Firmware-Revision has no M bit.
        v.push(Avp::u32(c::FIRMWARE_REVISION, f));
    }
    v
}

/// Our CER (RFC 6733 §5.3.1).
pub(crate) fn build_cer(cfg: &PeerConfig, hop_by_hop: u32, end_to_end: u32) -> Message {
    let mut cer = Message::request(
        cmd::CAPABILITIES_EXCHANGE,
        app::COMMON,
        hop_by_hop,
        end_to_end,
    );
    cer.avps.extend(identity_head(&cfg.identity));
    cer.avps.extend(identity_tail(&cfg.identity));
    cer
}

/// Our CEA to `cer` (RFC 6733 §5.3.2), with the E bit for protocol errors (§7.1.3).
pub(crate) fn build_cea(
    cfg: &PeerConfig,
    cer: &Message,
    result_code: u32,
    error_message: Option<&str>,
    failed_avp: Option<Avp>,
) -> Message {
    let mut cea = Message::answer(
        cmd::CAPABILITIES_EXCHANGE,
        app::COMMON,
        cer.hop_by_hop,
        cer.end_to_end,
    );
    if result_code::is_protocol_error(result_code) {
        cea.flags |= flags::E;
    }
    cea.push(m(Avp::u32(c::RESULT_CODE, result_code)));
    cea.avps.extend(identity_head(&cfg.identity));
    if let Some(text) = error_message {
        // RFC 6733 §7.3: Error-Message has no M bit.
        cea.push(Avp::utf8(c::ERROR_MESSAGE, text));
    }
    if let Some(f) = failed_avp {
        cea.push(m(Avp::grouped(c::FAILED_AVP, [f])));
    }
    cea.avps.extend(identity_tail(&cfg.identity));
    cea
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diameter::vendor;

    fn cfg(auth: &[u32], vsa: &[VendorSpecificApplicationId]) -> PeerConfig {
        let mut c = PeerConfig::new(
            "a.example.net",
            "example.net",
            vec!["198.18.0.1".parse().unwrap()],
        );
        c.auth_application_ids = auth.to_vec();
        c.vendor_specific_application_ids = vsa.to_vec();
        c
    }

    fn identity_of(c: &PeerConfig) -> PeerIdentity {
        PeerIdentity::from_message(&build_cer(c, 1, 2)).expect("own CER parses")
    }

    #[test]
    fn cer_round_trips_into_the_identity() {
        let mut c = cfg(
            &[app::GY],
            &[VendorSpecificApplicationId {
                vendor_id: vendor::TGPP,
                application: ApplicationId::Auth(app::GX),
            }],
        );
        c.host_ip_addresses.push("2001:db8::1".parse().unwrap());
        c.firmware_revision = Some(7);
        c.origin_state_id = Some(99);
        c.supported_vendor_ids = vec![vendor::TGPP];
        let id = identity_of(&c);
        assert_eq!(id.origin_host, "a.example.net");
        assert_eq!(id.host_ip_addresses, c.host_ip_addresses);
        assert_eq!(id.firmware_revision, Some(7));
        assert_eq!(id.origin_state_id, Some(99));
        assert_eq!(
            id.auth_applications().collect::<Vec<_>>(),
            [app::GY, app::GX]
        );
        assert_eq!(id.supported_vendor_ids, [vendor::TGPP]);
    }

    #[test]
    fn intersection_and_relay() {
        let gx_gy = cfg(&[app::GX, app::GY], &[]);
        let gy = cfg(&[app::GY], &[]);
        let gx_vsa = cfg(
            &[],
            &[VendorSpecificApplicationId {
                vendor_id: vendor::TGPP,
                application: ApplicationId::Auth(app::GX),
            }],
        );
        let relay = cfg(&[app::RELAY], &[]);
        let common = CommonApplications::negotiate(&gx_gy, &identity_of(&gy));
        assert_eq!(common.auth, [app::GY]);
        assert!(common.supports(app::GY) && !common.supports(app::GX));
        let common = CommonApplications::negotiate(&gx_gy, &identity_of(&gx_vsa));
        assert_eq!(common.auth, [app::GX]);
        assert!(CommonApplications::negotiate(&gy, &identity_of(&gx_vsa)).is_empty());
        // Relay on our side: whatever the peer has.
        let common = CommonApplications::negotiate(&relay, &identity_of(&gx_gy));
        assert_eq!(common.auth, [app::GX, app::GY]);
        // Relay on the peer's side: whatever we have.
        assert_eq!(
            CommonApplications::negotiate(&gy, &identity_of(&relay)).auth,
            [app::GY]
        );
        let both = CommonApplications::negotiate(&relay, &identity_of(&relay));
        assert!(both.supports(12345));
    }

    #[test]
    fn missing_and_bad_avps_are_reported() {
        let c = cfg(&[app::GY], &[]);
        let mut cer = build_cer(&c, 1, 2);
        cer.avps.retain(|a| a.code != c::PRODUCT_NAME);
        let e = PeerIdentity::from_message(&cer).unwrap_err();
        assert_eq!(e.result_code(), result_code::MISSING_AVP);
        assert_eq!(e.failed_avp().code, c::PRODUCT_NAME);
        let mut cer = build_cer(&c, 1, 2);
        for a in &mut cer.avps {
            if a.code == c::HOST_IP_ADDRESS {
                a.data = vec![0, 9, 1, 2, 3, 4];
            }
        }
        let e = PeerIdentity::from_message(&cer).unwrap_err();
        assert_eq!(e.result_code(), result_code::INVALID_AVP_VALUE);
        assert_eq!(e.failed_avp().data, [0, 9, 1, 2, 3, 4]);
    }
}
