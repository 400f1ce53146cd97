//! The Redis binding store against a real `redis-server` started by the test on a free
//! 127.0.0.1 port (killed on drop, also on panic).

mod support;

use std::{
    net::{Ipv4Addr, SocketAddr},
    thread::sleep,
    time::Duration,
};

use dra::routing::{
    APP_GX, BindingError, BindingStore, CcRequestType, Decision, PeerTable, RedisBindingStore,
    RouteEntry, RouteRequest, RouteTable, Router, Selector, Strategy, Via,
};
use support::{RedisServer, free_port};

const NOW: Duration = Duration::ZERO;
#[test]
fn bind_get_unbind_round_trip() {
    let redis = RedisServer::start();
    let mut st = RedisBindingStore::connect(redis.addr).unwrap();
    // Session-Ids contain ';' and may contain anything; RESP bulk strings are binary-safe.
    let sid = "pgw1.operator.net;1234;5678;ünïcode session";
    assert_eq!(st.get(sid, NOW).unwrap(), None);
    st.bind(sid, "pcrf1.operator.net", Duration::from_secs(60), NOW)
        .unwrap();
    assert_eq!(
        st.get(sid, NOW).unwrap().as_deref(),
        Some("pcrf1.operator.net")
    );
    st.bind(sid, "pcrf2.operator.net", Duration::from_secs(60), NOW)
        .unwrap();
    assert_eq!(
        st.get(sid, NOW).unwrap().as_deref(),
        Some("pcrf2.operator.net"),
        "rebind replaces"
    );
    st.unbind(sid, NOW).unwrap();
    assert_eq!(st.get(sid, NOW).unwrap(), None);
    st.unbind(sid, NOW).unwrap();

    // The key really is dra:sess:<Session-Id>, visible to any Redis client.
    st.bind("k1", "pcrf1", Duration::from_secs(60), NOW)
        .unwrap();
    let mut other_prefix = RedisBindingStore::connect(redis.addr)
        .unwrap()
        .with_key_prefix("dra:sess:k");
    assert_eq!(
        other_prefix.get("1", NOW).unwrap().as_deref(),
        Some("pcrf1")
    );
}

#[test]
fn binding_expires_after_its_px_ttl() {
    let redis = RedisServer::start();
    let mut st = RedisBindingStore::connect(redis.addr).unwrap();
    st.bind("short", "pcrf1", Duration::from_millis(200), NOW)
        .unwrap();
    st.bind("long", "pcrf2", Duration::from_secs(60), NOW)
        .unwrap();
    assert_eq!(st.get("short", NOW).unwrap().as_deref(), Some("pcrf1"));
    let mut expired = false;
    for _ in 0..100 {
        if st.get("short", NOW).unwrap().is_none() {
            expired = true;
            break;
        }
        sleep(Duration::from_millis(50));
    }
    assert!(expired, "binding with PX 200 still present after 5 s");
    assert_eq!(st.get("long", NOW).unwrap().as_deref(), Some("pcrf2"));
}

#[test]
fn two_dra_hosts_share_bindings_through_redis() {
    let redis = RedisServer::start();
    let mut host_a = RedisBindingStore::connect(redis.addr).unwrap();
    let mut host_b = RedisBindingStore::connect(redis.addr).unwrap();
    host_a
        .bind("s1", "pcrf2", Duration::from_secs(60), NOW)
        .unwrap();
    assert_eq!(host_b.get("s1", NOW).unwrap().as_deref(), Some("pcrf2"));
    host_b.unbind("s1", NOW).unwrap();
    assert_eq!(host_a.get("s1", NOW).unwrap(), None);

    // Full path: host A's router binds a CCR-I, host B's router follows it on CCR-U.
    let mut peers = PeerTable::new();
    let ids = [peers.add("pcrf1"), peers.add("pcrf2")];
    for id in ids {
        peers.set_good(id, true);
    }
    let table = || {
        RouteTable::new(
            ids.iter()
                .map(|id| RouteEntry::new("*", None, *id, 1).unwrap()),
        )
        .unwrap()
    };
    let mut router_a = Router::new(table(), Selector::new(Strategy::RoundRobin, 1));
    let mut router_b = Router::new(table(), Selector::new(Strategy::RoundRobin, 1));
    let req = |t| RouteRequest {
        destination_realm: "operator.net",
        destination_host: None,
        application_id: APP_GX,
        session_id: Some("gx-42"),
        cc_request_type: Some(t),
    };
    // Host B has already sent another session to pcrf1, so left alone it would pick pcrf2.
    router_b
        .selector_mut()
        .select(&router_a.table().candidates("x", APP_GX).1, &peers, NOW);
    let a = router_a.route_request(&req(CcRequestType::Initial), &peers, &mut host_a, NOW);
    assert_eq!(
        a.decision,
        Decision::Forward {
            peer: ids[0],
            via: Via::Selected
        }
    );
    assert!(a.binding_error.is_none());
    let b = router_b.route_request(&req(CcRequestType::Update), &peers, &mut host_b, NOW);
    assert_eq!(
        b.decision,
        Decision::Forward {
            peer: ids[0],
            via: Via::Binding
        }
    );
    let b = router_b.route_request(&req(CcRequestType::Termination), &peers, &mut host_b, NOW);
    assert_eq!(b.peer(), Some(ids[0]));
    assert_eq!(
        host_a.get("gx-42", NOW).unwrap(),
        None,
        "CCR-T on host B removed host A's binding"
    );
}

#[test]
fn store_reports_typed_errors_when_redis_is_down_and_recovers_when_it_is_back() {
    let port = free_port();
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    assert!(matches!(
        RedisBindingStore::connect(addr),
        Err(BindingError::Connect { .. })
    ));

    let mut st = RedisBindingStore::new(addr);
    {
        let _redis = RedisServer::start_on(port);
        st.bind("s1", "pcrf1", Duration::from_secs(60), NOW)
            .unwrap();
        assert_eq!(st.get("s1", NOW).unwrap().as_deref(), Some("pcrf1"));
    }
    // Server gone: the held connection fails, the retry cannot connect.
    let err = st.get("s1", NOW).unwrap_err();
    assert!(matches!(err, BindingError::Connect { .. }), "{err:?}");

    // A router with the dead store still routes, and reports the store error.
    let mut peers = PeerTable::new();
    let id = peers.add("pcrf1");
    peers.set_good(id, true);
    let mut router = Router::new(
        RouteTable::new([RouteEntry::new("*", None, id, 1).unwrap()]).unwrap(),
        Selector::new(Strategy::RoundRobin, 1),
    );
    let req = RouteRequest {
        destination_realm: "operator.net",
        destination_host: None,
        application_id: APP_GX,
        session_id: Some("s2"),
        cc_request_type: Some(CcRequestType::Initial),
    };
    let o = router.route_request(&req, &peers, &mut st, NOW);
    assert_eq!(o.peer(), Some(id));
    assert!(matches!(
        o.binding_error,
        Some(BindingError::Connect { .. })
    ));

    // Redis back (empty, no persistence): the same store instance reconnects.
    let _redis = RedisServer::start_on(port);
    assert_eq!(st.get("s1", NOW).unwrap(), None);
    st.bind("s1", "pcrf1", Duration::from_secs(60), NOW)
        .unwrap();
    assert_eq!(st.get("s1", NOW).unwrap().as_deref(), Some("pcrf1"));
}
