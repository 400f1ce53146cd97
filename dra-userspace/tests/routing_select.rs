//! Route table and peer selection: StarOS realm routing (docs/architecture.md §6),
//! Destination-Host, application filter, and every selection strategy (§7, RFC 8583).

use std::time::Duration;

use dra::routing::{
    APP_GX, APP_GY, Candidate, Decision, LoadInfo, Lookup, MemoryBindingStore, PeerId, PeerStates,
    PeerTable, RouteEntry, RouteMatch, RouteRequest, RouteTable, Router, Selector, Strategy,
    Unroutable, Via,
};

const T0: Duration = Duration::ZERO;

/// A peer table with every peer in good state.
fn good_peers(names: &[&str]) -> (PeerTable, Vec<PeerId>) {
    let mut t = PeerTable::new();
    let ids: Vec<PeerId> = names.iter().map(|n| t.add(n)).collect();
    for id in &ids {
        t.set_good(*id, true);
    }
    (t, ids)
}

/// [`good_peers`] whose first `loads.len()` report those Load-Values at [`T0`].
fn reporting(names: &[&str], loads: &[u16]) -> (PeerTable, Vec<PeerId>) {
    let (mut t, ids) = good_peers(names);
    for (&id, &value) in ids.iter().zip(loads) {
        t.set_load(id, load(value, T0));
    }
    (t, ids)
}

fn route(realm: &str, app: Option<u32>, peer: PeerId, weight: u32) -> RouteEntry {
    RouteEntry::new(realm, app, peer, weight).expect("valid route")
}

fn name_of(peers: &PeerTable, id: PeerId) -> &str {
    peers.name(id).expect("known peer")
}

/// Pick `n` times, return the names picked.
fn picks(
    sel: &mut Selector,
    cands: &[Candidate],
    peers: &PeerTable,
    n: usize,
    now: Duration,
) -> Vec<String> {
    (0..n)
        .map(|_| {
            let id = sel.select(cands, peers, now).expect("a good peer");
            name_of(peers, id).to_owned()
        })
        .collect()
}

fn count(picks: &[String], name: &str) -> usize {
    picks.iter().filter(|p| *p == name).count()
}

fn load(value: u16, at: Duration) -> Option<LoadInfo> {
    Some(LoadInfo {
        value,
        received_at: at,
    })
}

fn request<'a>(realm: &'a str, app: u32, host: Option<&'a str>) -> RouteRequest<'a> {
    RouteRequest {
        destination_realm: realm,
        destination_host: host,
        application_id: app,
        session_id: None,
        cc_request_type: None,
    }
}

// ----------------------------------------------------------- StarOS routing ----------

#[test]
fn seed_001_abc_to_peer1_def_to_peer2_xyz_to_peer_default() {
    let (peers, ids) = good_peers(&["peer1", "peer2", "peer-default"]);
    let table = RouteTable::new([
        route("abc.com", None, ids[0], 1),
        route("def.com", None, ids[1], 1),
        route("*", None, ids[2], 1),
    ])
    .unwrap();
    let mut router = Router::new(table, Selector::new(Strategy::RoundRobin, 1));
    let mut store = MemoryBindingStore::new(16.try_into().unwrap());

    for (realm, expected) in [
        ("abc.com", "peer1"),
        ("def.com", "peer2"),
        ("xyz.com", "peer-default"),
        ("ABC.Com", "peer1"),
    ] {
        let out = router.route_request(&request(realm, APP_GX, None), &peers, &mut store, T0);
        let peer = out
            .peer()
            .unwrap_or_else(|| panic!("{realm} not routed: {:?}", out.decision));
        assert_eq!(name_of(&peers, peer), expected, "realm {realm}");
    }
    let (m, _) = router.table().candidates("xyz.com", APP_GX);
    assert_eq!(m, RouteMatch::Wildcard);
}

#[test]
fn seed_001_equal_weight_wildcards_are_selected_round_robin() {
    let (peers, ids) = good_peers(&["w1", "w2", "w3"]);
    let table = RouteTable::new(ids.iter().map(|id| route("*", None, *id, 10))).unwrap();
    let (_, cands) = table.candidates("xyz.com", APP_GY);
    let mut sel = Selector::new(Strategy::RoundRobin, 1);
    let p = picks(&mut sel, &cands, &peers, 300, T0);
    // Every window of three consecutive picks contains each peer once.
    for w in p.chunks(3) {
        let mut w = w.to_vec();
        w.sort();
        assert_eq!(w, ["w1", "w2", "w3"]);
    }
    assert_eq!(count(&p, "w1"), 100);
}

