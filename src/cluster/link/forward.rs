//! What a node hears from NATS: the subscriptions' messages checked,
//! decoded and handed to the supervisor, in order per topic, with the
//! JetStream log's gaps filled and recoveries read.

use super::*;

/// What hands messages from NATS to the supervisor.
#[derive(Clone)]
pub(super) struct Forwarder {
    pub(super) client: async_nats::Client,
    pub(super) me: Me,
    pub(super) shared: Arc<Shared>,
    pub(super) tx: Sink<ClusterEvent>,
    pub(super) log: Option<Arc<Log>>,
}

impl Forwarder {
    /// Subscribe to `subject` and hand every message to the supervisor.
    /// A stream's subject (JetStream) is followed without a gap: a jump
    /// in offsets, a reconnect or a message NATS dropped is filled from
    /// the stream.
    ///
    /// `followed` marks the subject as followed (this node's publishes to
    /// it then wait for their copy to come by): it is called once the
    /// stream's position is read and before the subscription, so every
    /// copy of such a publish comes after that position, live or filled.
    pub(super) async fn forward(&self, subject: String, followed: impl FnOnce()) -> tokio::task::AbortHandle {
        let plain = jslog::plain_subject(&subject);
        let start = match &plain {
            Some(plain) => self.stream_head(plain).await,
            None => None,
        };
        followed();
        // Sent before this returns, so that a confirmation asked after it
        // covers it.
        let sub = self.client.subscribe(subject.clone()).await;
        let f = self.clone();
        tokio::spawn(async move {
            let Some(mut sub) = f.opened(&subject, sub) else { return };
            let mut catch_up = f.shared.catch_up.subscribe();
            catch_up.mark_unchanged();
            let mut last: Option<Head> = None;
            // A catch-up read that failed (the stream not answering yet
            // after a reconnect) is tried again, or what was stored while
            // away would be lost for this node's subscribers.
            let mut retry: Option<tokio::time::Instant> = None;
            // Any instant will do for the retry branch while it is off (no
            // clock read per message).
            let off = tokio::time::Instant::now();
            if let (Some(plain), Some(head)) = (&plain, start) {
                // What was stored between reading the position and the
                // subscription coming into force comes from the stream.
                last = Some(head);
                retry = f.catch_up(plain, &mut last).await;
            }
            loop {
                let retry_at = retry.unwrap_or(off);
                tokio::select! {
                    m = sub.next() => match (m, &plain) {
                        (None, _) => break,
                        (Some(m), Some(plain)) => f.live(&m, plain, &mut last).await,
                        (Some(m), None) => f.core(&m).await,
                    },
                    Ok(()) = catch_up.changed() => {
                        if let Some(plain) = &plain {
                            // After a reconnect the subscription is sent
                            // again: read the stream once it is in force, or
                            // what is stored in between would come neither
                            // live nor from the read.
                            retry = f.catch_up(plain, &mut last).await;
                        }
                    }
                    () = tokio::time::sleep_until(retry_at), if retry.is_some() => {
                        if let Some(plain) = &plain {
                            retry = f.catch_up(plain, &mut last).await;
                        }
                    }
                }
            }
        })
        .abort_handle()
    }

    /// Every topic's messages, for this node's MQTT wildcard filters
    /// (`crate::cluster::ANY_TOPIC`): handed on as they come, with no gap filling
    /// (a wildcard follows no one topic's order). A topic also followed
    /// by name is left to that topic's forwarder.
    pub(super) async fn forward_any(&self, subject: String) -> tokio::task::AbortHandle {
        let sub = self.client.subscribe(subject.clone()).await;
        let f = self.clone();
        tokio::spawn(async move {
            let Some(mut sub) = f.opened(&subject, sub) else { return };
            while let Some(m) = sub.next().await {
                f.any(&m);
            }
        })
        .abort_handle()
    }

    /// The subscription to `subject`, or None with the error said.
    pub(super) fn opened(&self, subject: &str, sub: Result<async_nats::Subscriber, async_nats::SubscribeError>) -> Option<async_nats::Subscriber> {
        sub.map_err(|e| self.shared.error(format!("cannot subscribe to {subject}: {e}"))).ok()
    }

