//! The worker's topic registry: every operation, both subscriber forms, and
//! what a topic and a subscription cost on the heap.

use super::*;

/// A connection's subscriptions: nothing on the heap without any, nothing
/// for one either (inline in the record's word; a `ThinVec` took a
/// 32-byte chunk, a boxed Vec 64), and nothing once it left them. (The
/// topic has a set with room for a third subscriber already: what is
/// counted is the connection's part.)
#[test]
fn one_subscription_allocates_nothing() {
    let mut t = Topics::default();
    t.subscribe(&mut Subs::new(), 9, b"warm").unwrap();
    t.subscribe(&mut Subs::new(), 8, b"warm").unwrap();
    let (mut subs, held) = crate::test_alloc::held(Subs::new);
    assert_eq!(held, 0);
    let ((), held) = crate::test_alloc::held(|| {
        let mut warm = Subs::new();
        t.subscribe(&mut warm, 1, b"warm").unwrap();
        std::mem::swap(&mut subs, &mut warm);
    });
    assert_eq!(held, 0, "one subscription to a known topic");
    assert_eq!(std::mem::size_of::<Subs>(), 8);
    let ((), held) = crate::test_alloc::held(|| t.unsubscribe(&mut subs, 1, b"warm"));
    assert_eq!((held, subs.is_empty()), (0, true), "left");
}

#[test]
fn subscriptions_are_tracked_both_ways() {
    let mut t = Topics::default();
    let (mut a, mut b): (Subs, Subs) = (Subs::new(), Subs::new());
    t.subscribe(&mut a, 1, b"news").unwrap();
    t.subscribe(&mut b, 2, b"news").unwrap();
    t.subscribe(&mut b, 2, b"sport").unwrap();
    let mut s = t.subscribers("news");
    s.sort();
    assert_eq!(s, vec![1, 2]);
    assert_eq!(t.counts(), (2, 3));
    t.unsubscribe(&mut b, 2, b"news");
    assert_eq!(t.subscribers("news"), vec![1]);
    t.forget(&a, 1);
    assert!(t.subscribers("news").is_empty());
    assert!(t.take_changes().is_empty(), "untracked");
    t.following.track = true;
    t.subscribe(&mut a, 1, b"news").unwrap();
    t.subscribe(&mut b, 2, b"news").unwrap();
    t.forget(&a, 1);
    t.unsubscribe(&mut b, 2, b"news");
    assert!(t.take_changes().is_empty(), "came and went within one tick: nothing to tell");
    t.subscribe(&mut a, 1, b"news").unwrap();
    assert_eq!(t.take_changes(), vec![("news".to_string(), true)]);
    t.forget(&a, 1);
    assert_eq!(t.take_changes(), vec![("news".to_string(), false)]);
    assert_eq!(t.names_of(&b), vec!["sport".to_string()]);
    assert_eq!(t.subscribe(&mut a, 1, b"bad topic"), Err(Close::BadTopic));
}

#[test]
fn a_topic_without_subscribers_is_forgotten_and_its_id_reused() {
    let mut t = Topics::new(false, 2, crate::server::limits::command_rate::DEFAULT_PER_SECOND);
    let (mut a, mut b): (Subs, Subs) = (Subs::new(), Subs::new());
    t.subscribe(&mut a, 1, b"keep").unwrap();
    for i in 0..1000 {
        let name = format!("t{i}");
        t.subscribe(&mut b, 2, name.as_bytes()).unwrap();
        t.unsubscribe(&mut b, 2, name.as_bytes());
    }
    assert_eq!((t.names.len(), t.slots.len(), t.free.len()), (1, 2, 1), "one live topic, one free id");
    t.subscribe(&mut b, 2, b"x").unwrap();
    assert_eq!(t.subscribe(&mut b, 2, b"y"), Err(Close::TooManyTopics));
    assert_eq!(t.subscribe(&mut a, 1, b"x"), Ok(()), "an existing topic is not a new one");
    assert_eq!(t.counts(), (2, 3));
    // Unsubscribing from a topic one never had leaves its subscribers.
    t.unsubscribe(&mut b, 2, b"keep");
    assert_eq!(t.subscribers("keep"), vec![1]);
    t.forget(&a, 1);
    t.forget(&b, 2);
    assert_eq!(t.counts(), (0, 0));
    assert!(t.slots.is_empty() && t.free.is_empty(), "an empty worker keeps no table");
}

