//! The Diameter dictionary: AVP code → name, data type, vendor, M-bit rule; command
//! code → names, P-bit rule and required request AVPs.
//!
//! Covers the base protocol (RFC 6733), Credit-Control (RFC 4006), the Gx subset of
//! 3GPP TS 29.212 a DRA touches, DOIC (RFC 7683, with the peer report of RFC 8581 and
//! the rate algorithm of RFC 8582) and Load (RFC 8583). Codes and types
//! were checked against the RFC tables and Wireshark's `dictionary.xml`,
//! `chargecontrol.xml` and `TGPP.xml`.

use std::collections::HashMap;
use std::sync::LazyLock;

use dra_common::wire::app;

/// Vendor ids (IANA SMI network management private enterprise codes).
pub mod vendor {
    /// 3GPP.
    pub const TGPP: u32 = 10415;
}

/// AVP codes. Re-exports the ones the fast path shares (`dra_common::wire::avp`) and adds
/// the rest; vendor-specific codes (3GPP, vendor [`super::vendor::TGPP`]) are marked.
pub mod avp_code {
    pub use dra_common::wire::avp::*;

    // RFC 6733 §4.5 base protocol AVPs not in dra_common.
    /// User-Name (RFC 6733 §8.14).
    pub const USER_NAME: u32 = 1;
    /// Class (RFC 6733 §8.20).
    pub const CLASS: u32 = 25;
    /// Session-Timeout (RFC 6733 §8.13).
    pub const SESSION_TIMEOUT: u32 = 27;
    /// Proxy-State (RFC 6733 §6.7.4).
    pub const PROXY_STATE: u32 = 33;
    /// Acct-Session-Id (RFC 6733 §9.8.4).
    pub const ACCT_SESSION_ID: u32 = 44;
    /// Acct-Multi-Session-Id (RFC 6733 §9.8.5).
    pub const ACCT_MULTI_SESSION_ID: u32 = 50;
    /// Event-Timestamp (RFC 6733 §8.21).
    pub const EVENT_TIMESTAMP: u32 = 55;
    /// Acct-Interim-Interval (RFC 6733 §9.8.2).
    pub const ACCT_INTERIM_INTERVAL: u32 = 85;
    /// Vendor-Specific-Application-Id (RFC 6733 §6.11), Grouped.
    pub const VENDOR_SPECIFIC_APPLICATION_ID: u32 = 260;
    /// Redirect-Host-Usage (RFC 6733 §6.13).
    pub const REDIRECT_HOST_USAGE: u32 = 261;
    /// Redirect-Max-Cache-Time (RFC 6733 §6.14).
    pub const REDIRECT_MAX_CACHE_TIME: u32 = 262;
    /// Supported-Vendor-Id (RFC 6733 §5.3.6).
    pub const SUPPORTED_VENDOR_ID: u32 = 265;
    /// Vendor-Id (RFC 6733 §5.3.3).
    pub const VENDOR_ID: u32 = 266;
    /// Firmware-Revision (RFC 6733 §5.3.4).
    pub const FIRMWARE_REVISION: u32 = 267;
    /// Product-Name (RFC 6733 §5.3.7).
    pub const PRODUCT_NAME: u32 = 269;
    /// Session-Binding (RFC 6733 §8.17).
    pub const SESSION_BINDING: u32 = 270;
    /// Session-Server-Failover (RFC 6733 §8.18).
    pub const SESSION_SERVER_FAILOVER: u32 = 271;
    /// Multi-Round-Time-Out (RFC 6733 §8.19).
    pub const MULTI_ROUND_TIME_OUT: u32 = 272;
    /// Disconnect-Cause (RFC 6733 §5.4.3).
    pub const DISCONNECT_CAUSE: u32 = 273;
    /// Auth-Request-Type (RFC 6733 §8.7).
    pub const AUTH_REQUEST_TYPE: u32 = 274;
    /// Auth-Grace-Period (RFC 6733 §8.10).
    pub const AUTH_GRACE_PERIOD: u32 = 276;
    /// Auth-Session-State (RFC 6733 §8.11).
    pub const AUTH_SESSION_STATE: u32 = 277;
    /// Origin-State-Id (RFC 6733 §8.16).
    pub const ORIGIN_STATE_ID: u32 = 278;
    /// Proxy-Host (RFC 6733 §6.7.3).
    pub const PROXY_HOST: u32 = 280;
    /// Proxy-Info (RFC 6733 §6.7.2), Grouped.
    pub const PROXY_INFO: u32 = 284;
    /// Re-Auth-Request-Type (RFC 6733 §8.12).
    pub const RE_AUTH_REQUEST_TYPE: u32 = 285;
    /// Accounting-Sub-Session-Id (RFC 6733 §9.8.6).
    pub const ACCOUNTING_SUB_SESSION_ID: u32 = 287;
    /// Authorization-Lifetime (RFC 6733 §8.9).
    pub const AUTHORIZATION_LIFETIME: u32 = 291;
    /// Redirect-Host (RFC 6733 §6.12).
    pub const REDIRECT_HOST: u32 = 292;
    /// Error-Reporting-Host (RFC 6733 §7.4).
    pub const ERROR_REPORTING_HOST: u32 = 294;
    /// Termination-Cause (RFC 6733 §8.15).
    pub const TERMINATION_CAUSE: u32 = 295;
    /// Experimental-Result (RFC 6733 §7.6), Grouped.
    pub const EXPERIMENTAL_RESULT: u32 = 297;
    /// Experimental-Result-Code (RFC 6733 §7.7).
    pub const EXPERIMENTAL_RESULT_CODE: u32 = 298;
    /// Inband-Security-Id (RFC 6733 §6.10).
    pub const INBAND_SECURITY_ID: u32 = 299;
    /// E2E-Sequence (RFC 6733 §6.15), Grouped.
    pub const E2E_SEQUENCE: u32 = 300;
    /// Accounting-Record-Type (RFC 6733 §9.8.1).
    pub const ACCOUNTING_RECORD_TYPE: u32 = 480;
    /// Accounting-Realtime-Required (RFC 6733 §9.8.7).
    pub const ACCOUNTING_REALTIME_REQUIRED: u32 = 483;
    /// Accounting-Record-Number (RFC 6733 §9.8.3).
    pub const ACCOUNTING_RECORD_NUMBER: u32 = 485;

