//! Topic indexes by level, so that what a publish or a lookup costs
//! follows what can match it, never the number of filters or topics that
//! cannot (MQTT §4.7: `+` one level, `#` the rest and the parent level,
//! neither at the first level matching a `$` topic).
//!
//! - [`FilterTrie`]: MQTT filters with their values (who subscribed);
//!   [`FilterTrie::matching`] walks one path per level of a topic, the
//!   `+` and `#` branches beside it: a publish visits at most
//!   2^levels nodes however many filters the trie holds.
//! - [`TopicTree`]: topics with their values (retained messages);
//!   [`TopicTree::matching`] walks a filter down the tree: an exact level
//!   one child, `+` every child of that level, `#` everything below.
//!
//! Both are bounded by their callers (filters per worker, retained
//! messages per node) and free a node with its last value.

use std::collections::HashMap;

/// Levels of a topic split without an allocation when matched (deeper
/// topics are split into a `Vec`).
const STACK_LEVELS: usize = 16;

/// One level of a [`FilterTrie`].
#[derive(Debug)]
struct FilterNode<V> {
    children: HashMap<Box<str>, FilterNode<V>>,
    /// The `+` branch.
    plus: Option<Box<FilterNode<V>>>,
    /// A filter ending in `#` here (`a/#` is `a`'s `hash`).
    hash: Option<V>,
    /// A filter ending exactly here.
    here: Option<V>,
}

impl<V> Default for FilterNode<V> {
    fn default() -> Self {
        FilterNode { children: HashMap::new(), plus: None, hash: None, here: None }
    }
}

impl<V> FilterNode<V> {
    fn is_empty(&self) -> bool {
        self.children.is_empty() && self.plus.is_none() && self.hash.is_none() && self.here.is_none()
    }
}

/// MQTT filters (`+`, `#`, or none: an exact topic) and a value each.
#[derive(Debug)]
pub(crate) struct FilterTrie<V> {
    root: FilterNode<V>,
    len: usize,
}

impl<V> Default for FilterTrie<V> {
    fn default() -> Self {
        FilterTrie { root: FilterNode::default(), len: 0 }
    }
}

impl<V> FilterTrie<V> {
    /// Filters held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `filter`'s value, made with `make` if it has none.
    pub(crate) fn entry(&mut self, filter: &str, make: impl FnOnce() -> V) -> &mut V {
        let mut node = &mut self.root;
        let mut levels = filter.split('/').peekable();
        while let Some(level) = levels.next() {
            if level == "#" && levels.peek().is_none() {
                if node.hash.is_none() {
                    self.len += 1;
                }
                return node.hash.get_or_insert_with(make);
            }
            node = match level {
                "+" => node.plus.get_or_insert_with(Default::default),
                l => node.children.entry(l.into()).or_default(),
            };
        }
        if node.here.is_none() {
            self.len += 1;
        }
        node.here.get_or_insert_with(make)
    }

    /// `filter`'s value, if it has one.
    pub(crate) fn get_mut(&mut self, filter: &str) -> Option<&mut V> {
        let mut node = &mut self.root;
        let mut levels = filter.split('/').peekable();
        while let Some(level) = levels.next() {
            if level == "#" && levels.peek().is_none() {
                return node.hash.as_mut();
            }
            node = match level {
                "+" => node.plus.as_deref_mut()?,
                l => node.children.get_mut(l)?,
            };
        }
        node.here.as_mut()
    }

    /// Take `filter`'s value out, freeing the levels only it used.
    pub(crate) fn remove(&mut self, filter: &str) -> Option<V> {
        let levels: Vec<&str> = filter.split('/').collect();
        let v = remove_at(&mut self.root, &levels)?;
        self.len -= 1;
        Some(v)
    }

    /// Every value whose filter matches `topic`, once each. Run for every
    /// message routed: an empty trie costs nothing, and a topic of up to
    /// [`STACK_LEVELS`] levels is split on the stack.
    pub(crate) fn matching<'a>(&'a self, topic: &str, mut each: impl FnMut(&'a V)) {
        if self.len == 0 {
            return;
        }
        // Wildcards at the first level never match a `$` topic.
        let dollar = topic.starts_with('$');
        let mut stack = [""; STACK_LEVELS];
        let mut n = 0;
        for level in topic.split('/') {
            if n == STACK_LEVELS {
                let levels: Vec<&str> = topic.split('/').collect();
                return walk(&self.root, &levels, !dollar, &mut each);
            }
            stack[n] = level;
            n += 1;
        }
        walk(&self.root, &stack[..n], !dollar, &mut each);
    }