#[test]
fn seed_001_different_weights_the_highest_weight_wins() {
    let (peers, ids) = good_peers(&["low", "high"]);
    let table =
        RouteTable::new([route("*", None, ids[0], 5), route("*", None, ids[1], 10)]).unwrap();
    let (_, cands) = table.candidates("xyz.com", APP_GX);
    for strategy in Strategy::ALL {
        let mut sel = Selector::new(strategy, 3);
        let p = picks(&mut sel, &cands, &peers, 50, T0);
        assert_eq!(p, ["high"; 50], "{strategy}");
    }
}

#[test]
fn seed_001_lower_weight_only_when_every_higher_weight_peer_is_not_good() {
    let (mut peers, ids) = good_peers(&["a", "b", "c"]);
    let table = RouteTable::new([
        route("*", None, ids[0], 10),
        route("*", None, ids[1], 10),
        route("*", None, ids[2], 5),
    ])
    .unwrap();
    let (_, cands) = table.candidates("xyz.com", APP_GX);
    let mut sel = Selector::new(Strategy::RoundRobin, 1);

    let p = picks(&mut sel, &cands, &peers, 10, T0);
    assert_eq!(
        (count(&p, "a"), count(&p, "b"), count(&p, "c")),
        (5, 5, 0),
        "higher tier round-robin"
    );

    peers.set_good(ids[0], false);
    let p = picks(&mut sel, &cands, &peers, 10, T0);
    assert_eq!(p, ["b"; 10], "one higher peer left: it takes everything");

    peers.set_good(ids[1], false);
    let p = picks(&mut sel, &cands, &peers, 10, T0);
    assert_eq!(p, ["c"; 10], "all higher peers down: lower weight used");

    peers.set_good(ids[2], false);
    assert_eq!(
        sel.select(&cands, &peers, T0),
        None,
        "nothing good: caller answers 3002"
    );

    peers.set_good(ids[1], true);
    peers.set_good(ids[2], true);
    let p = picks(&mut sel, &cands, &peers, 10, T0);
    assert_eq!(
        p, ["b"; 10],
        "a higher peer back: lower weight unused again"
    );
}

// ------------------------------------------------------ Destination-Host, apps ------

#[test]
fn destination_host_wins_when_connected_and_good_else_realm_routing() {
    let (mut peers, ids) = good_peers(&["pcrf1.abc.com", "pcrf2.abc.com"]);
    let table = RouteTable::new([route("abc.com", None, ids[0], 1)]).unwrap();
    let mut out = Vec::new();

    let l = table.lookup("abc.com", APP_GX, Some("PCRF2.abc.com"), &peers, &mut out);
    assert_eq!(
        l,
        Lookup::DestinationHost(ids[1]),
        "host names are case-insensitive"
    );

    peers.set_good(ids[1], false);
    let l = table.lookup("abc.com", APP_GX, Some("pcrf2.abc.com"), &peers, &mut out);
    assert_eq!(
        l,
        Lookup::Routes(RouteMatch::Realm),
        "host not good: realm routing"
    );
    assert_eq!(
        out,
        [Candidate {
            peer: ids[0],
            weight: 1
        }]
    );

    let l = table.lookup("abc.com", APP_GX, Some("unknown.abc.com"), &peers, &mut out);
    assert_eq!(
        l,
        Lookup::Routes(RouteMatch::Realm),
        "host not a peer: realm routing"
    );

    let mut router = Router::new(table, Selector::new(Strategy::RoundRobin, 1));
    let mut store = MemoryBindingStore::new(4.try_into().unwrap());
    peers.set_good(ids[1], true);
    let o = router.route_request(
        &request("abc.com", APP_GX, Some("pcrf2.abc.com")),
        &peers,
        &mut store,
        T0,
    );
    assert_eq!(
        o.decision,
        Decision::Forward {
            peer: ids[1],
            via: Via::DestinationHost
        }
    );
}

