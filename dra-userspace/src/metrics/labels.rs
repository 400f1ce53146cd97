//! Label values shared by the metric families: message classes, peer and fast-path
//! states, request directions and throttle-event reasons.

use dra_common::wire::{MsgClass, app, cc_request_type, cmd};

use crate::control::Reason;

/// `class` label of a peer's overall bucket ([`MsgClass::ALL`]).
pub const CLASS_ALL: &str = "all";

/// `class` label the caller may use to roll up classes that have no bucket of their own
/// (keeps the number of series bounded when peers send many distinct applications).
pub const CLASS_OTHER: &str = "other";

/// The `class` label of a fast-path message class: `<app>_<command>[_<request type>]`.
///
/// * application: `gx`, `gy`, otherwise the decimal Application-Id;
/// * command: `ccr`, otherwise the decimal Command-Code;
/// * request type (CC-Request-Type, RFC 4006 §8.3): `i`, `u`, `t`, `e`; omitted when 0
///   (not a CCR, or the type was not found); any other value as its decimal number.
///
/// [`MsgClass::ALL`] is [`CLASS_ALL`]. Examples: `gx_ccr_i`, `gy_ccr_u`, `gx_ccr`,
/// `0_280`, `16777251_316`. Distinct classes always get distinct labels.
pub fn class_label(class: MsgClass) -> String {
    if class == MsgClass::ALL {
        return CLASS_ALL.to_string();
    }
    let app = match class.app_id {
        app::GX => "gx".to_string(),
        app::GY => "gy".to_string(),
        other => other.to_string(),
    };
    let command = match class.command_code {
        cmd::CREDIT_CONTROL => "ccr".to_string(),
        other => other.to_string(),
    };
    let req = match class.req_type {
        0 => String::new(),
        cc_request_type::INITIAL => "_i".to_string(),
        cc_request_type::UPDATE => "_u".to_string(),
        cc_request_type::TERMINATION => "_t".to_string(),
        cc_request_type::EVENT => "_e".to_string(),
        other => format!("_{other}"),
    };
    format!("{app}_{command}{req}")
}

/// The class a [`class_label`] names (not [`CLASS_ALL`] or [`CLASS_OTHER`]): `gx_ccr_i`,
/// `gy_ccr`, `16777251_316`, …; `None` for anything else.
pub fn parse_class_label(s: &str) -> Option<MsgClass> {
    let mut parts = s.split('_');
    let app = match parts.next()? {
        "gx" => app::GX,
        "gy" => app::GY,
        n => n.parse().ok()?,
    };
    let command = match parts.next()? {
        "ccr" => cmd::CREDIT_CONTROL,
        n => n.parse().ok()?,
    };
    let req = match parts.next() {
        None => 0,
        Some("i") => cc_request_type::INITIAL,
        Some("u") => cc_request_type::UPDATE,
        Some("t") => cc_request_type::TERMINATION,
        Some("e") => cc_request_type::EVENT,
        Some(n) => n.parse().ok().filter(|v| *v != 0)?,
    };
    if parts.next().is_some() || (app == 0 && command == 0) {
        return None;
    }
    let c = MsgClass::new(app, command, req);
    (class_label(c) == s).then_some(c)
}

/// State of a Diameter peer connection, as exported by `dra_peer_state`
/// (RFC 6733 §5.6 states, folded to what an operator watches).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PeerState {
    /// No transport connection.
    Closed,
    /// Connected, CER sent, waiting for the CEA (RFC 6733 §5.6 Wait-I-CEA).
    WaitCea,
    /// Capabilities exchanged; messages flow.
    Open,
    /// Watchdog answer overdue (RFC 3539 §3.4.1 SUSPECT).
    Suspect,
    /// Watchdog failed; the connection is considered down (RFC 3539 DOWN).
    Down,
    /// Transport back, waiting for watchdog answers before use (RFC 3539 REOPEN).
    Reopen,
}

impl PeerState {
    /// Every state, in the order the series are exported.
    pub const ALL: [PeerState; 6] = [
        PeerState::Closed,
        PeerState::WaitCea,
        PeerState::Open,
        PeerState::Suspect,
        PeerState::Down,
        PeerState::Reopen,
    ];

    /// The `state` label value.
    pub const fn name(self) -> &'static str {
        match self {
            PeerState::Closed => "closed",
            PeerState::WaitCea => "wait_cea",
            PeerState::Open => "open",
            PeerState::Suspect => "suspect",
            PeerState::Down => "down",
            PeerState::Reopen => "reopen",
        }
    }
}

/// Who enforces the ingress limits of the peers XDP can judge, as exported by
/// `dra_fastpath_state` (checked every second by `dra run`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FastPathState {
    /// The XDP program is attached to the interface and enforces them.
    Attached,
    /// This run attached XDP and its program is gone (its pinned link removed, e.g. by
    /// `dra detach`, or the interface deleted): nothing enforces them.
    Detached,
    /// The kernel cannot load the XDP programs and `[fast_path] fallback = "userspace"`
    /// has the agent enforce them (no connection guard, no unknown-peer drop).
    Fallback,
    /// No fast path interface is configured: the agent enforces them, by design.
    Off,
}

