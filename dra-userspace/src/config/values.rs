//! Parsers for the config's value syntaxes: durations, address prefixes, and the
//! names of Diameter applications, commands and CC-Request-Types.

use std::net::IpAddr;
use std::str::FromStr;
use std::time::Duration;

use dra_common::wire::{app, cc_request_type, cmd};
use ipnet::IpNet;

/// Why a duration string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Nothing but spaces.
    #[error("empty duration")]
    Empty,
    /// A number without unit (`"30"`).
    #[error("missing unit after {number} (write e.g. \"{number}s\"; units: ms, s, m, h)")]
    MissingUnit { number: String },
    /// A unit other than ms, s, m, h.
    #[error("unknown unit \"{unit}\" (units: ms, s, m, h)")]
    UnknownUnit { unit: String },
    /// No number where one belongs (`"s"`, `"-1s"`, `".5s"`).
    #[error("expected a number at \"{rest}\"")]
    ExpectedNumber { rest: String },
    /// More than `Duration` holds.
    #[error("duration too large")]
    Overflow,
}

/// Parses a duration written as one or more `<number><unit>` parts: `"30s"`,
/// `"500ms"`, `"2m"`, `"1h"`, `"1m30s"`, `"1.5s"`. Units: `ms`, `s`, `m`, `h`. Spaces
/// between parts are allowed (`"1m 30s"`, `"30 s"`).
/// The result is rounded to whole nanoseconds.
pub fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    let s = s.trim();
    if s.is_empty() {
        return Err(DurationError::Empty);
    }
    let mut total_ns: u128 = 0;
    let mut rest = s;
    while !rest.is_empty() {
        rest = rest.trim_start();
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number = &rest[..num_len];
        if number.is_empty()
            || number.starts_with('.')
            || number.ends_with('.')
            || number.matches('.').count() > 1
        {
            return Err(DurationError::ExpectedNumber {
                rest: rest.to_string(),
            });
        }
        rest = rest[num_len..].trim_start();
        let unit_len = rest
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let unit_ns: u128 = match unit {
            "" => {
                return Err(DurationError::MissingUnit {
                    number: number.to_string(),
                });
            }
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            other => {
                return Err(DurationError::UnknownUnit {
                    unit: other.to_string(),
                });
            }
        };
        let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
        let int: u128 = int_part.parse().map_err(|_| DurationError::Overflow)?;
        let mut part = int.checked_mul(unit_ns).ok_or(DurationError::Overflow)?;
        if !frac_part.is_empty() {
            // Exact decimal fraction: frac / 10^digits × unit, rounded to the nearest ns.
            let digits = frac_part.len().min(18);
            let frac: u128 = frac_part[..digits]
                .parse()
                .map_err(|_| DurationError::Overflow)?;
            let scale = 10u128.pow(digits as u32);
            part += (frac * unit_ns + scale / 2) / scale;
        }
        total_ns = total_ns.checked_add(part).ok_or(DurationError::Overflow)?;
    }
    let secs = u64::try_from(total_ns / 1_000_000_000).map_err(|_| DurationError::Overflow)?;
    Ok(Duration::new(secs, (total_ns % 1_000_000_000) as u32))
}

/// Formats a duration the way the config writes it (`"30s"`, `"500ms"`, `"2m"`).
pub fn format_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        "0s".to_string()
    } else if ns.is_multiple_of(3_600_000_000_000) {
        format!("{}h", ns / 3_600_000_000_000)
    } else if ns.is_multiple_of(60_000_000_000) {
        format!("{}m", ns / 60_000_000_000)
    } else if ns.is_multiple_of(1_000_000_000) {
        format!("{}s", ns / 1_000_000_000)
    } else if ns.is_multiple_of(1_000_000) {
        format!("{}ms", ns / 1_000_000)
    } else {
        format!("{:?}", d)
    }
}

/// Why an address prefix was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrefixError {
    /// Neither an address nor a CIDR prefix.
    #[error(
        "bad address \"{text}\": expected an IPv4/IPv6 address or CIDR prefix like 198.18.1.2/32"
    )]
    Syntax { text: String },
    /// Bits set below the prefix length (`198.18.1.2/24`).
    #[error("prefix \"{text}\" has host bits set; did you mean {network}?")]
    HostBits { text: String, network: IpNet },
}

