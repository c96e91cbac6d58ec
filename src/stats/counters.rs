//! Counters declared once. A role (server, client) lists its counters in
//! one [`counters!`](crate::counters) block; the macro generates the
//! struct a worker fills and ships in its snapshot, the sum over workers,
//! the zeroing of a dead worker's gauges, the Prometheus registration
//! (name, help, label, unit) and the list the tests check `/metrics` and
//! `--json` against. Adding a counter is one line there plus its increment.
//!
//! Kinds:
//! - `counter`: cumulative `u64`, summed over every worker that ever ran
//!   (a dead worker's counts stay); exported as a Prometheus counter.
//! - `gauge`: a level right now, summed over live workers (zeroed when a
//!   worker dies); exported as a gauge.
//! - `bytes`: a gauge in bytes (exported with the `_bytes` unit).
//! - `micros`: a cumulative time in µs, exported as a `_seconds` counter.
//! - `by("label")`: counts per kind (`BTreeMap<String, u64>`), merged by
//!   key; exported as a counter family with that label.
//! - `levels("label")`: levels per kind right now (open connections by
//!   protocol), merged by key over live workers (zeroed when one dies);
//!   exported as a gauge family with that label.

use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::{Registry, Unit};
use std::collections::BTreeMap;

/// Counts per kind ("ECONNRESET", "2xx", ...).
pub(crate) type Kinds = BTreeMap<String, u64>;

/// Count one of `kind`: its key is allocated only the first time (a
/// per-message count, such as MQTT publishes by QoS, allocated a `String`
/// per message).
pub(crate) fn bump(kinds: &mut Kinds, kind: &str) {
    match kinds.get_mut(kind) {
        Some(n) => *n += 1,
        None => {
            kinds.insert(kind.to_string(), 1);
        }
    }
}

