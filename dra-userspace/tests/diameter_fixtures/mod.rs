//! Hand-built Diameter messages shared by the `diameter_*` tests: what a PGW, a PCRF and
//! a DRA really exchange on Gx.
#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use dra::diameter::dictionary::enums::{disconnect_cause, load_type, subscription_id_type};
use dra::diameter::{Avp, Message, avp_code as c, command_code as cmd, result_code, vendor};
use dra_common::wire::{app, cc_request_type};

pub const PGW_HOST: &str = "pgw1.epc.mnc001.mcc001.3gppnetwork.org";
pub const PGW_REALM: &str = "epc.mnc001.mcc001.3gppnetwork.org";
pub const DRA_HOST: &str = "dra1.epc.mnc001.mcc001.3gppnetwork.org";
pub const DRA_REALM: &str = "epc.mnc001.mcc001.3gppnetwork.org";
pub const PCRF_REALM: &str = "pcrf.mnc001.mcc001.3gppnetwork.org";
pub const SESSION: &str = "pgw1.epc.mnc001.mcc001.3gppnetwork.org;1700000000;42;gx";

fn m(a: Avp) -> Avp {
    a.mandatory()
}

pub fn cer() -> Message {
    Message::request(
        cmd::CAPABILITIES_EXCHANGE,
        app::COMMON,
        0x1111_0001,
        0xaaaa_0001,
    )
    .with(m(Avp::utf8(c::ORIGIN_HOST, PGW_HOST)))
    .with(m(Avp::utf8(c::ORIGIN_REALM, PGW_REALM)))
    .with(m(Avp::address(
        c::HOST_IP_ADDRESS,
        IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)),
    )))
    .with(m(Avp::address(
        c::HOST_IP_ADDRESS,
        IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)),
    )))
    .with(m(Avp::u32(c::VENDOR_ID, vendor::TGPP)))
    .with(Avp::utf8(c::PRODUCT_NAME, "pgw-sim"))
    .with(m(Avp::u32(c::ORIGIN_STATE_ID, 7)))
    .with(m(Avp::u32(c::SUPPORTED_VENDOR_ID, vendor::TGPP)))
    .with(m(Avp::u32(c::AUTH_APPLICATION_ID, app::GY)))
    .with(m(Avp::grouped(
        c::VENDOR_SPECIFIC_APPLICATION_ID,
        vec![
            m(Avp::u32(c::VENDOR_ID, vendor::TGPP)),
            m(Avp::u32(c::AUTH_APPLICATION_ID, app::GX)),
        ],
    )))
    .with(Avp::u32(c::FIRMWARE_REVISION, 1))
}

pub fn cea() -> Message {
    Message::answer(
        cmd::CAPABILITIES_EXCHANGE,
        app::COMMON,
        0x1111_0001,
        0xaaaa_0001,
    )
    .with(m(Avp::u32(c::RESULT_CODE, result_code::SUCCESS)))
    .with(m(Avp::utf8(c::ORIGIN_HOST, DRA_HOST)))
    .with(m(Avp::utf8(c::ORIGIN_REALM, DRA_REALM)))
    .with(m(Avp::address(
        c::HOST_IP_ADDRESS,
        IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2)),
    )))
    .with(m(Avp::u32(c::VENDOR_ID, 0)))
    .with(Avp::utf8(c::PRODUCT_NAME, "dra"))
    .with(m(Avp::u32(c::AUTH_APPLICATION_ID, app::RELAY)))
}

pub fn dwr() -> Message {
    Message::request(cmd::DEVICE_WATCHDOG, app::COMMON, 0x1111_0002, 0xaaaa_0002)
        .with(m(Avp::utf8(c::ORIGIN_HOST, PGW_HOST)))
        .with(m(Avp::utf8(c::ORIGIN_REALM, PGW_REALM)))
        .with(m(Avp::u32(c::ORIGIN_STATE_ID, 7)))
}

pub fn dwa() -> Message {
    Message::answer(cmd::DEVICE_WATCHDOG, app::COMMON, 0x1111_0002, 0xaaaa_0002)
        .with(m(Avp::u32(c::RESULT_CODE, result_code::SUCCESS)))
        .with(m(Avp::utf8(c::ORIGIN_HOST, DRA_HOST)))
        .with(m(Avp::utf8(c::ORIGIN_REALM, DRA_REALM)))
}

