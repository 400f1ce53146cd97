//! Dynamic rate limiting (DRL): throttle DRL-enabled peers' configured message classes
//! (by default Gx CCR-I and CCR-T) according to the session database's CPU.
//!
//! This is the operator documentation of DRL. The behaviour follows the Cisco CPS vDRA
//! "Dynamic Throttling DB CPU Profile" (docs/architecture.md §5); where that description
//! is vague, the decisions below are ours and are tested.
//!
//! # Inputs
//!
//! * **Profile rows** `(cpu_pct, throttle_pct)`: CPU thresholds strictly increasing, both
//!   values percentages in 0..=100. An empty row list is allowed and never throttles.
//!   Throttles need not increase with CPU; the table is applied as written.
//! * **Reversal hold time** (> 0) and **reversal step** (1..=100 percentage points).
//! * **Sample period**, **missing_after** (periods), **on_missing** (`hold` | `release`)
//!   and an optional **EWMA alpha** (0 < α ≤ 1) for smoothing.
//!
//! The throttle starts at 0 %. The fast path receives
//! `effective rate = static rate × (100 − throttle) / 100` ([`effective_rate`]).
//! A peer without DRL configuration is never dynamically throttled.
//!
//! # Rules
//!
//! 1. **At or above the lowest threshold**, the throttle becomes the throttle % of the
//!    highest row whose threshold is not above the CPU — immediately, up or down. A sample
//!    *exactly* at a threshold applies that row (CPU 55.0 with a 55 → 30 row gives 30 %).
//!    Such a sample also cancels any running reversal.
//! 2. **Below the lowest threshold**, reversal: each *full* hold time spent continuously
//!    below lowers the throttle by the step (percentage points), never below 0 (a 20-point
//!    step from 10 % gives 0 %).
//!    * "Continuously below" starts at the **first below sample** after an at/above
//!      sample (or at the first sample ever). The time between the last at/above sample
//!      and that first below sample does not count.
//!    * With a 30 s hold and 1 s samples, the first below sample at `t` steps at
//!      `t + 30 s`; the sample at `t + 29 s` does not step.
//!    * After a step, the next hold window starts at the instant the step was due
//!      (`t + 30 s`, `t + 60 s`, …), so a late tick does not stretch the schedule.
//!    * An at/above sample one sample before the hold completes cancels it: no step,
//!      and the next below sample starts a new full hold window.
//!    * Steps are applied on a below sample or on a timer tick, whichever comes first at
//!      or after the due time. If the agent missed several due times (e.g. it was
//!      suspended), every due step is applied at once, as one event with `steps > 1`.
//! 3. **Samples** must be finite and non-negative: NaN, ±∞ and negative values are
//!    rejected (logged and counted as "no sample"). Values above 100 (a multi-threaded
//!    process measured in percent of one core) are clamped to 100.
//! 4. **Missing source.** When no valid sample arrived for `missing_after` sample periods
//!    (counted from the last valid sample, or from start), the source is declared missing
//!    once: an event with reason `SourceMissing` is logged and the missing counter
//!    incremented. Then:
//!    * `hold`: the throttle stays where it is and no reversal steps happen until samples
//!      return (we do not release protection on a DB we cannot see);
//!    * `release`: the silence counts as "below": the throttle steps down by the step once
//!      per full hold time (a reversal already running keeps its schedule; otherwise the
//!      first step is one hold time after the declaration), down to 0.
//!
//!    The next valid sample ends the missing state (`SourceRecovered` event) and is
//!    applied by rules 1–2; after `hold`, a below sample starts a fresh hold window.
//!    The EWMA history is dropped when the source is declared missing.
//! 5. **Smoothing** (optional): `s = α·x + (1 − α)·s_prev`, the first sample taken as is.
//!    Thresholds are compared with the smoothed value. Smoothing delays both throttling
//!    and its release; leave it off to get the table's behaviour sample by sample.
//!
//! # Seed scenario
//!
//! Static 1000/s, hold 30 s, step 20 %, rows 50 → 20, 55 → 30, 60 → 40, 65 → 50:
//! CPU below 50 → 0 % (1000/s); CPU 62 → 40 % (600/s); CPU 60–64.9 → stays 40 %;
//! CPU 49 → still 40 % (reversal starts); 30 s at ≤ 49 → 20 % (800/s); CPU 57 → 30 %
//! (700/s); CPU 67 → 50 % (500/s); CPU 55 → 30 % (700/s); 30 s at ≤ 49 → 10 % (900/s);
//! 30 s more → 0 % (1000/s). (`tests/control_seed.rs` replays it second by second.)
//!
//! # CPU sources
//!
//! See [`sources`]: `procfs` (a local process by name or pid file, or the whole host),
//! `redis` (`INFO cpu`), `prometheus` (instant query), `file` (last number in a file).
//! Process and Redis CPU are in **percent of one core** (a multi-threaded DB can exceed
//! 100, which the controller clamps); host CPU and Prometheus/file values are taken as is.
//!
//! # Code
//!
//! [`Controller`] is the pure rule engine; [`SampleLoop`] adds missing detection, EWMA
//! and an event queue; both take `now` as a [`std::time::Duration`] since an arbitrary
//! epoch and never read a clock. [`sources`] does the I/O.

pub mod controller;
pub mod ewma;
pub mod sample_loop;
pub mod sources;

pub use controller::{
    Controller, DbCpuProfile, InvalidSample, OnMissing, ProfileError, Reason, ThresholdRow,
    ThrottleEvent, effective_rate, validate_sample,
};
pub use ewma::{Ewma, InvalidAlpha};
pub use sample_loop::{LoopSettings, LoopSettingsError, SampleLoop};
pub use sources::{CpuSource, SourceError};