/// Parses a peer address: a CIDR prefix (`198.18.1.0/24`, `2001:db8::/64`) or a bare
/// address, which means the single host (`/32` for IPv4, `/128` for IPv6). A prefix
/// with bits set below its length is rejected (it is almost always a typo).
pub fn parse_prefix(text: &str) -> Result<IpNet, PrefixError> {
    let t = text.trim();
    if t.contains('/') {
        let net = IpNet::from_str(t).map_err(|_| PrefixError::Syntax {
            text: text.to_string(),
        })?;
        if net.trunc() != net {
            return Err(PrefixError::HostBits {
                text: text.to_string(),
                network: net.trunc(),
            });
        }
        Ok(net)
    } else {
        IpAddr::from_str(t)
            .map(IpNet::from)
            .map_err(|_| PrefixError::Syntax {
                text: text.to_string(),
            })
    }
}

/// True when two prefixes share at least one address (always false across families).
pub fn prefixes_overlap(a: &IpNet, b: &IpNet) -> bool {
    a.contains(b) || b.contains(a)
}

/// Application names the config knows, with their ids.
pub const APPLICATIONS: &[(&str, u32)] = &[("gx", app::GX), ("gy", app::GY)];

/// Command names the config knows (requests), with their command codes.
pub const COMMANDS: &[(&str, u32)] = &[("ccr", cmd::CREDIT_CONTROL), ("rar", cmd::RE_AUTH)];

/// Base-protocol commands that must never be rate limited: throttling them breaks the
/// peer connection itself (RFC 6733 §5.3 CER, §5.5 DWR, §5.4 DPR).
pub const BASE_COMMANDS: &[u32] = &[
    cmd::CAPABILITIES_EXCHANGE,
    cmd::DEVICE_WATCHDOG,
    cmd::DISCONNECT_PEER,
];

/// CC-Request-Type of a rate-limited class (RFC 4006 §8.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum RequestType {
    /// Any request type (or not a CCR): class byte 0.
    #[default]
    Any,
    /// INITIAL_REQUEST (CCR-I).
    Initial,
    /// UPDATE_REQUEST (CCR-U).
    Update,
    /// TERMINATION_REQUEST (CCR-T).
    Termination,
    /// EVENT_REQUEST (CCR-E).
    Event,
}

impl RequestType {
    /// Config names, in the order the error message lists them.
    pub const NAMES: &[&str] = &["initial", "update", "termination", "event", "any"];

    /// Parses a config name.
    pub fn from_name(s: &str) -> Option<RequestType> {
        Some(match s {
            "initial" => RequestType::Initial,
            "update" => RequestType::Update,
            "termination" => RequestType::Termination,
            "event" => RequestType::Event,
            "any" => RequestType::Any,
            _ => return None,
        })
    }

    /// The config name.
    pub fn name(self) -> &'static str {
        match self {
            RequestType::Any => "any",
            RequestType::Initial => "initial",
            RequestType::Update => "update",
            RequestType::Termination => "termination",
            RequestType::Event => "event",
        }
    }

    /// The CC-Request-Type value as the fast path's class byte (0 = any).
    pub fn wire(self) -> u8 {
        match self {
            RequestType::Any => 0,
            RequestType::Initial => cc_request_type::INITIAL,
            RequestType::Update => cc_request_type::UPDATE,
            RequestType::Termination => cc_request_type::TERMINATION,
            RequestType::Event => cc_request_type::EVENT,
        }
    }

    /// Suffix used in human names: `CCR-I`, `CCR-T`, … (empty for any).
    pub fn suffix(self) -> &'static str {
        match self {
            RequestType::Any => "",
            RequestType::Initial => "-I",
            RequestType::Update => "-U",
            RequestType::Termination => "-T",
            RequestType::Event => "-E",
        }
    }
}

/// Human name of an application id: `Gx`, `Gy`, or `app 123`.
pub fn application_label(id: u32) -> String {
    match id {
        app::GX => "Gx".to_string(),
        app::GY => "Gy".to_string(),
        other => format!("app {other}"),
    }
}

