use super::*;
use crate::server::commands::{conn_id, KeptSub, SessionState};

fn claim(conn: u64, id: &str, clean: bool, expiry_s: u32) -> SessionClaim {
    SessionClaim::v5(conn, id, clean, expiry_s)
}

/// Client ids without owners (no `--auth`), as the cluster carries them.
fn ids(names: &[&str]) -> Vec<crate::cluster::OwnedId> {
    names.iter().map(|n| (n.to_string(), None)).collect()
}

fn msg(topic: &str, data: &str, qos: u8) -> SessionMessage {
    SessionMessage { topic: topic.into(), data: data.as_bytes().to_vec(), qos, retain: false, id: 0, released: false, mqtt: None, publish_us: 0 }
}

/// The end of connection `conn` registered for `id` (with the key and
/// length its answer gave), its session outliving it `expiry_s`.
fn end(s: &Sessions, conn: u64, id: &str, expiry_s: u32, state: Option<SessionState>) -> SessionEnd {
    SessionEnd { conn, key: s.key(id), expiry_s, state, ..SessionEnd::default() }
}

fn answer(a: &[Action]) -> &SessionAnswer {
    match a {
        [Action::Answer(_, a)] => a,
        other => panic!("one answer, not {other:?}"),
    }
}

/// A claim of `id` by `owner` (`--auth`), wanting its session.
fn claim_by(conn: u64, id: &str, owner: &str) -> SessionClaim {
    SessionClaim { owner: Some(owner.into()), identity: owner.into(), ..claim(conn, id, false, NEVER) }
}

/// Keep a session for `id` of `owner` with one subscription `filter`.
fn kept_by(s: &mut Sessions, conn: u64, id: &str, owner: &str, filter: &str, now: Instant) {
    assert_eq!(answer(&s.claim(0, claim_by(conn, id, owner), now)).code, 0);
    let state = SessionState { subs: vec![KeptSub::new(filter, 1)], messages: Vec::new(), rel: vec![] };
    let e = SessionEnd { owner: Some(owner.into()), identity: owner.into(), ..end(s, conn, id, NEVER, Some(state)) };
    assert!(s.ended(e, now).is_empty());
}

/// Keep a session for `id` with one subscription `filter` at QoS 1.
fn kept(s: &mut Sessions, conn: u64, id: &str, filter: &str, now: Instant) {
    assert_eq!(answer(&s.claim(0, claim(conn, id, false, NEVER), now)).code, 0);
    let state = SessionState { subs: vec![KeptSub::new(filter, 1)], messages: Vec::new(), rel: vec![] };
    assert!(s.ended(end(s, conn, id, NEVER, Some(state)), now).is_empty());
}

/// A second CONNECT of an id takes it over: the first connection is told
/// to close, the new one answered only once the first ended, with the
/// session it left (present 1, its subscriptions and unacknowledged
/// messages first, then what was queued meanwhile, in order).
#[test]
fn a_takeover_waits_for_the_old_connection_and_resumes_its_session() {
    let now = Instant::now();
    let mut s = Sessions::new(SessionsConfig::default());
    let (a, b) = (conn_id(0, 1, 1), conn_id(1, 7, 3));
    let first = s.claim(0, claim(a, "dev", false, NEVER), now);
    assert_eq!(
        *answer(&first),
        SessionAnswer {
            conn: a,
            code: 0,
            present: false,
            subs: vec![],
            messages: vec![],
            key: s.key("dev"),
            expiry_s: NEVER,
            rel: vec![],
            owner: None,
            identity: String::new(),
            hook_refused: false,
            assigned: None,
            grant: None
        }
    );
    assert_eq!(s.claim(1, claim(b, "dev", false, NEVER), now), vec![Action::Takeover(0, a)]);
    assert_eq!((s.counters.taken_over, s.counters.online), (1, 1));
    let sent = SessionMessage { id: 5, ..msg("t/1", "AA==", 1) };
    let state = SessionState { subs: vec![KeptSub::new("t/+", 1)], messages: vec![sent.clone()], rel: vec![] };
    let resumed = s.ended(end(&s, a, "dev", NEVER, Some(state)), now);
    let got = answer(&resumed);
    assert!(got.present && got.subs == [KeptSub::new("t/+", 1)] && got.messages == [sent], "{got:?}");
    assert_eq!((s.counters.resumed, s.counters.online, s.counters.kept, s.counters.bytes), (1, 1, 0, 0));
    // The old connection's end is not the new one's: the id stays taken.
    assert!(s.ended(end(&s, a, "dev", NEVER, None), now).is_empty());
    assert_eq!(s.counters.online, 1);
    // Offline: the messages its filters match queue in order, QoS 0 and
    // non-matching ones not; the QoS is the lower of publish and grant.
    s.ended(end(&s, b, "dev", NEVER, Some(SessionState { subs: vec![KeptSub::new("t/+", 1)], messages: vec![], rel: vec![] })), now);
    s.offline("t/1", b"1", 2, false, None, 0);
    s.offline("x/1", b"x", 1, false, None, 0);
    s.offline("t/2", b"0", 0, false, None, 0);
    s.offline("t/3", b"3", 1, true, None, 0);
    let back = s.claim(0, claim(conn_id(0, 2, 2), "dev", false, NEVER), now);
    let got = answer(&back);
    assert_eq!(got.messages, vec![msg("t/1", "1", 1), SessionMessage { retain: true, ..msg("t/3", "3", 1) }]);
}

