//! Prometheus metrics of the agent and the `GET /metrics` endpoint.
//!
//! [`Metrics`] holds every family (prometheus-client registry); clone it freely into the
//! controller, the peer drivers and the fast-path stats reader. [`serve`] exposes it over
//! HTTP in the OpenMetrics 1.0.0 text format ([`CONTENT_TYPE`]). In that format a counter
//! family `x` is announced as `# TYPE x counter` and its samples are named `x_total`;
//! the sample names are listed below.
//!
//! # Families
//!
//! Labels: `peer` (configured peer name), `class` ([`class_label`]: `gx_ccr_i`,
//! `gy_ccr_u`, `all` for the peer's overall bucket, `other` for a caller's roll-up),
//! `reason`, `result_code`, `state`, `direction`, `group`, `outcome`.
//!
//! ## Dynamic throttling (docs/architecture.md §5)
//!
//! - `dra_db_cpu_percent` (gauge): last valid DB CPU sample; never NaN (invalid samples are not
//!   stored)
//! - `dra_db_cpu_source_up` (gauge): 1 while the CPU source delivers, 0 while it is declared
//!   missing
//! - `dra_db_cpu_missing_total` (counter): times the source was declared missing
//! - `dra_throttle_percent` (gauge; `peer`): current throttle of a DRL peer (0–100)
//! - `dra_effective_rate` (gauge; `peer`, `class`): msgs/s written into the fast path (static ×
//!   (100 − throttle) / 100)
//! - `dra_throttle_events_total` (counter; `peer` (optional), `reason`): controller events:
//!   `threshold`, `reversal_step`, `source_missing`, `release_step`, `source_recovered`
//!   ([`reason_label`])
//!
//! ## Fast path (snapshots of the BPF per-CPU maps, summed over CPUs)
//!
//! Without XDP the agent's own limiter ([`crate::limiter`]) publishes the same families
//! (its global counters per message, the subset it has an equivalent for).
//!
//! - `dra_fastpath_requests_total` (counter; `peer`, `class`, `outcome`): requests `seen`,
//!   `admitted`, `marked` (answered by the agent), `dropped`
//! - `dra_fastpath_bytes_total` (counter; `peer`, `class`): Diameter bytes of the requests seen
//! - `dra_fastpath_packets_total` (counter; `reason`): one series per global fast-path counter
//!   (`reason` = [`dra_common::stats::Counter::name`]), all exported from start
//! - `dra_fastpath_oob_marks_total` (counter; `outcome`): requests XDP marked out of band (they
//!   straddled segments; [`crate::oob`]): `received` from the ring, `applied` to a request,
//!   `expired` unapplied (connection gone) — with XDP attached only
//! - `dra_fastpath_state` (gauge; `state`): who enforces the ingress limits ([`FastPathState`]:
//!   `attached`, `detached`, `fallback`, `off`), 1 for the current state, 0 for the others;
//!   `dra run` checks every second that the XDP program it attached is still there
//!
//! These are set, not incremented: each [`Metrics::set_fastpath_class`] /
//! [`Metrics::set_fastpath_global`] replaces the exported value by the snapshot.
//!
//! ## Agent
//!
//! - `dra_requests_total` (counter; `peer`, `direction`): requests received from (`in`) or sent to
//!   (`out`) a peer
//! - `dra_connections_refused_total` (counter; `reason`): connections closed at accept:
//!   `cer_backlog` (too many waiting for their CER), `cer_backlog_per_source` (too many from one
//!   address)
//! - `dra_tls_refused_total` (counter; `side`, `reason`): TLS connections refused before or at
//!   CER: `side` `accepted` (by a TLS listener) or `dialled` (to a TLS server); `reason` one of
//!   [`crate::transport::tls::Refusal::LABELS`]
//! - `dra_connections_awaiting_cer` (gauge): accepted connections waiting for their CER (TLS
//!   ones from their handshake on)
//! - `dra_answers_total` (counter; `peer`, `result_code`): answers sent to a peer, relayed or
//!   generated (e.g. 3002 for a marked request)
//! - `dra_pending_requests` (gauge; `peer`): requests sent to the peer, not yet answered
//! - `dra_queue_depth` (gauge; `group`): requests queued for a peer group
//! - `dra_answer_latency_seconds` (histogram; `peer`): request forwarded → answer received; buckets
//!   [`LATENCY_BUCKETS`] (100 µs … 10 s)
//! - `dra_peer_state` (gauge; `peer`, `state`): 1 for the current state, 0 for the others
//!   ([`PeerState`]: `closed`, `wait_cea`, `open`, `suspect`, `down`, `reopen`)
//! - `dra_peer_info` (gauge; `peer`, `role`, `group`): 1 for each configured peer (`role`
//!   `client` or `server`; `group` absent for a peer without one), set by `dra run` at start
//!   and at each reload
//! - `dra_unanswered_invariant_violations_total` (counter): requests that ended with no answer;
//!   must stay 0
//! - `dra_ready` (gauge): 1 once the agent is ready (listeners bound, an open connection in
//!   every routed group or its startup wait over; docs/architecture.md §6), else 0
//!
//! ## Overload control (docs/architecture.md §13)
//!
//! - `dra_overload_level` (gauge): 0 nothing shed, 1 new sessions, 2 updates too, 3 more
//!   (with hysteresis: falls after `[overload] hold`)
//! - `dra_overload_delay_seconds` (gauge): how late the agent was in the last interval
//! - `dra_overload_admit_rate` (gauge): requests/s the control admits (0 while it sheds
//!   nothing)
//! - `dra_overload_shed_total` (counter; `class`, `action`): requests shed, `answer`ed 3004
//!   or `discard`ed, by the fast path and the readers together; set from their snapshots
//!
//! ## Session store (docs/architecture.md §9)
//!
//! - `dra_session_store_up` (gauge): 1 while the store answers (the in-memory store always)
//! - `dra_session_store_latency_seconds` (histogram; `op`): store call duration: `get`, `set`,
//!   `del`
//! - `dra_session_store_errors_total` (counter; `op`, `kind`): failed calls: `timeout`,
//!   `unavailable` (not connected), `error` (an error reply or I/O)
//! - `dra_session_cache_lookups_total` (counter; `result`): local cache `hit` / `miss` for a sticky
//!   request
//! - `dra_session_bindings_total` (counter; `op`): bindings `written` to / `deleted` from the store
//! - `dra_session_store_fallbacks_total` (counter; `on_error`): requests that needed the failing
//!   store: routed `local`ly or answered (`reject`)
//! - `dra_session_store_waiting_requests` (gauge): requests waiting for a store call
//!
//! ## DOIC reporting node (docs/doic.md)
//!
//! - `dra_doic_olrs_sent_total` (counter; `peer`, `report_type`, `algorithm`, `kind`): answers to a
//!   gateway that carried our OC-OLR (`report_type` `peer`; `algorithm` `loss` / `rate`; `kind`
//!   `report`, or `end` for the end-of-overload report)
//! - `dra_doic_reduction_percent` (gauge; `peer`): OC-Reduction-Percentage currently reported to
//!   the gateway (0: none)
//! - `dra_doic_max_rate` (gauge; `peer`): OC-Maximum-Rate currently reported to the gateway (0:
//!   none)
//! - `dra_doic_olrs_received_total` (counter; `peer`, `report_type`, `result`): OC-OLRs received
//!   from a server with `doic = true` (`report_type` `host` / `realm` / `peer`; `result`
//!   `applied`, `ended`, `stale`, `duplicate`, `source_mismatch`, `unusable`)
//! - `dra_doic_server_reduction_percent` (gauge; `peer`): largest loss reduction in force
//!   towards a server (0: none)
//! - `dra_doic_requests_abated_total` (counter; `peer`, `outcome`): requests to a server abated
//!   by its reports (`outcome` `diverted`, or `rejected`: answered 3004)
//!
//! Families with labels appear once their first series is set, except the counters whose
//! label values are known in advance, which start at 0: `dra_tls_refused_total` (every
//! side × reason), `dra_connections_refused_total`, `dra_session_store_errors_total` and
//! `dra_session_store_fallbacks_total`. Series are never removed, except fast-path classes
//! through [`Metrics::set_fastpath_classes`] and peers through [`Metrics::set_peer_info`].

mod fastpath;
mod http;
mod labels;
mod registry;

pub use http::{
    CONTENT_TYPE, MAX_CONNECTIONS, MAX_REQUEST_HEAD, METRICS_PATH, MetricsError, REQUEST_TIMEOUT,
    ServerHandle, WRITE_TIMEOUT, serve,
};
pub use labels::{
    CLASS_ALL, CLASS_OTHER, Direction, FastPathState, PeerState, class_label, parse_class_label,
    reason_label,
};
pub use registry::{LATENCY_BUCKETS, Metrics, PeerSeries};