    // NASREQ / RADIUS attributes used on Gx (RFC 7155).
    /// Framed-IP-Address (RFC 7155 §4.4.10.5.1): OctetString, 4 bytes.
    pub const FRAMED_IP_ADDRESS: u32 = 8;
    /// Called-Station-Id (RFC 7155 §4.3.2.2): the APN on Gx.
    pub const CALLED_STATION_ID: u32 = 30;
    /// Framed-IPv6-Prefix (RFC 7155 §4.4.10.6.2).
    pub const FRAMED_IPV6_PREFIX: u32 = 97;

    // RFC 4006 §8 Credit-Control AVPs.
    /// CC-Correlation-Id (RFC 4006 §8.1).
    pub const CC_CORRELATION_ID: u32 = 411;
    /// CC-Input-Octets (RFC 4006 §8.24).
    pub const CC_INPUT_OCTETS: u32 = 412;
    /// CC-Money (RFC 4006 §8.22), Grouped.
    pub const CC_MONEY: u32 = 413;
    /// CC-Output-Octets (RFC 4006 §8.25).
    pub const CC_OUTPUT_OCTETS: u32 = 414;
    /// CC-Service-Specific-Units (RFC 4006 §8.26).
    pub const CC_SERVICE_SPECIFIC_UNITS: u32 = 417;
    /// CC-Session-Failover (RFC 4006 §8.4).
    pub const CC_SESSION_FAILOVER: u32 = 418;
    /// CC-Sub-Session-Id (RFC 4006 §8.5).
    pub const CC_SUB_SESSION_ID: u32 = 419;
    /// CC-Time (RFC 4006 §8.21).
    pub const CC_TIME: u32 = 420;
    /// CC-Total-Octets (RFC 4006 §8.23).
    pub const CC_TOTAL_OCTETS: u32 = 421;
    /// Check-Balance-Result (RFC 4006 §8.6).
    pub const CHECK_BALANCE_RESULT: u32 = 422;
    /// Cost-Information (RFC 4006 §8.7), Grouped.
    pub const COST_INFORMATION: u32 = 423;
    /// Cost-Unit (RFC 4006 §8.12).
    pub const COST_UNIT: u32 = 424;
    /// Currency-Code (RFC 4006 §8.11).
    pub const CURRENCY_CODE: u32 = 425;
    /// Credit-Control (RFC 4006 §8.13).
    pub const CREDIT_CONTROL: u32 = 426;
    /// Credit-Control-Failure-Handling (RFC 4006 §8.14).
    pub const CREDIT_CONTROL_FAILURE_HANDLING: u32 = 427;
    /// Direct-Debiting-Failure-Handling (RFC 4006 §8.15).
    pub const DIRECT_DEBITING_FAILURE_HANDLING: u32 = 428;
    /// Exponent (RFC 4006 §8.9).
    pub const EXPONENT: u32 = 429;
    /// Final-Unit-Indication (RFC 4006 §8.34), Grouped.
    pub const FINAL_UNIT_INDICATION: u32 = 430;
    /// Granted-Service-Unit (RFC 4006 §8.17), Grouped.
    pub const GRANTED_SERVICE_UNIT: u32 = 431;
    /// Rating-Group (RFC 4006 §8.29).
    pub const RATING_GROUP: u32 = 432;
    /// Redirect-Address-Type (RFC 4006 §8.38).
    pub const REDIRECT_ADDRESS_TYPE: u32 = 433;
    /// Redirect-Server (RFC 4006 §8.37), Grouped.
    pub const REDIRECT_SERVER: u32 = 434;
    /// Redirect-Server-Address (RFC 4006 §8.39).
    pub const REDIRECT_SERVER_ADDRESS: u32 = 435;
    /// Requested-Action (RFC 4006 §8.41).
    pub const REQUESTED_ACTION: u32 = 436;
    /// Requested-Service-Unit (RFC 4006 §8.18), Grouped.
    pub const REQUESTED_SERVICE_UNIT: u32 = 437;
    /// Restriction-Filter-Rule (RFC 4006 §8.36).
    pub const RESTRICTION_FILTER_RULE: u32 = 438;
    /// Service-Identifier (RFC 4006 §8.28).
    pub const SERVICE_IDENTIFIER: u32 = 439;
    /// Service-Parameter-Info (RFC 4006 §8.43), Grouped.
    pub const SERVICE_PARAMETER_INFO: u32 = 440;
    /// Service-Parameter-Type (RFC 4006 §8.44).
    pub const SERVICE_PARAMETER_TYPE: u32 = 441;
    /// Service-Parameter-Value (RFC 4006 §8.45).
    pub const SERVICE_PARAMETER_VALUE: u32 = 442;
    /// Subscription-Id (RFC 4006 §8.46), Grouped.
    pub const SUBSCRIPTION_ID: u32 = 443;
    /// Subscription-Id-Data (RFC 4006 §8.48).
    pub const SUBSCRIPTION_ID_DATA: u32 = 444;
    /// Unit-Value (RFC 4006 §8.8), Grouped.
    pub const UNIT_VALUE: u32 = 445;
    /// Used-Service-Unit (RFC 4006 §8.19), Grouped.
    pub const USED_SERVICE_UNIT: u32 = 446;
    /// Value-Digits (RFC 4006 §8.10).
    pub const VALUE_DIGITS: u32 = 447;
    /// Validity-Time (RFC 4006 §8.33).
    pub const VALIDITY_TIME: u32 = 448;
    /// Final-Unit-Action (RFC 4006 §8.35).
    pub const FINAL_UNIT_ACTION: u32 = 449;
    /// Subscription-Id-Type (RFC 4006 §8.47).
    pub const SUBSCRIPTION_ID_TYPE: u32 = 450;
    /// Tariff-Time-Change (RFC 4006 §8.20).
    pub const TARIFF_TIME_CHANGE: u32 = 451;
    /// Tariff-Change-Usage (RFC 4006 §8.27).
    pub const TARIFF_CHANGE_USAGE: u32 = 452;
    /// G-S-U-Pool-Identifier (RFC 4006 §8.31).
    pub const G_S_U_POOL_IDENTIFIER: u32 = 453;
    /// CC-Unit-Type (RFC 4006 §8.32).
    pub const CC_UNIT_TYPE: u32 = 454;
    /// Multiple-Services-Indicator (RFC 4006 §8.40).
    pub const MULTIPLE_SERVICES_INDICATOR: u32 = 455;
    /// Multiple-Services-Credit-Control (RFC 4006 §8.16), Grouped.
    pub const MULTIPLE_SERVICES_CREDIT_CONTROL: u32 = 456;
    /// G-S-U-Pool-Reference (RFC 4006 §8.30), Grouped.
    pub const G_S_U_POOL_REFERENCE: u32 = 457;
    /// User-Equipment-Info (RFC 4006 §8.49), Grouped.
    pub const USER_EQUIPMENT_INFO: u32 = 458;
    /// User-Equipment-Info-Type (RFC 4006 §8.50).
    pub const USER_EQUIPMENT_INFO_TYPE: u32 = 459;
    /// User-Equipment-Info-Value (RFC 4006 §8.51).
    pub const USER_EQUIPMENT_INFO_VALUE: u32 = 460;
    /// Service-Context-Id (RFC 4006 §8.42).
    pub const SERVICE_CONTEXT_ID: u32 = 461;