/// A clean CONNECT discards the kept session; a session that ends with
/// its connection (expiry 0) is not kept.
#[test]
fn clean_start_discards_and_expiry_zero_keeps_nothing() {
    let now = Instant::now();
    let mut s = Sessions::new(SessionsConfig::default());
    kept(&mut s, 1, "dev", "a", now);
    let got = s.claim(0, claim(2, "dev", true, 0), now);
    assert!(!answer(&got).present);
    assert_eq!(s.counters.discarded, 1);
    s.ended(end(&s, 2, "dev", 0, Some(SessionState::default())), now);
    assert_eq!((s.counters.kept, s.counters.online), (0, 0));
}

/// A v5 session goes at its expiry: by the timer, or found expired by
/// the CONNECT that would have resumed it.
#[test]
fn sessions_expire_by_the_timer_and_at_a_late_connect() {
    let now = Instant::now();
    let mut s = Sessions::new(SessionsConfig::default());
    for (conn, id) in [(1, "a"), (2, "b")] {
        s.claim(0, claim(conn, id, false, 10), now);
        s.ended(end(&s, conn, id, 10, Some(SessionState::default())), now);
    }
    assert!(s.expire(now + Duration::from_secs(9), false).is_empty());
    assert_eq!(s.counters.kept, 2);
    let late = now + Duration::from_secs(10);
    assert!(!answer(&s.claim(0, claim(3, "a", false, 10), late)).present, "expired at the CONNECT");
    assert!(s.expire(late, false).is_empty());
    assert_eq!((s.counters.kept, s.counters.bytes, s.counters.expired["expiry"]), (0, 0, 2));
}

/// The registry is bounded in ids: past it a CONNECT is refused with its
/// version's code and counted.
#[test]
fn the_registry_refuses_past_its_bounds() {
    let now = Instant::now();
    let mut s = Sessions::new(SessionsConfig { max_ids: 2, ..Default::default() });
    assert_eq!(answer(&s.claim(0, claim(1, "ab", true, 0), now)).code, 0);
    assert_eq!(answer(&s.claim(0, claim(3, "cde", true, 0), now)).code, 0);
    assert_eq!(answer(&s.claim(0, SessionClaim { v5: false, ..claim(2, "cdef", true, 0) }, now)).code, 3);
    assert_eq!(answer(&s.claim(0, claim(4, "x", true, 0), now)).code, 0x97);
    assert_eq!(s.counters.refused["ids"], 2);
    s.ended(end(&s, 1, "ab", 0, None), now);
    assert_eq!(answer(&s.claim(0, claim(5, "x", true, 0), now)).code, 0, "an id given back makes room");
}

/// Kept sessions are bounded per identity: one peer inventing thousands
/// of ids keeps its quota (a tenth of the node's bound), its own oldest
/// going first, and costs nobody else anything.
#[test]
fn one_identity_inventing_ids_keeps_its_quota_and_its_oldest_go() {
    let now = Instant::now();
    let mut s = Sessions::new(SessionsConfig { max_kept: 100, ..Default::default() });
    kept_by(&mut s, 1, "alice-dev", "alice", "a/#", now);
    for i in 0..5000u64 {
        kept(&mut s, i + 10, &format!("hostile-{i}"), "a/#", now);
    }
    assert_eq!((s.counters.kept, s.counters.stored, s.counters.expired["identity"]), (11, 5001, 4990));
    assert!(s.counters.bytes < 11 * 512, "{} bytes", s.counters.bytes);
    assert!(!answer(&s.claim(0, claim(9000, "hostile-4899", false, NEVER), now)).present, "an old one went");
    assert!(answer(&s.claim(0, claim(9001, "hostile-4999", false, NEVER), now)).present, "the newest stayed");
    assert!(answer(&s.claim(0, claim_by(9002, "alice-dev", "alice"), now)).present, "alice's session is untouched");
}

/// Issue 62, finding 5: a node whose bound is reached keeps no more
/// sessions (counted `full`) and pushes nobody's out: alice's session
/// and its queued message stay through sixty sessions of other users.
#[test]
fn a_full_node_refuses_the_newcomer_instead_of_evicting_another() {
    let now = Instant::now();
    let mut s = Sessions::new(SessionsConfig { max_kept: 50, ..Default::default() });
    kept_by(&mut s, 1, "alice-dev", "alice", "alice/#", now);
    s.offline("alice/cmd", b"dW5sb2Nr", 1, false, None, 0);
    for i in 0..60u64 {
        kept_by(&mut s, 100 + i, &format!("m-{i}"), &format!("user-{}", i / 5), "x", now);
    }
    assert_eq!(s.counters.kept, 50);
    assert_eq!((s.counters.expired["full"], s.counters.expired.get("identity")), (11, None));
    let back = s.claim(0, claim_by(9, "alice-dev", "alice"), now);
    let got = answer(&back);
    assert!(got.present && got.messages == [msg("alice/cmd", "dW5sb2Nr", 1)], "{got:?}");
}