/// DWA carrying an RFC 8583 Load report (M bit not set, §7).
pub fn dwa_with_load(value: u64) -> Message {
    dwa().with(Avp::grouped(
        c::LOAD,
        vec![
            Avp::enumerated(c::LOAD_TYPE, load_type::HOST),
            Avp::u64(c::LOAD_VALUE, value),
            Avp::utf8(c::SOURCE_ID, DRA_HOST),
        ],
    ))
}

pub fn dpr() -> Message {
    Message::request(cmd::DISCONNECT_PEER, app::COMMON, 0x1111_0003, 0xaaaa_0003)
        .with(m(Avp::utf8(c::ORIGIN_HOST, PGW_HOST)))
        .with(m(Avp::utf8(c::ORIGIN_REALM, PGW_REALM)))
        .with(m(Avp::enumerated(
            c::DISCONNECT_CAUSE,
            disconnect_cause::REBOOTING,
        )))
}

pub fn dpa() -> Message {
    Message::answer(cmd::DISCONNECT_PEER, app::COMMON, 0x1111_0003, 0xaaaa_0003)
        .with(m(Avp::u32(c::RESULT_CODE, result_code::SUCCESS)))
        .with(m(Avp::utf8(c::ORIGIN_HOST, DRA_HOST)))
        .with(m(Avp::utf8(c::ORIGIN_REALM, DRA_REALM)))
}

fn tgpp(a: Avp) -> Avp {
    a.vendor(vendor::TGPP)
}

/// A Gx CCR-Initial as a PGW sends it (3GPP TS 29.212 §5.6.2).
pub fn ccr_i_gx() -> Message {
    Message::request(cmd::CREDIT_CONTROL, app::GX, 0x1111_0004, 0xaaaa_0004)
        .proxiable()
        .with(m(Avp::utf8(c::SESSION_ID, SESSION)))
        .with(m(Avp::u32(c::AUTH_APPLICATION_ID, app::GX)))
        .with(m(Avp::utf8(c::ORIGIN_HOST, PGW_HOST)))
        .with(m(Avp::utf8(c::ORIGIN_REALM, PGW_REALM)))
        .with(m(Avp::utf8(c::DESTINATION_REALM, PCRF_REALM)))
        .with(m(Avp::enumerated(
            c::CC_REQUEST_TYPE,
            cc_request_type::INITIAL as i32,
        )))
        .with(m(Avp::u32(c::CC_REQUEST_NUMBER, 0)))
        .with(tgpp(Avp::grouped(
            c::SUPPORTED_FEATURES,
            vec![
                m(Avp::u32(c::VENDOR_ID, vendor::TGPP)),
                tgpp(Avp::u32(c::FEATURE_LIST_ID, 1)),
                tgpp(Avp::u32(c::FEATURE_LIST, 0x0000_000b)),
            ],
        )))
        .with(m(Avp::grouped(
            c::SUBSCRIPTION_ID,
            vec![
                m(Avp::enumerated(
                    c::SUBSCRIPTION_ID_TYPE,
                    subscription_id_type::END_USER_IMSI,
                )),
                m(Avp::utf8(c::SUBSCRIPTION_ID_DATA, "001010123456789")),
            ],
        )))
        .with(m(Avp::grouped(
            c::SUBSCRIPTION_ID,
            vec![
                m(Avp::enumerated(
                    c::SUBSCRIPTION_ID_TYPE,
                    subscription_id_type::END_USER_E164,
                )),
                m(Avp::utf8(c::SUBSCRIPTION_ID_DATA, "15550100")),
            ],
        )))
        .with(m(tgpp(Avp::enumerated(c::NETWORK_REQUEST_SUPPORT, 1))))
        .with(m(Avp::octets(c::FRAMED_IP_ADDRESS, [198, 18, 7, 9])))
        .with(m(tgpp(Avp::enumerated(c::IP_CAN_TYPE, 5))))
        .with(tgpp(Avp::enumerated(c::RAT_TYPE, 1004)))
        .with(m(tgpp(Avp::grouped(
            c::QOS_INFORMATION,
            vec![
                tgpp(Avp::u32(c::APN_AGGREGATE_MAX_BITRATE_UL, 50_000_000)),
                tgpp(Avp::u32(c::APN_AGGREGATE_MAX_BITRATE_DL, 150_000_000)),
            ],
        ))))
        .with(m(Avp::utf8(c::CALLED_STATION_ID, "internet")))
}