    // 3GPP (vendor 10415), TS 29.212 Gx and TS 29.214/29.229 AVPs a DRA touches.
    /// Max-Requested-Bandwidth-DL (3GPP TS 29.214 §5.3.14), vendor 10415.
    pub const MAX_REQUESTED_BANDWIDTH_DL: u32 = 515;
    /// Max-Requested-Bandwidth-UL (3GPP TS 29.214 §5.3.15), vendor 10415.
    pub const MAX_REQUESTED_BANDWIDTH_UL: u32 = 516;
    /// Supported-Features (3GPP TS 29.229 §6.3.29), vendor 10415, Grouped.
    pub const SUPPORTED_FEATURES: u32 = 628;
    /// Feature-List-ID (3GPP TS 29.229 §6.3.30), vendor 10415.
    pub const FEATURE_LIST_ID: u32 = 629;
    /// Feature-List (3GPP TS 29.229 §6.3.31), vendor 10415.
    pub const FEATURE_LIST: u32 = 630;
    /// Bearer-Usage (3GPP TS 29.212 §5.3.1), vendor 10415.
    pub const BEARER_USAGE: u32 = 1000;
    /// Charging-Rule-Install (3GPP TS 29.212 §5.3.2), vendor 10415, Grouped.
    pub const CHARGING_RULE_INSTALL: u32 = 1001;
    /// Charging-Rule-Remove (3GPP TS 29.212 §5.3.3), vendor 10415, Grouped.
    pub const CHARGING_RULE_REMOVE: u32 = 1002;
    /// Charging-Rule-Definition (3GPP TS 29.212 §5.3.4), vendor 10415, Grouped.
    pub const CHARGING_RULE_DEFINITION: u32 = 1003;
    /// Charging-Rule-Base-Name (3GPP TS 29.212 §5.3.5), vendor 10415.
    pub const CHARGING_RULE_BASE_NAME: u32 = 1004;
    /// Charging-Rule-Name (3GPP TS 29.212 §5.3.6), vendor 10415.
    pub const CHARGING_RULE_NAME: u32 = 1005;
    /// Event-Trigger (3GPP TS 29.212 §5.3.7), vendor 10415.
    pub const EVENT_TRIGGER: u32 = 1006;
    /// Precedence (3GPP TS 29.212 §5.3.11), vendor 10415.
    pub const PRECEDENCE: u32 = 1010;
    /// QoS-Information (3GPP TS 29.212 §5.3.16), vendor 10415, Grouped.
    pub const QOS_INFORMATION: u32 = 1016;
    /// Charging-Rule-Report (3GPP TS 29.212 §5.3.18), vendor 10415, Grouped.
    pub const CHARGING_RULE_REPORT: u32 = 1018;
    /// PCC-Rule-Status (3GPP TS 29.212 §5.3.19), vendor 10415.
    pub const PCC_RULE_STATUS: u32 = 1019;
    /// Bearer-Identifier (3GPP TS 29.212 §5.3.20), vendor 10415.
    pub const BEARER_IDENTIFIER: u32 = 1020;
    /// Bearer-Operation (3GPP TS 29.212 §5.3.21), vendor 10415.
    pub const BEARER_OPERATION: u32 = 1021;
    /// Bearer-Control-Mode (3GPP TS 29.212 §5.3.23), vendor 10415.
    pub const BEARER_CONTROL_MODE: u32 = 1023;
    /// Network-Request-Support (3GPP TS 29.212 §5.3.24), vendor 10415.
    pub const NETWORK_REQUEST_SUPPORT: u32 = 1024;
    /// Guaranteed-Bitrate-DL (3GPP TS 29.212 §5.3.25), vendor 10415.
    pub const GUARANTEED_BITRATE_DL: u32 = 1025;
    /// Guaranteed-Bitrate-UL (3GPP TS 29.212 §5.3.26), vendor 10415.
    pub const GUARANTEED_BITRATE_UL: u32 = 1026;
    /// IP-CAN-Type (3GPP TS 29.212 §5.3.27), vendor 10415.
    pub const IP_CAN_TYPE: u32 = 1027;
    /// QoS-Class-Identifier (3GPP TS 29.212 §5.3.17), vendor 10415.
    pub const QOS_CLASS_IDENTIFIER: u32 = 1028;
    /// RAT-Type (3GPP TS 29.212 §5.3.31), vendor 10415.
    pub const RAT_TYPE: u32 = 1032;
    /// Allocation-Retention-Priority (3GPP TS 29.212 §5.3.32), vendor 10415, Grouped.
    pub const ALLOCATION_RETENTION_PRIORITY: u32 = 1034;
    /// APN-Aggregate-Max-Bitrate-DL (3GPP TS 29.212 §5.3.39), vendor 10415.
    pub const APN_AGGREGATE_MAX_BITRATE_DL: u32 = 1040;
    /// APN-Aggregate-Max-Bitrate-UL (3GPP TS 29.212 §5.3.40), vendor 10415.
    pub const APN_AGGREGATE_MAX_BITRATE_UL: u32 = 1041;
    /// Priority-Level (3GPP TS 29.212 §5.3.45), vendor 10415.
    pub const PRIORITY_LEVEL: u32 = 1046;
    /// Pre-emption-Capability (3GPP TS 29.212 §5.3.46), vendor 10415.
    pub const PRE_EMPTION_CAPABILITY: u32 = 1047;
    /// Pre-emption-Vulnerability (3GPP TS 29.212 §5.3.47), vendor 10415.
    pub const PRE_EMPTION_VULNERABILITY: u32 = 1048;
    /// Default-EPS-Bearer-QoS (3GPP TS 29.212 §5.3.48), vendor 10415, Grouped.
    pub const DEFAULT_EPS_BEARER_QOS: u32 = 1049;

