//! Gx/Gy session stickiness through `Router::route_request` with the in-memory store:
//! CCR-I binds, CCR-U/T follow, CCR-T unbinds, TTL expiry, failover rebinding, store
//! bounds, and store failures that must not fail routing.

use std::time::Duration;

use dra::routing::CcRequestType::{Event, Initial, Termination, Update};
use dra::routing::{
    APP_GX, APP_GY, BindingError, BindingStore, CcRequestType, Decision, MemoryBindingStore,
    PeerId, PeerStates, PeerTable, RouteEntry, RouteRequest, RouteTable, Router, Selector,
    Strategy, Unroutable, Via,
};

const S6A: u32 = 16_777_251;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// pcrf1, pcrf2 as equal-weight wildcard routes, round-robin, all good.
fn setup(ttl: Duration) -> (Router, PeerTable, Vec<PeerId>) {
    let mut peers = PeerTable::new();
    let ids = vec![peers.add("pcrf1"), peers.add("pcrf2")];
    for id in &ids {
        peers.set_good(*id, true);
    }
    let table = RouteTable::new(
        ids.iter()
            .map(|id| RouteEntry::new("*", None, *id, 1).unwrap()),
    )
    .unwrap();
    let router = Router::new(table, Selector::new(Strategy::RoundRobin, 1)).with_binding_ttl(ttl);
    (router, peers, ids)
}

fn ccr<'a>(sid: &'a str, t: CcRequestType) -> RouteRequest<'a> {
    RouteRequest {
        destination_realm: "operator.net",
        destination_host: None,
        application_id: APP_GX,
        session_id: Some(sid),
        cc_request_type: Some(t),
    }
}

fn store(cap: usize) -> MemoryBindingStore {
    MemoryBindingStore::new(cap.try_into().unwrap())
}

fn fwd(peer: PeerId, via: Via) -> Decision {
    Decision::Forward { peer, via }
}

/// [`setup`] with a 1 h TTL and a store of 10 in which s1 is bound to pcrf1 (its CCR-I
/// at 0 s).
fn s1_bound_to_pcrf1() -> (Router, PeerTable, Vec<PeerId>, MemoryBindingStore) {
    let (mut router, peers, ids) = setup(secs(3600));
    let mut st = store(10);
    router.route_request(&ccr("s1", Initial), &peers, &mut st, secs(0));
    (router, peers, ids, st)
}

/// [`s1_bound_to_pcrf1`], then pcrf1 is not good: s1's request of type `t` at 1 s is
/// forwarded to pcrf2 as a failover from pcrf1.
fn s1_failed_over_to_pcrf2(
    t: CcRequestType,
) -> (Router, PeerTable, Vec<PeerId>, MemoryBindingStore) {
    let (mut router, mut peers, ids, mut st) = s1_bound_to_pcrf1();
    peers.set_good(ids[0], false);
    let o = router.route_request(&ccr("s1", t), &peers, &mut st, secs(1));
    let previous = "pcrf1".into();
    assert_eq!(o.decision, fwd(ids[1], Via::Failover { previous }));
    (router, peers, ids, st)
}

#[test]
fn ccr_i_binds_ccr_u_and_t_follow_and_ccr_t_unbinds() {
    let (mut router, peers, ids) = setup(secs(3600));
    let mut st = store(100);

    let o = router.route_request(&ccr("s1", Initial), &peers, &mut st, secs(0));
    assert_eq!(o.decision, fwd(ids[0], Via::Selected));
    assert_eq!(st.get("s1", secs(0)).unwrap().as_deref(), Some("pcrf1"));

    // Another session moves the round-robin on; s1 must not move with it.
    let o = router.route_request(&ccr("s2", Initial), &peers, &mut st, secs(1));
    assert_eq!(o.decision, fwd(ids[1], Via::Selected));
    for t in 2..6 {
        let o = router.route_request(&ccr("s1", Update), &peers, &mut st, secs(t));
        assert_eq!(o.decision, fwd(ids[0], Via::Binding), "CCR-U at {t}s");
        assert!(o.binding_error.is_none());
    }
    let o = router.route_request(&ccr("s1", Termination), &peers, &mut st, secs(6));
    assert_eq!(o.decision, fwd(ids[0], Via::Binding));
    assert_eq!(
        st.get("s1", secs(6)).unwrap(),
        None,
        "CCR-T removes the binding"
    );
    assert_eq!(
        st.get("s2", secs(6)).unwrap().as_deref(),
        Some("pcrf2"),
        "other sessions untouched"
    );
}

