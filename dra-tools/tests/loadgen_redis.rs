//! Server Redis side effects against a real redis-server on a free loopback port.

mod support;

use dra_tools::loadgen::client::{self, ClientConfig};
use dra_tools::loadgen::resp::RespClient;
use dra_tools::loadgen::scenario::Class;
use dra_tools::loadgen::server::{self, ServerConfig};
use support::{RedisServer, pcrf_scenario};

async fn keys(r: &RespClient) -> Vec<String> {
    match r.command(&[b"KEYS", b"loadgen:session:*"]).await.unwrap() {
        redis::Value::Array(items) => items
            .into_iter()
            .map(|i| match i {
                redis::Value::BulkString(b) => String::from_utf8(b).unwrap(),
                other => panic!("{other:?}"),
            })
            .collect(),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_keys_appear_on_ccr_i_and_vanish_on_ccr_t() {
    let redis = RedisServer::start();
    let mut cfg = ServerConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        "pcrf1.lab.example",
        "lab.example",
    );
    cfg.redis = Some(redis.addr);
    let srv = server::run(cfg).await.unwrap();
    let db = RespClient::connect(redis.addr).await.unwrap();
    let scenario = pcrf_scenario(&[
        r#"name = "open", duration_s = 1, rates = { gx_ccr_i = 100 }"#,
        r#"name = "hold", duration_s = 2"#,
        r#"name = "flush", duration_s = 0.5, flush = "all""#,
    ]);
    let (tx, mut rows) = tokio::sync::mpsc::unbounded_channel();
    let mut ccfg = ClientConfig::new(srv.local_addr(), 2);
    ccfg.rows_tx = Some(tx);
    let run = tokio::spawn(client::run(ccfg, scenario));
    // The first full second of the quiet "hold" phase: every CCR-I was answered.
    let mut seen_hold = false;
    while let Some(row) = rows.recv().await {
        if row.phase == "hold" && !seen_hold {
            seen_hold = true;
            let k = keys(&db).await;
            assert_eq!(k.len() as u64, row.open_sessions["gx"]);
            assert_eq!(k.len(), 100);
            assert!(k.iter().all(|k| k.starts_with("loadgen:session:pgw")));
            let v = db.command(&[b"GET", k[0].as_bytes()]).await.unwrap();
            assert_eq!(v, redis::Value::BulkString(b"pcrf1.lab.example".to_vec()));
        }
    }
    assert!(seen_hold);
    let report = run.await.unwrap().unwrap();
    assert_eq!(report.class(Class::GxCcrT.name()).answered_with(2001), 100);
    assert!(keys(&db).await.is_empty());
    let stats = srv.shutdown().await;
    assert_eq!(
        (stats.redis_set, stats.redis_del, stats.redis_errors),
        (100, 100, 0)
    );
}