/// Subscribe connection `key` to `name` with subscriptions of its own.
fn sub(t: &mut Topics, key: usize, name: &str) -> Subs {
    let mut s = Subs::new();
    t.subscribe(&mut s, key, name.as_bytes()).unwrap();
    s
}

fn sorted(mut v: Vec<usize>) -> Vec<usize> {
    v.sort_unstable();
    v
}

/// Issue 44's layout: a million devices each on a topic of its own. What
/// the registry holds per topic with one subscriber, counted by malloc:
/// a 24-byte slot with the name inline (`dev/NNNNN`: no chunk of its
/// own) and a quarter of slack at most, and the name index's 5-byte buckets
/// (hashbrown keeps at most half of them empty after growing). No set:
/// the one subscriber is inline, and so is the subscription in the
/// connection's `Subs`.
#[test]
fn one_topic_with_one_subscriber_is_small() {
    assert_eq!(std::mem::size_of::<Option<Slot>>(), 24);
    const N: usize = 20_000;
    let mut subs: Vec<Subs> = (0..N).map(|_| Subs::new()).collect();
    let (t, held) = crate::test_alloc::held(|| {
        let mut t = Topics::default();
        for (key, s) in subs.iter_mut().enumerate() {
            t.subscribe(s, key, format!("dev/{key:05}").as_bytes()).unwrap();
        }
        // What the shards are told goes at the end of each loop turn.
        assert_eq!(t.take_interest().len(), N);
        t
    });
    let per_topic = held as f64 / N as f64;
    eprintln!("one topic with one subscriber: {per_topic:.1} B in the registry, 0 B of Subs");
    assert!(t.many.is_empty(), "no topic has a set");
    assert!((24.0..=30.0 + 10.5).contains(&per_topic), "{per_topic:.1} B per topic");
    assert_eq!(t.counts(), (N as u64, N as u64));
}

/// The second subscriber of a topic allocates its set; when it leaves,
/// the set is given back and the first is inline again.
#[test]
fn a_second_subscriber_makes_a_set_and_its_leaving_gives_it_back() {
    let mut t = Topics::default();
    let a = sub(&mut t, 1, "news");
    let (mut b, held) = crate::test_alloc::held(|| sub(&mut t, 2, "news"));
    assert!(held > 0, "a set: {held}");
    assert_eq!(sorted(t.subscribers("news")), vec![1, 2]);
    let ((), held) = crate::test_alloc::held(|| t.unsubscribe(&mut b, 2, b"news"));
    assert!(held <= -48, "the set given back: {held}");
    assert!(t.many.is_empty());
    assert_eq!(t.slots[t.id("news").unwrap() as usize].as_ref().unwrap().subscribers(), Subscribers::One(1));
    assert_eq!(t.subscribers("news"), vec![1]);
    t.forget(&a, 1);
    assert_eq!((t.id("news"), t.counts()), (None, (0, 0)));
}

/// Broadcast fan-out: thousands of subscribers of one topic, each listed
/// once; they leave in any order, the topic goes with the last, and the
/// set turns inline on the way down.
#[test]
fn a_topic_with_thousands_of_subscribers() {
    const N: usize = 5000;
    let mut t = Topics::new(true, DEFAULT_MAX_TOPICS, crate::server::limits::command_rate::DEFAULT_PER_SECOND);
    let mut subs: Vec<Subs> = (0..N).map(|k| sub(&mut t, k, "all")).collect();
    assert_eq!(t.take_changes(), vec![("all".to_string(), true)], "only the first subscriber is a change");
    assert_eq!(sorted(t.audience("all")), (0..N).collect::<Vec<_>>());
    assert_eq!(t.counts(), (1, N as u64));
    t.subscribe(&mut subs[7], 7, b"all").unwrap();
    assert_eq!(t.counts(), (1, N as u64), "subscribing twice is once");
    for k in (0..N).rev().filter(|k| k % 2 == 1) {
        t.unsubscribe(&mut subs[k], k, b"all");
    }
    assert_eq!(sorted(t.subscribers("all")), (0..N).step_by(2).collect::<Vec<_>>());
    for k in (2..N).step_by(2) {
        t.forget(&subs[k], k);
    }
    assert!(t.many.is_empty(), "one left: inline");
    assert_eq!(t.subscribers("all"), vec![0]);
    assert!(t.take_changes().is_empty(), "the topic still has a subscriber");
    t.unsubscribe(&mut subs[0], 0, b"all");
    assert_eq!(t.take_changes(), vec![("all".to_string(), false)]);
    assert!(t.names.is_empty() && t.slots.is_empty() && t.many.is_empty());
}