/// Issue 62, finding 1: a client id and what is kept under it belong to
/// the identity that made it. Another's CONNECT is refused 0x87 (3.1.1:
/// 5) whether the owner is connected (no takeover) or gone (its session,
/// messages and will untouched); the owner's own CONNECT resumes.
#[test]
fn another_identity_cannot_take_a_client_id_or_its_session() {
    let now = Instant::now();
    let mut s = Sessions::new(SessionsConfig::default());
    let alice = conn_id(0, 1, 1);
    assert_eq!(answer(&s.claim(0, claim_by(alice, "door-4711", "alice"), now)).code, 0);
    assert_eq!(answer(&s.claim(1, claim_by(conn_id(1, 2, 1), "door-4711", "mallory"), now)).code, NOT_OWNER.0, "no takeover of the live one");
    let v3 = SessionClaim { v5: false, ..claim_by(conn_id(1, 3, 1), "door-4711", "mallory") };
    assert_eq!(answer(&s.claim(1, v3, now)).code, NOT_OWNER.1);
    assert_eq!((s.counters.taken_over, s.counters.refused["owner"]), (0, 2));
    // Gone, with a command queued and a delayed will waiting.
    let will = crate::server::commands::DelayedWill {
        will: ClientPublish { topic: "alarm/door".into(), data: Vec::new(), qos: 1, retain: false, mqtt: None, identity: None },
        delay_s: 60,
    };
    let state = SessionState { subs: vec![KeptSub::new("alice/#", 1)], messages: vec![], rel: vec![7] };
    let e = SessionEnd { will: Some(will), owner: Some("alice".into()), identity: "alice".into(), ..end(&s, alice, "door-4711", NEVER, Some(state)) };
    assert!(s.ended(e, now).is_empty());
    s.offline("alice/cmd", b"dW5sb2Nr", 1, false, None, 0);
    assert_eq!(answer(&s.claim(1, claim_by(conn_id(1, 4, 1), "door-4711", "mallory"), now)).code, NOT_OWNER.0);
    let anonymous = claim(conn_id(1, 5, 1), "door-4711", false, NEVER);
    assert_eq!(answer(&s.claim(1, anonymous, now)).code, NOT_OWNER.0, "no owner is another owner");
    assert_eq!((s.counters.kept, s.counters.wills_waiting, s.counters.wills_cancelled), (1, 1, 0), "session and will untouched");
    let back = s.claim(0, claim_by(conn_id(0, 6, 1), "door-4711", "alice"), now);
    let got = answer(&back);
    assert!(got.present && got.messages == [msg("alice/cmd", "dW5sb2Nr", 1)] && got.rel == [7], "{got:?}");
    assert_eq!((s.counters.wills_cancelled, s.counters.wills_waiting), (1, 0), "the owner's return cancels the will");
}

/// A session lent across the cluster goes only to its owner: a question
/// from another identity is answered `owned` and nothing is lent, and an
/// announcement of the id by another identity takes nothing over.
#[test]
fn another_identity_on_another_node_gets_nothing() {
    let (now, wall) = (Instant::now(), 1_000_000);
    let mut a = Sessions::new(SessionsConfig::default());
    kept_by(&mut a, 1, "door-4711", "alice", "alice/#", now);
    a.follow();
    let mallory = vec![("door-4711".to_string(), Some("mallory".to_string()))];
    let (answer1, actions) = a.hand_over("B", &mallory, u64::MAX, true, now, wall);
    assert_eq!((answer1.owned, answer1.sessions.len(), actions), (vec!["door-4711".to_string()], 0, vec![]));
    assert!(a.connected_elsewhere(&mallory, u64::MAX, true).is_empty());
    assert_eq!((a.counters.kept, a.counters.refused["owner_elsewhere"]), (1, 1));
    let alice = vec![("door-4711".to_string(), Some("alice".to_string()))];
    assert_eq!(a.hand_over("B", &alice, u64::MAX, true, now, wall).0.sessions.len(), 1, "its owner gets it");
    // The asker refuses its own claim when another node says owned.
    let mut b = Sessions::new(SessionsConfig::default());
    b.follow();
    assert!(b.claim(0, claim_by(conn_id(0, 9, 1), "door-4711", "mallory"), now).is_empty(), "it asks first");
    let (out, admitted) = b.handed(&["door-4711".into()], (&[], &["door-4711".into()], 0), Vec::new(), now, wall);
    assert_eq!((answer(&out).code, admitted), (NOT_OWNER.0, vec![]));
}

/// The offline queue keeps the oldest messages and drops the newest past
/// its count and bytes, counting each.
#[test]
fn the_offline_queue_drops_the_newest_past_its_bounds() {
    let now = Instant::now();
    let mut s = Sessions::new(SessionsConfig { queue: 3, queue_bytes: 3 * (RECORD + 3) + RECORD + 10, ..Default::default() });
    kept(&mut s, 1, "dev", "q", now);
    for i in 0..5 {
        s.offline("q", i.to_string().repeat(2).as_bytes(), 1, false, None, 0);
    }
    assert_eq!(s.counters.queue_dropped["queue"], 2);
    let got = answer(&s.claim(0, claim(2, "dev", false, NEVER), now)).messages.iter().map(|m| m.data.clone()).collect::<Vec<_>>();
    assert_eq!(got, [b"00".to_vec(), b"11".to_vec(), b"22".to_vec()]);
    s.ended(end(&s, 2, "dev", NEVER, Some(SessionState { subs: vec![KeptSub::new("q", 2)], messages: vec![], rel: vec![] })), now);
    let big = "0123456789".repeat(10);
    s.offline("q", big.as_bytes(), 1, false, None, 0);
    s.offline("q", big.as_bytes(), 1, false, None, 0);
    assert_eq!(s.counters.queue_dropped["queue_bytes"], 1);
    assert_eq!(s.counters.queued, 4);
}