    /// Keep the values `keep` says to (it may change them), free the rest.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&mut V) -> bool) {
        let mut gone = 0;
        retain_in(&mut self.root, &mut keep, &mut gone);
        self.len -= gone;
    }
}

fn retain_in<V>(node: &mut FilterNode<V>, keep: &mut impl FnMut(&mut V) -> bool, gone: &mut usize) {
    for slot in [&mut node.here, &mut node.hash] {
        if slot.as_mut().is_some_and(|v| !keep(v)) {
            *slot = None;
            *gone += 1;
        }
    }
    if let Some(p) = node.plus.as_deref_mut() {
        retain_in(p, keep, gone);
        if p.is_empty() {
            node.plus = None;
        }
    }
    node.children.retain(|_, c| {
        retain_in(c, keep, gone);
        !c.is_empty()
    });
}

fn walk<'a, V>(node: &'a FilterNode<V>, levels: &[&str], wild: bool, each: &mut impl FnMut(&'a V)) {
    if wild {
        if let Some(v) = &node.hash {
            each(v);
        }
    }
    let Some((level, rest)) = levels.split_first() else {
        if let Some(v) = &node.here {
            each(v);
        }
        return;
    };
    if let Some(c) = node.children.get(*level) {
        walk(c, rest, true, each);
    }
    if wild {
        if let Some(p) = &node.plus {
            walk(p, rest, true, each);
        }
    }
}

fn remove_at<V>(node: &mut FilterNode<V>, levels: &[&str]) -> Option<V> {
    let Some((level, rest)) = levels.split_first() else { return node.here.take() };
    if *level == "#" && rest.is_empty() {
        return node.hash.take();
    }
    let v = match *level {
        "+" => {
            let child = node.plus.as_deref_mut()?;
            let v = remove_at(child, rest)?;
            if child.is_empty() {
                node.plus = None;
            }
            v
        }
        l => {
            let child = node.children.get_mut(l)?;
            let v = remove_at(child, rest)?;
            if child.is_empty() {
                node.children.remove(l);
            }
            v
        }
    };
    Some(v)
}

/// One level of a [`TopicTree`].
#[derive(Debug)]
struct TopicNode<V> {
    children: HashMap<Box<str>, TopicNode<V>>,
    value: Option<V>,
}

impl<V> Default for TopicNode<V> {
    fn default() -> Self {
        TopicNode { children: HashMap::new(), value: None }
    }
}

/// Topics and a value each, found by MQTT filter.
#[derive(Debug)]
pub(crate) struct TopicTree<V> {
    root: TopicNode<V>,
    len: usize,
}

impl<V> Default for TopicTree<V> {
    fn default() -> Self {
        TopicTree { root: TopicNode::default(), len: 0 }
    }
}

impl<V> TopicTree<V> {
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Set `topic`'s value; the old one.
    pub(crate) fn insert(&mut self, topic: &str, v: V) -> Option<V> {
        let mut node = &mut self.root;
        for level in topic.split('/') {
            node = node.children.entry(level.into()).or_default();
        }
        let old = node.value.replace(v);
        self.len += old.is_none() as usize;
        old
    }

    #[cfg(test)]
    pub(crate) fn get(&self, topic: &str) -> Option<&V> {
        let mut node = &self.root;
        for level in topic.split('/') {
            node = node.children.get(level)?;
        }
        node.value.as_ref()
    }

    pub(crate) fn remove(&mut self, topic: &str) -> Option<V> {
        fn go<V>(node: &mut TopicNode<V>, levels: &[&str]) -> Option<V> {
            let Some((level, rest)) = levels.split_first() else { return node.value.take() };
            let child = node.children.get_mut(*level)?;
            let v = go(child, rest)?;
            if child.value.is_none() && child.children.is_empty() {
                node.children.remove(*level);
            }
            Some(v)
        }
        let levels: Vec<&str> = topic.split('/').collect();
        let v = go(&mut self.root, &levels)?;
        self.len -= 1;
        Some(v)
    }

