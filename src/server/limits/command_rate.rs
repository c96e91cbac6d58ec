//! A bound on the commands one connection may send per second:
//! subscribe, unsubscribe, resume and token refresh. Each costs the worker
//! a topic lookup and a subscriber-set change, maybe a signature check and
//! a presence change that travels to every node; without a bound one
//! client flipping a subscription in a loop keeps a worker busy for all
//! the others. Counted per connection over the current second, and only
//! for connections that sent one: nothing is kept for an idle connection.
//! A connection's count goes with it ([`CommandRate::forget`]): the next
//! connection in its slab slot starts with a budget of its own.
//! A connection past the bound (`--max-commands-per-second`) is closed as
//! `too_many_commands`.

use crate::server::close::Close;
use std::collections::HashMap;

/// Default `--max-commands-per-second`. Generous for any client that
/// means well: subscribing to its 64 topics after a reconnect, with a
/// resume each and a token refresh, is 129.
pub(crate) const DEFAULT_PER_SECOND: u32 = 200;
/// The close reason of a connection past its bound.
#[cfg(test)]
pub(crate) const TOO_MANY_COMMANDS: &str = "too_many_commands";
/// Above this many entries the map's memory is given back at the tick
/// (a storm of many connections must not leave a large table behind).
const SHRINK_ABOVE: usize = 4096;

pub(crate) struct CommandRate {
    /// Commands per slab key since the last tick.
    this_second: HashMap<usize, u32>,
    /// `--max-commands-per-second`.
    limit: u32,
}

impl CommandRate {
    pub(crate) fn new(limit: u32) -> CommandRate {
        CommandRate { this_second: HashMap::new(), limit }
    }

    /// Connection `key` sends one more command; Err once it is past the bound.
    pub(crate) fn charge(&mut self, key: usize) -> Result<(), Close> {
        let n = self.this_second.entry(key).or_insert(0);
        *n += 1;
        if *n > self.limit {
            return Err(Close::TooManyCommands);
        }
        Ok(())
    }

    /// Connection `key` closed: its count goes (its slot's next
    /// connection is another client).
    pub(crate) fn forget(&mut self, key: usize) {
        self.this_second.remove(&key);
    }

    /// A new second begins (called once a second).
    pub(crate) fn tick(&mut self) {
        if self.this_second.capacity() > SHRINK_ABOVE {
            self.this_second = HashMap::new();
        } else {
            self.this_second.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_connection_has_its_own_budget_per_second() {
        let mut r = CommandRate::new(DEFAULT_PER_SECOND);
        for _ in 0..DEFAULT_PER_SECOND {
            assert_eq!(r.charge(1), Ok(()));
        }
        assert_eq!(r.charge(1), Err(Close::TooManyCommands));
        assert_eq!(r.charge(2), Ok(()), "another connection is not charged for it");
        r.tick();
        assert_eq!(r.charge(1), Ok(()), "a new second, a new budget");
    }

    /// Issue 62, finding 7: the next connection in a slot is not charged
    /// for the one before it.
    #[test]
    fn a_closed_connection_takes_its_count_with_it() {
        let mut r = CommandRate::new(3);
        for _ in 0..3 {
            r.charge(5).unwrap();
        }
        assert_eq!(r.charge(5), Err(Close::TooManyCommands));
        r.forget(5);
        assert_eq!(r.charge(5), Ok(()), "a fresh budget in the same slot");
    }
}