/// A worker that died: its connections' ids are free, a takeover that
/// waited on one of them answered.
#[test]
fn a_dead_workers_ids_are_freed() {
    let now = Instant::now();
    let mut s = Sessions::new(SessionsConfig::default());
    let (a, b) = (conn_id(3, 1, 1), conn_id(4, 1, 1));
    s.claim(3, claim(a, "dev", false, NEVER), now);
    s.claim(4, claim(b, "dev", false, NEVER), now);
    let got = s.worker_gone(3, now);
    assert!(matches!(&got[..], [Action::Answer(4, x)] if x.conn == b && x.code == 0 && !x.present));
    assert_eq!(s.counters.online, 1);
}

/// An end frees an id only with the key and connection it was answered
/// with: a stale or made-up key, or another connection's end, frees
/// nothing. A registry entry is 24 bytes whatever the id's length.
#[test]
fn an_end_needs_its_key_and_an_entry_is_24_bytes() {
    let now = Instant::now();
    let mut s = Sessions::new(SessionsConfig::default());
    let long = "d".repeat(4000);
    let key = answer(&s.claim(0, claim(1, &long, true, 0), now)).key;
    assert_eq!(key, s.key(&long));
    assert_ne!(key, s.key("d"), "different ids, different keys");
    assert!(s.ended(end(&s, 1, "d", 0, None), now).is_empty());
    assert!(s.ended(SessionEnd { conn: 2, key, ..Default::default() }, now).is_empty());
    assert_eq!(s.counters.online, 1);
    s.ended(end(&s, 1, &long, 0, None), now);
    assert_eq!(s.counters.online, 0);
    assert_eq!(std::mem::size_of::<(IdKey, Online)>(), 24);
    // Another registry (another process) keys the same id differently.
    assert_ne!(Sessions::new(SessionsConfig::default()).key(&long), key);
}

/// An offline publish is queued with its v5 properties (not its
/// publisher) and publish time, and its properties count in the bytes.
#[test]
fn a_queued_message_keeps_its_properties_and_publish_time() {
    use crate::proto::mqtt::forward::Forwarded;
    let now = Instant::now();
    let mut s = Sessions::new(SessionsConfig::default());
    kept(&mut s, conn_id(0, 1, 1), "dev", "t/#", now);
    let base = s.counters.bytes;
    let f = Forwarded { origin: Some(9), message_expiry: Some(5), content_type: Some("text/plain".into()), ..Forwarded::default() };
    s.offline("t/1", b"AA==", 1, false, Some(&f), 42);
    assert_eq!(s.counters.bytes - base, (RECORD + 3 + 4 + "text/plain".len()) as u64);
    let got = s.claim(0, claim(conn_id(0, 2, 1), "dev", false, NEVER), now);
    let m = &answer(&got).messages[0];
    assert_eq!((m.publish_us, m.mqtt.as_deref()), (42, Some(&Forwarded { origin: None, ..f })));
}

/// An id that connected to another cluster node: its connection here is
/// taken over and ends without keeping its session or publishing its
/// will; a kept session of another id is dropped; and of two CONNECTs
/// at once on two nodes the later stays (the same microsecond: the
/// greater node id), so they never close each other.
#[test]
fn an_id_that_connected_to_another_node_leaves_this_one() {
    let now = Instant::now();
    let mut s = Sessions::new(SessionsConfig::default());
    s.follow();
    let (a, b) = (conn_id(0, 1, 0), conn_id(1, 2, 0));
    // In a cluster a claim that wants its session asks the other nodes first.
    assert!(s.claim(0, claim(a, "dev-a", false, NEVER), now).is_empty());
    assert_eq!(answer(&s.handed(&["dev-a".into()], (&[], &[], 0), Vec::new(), now, 0).0).code, 0);
    assert!(s.claim(0, claim(b, "dev-k", false, NEVER), now).is_empty());
    assert_eq!(answer(&s.handed(&["dev-k".into()], (&[], &[], 0), Vec::new(), now, 0).0).code, 0);
    let state = SessionState { subs: vec![KeptSub::new("t/#", 1)], messages: Vec::new(), rel: vec![] };
    assert!(s.ended(end(&s, b, "dev-k", NEVER, Some(state)), now).is_empty());
    let admitted = s.recent.since(&s.key("dev-a")).expect("admission noted in a cluster");

    // Another node's CONNECT before ours: ours stays (theirs is closed there).
    assert!(s.connected_elsewhere(&ids(&["dev-a"]), admitted - 1, true).is_empty());
    assert!(s.connected_elsewhere(&ids(&["dev-a"]), admitted, false).is_empty(), "a tie our node id wins");
    // Later: ours is taken over, once.
    assert_eq!(s.connected_elsewhere(&ids(&["dev-a"]), admitted, true), vec![Action::Takeover(0, a)]);
    assert!(s.connected_elsewhere(&ids(&["dev-a", "dev-k", "nobody"]), admitted + 5, true).is_empty());
    assert_eq!((s.counters.moved, s.counters.kept), (2, 0), "dev-a's connection and dev-k's kept session");
    let will = ClientPublish { topic: "w".into(), data: b"d".to_vec(), qos: 1, retain: false, mqtt: None, identity: None };
    let state = SessionState { subs: vec![KeptSub::new("x", 1)], messages: Vec::new(), rel: vec![] };
    let e = SessionEnd { will: Some(crate::server::commands::DelayedWill { will, delay_s: 5 }), ..end(&s, a, "dev-a", NEVER, Some(state)) };
    assert!(s.ended(e, now).is_empty(), "no will published");
    assert_eq!((s.counters.kept, s.counters.online, s.counters.wills_cancelled), (0, 0, 1), "its session not kept, its will dropped");

    // Outside a cluster nothing is remembered.
    let mut single = Sessions::new(SessionsConfig::default());
    assert_eq!(answer(&single.claim(0, claim(a, "dev-a", true, 0), now)).code, 0);
    assert!(single.recent.since(&single.key("dev-a")).is_none());
}

