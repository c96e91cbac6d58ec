//! The MQTT speaker heard on bytes alone: keep-alive, packet ids,
//! refusals, stamped deliveries per QoS and QoS 2 both ways.

use super::*;

#[test]
fn keep_alive_is_twice_the_heartbeat() {
    use std::time::Duration;
    assert_eq!(keep_alive(None, 0), 0);
    assert_eq!(keep_alive(None, 200), 0, "no heartbeats: no keep-alive, whatever the ramp");
    assert_eq!(keep_alive(Some(Duration::from_secs(30)), 0), 60);
    assert_eq!(keep_alive(Some(Duration::from_secs(30)), 197), 257, "the ramp is covered");
    assert_eq!(keep_alive(Some(Duration::from_millis(200)), 0), 2);
    assert_eq!(keep_alive(Some(Duration::from_secs(100_000)), 0), u16::MAX);
    assert_eq!(keep_alive(Some(Duration::from_secs(30)), u32::MAX), u16::MAX);
}

#[test]
fn answers_are_matched_by_packet_id() {
    let mut q: Inflight = None;
    track(&mut q, 0, 10);
    track(&mut q, 7, 20);
    track(&mut q, 0, 30);
    assert_eq!(answered(&mut q, 7), Some(20));
    assert_eq!(answered(&mut q, 7), None);
    assert_eq!(answered(&mut q, 0), Some(10));
    assert_eq!(answered(&mut q, 0), Some(30));
    for i in 0..MAX_INFLIGHT as u64 + 1 {
        track(&mut q, 1, i);
    }
    assert_eq!(q.as_ref().unwrap().len(), MAX_INFLIGHT);
    assert_eq!(answered(&mut q, 1), Some(1));
}

#[test]
fn refusals_are_named_as_each_standard_writes_them() {
    assert_eq!(connack_reason(false, 5), "mqtt_connack_5");
    assert_eq!(connack_reason(true, 0x87), "mqtt_connack_0x87");
    assert!(check_filter("dev/{conn}/#").is_ok());
    assert!(check_filter("a/#/b").is_err());
}

mod heard {
    use super::*;
    use crate::client::speak::hearing::{same_at_every_cut, Hearing, NOW};
    use crate::net::ReadEnd;
    use crate::proto::Protocol;

    fn make() -> (Box<dyn Speaker>, Hearing) {
        let traffic = make_traffic();
        let mut h = Hearing::new(true);
        track(&mut h.inflight, 0, NOW - 500);
        track(&mut h.inflight, 9, NOW - 700);
        (Box::new(MqttSpeaker::new(&traffic, 0)), h)
    }

    fn wire(packets: &[Packet<'_>]) -> Vec<u8> {
        let mut out = Vec::new();
        for p in packets {
            encode::packet(p, Version::V311, &mut out).unwrap();
        }
        out
    }

    fn connack(code: u8) -> Packet<'static> {
        Packet::ConnAck(mqtt::ConnAck { session_present: false, code, properties: Default::default() })
    }