    /// One message of [`forward_any`](Self::forward_any).
    pub(super) fn any(&self, m: &async_nats::Message) {
        if self.shared.followed.lock().expect("followed").contains(m.subject.as_str()) {
            return;
        }
        // Signed for its plain subject (JetStream republishes it under another).
        let plain = jslog::plain_subject(&m.subject).unwrap_or_else(|| m.subject.to_string());
        let parts = Parts::live(m, &plain);
        if let Err((r, why)) = self.me.check_parts(&parts) {
            return self.shared.refuse(r, why);
        }
        match decode(&parts, self.me.max_push) {
            Ok(inbound) if inbound.stream == Stream::Topic => {
                self.shared.messages_in.fetch_add(1, Ordering::Relaxed);
                send(&self.tx, ClusterEvent::Message(inbound));
            }
            Ok(_) => self.shared.refuse(Refusal::Malformed, format!("refused a message on {}: not a topic message", m.subject)),
            Err(e) => self.shared.refuse(Refusal::Malformed, format!("refused a message on {}: {e}", m.subject)),
        }
    }

    /// Where a new follower of `plain` starts: the stream's last message
    /// of it (or its beginning when it has none). A follower that starts
    /// where the stream is, instead of at its first live message, fills
    /// what it missed across a reconnect even if no message came before it
    /// (issue 42, finding 4). None: not read (the follower then starts at
    /// its first live message, as it did before).
    pub(super) async fn stream_head(&self, plain: &str) -> Option<Head> {
        let log = self.log.as_ref()?;
        let check = |s: &Stored| self.me.place(s, &self.shared);
        match tokio::time::timeout(jslog::FETCH_TIMEOUT, log.last(plain, &check)).await {
            Ok(Ok(head)) => Some(head.unwrap_or(Head { at: Position { epoch: 0, offset: 0 }, seq: 0 })),
            Ok(Err(e)) => {
                self.shared.error(format!("cannot read where {plain} is in the stream: {e}"));
                None
            }
            Err(_) => {
                self.shared.error(format!("reading where {plain} is in the stream took over {} s", jslog::FETCH_TIMEOUT.as_secs()));
                None
            }
        }
    }

    /// Wait (bounded) until NATS has taken this client's subscriptions:
    /// [`confirmed`] is answered after every SUB sent before it.
    pub(super) async fn confirm_subscription(&self) {
        if let Err(e) = confirmed(&self.client, SUB_CONFIRM_TIMEOUT).await {
            self.shared.error(format!("{e} (a subscription sent before it may not be in force yet)"));
        }
    }

    /// Read what the stream stored of `plain` after `last`, once the
    /// subscription is in force. When to try again if the read failed.
    pub(super) async fn catch_up(&self, plain: &str, last: &mut Option<Head>) -> Option<tokio::time::Instant> {
        let from = (*last)?;
        self.confirm_subscription().await;
        match self.fill(plain, from, None, last).await {
            true => None,
            false => Some(tokio::time::Instant::now() + CATCH_UP_RETRY),
        }
    }