    // RFC 7683 §7 DOIC AVPs.
    /// OC-Supported-Features (RFC 7683 §7.1), Grouped.
    pub const OC_SUPPORTED_FEATURES: u32 = 621;
    /// OC-Feature-Vector (RFC 7683 §7.2).
    pub const OC_FEATURE_VECTOR: u32 = 622;
    /// OC-OLR (RFC 7683 §7.3), Grouped.
    pub const OC_OLR: u32 = 623;
    /// OC-Sequence-Number (RFC 7683 §7.4).
    pub const OC_SEQUENCE_NUMBER: u32 = 624;
    /// OC-Validity-Duration (RFC 7683 §7.5).
    pub const OC_VALIDITY_DURATION: u32 = 625;
    /// OC-Report-Type (RFC 7683 §7.6).
    pub const OC_REPORT_TYPE: u32 = 626;
    /// OC-Reduction-Percentage (RFC 7683 §7.7).
    pub const OC_REDUCTION_PERCENTAGE: u32 = 627;
    /// OC-Peer-Algo (RFC 8581, peer report AVPs): in OC-Supported-Features, the algorithm a
    /// reporting node selected for its peer reports.
    pub const OC_PEER_ALGO: u32 = 648;
    /// SourceID (RFC 8581, peer report AVPs): the DiameterIdentity of the node that inserted the
    /// grouped AVP it is in (OC-Supported-Features, OC-OLR; RFC 8583 Load too).
    pub const SOURCE_ID: u32 = 649;
    /// OC-Maximum-Rate (RFC 8582, rate algorithm AVPs; IANA code 670): in OC-OLR, the requests per
    /// second the reacting node may send with the rate algorithm.
    pub const OC_MAXIMUM_RATE: u32 = 670;

    // RFC 8583 §7 Load AVPs: LOAD, LOAD_TYPE, LOAD_VALUE come from dra_common.
}

/// Command codes. Re-exports `dra_common::wire::cmd` and adds the session commands.
pub mod command_code {
    pub use dra_common::wire::cmd::*;

    /// Abort-Session-Request/Answer (RFC 6733 §8.5).
    pub const ABORT_SESSION: u32 = 274;
    /// Session-Termination-Request/Answer (RFC 6733 §8.4).
    pub const SESSION_TERMINATION: u32 = 275;
}

/// Enumerated values the agent uses.
pub mod enums {
    /// Load-Type (RFC 8583 §7.2).
    pub mod load_type {
        /// Load of the sending host.
        pub const HOST: i32 = 0;
        /// Load of the sending peer (agent).
        pub const PEER: i32 = 1;
    }
    /// Disconnect-Cause (RFC 6733 §5.4.3).
    pub mod disconnect_cause {
        /// The peer is rebooting.
        pub const REBOOTING: i32 = 0;
        /// The peer is busy.
        pub const BUSY: i32 = 1;
        /// The peer does not want to talk to us.
        pub const DO_NOT_WANT_TO_TALK_TO_YOU: i32 = 2;
    }
    /// OC-Report-Type (RFC 7683 §7.6).
    pub mod oc_report_type {
        /// Overload report for the host.
        pub const HOST_REPORT: i32 = 0;
        /// Overload report for the realm.
        pub const REALM_REPORT: i32 = 1;
        /// Overload report for the sending peer (RFC 8581).
        pub const PEER_REPORT: i32 = 2;
    }
    /// OC-Feature-Vector / OC-Peer-Algo bits (RFC 7683 §7.2, RFC 8581, RFC 8582; IANA
    /// "OC-Feature-Vector AVP Values"). Unsigned64 flags; 0 is reserved.
    pub mod oc_feature {
        /// OLR_DEFAULT_ALGO: the loss algorithm (RFC 7683 §7.2).
        pub const LOSS: u64 = 0x0000_0000_0000_0001;
        /// OLR_RATE_ALGORITHM: the rate algorithm (RFC 8582).
        pub const RATE: u64 = 0x0000_0000_0000_0004;
        /// OLR_PEER_REPORT: peer reports supported (RFC 8581).
        pub const PEER_REPORT: u64 = 0x0000_0000_0000_0010;
    }
    /// Subscription-Id-Type (RFC 4006 §8.47).
    pub mod subscription_id_type {
        /// MSISDN.
        pub const END_USER_E164: i32 = 0;
        /// IMSI.
        pub const END_USER_IMSI: i32 = 1;
        /// SIP URI.
        pub const END_USER_SIP_URI: i32 = 2;
        /// NAI.
        pub const END_USER_NAI: i32 = 3;
        /// Private.
        pub const END_USER_PRIVATE: i32 = 4;
    }
}

/// AVP data formats (RFC 6733 §4.2 basic, §4.3 derived).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DataType {
    /// Arbitrary bytes.
    OctetString,
    /// 32-bit signed.
    Integer32,
    /// 64-bit signed.
    Integer64,
    /// 32-bit unsigned.
    Unsigned32,
    /// 64-bit unsigned.
    Unsigned64,
    /// IEEE 754 single.
    Float32,
    /// IEEE 754 double.
    Float64,
    /// A sequence of AVPs (§4.4).
    Grouped,
    /// 2-byte address family + address (§4.3.1).
    Address,
    /// NTP seconds, 4 bytes (§4.3.1).
    Time,
    /// UTF-8 text.
    Utf8String,
    /// FQDN or realm.
    DiameterIdentity,
    /// `aaa://` URI.
    DiameterUri,
    /// Integer32 with named values.
    Enumerated,
    /// IP filter rule text.
    IpFilterRule,
}

impl DataType {
    /// The exact data length for fixed-size types (RFC 6733 §4.2).
    pub const fn fixed_len(self) -> Option<usize> {
        match self {
            DataType::Integer32
            | DataType::Unsigned32
            | DataType::Float32
            | DataType::Enumerated
            | DataType::Time => Some(4),
            DataType::Integer64 | DataType::Unsigned64 | DataType::Float64 => Some(8),
            _ => None,
        }
    }

    /// The minimum data length: the size of the zero-filled payload that stands for a
    /// missing or unreadable AVP in Failed-AVP (RFC 6733 §7.5, §7.1.5). Address counts
    /// the family plus an IPv4 address.
    pub const fn min_len(self) -> usize {
        match self.fixed_len() {
            Some(n) => n,
            None => match self {
                DataType::Address => 6,
                _ => 0,
            },
        }
    }
}

