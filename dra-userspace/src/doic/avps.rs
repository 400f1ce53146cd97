//! The DOIC grouped AVPs as typed values: OC-Supported-Features and OC-OLR (RFC 7683
//! §7.1, §7.3), with the peer-report additions of RFC 8581 (OC-Peer-Algo, SourceID,
//! report type PEER_REPORT) and the rate algorithm's OC-Maximum-Rate (RFC 8582).
//!
//! Decoding checks what the RFCs require of the wire values before anything uses them
//! (hickory-proto habit): the two mandatory OC-OLR members, sizes, a known report type.
//! Unknown members (`* [ AVP ]` in both ABNFs) are skipped. Every DOIC AVP is built
//! without the M bit (RFC 7683 §7, RFC 8581, RFC 8582: "MUST NOT").
//!
//! Citations: RFC 7683 §7.1–§7.8 (codes 621–627, types, the M-bit table, §7.5's default
//! and maximum, §7.7's "greater than 100 are ignored") were checked against its text.
//! RFC 8581 (OC-Peer-Algo 648, SourceID 649, PEER_REPORT = 2, OLR_PEER_REPORT 0x10) and
//! RFC 8582 (OC-Maximum-Rate 670, OLR_RATE_ALGORITHM 0x4) are unverified here: only
//! their first pages were available (648, 649 and 0x10 agree with a third-party
//! implementation quoting RFC 8581).

use crate::diameter::dictionary::enums::oc_report_type;
use crate::diameter::{Avp, AvpDataError, Message, avp_code as c};

/// Why a DOIC AVP cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DoicAvpError {
    /// The grouped data or a member's data is malformed.
    #[error("malformed DOIC AVP")]
    Data(#[source] AvpDataError),
    /// OC-OLR lacks OC-Sequence-Number or OC-Report-Type (RFC 7683 §7.3).
    #[error("OC-OLR without {missing}")]
    Missing {
        /// The AVP's name.
        missing: &'static str,
    },
    /// OC-Report-Type with a value no RFC defines.
    #[error("unknown OC-Report-Type {0}")]
    UnknownReportType(i32),
}

impl From<AvpDataError> for DoicAvpError {
    fn from(e: AvpDataError) -> Self {
        DoicAvpError::Data(e)
    }
}

/// OC-Report-Type (RFC 7683 §7.6; PEER_REPORT from RFC 8581).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReportType {
    /// Requests to the reporting host (Destination-Host = its Origin-Host).
    Host,
    /// Requests to the reporting realm.
    Realm,
    /// Every request sent to the reporting peer (RFC 8581).
    Peer,
}

impl ReportType {
    /// The wire value.
    pub fn value(self) -> i32 {
        match self {
            ReportType::Host => oc_report_type::HOST_REPORT,
            ReportType::Realm => oc_report_type::REALM_REPORT,
            ReportType::Peer => oc_report_type::PEER_REPORT,
        }
    }

    /// From the wire value.
    pub fn from_value(v: i32) -> Result<ReportType, DoicAvpError> {
        match v {
            oc_report_type::HOST_REPORT => Ok(ReportType::Host),
            oc_report_type::REALM_REPORT => Ok(ReportType::Realm),
            oc_report_type::PEER_REPORT => Ok(ReportType::Peer),
            other => Err(DoicAvpError::UnknownReportType(other)),
        }
    }

    /// A short name for metrics labels.
    pub fn name(self) -> &'static str {
        match self {
            ReportType::Host => "host",
            ReportType::Realm => "realm",
            ReportType::Peer => "peer",
        }
    }
}

/// OC-Supported-Features (RFC 7683 §7.1; RFC 8581 adds SourceID and OC-Peer-Algo).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SupportedFeatures {
    /// OC-Feature-Vector; absent means "loss only" (RFC 7683 §7.2).
    pub feature_vector: Option<u64>,
    /// SourceID: the node that announces peer-report support (RFC 8581).
    pub source_id: Option<String>,
    /// OC-Peer-Algo: the algorithm a reporting node selected for peer reports (RFC 8581).
    pub peer_algo: Option<u64>,
}

