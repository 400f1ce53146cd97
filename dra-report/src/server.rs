//! `dra-loadgen server`: its counters (`--stats-every`: one JSON object per line, and
//! the last at exit).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Server counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerStats {
    /// TCP connections accepted.
    pub connections: u64,
    /// CERs answered with success.
    pub cer_accepted: u64,
    /// DWRs received (each answered with a DWA carrying the Load AVP).
    pub dwr_received: u64,
    /// CCRs received, by CC-Request-Type (1, 2, 3).
    pub ccr_received: BTreeMap<u32, u64>,
    /// CCAs sent, by Result-Code.
    pub answered: BTreeMap<u32, u64>,
    /// CCR-U/T for a session this server does not know.
    pub unknown_session: u64,
    /// CCR-I for a session that already exists.
    pub duplicate_session: u64,
    /// CCRs received with the T flag (potentially retransmitted, RFC 6733 §3).
    pub t_flagged: u64,
    /// T-flagged CCRs this server had already answered (same Origin-Host and
    /// End-to-End): answered again with the same Result-Code, not applied twice.
    pub duplicates: u64,
    /// Sessions open now.
    pub sessions_open: u64,
    /// Redis SETs / DELs done, and failures.
    pub redis_set: u64,
    /// Redis DELs done.
    pub redis_del: u64,
    /// Redis commands that failed (answered 5012).
    pub redis_errors: u64,
    /// Highest number of CCRs in service plus queued seen.
    pub max_busy: u64,
}
