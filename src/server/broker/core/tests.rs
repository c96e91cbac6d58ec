//! The broker core's journeys, no process and no socket: frames in as a
//! worker sends them, outputs asserted.
use super::*;
use crate::proto::bus::{Deliver, Frame, Publish};
use crate::server::broker::history::HistoryConfig;
use crate::server::broker::retained::RetainedConfig;
use crate::server::commands::conn_id;

fn core() -> Core {
    Core::new(History::new(HistoryConfig::default()), Retained::new(RetainedConfig::default()), CoreConfig::default())
}

fn publish<'a>(topic: &'a str, payload: &'a [u8], qos: u8, retain: bool) -> Frame<'a> {
    Frame::Publish(Publish { origin: conn_id(9, 1, 1), qos, retain, publish_us: 100, topic, props: None, identity: "", payload })
}

/// The frames sent, decoded: (workers, the delivery's topic, payload, seq).
fn sent(out: &[Output]) -> Vec<(Vec<u32>, String, Vec<u8>, u64)> {
    out.iter()
        .filter_map(|o| match o {
            Output::Send { to, bytes } => match crate::proto::bus::decode(bytes).unwrap().unwrap().0 {
                Frame::Deliver(Deliver { topic, payload, seq, .. }) => Some((to.clone(), topic.to_string(), payload.to_vec(), seq)),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

fn interest(c: &mut Core, w: u32, name: &str) {
    c.handle(Input::Worker(w, Frame::Interest { add: true, filter: crate::proto::mqtt::topic::is_filter(name), name }), 0, &mut Vec::new());
}

/// A publish goes to the workers with a subscriber of its topic or of a
/// matching filter, once each, one frame for all, in history order.
#[test]
fn a_publish_reaches_only_the_workers_with_interest() {
    let mut c = core();
    for w in [1, 2, 3] {
        c.handle(Input::WorkerUp(w), 0, &mut Vec::new());
    }
    interest(&mut c, 1, "tele/7");
    interest(&mut c, 2, "tele/#");
    interest(&mut c, 1, "tele/+");
    let mut out = Vec::new();
    c.handle(Input::Worker(3, publish("tele/7", b"21C", 0, false)), 0, &mut out);
    c.handle(Input::Worker(3, publish("tele/7", b"22C", 0, false)), 0, &mut out);
    c.handle(Input::Worker(3, publish("other", b"x", 0, false)), 0, &mut out);
    assert_eq!(sent(&out), vec![(vec![1, 2], "tele/7".into(), b"21C".to_vec(), 1), (vec![1, 2], "tele/7".into(), b"22C".to_vec(), 2)]);
    assert_eq!((c.counters.messages, c.counters.frames_out, c.counters.unrouted), (3, 4, 1));
}

/// Interest comes and goes per worker; a worker gone takes all of its
/// with it, and a filter nobody holds is freed.
#[test]
fn interest_follows_workers_and_their_end() {
    let mut c = core();
    interest(&mut c, 1, "a");
    interest(&mut c, 2, "a");
    interest(&mut c, 2, "b/#");
    assert_eq!(c.interest_len(), (1, 1));
    c.handle(Input::Worker(1, Frame::Interest { add: false, filter: false, name: "a" }), 0, &mut Vec::new());
    let mut out = Vec::new();
    c.handle(Input::Worker(3, publish("a", b"1", 0, false)), 0, &mut out);
    assert_eq!(sent(&out)[0].0, vec![2]);
    c.handle(Input::WorkerGone(2), 0, &mut Vec::new());
    assert_eq!(c.interest_len(), (0, 0), "worker 2's topic and filter went with it");
}

/// A retained publish is kept and answers a later wildcard subscription
/// on its worker, even with nobody subscribed when it came.
#[test]
fn retained_messages_answer_later_subscriptions() {
    let mut c = core();
    c.handle(Input::Worker(1, publish("r/a", b"A", 1, true)), 0, &mut Vec::new());
    let mut out = Vec::new();
    c.handle(Input::Worker(2, Frame::RetainedWant { conn: conn_id(2, 5, 1), qos: 1, sid: 0, filter: "r/#" }), 0, &mut out);
    let Output::Send { to, bytes } = &out[0] else { panic!("{out:?}") };
    assert_eq!(to, &vec![2]);
    match crate::proto::bus::decode(bytes).unwrap().unwrap().0 {
        Frame::Retained { conn, messages, .. } => {
            assert_eq!(conn, conn_id(2, 5, 1));
            assert_eq!((messages[0].topic, messages[0].payload), ("r/a", &b"A"[..]));
        }
        other => panic!("{other:?}"),
    }
}

/// A recovery is answered from the history after every message so far.
#[test]
fn history_answers_a_recovery() {
    let mut c = core();
    interest(&mut c, 1, "t");
    for d in [b"1", b"2", b"3"] {
        c.handle(Input::Worker(2, publish("t", d, 0, false)), 0, &mut Vec::new());
    }
    let mut out = Vec::new();
    c.handle(Input::Worker(1, Frame::HistoryWant { topic: "t", after: 1 }), 0, &mut out);
    let Output::Send { bytes, .. } = &out[0] else { panic!() };
    match crate::proto::bus::decode(bytes).unwrap().unwrap().0 {
        Frame::History { head, messages, .. } => {
            assert_eq!(head, 3);
            assert_eq!(messages.iter().map(|m| m.offset).collect::<Vec<_>>(), [2, 3]);
        }
        other => panic!("{other:?}"),
    }
}

/// A kept session's filter makes the supervisor a party: QoS 1 and 2
/// messages it matches go to it (for the queue), QoS 0 ones do not.
#[test]
fn kept_sessions_hear_what_their_filters_match() {
    let mut c = core();
    c.handle(Input::Offline { add: true, filter: "cmd/#".into() }, 0, &mut Vec::new());
    let mut out = Vec::new();
    c.handle(Input::Worker(1, publish("cmd/door", b"open", 1, false)), 0, &mut out);
    c.handle(Input::Worker(1, publish("cmd/door", b"q0", 0, false)), 0, &mut out);
    let offline: Vec<&Message> = out.iter().filter_map(|o| if let Output::Main(ToMain::Offline(m)) = o { Some(m) } else { None }).collect();
    assert_eq!(offline.len(), 1);
    assert_eq!((offline[0].topic.as_str(), &offline[0].data[..]), ("cmd/door", &b"open"[..]));
    assert!(sent(&out).is_empty(), "no worker has a subscriber");
}

/// Shared groups: one member per message, round robin, its worker told.
#[test]
fn a_shared_group_gets_each_message_once() {
    let mut c = core();
    let (a, b) = (conn_id(1, 1, 1), conn_id(2, 1, 1));
    for (w, conn) in [(1, a), (2, b)] {
        c.handle(Input::Worker(w, Frame::Share { join: true, conn, qos: 1, name: "$share/g/job/#" }), 0, &mut Vec::new());
    }
    let mut picks = Vec::new();
    for _ in 0..4 {
        let mut out = Vec::new();
        c.handle(Input::Worker(3, publish("job/1", b"j", 1, false)), 0, &mut out);
        let Output::Send { to, bytes } = &out[0] else { panic!() };
        let Frame::Deliver(d) = crate::proto::bus::decode(bytes).unwrap().unwrap().0 else { panic!() };
        assert_eq!(d.shared.len(), 1);
        assert_eq!(to, &vec![crate::server::commands::split_id(d.shared[0].0).0 as u32]);
        picks.push(d.shared[0].0);
    }
    assert_eq!(picks.iter().filter(|p| **p == a).count(), 2, "{picks:?}");
}

/// An admin publish is answered with its place and the workers it went to.
#[test]
fn an_admin_publish_is_answered_with_its_place() {
    let mut c = core();
    c.handle(Input::WorkerUp(4), 0, &mut Vec::new());
    interest(&mut c, 4, "news");
    let m = Message {
        publish_id: 7,
        ..Message::of(&match publish("news", b"hi", 0, false) {
            Frame::Publish(p) => p,
            _ => unreachable!(),
        })
    };
    let mut out = Vec::new();
    c.handle(Input::Message(m), 0, &mut out);
    assert!(out.iter().any(|o| matches!(o, Output::Main(ToMain::Routed { publish_id: 7, at, workers }) if at.offset == 1 && workers == &vec![4])), "{out:?}");
}

/// A unicast goes to its connection's worker only, and to nobody when
/// that worker is not up (the admin API answers 404).
#[test]
fn a_unicast_reaches_its_worker_or_nobody() {
    let mut c = core();
    c.handle(Input::WorkerUp(2), 0, &mut Vec::new());
    for (pid, worker) in [(1, 2u64), (2, 999)] {
        let m = Message {
            publish_id: pid,
            stream: Stream::Unicast,
            target: Some(conn_id(worker as usize, 5, 1)),
            ..Message::of(&match publish("", b"u", 0, false) {
                Frame::Publish(p) => p,
                _ => unreachable!(),
            })
        };
        let mut out = Vec::new();
        c.handle(Input::Message(m), 0, &mut out);
        let want: Vec<u32> = if worker == 2 { vec![2] } else { vec![] };
        assert!(out.iter().any(|o| matches!(o, Output::Main(ToMain::Routed { publish_id, workers, .. }) if *publish_id == pid && workers == &want)), "{out:?}");
        assert_eq!(sent(&out).len(), want.len());
    }
}

/// A cluster node hands its clients' publishes to the supervisor first.
#[test]
fn a_cluster_node_relays_client_publishes_first() {
    let mut c = Core::new(History::default(), Retained::default(), CoreConfig { relay: true, fetch: false });
    interest(&mut c, 1, "t");
    let mut out = Vec::new();
    c.handle(Input::Worker(2, publish("t", b"x", 1, false)), 0, &mut out);
    assert!(matches!(&out[..], [Output::Main(ToMain::Relay(m))] if m.topic == "t"), "{out:?}");
}

/// No worker: a message unrouted.
const NOBODY: Vec<u32> = Vec::new();

fn uninterest(c: &mut Core, w: u32, name: &str) {
    c.handle(Input::Worker(w, Frame::Interest { add: false, filter: crate::proto::mqtt::topic::is_filter(name), name }), 0, &mut Vec::new());
}

/// The workers one QoS 0 publish of `topic` (from worker 99) is written
/// to, in one frame; empty when it is unrouted.
fn routed_to(c: &mut Core, topic: &str) -> Vec<u32> {
    let mut out = Vec::new();
    c.handle(Input::Worker(99, publish(topic, b"m", 0, false)), 0, &mut out);
    let s = sent(&out);
    assert!(s.len() <= 1, "one frame for all its workers: {out:?}");
    s.into_iter().next().map(|(to, ..)| to).unwrap_or_default()
}

/// The deliveries sent, decoded whole: (workers, the frame).
fn delivered(out: &[Output]) -> Vec<(Vec<u32>, Deliver<'_>)> {
    out.iter()
        .filter_map(|o| match o {
            Output::Send { to, bytes } => match crate::proto::bus::decode(bytes).unwrap().unwrap().0 {
                Frame::Deliver(d) => Some((to.clone(), d)),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// An owned QoS 0 message of `topic`, as the admin API or the cluster
/// hands one in.
fn message(topic: &str, data: &[u8]) -> Message {
    Message { publish_us: 100, ..Message::topic(topic.into(), data.to_vec()) }
}

/// Worker 5's subscription asks for the retained messages of `filter`:
/// the (topic, payload) of its one answer, to worker 5 only.
fn retained_for(c: &mut Core, filter: &str) -> Vec<(String, Vec<u8>)> {
    let conn = conn_id(5, 1, 1);
    let mut out = Vec::new();
    c.handle(Input::Worker(5, Frame::RetainedWant { conn, qos: 1, sid: 3, filter }), 0, &mut out);
    let [Output::Send { to, bytes }] = &out[..] else { panic!("one answer, even with nothing: {out:?}") };
    assert_eq!(to, &vec![5]);
    match crate::proto::bus::decode(bytes).unwrap().unwrap().0 {
        Frame::Retained { conn: c2, sid, messages, .. } => {
            assert_eq!((c2, sid), (conn, 3), "the asking subscription named");
            messages.iter().map(|m| (m.topic.to_string(), m.payload.to_vec())).collect()
        }
        other => panic!("{other:?}"),
    }
}

/// A history answer, decoded: (workers, epoch, head, oldest, [(offset, payload)]).
type HistoryAnswer = (Vec<u32>, u32, u64, u64, Vec<(u64, Vec<u8>)>);

fn history_answers(out: &[Output]) -> Vec<HistoryAnswer> {
    out.iter()
        .filter_map(|o| match o {
            Output::Send { to, bytes } => match crate::proto::bus::decode(bytes).unwrap().unwrap().0 {
                Frame::History { epoch, head, oldest, messages, .. } => {
                    Some((to.clone(), epoch, head, oldest, messages.iter().map(|m| (m.offset, m.payload.to_vec())).collect()))
                }
                _ => None,
            },
            _ => None,
        })
        .collect()
}

fn share(c: &mut Core, w: u32, conn: u64, join: bool, name: &str) {
    c.handle(Input::Worker(w, Frame::Share { join, conn, qos: 1, name }), 0, &mut Vec::new());
}

/// The members picked for one publish of `topic`, each checked to be
/// written to its own worker.
fn picked(c: &mut Core, topic: &str) -> Vec<u64> {
    let mut out = Vec::new();
    c.handle(Input::Worker(99, publish(topic, b"j", 1, false)), 0, &mut out);
    let d = delivered(&out);
    let Some((to, d)) = d.first() else { return Vec::new() };
    for (conn, _) in &d.shared {
        assert!(to.contains(&(crate::server::commands::split_id(*conn).0 as u32)), "{to:?} lacks the worker of {conn:x}");
    }
    d.shared.iter().map(|m| m.0).collect()
}

/// An unsubscribe (the worker's last subscriber of a topic or filter
/// gone) stops the fan-out to it: the message is then unrouted, and no
/// interest entry is left behind.
#[test]
fn an_unsubscribe_stops_the_fan_out() {
    let mut c = core();
    interest(&mut c, 1, "a/+");
    interest(&mut c, 1, "x");
    assert_eq!((routed_to(&mut c, "a/1"), routed_to(&mut c, "x")), (vec![1], vec![1]));
    assert_eq!(c.counters.interest, 2);
    uninterest(&mut c, 1, "a/+");
    uninterest(&mut c, 1, "x");
    assert_eq!((routed_to(&mut c, "a/1"), routed_to(&mut c, "x")), (NOBODY, NOBODY));
    assert_eq!((c.interest_len(), c.counters.interest), ((0, 0), 0));
    assert_eq!((c.counters.messages, c.counters.frames_out, c.counters.unrouted), (4, 2, 2));
}

/// Two workers follow one filter; when one's last subscriber leaves the
/// other still gets the messages, and the entry goes with the second.
#[test]
fn interest_from_two_workers_outlives_one_leaving() {
    let mut c = core();
    interest(&mut c, 1, "s/#");
    interest(&mut c, 2, "s/#");
    assert_eq!(routed_to(&mut c, "s/1"), vec![1, 2]);
    assert_eq!(c.interest_len(), (0, 1), "one entry whatever its workers");
    uninterest(&mut c, 1, "s/#");
    assert_eq!(routed_to(&mut c, "s/1"), vec![2]);
    assert_eq!(c.interest_len(), (0, 1));
    uninterest(&mut c, 2, "s/#");
    assert_eq!(routed_to(&mut c, "s/1"), NOBODY);
    assert_eq!(c.interest_len(), (0, 0));
}

/// A worker's interest is a flag, not a count (the worker says its first
/// subscriber and its last): said twice it is one destination, and one
/// removal ends it.
#[test]
fn a_workers_interest_said_twice_is_one_destination() {
    let mut c = core();
    interest(&mut c, 1, "t");
    interest(&mut c, 1, "t");
    interest(&mut c, 1, "t/#");
    assert_eq!(routed_to(&mut c, "t"), vec![1], "once, though its topic and its filter both match");
    assert_eq!(c.counters.frames_out, 1);
    uninterest(&mut c, 1, "t");
    assert_eq!(routed_to(&mut c, "t"), vec![1], "t/# still matches its parent");
    uninterest(&mut c, 1, "t/#");
    assert_eq!(routed_to(&mut c, "t"), NOBODY);
}

/// Removing what a worker never said (or what nobody holds) touches no
/// other worker's interest and leaves no entry.
#[test]
fn a_removal_by_a_stranger_changes_nothing() {
    let mut c = core();
    interest(&mut c, 2, "t");
    interest(&mut c, 2, "f/+");
    uninterest(&mut c, 3, "t");
    uninterest(&mut c, 3, "f/+");
    uninterest(&mut c, 3, "nobody/#");
    uninterest(&mut c, 3, "nobody");
    assert_eq!(c.interest_len(), (1, 1));
    assert_eq!((routed_to(&mut c, "t"), routed_to(&mut c, "f/x")), (vec![2], vec![2]));
}

/// `+` is exactly one level, an empty one included (`a/` has the levels
/// `a` and ``).
#[test]
fn plus_matches_exactly_one_level() {
    let mut c = core();
    interest(&mut c, 1, "a/+");
    assert_eq!(routed_to(&mut c, "a/b"), vec![1]);
    assert_eq!(routed_to(&mut c, "a/"), vec![1], "an empty last level is a level");
    assert_eq!(routed_to(&mut c, "a/b/c"), NOBODY, "two levels");
    assert_eq!(routed_to(&mut c, "a"), NOBODY, "no level");
    assert_eq!(routed_to(&mut c, "b/a"), NOBODY);
}

/// `+` alone: every one-level topic, none with a `/`, no `$` topic.
#[test]
fn a_lone_plus_matches_the_one_level_topics_but_dollar_ones() {
    let mut c = core();
    interest(&mut c, 1, "+");
    assert_eq!(routed_to(&mut c, "a"), vec![1]);
    assert_eq!(routed_to(&mut c, "a/b"), NOBODY);
    assert_eq!(routed_to(&mut c, "/"), NOBODY, "two empty levels");
    assert_eq!(routed_to(&mut c, "$SYS"), NOBODY, "a first-level wildcard never matches a $ topic");
}

/// `a/#` matches `a` itself and everything below it, not a sibling that
/// only starts with the same letters.
#[test]
fn hash_matches_its_parent_and_every_level_below() {
    let mut c = core();
    interest(&mut c, 1, "a/#");
    for t in ["a", "a/b", "a/b/c/d", "a/", "a//x"] {
        assert_eq!(routed_to(&mut c, t), vec![1], "{t}");
    }
    for t in ["ab", "ab/c", "b/a", "/a"] {
        assert_eq!(routed_to(&mut c, t), NOBODY, "{t}");
    }
}

/// `#` alone matches every topic except those starting with `$`
/// (MQTT 4.7.2); `$SYS/#` and an exact `$` topic do match them, and a
/// `+` at the first level does not.
#[test]
fn a_lone_hash_matches_everything_but_dollar_topics() {
    let mut c = core();
    interest(&mut c, 1, "#");
    for t in ["x", "x/y/z", "/lead", "a//b", "dollar$/in/the/middle"] {
        assert_eq!(routed_to(&mut c, t), vec![1], "{t}");
    }
    assert_eq!(routed_to(&mut c, "$SYS/broker/load"), NOBODY);
    assert_eq!(routed_to(&mut c, "$x"), NOBODY);
    interest(&mut c, 2, "$SYS/#");
    interest(&mut c, 3, "+/broker/+");
    interest(&mut c, 4, "$SYS/broker/load");
    assert_eq!(routed_to(&mut c, "$SYS/broker/load"), vec![2, 4]);
    assert_eq!(routed_to(&mut c, "$SYS"), vec![2], "$SYS/# matches its parent");
    assert_eq!(routed_to(&mut c, "x/broker/y"), vec![1, 3]);
}

/// Empty levels are levels: `a//b` is a topic of three, matched exactly
/// by itself and by `+` in its middle, never by `a/b`.
#[test]
fn empty_levels_are_levels() {
    let mut c = core();
    interest(&mut c, 1, "a//b");
    interest(&mut c, 2, "a/+/b");
    interest(&mut c, 3, "+/+/b");
    interest(&mut c, 4, "a/b");
    assert_eq!(c.interest_len(), (2, 2), "a//b has no wildcard: an exact topic");
    assert_eq!(routed_to(&mut c, "a//b"), vec![1, 2, 3]);
    assert_eq!(routed_to(&mut c, "a/b"), vec![4]);
    assert_eq!(routed_to(&mut c, "a/x/b"), vec![2, 3]);
    assert_eq!(routed_to(&mut c, "//b"), vec![3]);
    assert_eq!(routed_to(&mut c, "a///b"), NOBODY);
}

/// Filters sharing levels come and go independently: removing `a/+`
/// keeps `a/+/c` below it and `a/#` beside it, and once all are gone
/// the trie holds nothing and every topic is unrouted.
#[test]
fn removing_overlapping_filters_leaves_no_residue() {
    let mut c = core();
    let filters = [(1, "a/#"), (2, "a/+"), (3, "a/+/c"), (4, "#"), (5, "+/b"), (6, "a/b/#")];
    for (w, f) in filters {
        interest(&mut c, w, f);
    }
    assert_eq!(routed_to(&mut c, "a/b"), vec![1, 2, 4, 5, 6]);
    assert_eq!(routed_to(&mut c, "a/x/c"), vec![1, 3, 4]);
    uninterest(&mut c, 2, "a/+");
    assert_eq!(routed_to(&mut c, "a/x/c"), vec![1, 3, 4], "a/+/c stays under the a/+ removed");
    assert_eq!(routed_to(&mut c, "a/x"), vec![1, 4]);
    uninterest(&mut c, 1, "a/#");
    assert_eq!(routed_to(&mut c, "a/b/z"), vec![4, 6], "a/b/# stays under the a/# removed");
    uninterest(&mut c, 4, "#");
    assert_eq!(routed_to(&mut c, "q"), NOBODY);
    for (w, f) in [(3, "a/+/c"), (5, "+/b"), (6, "a/b/#")] {
        uninterest(&mut c, w, f);
    }
    assert!(c.filters.is_empty());
    assert_eq!(c.interest_len(), (0, 0));
    for t in ["a", "a/b", "a/x/c", "a/b/c", "x/b"] {
        assert_eq!(routed_to(&mut c, t), NOBODY, "{t}");
    }
    interest(&mut c, 7, "a/+");
    assert_eq!(routed_to(&mut c, "a/b"), vec![7], "a filter added again after its removal matches again");
}

/// A worker gone takes its own topics, filters and shared members, and
/// nobody else's.
#[test]
fn a_worker_gone_takes_only_its_own_interest() {
    let mut c = core();
    interest(&mut c, 1, "t");
    interest(&mut c, 1, "f/#");
    interest(&mut c, 2, "t");
    interest(&mut c, 2, "f/+");
    c.handle(Input::WorkerGone(1), 0, &mut Vec::new());
    assert_eq!(c.interest_len(), (1, 1));
    assert_eq!(routed_to(&mut c, "t"), vec![2]);
    assert_eq!(routed_to(&mut c, "f/x"), vec![2]);
    assert_eq!(routed_to(&mut c, "f/x/y"), NOBODY, "f/# went with worker 1");
}

/// A broadcast goes to every worker whose bus is up, subscribed or not,
/// in the broadcasts' own history (`*`); a worker gone is left out, and
/// a unicast to one of its connections reaches nobody.
#[test]
fn a_gone_worker_gets_no_broadcast_and_no_unicast() {
    let mut c = core();
    for w in [1, 2] {
        c.handle(Input::WorkerUp(w), 0, &mut Vec::new());
    }
    let broadcast = || Message { stream: Stream::Broadcast, ..message("", b"all") };
    let mut out = Vec::new();
    c.handle(Input::Message(broadcast()), 0, &mut out);
    c.handle(Input::WorkerGone(2), 0, &mut Vec::new());
    c.handle(Input::Message(broadcast()), 0, &mut out);
    let got: Vec<(Vec<u32>, u64)> = delivered(&out).into_iter().map(|(to, d)| (to, d.seq)).collect();
    assert_eq!(got, vec![(vec![1, 2], 1), (vec![1], 2)]);
    assert_eq!(c.history.position(BROADCAST_TOPIC).offset, 2);
    let mut out = Vec::new();
    let unicast = Message { stream: Stream::Unicast, target: Some(conn_id(2, 1, 1)), publish_id: 5, ..message("", b"u") };
    c.handle(Input::Message(unicast), 0, &mut out);
    assert_eq!(out, vec![Output::Main(ToMain::Routed { publish_id: 5, at: Position::default(), workers: vec![] })]);
}

/// A message no worker follows is counted unrouted, yet it is in the
/// history and, retained, in the retained set.
#[test]
fn a_message_matching_nothing_is_unrouted_but_kept() {
    let mut c = core();
    interest(&mut c, 1, "other/#");
    let mut out = Vec::new();
    c.handle(Input::Worker(2, publish("lonely", b"here", 1, true)), 0, &mut out);
    assert!(out.is_empty(), "{out:?}");
    assert_eq!((c.counters.messages, c.counters.unrouted, c.counters.frames_out), (1, 1, 0));
    assert_eq!(c.history.position("lonely").offset, 1);
    assert_eq!(retained_for(&mut c, "lonely"), vec![("lonely".to_string(), b"here".to_vec())]);
}

/// An empty retained publish clears the topic's retained message, and is
/// itself delivered like any other message.
#[test]
fn an_empty_retained_publish_clears_and_is_still_delivered() {
    let mut c = core();
    interest(&mut c, 1, "r/#");
    c.handle(Input::Worker(2, publish("r/a", b"on", 1, true)), 0, &mut Vec::new());
    c.handle(Input::Worker(2, publish("r/b", b"up", 1, true)), 0, &mut Vec::new());
    assert_eq!(retained_for(&mut c, "r/#"), vec![("r/a".to_string(), b"on".to_vec()), ("r/b".to_string(), b"up".to_vec())]);
    let mut out = Vec::new();
    c.handle(Input::Worker(2, publish("r/a", b"", 1, true)), 0, &mut out);
    assert_eq!(sent(&out), vec![(vec![1], "r/a".to_string(), vec![], 2)]);
    assert_eq!(retained_for(&mut c, "r/#"), vec![("r/b".to_string(), b"up".to_vec())]);
    assert_eq!((c.retained.counters.cleared, c.retained.counters.messages), (1, 1));
    c.handle(Input::Worker(2, publish("r/a", b"", 1, true)), 0, &mut Vec::new());
    assert_eq!(c.retained.counters.cleared, 1, "nothing left to clear");
}

/// A publish without the retain flag leaves the topic's retained message.
#[test]
fn a_live_publish_does_not_replace_the_retained_message() {
    let mut c = core();
    c.handle(Input::Worker(2, publish("t", b"kept", 1, true)), 0, &mut Vec::new());
    c.handle(Input::Worker(2, publish("t", b"live", 1, false)), 0, &mut Vec::new());
    c.handle(Input::Worker(2, publish("t", b"", 0, false)), 0, &mut Vec::new());
    assert_eq!(retained_for(&mut c, "t"), vec![("t".to_string(), b"kept".to_vec())]);
    assert_eq!(c.retained.counters.stored, 1);
}

/// A filter matching several retained topics gets them all in one
/// answer, in topic order, each topic's latest; `#` leaves the `$`
/// topics out. An ask that matches nothing is answered all the same.
#[test]
fn a_retained_answer_holds_every_matching_topic_in_order() {
    let mut c = core();
    for (t, d) in [("r/b", "B"), ("r/a", "A1"), ("r/c/d", "CD"), ("s/x", "SX"), ("$SYS/r", "SYS"), ("r/a", "A2")] {
        c.handle(Input::Worker(2, publish(t, d.as_bytes(), 0, true)), 0, &mut Vec::new());
    }
    let topics = |c: &mut Core, f: &str| retained_for(c, f).into_iter().map(|(t, _)| t).collect::<Vec<_>>();
    assert_eq!(retained_for(&mut c, "r/+"), vec![("r/a".to_string(), b"A2".to_vec()), ("r/b".to_string(), b"B".to_vec())]);
    assert_eq!(topics(&mut c, "r/#"), ["r/a", "r/b", "r/c/d"]);
    assert_eq!(topics(&mut c, "#"), ["r/a", "r/b", "r/c/d", "s/x"]);
    assert_eq!(topics(&mut c, "+/+"), ["r/a", "r/b", "s/x"]);
    assert_eq!(topics(&mut c, "$SYS/#"), ["$SYS/r"]);
    assert_eq!(topics(&mut c, "nothing/#"), Vec::<String>::new());
    assert_eq!(c.counters.retained_asked, 6);
    assert_eq!(c.retained.counters.served, 2 + 3 + 4 + 3 + 1);
}

/// Over the retained set's bounds a retained publish is still delivered,
/// only not kept (counted under its reason).
#[test]
fn a_retained_publish_over_the_bounds_is_still_delivered() {
    let cfg = RetainedConfig { max_messages: 1, ..RetainedConfig::default() };
    let mut c = Core::new(History::default(), Retained::new(cfg), CoreConfig::default());
    interest(&mut c, 1, "#");
    let mut out = Vec::new();
    c.handle(Input::Worker(2, publish("a", b"1", 0, true)), 0, &mut out);
    c.handle(Input::Worker(2, publish("b", b"2", 0, true)), 0, &mut out);
    assert_eq!(sent(&out).into_iter().map(|(to, t, ..)| (to, t)).collect::<Vec<_>>(), vec![(vec![1], "a".into()), (vec![1], "b".into())]);
    assert_eq!(retained_for(&mut c, "#"), vec![("a".to_string(), b"1".to_vec())]);
    assert_eq!(c.retained.counters.refused["count"], 1);
}

/// A shared group's messages go round the members, each picked as often
/// as the others; a member that left is never picked again, and the
/// turn goes on among those left.
#[test]
fn shared_picks_spread_over_members_and_skip_one_that_left() {
    let mut c = core();
    let members = [conn_id(1, 1, 1), conn_id(2, 1, 1), conn_id(3, 1, 1)];
    for (w, m) in [1, 2, 3].into_iter().zip(members) {
        share(&mut c, w, m, true, "$share/g/job/+");
    }
    let count = |picks: &[u64], m: u64| picks.iter().filter(|p| **p == m).count();
    let picks: Vec<u64> = (0..6).flat_map(|_| picked(&mut c, "job/1")).collect();
    assert_eq!(picks.len(), 6, "one member per message");
    assert!(members.iter().all(|m| count(&picks, *m) == 2), "{picks:?}");
    share(&mut c, 2, members[1], false, "$share/g/job/+");
    let picks: Vec<u64> = (0..4).flat_map(|_| picked(&mut c, "job/2")).collect();
    assert_eq!((count(&picks, members[0]), count(&picks, members[1]), count(&picks, members[2])), (2, 0, 2), "{picks:?}");
    assert_eq!(c.shared.counters.picked, 10);
    assert_eq!(picked(&mut c, "job/2/deeper"), Vec::<u64>::new(), "job/+ is one level");
}

/// The members on a worker that is gone are not picked; with no member
/// left the group's message reaches nobody.
#[test]
fn a_shared_member_on_a_gone_worker_is_not_picked() {
    let mut c = core();
    let (a, b) = (conn_id(1, 4, 1), conn_id(2, 4, 1));
    share(&mut c, 1, a, true, "$share/g/job/#");
    share(&mut c, 2, b, true, "$share/g/job/#");
    c.handle(Input::WorkerGone(2), 0, &mut Vec::new());
    assert!((0..4).all(|_| picked(&mut c, "job/1") == vec![a]));
    c.handle(Input::WorkerGone(1), 0, &mut Vec::new());
    assert_eq!(picked(&mut c, "job/1"), Vec::<u64>::new());
    assert_eq!(c.counters.unrouted, 1);
    assert_eq!((c.shared.counters.groups, c.shared.counters.members), (0, 0));
}

/// A worker with a plain subscriber and the picked member gets one frame
/// for both; when another worker's member is picked, both are written.
#[test]
fn a_worker_with_a_subscriber_and_a_shared_member_gets_one_frame() {
    let mut c = core();
    let (a, b) = (conn_id(1, 1, 1), conn_id(2, 1, 1));
    interest(&mut c, 1, "job/#");
    share(&mut c, 1, a, true, "$share/g/job/#");
    share(&mut c, 2, b, true, "$share/g/job/#");
    let mut out = Vec::new();
    for _ in 0..2 {
        c.handle(Input::Worker(9, publish("job/x", b"j", 1, false)), 0, &mut out);
    }
    let mut got: Vec<(Vec<u32>, Vec<u64>)> = delivered(&out).into_iter().map(|(to, d)| (to, d.shared.iter().map(|m| m.0).collect())).collect();
    got.sort();
    assert_eq!(got, vec![(vec![1], vec![a]), (vec![1, 2], vec![b])]);
    assert_eq!(c.counters.frames_out, 3);
}

/// Two groups on one filter each get the message: one member of each.
#[test]
fn each_group_on_a_filter_gets_its_own_copy() {
    let mut c = core();
    let (a, b) = (conn_id(1, 1, 1), conn_id(2, 1, 1));
    share(&mut c, 1, a, true, "$share/g/t");
    share(&mut c, 2, b, true, "$share/h/t");
    let mut got = picked(&mut c, "t");
    got.sort();
    assert_eq!(got, vec![a, b]);
    assert!(picked(&mut c, "u").is_empty());
}

/// Offsets go up by one per message of a topic, each topic its own count
/// and its own epoch, as the deliveries and the history say.
#[test]
fn history_offsets_increase_per_topic() {
    let mut c = core();
    interest(&mut c, 1, "#");
    let mut out = Vec::new();
    for t in ["a", "b", "a", "a", "b"] {
        c.handle(Input::Worker(2, publish(t, b"x", 0, false)), 0, &mut out);
    }
    let got: Vec<(&str, u64, u32)> = delivered(&out).iter().map(|(_, d)| (d.topic, d.seq, d.epoch)).collect();
    let (ea, eb) = (c.history.position("a").epoch, c.history.position("b").epoch);
    assert!(ea != 0 && eb != 0);
    assert_eq!(got, vec![("a", 1, ea), ("b", 1, eb), ("a", 2, ea), ("a", 3, ea), ("b", 2, eb)]);
    assert_eq!((c.history.position("a").offset, c.history.position("b").offset), (3, 2));
}

/// A recovery after an offset gets exactly what followed it, payloads and
/// offsets, with the epoch and head; after the head it gets nothing, and
/// a topic never published has epoch 0.
#[test]
fn a_recovery_resumes_from_its_offset() {
    let mut c = core();
    for d in ["1", "2", "3", "4", "5"] {
        c.handle(Input::Worker(2, publish("t", d.as_bytes(), 0, false)), 0, &mut Vec::new());
    }
    let epoch = c.history.position("t").epoch;
    let mut out = Vec::new();
    for (topic, after) in [("t", 2), ("t", 5), ("never", 0)] {
        c.handle(Input::Worker(1, Frame::HistoryWant { topic, after }), 0, &mut out);
    }
    let answers = history_answers(&out);
    assert_eq!(answers[0], (vec![1], epoch, 5, 1, vec![(3, b"3".to_vec()), (4, b"4".to_vec()), (5, b"5".to_vec())]));
    assert_eq!(answers[1], (vec![1], epoch, 5, 1, vec![]));
    assert_eq!(answers[2], (vec![1], 0, 0, 1, vec![]));
    assert_eq!(c.history.counters.served, 3);
}

/// A recovery from before the kept history starts at the oldest kept
/// message, and says where that is.
#[test]
fn a_recovery_from_before_the_kept_history_starts_at_the_oldest() {
    let cfg = HistoryConfig { size: 3, ..HistoryConfig::default() };
    let mut c = Core::new(History::new(cfg), Retained::default(), CoreConfig::default());
    for d in ["1", "2", "3", "4", "5"] {
        c.handle(Input::Worker(2, publish("t", d.as_bytes(), 0, false)), 0, &mut Vec::new());
    }
    let mut out = Vec::new();
    c.handle(Input::History { worker: 4, topic: "t".into(), after: 0 }, 0, &mut out);
    let [(to, _, head, oldest, messages)] = &history_answers(&out)[..] else { panic!("{out:?}") };
    assert_eq!((to, *head, *oldest), (&vec![4], 5, 3));
    assert_eq!(messages.iter().map(|m| m.0).collect::<Vec<_>>(), [3, 4, 5]);
}

/// A node whose history is the cluster's stream hands recoveries to the
/// supervisor instead of answering them.
#[test]
fn a_fetching_node_asks_the_stream_for_recoveries() {
    let mut c = Core::new(History::default(), Retained::default(), CoreConfig { relay: false, fetch: true });
    c.handle(Input::Worker(2, publish("t", b"1", 0, false)), 0, &mut Vec::new());
    let mut out = Vec::new();
    c.handle(Input::Worker(3, Frame::HistoryWant { topic: "t", after: 0 }), 0, &mut out);
    assert_eq!(out, vec![Output::Main(ToMain::Fetch { worker: 3, topic: "t".into(), after: 0 })]);
    assert_eq!((c.counters.to_main, c.history.counters.served), (1, 0));
}

/// A QoS 1 message a kept session and a worker both follow goes to the
/// worker and, with its place, to the supervisor; once the session's
/// filter is dropped only the worker gets it.
#[test]
fn a_kept_session_and_a_worker_both_get_a_qos1_message() {
    let mut c = core();
    c.handle(Input::Offline { add: true, filter: "cmd/#".into() }, 0, &mut Vec::new());
    interest(&mut c, 1, "cmd/+");
    let mut out = Vec::new();
    c.handle(Input::Worker(2, publish("cmd/x", b"go", 1, false)), 0, &mut out);
    assert_eq!(sent(&out), vec![(vec![1], "cmd/x".to_string(), b"go".to_vec(), 1)], "the supervisor is no worker");
    let at = c.history.position("cmd/x");
    assert!(out.iter().any(|o| matches!(o, Output::Main(ToMain::Offline(m)) if m.at == Some(at) && m.data == b"go")), "{out:?}");
    assert_eq!(c.counters.to_main, 1);
    c.handle(Input::Offline { add: false, filter: "cmd/#".into() }, 0, &mut Vec::new());
    let mut out = Vec::new();
    c.handle(Input::Worker(2, publish("cmd/x", b"again", 1, false)), 0, &mut out);
    assert!(!out.iter().any(|o| matches!(o, Output::Main(_))), "{out:?}");
    assert_eq!((c.counters.to_main, c.interest_len()), (1, (0, 1)));
}

/// An admin publish nobody follows is answered at once, with its place
/// and no workers to wait for.
#[test]
fn an_admin_publish_nobody_follows_is_answered_with_no_workers() {
    let mut c = core();
    let mut out = Vec::new();
    c.handle(Input::Message(Message { publish_id: 9, ..message("quiet", b"q") }), 0, &mut out);
    let at = c.history.position("quiet");
    assert_eq!(at.offset, 1);
    assert_eq!(out, vec![Output::Main(ToMain::Routed { publish_id: 9, at, workers: vec![] })]);
    assert_eq!(c.counters.unrouted, 1);
}

/// A cluster message comes with its place: delivered at it, and when the
/// stream gives one this history already has, not delivered again (an
/// admin publish waiting for it is answered with no workers).
#[test]
fn a_cluster_message_already_in_the_history_is_not_delivered_again() {
    let mut c = core();
    interest(&mut c, 1, "t");
    let at = |offset| Position { epoch: 5, offset };
    let mut out = Vec::new();
    c.handle(Input::Message(Message { at: Some(at(1)), publish_id: 3, ..message("t", b"1") }), 0, &mut out);
    c.handle(Input::Message(Message { at: Some(at(1)), publish_id: 4, ..message("t", b"1") }), 0, &mut out);
    c.handle(Input::Message(Message { at: Some(at(2)), ..message("t", b"2") }), 0, &mut out);
    let got: Vec<(Vec<u32>, u64, u32)> = delivered(&out).into_iter().map(|(to, d)| (to, d.seq, d.epoch)).collect();
    assert_eq!(got, vec![(vec![1], 1, 5), (vec![1], 2, 5)]);
    assert!(out.contains(&Output::Main(ToMain::Routed { publish_id: 3, at: at(1), workers: vec![1] })));
    assert!(out.contains(&Output::Main(ToMain::Routed { publish_id: 4, at: at(1), workers: vec![] })));
    assert_eq!(c.history.position("t"), at(2));
}

/// Another node's retained message replaces this set's only when newer;
/// one from a sync of the whole set is counted as synced.
#[test]
fn another_nodes_retained_entry_counts_when_it_changes_the_set() {
    let mut c = core();
    let kept = |d: &[u8], us| Kept::new(d, 0).with(None, us);
    c.handle(Input::RetainedEntry { topic: "t".into(), kept: kept(b"new", 20), sync: true }, 0, &mut Vec::new());
    c.handle(Input::RetainedEntry { topic: "t".into(), kept: kept(b"old", 10), sync: true }, 0, &mut Vec::new());
    c.handle(Input::RetainedEntry { topic: "u".into(), kept: kept(b"live", 5), sync: false }, 0, &mut Vec::new());
    assert_eq!(retained_for(&mut c, "+"), vec![("t".to_string(), b"new".to_vec()), ("u".to_string(), b"live".to_vec())]);
    assert_eq!(c.retained.counters.synced, 1, "the older copy changed nothing, the live one is no sync");
    c.handle(Input::RetainedEntry { topic: "t".into(), kept: kept(b"", 30), sync: false }, 0, &mut Vec::new());
    assert_eq!(retained_for(&mut c, "t"), vec![]);
}

/// A tick past the TTL forgets a quiet topic's history; its next message
/// starts again at offset 1.
#[test]
fn a_tick_past_the_ttl_forgets_a_quiet_history() {
    let cfg = HistoryConfig { ttl: std::time::Duration::from_secs(10), ..HistoryConfig::default() };
    let mut c = Core::new(History::new(cfg), Retained::default(), CoreConfig::default());
    for _ in 0..3 {
        c.handle(Input::Worker(2, publish("t", b"x", 0, false)), 0, &mut Vec::new());
    }
    c.handle(Input::Tick, 100 + 5_000_000, &mut Vec::new());
    assert_eq!(c.history.position("t").offset, 3, "within the TTL");
    c.handle(Input::Tick, 100 + 10_000_001, &mut Vec::new());
    assert_eq!(c.history.position("t"), Position::default());
    c.handle(Input::Worker(2, publish("t", b"x", 0, false)), 0, &mut Vec::new());
    assert_eq!(c.history.position("t").offset, 1);
}

/// Frames only a shard sends are ignored when a worker sends them.
#[test]
fn a_shard_frame_from_a_worker_is_ignored() {
    let mut c = core();
    interest(&mut c, 1, "#");
    let mut out = Vec::new();
    let d = Deliver {
        publish_id: 0,
        stream: Stream::Topic,
        topic: "t",
        seq: 1,
        epoch: 1,
        publish_us: 0,
        qos: 0,
        retain: true,
        target: None,
        user: None,
        close: false,
        shared: vec![],
        props: None,
        payload: b"x",
    };
    c.handle(Input::Worker(2, Frame::Deliver(d)), 0, &mut out);
    c.handle(Input::Worker(2, Frame::Retained { conn: 1, qos: 0, sid: 0, messages: vec![] }), 0, &mut out);
    c.handle(Input::Worker(2, Frame::Stamp { at: 5 }), 0, &mut out);
    assert!(out.is_empty(), "{out:?}");
    assert_eq!((c.counters.messages, c.history.position("t"), c.retained.counters.messages), (0, Position::default(), 0));
}

/// What the cluster's stream filled in: the messages past the head are
/// delivered (not those the history had) and recorded, so the waiting
/// recovery is answered with them and the next live message follows
/// them. A topic with no log here takes the stream's as its own,
/// delivering nothing.
#[test]
fn merged_messages_past_the_head_are_delivered_and_the_waiting_answered() {
    let mut c = core();
    interest(&mut c, 1, "t");
    let at = |offset| Position { epoch: 7, offset };
    let m = |topic: &str, o: u64| Message { at: Some(at(o)), ..message(topic, &[b'0' + o as u8]) };
    for o in 1..=2 {
        c.handle(Input::Message(m("t", o)), 0, &mut Vec::new());
    }
    let mut out = Vec::new();
    c.handle(Input::Merged { topic: "t".into(), messages: (1..=4).map(|o| m("t", o)).collect(), waiting: vec![(2, 0)] }, 0, &mut out);
    let got: Vec<(Vec<u32>, u64, Vec<u8>)> = delivered(&out).into_iter().map(|(to, d)| (to, d.seq, d.payload.to_vec())).collect();
    assert_eq!(got, vec![(vec![1], 3, b"3".to_vec()), (vec![1], 4, b"4".to_vec())]);
    let answers = history_answers(&out);
    assert_eq!(answers.len(), 1, "{out:?}");
    assert_eq!((&answers[0].0, answers[0].1, answers[0].2), (&vec![2], 7, 4), "the head moved past what was merged");
    assert_eq!(answers[0].4.iter().map(|(o, _)| *o).collect::<Vec<_>>(), [1, 2, 3, 4]);
    assert_eq!(c.history.position("t"), at(4));
    // The next live message follows them: no gap, nothing forgotten.
    let mut out = Vec::new();
    c.handle(Input::Message(m("t", 5)), 0, &mut out);
    assert_eq!(delivered(&out).iter().map(|(_, d)| d.seq).collect::<Vec<_>>(), [5]);
    let mut out = Vec::new();
    c.handle(Input::Worker(2, Frame::HistoryWant { topic: "t", after: 0 }), 0, &mut out);
    assert_eq!(history_answers(&out)[0].4.iter().map(|(o, _)| *o).collect::<Vec<_>>(), [1, 2, 3, 4, 5]);

    interest(&mut c, 1, "fresh");
    let mut out = Vec::new();
    c.handle(Input::Merged { topic: "fresh".into(), messages: (1..=3).map(|o| m("fresh", o)).collect(), waiting: vec![(3, 1)] }, 0, &mut out);
    assert!(delivered(&out).is_empty(), "{out:?}");
    assert_eq!(history_answers(&out), vec![(vec![3], 7, 3, 1, vec![(2, b"2".to_vec()), (3, b"3".to_vec())])]);
}

/// A message the cluster's stream filled in reaches a shared group's
/// member as a live one would: picked, and written to the member's
/// worker, even with no worker holding plain interest in the topic.
#[test]
fn merged_messages_reach_a_shared_groups_member() {
    let mut c = core();
    c.handle(Input::WorkerUp(1), 0, &mut Vec::new());
    let member = conn_id(1, 1, 1);
    share(&mut c, 1, member, true, "$share/g/s");
    let at = |offset| Position { epoch: 7, offset };
    let m = |o: u64| Message { at: Some(at(o)), qos: 1, ..message("s", &[b'0' + o as u8]) };
    let mut out = Vec::new();
    c.handle(Input::Message(m(1)), 0, &mut out);
    assert_eq!(delivered(&out).iter().map(|(to, d)| (to.clone(), d.shared.clone())).collect::<Vec<_>>(), [(vec![1], vec![(member, 1)])]);
    let mut out = Vec::new();
    c.handle(Input::Merged { topic: "s".into(), messages: vec![m(1), m(2)], waiting: vec![] }, 0, &mut out);
    let got: Vec<_> = delivered(&out).into_iter().map(|(to, d)| (to, d.seq, d.shared)).collect();
    assert_eq!(got, [(vec![1u32], 2u64, vec![(member, 1u8)])], "offset 2 only, to the member's worker, naming it");
}