    /// A message on a core subject (unicasts, and everything with
    /// `--cluster-history off`).
    pub(super) async fn core(&self, m: &async_nats::Message) {
        let me = &self.me;
        // Unsigned, forged, stale or answer-elsewhere: dropped unanswered.
        let origin = match me.check(m) {
            Ok(origin) => origin,
            Err((r, why)) => return self.shared.refuse(r, why),
        };
        let parts = Parts::live(m, m.subject.as_str());
        // MQTT's retained sets and client ids: not messages for connections.
        if m.subject.as_str() == RETAINED {
            let entry = parts.header(H_TARGET).and_then(|topic| {
                let mqtt = crate::cluster::MqttMeta::parse(parts.get(crate::cluster::H_MQTT))?;
                let stamp = parts.header(H_PUBLISH_US)?;
                let publish_us = stamp.parse().map_err(|_| Malformed::Stamp(stamp.to_string()))?;
                retained::checked(topic, m.payload.to_vec(), mqtt, publish_us, me.max_push)
            });
            match entry {
                Ok(e) => send(&self.tx, ClusterEvent::RetainedSet(e)),
                Err(e) => self.shared.refuse(Refusal::Malformed, format!("refused a retained message: {e}")),
            }
            return;
        }
        if m.subject.as_str() == crate::cluster::CLIENT_IDS {
            match crate::cluster::ClientIds::parse(&m.payload) {
                Ok(c) => {
                    let at_us = c.at_us;
                    send(&self.tx, ClusterEvent::ClientIds { node: origin, ids: c.owned(), at_us })
                }
                Err(e) => self.shared.refuse(Refusal::Malformed, format!("refused MQTT client ids from node '{origin}': {e}")),
            }
            return;
        }
        if m.subject.as_str() == crate::cluster::sessions::SESSIONS_TAKE {
            match (crate::cluster::ClientIds::parse(&m.payload), &m.reply) {
                (Ok(a), Some(reply)) => {
                    let at_us = a.at_us;
                    send(&self.tx, ClusterEvent::SessionsAsked { node: origin, ids: a.owned(), at_us, reply: reply.to_string() })
                }
                (Ok(_), None) => {
                    self.shared.refuse(Refusal::Malformed, format!("refused a question about MQTT sessions from node '{origin}' without a reply subject"))
                }
                (Err(e), _) => self.shared.refuse(Refusal::Malformed, format!("refused a question about MQTT sessions from node '{origin}': {e}")),
            }
            return;
        }
        if m.subject.as_str() == crate::cluster::sessions::SESSIONS_TAKEN {
            match crate::cluster::sessions::Taken::parse(&m.payload) {
                Ok(t) if t.to == self.me.node => send(&self.tx, ClusterEvent::SessionsTaken { node: origin, lend: t.lend }),
                Ok(_) => {}
                Err(e) => self.shared.refuse(Refusal::Malformed, format!("refused a confirmation of an MQTT session from node '{origin}': {e}")),
            }
            return;
        }
        if m.subject.as_str() == crate::cluster::groups::SHARED_GROUPS {
            match crate::cluster::groups::Announce::parse(&m.payload, crate::cluster::groups::MAX_GROUPS) {
                Ok(announce) => {
                    self.shared.peers.lock().expect("peers").heard(&origin, Instant::now());
                    send(&self.tx, ClusterEvent::SharedGroups { node: origin, announce })
                }
                Err(e) => self.shared.refuse(Refusal::Malformed, format!("refused MQTT shared subscription groups from node '{origin}': {e}")),
            }
            return;
        }
        if m.subject.as_str() == RETAINED_ASK {
            match &m.reply {
                Some(reply) => send(&self.tx, ClusterEvent::RetainedAsked { reply: reply.to_string() }),
                None => self.shared.refuse(Refusal::Malformed, "refused a retained set question without a reply subject".into()),
            }
            return;
        }
        self.shared.messages_in.fetch_add(1, Ordering::Relaxed);
        if m.subject.as_str() == crate::cluster::NOTICES {
            match serde_json::from_slice(&m.payload) {
                Ok(n) => send(&self.tx, ClusterEvent::Notices(n)),
                Err(e) => self.shared.refuse(Refusal::Malformed, format!("refused presence notices: {e}")),
            }
            return;
        }
        if m.subject.as_str() == crate::cluster::PRESENCE {
            match (parts.header(H_TARGET), &m.reply) {
                (Ok(topic), Some(reply)) => send(&self.tx, ClusterEvent::PresenceAsked { topic: topic.to_string(), reply: reply.to_string() }),
                _ => self.shared.refuse(Refusal::Malformed, "refused a presence question without a topic or a reply subject".into()),
            }
            return;
        }
        let probe = crate::cluster::node_of(&m.subject) == Some(me.node.as_str()) && parts.header(H_TARGET).is_err() && m.payload.is_empty();
        match decode(&parts, me.max_push) {
            Ok(inbound) => send(&self.tx, ClusterEvent::Message(inbound)),
            Err(_) if probe => {
                // A node starting with this node's id asks whether it is taken.
                if let Some(reply) = &m.reply {
                    me.answer(&self.client, reply.to_string(), serde_json::json!({ "node": me.node }).to_string().into_bytes()).await;
                }
            }
            Err(e) => {
                let e = format!("refused a message on {}: {e}", m.subject);
                if let Some(reply) = &m.reply {
                    let body = serde_json::json!({ "error": e, "node": crate::cluster::node_of(&m.subject) });
                    me.answer(&self.client, reply.to_string(), body.to_string().into_bytes()).await;
                }
                self.shared.refuse(Refusal::Malformed, e);
            }
        }
    }