/// How an AVP flag must be set (RFC 6733 §4.5 table columns).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FlagRule {
    /// The flag MUST be set.
    Must,
    /// The flag MAY be set.
    May,
    /// The flag MUST NOT be set.
    MustNot,
}

/// One dictionary entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AvpDef {
    /// AVP code.
    pub code: u32,
    /// Vendor-Id (`None` for IETF AVPs; the V bit is set exactly when `Some`).
    pub vendor_id: Option<u32>,
    /// The AVP name as in its specification.
    pub name: &'static str,
    /// Data format.
    pub data_type: DataType,
    /// Rule for the M bit.
    pub m_bit: FlagRule,
}

/// The AVPs a request must carry, by dictionary key.
pub type AvpKey = (u32, Option<u32>);

/// One command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommandDef {
    /// Command code.
    pub code: u32,
    /// Name without Request/Answer, e.g. "Credit-Control".
    pub name: &'static str,
    /// Request abbreviation, e.g. "CCR".
    pub request_abbrev: &'static str,
    /// Answer abbreviation, e.g. "CCA".
    pub answer_abbrev: &'static str,
    /// The command's header has PXY: the P bit must be set; otherwise it must be clear
    /// (RFC 6733 §3, checked as DIAMETER_INVALID_HDR_BITS).
    pub proxiable: bool,
    /// Required (`{ }` / `< >`) AVPs of the request for every application.
    pub request_required: &'static [AvpKey],
    /// Extra required request AVPs for particular applications.
    pub app_required: &'static [(u32, &'static [AvpKey])],
}

impl CommandDef {
    /// The required AVPs of a request of this command in `application_id`, in the order
    /// they are checked.
    pub fn required(&self, application_id: u32) -> impl Iterator<Item = AvpKey> + '_ {
        let extra = self
            .app_required
            .iter()
            .filter(move |(a, _)| *a == application_id)
            .flat_map(|(_, keys)| keys.iter());
        self.request_required.iter().chain(extra).copied()
    }
}

/// The dictionary used by validation and diagnostics. [`Dictionary::standard`] holds
/// every AVP and command listed in this module; [`Dictionary::add_avp`] and
/// [`Dictionary::add_command`] extend it.
#[derive(Clone, Debug)]
pub struct Dictionary {
    avps: HashMap<AvpKey, AvpDef>,
    commands: HashMap<u32, CommandDef>,
}

impl Default for Dictionary {
    fn default() -> Self {
        Dictionary::standard().clone()
    }
}

impl Dictionary {
    /// An empty dictionary.
    pub fn empty() -> Dictionary {
        Dictionary {
            avps: HashMap::new(),
            commands: HashMap::new(),
        }
    }

    /// The built-in dictionary (built once, shared).
    pub fn standard() -> &'static Dictionary {
        static STD: LazyLock<Dictionary> = LazyLock::new(|| {
            let mut d = Dictionary::empty();
            for def in AVPS {
                d.add_avp(*def);
            }
            for c in COMMANDS {
                d.add_command(*c);
            }
            d
        });
        &STD
    }

    /// Adds or replaces an AVP definition.
    pub fn add_avp(&mut self, def: AvpDef) {
        self.avps.insert((def.code, def.vendor_id), def);
    }

    /// Adds or replaces a command definition.
    pub fn add_command(&mut self, def: CommandDef) {
        self.commands.insert(def.code, def);
    }

    /// The definition of AVP `code` from `vendor_id` (`None` = IETF).
    pub fn avp(&self, code: u32, vendor_id: Option<u32>) -> Option<&AvpDef> {
        self.avps.get(&(code, vendor_id))
    }

    /// The AVP's name, or `"Unknown-AVP"`.
    pub fn avp_name(&self, code: u32, vendor_id: Option<u32>) -> &'static str {
        self.avp(code, vendor_id).map_or("Unknown-AVP", |d| d.name)
    }

    /// The definition of a command.
    pub fn command(&self, code: u32) -> Option<&CommandDef> {
        self.commands.get(&code)
    }

    /// Number of AVP definitions.
    pub fn avp_count(&self) -> usize {
        self.avps.len()
    }
}

const fn ietf(code: u32, name: &'static str, data_type: DataType, m_bit: FlagRule) -> AvpDef {
    AvpDef {
        code,
        vendor_id: None,
        name,
        data_type,
        m_bit,
    }
}

const fn tgpp(code: u32, name: &'static str, data_type: DataType, m_bit: FlagRule) -> AvpDef {
    AvpDef {
        code,
        vendor_id: Some(vendor::TGPP),
        name,
        data_type,
        m_bit,
    }
}

use DataType::{
    Address, DiameterIdentity, DiameterUri, Enumerated, Grouped, Integer32, Integer64,
    IpFilterRule, OctetString, Time, Unsigned32, Unsigned64, Utf8String,
};
use FlagRule::{May, Must, MustNot};
use avp_code as c;