/// The admissions remembered for the tie-break are forgotten after
/// RECENT_US, and never more than MAX_RECENT are kept.
#[test]
fn recent_admissions_are_bounded_in_time_and_count() {
    let mut r = elsewhere::Recent::default();
    let k = |i: u32| [i, 0, 0];
    r.note(k(1), 1_000);
    assert_eq!(r.since(&k(1)), Some(1_000));
    r.note(k(2), 1_000 + elsewhere::RECENT_US + 1);
    assert_eq!((r.since(&k(1)), r.since(&k(2))), (None, Some(1_000 + elsewhere::RECENT_US + 1)));
    r.note(k(2), 2_000 + elsewhere::RECENT_US);
    r.note(k(3), 2 * elsewhere::RECENT_US + 1_002);
    assert_eq!(r.since(&k(2)), Some(2_000 + elsewhere::RECENT_US), "its newer admission kept");
    for i in 0..elsewhere::MAX_RECENT as u32 + 5 {
        r.note(k(100 + i), 3 * elsewhere::RECENT_US);
    }
    assert!(r.order.len() <= elsewhere::MAX_RECENT && r.at.len() <= elsewhere::MAX_RECENT);
    assert_eq!(r.since(&k(100)), None, "the oldest forgotten first");
}

/// Sessions move between cluster nodes: a claim that wants its session
/// and finds none here waits while the other nodes are asked (a second
/// claim of the id displaces it); a node asked gives up what it kept
/// (as its file would hold it), and takes over a connection of the id,
/// keeping its session (its will dropped) to hand over when asked again;
/// the asker keeps what came and answers the claim with it. A claim
/// never waits past MAX_WAIT, nor for a worker that died.
#[test]
fn sessions_move_between_cluster_nodes() {
    let now = Instant::now();
    let wall = 1_000_000_000;
    let (mut a, mut b) = (Sessions::new(SessionsConfig::default()), Sessions::new(SessionsConfig::default()));
    a.follow();
    b.follow();
    // On A: dev left with two messages queued; live is connected.
    let (dev, live) = (conn_id(0, 1, 0), conn_id(0, 2, 0));
    for (conn, id) in [(dev, "dev"), (live, "live")] {
        assert!(a.claim(0, claim(conn, id, false, NEVER), now).is_empty());
        assert_eq!(answer(&a.handed(&[id.into()], (&[], &[], 0), Vec::new(), now, wall).0).code, 0);
    }
    assert_eq!(a.take_asks(), ids(&["dev", "live"]));
    a.ended(end(&a, dev, "dev", NEVER, Some(SessionState { subs: vec![KeptSub::new("t/#", 1)], messages: Vec::new(), rel: vec![] })), now);
    a.offline("t/1", b"AQ==", 1, false, None, 0);
    a.offline("t/2", b"Ag==", 1, false, None, 0);

    // B: dev comes back; a second CONNECT of it displaces the first.
    let (first, second) = (conn_id(1, 1, 0), conn_id(1, 2, 0));
    assert!(b.claim(1, claim(first, "dev", false, NEVER), now).is_empty(), "waits for the other nodes");
    assert_eq!(b.take_asks(), ids(&["dev"]));
    assert_eq!(answer(&b.claim(1, claim(second, "dev", false, NEVER), now)).code, DISPLACED.0);
    assert!(b.take_asks().is_empty(), "the question asked serves it");

    // A lends dev's session to B (a copy: it stays in A's store, queuing,
    // until B confirms); nobody's is nowhere.
    let after = crate::proto::push::wall_us() + 1_000_000;
    let bytes = a.counters.bytes;
    let (lent, actions) = a.hand_over("B", &ids(&["dev", "nobody"]), after, true, now, wall);
    assert_eq!((lent.sessions.len(), lent.busy.len(), lent.newer.len(), actions.len()), (1, 0, 0, 0));
    assert_eq!((a.counters.kept, a.counters.lent, a.counters.handed_over, a.counters.bytes), (1, 1, 0, bytes), "lent, not handed over yet");
    let (lend, json) = lent.sessions[0].clone();
    let saved: saved::SavedSession = serde_json::from_str(&json).unwrap();
    assert_eq!(saved.check(), Ok(()));
    assert!(!a.taken("C", lend) && !a.taken("B", lend + 1), "only the node it was lent to confirms it");
    assert!(a.taken("B", lend));
    assert_eq!((a.counters.kept, a.counters.lent, a.counters.handed_over, a.counters.bytes), (0, 0, 1, 0));
    assert!(!a.taken("B", lend), "once");
    let (actions, admitted) = b.handed(&["dev".into()], (&[], &[], 0), vec![saved], now, wall);
    let got = answer(&actions);
    assert!(got.conn == second && got.present && got.subs == [KeptSub::new("t/#", 1)], "{got:?}");
    assert_eq!(got.messages.iter().map(|m| &m.data[..]).collect::<Vec<_>>(), [&b"AQ=="[..], &b"Ag=="[..]], "in order");
    assert_eq!((admitted, b.counters.moved_in, b.counters.resumed), (vec![(("dev".to_string(), None), 0)], 1, 1));

    // live is connected on A by an older CONNECT: taken over once, busy
    // until its end kept its session (its will dropped), then lent.
    let (answer1, actions) = a.hand_over("B", &ids(&["live"]), after, true, now, wall);
    assert_eq!((answer1.busy, actions), (vec!["live".to_string()], vec![Action::Takeover(0, live)]));
    assert_eq!(a.hand_over("B", &ids(&["live"]), after, true, now, wall).1, vec![], "taken over once");
    let will = ClientPublish { topic: "w".into(), data: b"d".to_vec(), qos: 1, retain: false, mqtt: None, identity: None };
    let state = SessionState { subs: vec![KeptSub::new("x", 1)], messages: Vec::new(), rel: vec![] };
    let e = SessionEnd { will: Some(crate::server::commands::DelayedWill { will, delay_s: 5 }), ..end(&a, live, "live", NEVER, Some(state)) };
    assert!(a.ended(e, now).is_empty(), "no will");
    assert_eq!((a.counters.kept, a.counters.wills_cancelled, a.counters.wills_waiting), (1, 1, 0));
    let (lent, _) = a.hand_over("B", &ids(&["live"]), after, true, now, wall);
    assert_eq!((lent.sessions.len(), lent.busy.len(), a.counters.kept, a.counters.lent), (1, 0, 1, 1));
    // Never confirmed (it came after B's round): A's again, and what was
    // published meanwhile still queued for it.
    a.offline("x", b"Aw==", 1, false, None, 0);
    a.unconfirmed(now + moving::LEND_FOR / 2);
    assert_eq!((a.counters.kept, a.counters.lent), (1, 1));
    a.unconfirmed(now + moving::LEND_FOR);
    assert_eq!((a.counters.kept, a.counters.lent, a.counters.returned, a.counters.handed_over), (1, 0, 1, 1));
    let again = a.claim(0, claim(conn_id(0, 3, 0), "live", false, NEVER), now);
    assert!(answer(&again).present && answer(&again).messages.len() == 1, "its client resumes it on A: {again:?}");

    // Lent, then its client comes back to A before B confirms: resumed
    // here, and B's late confirmation takes nothing.
    a.ended(end(&a, conn_id(0, 3, 0), "live", NEVER, Some(SessionState { subs: vec![KeptSub::new("x", 1)], messages: Vec::new(), rel: vec![] })), now);
    let (lent, _) = a.hand_over("B", &ids(&["live"]), after, true, now, wall);
    let back = a.claim(0, claim(conn_id(0, 4, 0), "live", false, NEVER), now);
    assert!(answer(&back).present, "{back:?}");
    assert!(!a.taken("B", lent.sessions[0].0));
    assert_eq!((a.counters.lent, a.counters.handed_over), (0, 1));

    // A claim nobody answers is admitted after MAX_WAIT with what B has.
    let late = conn_id(1, 3, 0);
    assert!(b.claim(1, claim(late, "late", false, NEVER), now).is_empty());
    assert_eq!(b.overdue(now + moving::MAX_WAIT / 2), (vec![], vec![]));
    let (actions, admitted) = b.overdue(now + moving::MAX_WAIT);
    assert!(!answer(&actions).present && answer(&actions).code == 0);
    assert_eq!(admitted, [(("late".to_string(), None), 0)]);
    // A clean CONNECT does not ask, and displaces one that does.
    assert!(b.claim(1, claim(conn_id(1, 4, 0), "c", false, NEVER), now).is_empty());
    let out = b.claim(1, claim(conn_id(1, 5, 0), "c", true, NEVER), now);
    assert!(matches!(&out[..], [Action::Answer(_, x), Action::Answer(_, y)] if x.code == DISPLACED.0 && y.code == 0), "{out:?}");
    // A claim of a worker that died is dropped.
    assert!(b.claim(2, claim(conn_id(2, 1, 0), "gone", false, NEVER), now).is_empty());
    b.worker_gone(2, now);
    assert_eq!(b.overdue(now + moving::MAX_WAIT), (vec![], vec![]));
    // Outside a cluster nothing is asked.
    let mut single = Sessions::new(SessionsConfig::default());
    assert_eq!(answer(&single.claim(0, claim(dev, "dev", false, NEVER), now)).code, 0);
    assert!(single.take_asks().is_empty());
}