impl SupportedFeatures {
    /// The feature bits, with RFC 7683 §7.2's default when the vector is absent.
    pub fn features(&self) -> u64 {
        self.feature_vector
            .unwrap_or(crate::diameter::dictionary::enums::oc_feature::LOSS)
    }

    /// The AVP (members in ABNF order, no M bit).
    pub fn to_avp(&self) -> Avp {
        let members = [
            self.feature_vector
                .map(|v| Avp::u64(c::OC_FEATURE_VECTOR, v)),
            source_id_avp(self.source_id.as_deref()),
            self.peer_algo.map(|v| Avp::u64(c::OC_PEER_ALGO, v)),
        ];
        Avp::grouped(c::OC_SUPPORTED_FEATURES, members.into_iter().flatten())
    }

    /// Reads an OC-Supported-Features AVP.
    pub fn from_avp(avp: &Avp) -> Result<SupportedFeatures, DoicAvpError> {
        let mut out = SupportedFeatures::default();
        for m in avp.as_grouped()? {
            match (m.code, m.vendor_id) {
                (c::OC_FEATURE_VECTOR, None) => out.feature_vector = Some(m.as_u64()?),
                (c::SOURCE_ID, None) => out.source_id = Some(m.as_utf8()?.to_owned()),
                (c::OC_PEER_ALGO, None) => out.peer_algo = Some(m.as_u64()?),
                _ => {}
            }
        }
        Ok(out)
    }

    /// The first OC-Supported-Features of `msg`, if any: `None` when absent,
    /// `Some(Err)` when malformed.
    pub fn of(msg: &Message) -> Option<Result<SupportedFeatures, DoicAvpError>> {
        msg.find(c::OC_SUPPORTED_FEATURES)
            .map(SupportedFeatures::from_avp)
    }
}

/// The SourceID member of OC-Supported-Features and OC-OLR (RFC 8581), when set.
fn source_id_avp(source_id: Option<&str>) -> Option<Avp> {
    source_id.map(|s| Avp::utf8(c::SOURCE_ID, s))
}

/// OC-OLR (RFC 7683 §7.3; SourceID from RFC 8581, OC-Maximum-Rate from RFC 8582).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Olr {
    /// OC-Sequence-Number (RFC 7683 §7.4).
    pub sequence: u64,
    /// OC-Report-Type (RFC 7683 §7.6).
    pub report_type: ReportType,
    /// OC-Reduction-Percentage, loss algorithm (RFC 7683 §7.7).
    pub reduction: Option<u32>,
    /// OC-Validity-Duration in seconds (RFC 7683 §7.5; absent = 30 s).
    pub validity: Option<u32>,
    /// SourceID of the reporting node (RFC 8581: required in peer reports).
    pub source_id: Option<String>,
    /// OC-Maximum-Rate in requests per second, rate algorithm (RFC 8582).
    pub max_rate: Option<u32>,
}

/// RFC 7683 §7.5: the validity when OC-Validity-Duration is absent, and the largest
/// accepted (a larger received value means the default).
pub const DEFAULT_VALIDITY_SECS: u32 = 30;
/// RFC 7683 §7.5: 86,400 s (24 hours).
pub const MAX_VALIDITY_SECS: u32 = 86_400;

impl Olr {
    /// The validity this report asks for, with RFC 7683 §7.5's default for an absent or
    /// too large value.
    pub fn validity_secs(&self) -> u32 {
        match self.validity {
            Some(v) if v <= MAX_VALIDITY_SECS => v,
            _ => DEFAULT_VALIDITY_SECS,
        }
    }

    /// The AVP (members in ABNF order, no M bit).
    pub fn to_avp(&self) -> Avp {
        let members = [
            Some(Avp::u64(c::OC_SEQUENCE_NUMBER, self.sequence)),
            Some(Avp::enumerated(c::OC_REPORT_TYPE, self.report_type.value())),
            self.reduction
                .map(|r| Avp::u32(c::OC_REDUCTION_PERCENTAGE, r)),
            self.validity.map(|v| Avp::u32(c::OC_VALIDITY_DURATION, v)),
            source_id_avp(self.source_id.as_deref()),
            self.max_rate.map(|r| Avp::u32(c::OC_MAXIMUM_RATE, r)),
        ];
        Avp::grouped(c::OC_OLR, members.into_iter().flatten())
    }