#[rustfmt::skip]
static AVPS: &[AvpDef] = &[
    // RFC 6733 §4.5, §6.11, §7, §8, §9.8 base protocol.
    ietf(c::USER_NAME, "User-Name", Utf8String, Must),
    ietf(c::CLASS, "Class", OctetString, Must),
    ietf(c::SESSION_TIMEOUT, "Session-Timeout", Unsigned32, Must),
    ietf(c::PROXY_STATE, "Proxy-State", OctetString, Must),
    ietf(c::ACCT_SESSION_ID, "Acct-Session-Id", OctetString, Must),
    ietf(c::ACCT_MULTI_SESSION_ID, "Acct-Multi-Session-Id", Utf8String, Must),
    ietf(c::EVENT_TIMESTAMP, "Event-Timestamp", Time, Must),
    ietf(c::ACCT_INTERIM_INTERVAL, "Acct-Interim-Interval", Unsigned32, Must),
    ietf(c::HOST_IP_ADDRESS, "Host-IP-Address", Address, Must),
    ietf(c::AUTH_APPLICATION_ID, "Auth-Application-Id", Unsigned32, Must),
    ietf(c::ACCT_APPLICATION_ID, "Acct-Application-Id", Unsigned32, Must),
    ietf(c::VENDOR_SPECIFIC_APPLICATION_ID, "Vendor-Specific-Application-Id", Grouped, Must),
    ietf(c::REDIRECT_HOST_USAGE, "Redirect-Host-Usage", Enumerated, Must),
    ietf(c::REDIRECT_MAX_CACHE_TIME, "Redirect-Max-Cache-Time", Unsigned32, Must),
    ietf(c::SESSION_ID, "Session-Id", Utf8String, Must),
    ietf(c::ORIGIN_HOST, "Origin-Host", DiameterIdentity, Must),
    ietf(c::SUPPORTED_VENDOR_ID, "Supported-Vendor-Id", Unsigned32, Must),
    ietf(c::VENDOR_ID, "Vendor-Id", Unsigned32, Must),
    ietf(c::FIRMWARE_REVISION, "Firmware-Revision", Unsigned32, MustNot),
    ietf(c::RESULT_CODE, "Result-Code", Unsigned32, Must),
    ietf(c::PRODUCT_NAME, "Product-Name", Utf8String, MustNot),
    ietf(c::SESSION_BINDING, "Session-Binding", Unsigned32, Must),
    ietf(c::SESSION_SERVER_FAILOVER, "Session-Server-Failover", Enumerated, Must),
    ietf(c::MULTI_ROUND_TIME_OUT, "Multi-Round-Time-Out", Unsigned32, Must),
    ietf(c::DISCONNECT_CAUSE, "Disconnect-Cause", Enumerated, Must),
    ietf(c::AUTH_REQUEST_TYPE, "Auth-Request-Type", Enumerated, Must),
    ietf(c::AUTH_GRACE_PERIOD, "Auth-Grace-Period", Unsigned32, Must),
    ietf(c::AUTH_SESSION_STATE, "Auth-Session-State", Enumerated, Must),
    ietf(c::ORIGIN_STATE_ID, "Origin-State-Id", Unsigned32, Must),
    ietf(c::FAILED_AVP, "Failed-AVP", Grouped, Must),
    ietf(c::PROXY_HOST, "Proxy-Host", DiameterIdentity, Must),
    ietf(c::ERROR_MESSAGE, "Error-Message", Utf8String, MustNot),
    ietf(c::ROUTE_RECORD, "Route-Record", DiameterIdentity, Must),
    ietf(c::DESTINATION_REALM, "Destination-Realm", DiameterIdentity, Must),
    ietf(c::PROXY_INFO, "Proxy-Info", Grouped, Must),
    ietf(c::RE_AUTH_REQUEST_TYPE, "Re-Auth-Request-Type", Enumerated, Must),
    ietf(c::ACCOUNTING_SUB_SESSION_ID, "Accounting-Sub-Session-Id", Unsigned64, Must),
    ietf(c::AUTHORIZATION_LIFETIME, "Authorization-Lifetime", Unsigned32, Must),
    ietf(c::REDIRECT_HOST, "Redirect-Host", DiameterUri, Must),
    ietf(c::DESTINATION_HOST, "Destination-Host", DiameterIdentity, Must),
    ietf(c::ERROR_REPORTING_HOST, "Error-Reporting-Host", DiameterIdentity, MustNot),
    ietf(c::TERMINATION_CAUSE, "Termination-Cause", Enumerated, Must),
    ietf(c::ORIGIN_REALM, "Origin-Realm", DiameterIdentity, Must),
    ietf(c::EXPERIMENTAL_RESULT, "Experimental-Result", Grouped, Must),
    ietf(c::EXPERIMENTAL_RESULT_CODE, "Experimental-Result-Code", Unsigned32, Must),
    ietf(c::INBAND_SECURITY_ID, "Inband-Security-Id", Unsigned32, Must),
    ietf(c::E2E_SEQUENCE, "E2E-Sequence", Grouped, Must),
    ietf(c::ACCOUNTING_RECORD_TYPE, "Accounting-Record-Type", Enumerated, Must),
    ietf(c::ACCOUNTING_REALTIME_REQUIRED, "Accounting-Realtime-Required", Enumerated, Must),
    ietf(c::ACCOUNTING_RECORD_NUMBER, "Accounting-Record-Number", Unsigned32, Must),
    // RFC 7155 NASREQ attributes used on Gx.
    ietf(c::FRAMED_IP_ADDRESS, "Framed-IP-Address", OctetString, Must),
    ietf(c::CALLED_STATION_ID, "Called-Station-Id", Utf8String, Must),
    ietf(c::FRAMED_IPV6_PREFIX, "Framed-IPv6-Prefix", OctetString, Must),
    // RFC 4006 §8 Credit-Control.
    ietf(c::CC_CORRELATION_ID, "CC-Correlation-Id", OctetString, May),
    ietf(c::CC_INPUT_OCTETS, "CC-Input-Octets", Unsigned64, Must),
    ietf(c::CC_MONEY, "CC-Money", Grouped, Must),
    ietf(c::CC_OUTPUT_OCTETS, "CC-Output-Octets", Unsigned64, Must),
    ietf(c::CC_REQUEST_NUMBER, "CC-Request-Number", Unsigned32, Must),
    ietf(c::CC_REQUEST_TYPE, "CC-Request-Type", Enumerated, Must),
    ietf(c::CC_SERVICE_SPECIFIC_UNITS, "CC-Service-Specific-Units", Unsigned64, Must),
    ietf(c::CC_SESSION_FAILOVER, "CC-Session-Failover", Enumerated, Must),
    ietf(c::CC_SUB_SESSION_ID, "CC-Sub-Session-Id", Unsigned64, Must),
    ietf(c::CC_TIME, "CC-Time", Unsigned32, Must),
    ietf(c::CC_TOTAL_OCTETS, "CC-Total-Octets", Unsigned64, Must),
    ietf(c::CHECK_BALANCE_RESULT, "Check-Balance-Result", Enumerated, Must),
    ietf(c::COST_INFORMATION, "Cost-Information", Grouped, Must),
    ietf(c::COST_UNIT, "Cost-Unit", Utf8String, Must),
    ietf(c::CURRENCY_CODE, "Currency-Code", Unsigned32, Must),
    ietf(c::CREDIT_CONTROL, "Credit-Control", Enumerated, Must),
    ietf(c::CREDIT_CONTROL_FAILURE_HANDLING, "Credit-Control-Failure-Handling", Enumerated, Must),
    ietf(c::DIRECT_DEBITING_FAILURE_HANDLING, "Direct-Debiting-Failure-Handling", Enumerated, Must),
    ietf(c::EXPONENT, "Exponent", Integer32, Must),
    ietf(c::FINAL_UNIT_INDICATION, "Final-Unit-Indication", Grouped, Must),
    ietf(c::GRANTED_SERVICE_UNIT, "Granted-Service-Unit", Grouped, Must),
    ietf(c::RATING_GROUP, "Rating-Group", Unsigned32, Must),
    ietf(c::REDIRECT_ADDRESS_TYPE, "Redirect-Address-Type", Enumerated, Must),
    ietf(c::REDIRECT_SERVER, "Redirect-Server", Grouped, Must),
    ietf(c::REDIRECT_SERVER_ADDRESS, "Redirect-Server-Address", Utf8String, Must),
    ietf(c::REQUESTED_ACTION, "Requested-Action", Enumerated, Must),
    ietf(c::REQUESTED_SERVICE_UNIT, "Requested-Service-Unit", Grouped, Must),
    ietf(c::RESTRICTION_FILTER_RULE, "Restriction-Filter-Rule", IpFilterRule, Must),
    ietf(c::SERVICE_IDENTIFIER, "Service-Identifier", Unsigned32, Must),
    ietf(c::SERVICE_PARAMETER_INFO, "Service-Parameter-Info", Grouped, May),
    ietf(c::SERVICE_PARAMETER_TYPE, "Service-Parameter-Type", Unsigned32, May),
    ietf(c::SERVICE_PARAMETER_VALUE, "Service-Parameter-Value", OctetString, May),
    ietf(c::SUBSCRIPTION_ID, "Subscription-Id", Grouped, Must),
    ietf(c::SUBSCRIPTION_ID_DATA, "Subscription-Id-Data", Utf8String, Must),
    ietf(c::UNIT_VALUE, "Unit-Value", Grouped, Must),
    ietf(c::USED_SERVICE_UNIT, "Used-Service-Unit", Grouped, Must),
    ietf(c::VALUE_DIGITS, "Value-Digits", Integer64, Must),
    ietf(c::VALIDITY_TIME, "Validity-Time", Unsigned32, Must),
    ietf(c::FINAL_UNIT_ACTION, "Final-Unit-Action", Enumerated, Must),
    ietf(c::SUBSCRIPTION_ID_TYPE, "Subscription-Id-Type", Enumerated, Must),
    ietf(c::TARIFF_TIME_CHANGE, "Tariff-Time-Change", Time, Must),
    ietf(c::TARIFF_CHANGE_USAGE, "Tariff-Change-Usage", Enumerated, Must),
    ietf(c::G_S_U_POOL_IDENTIFIER, "G-S-U-Pool-Identifier", Unsigned32, Must),
    ietf(c::CC_UNIT_TYPE, "CC-Unit-Type", Enumerated, Must),
    ietf(c::MULTIPLE_SERVICES_INDICATOR, "Multiple-Services-Indicator", Enumerated, Must),
    ietf(c::MULTIPLE_SERVICES_CREDIT_CONTROL, "Multiple-Services-Credit-Control", Grouped, Must),
    ietf(c::G_S_U_POOL_REFERENCE, "G-S-U-Pool-Reference", Grouped, Must),
    ietf(c::USER_EQUIPMENT_INFO, "User-Equipment-Info", Grouped, May),
    ietf(c::USER_EQUIPMENT_INFO_TYPE, "User-Equipment-Info-Type", Enumerated, May),
    ietf(c::USER_EQUIPMENT_INFO_VALUE, "User-Equipment-Info-Value", OctetString, May),
    ietf(c::SERVICE_CONTEXT_ID, "Service-Context-Id", Utf8String, Must),
    // RFC 7683 §7 DOIC: the M bit MUST NOT be set.
    ietf(c::OC_SUPPORTED_FEATURES, "OC-Supported-Features", Grouped, MustNot),
    ietf(c::OC_FEATURE_VECTOR, "OC-Feature-Vector", Unsigned64, MustNot),
    ietf(c::OC_OLR, "OC-OLR", Grouped, MustNot),
    ietf(c::OC_SEQUENCE_NUMBER, "OC-Sequence-Number", Unsigned64, MustNot),
    ietf(c::OC_VALIDITY_DURATION, "OC-Validity-Duration", Unsigned32, MustNot),
    ietf(c::OC_REPORT_TYPE, "OC-Report-Type", Enumerated, MustNot),
    ietf(c::OC_REDUCTION_PERCENTAGE, "OC-Reduction-Percentage", Unsigned32, MustNot),
    // RFC 8581 (peer reports) and RFC 8582 (rate): the M bit MUST NOT be set.
    ietf(c::OC_PEER_ALGO, "OC-Peer-Algo", Unsigned64, MustNot),
    ietf(c::SOURCE_ID, "SourceID", DiameterIdentity, MustNot),
    ietf(c::OC_MAXIMUM_RATE, "OC-Maximum-Rate", Unsigned32, MustNot),
    // RFC 8583 §7 Load: the M bit MUST NOT be set.
    ietf(c::LOAD, "Load", Grouped, MustNot),
    ietf(c::LOAD_TYPE, "Load-Type", Enumerated, MustNot),
    ietf(c::LOAD_VALUE, "Load-Value", Unsigned64, MustNot),
    // 3GPP TS 29.212 (Gx), TS 29.214, TS 29.229; vendor 10415.
    tgpp(c::MAX_REQUESTED_BANDWIDTH_DL, "Max-Requested-Bandwidth-DL", Unsigned32, Must),
    tgpp(c::MAX_REQUESTED_BANDWIDTH_UL, "Max-Requested-Bandwidth-UL", Unsigned32, Must),
    tgpp(c::SUPPORTED_FEATURES, "Supported-Features", Grouped, Must),
    tgpp(c::FEATURE_LIST_ID, "Feature-List-ID", Unsigned32, Must),
    tgpp(c::FEATURE_LIST, "Feature-List", Unsigned32, Must),
    tgpp(c::BEARER_USAGE, "Bearer-Usage", Enumerated, Must),
    tgpp(c::CHARGING_RULE_INSTALL, "Charging-Rule-Install", Grouped, Must),
    tgpp(c::CHARGING_RULE_REMOVE, "Charging-Rule-Remove", Grouped, Must),
    tgpp(c::CHARGING_RULE_DEFINITION, "Charging-Rule-Definition", Grouped, Must),
    tgpp(c::CHARGING_RULE_BASE_NAME, "Charging-Rule-Base-Name", Utf8String, Must),
    tgpp(c::CHARGING_RULE_NAME, "Charging-Rule-Name", OctetString, Must),
    tgpp(c::EVENT_TRIGGER, "Event-Trigger", Enumerated, Must),
    tgpp(c::PRECEDENCE, "Precedence", Unsigned32, Must),
    tgpp(c::QOS_INFORMATION, "QoS-Information", Grouped, Must),
    tgpp(c::CHARGING_RULE_REPORT, "Charging-Rule-Report", Grouped, Must),
    tgpp(c::PCC_RULE_STATUS, "PCC-Rule-Status", Enumerated, Must),
    tgpp(c::BEARER_IDENTIFIER, "Bearer-Identifier", OctetString, Must),
    tgpp(c::BEARER_OPERATION, "Bearer-Operation", Enumerated, Must),
    tgpp(c::BEARER_CONTROL_MODE, "Bearer-Control-Mode", Enumerated, Must),
    tgpp(c::NETWORK_REQUEST_SUPPORT, "Network-Request-Support", Enumerated, Must),
    tgpp(c::GUARANTEED_BITRATE_DL, "Guaranteed-Bitrate-DL", Unsigned32, Must),
    tgpp(c::GUARANTEED_BITRATE_UL, "Guaranteed-Bitrate-UL", Unsigned32, Must),
    tgpp(c::IP_CAN_TYPE, "IP-CAN-Type", Enumerated, Must),
    tgpp(c::QOS_CLASS_IDENTIFIER, "QoS-Class-Identifier", Enumerated, Must),
    tgpp(c::RAT_TYPE, "RAT-Type", Enumerated, MustNot),
    tgpp(c::ALLOCATION_RETENTION_PRIORITY, "Allocation-Retention-Priority", Grouped, Must),
    tgpp(c::APN_AGGREGATE_MAX_BITRATE_DL, "APN-Aggregate-Max-Bitrate-DL", Unsigned32, MustNot),
    tgpp(c::APN_AGGREGATE_MAX_BITRATE_UL, "APN-Aggregate-Max-Bitrate-UL", Unsigned32, MustNot),
    tgpp(c::PRIORITY_LEVEL, "Priority-Level", Unsigned32, Must),
    tgpp(c::PRE_EMPTION_CAPABILITY, "Pre-emption-Capability", Enumerated, Must),
    tgpp(c::PRE_EMPTION_VULNERABILITY, "Pre-emption-Vulnerability", Enumerated, Must),
    tgpp(c::DEFAULT_EPS_BEARER_QOS, "Default-EPS-Bearer-QoS", Grouped, MustNot),
];

