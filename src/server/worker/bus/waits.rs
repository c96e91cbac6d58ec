//! New subscriptions waiting for their retained answers. A subscription
//! asks the shards that may hold retained messages for its filter (its
//! topic's shard, or every shard for a wildcard); each shard answers
//! every ask, in the order asked, even with nothing
//! (`broker/core.rs`). A retained message a shard routed before it
//! answered is in that answer, so its live copy, which reaches this
//! worker when another of its connections already follows the topic, is
//! held back from the waiting connection: it gets the message once, as
//! the retained answer. What the shard routes after it answered comes
//! after the answer on the same socket, and is delivered as usual.

use crate::proto::mqtt::topic;

/// Asks in flight at most (past it an ask is not held: its subscription
/// may get a retained message twice, never none; counted).
pub(crate) const MAX_WAITS: usize = 4096;

/// One subscription's ask: its connection (`commands::conn_id`), its
/// filter, the shards yet to answer.
#[derive(Debug)]
struct Wait {
    conn: u64,
    filter: Box<str>,
    shards: Vec<u32>,
}

#[derive(Debug, Default)]
pub(crate) struct Waits {
    waits: Vec<Wait>,
    /// Asks not held, past [`MAX_WAITS`].
    pub not_held: u64,
}

impl Waits {
    /// Connection `conn` asked `shards` for the retained messages of `filter`.
    pub(crate) fn asked(&mut self, conn: u64, filter: &str, shards: impl Iterator<Item = usize>) {
        if self.waits.len() >= MAX_WAITS {
            self.not_held += 1;
            return;
        }
        self.waits.push(Wait { conn, filter: filter.into(), shards: shards.map(|s| s as u32).collect() });
    }

    /// Shard `shard` answered `conn`'s oldest ask of it.
    pub(crate) fn answered(&mut self, shard: usize, conn: u64) {
        let shard = shard as u32;
        let Some(i) = self.waits.iter().position(|w| w.conn == conn && w.shards.contains(&shard)) else { return };
        let w = &mut self.waits[i];
        w.shards.retain(|s| *s != shard);
        if w.shards.is_empty() {
            self.waits.remove(i);
        }
    }

    /// The connections a retained message on `name` routed by `shard` is
    /// held back from: those waiting for that shard's answer to a filter
    /// it matches.
    pub(crate) fn held(&self, shard: usize, name: &str) -> Vec<u64> {
        let shard = shard as u32;
        self.waits.iter().filter(|w| w.shards.contains(&shard) && topic::matches(&w.filter, name)).map(|w| w.conn).collect()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.waits.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_held_back_until_its_shard_answered_the_matching_ask() {
        let mut w = Waits::default();
        w.asked(7, "a/+", 0..2);
        w.asked(7, "a/b", std::iter::once(1));
        w.asked(8, "x", std::iter::once(1));
        assert_eq!(w.held(1, "a/b"), vec![7, 7]);
        assert_eq!(w.held(1, "c"), Vec::<u64>::new());
        w.answered(1, 7);
        assert_eq!(w.held(1, "a/b"), vec![7], "the older ask of shard 1 is answered, the newer waits");
        assert_eq!(w.held(0, "a/b"), vec![7]);
        w.answered(1, 7);
        w.answered(0, 7);
        assert_eq!(w.held(0, "a/b"), Vec::<u64>::new());
        assert_eq!(w.held(1, "x"), vec![8]);
        w.answered(1, 8);
        w.answered(1, 8);
        assert!(w.is_empty(), "an answer nobody waits for is no error");
    }

    #[test]
    fn asks_in_flight_are_bounded() {
        let mut w = Waits::default();
        for i in 0..MAX_WAITS as u64 + 3 {
            w.asked(i, "t", std::iter::once(0));
        }
        assert_eq!((w.waits.len(), w.not_held), (MAX_WAITS, 3));
    }
}
