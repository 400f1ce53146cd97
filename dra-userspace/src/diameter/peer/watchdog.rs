//! The transport failure detection algorithm of RFC 3539 §3.4.1, as used by Diameter
//! (RFC 6733 §5.5): DWR/DWA on an idle connection, with the states INITIAL, OKAY,
//! SUSPECT, DOWN and REOPEN.
//!
//! - The timer runs Tw ± jitter. When it expires with nothing outstanding, a DWR goes
//!   out; receiving anything from the peer restarts it (OKAY).
//! - Expiry with the DWR still unanswered: SUSPECT — traffic fails over to other peers.
//!   Anything received from the peer brings it back to OKAY (failback).
//! - Expiry in SUSPECT: DOWN — the connection is closed; the shell reconnects after Tc.
//! - A connection opened after DOWN starts in REOPEN: a DWR at once and at every expiry,
//!   and only three DWAs in a row make the peer OKAY again (application traffic does not
//!   count). A missed DWA restarts the count; two in a row close the connection.

use std::time::Duration;

use crate::routing::SplitMix64;

/// RFC 3539 §3.4.1 watchdog states.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WatchdogState {
    /// No connection yet to this peer (first attempt).
    Initial,
    /// The peer answers: in service.
    Okay,
    /// A watchdog went unanswered: out of service, pending requests fail over.
    Suspect,
    /// The connection is closed (failed, or not re-established yet).
    Down,
    /// Re-established after DOWN: probing with DWRs until three DWAs arrive.
    Reopen,
}

/// What the connection must do after a watchdog step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WatchdogOutput {
    /// Nothing.
    Nothing,
    /// Send a DWR and report its Hop-by-Hop id with [`Watchdog::dwr_sent`].
    SendDwr,
    /// OKAY → SUSPECT (RFC 3539 Failover()).
    Suspect,
    /// SUSPECT or REOPEN → OKAY (RFC 3539 Failback()).
    Okay,
    /// → DOWN: close the connection (RFC 3539 CloseConnection()).
    Down,
}

/// One connection's watchdog.
#[derive(Clone, Debug)]
pub(crate) struct Watchdog {
    state: WatchdogState,
    /// Hop-by-Hop id of the DWR waiting for its DWA (RFC 3539 `pending`).
    pending: Option<u32>,
    /// DWAs received in a row while REOPEN; -1 after one miss (RFC 3539 `NumDWA`).
    num_dwa: i32,
    deadline: Option<Duration>,
    tw: Duration,
    jitter: Duration,
}

/// DWAs in a row that take a peer from REOPEN to OKAY (RFC 3539 §3.4.1).
pub const REOPEN_DWAS: i32 = 3;

impl Watchdog {
    /// A watchdog before the connection is up: INITIAL for a first connection, DOWN when
    /// an earlier connection to the peer failed (`reopen`).
    pub fn new(tw: Duration, jitter: Duration, reopen: bool) -> Self {
        Watchdog {
            state: if reopen {
                WatchdogState::Down
            } else {
                WatchdogState::Initial
            },
            pending: None,
            num_dwa: 0,
            deadline: None,
            tw,
            jitter,
        }
    }

    pub fn state(&self) -> WatchdogState {
        self.state
    }

    pub fn deadline(&self) -> Option<Duration> {
        self.deadline
    }

    /// RFC 3539 SetWatchdog(): Tw plus a uniform jitter in ±`jitter`, millisecond steps.
    fn arm(&mut self, now: Duration, rng: &mut SplitMix64) {
        let j = u64::try_from(self.jitter.as_millis()).unwrap_or(u64::MAX / 4);
        let offset = rng.below(2 * j + 1);
        let base = self.tw + Duration::from_millis(offset);
        self.deadline = Some(now + base.saturating_sub(Duration::from_millis(j)));
    }

    /// The capabilities exchange completed.
    pub fn connection_up(&mut self, now: Duration, rng: &mut SplitMix64) -> WatchdogOutput {
        self.arm(now, rng);
        match self.state {
            WatchdogState::Down => {
                // RFC 3539 §3.4.1: reopened after a failure, prove it with DWRs first.
                self.state = WatchdogState::Reopen;
                self.num_dwa = 0;
                WatchdogOutput::SendDwr
            }
            _ => {
                self.state = WatchdogState::Okay;
                WatchdogOutput::Nothing
            }
        }
    }

    /// A DWR with this Hop-by-Hop id went out.
    pub fn dwr_sent(&mut self, hop_by_hop: u32) {
        self.pending = Some(hop_by_hop);
    }

    /// A message arrived from the peer; `dwa_hop_by_hop` is set when it is a DWA.
    pub fn on_receive(
        &mut self,
        now: Duration,
        dwa_hop_by_hop: Option<u32>,
        rng: &mut SplitMix64,
    ) -> WatchdogOutput {
        let answered = dwa_hop_by_hop.is_some() && dwa_hop_by_hop == self.pending;
        if answered {
            self.pending = None;
        }
        match self.state {
            WatchdogState::Okay => {
                // RFC 3539 §3.4.1: any message from the peer restarts the timer.
                self.arm(now, rng);
                WatchdogOutput::Nothing
            }
            WatchdogState::Suspect => {
                self.state = WatchdogState::Okay;
                self.arm(now, rng);
                WatchdogOutput::Okay
            }
            WatchdogState::Reopen if answered => {
                self.num_dwa += 1;
                if self.num_dwa >= REOPEN_DWAS {
                    self.state = WatchdogState::Okay;
                    WatchdogOutput::Okay
                } else {
                    WatchdogOutput::Nothing
                }
            }
            _ => WatchdogOutput::Nothing,
        }
    }

