//! The control socket: one connection = one request line, one reply.
//!
//! - `status` (or nothing within a second: an older client): the status screen
//!   (`dra status`).
//! - `reload`, `reload --dry-run`: handed to `dra run`'s reload loop
//!   (in [`crate::run`]); the reply starts with a line `OK` or `ERR`.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};

use super::{Ctl, ReloadRequest};

/// How long a client has to send its request line.
const REQUEST_WAIT: Duration = Duration::from_secs(1);

pub(super) async fn serve(
    lst: UnixListener,
    ctl: mpsc::Sender<Ctl>,
    reload: Option<mpsc::Sender<ReloadRequest>>,
) {
    loop {
        let Ok((s, _)) = lst.accept().await else {
            continue;
        };
        let (ctl, reload) = (ctl.clone(), reload.clone());
        tokio::spawn(async move { answer(s, ctl, reload).await });
    }
}

async fn answer(
    s: UnixStream,
    ctl: mpsc::Sender<Ctl>,
    reload: Option<mpsc::Sender<ReloadRequest>>,
) {
    let mut s = BufReader::new(s);
    let mut line = String::new();
    let _ = tokio::time::timeout(REQUEST_WAIT, s.read_line(&mut line)).await;
    let text = match line.trim() {
        "" | "status" => {
            let (tx, rx) = oneshot::channel();
            if ctl.send(Ctl::Status(tx)).await.is_err() {
                "agent stopping\n".to_owned()
            } else {
                rx.await.unwrap_or_else(|_| "agent stopping\n".to_owned())
            }
        }
        r @ ("reload" | "reload --dry-run") => {
            let dry_run = r.ends_with("--dry-run");
            match reload {
                None => "ERR\nthis agent does not reload its config (not `dra run`)\n".into(),
                Some(tx) => {
                    let (reply, rx) = oneshot::channel();
                    let sent = tx.send(ReloadRequest { dry_run, reply }).await.is_ok();
                    match (sent, rx.await) {
                        (true, Ok((ok, text))) => {
                            format!("{}\n{text}", if ok { "OK" } else { "ERR" })
                        }
                        _ => "ERR\nagent stopping\n".into(),
                    }
                }
            }
        }
        other => format!("ERR\nunknown request {other:?} (status, reload, reload --dry-run)\n"),
    };
    let mut s = s.into_inner();
    let _ = s.write_all(text.as_bytes()).await;
    let _ = s.shutdown().await;
}
