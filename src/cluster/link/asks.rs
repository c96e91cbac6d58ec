//! What a node asks the other nodes and collects their answers to: their
//! retained sets and a topic's presence.

use super::*;

/// Ask every node for its retained set and collect the signed chunks
/// until none came for [`retained::QUIET`] (at most
/// [`retained::ANSWER_WINDOW`]), keeping at most `max_entries` messages
/// and `max_bytes` of data (the rest counted dropped).
pub(super) async fn ask_retained(client: &async_nats::Client, me: &Me, shared: &Shared, max_entries: usize, max_bytes: u64) -> retained::Answers {
    let mut got = retained::Answers::default();
    let inbox = client.new_inbox();
    let Ok(mut sub) = client.subscribe(inbox.clone()).await else { return got };
    let h = me.headers(RETAINED_ASK, "", "", "", b"");
    if let Err(e) = client.publish_with_reply_and_headers(RETAINED_ASK, inbox, h, Default::default()).await {
        shared.error(format!("cannot ask the other nodes for their retained messages: {e}"));
        return got;
    }
    let (mut nodes, mut all) = (std::collections::HashSet::new(), Vec::new());
    // What a chunk may add before the merge (every node sends the same
    // set): the asker's bounds, for each of a few nodes.
    let most = max_entries.saturating_mul(4).max(1024);
    let end = tokio::time::Instant::now() + retained::ANSWER_WINDOW;
    loop {
        let until = end.min(tokio::time::Instant::now() + retained::QUIET);
        let Ok(Some(chunk)) = tokio::time::timeout_at(until, sub.next()).await else { break };
        // NATS's own "no responders" (no other node yet): nobody answers.
        if chunk.status.is_some() {
            break;
        }
        let node = match me.check(&chunk) {
            Ok(n) => n,
            Err((r, why)) => {
                shared.refuse(r, why);
                continue;
            }
        };
        match retained::decode_chunk(&chunk.payload, me.max_push, &mut got.dropped) {
            Ok(entries) => {
                nodes.insert(node);
                if all.len() + entries.len() > most {
                    // Keep the newest of each topic so far, then go on.
                    all = retained::newest(all.into_iter(), max_entries, max_bytes, &mut got.dropped);
                }
                all.extend(entries);
            }
            Err(e) => shared.refuse(Refusal::Malformed, format!("refused a retained set from node '{node}': {e}")),
        }
    }
    got.entries = retained::newest(all.into_iter(), max_entries, max_bytes, &mut got.dropped);
    got.nodes = nodes.len();
    got
}

/// Ask every node who is subscribed to `topic` and collect what they
/// answer within [`crate::cluster::PRESENCE_WINDOW`] (signed answers only).
pub(super) async fn ask_presence(client: &async_nats::Client, me: &Me, shared: &Shared, topic: &str) -> Vec<crate::cluster::NodePresence> {
    let inbox = client.new_inbox();
    let Ok(mut sub) = client.subscribe(inbox.clone()).await else { return Vec::new() };
    let h = me.headers(crate::cluster::PRESENCE, topic, "", "", b"");
    if client.publish_with_reply_and_headers(crate::cluster::PRESENCE, inbox, h, Default::default()).await.is_err() {
        return Vec::new();
    }
    let mut answers = Vec::new();
    let deadline = tokio::time::Instant::now() + crate::cluster::PRESENCE_WINDOW;
    while let Ok(Some(reply)) = tokio::time::timeout_at(deadline, sub.next()).await {
        let node = match me.check(&reply) {
            Ok(n) => n,
            Err((r, why)) => {
                shared.refuse(r, why);
                continue;
            }
        };
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(&reply.payload) else { continue };
        let users = v["users"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|u| Some((u["user"].as_str()?.to_string(), u["connections"].as_u64()?, u.get("info").map(|i| i.to_string()))))
            .collect();
        answers.push(crate::cluster::NodePresence { node, users, anonymous: v["anonymous"].as_u64().unwrap_or(0) });
    }
    answers
}
