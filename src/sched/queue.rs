//! The library task queue (protocol step 2): tasks waiting for a core, ordered by priority
//! (higher first), then `custom_id` (smaller first), then submission order.
//!
//! Invariant: a task is in the queue at most once, under the key derived from its control
//! parameters and id, so it can be found and removed without a search.

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::sync::Arc;

use super::task::TaskShared;

/// The queue order of a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct QueueKey {
    priority: Reverse<u8>,
    custom_id: i64,
    seq: u64,
}

impl QueueKey {
    /// The key of task `t` (its id is its submission order).
    pub(crate) fn of(t: &TaskShared) -> QueueKey {
        QueueKey {
            priority: Reverse(t.ctrl.priority),
            custom_id: t.ctrl.custom_id,
            seq: t.id,
        }
    }
}

/// Tasks waiting for a core, in queue order.
#[derive(Default)]
pub(crate) struct TaskQueue {
    map: BTreeMap<QueueKey, Arc<TaskShared>>,
}

impl TaskQueue {
    /// Adds a task at its place.
    pub(crate) fn push(&mut self, t: Arc<TaskShared>) {
        self.map.insert(QueueKey::of(&t), t);
    }

    /// Removes task `t` if it is queued.
    pub(crate) fn remove(&mut self, t: &TaskShared) -> Option<Arc<TaskShared>> {
        self.map.remove(&QueueKey::of(t))
    }

    /// Whether no task waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The waiting tasks in queue order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Arc<TaskShared>> {
        self.map.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_key_orders_priority_then_custom_id_then_submission() {
        let k = |p: u8, c: i64, s: u64| QueueKey {
            priority: Reverse(p),
            custom_id: c,
            seq: s,
        };
        let mut keys = vec![k(1, 0, 1), k(5, 9, 2), k(5, 3, 3), k(5, 3, 0), k(0, -1, 4)];
        keys.sort();
        assert_eq!(
            keys,
            vec![k(5, 3, 0), k(5, 3, 3), k(5, 9, 2), k(1, 0, 1), k(0, -1, 4)]
        );
    }
}