impl FastPathState {
    /// Every state, in the order the series are exported.
    pub const ALL: [FastPathState; 4] = [
        FastPathState::Attached,
        FastPathState::Detached,
        FastPathState::Fallback,
        FastPathState::Off,
    ];

    /// The `state` label value.
    pub const fn name(self) -> &'static str {
        match self {
            FastPathState::Attached => "attached",
            FastPathState::Detached => "detached",
            FastPathState::Fallback => "fallback",
            FastPathState::Off => "off",
        }
    }

    /// The state of a run that attached XDP to `iface` (`None`: it did not), with
    /// `fallback` when the kernel refused XDP and the agent took over; `attached(iface)`
    /// says whether that program is still attached.
    pub fn of(iface: Option<&str>, fallback: bool, attached: impl Fn(&str) -> bool) -> Self {
        match iface {
            Some(i) if attached(i) => FastPathState::Attached,
            Some(_) => FastPathState::Detached,
            None if fallback => FastPathState::Fallback,
            None => FastPathState::Off,
        }
    }
}

/// Direction of a request relative to the agent (`direction` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Received from the peer (the peer is a client of the agent).
    In,
    /// Sent to the peer (the peer is an upstream server).
    Out,
}

impl Direction {
    /// The `direction` label value: `in` or `out`.
    pub const fn name(self) -> &'static str {
        match self {
            Direction::In => "in",
            Direction::Out => "out",
        }
    }
}

/// The `reason` label of a throttle-controller event: `threshold`, `reversal_step`,
/// `source_missing`, `release_step` or `source_recovered`.
pub const fn reason_label(reason: &Reason) -> &'static str {
    match reason {
        Reason::Threshold { .. } => "threshold",
        Reason::ReversalStep { .. } => "reversal_step",
        Reason::SourceMissing { .. } => "source_missing",
        Reason::ReleaseStep { .. } => "release_step",
        Reason::SourceRecovered { .. } => "source_recovered",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_labels_read_back_into_their_class() {
        for c in [
            MsgClass::gx_ccr(1),
            MsgClass::gy_ccr(3),
            MsgClass::gx_ccr(0),
            MsgClass::new(16_777_251, 316, 0),
            MsgClass::new(4, 272, 9),
        ] {
            assert_eq!(parse_class_label(&class_label(c)), Some(c));
        }
        for bad in [
            "all",
            "other",
            "gx",
            "gx_ccr_x",
            "gx_ccr_i_j",
            "gx_ccr_0",
            "0_0",
            "",
        ] {
            assert_eq!(parse_class_label(bad), None, "{bad}");
        }
    }

    #[test]
    fn class_labels_name_app_command_and_request_type() {
        assert_eq!(class_label(MsgClass::ALL), "all");
        assert_eq!(class_label(MsgClass::gx_ccr(1)), "gx_ccr_i");
        assert_eq!(class_label(MsgClass::gx_ccr(3)), "gx_ccr_t");
        assert_eq!(class_label(MsgClass::gy_ccr(2)), "gy_ccr_u");
        assert_eq!(class_label(MsgClass::gy_ccr(4)), "gy_ccr_e");
        assert_eq!(class_label(MsgClass::gx_ccr(0)), "gx_ccr");
        assert_eq!(class_label(MsgClass::gx_ccr(9)), "gx_ccr_9");
        assert_eq!(class_label(MsgClass::new(0, 280, 0)), "0_280");
        assert_eq!(
            class_label(MsgClass::new(app::GX, cmd::RE_AUTH, 0)),
            "gx_258"
        );
        assert_eq!(
            class_label(MsgClass::new(16_777_251, 316, 0)),
            "16777251_316"
        );
    }

    #[test]
    fn peer_state_names_are_distinct() {
        let mut names: Vec<_> = PeerState::ALL.iter().map(|s| s.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), PeerState::ALL.len());
    }

    #[test]
    fn the_fast_path_state_says_who_enforces_ingress() {
        let attached = |_: &str| true;
        let gone = |_: &str| false;
        assert_eq!(
            FastPathState::of(Some("eth0"), false, attached),
            FastPathState::Attached
        );
        assert_eq!(
            FastPathState::of(Some("eth0"), false, gone),
            FastPathState::Detached
        );
        assert_eq!(
            FastPathState::of(None, true, attached),
            FastPathState::Fallback
        );
        assert_eq!(FastPathState::of(None, false, gone), FastPathState::Off);
        let mut names: Vec<_> = FastPathState::ALL.iter().map(|s| s.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), FastPathState::ALL.len());
    }
}