/// Human name of a request command code: `CCR`, `RAR`, or `cmd 123`.
pub fn command_label(code: u32) -> String {
    match code {
        cmd::CREDIT_CONTROL => "CCR".to_string(),
        cmd::RE_AUTH => "RAR".to_string(),
        other => format!("cmd {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        for (text, want) in [
            // Every unit.
            ("30s", Duration::from_secs(30)),
            ("500ms", Duration::from_millis(500)),
            ("2m", Duration::from_secs(120)),
            ("1h", Duration::from_secs(3600)),
            ("0s", Duration::ZERO),
            // Compound and fractional, with spaces.
            ("1m30s", Duration::from_secs(90)),
            ("1s500ms", Duration::from_millis(1500)),
            ("1.5s", Duration::from_millis(1500)),
            ("0.25m", Duration::from_secs(15)),
            (" 2s ", Duration::from_secs(2)),
            ("1m 30s", Duration::from_secs(90)),
            ("5 s", Duration::from_secs(5)),
        ] {
            assert_eq!(parse_duration(text), Ok(want), "{text:?}");
        }
    }

    #[test]
    fn durations_rejected_with_reason() {
        assert_eq!(parse_duration(""), Err(DurationError::Empty));
        assert_eq!(
            parse_duration("30"),
            Err(DurationError::MissingUnit {
                number: "30".into()
            })
        );
        let e = parse_duration("30").unwrap_err().to_string();
        assert!(e.contains("\"30s\""), "{e}");
        assert_eq!(
            parse_duration("5d"),
            Err(DurationError::UnknownUnit { unit: "d".into() })
        );
        assert_eq!(
            parse_duration("30 sec"),
            Err(DurationError::UnknownUnit { unit: "sec".into() })
        );
        for text in ["s", "-1s", "1..5s", ".5s"] {
            let e = parse_duration(text);
            assert!(
                matches!(e, Err(DurationError::ExpectedNumber { .. })),
                "{text:?}"
            );
        }
        assert_eq!(
            parse_duration("99999999999999999999999999h"),
            Err(DurationError::Overflow)
        );
    }

    #[test]
    fn durations_format_round_trip() {
        for s in ["30s", "500ms", "2m", "1h", "0s"] {
            assert_eq!(format_duration(parse_duration(s).unwrap()), s);
        }
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
    }

    #[test]
    fn bare_addresses_are_host_prefixes() {
        for (text, shown) in [
            ("198.18.1.2", "198.18.1.2/32"),
            ("2001:db8:1::2", "2001:db8:1::2/128"),
        ] {
            assert_eq!(parse_prefix(text).unwrap().to_string(), shown);
        }
    }

    #[test]
    fn cidr_prefixes_parse_for_both_families() {
        for text in ["198.18.1.0/24", "2001:db8:1::/48"] {
            assert_eq!(parse_prefix(text).unwrap().to_string(), text);
        }
        assert_eq!(parse_prefix("198.18.1.2/32").unwrap().prefix_len(), 32);
    }

    #[test]
    fn bad_prefixes_are_rejected_with_reason() {
        for bad in [
            "198.18.1.300",
            "198.18.1.0/33",
            "2001:db8::g",
            "pgw1",
            "",
            "198.18.1.0/",
        ] {
            assert!(
                matches!(parse_prefix(bad), Err(PrefixError::Syntax { .. })),
                "{bad} accepted"
            );
        }
        match parse_prefix("198.18.1.2/24") {
            Err(PrefixError::HostBits { network, .. }) => {
                assert_eq!(network.to_string(), "198.18.1.0/24")
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse_prefix("2001:db8:1::2/64"),
            Err(PrefixError::HostBits { .. })
        ));
    }

    #[test]
    fn overlap_is_containment_within_a_family() {
        let p = |s| parse_prefix(s).unwrap();
        assert!(prefixes_overlap(&p("198.18.1.0/24"), &p("198.18.1.2")));
        assert!(prefixes_overlap(&p("198.18.1.2"), &p("198.18.1.0/24")));
        assert!(prefixes_overlap(&p("198.18.1.2"), &p("198.18.1.2/32")));
        assert!(!prefixes_overlap(&p("198.18.1.2"), &p("198.18.1.3")));
        assert!(!prefixes_overlap(&p("198.18.0.0/16"), &p("198.19.0.0/16")));
        assert!(prefixes_overlap(&p("2001:db8::/32"), &p("2001:db8:1::2")));
        assert!(!prefixes_overlap(&p("0.0.0.0/0"), &p("::/0")));
    }

    #[test]
    fn request_types_map_to_rfc4006_values() {
        assert_eq!(RequestType::from_name("initial").unwrap().wire(), 1);
        assert_eq!(RequestType::from_name("update").unwrap().wire(), 2);
        assert_eq!(RequestType::from_name("termination").unwrap().wire(), 3);
        assert_eq!(RequestType::from_name("event").unwrap().wire(), 4);
        assert_eq!(RequestType::from_name("any").unwrap().wire(), 0);
        assert_eq!(RequestType::from_name("Initial"), None);
    }
}