    fn publish(qos: QoS, packet_id: u16) -> Packet<'static> {
        Packet::Publish(mqtt::Publish { dup: false, qos, retain: false, topic: "dev/0", packet_id, properties: Default::default(), payload: b"hi" })
    }

    #[test]
    fn packets_cut_anywhere_are_accounted_as_whole() {
        let bytes = wire(&[
            connack(0),
            Packet::SubAck(mqtt::SubAck { packet_id: SUBSCRIBE_ID, properties: Default::default(), codes: vec![0] }),
            publish(QoS::AtLeastOnce, 4),
            Packet::PingResp,
            Packet::PubAck(mqtt::Ack { packet_id: 9, ..Default::default() }),
            publish(QoS::AtMostOnce, 0),
        ]);
        let (end, _, h) = same_at_every_cut(&make, &bytes[..bytes.len() - 1]);
        assert_eq!(end, ReadEnd::Open);
        assert!(!h.upgrading, "the CONNACK established the connection");
        assert_eq!(h.stats.mqtt_subscriptions.get("granted"), Some(&1));
        assert_eq!((h.stats.push_received, h.stats.heartbeats_answered, h.stats.replies), (1, 1, 1));
        // The SUBSCRIBE, then the QoS 1 PUBLISH's PUBACK.
        let mut expected = Vec::new();
        MqttSpeaker::new(&make_traffic(), 0).subscribe(&mut expected, 0).unwrap();
        encode::packet(&Packet::PubAck(mqtt::Ack { packet_id: 4, ..Default::default() }), Version::V311, &mut expected).unwrap();
        assert_eq!(h.answer, expected);
        assert_eq!(h.kept(), wire(&[publish(QoS::AtMostOnce, 0)]).len() - 1, "the last PUBLISH waits for its last byte");
    }

    fn stamped(qos: QoS, packet_id: u16, dup: bool, publisher: u64, seq: u64, payload: &mut Vec<u8>) -> Packet<'_> {
        payload.clear();
        Stamp { publisher, seq, sent_us: crate::proto::push::wall_us() - 2_000 }.encode(payload, 64, b"");
        Packet::Publish(mqtt::Publish { dup, qos, retain: false, topic: "dev/0", packet_id, properties: Default::default(), payload })
    }

    /// Stamped deliveries are timed and checked against their
    /// publisher's sequence per QoS; a QoS 2 resend is answered and
    /// not delivered twice; unstamped ones are counted as before.
    #[test]
    fn stamps_time_deliveries_and_find_gaps_and_repeats() {
        let mut p: Vec<Vec<u8>> = vec![Vec::new(); 7];
        let [a, b, c, d, e, f, g] = &mut p[..] else { unreachable!() };
        let bytes = wire(&[
            connack(0),
            stamped(QoS::AtLeastOnce, 1, false, 5, 1, a),
            stamped(QoS::AtLeastOnce, 2, false, 5, 4, b), // 2 and 3 lost
            stamped(QoS::AtLeastOnce, 2, true, 5, 4, c),  // QoS 1 resend: a duplicate
            stamped(QoS::ExactlyOnce, 3, false, 6, 1, d),
            stamped(QoS::ExactlyOnce, 3, true, 6, 1, e), // before its PUBREL: once
            Packet::PubRel(mqtt::Ack { packet_id: 3, ..Default::default() }),
            stamped(QoS::ExactlyOnce, 3, false, 6, 3, f), // after it: new, 2 lost
            stamped(QoS::AtMostOnce, 0, false, 5, 5, g),
            publish(QoS::AtMostOnce, 0),
        ]);
        let (end, _, h) = same_at_every_cut(&make, &bytes);
        assert_eq!(end, ReadEnd::Open);
        let by = |m: &std::collections::BTreeMap<String, u64>, q: &str| m.get(q).copied().unwrap_or(0);
        let s = &h.stats;
        assert_eq!((by(&s.mqtt_received, "0"), by(&s.mqtt_received, "1"), by(&s.mqtt_received, "2")), (1, 3, 2));
        assert_eq!((by(&s.mqtt_lost, "1"), by(&s.mqtt_lost, "2"), by(&s.mqtt_duplicated, "1")), (2, 1, 1));
        assert_eq!((s.mqtt_qos2_resent_in, s.mqtt_unstamped, s.push_received), (1, 1, 7));
        assert_eq!((s.push_gaps, s.push_duplicates), (3, 1));
        assert!(h.summary().contains("hists=(0, 0, 6)"), "every stamped delivery timed: {}", h.summary());
        // Answers: the SUBSCRIBE, PUBACK 1, 2, 2, PUBREC 3, 3, PUBCOMP 3, PUBREC 3.
        let mut expected = Vec::new();
        MqttSpeaker::new(&make_traffic(), 0).subscribe(&mut expected, 0).unwrap();
        let ack = |id| mqtt::Ack { packet_id: id, ..Default::default() };
        for p in [
            Packet::PubAck(ack(1)),
            Packet::PubAck(ack(2)),
            Packet::PubAck(ack(2)),
            Packet::PubRec(ack(3)),
            Packet::PubRec(ack(3)),
            Packet::PubComp(ack(3)),
            Packet::PubRec(ack(3)),
        ] {
            encode::packet(&p, Version::V311, &mut expected).unwrap();
        }
        assert_eq!(h.answer, expected);
    }

    /// A QoS 2 publish of ours: PUBREC answered PUBREL, timed by its
    /// PUBCOMP; a refusing 5.0 PUBREC is a rejection.
    #[test]
    fn qos2_publishes_are_timed_by_their_pubcomp() {
        let ack = |id, reason| mqtt::Ack { packet_id: id, reason, properties: Default::default() };
        let bytes = wire(&[connack(0), Packet::PubRec(ack(9, 0)), Packet::PubComp(ack(9, 0)), Packet::PubComp(ack(9, 0))]);
        let (end, _, h) = same_at_every_cut(&make, &bytes);
        assert_eq!(end, ReadEnd::Open);
        assert_eq!((h.stats.replies, h.stats.rejected), (1, 0), "one reply; the second PUBCOMP names nothing in flight");
        let mut expected = Vec::new();
        MqttSpeaker::new(&make_traffic(), 0).subscribe(&mut expected, 0).unwrap();
        encode::packet(&Packet::PubRel(ack(9, 0)), Version::V311, &mut expected).unwrap();
        assert_eq!(h.answer, expected);
        let v5 = || {
            let mut h = Hearing::new(true);
            track(&mut h.inflight, 9, NOW - 700);
            let mut traffic = make_traffic();
            traffic.mqtt.v5 = true;
            (Box::new(MqttSpeaker::new(&traffic, 0)) as Box<dyn Speaker>, h)
        };
        let mut bytes = Vec::new();
        for p in [connack(0), Packet::PubRec(ack(9, 0x97))] {
            encode::packet(&p, Version::V5, &mut bytes).unwrap();
        }
        let (_, _, h) = same_at_every_cut(&v5, &bytes);
        assert_eq!((h.stats.replies, h.stats.rejected, h.inflight.as_ref().map_or(0, |q| q.len())), (0, 1, 0));
    }

    /// `--mqtt-topic-alias-maximum 2`: the CONNECT gives it; a topic with
    /// an alias sets it, the alias alone is for that topic (counted);
    /// an alias never set or past the maximum ends the connection; a
    /// new connection in the slot starts without any.
    #[test]
    fn topic_aliases_a_broker_sets_are_resolved_and_bounded() {
        let v5 = || {
            let mut traffic = make_traffic();
            traffic.mqtt.v5 = true;
            traffic.mqtt.topic_alias_maximum = 2;
            (Box::new(MqttSpeaker::new(&traffic, 0)) as Box<dyn Speaker>, Hearing::new(true))
        };
        let mut connect = Vec::new();
        v5().0.open(&mut connect, 0, 0, &None);
        let h = crate::proto::mqtt::decode::fixed_header(&connect, None, u32::MAX).unwrap().unwrap();
        let Packet::Connect(c) = crate::proto::mqtt::decode::packet(&h, &connect[h.len..], mqtt::Role::Server, Version::V5, &Default::default()).unwrap()
        else {
            panic!()
        };
        assert_eq!(c.properties.topic_alias_maximum, Some(2));
        let aliased = |topic: &'static str, alias: u16| {
            let properties = mqtt::Properties { topic_alias: Some(alias), ..Default::default() };
            Packet::Publish(mqtt::Publish { dup: false, qos: QoS::AtMostOnce, retain: false, topic, packet_id: 0, properties, payload: b"hi" })
        };
        let wire = |packets: &[Packet<'_>]| {
            let mut out = Vec::new();
            for p in packets {
                encode::packet(p, Version::V5, &mut out).unwrap();
            }
            out
        };
        let (end, _, h) =
            same_at_every_cut(&v5, &wire(&[connack(0), aliased("dev/a", 1), aliased("", 1), aliased("dev/b", 2), aliased("", 2), aliased("", 1)]));
        assert_eq!(end, ReadEnd::Open);
        assert_eq!((h.stats.push_received, h.stats.mqtt_topic_aliases_in), (5, 3));
        assert_eq!((h.stats.push_topics.get("dev/a"), h.stats.push_topics.get("dev/b")), (Some(&3), Some(&2)));
        let named = |s: &str| ReadEnd::Error(s.into());
        assert_eq!(same_at_every_cut(&v5, &wire(&[connack(0), aliased("", 1)])).0, named("mqtt_topic_alias_unknown"));
        assert_eq!(same_at_every_cut(&v5, &wire(&[connack(0), aliased("dev/c", 3)])).0, named("mqtt_topic_alias_invalid"));
        // Without the flag no alias is accepted.
        let plain = || {
            let mut traffic = make_traffic();
            traffic.mqtt.v5 = true;
            (Box::new(MqttSpeaker::new(&traffic, 0)) as Box<dyn Speaker>, Hearing::new(true))
        };
        assert_eq!(same_at_every_cut(&plain, &wire(&[connack(0), aliased("dev/a", 1)])).0, named("mqtt_topic_alias_invalid"));
    }

    #[test]
    fn a_new_connection_in_a_slot_knows_no_alias() {
        let mut a = crate::client::mqtt_delivery::AliasesIn::new(4);
        let mut n = 0;
        assert_eq!(a.resolve(3, "dev/a", Some(1), &mut n).unwrap(), "dev/a");
        assert_eq!(a.resolve(3, "", Some(1), &mut n).unwrap(), "dev/a");
        assert!(a.resolve(4, "", Some(1), &mut n).is_err(), "another connection's");
        a.reset(3);
        assert!(a.resolve(3, "", Some(1), &mut n).is_err(), "the slot's next connection");
        assert_eq!(n, 1);
    }

    fn make_traffic() -> Traffic {
        let mut traffic = Traffic { protocol: Protocol::Mqtt, ..Default::default() };
        traffic.mqtt.subscribe = vec!["dev/{conn}".into()];
        traffic
    }

    #[test]
    fn refusals_end_as_they_always_did() {
        let end = |packets: &[Packet<'_>]| same_at_every_cut(&make, &wire(packets)).0;
        let named = |s: &str| ReadEnd::Error(s.into());
        assert_eq!(end(&[connack(5)]), named("mqtt_connack_5"));
        assert_eq!(end(&[Packet::PingResp]), named("mqtt_no_connack"));
        // A 3.1.1 broker never sends DISCONNECT; a 5.0 one names why.
        let disconnect = Packet::Disconnect(mqtt::Disconnect { reason: 0x8b, properties: Default::default() });
        assert_eq!(end(&[connack(0), disconnect.clone()]), named("mqtt_unexpected_packet"));
        let v5 = || {
            let mut traffic = make_traffic();
            traffic.mqtt.v5 = true;
            (Box::new(MqttSpeaker::new(&traffic, 0)) as Box<dyn Speaker>, Hearing::new(true))
        };
        let ends = |reason: u8, reason_string: Option<&str>| {
            let mut bytes = Vec::new();
            let properties = mqtt::Properties { reason_string, ..Default::default() };
            for p in [connack(0), Packet::Disconnect(mqtt::Disconnect { reason, properties })] {
                encode::packet(&p, Version::V5, &mut bytes).unwrap();
            }
            let (end, _, h) = same_at_every_cut(&v5, &bytes);
            (end, h.goaway)
        };
        // A draining broker's: a goaway, with megaconn's delay if it gave one.
        let goaway = || named(crate::client::speak::GOAWAY);
        assert_eq!(ends(0x8b, Some(&crate::proto::goaway::reason_json(250))), (goaway(), Some(250)));
        let longest = Some(crate::proto::goaway::MAX_RETRY_MS);
        assert_eq!(ends(0x8b, Some("maintenance")), (goaway(), longest));
        assert_eq!(ends(0x9c, None), (goaway(), longest));
        assert_eq!(ends(0x8e, None), (named("mqtt_disconnect_0x8e"), None));
        // A length past the packet bound: refused before its body is held.
        assert_eq!(same_at_every_cut(&make, &[0x30, 0xff, 0xff, 0xff, 0x7f]).0, named("mqtt_packet_too_large"));
    }
}