    /// Every (topic, value) `filter` matches, in no particular order,
    /// until `each` says stop (returns false). The topic is rebuilt in
    /// `path` as the walk goes.
    pub(crate) fn matching(&self, filter: &str, mut each: impl FnMut(&str, &V) -> bool) {
        let levels: Vec<&str> = filter.split('/').collect();
        let mut path = String::new();
        find(&self.root, &levels, true, &mut path, &mut each);
    }
}

/// Walk `levels` of a filter from `node`; false once `each` said stop.
fn find<V>(node: &TopicNode<V>, levels: &[&str], first: bool, path: &mut String, each: &mut impl FnMut(&str, &V) -> bool) -> bool {
    let Some((level, rest)) = levels.split_first() else {
        return node.value.as_ref().is_none_or(|v| each(path, v));
    };
    match *level {
        "#" => {
            // The parent level too: `a/#` matches `a`.
            if !first && !node.value.as_ref().is_none_or(|v| each(&path[..path.len().saturating_sub(1)], v)) {
                return false;
            }
            every(node, first, path, each)
        }
        "+" => {
            for (name, child) in &node.children {
                if first && name.starts_with('$') {
                    continue;
                }
                let len = path.len();
                path.push_str(name);
                if !rest.is_empty() {
                    path.push('/');
                }
                let go = find(child, rest, false, path, each);
                path.truncate(len);
                if !go {
                    return false;
                }
            }
            true
        }
        l => {
            let Some(child) = node.children.get(l) else { return true };
            let len = path.len();
            path.push_str(l);
            if !rest.is_empty() {
                path.push('/');
            }
            let go = find(child, rest, false, path, each);
            path.truncate(len);
            go
        }
    }
}