/// What one declared counter is, for registration and for tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Declared {
    /// The field (and JSON key).
    pub field: &'static str,
    /// The Prometheus metric name, without the role's prefix and suffixes.
    pub metric: &'static str,
    pub(crate) help: &'static str,
    pub kind: Kind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Bytes,
    Micros,
    By(&'static str),
    Levels(&'static str),
}

impl Kind {
    /// Whether the value is a level of live workers (zeroed when one dies).
    pub(crate) fn is_level(self) -> bool {
        matches!(self, Kind::Gauge | Kind::Bytes | Kind::Levels(_))
    }

    /// The metric family's name in the exposition (its `# HELP` line)
    /// for `metric` under `prefix`; counters' samples add `_total`.
    pub fn family_name(self, prefix: &str, metric: &str) -> String {
        match self {
            Kind::Counter | Kind::By(_) | Kind::Gauge | Kind::Levels(_) => format!("{prefix}_{metric}"),
            Kind::Bytes => format!("{prefix}_{metric}_bytes"),
            Kind::Micros => format!("{prefix}_{metric}_seconds"),
        }
    }
}

/// A scalar counter's part in the generated code.
pub(crate) trait Value: Default {
    /// A value that shows in every output (1, or one kind counted once).
    #[cfg(test)]
    fn example() -> Self;
    fn add(&mut self, other: &Self);
    fn zero(&mut self);
    fn register(&self, r: &mut Registry, d: &Declared);
}

impl Value for u64 {
    #[cfg(test)]
    fn example() -> Self {
        1
    }

    fn add(&mut self, other: &Self) {
        *self += other;
    }

    fn zero(&mut self) {
        *self = 0;
    }

    fn register(&self, r: &mut Registry, d: &Declared) {
        let v = *self;
        match d.kind {
            Kind::Counter => r.register(d.metric, d.help, ConstCounter::new(v)),
            Kind::Gauge => r.register(d.metric, d.help, ConstGauge::new(v as i64)),
            Kind::Bytes => r.register_with_unit(d.metric, d.help, Unit::Bytes, ConstGauge::new(v as i64)),
            Kind::Micros => r.register_with_unit(d.metric, d.help, Unit::Seconds, ConstCounter::new(v as f64 / 1e6)),
            Kind::By(_) | Kind::Levels(_) => unreachable!("a by(..) or levels(..) counter is a map"),
        }
    }
}

impl Value for Kinds {
    #[cfg(test)]
    fn example() -> Self {
        Kinds::from([("example".to_string(), 1)])
    }

    fn add(&mut self, other: &Self) {
        for (k, v) in other {
            *self.entry(k.clone()).or_insert(0) += v;
        }
    }

    fn zero(&mut self) {
        self.clear();
    }

    fn register(&self, r: &mut Registry, d: &Declared) {
        match d.kind {
            Kind::By(label) => r.register(d.metric, d.help, labeled(label, self)),
            Kind::Levels(label) => {
                let f = Family::<Vec<(String, String)>, Gauge>::default();
                for (k, v) in self {
                    f.get_or_create(&vec![(label.to_string(), k.clone())]).set(*v as i64);
                }
                r.register(d.metric, d.help, f);
            }
            _ => unreachable!("a map is a by(..) or levels(..) counter"),
        }
    }
}

/// A counter family with one label, from counts per kind.
pub(crate) fn labeled(label: &str, values: &Kinds) -> Family<Vec<(String, String)>, Counter> {
    let f = Family::<Vec<(String, String)>, Counter>::default();
    for (k, v) in values {
        f.get_or_create(&vec![(label.to_string(), k.clone())]).inc_by(*v);
    }
    f
}

/// Declare a role's counters once. See the module doc for the kinds.
/// The struct's visibility is its fields' and methods' too.
///
/// ```text
/// crate::counters! {
///     /// What a server worker counts.
///     pub struct ServerCounters {
///         accepted: counter "accepted" "Connections accepted",
///         close_reasons: by("reason") "closed" "Connections closed, by reason",
///     }
/// }
/// ```
macro_rules! counters {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $( $field:ident : $kind:ident $(($label:literal))? $metric:literal $help:literal, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Default, PartialEq, ::serde::Serialize, ::serde::Deserialize)]
        #[serde(default)]
        $vis struct $name {
            $( #[doc = $help] $vis $field: $crate::counters!(@ty $kind), )*
        }

        impl $name {
            /// Every counter of this role, in declaration order.
            $vis const DECLARED: &'static [$crate::stats::counters::Declared] = &[
                $( $crate::stats::counters::Declared {
                    field: stringify!($field),
                    metric: $metric,
                    help: $help,
                    kind: $crate::counters!(@kind $kind $(($label))?),
                }, )*
            ];

            /// Every counter set to a value that shows (tests of the outputs).
            #[cfg(test)]
            #[allow(dead_code)] // one API for every role: the output tests of some roles use it
            $vis fn example() -> Self {
                use $crate::stats::counters::Value;
                Self { $( $field: Value::example(), )* }
            }

            /// Add another worker's counters to these.
            #[allow(dead_code)] // one API for every role: a role with one worker's counters adds none
            $vis fn add(&mut self, other: &Self) {
                use $crate::stats::counters::Value;
                $( self.$field.add(&other.$field); )*
            }

            /// A worker died: its levels (open connections, memory) are gone;
            /// its cumulative counts stay.
            #[allow(dead_code)] // one API for every role: a supervisor's own counters outlive no worker
            $vis fn zero_levels(&mut self) {
                use $crate::stats::counters::Value;
                let mut i = 0;
                $(
                    if Self::DECLARED[i].kind.is_level() {
                        self.$field.zero();
                    }
                    i += 1;
                )*
                let _ = i;
            }

            /// Register every counter for `/metrics`.
            $vis fn register(&self, r: &mut ::prometheus_client::registry::Registry) {
                use $crate::stats::counters::Value;
                let mut i = 0;
                $(
                    self.$field.register(r, &Self::DECLARED[i]);
                    i += 1;
                )*
                let _ = i;
            }
        }
    };
    (@ty by) => { $crate::stats::counters::Kinds };
    (@ty levels) => { $crate::stats::counters::Kinds };
    (@ty $other:ident) => { u64 };
    (@kind counter) => { $crate::stats::counters::Kind::Counter };
    (@kind gauge) => { $crate::stats::counters::Kind::Gauge };
    (@kind bytes) => { $crate::stats::counters::Kind::Bytes };
    (@kind micros) => { $crate::stats::counters::Kind::Micros };
    (@kind by($label:literal)) => { $crate::stats::counters::Kind::By($label) };
    (@kind levels($label:literal)) => { $crate::stats::counters::Kind::Levels($label) };
}