    /// A message the stream republished: in order after `last`, or the
    /// gap before it is filled from the stream first.
    pub(super) async fn live(&self, m: &async_nats::Message, plain: &str, last: &mut Option<Head>) {
        let parts = Parts::live(m, plain);
        if let Err((r, why)) = self.me.check_parts(&parts) {
            return self.shared.refuse(r, why);
        }
        let seq = parts.get("Nats-Sequence").parse::<u64>().unwrap_or(0);
        let inbound = match decode(&parts, self.me.max_push) {
            Ok(i) if i.at.is_some() && seq > 0 && parts.get(H_FOLLOWS).parse::<u64>().is_ok() => i,
            Ok(_) => {
                return self
                    .shared
                    .refuse(Refusal::Malformed, format!("refused a message on {}: no {H_POSITION}, {H_FOLLOWS} or Nats-Sequence header", m.subject))
            }
            Err(e) => return self.shared.refuse(Refusal::Malformed, format!("refused a message on {}: {e}", m.subject)),
        };
        let at = inbound.at.expect("checked");
        if let Some(l) = *last {
            if l.at.epoch == at.epoch && at.offset <= l.at.offset {
                return;
            }
            // Checked live (signed within the window of now): stored now.
            // A sequence not after the head's: NATS lost the stream (memory
            // storage) and this is a new one, with nothing known before it.
            let (follows, now) = (parts.get(H_FOLLOWS).parse().unwrap_or(u64::MAX), sign::now_ms());
            let place = Place { at, follows, signed_ms: now };
            let mut chain = if seq > l.seq { l.chain() } else { jslog::Chain::default() };
            if !chain.admit(seq, place, now) {
                if let Some(log) = &self.log {
                    log.poisoned(&Stored { seq, subject: m.subject.to_string(), headers: Default::default(), data: Default::default(), stored_ms: now }, place);
                }
                return;
            }
            // Epoch 0: the stream had nothing of the topic when this node
            // began to follow it, so a first message after offset 1 says
            // some came by unseen (across a reconnect whose catch-up read
            // failed, say).
            if (l.at.epoch == at.epoch || l.at.epoch == 0) && at.offset > l.at.offset + 1 {
                self.fill(plain, l, Some(at.offset), last).await;
                if last.is_some_and(|l| l.at.epoch == at.epoch && l.at.offset >= at.offset) {
                    return;
                }
            }
        }
        self.pass(inbound, parts.get("Nats-Msg-Id"), Head { at, seq }, plain, last);
    }

    /// Hand a message on in order. This node's own publish delivers its
    /// message itself: the supervisor is told where it goes in the order
    /// (`Mine`), and the publish that it may answer now.
    pub(super) fn pass(&self, inbound: Inbound, msg_id: &str, head: Head, plain: &str, last: &mut Option<Head>) {
        if let Some(log) = &self.log {
            log.saw(&jslog::log_subject(plain), head);
        }
        *last = Some(head);
        let own = self.shared.own.lock().expect("own").remove(msg_id);
        if let Some(own) = own {
            send(&self.tx, ClusterEvent::Mine { request: own.request, index: own.index, topic: inbound.history_topic(), at: head.at });
            let _ = own.seen.send(head.at);
            return;
        }
        self.shared.messages_in.fetch_add(1, Ordering::Relaxed);
        send(&self.tx, ClusterEvent::Message(inbound));
    }

    /// Hand on what the stream has of `plain` after `from` (a gap before
    /// offset `upto`, or a catch-up after a reconnect).
    /// False when the stream could not be read.
    pub(super) async fn fill(&self, plain: &str, from: Head, upto: Option<u64>, last: &mut Option<Head>) -> bool {
        let Some(log) = &self.log else { return true };
        let check = |s: &Stored| self.me.place(s, &self.shared);
        let keep = |at: Position| at.epoch != from.at.epoch || at.offset > from.at.offset;
        // Epoch 0: the stream had nothing of `plain` when this node began
        // to follow it; all it has is after that, and none of it counts
        // as lost.
        let known = from.at.epoch != 0;
        let got = match log.fetch(plain, from, &keep, &check, jslog::MAX_FILL_BYTES).await {
            Ok(got) => got,
            Err(e) => {
                if let Some(upto) = upto.filter(|_| known) {
                    log.count(|c| {
                        c.gaps += 1;
                        c.gap_lost += upto - from.at.offset - 1;
                    });
                }
                self.shared.error(format!("cannot fill a gap in {plain}: {e}"));
                return false;
            }
        };
        // A gap seen live ends at `upto`; after a reconnect, at the first
        // message the stream still has when it no longer has those before
        // (over --history, or older than --history-ttl): those are lost.
        let first = got.iter().find(|(at, _)| at.epoch == from.at.epoch).map(|(at, _)| at.offset);
        if let Some(end) = upto.or(first.filter(|o| *o > from.at.offset + 1)).filter(|_| known) {
            let found = got.iter().filter(|(at, _)| at.epoch == from.at.epoch && at.offset < end).count() as u64;
            let lost = (end - from.at.offset - 1).saturating_sub(found);
            log.count(|c| {
                c.gaps += 1;
                c.gap_lost += lost;
            });
            if lost > 0 {
                self.shared.error(format!(
                    "{lost} messages of {plain} before offset {end} were no longer in the stream when this node read them (it keeps --history per topic, for --history-ttl): this node's subscribers miss them"
                ));
            }
        }
        for (at, s) in got {
            if let Some(inbound) = self.me.read_stored(&s, &self.shared) {
                log.count(|c| c.gap_messages += 1);
                let msg_id = s.headers.get("Nats-Msg-Id").map(|v| v.as_str().to_string()).unwrap_or_default();
                self.pass(inbound, &msg_id, Head { at, seq: s.seq }, plain, last);
            }
        }
        true
    }