#[test]
fn retransmitted_ccr_i_follows_the_existing_binding() {
    let (mut router, peers, ids) = setup(secs(3600));
    let mut st = store(10);
    let first = router.route_request(&ccr("s1", Initial), &peers, &mut st, secs(0));
    let again = router.route_request(&ccr("s1", Initial), &peers, &mut st, secs(1));
    assert_eq!(first.peer(), Some(ids[0]));
    assert_eq!(again.decision, fwd(ids[0], Via::Binding));
}

#[test]
fn binding_expires_after_its_ttl_and_every_ccr_u_refreshes_it() {
    let (mut router, peers, ids) = setup(secs(10));
    let mut st = store(10);
    router.route_request(&ccr("s1", Initial), &peers, &mut st, secs(0));
    // Refreshed at 8 s: still bound at 17 s although 17 s > first TTL.
    assert_eq!(
        router
            .route_request(&ccr("s1", Update), &peers, &mut st, secs(8))
            .decision,
        fwd(ids[0], Via::Binding)
    );
    assert_eq!(
        router
            .route_request(&ccr("s1", Update), &peers, &mut st, secs(17))
            .decision,
        fwd(ids[0], Via::Binding)
    );
    // 11 s of silence after the refresh at 17 s: the binding is gone.
    assert_eq!(st.get("s1", secs(28)).unwrap(), None);
    assert_eq!(st.stats().expirations, 1);
    let o = router.route_request(&ccr("s1", Update), &peers, &mut st, secs(28));
    assert_eq!(
        o.decision,
        fwd(ids[1], Via::Selected),
        "expired session is routed afresh"
    );
    assert_eq!(
        st.get("s1", secs(28)).unwrap().as_deref(),
        Some("pcrf2"),
        "and bound again"
    );
}

#[test]
fn bound_peer_not_good_fails_over_rebinds_and_does_not_flap_back() {
    let (mut router, mut peers, ids, mut st) = s1_failed_over_to_pcrf2(Update);
    assert_eq!(st.get("s1", secs(1)).unwrap().as_deref(), Some("pcrf2"));

    peers.set_good(ids[0], true);
    let o = router.route_request(&ccr("s1", Update), &peers, &mut st, secs(2));
    assert_eq!(
        o.decision,
        fwd(ids[1], Via::Binding),
        "stays on the peer that now has the session"
    );
}

#[test]
fn ccr_t_to_a_bad_bound_peer_fails_over_and_still_unbinds() {
    let (_, _, _, st) = s1_failed_over_to_pcrf2(Termination);
    assert!(st.is_empty());
}

#[test]
fn nothing_good_answers_3002_and_keeps_the_binding() {
    let (mut router, mut peers, ids, mut st) = s1_bound_to_pcrf1();
    peers.set_good(ids[0], false);
    peers.set_good(ids[1], false);
    let o = router.route_request(&ccr("s1", Update), &peers, &mut st, secs(1));
    assert_eq!(o.decision, Decision::Reject(Unroutable::NoGoodPeer));
    assert_eq!(st.get("s1", secs(1)).unwrap().as_deref(), Some("pcrf1"));
}

#[test]
fn destination_host_overrides_and_moves_the_binding() {
    let (mut router, peers, ids, mut st) = s1_bound_to_pcrf1();
    let mut req = ccr("s1", Update);
    req.destination_host = Some("pcrf2");
    let o = router.route_request(&req, &peers, &mut st, secs(1));
    assert_eq!(o.decision, fwd(ids[1], Via::DestinationHost));
    let o = router.route_request(&ccr("s1", Update), &peers, &mut st, secs(2));
    assert_eq!(o.decision, fwd(ids[1], Via::Binding));
}