#[test]
fn realm_entry_for_gx_only_does_not_catch_gy() {
    let (_, ids) = good_peers(&["pcrf", "ocs-default", "any-app"]);
    let table = RouteTable::new([
        route("abc.com", Some(APP_GX), ids[0], 1),
        route("*", None, ids[1], 1),
        route("def.com", None, ids[2], 1),
    ])
    .unwrap();
    let (m, c) = table.candidates("abc.com", APP_GX);
    assert_eq!((m, c[0].peer), (RouteMatch::Realm, ids[0]));
    let (m, c) = table.candidates("abc.com", APP_GY);
    assert_eq!(
        (m, c.len(), c[0].peer),
        (RouteMatch::Wildcard, 1, ids[1]),
        "Gy falls to the wildcard"
    );
    let (m, c) = table.candidates("def.com", APP_GY);
    assert_eq!(
        (m, c[0].peer),
        (RouteMatch::Realm, ids[2]),
        "an entry without application serves Gy"
    );
}

#[test]
fn a_peer_listed_for_any_and_for_the_application_is_one_candidate_with_the_higher_weight() {
    let (_, ids) = good_peers(&["p1", "p2"]);
    let table = RouteTable::new([
        route("abc.com", None, ids[0], 1),
        route("abc.com", Some(APP_GX), ids[0], 7),
        route("abc.com", None, ids[1], 3),
    ])
    .unwrap();
    let (_, c) = table.candidates("abc.com", APP_GX);
    assert_eq!(
        c,
        [
            Candidate {
                peer: ids[0],
                weight: 7
            },
            Candidate {
                peer: ids[1],
                weight: 3
            }
        ]
    );
}

#[test]
fn unrouted_realm_is_3003_and_realm_with_all_peers_down_is_3002_without_wildcard_fallthrough() {
    let (mut peers, ids) = good_peers(&["pcrf", "peer-default"]);
    let table = RouteTable::new([
        route("abc.com", None, ids[0], 1),
        route("*", Some(APP_GX), ids[1], 1),
    ])
    .unwrap();
    let mut router = Router::new(table, Selector::new(Strategy::RoundRobin, 1));
    let mut store = MemoryBindingStore::new(4.try_into().unwrap());

    let o = router.route_request(&request("xyz.com", APP_GY, None), &peers, &mut store, T0);
    assert_eq!(o.decision, Decision::Reject(Unroutable::NoRoute));
    assert_eq!(Unroutable::NoRoute.result_code(), 3003);

    peers.set_good(ids[0], false);
    let o = router.route_request(&request("abc.com", APP_GX, None), &peers, &mut store, T0);
    assert_eq!(
        o.decision,
        Decision::Reject(Unroutable::NoGoodPeer),
        "abc.com must not leak to peer-default"
    );
    assert_eq!(Unroutable::NoGoodPeer.result_code(), 3002);
}

#[test]
fn invalid_routes_are_rejected_with_typed_errors() {
    use dra::routing::RouteTableError;
    assert_eq!(
        RouteEntry::new(" ", None, PeerId(0), 1),
        Err(RouteTableError::EmptyRealm)
    );
    assert!(matches!(
        RouteEntry::new("*.abc.com", None, PeerId(0), 1),
        Err(RouteTableError::PartialWildcard { .. })
    ));
    let dup = RouteTable::new([
        route("abc.com", None, PeerId(0), 1),
        route("ABC.com", None, PeerId(0), 2),
    ]);
    assert!(matches!(dup, Err(RouteTableError::Duplicate { .. })));
}

// ---------------------------------------------------------------- strategies --------

fn wildcard(ids: &[PeerId], weight: u32) -> Vec<Candidate> {
    ids.iter().map(|&peer| Candidate { peer, weight }).collect()
}

/// `n` picks of a fresh `strategy` selector seeded with `seed`, among all of `ids` at
/// weight 1.
fn fresh_picks(
    strategy: Strategy,
    seed: u64,
    peers: &PeerTable,
    ids: &[PeerId],
    n: usize,
) -> Vec<String> {
    let mut sel = Selector::new(strategy, seed);
    picks(&mut sel, &wildcard(ids, 1), peers, n, T0)
}

#[test]
fn strategy_names_parse_and_print() {
    for s in Strategy::ALL {
        assert_eq!(s.name().parse::<Strategy>(), Ok(s));
    }
    assert!("random".parse::<Strategy>().is_err());
    assert_eq!(Strategy::default(), Strategy::RoundRobin);
}