/// Every value below `node` (its own excluded); `$` children skipped at
/// the first level.
fn every<V>(node: &TopicNode<V>, first: bool, path: &mut String, each: &mut impl FnMut(&str, &V) -> bool) -> bool {
    for (name, child) in &node.children {
        if first && name.starts_with('$') {
            continue;
        }
        let len = path.len();
        path.push_str(name);
        if let Some(v) = &child.value {
            if !each(path, v) {
                return false;
            }
        }
        path.push('/');
        let go = every(child, false, path, each);
        path.truncate(len);
        if !go {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::mqtt::topic::matches;

    fn matched(t: &FilterTrie<String>, topic: &str) -> Vec<String> {
        let mut v = Vec::new();
        t.matching(topic, |f| v.push(f.clone()));
        v.sort();
        v
    }

    #[test]
    fn filters_match_by_mqtt_rules_and_free_their_levels() {
        let mut t = FilterTrie::default();
        for f in ["a/b", "a/+", "a/#", "#", "+/b", "+", "$SYS/#", "a/+/c", "sport/tennis/player1/#"] {
            *t.entry(f, String::new) = f.to_string();
        }
        assert_eq!(t.len(), 9);
        assert_eq!(matched(&t, "a/b"), ["#", "+/b", "a/#", "a/+", "a/b"]);
        assert_eq!(matched(&t, "a"), ["#", "+", "a/#"], "a/# matches its parent");
        assert_eq!(matched(&t, "$SYS/x"), ["$SYS/#"], "no first-level wildcard matches a $ topic");
        assert_eq!(matched(&t, "a/x/c"), ["#", "a/#", "a/+/c"]);
        assert_eq!(matched(&t, "sport/tennis/player1"), ["#", "sport/tennis/player1/#"]);
        for f in ["a/b", "a/+", "a/#", "#", "+/b", "+", "$SYS/#", "a/+/c", "sport/tennis/player1/#"] {
            assert_eq!(t.remove(f).as_deref(), Some(f));
        }
        assert!(t.is_empty() && t.root.is_empty(), "every level freed");
        assert_eq!(t.remove("a/b"), None);
    }

    #[test]
    fn topics_are_found_by_filter() {
        let mut t = TopicTree::default();
        for topic in ["a", "a/b", "a/b/c", "a/c", "$SYS/x", "b", "a//d"] {
            t.insert(topic, topic.to_string());
        }
        let found = |f: &str| {
            let mut v = Vec::new();
            t.matching(f, |topic, val| {
                assert_eq!(topic, val, "the path is the topic");
                v.push(topic.to_string());
                true
            });
            v.sort();
            v
        };
        assert_eq!(found("a/#"), ["a", "a//d", "a/b", "a/b/c", "a/c"]);
        assert_eq!(found("#"), ["a", "a//d", "a/b", "a/b/c", "a/c", "b"]);
        assert_eq!(found("+"), ["a", "b"]);
        assert_eq!(found("a/+"), ["a/b", "a/c"]);
        assert_eq!(found("$SYS/#"), ["$SYS/x"]);
        assert_eq!(found("a/b"), ["a/b"]);
        assert_eq!(found("a/+/d"), ["a//d"]);
        let mut n = 0;
        t.matching("#", |_, _| {
            n += 1;
            n < 2
        });
        assert_eq!(n, 2, "stops when told");
        assert_eq!(t.remove("a/b").as_deref(), Some("a/b"));
        assert_eq!(t.get("a/b/c").map(String::as_str), Some("a/b/c"));
        assert_eq!(t.len(), 6);
    }

    /// Nodes below `n`, `+` branches included (`n` itself not counted).
    fn nodes<V>(n: &FilterNode<V>) -> usize {
        n.children.values().map(|c| 1 + nodes(c)).sum::<usize>() + n.plus.as_deref().map_or(0, |p| 1 + nodes(p))
    }

    fn trie(filters: &[&str]) -> FilterTrie<String> {
        let mut t = FilterTrie::default();
        for f in filters {
            *t.entry(f, String::new) = f.to_string();
        }
        t
    }

    /// An empty level is a level like any other: `a//b` has three, `/a`
    /// and `a/` two; `+` takes an empty level, an exact filter only its
    /// own topic.
    #[test]
    fn empty_levels_are_levels() {
        let t = trie(&["a//b", "/a", "a/", "a/+/b", "+/a", "a/+", "+", "a"]);
        assert_eq!(t.len(), 8);
        assert_eq!(matched(&t, "a//b"), ["a/+/b", "a//b"]);
        assert_eq!(matched(&t, "a/b"), ["a/+"], "a//b is not a/b");
        assert_eq!(matched(&t, "/a"), ["+/a", "/a"]);
        assert_eq!(matched(&t, "a/"), ["a/", "a/+"]);
        assert_eq!(matched(&t, "a"), ["+", "a"], "a/ is not a");
        assert_eq!(matched(&t, "//"), Vec::<String>::new());
    }

    /// `#` alone matches every topic, of any depth and with empty
    /// levels, except those starting with `$` (MQTT 4.7.2).
    #[test]
    fn a_hash_alone_matches_everything_but_dollar_topics() {
        let t = trie(&["#"]);
        for topic in ["a", "a/b/c", "/", "/a", "a/", "a//b", "x/$y"] {
            assert_eq!(matched(&t, topic), ["#"], "{topic}");
        }
        for topic in ["$SYS", "$SYS/broker/load", "$", "$/a"] {
            assert!(matched(&t, topic).is_empty(), "{topic}");
        }
    }

    /// `sport/#` matches `sport` itself (MQTT 4.7.1.2), `sport/` and
    /// everything below, never a sibling whose name starts the same.
    #[test]
    fn a_trailing_hash_matches_its_parent_level_and_below_only() {
        let t = trie(&["sport/#", "sport/tennis/#"]);
        assert_eq!(matched(&t, "sport"), ["sport/#"]);
        assert_eq!(matched(&t, "sport/"), ["sport/#"]);
        assert_eq!(matched(&t, "sport/tennis"), ["sport/#", "sport/tennis/#"]);
        assert_eq!(matched(&t, "sport/tennis/player1/ranking"), ["sport/#", "sport/tennis/#"]);
        for topic in ["sports", "sportx/tennis", "spor", "tennis/sport", "/sport"] {
            assert!(matched(&t, topic).is_empty(), "{topic}");
        }
    }

    /// `+` is exactly one level, at the end or alone; `+/+` is exactly
    /// two, either of them possibly empty.
    #[test]
    fn a_plus_is_exactly_one_level() {
        let t = trie(&["+", "a/+", "+/+"]);
        assert_eq!(matched(&t, "a"), ["+"]);
        assert_eq!(matched(&t, "b"), ["+"]);
        assert_eq!(matched(&t, "a/b"), ["+/+", "a/+"]);
        assert_eq!(matched(&t, "a/"), ["+/+", "a/+"]);
        assert_eq!(matched(&t, "/b"), ["+/+"]);
        assert_eq!(matched(&t, "/"), ["+/+"]);
        assert!(matched(&t, "a/b/c").is_empty(), "neither + nor +/+ takes three levels");
        assert!(matched(&t, "b/c/d").is_empty());
    }

    /// A topic starting with `$` is not matched by a wildcard at the first
    /// level (`#`, `+`, `+/#`, `+/x`), only by filters naming that level;
    /// below the first level a `$` is an ordinary character.
    #[test]
    fn dollar_topics_escape_first_level_wildcards_only() {
        let t = trie(&["#", "+", "+/#", "+/x", "+/+", "$SYS/#", "$SYS/+", "$SYS", "a/+", "a/#"]);
        assert_eq!(matched(&t, "$SYS"), ["$SYS", "$SYS/#"], "$SYS/# matches its parent too");
        assert_eq!(matched(&t, "$SYS/x"), ["$SYS/#", "$SYS/+"]);
        assert_eq!(matched(&t, "$other/x"), Vec::<String>::new());
        assert_eq!(matched(&t, "a/$x"), ["#", "+/#", "+/+", "a/#", "a/+"]);
    }

    /// Each matching value is handed out once, however many ways lead to
    /// it, and a filter ending in `#` at every depth all match a deep topic.
    #[test]
    fn every_match_is_reported_once() {
        let t = trie(&["#", "+/#", "a/#", "a/+/#", "+/+/#", "a/b/#", "a/b"]);
        let mut all = Vec::new();
        t.matching("a/b", |f| all.push(f.clone()));
        assert_eq!(all.len(), 7, "{all:?}");
        assert_eq!(matched(&t, "a/b"), ["#", "+/#", "+/+/#", "a/#", "a/+/#", "a/b", "a/b/#"]);
        assert_eq!(matched(&t, "a"), ["#", "+/#", "a/#"]);
    }

    /// Topics deeper than the levels split on the stack (16) are matched
    /// the same way, by exact filters, `+` at every level and `#`.
    #[test]
    fn deep_topics_match_past_the_stack_levels() {
        for depth in [STACK_LEVELS - 1, STACK_LEVELS, STACK_LEVELS + 1, 3 * STACK_LEVELS] {
            let topic = (0..depth).map(|i| format!("l{i}")).collect::<Vec<_>>().join("/");
            let pluses = vec!["+"; depth].join("/");
            let shorter = vec!["+"; depth - 1].join("/");
            let last_hash = format!("{}/#", (0..depth - 1).map(|i| format!("l{i}")).collect::<Vec<_>>().join("/"));
            let t = trie(&[&topic, &pluses, &shorter, &last_hash, "#", "l0/#"]);
            let mut want = vec!["#".to_string(), "l0/#".to_string(), topic.clone(), pluses.clone(), last_hash.clone()];
            want.sort();
            assert_eq!(matched(&t, &topic), want, "depth {depth}");
            let deeper = format!("{topic}/more");
            let mut want = vec!["#".to_string(), "l0/#".to_string(), last_hash];
            want.sort();
            assert_eq!(matched(&t, &deeper), want, "depth {depth} + 1");
        }
    }

    /// There is no reference count: adding a filter again keeps its value
    /// (the maker is not called) and counts it once; one removal takes it
    /// out, a second finds nothing.
    #[test]
    fn a_filter_added_twice_is_held_once_and_removed_once() {
        let mut t: FilterTrie<u32> = FilterTrie::default();
        *t.entry("a/+", || 1) += 10;
        *t.entry("a/+", || panic!("made again")) += 100;
        *t.entry("a/#", || 2) += 0;
        assert_eq!(t.len(), 2);
        assert_eq!(t.get_mut("a/+").copied(), Some(111));
        assert_eq!(t.remove("a/+"), Some(111));
        assert_eq!(t.remove("a/+"), None);
        assert_eq!(t.len(), 1);
        let mut seen = Vec::new();
        t.matching("a/b", |v| seen.push(*v));
        assert_eq!(seen, [2], "a/+ is gone, a/# stays");
    }

    /// `a`, `a/#` and `a/+` are three filters with values of their own;
    /// `get_mut` and `remove` tell them apart.
    #[test]
    fn a_level_its_hash_and_its_plus_are_distinct_filters() {
        let mut t = trie(&["a", "a/#", "a/+", "#", "+"]);
        assert_eq!(t.len(), 5);
        assert_eq!(t.get_mut("a").map(|v| v.as_str()), Some("a"));
        assert_eq!(t.get_mut("a/#").map(|v| v.as_str()), Some("a/#"));
        assert_eq!(t.get_mut("a/+").map(|v| v.as_str()), Some("a/+"));
        assert_eq!(t.get_mut("#").map(|v| v.as_str()), Some("#"));
        assert_eq!(t.remove("a/#").as_deref(), Some("a/#"));
        assert_eq!(t.get_mut("a/#"), None);
        assert_eq!(matched(&t, "a"), ["#", "+", "a"]);
        assert_eq!(t.remove("#").as_deref(), Some("#"));
        assert_eq!(matched(&t, "a"), ["+", "a"]);
        assert_eq!(matched(&t, "a/b"), ["a/+"]);
        assert_eq!(t.len(), 3);
    }

    /// Looking up or removing a filter that is not there (a prefix of a
    /// held one, a longer one, an absent wildcard) changes nothing and
    /// makes no node.
    #[test]
    fn missing_filters_leave_the_trie_as_it_was() {
        let mut t = trie(&["a/b/c", "x/+/y"]);
        let before = nodes(&t.root);
        assert_eq!(before, 6, "a, b, c, x, +, y");
        for f in ["a", "a/b", "a/b/c/d", "a/+", "a/#", "x/+", "x/#", "#", "+", "x/y/y", "", "a//b"] {
            assert_eq!(t.get_mut(f), None, "{f}");
            assert_eq!(t.remove(f), None, "{f}");
        }
        assert_eq!((t.len(), nodes(&t.root)), (2, before));
        assert_eq!(matched(&t, "a/b/c"), ["a/b/c"]);
        assert_eq!(matched(&t, "x/q/y"), ["x/+/y"]);
    }

    /// Many filters sharing levels, added then removed in another order:
    /// each removal frees exactly the levels nobody else uses, and the
    /// last leaves an empty root, nothing matching.
    #[test]
    fn removing_every_filter_leaves_no_residue() {
        let mut filters: Vec<String> = Vec::new();
        for a in ["a", "b", "+", ""] {
            for b in ["x", "+", "#", "", "y/z", "+/#"] {
                filters.push(format!("{a}/{b}"));
            }
            filters.push(a.to_string());
        }
        filters.extend(["#".to_string(), "$SYS/#".to_string(), (0..20).map(|i| i.to_string()).collect::<Vec<_>>().join("/")]);
        let mut t = FilterTrie::default();
        for f in &filters {
            *t.entry(f, String::new) = f.clone();
        }
        assert_eq!(t.len(), filters.len());
        // Removed from the deepest up, then the rest backwards, each
        // counted off and the remaining filters still matching.
        let mut order = filters.clone();
        order.sort_by_key(|f| std::cmp::Reverse(f.len()));
        for (i, f) in order.iter().enumerate() {
            assert_eq!(t.remove(f).as_deref(), Some(f.as_str()), "{f}");
            assert_eq!(t.len(), filters.len() - i - 1);
            assert_eq!(t.get_mut(f), None, "{f} is gone");
            if let Some(next) = order.get(i + 1) {
                let topic = next.replace('+', "p").replace("/#", "").replace('#', "h");
                assert!(matched(&t, &topic).contains(next), "{next} still matches {topic}");
            }
        }
        assert!(t.is_empty() && t.root.is_empty() && nodes(&t.root) == 0, "every level freed");
        assert!(matched(&t, "a/x").is_empty());
    }

    /// `retain` drops what `keep` refuses, may change what it keeps, and
    /// frees the levels of the dropped ones.
    #[test]
    fn retain_keeps_changes_and_frees() {
        let mut t: FilterTrie<u32> = FilterTrie::default();
        for (i, f) in ["a/b", "a/+/c", "a/#", "+/d", "#", "e"].iter().enumerate() {
            *t.entry(f, || 0) = i as u32;
        }
        t.retain(|v| {
            *v += 100;
            *v % 2 == 0
        });
        assert_eq!(t.len(), 3, "a/b, a/#, # kept");
        let mut seen = Vec::new();
        t.matching("a/x/c", |v| seen.push(*v));
        seen.sort();
        assert_eq!(seen, [102, 104], "a/# and #, changed; a/+/c gone");
        assert_eq!(t.get_mut("a/b").copied(), Some(100));
        assert_eq!(nodes(&t.root), 2, "a and b left: the + branches and e freed");
        t.retain(|_| false);
        assert!(t.is_empty() && t.root.is_empty());
    }

    /// A topic tree's values replace, its removals free their levels
    /// (a prefix of a held topic is not one), and its count follows.
    #[test]
    fn topic_tree_replaces_removes_and_frees() {
        let mut t = TopicTree::default();
        assert_eq!(t.insert("a/b", 1), None);
        assert_eq!(t.insert("a/b", 2), Some(1));
        assert_eq!(t.insert("a/b/c", 3), None);
        assert_eq!(t.insert("a//", 4), None);
        assert_eq!(t.len(), 3);
        assert_eq!(t.remove("a"), None, "a prefix is not a topic");
        assert_eq!(t.remove("a/b/c/d"), None);
        assert_eq!(t.remove("a/b"), Some(2));
        assert_eq!(t.get("a/b/c"), Some(&3), "its child stays");
        assert_eq!(t.get("a/b"), None);
        assert_eq!(t.remove("a/b/c"), Some(3));
        assert_eq!(t.remove("a//"), Some(4));
        assert_eq!(t.len(), 0);
        assert!(t.root.children.is_empty(), "every level freed");
    }

    /// A topic tree found by filter: `+/#` and `+/+` across empty levels,
    /// `$` topics only by a filter naming their first level, `a/#` with
    /// its parent reported by the parent's own name.
    #[test]
    fn topic_tree_wildcards_follow_mqtt_rules() {
        let mut t = TopicTree::default();
        for topic in ["a", "a/b", "/a", "a/", "$SYS", "$SYS/x", "b/$y", "c/d/e"] {
            t.insert(topic, topic.to_string());
        }
        let found = |f: &str| {
            let mut v = Vec::new();
            t.matching(f, |topic, val| {
                assert_eq!(topic, val, "the path is the topic, for {f}");
                v.push(topic.to_string());
                true
            });
            v.sort();
            v
        };
        assert_eq!(found("+/#"), ["/a", "a", "a/", "a/b", "b/$y", "c/d/e"]);
        assert_eq!(found("+/+"), ["/a", "a/", "a/b", "b/$y"]);
        assert_eq!(found("+"), ["a"]);
        assert_eq!(found("$SYS/#"), ["$SYS", "$SYS/x"]);
        assert_eq!(found("$SYS/+"), ["$SYS/x"]);
        assert_eq!(found("+/x"), Vec::<String>::new(), "not $SYS/x");
        assert_eq!(found("b/+"), ["b/$y"], "below the first level $ is ordinary");
        assert_eq!(found("a/+"), ["a/", "a/b"]);
        assert_eq!(found("c/#"), ["c/d/e"], "c itself holds nothing");
        assert_eq!(found("c/d/e/#"), ["c/d/e"]);
        assert_eq!(found("x/#"), Vec::<String>::new());
    }

    proptest::proptest! {
        /// Against `topic::matches` for every pair: the trie finds exactly
        /// the filters that match, the tree exactly the topics.
        #[test]
        fn both_agree_with_the_matcher(
            filters in proptest::collection::vec("(\\$?[ab]{0,2}|\\+)(/([ab]{0,2}|\\+)){0,2}(/#)?|#", 1..12),
            topics in proptest::collection::vec("\\$?[ab]{0,2}(/[ab]{0,2}){0,3}", 1..12),
        ) {
            let mut trie = FilterTrie::default();
            let mut tree = TopicTree::default();
            for f in &filters {
                *trie.entry(f, String::new) = f.clone();
            }
            for t in &topics {
                tree.insert(t, t.clone());
            }
            for t in &topics {
                let mut want: Vec<String> = filters.iter().filter(|f| matches(f, t)).cloned().collect();
                want.sort();
                want.dedup();
                proptest::prop_assert_eq!(matched(&trie, t), want, "topic {}", t);
            }
            for f in &filters {
                let mut want: Vec<String> = topics.iter().filter(|t| matches(f, t)).cloned().collect();
                want.sort();
                want.dedup();
                let mut got = Vec::new();
                tree.matching(f, |t, _| { got.push(t.to_string()); true });
                got.sort();
                proptest::prop_assert_eq!(got, want, "filter {}", f);
            }
        }
    }
}