    /// What the stream has of `topic` (`*`: broadcasts) after `after`,
    /// for a subscriber this node's history cannot answer.
    /// `after` u64::MAX: only the last message (where the topic is).
    pub(super) async fn recover(&self, log: &Log, topic: &str, after: Position) -> Result<Vec<Inbound>, crate::cluster::error::LogError> {
        log.count(|c| c.fetches += 1);
        let plain = if topic == crate::proto::push::BROADCAST_TOPIC { BROADCAST.to_string() } else { crate::cluster::topic_subject(topic) };
        let check = |s: &Stored| self.me.place(s, &self.shared);
        if after.offset == u64::MAX {
            let last = log.tip(&plain, &check).await?.and_then(|(_, s)| s);
            return Ok(last.and_then(|s| self.me.read_stored(&s, &self.shared)).into_iter().collect());
        }
        let keep = |at: Position| after.epoch == 0 || at.epoch != after.epoch || at.offset > after.offset;
        let start = Head { at: Position { epoch: 0, offset: 0 }, seq: 0 };
        let got = log.fetch(&plain, start, &keep, &check, jslog::MAX_RECOVER_BYTES).await?;
        Ok(got.iter().filter_map(|(_, s)| self.me.read_stored(s, &self.shared)).collect())
    }
}

/// A message from another node, checked like an admin publish: a
/// malformed one must not reach the workers' framing.
pub(super) fn decode(m: &Parts, max_push: usize) -> Result<Inbound, Malformed> {
    let subject = m.subject;
    let (stream, topic) = if subject == BROADCAST {
        (Stream::Broadcast, String::new())
    } else if let Some(t) = subject.strip_prefix(TOPIC_PREFIX) {
        crate::proto::push::check_topic(t.as_bytes()).map_err(Malformed::Topic)?;
        (Stream::Topic, t.to_string())
    } else if subject.starts_with(NODE_PREFIX) || subject == crate::cluster::USERS {
        (Stream::Unicast, String::new())
    } else {
        return Err(Malformed::Subject);
    };
    if m.payload.len() > max_push {
        return Err(Malformed::TooLarge { len: m.payload.len(), max: max_push });
    }
    let mut user = None;
    let mut close = false;
    let target = match stream {
        Stream::Unicast if subject == crate::cluster::USERS => {
            let t = m.header(H_TARGET)?;
            let (name, shut) = match (t.strip_prefix(USER_PUSH), t.strip_prefix(USER_CLOSE)) {
                (Some(n), _) => (n, false),
                (_, Some(n)) => (n, true),
                _ => return Err(Malformed::NoUser(t.to_string())),
            };
            user = Some(name.to_string());
            close = shut;
            None
        }
        Stream::Unicast => {
            let t = m.header(H_TARGET)?;
            Some(t.parse().map_err(|_| Malformed::Target(t.to_string()))?)
        }
        _ => None,
    };
    let stamp = m.header(H_PUBLISH_US)?;
    let at = match m.get(H_POSITION) {
        "" => None,
        v => Some(jslog::parse_position(v).ok_or_else(|| Malformed::Position(v.to_string()))?),
    };
    Ok(Inbound {
        stream,
        topic,
        target,
        publish_us: stamp.parse().map_err(|_| Malformed::Stamp(stamp.to_string()))?,
        data: m.payload.to_vec(),
        reply: m.reply.map(|r| r.to_string()),
        at,
        user,
        close,
        mqtt: match m.get(crate::cluster::H_MQTT) {
            "" => None,
            v => Some(crate::cluster::MqttMeta::parse(v)?),
        },
    })
}