#[test]
fn priority_sends_everything_to_the_first_good_peer_in_config_order() {
    let (mut peers, ids) = good_peers(&["first", "second", "third"]);
    let cands = wildcard(&ids, 1);
    let mut sel = Selector::new(Strategy::Priority, 1);
    assert_eq!(picks(&mut sel, &cands, &peers, 20, T0), ["first"; 20]);
    peers.set_good(ids[0], false);
    assert_eq!(picks(&mut sel, &cands, &peers, 20, T0), ["second"; 20]);
    // Weight beats config order.
    let mut tiered = wildcard(&ids, 1);
    tiered[2].weight = 2;
    assert_eq!(picks(&mut sel, &tiered, &peers, 5, T0), ["third"; 5]);
}

#[test]
fn round_robin_stays_fair_when_a_peer_in_the_middle_is_down() {
    let (mut peers, ids) = good_peers(&["a", "b", "c", "d"]);
    peers.set_good(ids[1], false);
    let cands = wildcard(&ids, 1);
    let mut sel = Selector::new(Strategy::RoundRobin, 1);
    let p = picks(&mut sel, &cands, &peers, 300, T0);
    assert_eq!(
        (
            count(&p, "a"),
            count(&p, "b"),
            count(&p, "c"),
            count(&p, "d")
        ),
        (100, 0, 100, 100)
    );
    // Excluding a peer (retry elsewhere) works like it being down.
    let excl = sel.select_excluding(&cands, &peers, T0, &[ids[0], ids[2]]);
    assert_eq!(excl, Some(ids[3]));
}

#[test]
fn least_loaded_prefers_the_highest_load_value_because_higher_means_less_loaded() {
    // RFC 8583 §7.3: 65535 = no load, 0 = fully loaded.
    let (mut peers, ids) = reporting(&["busy", "idle", "mid"], &[1_000, 60_000, 30_000]);
    let cands = wildcard(&ids, 1);
    let mut sel = Selector::new(Strategy::LeastLoaded, 1);
    assert_eq!(picks(&mut sel, &cands, &peers, 10, T0), ["idle"; 10]);

    // The least loaded peer is not good: the next best takes over.
    peers.set_good(ids[1], false);
    assert_eq!(picks(&mut sel, &cands, &peers, 10, T0), ["mid"; 10]);
}

#[test]
fn least_loaded_ties_and_missing_reports_rotate_round_robin() {
    let (mut peers, ids) = good_peers(&["a", "b", "c"]);
    let cands = wildcard(&ids, 1);
    let mut sel = Selector::new(Strategy::LeastLoaded, 1);
    // No peer reports load: plain round-robin.
    let p = picks(&mut sel, &cands, &peers, 30, T0);
    assert_eq!(
        (count(&p, "a"), count(&p, "b"), count(&p, "c")),
        (10, 10, 10)
    );
    // a and b tie at the best value: they alternate, c gets nothing.
    peers.set_load(ids[0], load(50_000, T0));
    peers.set_load(ids[1], load(50_000, T0));
    peers.set_load(ids[2], load(10_000, T0));
    let p = picks(&mut sel, &cands, &peers, 30, T0);
    assert_eq!(
        (count(&p, "a"), count(&p, "b"), count(&p, "c")),
        (15, 15, 0)
    );
}

#[test]
fn least_loaded_ranks_a_peer_without_fresh_load_at_the_tier_mean() {
    let (mut peers, ids) = reporting(
        &["reports-low", "reports-high", "silent"],
        &[10_000, 50_000],
    );
    let cands = wildcard(&ids, 1);
    let mut sel =
        Selector::new(Strategy::LeastLoaded, 1).with_max_load_age(Duration::from_secs(30));
    // silent ranks at the mean of its good rivals' reports, 30000: below reports-high.
    assert_eq!(picks(&mut sel, &cands, &peers, 5, T0), ["reports-high"; 5]);
    // reports-high down: silent now ranks at reports-low's 10000, so they share
    // instead of silent being starved or flooded.
    peers.set_good(ids[1], false);
    let p = picks(&mut sel, &cands, &peers, 10, T0);
    assert_eq!((count(&p, "reports-low"), count(&p, "silent")), (5, 5));

    // reports-high's report goes stale: it counts as missing, so at t=60 s the only
    // fresh report is reports-low's (refreshed), and every peer ranks at its value.
    peers.set_good(ids[1], true);
    peers.set_load(ids[0], load(10_000, Duration::from_secs(59)));
    let p = picks(&mut sel, &cands, &peers, 30, Duration::from_secs(60));
    assert_eq!(
        (
            count(&p, "reports-low"),
            count(&p, "reports-high"),
            count(&p, "silent")
        ),
        (10, 10, 10),
        "stale high report no longer attracts all traffic"
    );
}