    /// The caller's clock reached `now`; acts when the timer has expired.
    pub fn on_timeout(&mut self, now: Duration, rng: &mut SplitMix64) -> WatchdogOutput {
        if self.deadline.is_none_or(|d| now < d) {
            return WatchdogOutput::Nothing;
        }
        match self.state {
            WatchdogState::Okay if self.pending.is_none() => {
                self.arm(now, rng);
                WatchdogOutput::SendDwr
            }
            WatchdogState::Okay => {
                self.state = WatchdogState::Suspect;
                self.arm(now, rng);
                WatchdogOutput::Suspect
            }
            WatchdogState::Suspect => {
                self.connection_down();
                WatchdogOutput::Down
            }
            WatchdogState::Reopen if self.pending.is_none() => {
                self.arm(now, rng);
                WatchdogOutput::SendDwr
            }
            WatchdogState::Reopen if self.num_dwa < 0 => {
                self.connection_down();
                WatchdogOutput::Down
            }
            WatchdogState::Reopen => {
                self.num_dwa = -1;
                self.arm(now, rng);
                WatchdogOutput::Nothing
            }
            WatchdogState::Initial | WatchdogState::Down => {
                self.deadline = None;
                WatchdogOutput::Nothing
            }
        }
    }

    /// The connection is gone.
    pub fn connection_down(&mut self) {
        self.state = WatchdogState::Down;
        self.pending = None;
        self.deadline = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TW: Duration = Duration::from_secs(30);
    const J: Duration = Duration::from_secs(2);

    fn fire(w: &mut Watchdog, rng: &mut SplitMix64) -> (Duration, WatchdogOutput) {
        let d = w.deadline().expect("armed");
        (d, w.on_timeout(d, rng))
    }

    #[test]
    fn timer_stays_within_tw_plus_minus_jitter_and_varies() {
        let mut rng = SplitMix64::new(1);
        let mut w = Watchdog::new(TW, J, false);
        let mut seen = std::collections::HashSet::new();
        let mut now = Duration::ZERO;
        w.connection_up(now, &mut rng);
        for _ in 0..200 {
            let d = w.deadline().unwrap() - now;
            assert!(d >= TW - J && d <= TW + J, "{d:?}");
            seen.insert(d);
            now += Duration::from_secs(1);
            w.on_receive(now, None, &mut rng);
        }
        assert!(
            seen.len() > 100,
            "jitter draws should differ: {}",
            seen.len()
        );
    }

    #[test]
    fn okay_suspect_down_and_recovery() {
        let mut rng = SplitMix64::new(2);
        let mut w = Watchdog::new(TW, J, false);
        assert_eq!(w.state(), WatchdogState::Initial);
        w.connection_up(Duration::ZERO, &mut rng);
        let (t, out) = fire(&mut w, &mut rng);
        assert_eq!(out, WatchdogOutput::SendDwr);
        w.dwr_sent(7);
        // A DWA with another Hop-by-Hop id does not answer ours.
        w.on_receive(t + Duration::from_secs(1), Some(8), &mut rng);
        let (_, out) = fire(&mut w, &mut rng);
        assert_eq!(out, WatchdogOutput::Suspect);
        // Anything from the peer: back to OKAY.
        let out = w.on_receive(t + Duration::from_secs(40), None, &mut rng);
        assert_eq!(
            (out, w.state()),
            (WatchdogOutput::Okay, WatchdogState::Okay)
        );
        // Still no DWA for our DWR: the next expiry suspects again, then DOWN.
        assert_eq!(fire(&mut w, &mut rng).1, WatchdogOutput::Suspect);
        assert_eq!(fire(&mut w, &mut rng).1, WatchdogOutput::Down);
        assert_eq!(w.state(), WatchdogState::Down);
        assert_eq!(w.deadline(), None);
    }

    #[test]
    fn reopen_counts_dwas_and_a_miss_restarts_the_count() {
        let mut rng = SplitMix64::new(3);
        let mut w = Watchdog::new(TW, J, true);
        assert_eq!(w.state(), WatchdogState::Down);
        assert_eq!(
            w.connection_up(Duration::ZERO, &mut rng),
            WatchdogOutput::SendDwr
        );
        w.dwr_sent(1);
        assert_eq!(
            w.on_receive(Duration::from_secs(1), Some(1), &mut rng),
            WatchdogOutput::Nothing
        );
        // Application traffic does not count in REOPEN.
        w.on_receive(Duration::from_secs(2), None, &mut rng);
        assert_eq!(fire(&mut w, &mut rng).1, WatchdogOutput::SendDwr);
        w.dwr_sent(2);
        // Missed: the count restarts from -1.
        assert_eq!(fire(&mut w, &mut rng).1, WatchdogOutput::Nothing);
        let (t, _) = (w.deadline().unwrap(), ());
        w.on_receive(t - Duration::from_secs(1), Some(2), &mut rng);
        for hbh in 3..6 {
            assert_eq!(fire(&mut w, &mut rng).1, WatchdogOutput::SendDwr);
            w.dwr_sent(hbh);
            let out = w.on_receive(
                w.deadline().unwrap() - Duration::from_secs(20),
                Some(hbh),
                &mut rng,
            );
            assert_eq!(out == WatchdogOutput::Okay, hbh == 5, "DWA {hbh}");
        }
        assert_eq!(w.state(), WatchdogState::Okay);

        // Two misses in a row in REOPEN: DOWN.
        let mut w = Watchdog::new(TW, J, true);
        w.connection_up(Duration::ZERO, &mut rng);
        w.dwr_sent(1);
        assert_eq!(fire(&mut w, &mut rng).1, WatchdogOutput::Nothing);
        assert_eq!(fire(&mut w, &mut rng).1, WatchdogOutput::Down);
    }
}
