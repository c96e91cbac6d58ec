//! The server's `/metrics`: every declared counter ([`ServerCounters`]),
//! plus what only the supervisor knows (worker states, publishes, the push
//! latency histogram, the cluster link).
//!
//! [`ServerCounters`]: crate::server::snapshot::ServerCounters

use crate::server::supervisor::view::ServerTotals;
use crate::stats::exposition::{encode, BucketedHistogram};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::{Registry, Unit};

/// The prefix of every server metric.
pub(crate) const PREFIX: &str = "megaconn";

/// Render the totals (with the supervisor's own counters: the
/// publisher's publishes, history and retained messages; in a cluster,
/// its NATS link).
/// The supervisor's own counters beside the workers' and the broker's.
pub(crate) struct Own<'a> {
    pub config: &'a super::reload::ConfigCounters,
    pub hook: Option<&'a crate::server::broker::auth_hook::HookCounters>,
    pub authz: Option<&'a crate::server::broker::auth_hook::AuthzCounters>,
}

pub(crate) fn render(
    t: &ServerTotals,
    publisher: &crate::server::broker::publish::Publisher,
    own: Own<'_>,
    accept_queue: u64,
    link: Option<&crate::cluster::LinkStatus>,
    admin: Option<&crate::admin::AdminCounters>,
    upstream: Option<&crate::server::broker::upstream::UpstreamCounters>,
) -> String {
    let mut r = Registry::with_prefix(PREFIX);
    t.counters.register(&mut r);
    let (history, retained, broker, shared) = publisher.broker_counters();
    history.register(&mut r);
    retained.register(&mut r);
    broker.register(&mut r);
    publisher.sessions.counters.register(&mut r);
    shared.register(&mut r);
    own.config.register(&mut r);
    if let Some(h) = own.hook {
        h.register(&mut r);
    }
    if let Some(h) = own.authz {
        h.register(&mut r);
    }
    if let Some(a) = admin {
        a.register(&mut r);
    }
    if let Some(u) = upstream {
        u.register(&mut r);
    }
    let service = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
    service.set(t.applied_service_ms / 1000.0);
    r.register_with_unit("business_service_mean", "Mean business service time applied per reply", Unit::Seconds, service);
    r.register("push_published", "Messages published through the admin API", ConstCounter::new(publisher.published));
    let queue = Gauge::<i64>::default();
    queue.set(accept_queue as i64);
    r.register("accept_queue", "Connections the kernel completed that no worker has accepted yet (their clients count them as connected)", queue);
    r.register_with_unit(
        "push_delivery_latency",
        "Time from publish to the write to the socket",
        Unit::Seconds,
        BucketedHistogram::from_buckets(&t.push_latency_buckets, t.push_latency_sum_us),
    );
    let workers = Family::<Vec<(String, String)>, Gauge>::default();
    workers.get_or_create(&vec![("state".into(), "accepting".into())]).set(t.accepting as i64);
    workers.get_or_create(&vec![("state".into(), "full".into())]).set(t.full as i64);
    workers.get_or_create(&vec![("state".into(), "total".into())]).set(t.workers as i64);
    r.register("workers", "Worker processes", workers);
    if let Some(l) = link {
        let c = r.sub_registry_with_prefix("cluster");
        c.register("link_up", "1 while the NATS link is connected, 0 while it is down", ConstGauge::new(l.up as i64));
        c.register("reconnects", "Times the NATS link came back after being lost", ConstCounter::new(l.reconnects));
        c.register("messages_in", "Messages received from other nodes", ConstCounter::new(l.messages_in));
        c.register("messages_out", "Messages sent to other nodes", ConstCounter::new(l.messages_out));
        c.register("publish_failures", "Publishes refused (503): the link was down or NATS did not confirm", ConstCounter::new(l.publish_failures));
        c.register("topics", "Topic subjects this node subscribes to", ConstGauge::new(l.topics as i64));
        c.register("peers", "Other cluster nodes heard in the last 15 s", ConstGauge::new(l.peers as i64));
        let refused = Family::<Vec<(String, String)>, prometheus_client::metrics::counter::Counter>::default();
        for reason in ["unsigned", "forged", "stale", "reply", "malformed", "replay"] {
            refused.get_or_create(&vec![("reason".into(), reason.into())]).inc_by(l.refused.get(reason).copied().unwrap_or(0));
        }
        if let Some(h) = &l.history {
            h.counters.register(c.sub_registry_with_prefix("history"));
        }
        c.register("refused", "Messages from NATS dropped unread: unsigned, forged (wrong key), stale (outside the signing window), reply (answer asked outside the origin's inbox), malformed, replay (a copy of a message already taken)", refused);
    }
    encode(&r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::snapshot::ServerCounters;

    #[test]
    fn renders_every_declared_counter_with_conventional_names() {
        let mut t = ServerTotals { counters: ServerCounters::example(), ..Default::default() };
        t.counters.active = 7;
        t.counters.accepted = 9;
        t.counters.close_reasons.insert("peer_closed".into(), 2);
        t.push_latency_buckets = vec![1, 2];
        let mut publisher = crate::server::broker::publish::Publisher::for_test();
        publisher.published = 3;
        {
            let mut core = publisher.shards.core(0);
            core.history.counters = crate::server::broker::history::HistoryCounters::example();
            core.retained.counters = crate::server::broker::retained::RetainedCounters::example();
            core.counters = crate::server::broker::core::CoreCounters::example();
        }
        publisher.sessions.counters = crate::server::broker::sessions::SessionCounters::example();
        publisher.shared.counters = crate::server::broker::shared::SharedCounters::example();
        let text = render(
            &t,
            &publisher,
            Own {
                config: &super::super::reload::ConfigCounters::example(),
                hook: Some(&crate::server::broker::auth_hook::HookCounters::example()),
                authz: Some(&crate::server::broker::auth_hook::AuthzCounters::example()),
            },
            7,
            None,
            None,
            None,
        );
        for d in ServerCounters::DECLARED
            .iter()
            .chain(crate::server::broker::history::HistoryCounters::DECLARED)
            .chain(crate::server::broker::retained::RetainedCounters::DECLARED)
            .chain(crate::server::broker::core::CoreCounters::DECLARED)
            .chain(crate::server::broker::sessions::SessionCounters::DECLARED)
            .chain(crate::server::broker::shared::SharedCounters::DECLARED)
            .chain(super::super::reload::ConfigCounters::DECLARED)
            .chain(crate::server::broker::auth_hook::HookCounters::DECLARED)
            .chain(crate::server::broker::auth_hook::AuthzCounters::DECLARED)
        {
            assert!(text.contains(&format!("# HELP {} ", d.kind.family_name(PREFIX, d.metric))), "{} missing from {text}", d.field);
        }
        assert!(text.contains("megaconn_connections 7"), "{text}");
        assert!(text.contains("megaconn_accepted_total 9"), "{text}");
        assert!(text.contains("megaconn_closed_total{reason=\"peer_closed\"} 2"), "{text}");
        assert!(text.contains("megaconn_push_delivery_latency_seconds_bucket{le=\"0.001\"} 1"), "{text}");
        assert!(text.contains("megaconn_push_delivery_latency_seconds_count 3"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert!(text.contains("megaconn_accept_queue 7"), "{text}");
        let with_link = |link: &crate::cluster::LinkStatus| {
            render(
                &t,
                &crate::server::broker::publish::Publisher::for_test(),
                Own { config: &Default::default(), hook: None, authz: None },
                0,
                Some(link),
                None,
                None,
            )
        };
        let link = crate::cluster::LinkStatus { up: true, reconnects: 2, ..Default::default() };
        let text = with_link(&link);
        assert!(text.contains("megaconn_cluster_link_up 1"), "{text}");
        assert!(text.contains("megaconn_cluster_reconnects_total 2"), "{text}");
        let link = crate::cluster::LinkStatus { refused: [("forged".to_string(), 3)].into(), ..Default::default() };
        let text = with_link(&link);
        assert!(text.contains("megaconn_cluster_refused_total{reason=\"forged\"} 3"), "{text}");
        assert!(text.contains("megaconn_cluster_refused_total{reason=\"unsigned\"} 0"), "{text}");
        let history = crate::cluster::LogStatus {
            stream: "MEGACONN".into(),
            storage: crate::cluster::log::Storage::File,
            counters: crate::cluster::log::LogCounters::example(),
        };
        let link = crate::cluster::LinkStatus { history: Some(history), ..Default::default() };
        let text = render(
            &t,
            &crate::server::broker::publish::Publisher::for_test(),
            Own { config: &Default::default(), hook: None, authz: None },
            0,
            Some(&link),
            None,
            None,
        );
        for d in crate::cluster::log::LogCounters::DECLARED {
            assert!(text.contains(&format!("megaconn_cluster_history_{}_total ", d.metric)), "{}: {text}", d.metric);
        }
    }
}