#[test]
fn weighted_load_distribution_is_proportional_to_load_value() {
    let (peers, ids) = reporting(&["w10k", "w20k", "w30k"], &[10_000, 20_000, 30_000]);
    let n = 10_000;
    let p = fresh_picks(Strategy::WeightedLoad, 42, &peers, &ids, n);
    for (name, expected) in [
        ("w10k", 1.0 / 6.0),
        ("w20k", 2.0 / 6.0),
        ("w30k", 3.0 / 6.0),
    ] {
        let share = count(&p, name) as f64 / n as f64;
        // Binomial sd at n = 10000 is under 0.005; 0.02 is four sd.
        assert!(
            (share - expected).abs() < 0.02,
            "{name}: share {share:.4}, expected {expected:.4}"
        );
    }
}

#[test]
fn weighted_load_gives_nothing_to_a_fully_loaded_peer_unless_all_are() {
    let (mut peers, ids) = reporting(&["full", "free"], &[0, 100]);
    let cands = wildcard(&ids, 1);
    let mut sel = Selector::new(Strategy::WeightedLoad, 9);
    assert_eq!(picks(&mut sel, &cands, &peers, 1000, T0), ["free"; 1000]);
    peers.set_load(ids[1], load(0, T0));
    let p = picks(&mut sel, &cands, &peers, 1000, T0);
    assert!(
        count(&p, "full") > 400 && count(&p, "free") > 400,
        "all full: spread evenly, {p:?}"
    );
}

#[test]
fn p2c_never_picks_the_most_loaded_of_three_and_favours_the_least_loaded() {
    let (peers, ids) = reporting(&["light", "medium", "heavy"], &[60_000, 30_000, 1_000]);
    let n = 3000;
    let p = fresh_picks(Strategy::P2c, 7, &peers, &ids, n);
    assert_eq!(count(&p, "heavy"), 0);
    // light wins every pair it is drawn in: 2 of the 3 possible pairs.
    let light = count(&p, "light") as f64 / n as f64;
    assert!((light - 2.0 / 3.0).abs() < 0.05, "light share {light:.3}");
}

#[test]
fn p2c_without_load_reports_avoids_the_peer_with_most_pending_requests() {
    let (mut peers, ids) = good_peers(&["a", "b", "stuck"]);
    peers.set_pending(ids[0], 3);
    peers.set_pending(ids[1], 5);
    peers.set_pending(ids[2], 900);
    let p = fresh_picks(Strategy::P2c, 11, &peers, &ids, 1000);
    assert_eq!(count(&p, "stuck"), 0);
    assert!(count(&p, "b") > 0, "b still wins its pair with stuck");
}

#[test]
fn load_strategies_respect_weight_tiers_and_good_state() {
    let (mut peers, ids) = reporting(&["primary-busy", "backup-idle"], &[500, 65_000]);
    let cands = [
        Candidate {
            peer: ids[0],
            weight: 10,
        },
        Candidate {
            peer: ids[1],
            weight: 1,
        },
    ];
    for strategy in Strategy::ALL {
        let mut sel = Selector::new(strategy, 5);
        let p = picks(&mut sel, &cands, &peers, 20, T0);
        assert_eq!(p, ["primary-busy"; 20], "{strategy}: weight before load");
    }
    peers.set_good(ids[0], false);
    for strategy in Strategy::ALL {
        let mut sel = Selector::new(strategy, 5);
        let p = picks(&mut sel, &cands, &peers, 20, T0);
        assert_eq!(
            p, ["backup-idle"; 20],
            "{strategy}: backup when primary not good"
        );
    }
}

#[test]
fn random_strategies_are_reproducible_from_the_seed() {
    let (mut peers, ids) = good_peers(&["a", "b", "c", "d"]);
    for (i, id) in ids.iter().enumerate() {
        peers.set_load(*id, load(10_000 * (i as u16 + 1), T0));
    }
    let cands = wildcard(&ids, 1);
    for strategy in [Strategy::WeightedLoad, Strategy::P2c] {
        let a = picks(&mut Selector::new(strategy, 123), &cands, &peers, 200, T0);
        let b = picks(&mut Selector::new(strategy, 123), &cands, &peers, 200, T0);
        let c = picks(&mut Selector::new(strategy, 124), &cands, &peers, 200, T0);
        assert_eq!(a, b, "{strategy}: same seed, same picks");
        assert_ne!(a, c, "{strategy}: another seed, other picks");
    }
}
