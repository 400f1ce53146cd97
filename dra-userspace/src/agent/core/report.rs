//! What the core reports: the counters snapshot and the `dra status` text.

use super::*;

impl Core {
    pub(super) fn snapshot(&self) -> AgentStats {
        let mut s = self.stats.clone();
        s.relay = self.pipeline.stats();
        let m = self.marked.stats();
        s.marked_answered = m.answered;
        s.marked_discarded = m.discarded;
        s.egress = (0..self.cfg.peer_groups.len())
            .filter_map(|i| {
                self.pipeline
                    .rlf_stats(GroupId(i))
                    .map(|st| (self.cfg.peer_groups[i].name.clone(), st))
            })
            .collect();
        s
    }

    // ----- status -----

    pub(super) fn status(&self) -> String {
        let now = self.now();
        let s = self.snapshot();
        let mut o = String::new();
        let _ = writeln!(
            o,
            "dra {} ({})  up {}s  connections {}",
            self.cfg.global.origin_host,
            self.cfg.global.origin_realm,
            now.as_secs(),
            self.conns.len()
        );
        self.config_status(&mut o);
        let _ = writeln!(o, "{}", self.ready_status());
        let _ = writeln!(o, "{}", self.overload_status(now));
        let _ = writeln!(o, "ingress limits: {}", self.opts.ingress_by);
        let _ = writeln!(
            o,
            "requests in {}  answered locally {} (marked {})  relayed {}  generated {}  \
             discarded {}  pending {}  retries {}  invariant {}",
            s.requests_in,
            s.local_answers,
            s.marked_answered,
            s.relay.answers_relayed,
            s.relay.answers_generated,
            s.relay.answers_discarded,
            s.relay.pending,
            s.relay.retries,
            if s.invariant_ok() { "ok" } else { "VIOLATED" }
        );
        let _ = writeln!(
            o,
            "{:<12} {:<6} {:<8} {:<5} {:>9} {:>9} {:>8} {:>8} {:>8} {:>6}",
            "peer", "role", "state", "tx", "req_in", "req_out", "in/s", "out/s", "pending", "load"
        );
        for (i, p) in self.cfg.peers.iter().enumerate() {
            if self.is_removed(i) {
                continue;
            }
            let sl = &self.slots[i];
            let state = sl.state.map_or("closed", |st| st.name());
            let load = self
                .peers
                .view(PeerId(i))
                .and_then(|v| v.load)
                .map_or("-".to_owned(), |l| {
                    format!("{:.0}%", l.load_fraction() * 100.0)
                });
            let role = match p.role {
                CfgRole::Client => "client",
                CfgRole::Server => "server",
            };
            let tx = sl
                .conn
                .or(sl.initiator)
                .and_then(|c| self.conns.get(&c))
                .map_or("-", |c| if c.tls_peers.is_some() { "tls" } else { "tcp" });
            let pending = if p.role == CfgRole::Server {
                self.pipeline.outstanding(PeerId(i))
            } else {
                0
            };
            let _ = writeln!(
                o,
                "{:<12} {:<6} {:<8} {:<5} {:>9} {:>9} {:>8.0} {:>8.0} {:>8} {:>6}",
                p.name,
                role,
                state,
                tx,
                sl.requests_in,
                sl.requests_out,
                sl.rate_in,
                sl.rate_out,
                pending,
                load
            );
        }
        // Where each limit is enforced (docs/config.md, "Which part enforces a limit").
        let xdp = matches!(self.opts.ingress, super::io::Ingress::FastPath(_));
        for (limit, part) in self.cfg.enforced_by(Some(xdp)) {
            let _ = writeln!(o, "limit {limit}: {part}");
        }
        for (i, p) in self.cfg.peers.iter().enumerate() {
            // DOIC reports in force (docs/doic.md).
            let report = match self.doic.report(i) {
                Some(crate::doic::Report::Reduction(r)) => format!("loss {r}%"),
                Some(crate::doic::Report::MaxRate(r)) => format!("rate {r}/s"),
                None => continue,
            };
            let seq = self.doic.sequence(i).unwrap_or(0);
            let _ = writeln!(o, "doic {}: peer report {report}  seq {seq}", p.name);
        }
        self.doic_status(self.now(), &mut o);
        for (name, st) in &s.egress {
            let g = self
                .cfg
                .peer_groups
                .iter()
                .position(|g| &g.name == name)
                .expect("group");
            let q = self.pipeline.queue_len(GroupId(g));
            let _ = writeln!(
                o,
                "egress {name}: queued now {q}  offered {}  refused {}  expired {}",
                st.offered, st.refused, st.expired
            );
        }
        o
    }
}

impl Core {
    /// The running config's file, hash and load time, and the last reload's outcome.
    fn config_status(&self, o: &mut String) {
        let Some(info) = &self.opts.config_info else {
            return;
        };
        let info = info.lock().expect("lock").clone();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let path = info
            .path
            .as_ref()
            .map_or(String::new(), |p| format!("{} ", p.display()));
        let _ = writeln!(
            o,
            "config {path}sha256 {}  loaded {} ({}s ago)",
            info.sha256,
            utc(info.loaded_at),
            now.saturating_sub(info.loaded_at)
        );
        match &info.last_reload {
            None => {
                let _ = writeln!(o, "last reload: none");
            }
            Some((at, outcome)) => {
                let _ = writeln!(
                    o,
                    "last reload: {outcome} ({}, {}s ago)",
                    utc(*at),
                    now.saturating_sub(*at)
                );
            }
        }
    }
}

/// Seconds since the Unix epoch as UTC `YYYY-MM-DDTHH:MM:SSZ` (the civil calendar
/// from days, H. Hinnant's algorithm).
fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_formats_the_civil_date() {
        assert_eq!(super::utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(super::utc(1_796_155_965), "2026-12-01T20:12:45Z");
    }
}
