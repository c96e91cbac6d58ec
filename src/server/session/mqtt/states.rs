//! The MQTT state of a worker's connections, in one dense table indexed
//! by slab key beside the connection records.
//!
//! Every MQTT connection (on an MQTT port, or a WebSocket one whose
//! Upgrade chose `mqtt`) has an [`MqttConn`]: 24 bytes with its client
//! id's 12-byte registry key. Kept in a box behind the record's `ext`, as
//! the other protocols keep their state while they have any, it was one
//! 48-byte malloc chunk for every connection, held for the connection's
//! whole life (a device sits idle for hours): a million devices, 24 MB
//! of malloc headers, rounding and fields. Here it is 24 bytes in a table that
//! the first MQTT connection reserves for the worker's connection budget
//! at once (never copied as it fills: the pages of a large allocation
//! are touched only as entries are written). A worker that also serves
//! other protocols pays the table's 24 bytes for each slab key up to its
//! highest MQTT one; it is given back when the worker's last connection
//! closes.

use super::MqttConn;

/// Most entries reserved at once (32 MiB of address space; the pages
/// are touched only as entries are written): past it the table grows as
/// a `Vec` does.
pub(crate) const MAX_RESERVE: usize = 1 << 20;

#[derive(Default)]
pub(crate) struct MqttStates {
    /// Indexed by slab key; `None` for a connection that does not speak
    /// MQTT (or no longer exists).
    by_key: Vec<Option<MqttConn>>,
}

// The table's entry costs what the state does: its `None` hides in a niche.
const _: () = assert!(std::mem::size_of::<Option<MqttConn>>() == std::mem::size_of::<MqttConn>());

impl MqttStates {
    /// The MQTT state of connection `key`, if it speaks MQTT.
    pub(crate) fn get(&self, key: usize) -> Option<&MqttConn> {
        self.by_key.get(key).and_then(Option::as_ref)
    }

    pub(crate) fn get_mut(&mut self, key: usize) -> Option<&mut MqttConn> {
        self.by_key.get_mut(key).and_then(Option::as_mut)
    }

    /// Connection `key`'s entry, to fill (a new MQTT connection, an
    /// Upgrade choosing MQTT): the table grows to hold it, reserving
    /// `budget` entries the first time.
    pub(crate) fn entry(&mut self, key: usize, budget: usize) -> &mut Option<MqttConn> {
        if key >= self.by_key.len() {
            if self.by_key.capacity() == 0 {
                self.by_key.reserve_exact(budget.max(key + 1));
            }
            self.by_key.resize_with(key + 1, || None);
        }
        &mut self.by_key[key]
    }

    /// Connection `key` closed: its state, out of the table.
    pub(crate) fn take(&mut self, key: usize) -> Option<MqttConn> {
        self.by_key.get_mut(key).and_then(Option::take)
    }

    /// The worker has no connection left: the table's memory given back.
    pub(crate) fn release(&mut self) {
        self.by_key = Vec::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 44: what a worker's MQTT connections cost in the table, by
    /// malloc's count: 24 bytes each, reserved once (no chunk per
    /// connection), where the boxed state was a 48-byte chunk.
    #[test]
    fn an_mqtt_connection_costs_its_24_bytes_and_no_chunk() {
        assert_eq!(std::mem::size_of::<Option<MqttConn>>(), 24);
        const N: usize = 10_000;
        let (mut t, held) = crate::test_alloc::held(|| {
            let mut t = MqttStates::default();
            for key in 0..N {
                *t.entry(key, N) = Some(MqttConn::fresh());
            }
            t
        });
        // One allocation of N entries (malloc rounds a large one to pages).
        assert!(((N * 24) as isize..(N * 24 + 4096) as isize).contains(&held), "{held} B for {N} states");
        assert!(t.get(N - 1).is_some_and(MqttConn::connecting));
        assert!(t.take(7).is_some() && t.get(7).is_none() && t.take(7).is_none());
        assert!(t.get(N + 5).is_none() && t.get_mut(N + 5).is_none());
        t.release();
        assert!(t.get(0).is_none());
    }
}