/// A struct that carries a role's counters in field `counters` reads them
/// as its own fields (`snapshot.accepted`), so code that counts does not
/// spell out where the counters live.
macro_rules! counters_deref {
    ($outer:ty => $counters:ty) => {
        impl std::ops::Deref for $outer {
            type Target = $counters;
            fn deref(&self) -> &$counters {
                &self.counters
            }
        }

        impl std::ops::DerefMut for $outer {
            fn deref_mut(&mut self) -> &mut $counters {
                &mut self.counters
            }
        }
    };
}

// Crate-private: every role declares its counters inside the crate, and
// nothing outside it names the macros (`crate::counters!` through lib.rs).
pub(crate) use {counters, counters_deref};

#[cfg(test)]
mod tests {
    crate::counters! {
        /// A test role.
        pub(crate) struct Demo {
            open: gauge "connections" "Open now",
            accepted: counter "accepted" "Accepted",
            rss: bytes "resident_memory" "Memory",
            busy_us: micros "busy" "Busy time",
            closed: by("reason") "closed" "Closed, by reason",
            open_by: levels("protocol") "connections_by_protocol" "Open now, by protocol",
        }
    }

    /// A kind counted again costs no allocation; a new kind its key once.
    #[test]
    fn bump_allocates_a_kind_only_the_first_time() {
        let mut kinds = super::Kinds::new();
        super::bump(&mut kinds, "1");
        let ((), bytes) = crate::test_alloc::counted(|| (0..1000).for_each(|_| super::bump(&mut kinds, "1")));
        assert_eq!((kinds["1"], bytes), (1001, 0));
        super::bump(&mut kinds, "2");
        assert_eq!(kinds.len(), 2);
    }

    #[test]
    fn sums_zeroes_and_registers_every_declared_counter() {
        let mut a = Demo { open: 2, accepted: 5, rss: 100, busy_us: 1_500_000, ..Default::default() };
        a.closed.insert("peer_closed".into(), 1);
        a.open_by.insert("mqtt".into(), 2);
        let mut b = a.clone();
        b.add(&a);
        assert_eq!((b.open, b.accepted, b.rss, b.closed["peer_closed"], b.open_by["mqtt"]), (4, 10, 200, 2, 4));
        let mut levels = prometheus_client::registry::Registry::with_prefix("demo");
        b.register(&mut levels);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &levels).unwrap();
        assert!(text.contains("# TYPE demo_connections_by_protocol gauge") && text.contains("demo_connections_by_protocol{protocol=\"mqtt\"} 4"), "{text}");
        b.zero_levels();
        assert_eq!((b.open, b.accepted, b.rss, b.busy_us), (0, 10, 0, 3_000_000));
        assert!(b.open_by.is_empty(), "a level by kind is zeroed too");
        // A kind with none open still shows, at 0 (the worker reports it so).
        b.open_by.insert("ws".into(), 0);
        let mut r = prometheus_client::registry::Registry::with_prefix("demo");
        b.register(&mut r);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        for d in Demo::DECLARED {
            assert!(text.contains(&format!("# HELP {} ", d.kind.family_name("demo", d.metric))), "{} missing in {text}", d.field);
        }
        assert!(text.contains("demo_busy_seconds_total 3.0"), "{text}");
        assert!(text.contains("demo_closed_total{reason=\"peer_closed\"} 2"), "{text}");
        assert_eq!(Demo::example().closed["example"], 1);
        let json = serde_json::to_value(&b).unwrap();
        assert_eq!(Demo::DECLARED.iter().filter(|d| json.get(d.field).is_none()).count(), 0, "{json}");
    }
}
