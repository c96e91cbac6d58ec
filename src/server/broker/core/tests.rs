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