/// A resumed session whose connection closed before its answer reached
/// it comes back with the end the worker sends (`unclaimed`) and is kept
/// again, not lost.
#[test]
fn a_resumed_session_whose_connection_closed_is_kept_again() {
    let now = Instant::now();
    let mut s = Sessions::new(SessionsConfig::default());
    let c = conn_id(0, 1, 0);
    kept(&mut s, c, "dev", "t/#", now);
    let c2 = conn_id(0, 2, 0);
    let a = answer(&s.claim(0, claim(c2, "dev", false, 60), now)).clone();
    assert!(a.present && a.expiry_s == 60);
    assert_eq!(s.counters.kept, 0);
    let back = SessionEnd {
        conn: a.conn,
        key: a.key,
        expiry_s: a.expiry_s,
        state: Some(SessionState { subs: a.subs, messages: a.messages, rel: vec![] }),
        ..SessionEnd::default()
    };
    s.ended(back, now);
    assert_eq!((s.counters.kept, s.counters.online), (1, 0));
    assert!(answer(&s.claim(0, claim(conn_id(0, 3, 0), "dev", false, 60), now)).present, "resumed on the next CONNECT");
}

/// Of two CONNECTs of one id on two nodes, the newer stays wherever the
/// question finds the other: a node asked about an id it holds by a
/// newer CONNECT keeps it (and says so: the asker refuses its claim); a
/// claim waiting here is refused when another node announces the id by
/// a newer CONNECT, and waits on for an older one; a claim admitted after
/// waiting is noted at its CONNECT's time.
#[test]
fn the_newer_connect_of_an_id_stays_across_nodes() {
    let (now, wall) = (Instant::now(), 1_000_000_000);
    let mut a = Sessions::new(SessionsConfig::default());
    a.follow();
    a.clock(5_000);
    assert!(a.claim(0, claim(conn_id(0, 1, 0), "dev", true, 0), now).iter().any(|x| matches!(x, Action::Answer(_, ans) if ans.code == 0)));
    // B's CONNECT came before A's: A keeps its connection.
    let (answer1, actions) = a.hand_over("B", &ids(&["dev"]), 4_000, true, now, wall);
    assert_eq!((answer1.newer, answer1.busy, actions), (vec!["dev".to_string()], vec![], vec![]));
    // The same microsecond: the greater node id wins.
    assert_eq!(a.hand_over("A0", &ids(&["dev"]), 5_000, false, now, wall).0.newer, ["dev"]);
    let (answer2, actions) = a.hand_over("C", &ids(&["dev"]), 5_000, true, now, wall);
    assert_eq!((answer2.busy, actions.len()), (vec!["dev".to_string()], 1), "C's tie wins: taken over");

    // B: a claim waiting for the nodes.
    let mut b = Sessions::new(SessionsConfig::default());
    b.follow();
    b.clock(7_000);
    let waiting = conn_id(1, 1, 0);
    assert!(b.claim(1, claim(waiting, "w", false, NEVER), now).is_empty());
    assert!(b.connected_elsewhere(&ids(&["w"]), 6_000, true).is_empty(), "an older CONNECT elsewhere: it waits on");
    let out = b.connected_elsewhere(&ids(&["w"]), 8_000, true);
    assert!(answer(&out).conn == waiting && answer(&out).code == DISPLACED.0, "a newer one: refused: {out:?}");
    // An answer that says another node holds it by a newer CONNECT.
    b.clock(9_000);
    assert!(b.claim(1, claim(conn_id(1, 2, 0), "x", false, NEVER), now).is_empty());
    let (out, admitted) = b.handed(&["x".into()], (&["x".into()], &[], 9_000), Vec::new(), now, wall);
    assert_eq!((answer(&out).code, admitted), (DISPLACED.0, vec![]));
    // A claim that displaced the one asked for is newer than the answer's
    // `newer`: not refused by it.
    assert!(b.claim(1, claim(conn_id(1, 5, 0), "z", false, NEVER), now).is_empty());
    b.clock(10_000);
    let out = b.claim(1, claim(conn_id(1, 6, 0), "z", false, NEVER), now);
    assert_eq!(answer(&out).code, DISPLACED.0, "the first claim displaced");
    let (out, admitted) = b.handed(&["z".into()], (&["z".into()], &[], 9_000), Vec::new(), now, wall);
    assert_eq!((answer(&out).code, admitted), (0, vec![(("z".to_string(), None), 10_000)]), "the displacing claim stays: {out:?}");
    // Admitted after waiting: noted at its CONNECT's time, not now's.
    b.clock(9_000);
    assert!(b.claim(1, claim(conn_id(1, 3, 0), "y", false, NEVER), now).is_empty());
    b.clock(12_000);
    let (_, admitted) = b.handed(&["y".into()], (&[], &[], 0), Vec::new(), now, wall);
    assert_eq!(admitted, [(("y".to_string(), None), 9_000)]);
    assert_eq!(b.recent.since(&b.key("y")), Some(9_000));
}

