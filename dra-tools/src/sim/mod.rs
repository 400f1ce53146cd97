//! Deterministic discrete-event simulator for load-aware peer selection
//! (docs/architecture.md §7, RFC 8583), behind `dra-sim lb`.
//!
//! Simulated clients pick among K servers with the agent's own
//! [`Selector`](dra::routing::Selector) (no copy of the strategies), each from its own
//! view of the servers' Load-Values, refreshed only at its heartbeats. Two server models:
//! docomo's cumulative request count (`seed002`) and FIFO queues with capacities
//! (`queue`). See `docs/load-balancing.md` for the model, the mappings and the results.
//!
//! - [`lb`]: configuration, the model and sweeps ([`lb::run`], [`lb::run_sweep`]).
//! - [`report`]: markdown tables and CSV of a sweep.
//! - [`plot`]: PNG plots of a metric against the heartbeat period.

pub mod lb;
pub mod plot;
pub mod report;

pub use lb::{
    HeartbeatPhase, LbConfig, RunResult, ServerStats, SimError, Sweep, SweepRow, Variant,
    queue_load_value, run, run_sweep, seed002_load_value,
};
pub use plot::{PlotError, plot_metric};
pub use report::{Metric, csv, markdown};