#[test]
fn non_sticky_applications_event_requests_and_non_ccr_create_no_binding() {
    let (mut router, peers, _) = setup(secs(3600));
    let mut st = store(10);
    let mut s6a = ccr("s6a-1", Initial);
    s6a.application_id = S6A;
    router.route_request(&s6a, &peers, &mut st, secs(0));
    let mut event = ccr("gy-ev", Event);
    event.application_id = APP_GY;
    router.route_request(&event, &peers, &mut st, secs(0));
    let mut no_type = ccr("gx-x", Update);
    no_type.cc_request_type = None;
    router.route_request(&no_type, &peers, &mut st, secs(0));
    assert!(st.is_empty());
}

#[test]
fn two_dra_hosts_agree_on_a_binding_by_peer_name_even_with_different_peer_order() {
    let (mut host_a, peers_a, _) = setup(secs(3600));
    // Host B knows the same peers in another order, so indexes differ.
    let mut peers_b = PeerTable::new();
    let b_ids = [peers_b.add("pcrf2"), peers_b.add("pcrf1")];
    for id in b_ids {
        peers_b.set_good(id, true);
    }
    let table = RouteTable::new(
        b_ids
            .iter()
            .map(|id| RouteEntry::new("*", None, *id, 1).unwrap()),
    )
    .unwrap();
    let mut host_b = Router::new(table, Selector::new(Strategy::RoundRobin, 2));
    let mut shared = store(10);

    let a = host_a.route_request(&ccr("s1", Initial), &peers_a, &mut shared, secs(0));
    assert_eq!(peers_a.name(a.peer().unwrap()), Some("pcrf1"));
    let b = host_b.route_request(&ccr("s1", Update), &peers_b, &mut shared, secs(1));
    assert_eq!(b.decision, fwd(b_ids[1], Via::Binding));
    assert_eq!(peers_b.name(b_ids[1]), Some("pcrf1"));
}

#[test]
fn bounded_memory_store_evicts_the_oldest_and_counts_it() {
    let mut st = store(2);
    st.bind("a", "pcrf1", secs(100), secs(0)).unwrap();
    st.bind("b", "pcrf1", secs(100), secs(1)).unwrap();
    st.bind("c", "pcrf2", secs(100), secs(2)).unwrap();
    assert_eq!(st.len(), 2);
    assert_eq!(st.get("a", secs(3)).unwrap(), None, "oldest evicted");
    assert_eq!(st.stats().evictions, 1);
    // Refreshing b makes c the oldest.
    st.bind("b", "pcrf1", secs(100), secs(4)).unwrap();
    st.bind("d", "pcrf2", secs(100), secs(5)).unwrap();
    assert_eq!(st.get("c", secs(6)).unwrap(), None);
    assert_eq!(st.get("b", secs(6)).unwrap().as_deref(), Some("pcrf1"));
    assert_eq!(st.get("d", secs(6)).unwrap().as_deref(), Some("pcrf2"));
    assert_eq!(st.stats().evictions, 2);
    // An expired binding pushed out by a new one is an expiry, not an eviction.
    st.bind("e", "pcrf1", secs(100), secs(200)).unwrap();
    assert_eq!(
        st.stats(),
        dra::routing::MemoryStoreStats {
            evictions: 2,
            expirations: 1
        }
    );
    assert_eq!(st.purge_expired(secs(200)), 1);
    assert_eq!(st.len(), 1);
}

/// A store whose every call fails, as Redis does when it is down.
struct DownStore;

impl BindingStore for DownStore {
    fn get(&mut self, _: &str, _: Duration) -> Result<Option<String>, BindingError> {
        Err(down("GET"))
    }
    fn bind(&mut self, _: &str, _: &str, _: Duration, _: Duration) -> Result<(), BindingError> {
        Err(down("SET"))
    }
    fn unbind(&mut self, _: &str, _: Duration) -> Result<(), BindingError> {
        Err(down("DEL"))
    }
}

fn down(command: &'static str) -> BindingError {
    BindingError::Io {
        command,
        source: std::io::ErrorKind::ConnectionRefused.into(),
    }
}

#[test]
fn a_failing_binding_store_does_not_fail_routing_and_is_reported() {
    let (mut router, peers, ids) = setup(secs(3600));
    let o = router.route_request(&ccr("s1", Initial), &peers, &mut DownStore, secs(0));
    assert_eq!(o.decision, fwd(ids[0], Via::Selected));
    assert!(
        matches!(
            o.binding_error,
            Some(BindingError::Io { command: "GET", .. })
        ),
        "{:?}",
        o.binding_error
    );
}