    /// Reads an OC-OLR AVP; the first of each member counts.
    pub fn from_avp(avp: &Avp) -> Result<Olr, DoicAvpError> {
        let (mut seq, mut rt) = (None, None);
        let mut olr = Olr {
            sequence: 0,
            report_type: ReportType::Host,
            reduction: None,
            validity: None,
            source_id: None,
            max_rate: None,
        };
        for m in avp.as_grouped()? {
            if m.vendor_id.is_some() {
                continue;
            }
            match m.code {
                c::OC_SEQUENCE_NUMBER if seq.is_none() => seq = Some(m.as_u64()?),
                c::OC_REPORT_TYPE if rt.is_none() => {
                    rt = Some(ReportType::from_value(m.as_i32()?)?);
                }
                c::OC_REDUCTION_PERCENTAGE if olr.reduction.is_none() => {
                    olr.reduction = Some(m.as_u32()?);
                }
                c::OC_VALIDITY_DURATION if olr.validity.is_none() => {
                    olr.validity = Some(m.as_u32()?);
                }
                c::SOURCE_ID if olr.source_id.is_none() => {
                    olr.source_id = Some(m.as_utf8()?.to_owned());
                }
                c::OC_MAXIMUM_RATE if olr.max_rate.is_none() => {
                    olr.max_rate = Some(m.as_u32()?);
                }
                _ => {}
            }
        }
        olr.sequence = seq.ok_or(DoicAvpError::Missing {
            missing: "OC-Sequence-Number",
        })?;
        olr.report_type = rt.ok_or(DoicAvpError::Missing {
            missing: "OC-Report-Type",
        })?;
        Ok(olr)
    }

