//! Task assembly (`more = 1`): model requests gathered over several calls into one task,
//! submitted by the call with `more = 0`.
//!
//! Protocol:
//! 1. The first [`TaskBuilder::add`] reserves a slot under the task limit
//!    (`HB_MAX_TASK_NUM`), so a task being assembled counts like a submitted one; dropping
//!    the builder returns the slot.
//! 2. Each call appends its requests (at most [`MAX_MODELS_PER_TASK`] in all) and the
//!    library-owned buffers they point into (ROI crops).
//! 3. The call with `more = 0` submits every request as one task into the reserved slot,
//!    with the done callback registered before the task can start; the buffers live until
//!    that callback has run.
//!
//! Invariant: a failing call leaves the builder as it was before the call (its own
//! requests and buffers dropped, the earlier ones kept, the slot still held).

use std::sync::Arc;

use parking_lot::Mutex;

use super::task::{CtrlParams, ModelRequest, Runtime, Task, TaskDoneCallback};
use crate::error::{Error, Result};
use crate::sched::TaskSlot;

/// Most models (or ROI batch groups) in one task.
pub const MAX_MODELS_PER_TASK: usize = 255;

/// A task being assembled.
#[derive(Default)]
pub struct TaskBuilder {
    parts: Vec<ModelRequest>,
    /// Library-owned input memory the parts point into; shared with the done callback.
    owned: Arc<Mutex<Vec<Box<[u8]>>>>,
    slot: Option<TaskSlot>,
}

impl std::fmt::Debug for TaskBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskBuilder")
            .field("parts", &self.parts.len())
            .field("slot", &self.slot.is_some())
            .finish()
    }
}

impl TaskBuilder {
    /// An empty builder (it reserves its slot on the first [`add`](Self::add)).
    pub fn new() -> TaskBuilder {
        TaskBuilder::default()
    }

    /// Model requests gathered so far.
    pub fn len(&self) -> usize {
        self.parts.len()
    }

    /// Whether no request was added yet.
    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// Steps 1-3: adds `parts` (pointing into `owned`) and, unless `more`, submits the
    /// task with `on_done` as its done callback. `Ok(None)` while assembling.
    pub fn add(
        &mut self,
        rt: &Runtime,
        parts: Vec<ModelRequest>,
        owned: Vec<Box<[u8]>>,
        more: bool,
        ctrl: CtrlParams,
        on_done: TaskDoneCallback,
    ) -> Result<Option<Arc<Task>>> {
        if self.slot.is_none() {
            self.slot = Some(rt.scheduler().reserve()?);
        }
        if self.parts.len() + parts.len() > MAX_MODELS_PER_TASK {
            return Err(Error::TaskBatchLimit {
                limit: MAX_MODELS_PER_TASK,
            });
        }
        let kept = (self.parts.len(), self.owned.lock().len());
        self.parts.extend(parts);
        self.owned.lock().extend(owned);
        if more {
            return Ok(None);
        }
        let Some(slot) = self.slot.take() else {
            return Err(Error::ApiUse("the task has no reserved slot".into()));
        };
        let owned = self.owned.clone();
        let callback: TaskDoneCallback = Box::new(move |status| {
            // The buffers live until the task ended and its callback runs.
            drop(owned);
            on_done(status);
        });
        match rt.submit_reserved(self.parts.clone(), ctrl, slot, callback) {
            Ok(task) => {
                self.parts.clear();
                self.owned = Arc::default();
                Ok(Some(task))
            }
            Err((e, slot)) => {
                self.slot = Some(slot);
                self.parts.truncate(kept.0);
                self.owned.lock().truncate(kept.1);
                Err(e)
            }
        }
    }
}