/// Removing a connection that is not a subscriber changes nothing, in
/// either form.
#[test]
fn a_stranger_leaving_changes_nothing() {
    let mut t = Topics::default();
    let a = sub(&mut t, 1, "one");
    let (b, c) = (sub(&mut t, 2, "two"), sub(&mut t, 3, "two"));
    let id_one = t.id("one").unwrap();
    let id_two = t.id("two").unwrap();
    t.remove(id_one, 9);
    t.remove(id_two, 9);
    assert_eq!((t.subscribers("one"), sorted(t.subscribers("two"))), (vec![1], vec![2, 3]));
    t.forget(&a, 1);
    t.forget(&b, 2);
    t.forget(&c, 3);
    assert_eq!(t.counts(), (0, 0));
}

/// A freed id goes to the next new topic; the name index finds the new
/// name under it and no longer the old one, and names hashed into the
/// same table keep apart through their slots.
#[test]
fn a_reused_id_answers_to_its_new_name_only() {
    let mut t = Topics::default();
    let keep = sub(&mut t, 1, "keep");
    let mut gone = sub(&mut t, 2, "gone");
    let old = t.id("gone").unwrap();
    t.unsubscribe(&mut gone, 2, b"gone");
    let fresh = sub(&mut t, 3, "fresh");
    assert_eq!(t.id("fresh"), Some(old), "the freed id is reused");
    assert_eq!((t.id("gone"), t.name(old)), (None, Some("fresh")));
    let many: Vec<Subs> = (10..2010).map(|k| sub(&mut t, k, &format!("t/{k}"))).collect();
    for k in 10..2010 {
        assert_eq!(t.subscribers(&format!("t/{k}")), vec![k]);
        assert_eq!(t.name(t.id(&format!("t/{k}")).unwrap()), Some(format!("t/{k}").as_str()));
    }
    assert_eq!(t.subscribers("keep"), vec![1]);
    for (k, s) in (10..).zip(&many) {
        t.forget(s, k);
    }
    t.forget(&keep, 1);
    t.forget(&fresh, 3);
    assert_eq!(t.counts(), (0, 0));
}

/// Wildcard filters live in `wild`, not in the topic slots: a filter and
/// an exact topic on one connection reach it once, and leaving one keeps
/// the other.
#[test]
fn wildcard_filters_are_untouched_by_topics() {
    let mut t = Topics::default();
    let mut a = sub(&mut t, 1, "dev/1");
    t.subscribe_filter(&mut a, 1, "dev/+", String::new).unwrap();
    let b = sub(&mut t, 2, "dev/1");
    assert_eq!(t.counts(), (2, 3));
    assert_eq!(sorted(t.audience("dev/1")), vec![1, 2], "each once");
    assert_eq!(t.audience("dev/2"), vec![1]);
    t.unsubscribe(&mut a, 1, b"dev/1");
    assert_eq!(t.subscribers("dev/1"), vec![2]);
    assert_eq!(sorted(t.audience("dev/1")), vec![1, 2], "the filter stays");
    assert_eq!(t.names_of(&a), vec!["dev/+".to_string()]);
    t.forget(&b, 2);
    assert_eq!((t.id("dev/1"), t.audience("dev/1")), (None, vec![1]));
    t.forget(&a, 1);
    assert_eq!(t.counts(), (0, 0));
}

/// `--max-topics` refuses a new topic and leaves nothing behind; joining
/// a topic that exists is not refused, in either form.
#[test]
fn max_topics_refuses_only_new_topics() {
    let mut t = Topics::new(false, 1, crate::server::limits::command_rate::DEFAULT_PER_SECOND);
    let a = sub(&mut t, 1, "only");
    let mut b = Subs::new();
    assert_eq!(t.subscribe(&mut b, 2, b"other"), Err(Close::TooManyTopics));
    assert!(b.is_empty() && t.id("other").is_none() && t.slots.len() == 1);
    t.subscribe(&mut b, 2, b"only").unwrap();
    let c = sub(&mut t, 3, "only");
    assert_eq!(sorted(t.subscribers("only")), vec![1, 2, 3]);
    for (k, s) in [(1, &a), (2, &b), (3, &c)] {
        t.forget(s, k);
    }
    assert_eq!(t.counts(), (0, 0));
}