    /// Every OC-OLR of `msg`, in order (RFC 8581: an answer may carry one per report
    /// type).
    pub fn all_of(msg: &Message) -> impl Iterator<Item = Result<Olr, DoicAvpError>> + '_ {
        msg.find_all(c::OC_OLR).map(Olr::from_avp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diameter::dictionary::enums::oc_feature;
    use crate::diameter::{Dictionary, FlagRule};

    fn roundtrip_msg(avps: Vec<Avp>) -> Message {
        let mut m = Message::answer(272, 4, 1, 2);
        m.avps = avps;
        Message::decode(&m.encode()).expect("decodes")
    }

    #[test]
    fn supported_features_roundtrip_rfc7683_7_1_and_rfc8581() {
        let sf = SupportedFeatures {
            feature_vector: Some(oc_feature::LOSS | oc_feature::RATE | oc_feature::PEER_REPORT),
            source_id: Some("dra.test.example".into()),
            peer_algo: Some(oc_feature::RATE),
        };
        let m = roundtrip_msg(vec![sf.to_avp()]);
        assert_eq!(SupportedFeatures::of(&m), Some(Ok(sf)));
        let empty = SupportedFeatures::default();
        let m = roundtrip_msg(vec![empty.to_avp()]);
        let got = SupportedFeatures::of(&m).unwrap().unwrap();
        // RFC 7683 §7.2: no vector = loss only.
        assert_eq!(got.features(), oc_feature::LOSS);
    }

    #[test]
    fn olr_roundtrip_every_member_rfc7683_7_3_rfc8581_rfc8582() {
        let loss = Olr {
            sequence: u64::MAX - 1,
            report_type: ReportType::Peer,
            reduction: Some(90),
            validity: Some(0),
            source_id: Some("dra.test.example".into()),
            max_rate: None,
        };
        let rate = Olr {
            sequence: 7,
            report_type: ReportType::Host,
            reduction: None,
            validity: Some(30),
            source_id: None,
            max_rate: Some(1234),
        };
        let m = roundtrip_msg(vec![loss.to_avp(), rate.to_avp()]);
        let got: Vec<Olr> = Olr::all_of(&m).map(Result::unwrap).collect();
        assert_eq!(got, vec![loss, rate]);
    }

    #[test]
    fn olr_without_mandatory_members_is_refused_rfc7683_7_3() {
        let no_seq = Avp::grouped(c::OC_OLR, [Avp::enumerated(c::OC_REPORT_TYPE, 0)]);
        assert_eq!(
            Olr::from_avp(&no_seq),
            Err(DoicAvpError::Missing {
                missing: "OC-Sequence-Number"
            })
        );
        let no_type = Avp::grouped(c::OC_OLR, [Avp::u64(c::OC_SEQUENCE_NUMBER, 1)]);
        assert!(matches!(
            Olr::from_avp(&no_type),
            Err(DoicAvpError::Missing { .. })
        ));
        let bad_type = Avp::grouped(
            c::OC_OLR,
            [
                Avp::u64(c::OC_SEQUENCE_NUMBER, 1),
                Avp::enumerated(c::OC_REPORT_TYPE, 9),
            ],
        );
        assert_eq!(
            Olr::from_avp(&bad_type),
            Err(DoicAvpError::UnknownReportType(9))
        );
        // A 4-byte sequence number is not an Unsigned64.
        let short = Avp::grouped(
            c::OC_OLR,
            [
                Avp::u32(c::OC_SEQUENCE_NUMBER, 1),
                Avp::enumerated(c::OC_REPORT_TYPE, 0),
            ],
        );
        assert!(matches!(Olr::from_avp(&short), Err(DoicAvpError::Data(_))));
    }

    #[test]
    fn dictionary_has_every_doic_avp_with_its_type_rfc7683_7_rfc8581_rfc8582() {
        use crate::diameter::DataType::*;
        let dict = Dictionary::standard();
        for (code, name, ty) in [
            (621, "OC-Supported-Features", Grouped),
            (622, "OC-Feature-Vector", Unsigned64),
            (623, "OC-OLR", Grouped),
            (624, "OC-Sequence-Number", Unsigned64),
            (625, "OC-Validity-Duration", Unsigned32),
            (626, "OC-Report-Type", Enumerated),
            (627, "OC-Reduction-Percentage", Unsigned32),
            (648, "OC-Peer-Algo", Unsigned64),
            (649, "SourceID", DiameterIdentity),
            (670, "OC-Maximum-Rate", Unsigned32),
        ] {
            let def = dict
                .avp(code, None)
                .unwrap_or_else(|| panic!("{name} missing"));
            assert_eq!(
                (def.name, def.data_type, def.m_bit),
                (name, ty, FlagRule::MustNot)
            );
        }
        assert_eq!(
            (oc_feature::LOSS, oc_feature::RATE, oc_feature::PEER_REPORT),
            (1, 4, 16)
        );
        assert_eq!(ReportType::from_value(2), Ok(ReportType::Peer));
    }

    #[test]
    fn validity_default_and_maximum_rfc7683_7_5() {
        let mut o = Olr {
            sequence: 1,
            report_type: ReportType::Peer,
            reduction: Some(10),
            validity: None,
            source_id: None,
            max_rate: None,
        };
        assert_eq!(o.validity_secs(), 30);
        o.validity = Some(86_400);
        assert_eq!(o.validity_secs(), 86_400);
        o.validity = Some(86_401);
        assert_eq!(o.validity_secs(), 30);
    }

    #[test]
    fn unknown_members_are_skipped_and_no_m_bit_is_set_rfc7683_7() {
        let avp = Avp::grouped(
            c::OC_OLR,
            [
                Avp::u64(c::OC_SEQUENCE_NUMBER, 3),
                Avp::u32(99_999, 5),
                Avp::enumerated(c::OC_REPORT_TYPE, 2),
            ],
        );
        assert_eq!(Olr::from_avp(&avp).unwrap().report_type, ReportType::Peer);
        let dict = Dictionary::standard();
        let olr = Olr {
            sequence: 1,
            report_type: ReportType::Peer,
            reduction: Some(1),
            validity: Some(1),
            source_id: Some("a".into()),
            max_rate: Some(1),
        };
        let sf = SupportedFeatures {
            feature_vector: Some(1),
            source_id: Some("a".into()),
            peer_algo: Some(1),
        };
        for outer in [olr.to_avp(), sf.to_avp()] {
            let mut all = outer.as_grouped().unwrap();
            all.push(outer);
            for a in all {
                let def = dict.avp(a.code, None).expect("in dictionary");
                assert_eq!(def.m_bit, FlagRule::MustNot, "{}", def.name);
                assert!(!a.is_mandatory(), "{}", def.name);
            }
        }
    }
}