/// The PCRF's CCA-I with a rule install (Gx).
pub fn cca_i_gx() -> Message {
    Message::answer(cmd::CREDIT_CONTROL, app::GX, 0x1111_0004, 0xaaaa_0004)
        .proxiable()
        .with(m(Avp::utf8(c::SESSION_ID, SESSION)))
        .with(m(Avp::u32(c::AUTH_APPLICATION_ID, app::GX)))
        .with(m(Avp::utf8(
            c::ORIGIN_HOST,
            "pcrf1.pcrf.mnc001.mcc001.3gppnetwork.org",
        )))
        .with(m(Avp::utf8(c::ORIGIN_REALM, PCRF_REALM)))
        .with(m(Avp::u32(c::RESULT_CODE, result_code::SUCCESS)))
        .with(m(Avp::enumerated(
            c::CC_REQUEST_TYPE,
            cc_request_type::INITIAL as i32,
        )))
        .with(m(Avp::u32(c::CC_REQUEST_NUMBER, 0)))
        .with(m(tgpp(Avp::enumerated(c::BEARER_CONTROL_MODE, 2))))
        .with(m(tgpp(Avp::enumerated(c::EVENT_TRIGGER, 13))))
        .with(m(tgpp(Avp::grouped(
            c::CHARGING_RULE_INSTALL,
            vec![m(tgpp(Avp::octets(
                c::CHARGING_RULE_NAME,
                b"default-rule".to_vec(),
            )))],
        ))))
}

/// A Gy CCR-Update with one Multiple-Services-Credit-Control (RFC 4006 §3.1).
pub fn ccr_u_gy() -> Message {
    Message::request(cmd::CREDIT_CONTROL, app::GY, 0x1111_0005, 0xaaaa_0005)
        .proxiable()
        .with(m(Avp::utf8(c::SESSION_ID, "pgw1;1700000000;43;gy")))
        .with(m(Avp::utf8(c::ORIGIN_HOST, PGW_HOST)))
        .with(m(Avp::utf8(c::ORIGIN_REALM, PGW_REALM)))
        .with(m(Avp::utf8(c::DESTINATION_REALM, "ocs.example.net")))
        .with(m(Avp::u32(c::AUTH_APPLICATION_ID, app::GY)))
        .with(m(Avp::utf8(c::SERVICE_CONTEXT_ID, "32251@3gpp.org")))
        .with(m(Avp::enumerated(
            c::CC_REQUEST_TYPE,
            cc_request_type::UPDATE as i32,
        )))
        .with(m(Avp::u32(c::CC_REQUEST_NUMBER, 1)))
        .with(m(Avp::enumerated(c::MULTIPLE_SERVICES_INDICATOR, 1)))
        .with(m(Avp::grouped(
            c::MULTIPLE_SERVICES_CREDIT_CONTROL,
            vec![
                m(Avp::grouped(
                    c::REQUESTED_SERVICE_UNIT,
                    vec![m(Avp::u64(c::CC_TOTAL_OCTETS, 1_000_000))],
                )),
                m(Avp::grouped(
                    c::USED_SERVICE_UNIT,
                    vec![
                        m(Avp::u32(c::CC_TIME, 60)),
                        m(Avp::u64(c::CC_TOTAL_OCTETS, 12_345_678_901)),
                    ],
                )),
                m(Avp::u32(c::RATING_GROUP, 100)),
                m(Avp::u32(c::SERVICE_IDENTIFIER, 1)),
            ],
        )))
}

/// Removes every top-level AVP `code` (no vendor).
pub fn without(mut msg: Message, code: u32) -> Message {
    msg.avps.retain(|a| !a.is(code, None));
    msg
}
