//! A reload of the running agent (`crate::reload`): listeners bound or closed here,
//! routing, groups and peers in the core (`core::reload`).

use tokio::sync::oneshot;

use super::{AgentHandle, Ctl, bind_listener};
use crate::config::Config;
use crate::config::diff::ConfigDiff;

impl AgentHandle {
    /// Applies `cfg` (validated; `diff` is the difference from the running config and
    /// is applicable). New listeners are bound first: a listener that cannot be bound
    /// fails the reload before anything changed. Removed listeners stop accepting;
    /// their connections stay.
    pub async fn reload(&mut self, cfg: Config, diff: &ConfigDiff) -> Result<(), String> {
        let mut bound = Vec::new();
        for a in &diff.listeners_added {
            let Some(l) = cfg.listeners.iter().find(|l| l.address == *a) else {
                continue;
            };
            match bind_listener(l, self.ctl.clone()).await {
                Ok((b, task)) => bound.push((*a, b, task)),
                Err(e) => {
                    for (_, _, t) in bound {
                        t.abort();
                    }
                    return Err(crate::error_chain(&e));
                }
            }
        }
        let (done, rx) = oneshot::channel();
        let sent = self
            .ctl
            .send(Ctl::Reload {
                cfg: Box::new(cfg),
                diff: Box::new(diff.clone()),
                done,
            })
            .await
            .is_ok();
        let r = if sent {
            rx.await.unwrap_or_else(|_| Err("agent stopping".into()))
        } else {
            Err("agent stopping".into())
        };
        if let Err(e) = r {
            for (_, _, t) in bound {
                t.abort();
            }
            return Err(e);
        }
        for a in &diff.listeners_removed {
            if let Some(i) = self.listeners.iter().position(|(c, _, _)| c == a) {
                let (_, _, t) = self.listeners.remove(i);
                t.abort();
            }
        }
        self.listeners.extend(bound);
        Ok(())
    }
}