/// A lent session is lent once: asked again by another node, the last
/// lend is the one (the first one's confirmation takes nothing), and
/// the session leaves the store when its id is announced elsewhere, as
/// any kept session does. A session that came for an id another node
/// holds by a newer CONNECT is not kept.
#[test]
fn a_session_is_lent_to_one_node_at_a_time() {
    let (now, wall) = (Instant::now(), 1_000_000_000);
    let mut a = Sessions::new(SessionsConfig::default());
    a.follow();
    for (i, id) in ["p", "q"].iter().enumerate() {
        assert!(a.claim(0, claim(conn_id(0, i + 1, 0), id, false, NEVER), now).is_empty());
        a.overdue(now + moving::MAX_WAIT);
        a.ended(end(&a, conn_id(0, i + 1, 0), id, NEVER, Some(SessionState::default())), now);
    }
    assert_eq!(a.counters.kept, 2);
    let first = a.hand_over("B", &ids(&["p"]), u64::MAX, true, now, wall).0.sessions[0].0;
    let second = a.hand_over("C", &ids(&["p"]), u64::MAX, true, now, wall).0.sessions[0].0;
    assert_eq!(a.counters.lent, 1);
    assert!(!a.taken("B", first), "the first lend ended");
    assert!(a.taken("C", second));
    a.hand_over("B", &ids(&["q"]), u64::MAX, true, now, wall);
    a.connected_elsewhere(&ids(&["q"]), u64::MAX, true);
    assert_eq!((a.counters.kept, a.counters.lent, a.counters.handed_over, a.counters.moved), (0, 0, 1, 1));
    a.unconfirmed(now + moving::LEND_FOR);
    assert_eq!(a.counters.returned, 0);

    let mut b = Sessions::new(SessionsConfig::default());
    b.follow();
    let s = saved::SavedSession {
        id: "n".into(),
        expires_us: None,
        subs: Vec::new(),
        messages: Vec::new(),
        rel: Vec::new(),
        owner: None,
        identity: String::new(),
        will: None,
        age: 0,
    };
    b.handed(&["n".into()], (&["n".into()], &[], 0), vec![s], now, wall);
    assert_eq!((b.counters.kept, b.counters.moved_in, b.counters.moved), (0, 0, 1));
}