const fn k(code: u32) -> AvpKey {
    (code, None)
}

// Command ABNFs: RFC 6733 §5.3.1 (CER), §5.5.1 (DWR), §5.4.1 (DPR), §8.3.1 (RAR),
// §8.5.1 (ASR), §8.4.1 (STR); RFC 4006 §3.1 (CCR, Gy adds Service-Context-Id);
// 3GPP TS 29.212 §5.6.2 (Gx CCR).
static COMMANDS: &[CommandDef] = &[
    CommandDef {
        code: command_code::CAPABILITIES_EXCHANGE,
        name: "Capabilities-Exchange",
        request_abbrev: "CER",
        answer_abbrev: "CEA",
        proxiable: false,
        request_required: &[
            k(c::ORIGIN_HOST),
            k(c::ORIGIN_REALM),
            k(c::HOST_IP_ADDRESS),
            k(c::VENDOR_ID),
            k(c::PRODUCT_NAME),
        ],
        app_required: &[],
    },
    CommandDef {
        code: command_code::DEVICE_WATCHDOG,
        name: "Device-Watchdog",
        request_abbrev: "DWR",
        answer_abbrev: "DWA",
        proxiable: false,
        request_required: &[k(c::ORIGIN_HOST), k(c::ORIGIN_REALM)],
        app_required: &[],
    },
    CommandDef {
        code: command_code::DISCONNECT_PEER,
        name: "Disconnect-Peer",
        request_abbrev: "DPR",
        answer_abbrev: "DPA",
        proxiable: false,
        request_required: &[
            k(c::ORIGIN_HOST),
            k(c::ORIGIN_REALM),
            k(c::DISCONNECT_CAUSE),
        ],
        app_required: &[],
    },
    CommandDef {
        code: command_code::CREDIT_CONTROL,
        name: "Credit-Control",
        request_abbrev: "CCR",
        answer_abbrev: "CCA",
        proxiable: true,
        request_required: &[
            k(c::SESSION_ID),
            k(c::ORIGIN_HOST),
            k(c::ORIGIN_REALM),
            k(c::DESTINATION_REALM),
            k(c::AUTH_APPLICATION_ID),
            k(c::CC_REQUEST_TYPE),
            k(c::CC_REQUEST_NUMBER),
        ],
        app_required: &[(app::GY, &[k(c::SERVICE_CONTEXT_ID)])],
    },
    CommandDef {
        code: command_code::RE_AUTH,
        name: "Re-Auth",
        request_abbrev: "RAR",
        answer_abbrev: "RAA",
        proxiable: true,
        request_required: &[
            k(c::SESSION_ID),
            k(c::ORIGIN_HOST),
            k(c::ORIGIN_REALM),
            k(c::DESTINATION_REALM),
            k(c::DESTINATION_HOST),
            k(c::AUTH_APPLICATION_ID),
            k(c::RE_AUTH_REQUEST_TYPE),
        ],
        app_required: &[],
    },
    CommandDef {
        code: command_code::ABORT_SESSION,
        name: "Abort-Session",
        request_abbrev: "ASR",
        answer_abbrev: "ASA",
        proxiable: true,
        request_required: &[
            k(c::SESSION_ID),
            k(c::ORIGIN_HOST),
            k(c::ORIGIN_REALM),
            k(c::DESTINATION_REALM),
            k(c::DESTINATION_HOST),
            k(c::AUTH_APPLICATION_ID),
        ],
        app_required: &[],
    },
    CommandDef {
        code: command_code::SESSION_TERMINATION,
        name: "Session-Termination",
        request_abbrev: "STR",
        answer_abbrev: "STA",
        proxiable: true,
        request_required: &[
            k(c::SESSION_ID),
            k(c::ORIGIN_HOST),
            k(c::ORIGIN_REALM),
            k(c::DESTINATION_REALM),
            k(c::AUTH_APPLICATION_ID),
            k(c::TERMINATION_CAUSE),
        ],
        app_required: &[],
    },
];
