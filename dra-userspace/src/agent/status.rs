//! The control socket: one connection = one status screen (`dra status`).

use tokio::io::AsyncWriteExt;
use tokio::net::UnixListener;
use tokio::sync::{mpsc, oneshot};

use super::Ctl;

pub(super) async fn serve(lst: UnixListener, ctl: mpsc::Sender<Ctl>) {
    loop {
        let Ok((mut s, _)) = lst.accept().await else {
            continue;
        };
        let (tx, rx) = oneshot::channel();
        if ctl.send(Ctl::Status(tx)).await.is_err() {
            return;
        }
        let text = rx.await.unwrap_or_else(|_| "agent stopping\n".to_owned());
        tokio::spawn(async move {
            let _ = s.write_all(text.as_bytes()).await;
            let _ = s.shutdown().await;
        });
    }
}
