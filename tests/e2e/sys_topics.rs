//! `$SYS` topics as mosquitto names them (issue 65): Debian's mosquitto
//! (`sys_interval 1`) and megaconn (`--sys-interval 1s`) watched by the
//! same Debian `mosquitto_sub -t '$SYS/#'`: every topic megaconn
//! publishes is one mosquitto publishes, the ones dashboards read are
//! there, and the values count what happened (the watcher's own
//! connection, a publish).
use crate::common::*;
use crate::mqtt::mqtt_server;
use crate::mqtt_client::Mosquitto;
use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

/// What `mosquitto_sub -t '$SYS/#'` on `port` hears until it has seen
/// the uptime three times (the retained tree, then two updates): the
/// last payload of each topic. `during` runs once it subscribed.
fn sys_tree(port: u16, during: impl FnOnce()) -> BTreeMap<String, String> {
    let mut cmd = Command::new("mosquitto_sub");
    cmd.args(["-h", "127.0.0.1", "-p", &port.to_string(), "-t", "$SYS/#", "-W", "60", "-F", "%t\t%p"]);
    let mut sub = Peer::spawn("mosquitto_sub $SYS/#", cmd);
    let mut tree = BTreeMap::new();
    let mut uptimes = 0;
    let mut during = Some(during);
    while uptimes < 3 {
        let line = sub.line(Duration::from_secs(30), "a $SYS message");
        let (topic, payload) = line.split_once('\t').unwrap_or((&line, ""));
        if topic.ends_with("/uptime") {
            uptimes += 1;
            if let Some(f) = during.take() {
                f();
            }
        }
        tree.insert(topic.to_string(), payload.to_string());
    }
    tree
}

/// One QoS 1 publish with Debian's mosquitto_pub.
fn publish(port: u16) {
    let mut cmd = Command::new("mosquitto_pub");
    cmd.args(["-h", "127.0.0.1", "-p", &port.to_string(), "-t", "a/b", "-q", "1", "-m", "x"]);
    Peer::spawn("mosquitto_pub", cmd).finish_ok(Duration::from_secs(30));
}

/// The names dashboards written for mosquitto read.
const CORE: [&str; 17] = [
    "$SYS/broker/version",
    "$SYS/broker/uptime",
    "$SYS/broker/clients/connected",
    "$SYS/broker/clients/disconnected",
    "$SYS/broker/clients/total",
    "$SYS/broker/clients/maximum",
    "$SYS/broker/messages/received",
    "$SYS/broker/messages/sent",
    "$SYS/broker/bytes/received",
    "$SYS/broker/bytes/sent",
    "$SYS/broker/publish/messages/received",
    "$SYS/broker/subscriptions/count",
    "$SYS/broker/retained messages/count",
    "$SYS/broker/load/publish/received/1min",
    "$SYS/broker/load/bytes/received/1min",
    "$SYS/broker/publish/bytes/received",
    "$SYS/broker/publish/bytes/sent",
];

#[test]
fn sys_topics_are_named_as_mosquitto_names_them() {
    let mosquitto = Mosquitto::start_with("sys_interval 1\n");
    let theirs = sys_tree(mosquitto.port, || publish(mosquitto.port));
    drop(mosquitto);
    let (mut s, _, port) = mqtt_server(&["--sys-interval", "1s"]);
    let ours = sys_tree(port, || publish(port));
    for name in CORE {
        assert!(theirs.contains_key(name), "mosquitto publishes {name}: {theirs:?}");
        assert!(ours.contains_key(name), "megaconn publishes {name}: {ours:?}");
    }
    for name in ours.keys() {
        assert!(theirs.contains_key(name), "megaconn's {name} is not a topic mosquitto publishes: {theirs:?}");
    }
    assert!(ours["$SYS/broker/version"].starts_with("megaconn version "), "{ours:?}");
    assert!(ours["$SYS/broker/uptime"].ends_with(" seconds"), "{ours:?}");
    let n = |k: &str| ours[k].parse::<u64>().unwrap_or_else(|_| panic!("{k}: {}", ours[k]));
    assert!(n("$SYS/broker/clients/connected") >= 1, "the watcher itself: {ours:?}");
    assert!(n("$SYS/broker/publish/messages/received") >= 1, "mosquitto_pub's publish: {ours:?}");
    // At least mosquitto_pub's CONNECT, PUBLISH and DISCONNECT, and this
    // watcher's CONNACK, SUBACK and the tree itself.
    assert!(n("$SYS/broker/bytes/received") >= 40, "{ours:?}");
    assert!(n("$SYS/broker/bytes/sent") >= 100, "{ours:?}");
    assert!(n("$SYS/broker/subscriptions/count") >= 1, "the watcher's $SYS/#: {ours:?}");
    assert!(n("$SYS/broker/publish/bytes/received") >= 1, "mosquitto_pub's payload: {ours:?}");
    s.terminate();
}

/// Without `--sys-interval` the tree is published every 10 s, as
/// mosquitto's default does: there at once for a subscriber, yet held
/// apart from the application's retained messages (its counts and
/// bounds; `--mqtt-retained-file` leaves it out, a unit test).
#[test]
fn the_tree_is_on_by_default_and_apart_from_the_applications_retained_messages() {
    let (mut s, admin, port) = mqtt_server(&[]);
    let got = crate::mqtt::mosquitto_sub_first(port, "$SYS/broker/version", 1);
    assert!(got.len() == 1 && got[0].starts_with("1 $SYS/broker/version megaconn version "), "retained, from the start: {got:?}");
    let v = crate::mqtt::stats_when(&admin, "the tree held", |v| v["mqtt_retained"]["sys"].as_u64() >= Some(30));
    assert_eq!((&v["mqtt_retained"]["messages"], &v["mqtt_retained"]["stored"]), (&0.into(), &0.into()), "not the application's: {}", v["mqtt_retained"]);
    s.terminate();
}
