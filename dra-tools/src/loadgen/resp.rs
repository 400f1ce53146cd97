//! The server's Redis client for its per-session side effects, on the `redis` crate:
//! one multiplexed connection (commands from every CCR share it, pipelined, replies
//! matched in order by the crate), reconnected by the crate's connection manager after
//! it fails.

use std::net::SocketAddr;
use std::time::Duration;

use redis::aio::ConnectionManager;

/// A failed Redis command.
#[derive(Debug, thiserror::Error)]
pub enum RespError {
    /// Could not connect.
    #[error("cannot connect to redis at {addr}")]
    Connect {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: redis::RedisError,
    },
    /// The command failed: an error reply, or the connection failed during it.
    #[error("redis command failed")]
    Command {
        /// Why.
        #[source]
        source: redis::RedisError,
    },
}

/// A cloneable handle to one pipelined connection.
#[derive(Clone)]
pub struct RespClient {
    conn: ConnectionManager,
}

impl std::fmt::Debug for RespClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RespClient").finish_non_exhaustive()
    }
}

fn cmd(args: &[&[u8]]) -> redis::Cmd {
    let mut c = redis::cmd(std::str::from_utf8(args[0]).unwrap_or("?"));
    for a in &args[1..] {
        c.arg(*a);
    }
    c
}

impl RespClient {
    /// Connects (needs a tokio runtime).
    pub async fn connect(addr: SocketAddr) -> Result<RespClient, RespError> {
        let connect = async {
            let client = redis::Client::open(format!("redis://{addr}/"))?;
            // Fail fast when nothing listens; after a failure the crate reconnects on
            // the next command.
            let cfg = redis::aio::ConnectionManagerConfig::new()
                .set_number_of_retries(1)
                .set_connection_timeout(Some(Duration::from_secs(2)));
            ConnectionManager::new_with_config(client, cfg).await
        };
        let conn = connect
            .await
            .map_err(|source| RespError::Connect { addr, source })?;
        Ok(RespClient { conn })
    }

    /// Sends several commands back to back (one pipeline) and waits for all replies;
    /// an error reply to any of them is an error.
    pub async fn pipeline(&self, cmds: &[Vec<&[u8]>]) -> Result<(), RespError> {
        let mut p = redis::pipe();
        for args in cmds {
            p.add_command(cmd(args)).ignore();
        }
        let mut conn = self.conn.clone();
        p.query_async::<()>(&mut conn)
            .await
            .map_err(|source| RespError::Command { source })
    }

    /// Sends one command (`args[0]` is its name) and waits for its reply; an error
    /// reply is an error.
    pub async fn command(&self, args: &[&[u8]]) -> Result<redis::Value, RespError> {
        let mut conn = self.conn.clone();
        cmd(args)
            .query_async(&mut conn)
            .await
            .map_err(|source| RespError::Command { source })
    }
}