/// While a session is lent it is still this node's: its delayed will
/// waits (not published though its delay passed) and is cancelled once
/// the asker confirms; what it queued meanwhile, which the copy did not
/// carry, is counted dropped then. A lend that ends unconfirmed lets the
/// will go at its time.
#[test]
fn a_lent_sessions_will_and_later_messages_wait_for_the_confirmation() {
    let (now, wall) = (Instant::now(), 1_000_000_000);
    let mut a = Sessions::new(SessionsConfig::default());
    a.follow();
    let will = ClientPublish { topic: "w".into(), data: b"d".to_vec(), qos: 1, retain: false, mqtt: None, identity: None };
    for (i, id) in ["p", "q"].iter().enumerate() {
        assert!(a.claim(0, claim(conn_id(0, i + 1, 0), id, false, NEVER), now).is_empty());
        a.overdue(now + moving::MAX_WAIT);
        let state = SessionState { subs: vec![KeptSub::new("t/#", 1)], messages: Vec::new(), rel: vec![] };
        let e = SessionEnd {
            will: Some(crate::server::commands::DelayedWill { will: will.clone(), delay_s: 5 }),
            ..end(&a, conn_id(0, i + 1, 0), id, NEVER, Some(state))
        };
        assert!(a.ended(e, now).is_empty());
    }
    assert_eq!((a.counters.kept, a.counters.wills_waiting), (2, 2));
    let lent = a.hand_over("B", &ids(&["p", "q"]), u64::MAX, true, now, wall).0;
    a.offline("t/1", b"AQ==", 1, false, None, 0);
    assert!(a.expire(now + Duration::from_secs(6), false).is_empty(), "both wills held while lent");
    assert!(lent.sessions[0].1.contains(r#""id":"p""#));
    assert!(a.taken("B", lent.sessions[0].0), "p's lend confirmed");
    assert_eq!(a.counters.queue_dropped.get("move"), Some(&1), "p's message queued after the copy");
    assert_eq!((a.counters.wills_cancelled, a.counters.wills_waiting), (1, 1), "p's will cancelled: its client is back");
    a.unconfirmed(now + moving::LEND_FOR);
    let out = a.expire(now + Duration::from_secs(6), false);
    assert!(matches!(&out[..], [Action::Will(w)] if w.topic == "w"), "q's lend ended: its will goes: {out:?}");

    // A session that came for an id another node holds by a newer
    // CONNECT is kept when a claim newer still waits for it.
    let mut b = Sessions::new(SessionsConfig::default());
    b.follow();
    b.clock(9_000);
    assert!(b.claim(1, claim(conn_id(1, 1, 0), "z", false, NEVER), now).is_empty());
    b.clock(10_000);
    assert_eq!(answer(&b.claim(1, claim(conn_id(1, 2, 0), "z", false, NEVER), now)).code, DISPLACED.0);
    let s = saved::SavedSession {
        id: "z".into(),
        expires_us: None,
        subs: vec![KeptSub::new("t/#", 1)],
        messages: Vec::new(),
        rel: Vec::new(),
        owner: None,
        identity: String::new(),
        will: None,
        age: 0,
    };
    let (out, _) = b.handed(&["z".into()], (&["z".into()], &[], 9_000), vec![s], now, wall);
    assert!(answer(&out).present && answer(&out).code == 0, "the waiting claim resumes it: {out:?}");
    assert_eq!((b.counters.moved_in, b.counters.moved), (1, 0));
}
