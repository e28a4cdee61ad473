//! What the three C handle kinds resolve to, and their registries.
//!
//! - a packed handle → [`PackedEntry`]: what keeps the loaded pack alive (an in-process
//!   [`PackedModel`] or a pack held by the vnpu daemon), its model names as C strings and
//!   the tokens of its model handles (created at load, one per model);
//! - a model handle → [`ModelEntry`]: the [`ModelTarget`] (in process or in the daemon)
//!   plus C copies of its tensor properties (names, scale and zero-point arrays) that C
//!   callers may keep pointers into while the packed model is loaded;
//! - a task handle → [`TaskEntry`]: a task being assembled with `more` (an
//!   [`Assembly`]) or a [`Submitted`] task, plus the done-callback state.
//!
//! Releasing a packed model removes its model handles; models stay alive while a task
//! still uses them (they are `Arc`s). The C-visible memory of an entry (strings,
//! property arrays) is owned by the entry and never moved after creation.

use std::ffi::{c_char, c_void, CString};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use crate::error::{Error, Result};
use crate::ffi::convert::c_properties;
use crate::ffi::engine::{Assembly, Loaded, ModelTarget, Part, Submitted};
use crate::ffi::registry::Registry;
use crate::ffi::types::*;
use crate::runtime::{PackedModel, Quant};

/// Live packed models.
pub(crate) static PACKED: Registry<PackedEntry> =
    Registry::new(1, "packed model", Error::InvalidPackedHandle);
/// Live model handles.
pub(crate) static MODELS: Registry<ModelEntry> =
    Registry::new(2, "model", Error::InvalidModelHandle);
/// Live tasks.
pub(crate) static TASKS: Registry<TaskEntry> = Registry::new(3, "task", Error::InvalidTaskHandle);

/// A loaded packed model.
pub(crate) struct PackedEntry {
    /// Kept for the life of the handle; models are shared with their model entries.
    _packed: Box<dyn std::any::Any + Send + Sync>,
    _names: Vec<CString>,
    /// `names[i].as_ptr()`, handed out by `hbDNNGetModelNameList`.
    name_ptrs: Box<[*const c_char]>,
    /// `(model name, model handle token)` in model order.
    pub(crate) models: Vec<(String, usize)>,
}

// SAFETY: `name_ptrs` points into `_names`, immutable heap memory owned by the same
// entry; nothing mutates through these pointers.
unsafe impl Send for PackedEntry {}
// SAFETY: see `Send`; the entry is read-only after construction.
unsafe impl Sync for PackedEntry {}

impl PackedEntry {
    /// Registers an in-process packed model (see [`PackedEntry::register_loaded`]).
    pub(crate) fn register(packed: PackedModel) -> Result<usize> {
        Self::register_loaded(Loaded::local(packed))
    }

    /// Registers every model of a loaded pack and wraps it; on failure nothing stays
    /// registered.
    pub(crate) fn register_loaded(loaded: Loaded) -> Result<usize> {
        let Loaded {
            keep,
            models: targets,
        } = loaded;
        let mut names = Vec::with_capacity(targets.len());
        let mut models = Vec::with_capacity(targets.len());
        let result = (|| {
            for m in targets {
                let name = m.name().to_owned();
                names.push(CString::new(name.as_str()).map_err(|_| Error::ModelFormat {
                    path: name.clone(),
                    reason: "model name contains a NUL byte".into(),
                })?);
                let entry = ModelEntry::new(m)?;
                models.push((name, MODELS.insert(Arc::new(entry))?));
            }
            Ok(())
        })();
        if let Err(e) = result {
            for (_, t) in &models {
                let _ = MODELS.remove(*t);
            }
            return Err(e);
        }
        let name_ptrs = names.iter().map(|n| n.as_ptr()).collect();
        let entry = PackedEntry {
            _packed: keep,
            _names: names,
            name_ptrs,
            models,
        };
        let models: Vec<usize> = entry.models.iter().map(|(_, t)| *t).collect();
        PACKED.insert(Arc::new(entry)).inspect_err(|_| {
            for t in &models {
                let _ = MODELS.remove(*t);
            }
        })
    }

    /// The model name array (library-owned, valid while the pack is loaded).
    pub(crate) fn name_list(&self) -> (*const *const c_char, i32) {
        (self.name_ptrs.as_ptr(), self.name_ptrs.len() as i32)
    }
}

/// Registers an already-loaded packed model as a C packed handle (for Rust hosts that
/// load models themselves and hand the handle to C code). Release it with
/// `hbDNNRelease`.
pub fn packed_handle(packed: PackedModel) -> Result<hbPackedDNNHandle_t> {
    PackedEntry::register(packed).map(|token| token as hbPackedDNNHandle_t)
}

/// Live packed-model, model and task handles, in that order (leak checks in tests and
/// fuzzing: after everything is released all three are 0).
pub fn live_handle_counts() -> [usize; 3] {
    [PACKED.live(), MODELS.live(), TASKS.live()]
}

/// C copies of one tensor's description.
pub(crate) struct TensorInfo {
    pub(crate) name: CString,
    _scale: Box<[f32]>,
    _zero_point: Box<[i8]>,
    /// Properties whose quantisation pointers point into `_scale` / `_zero_point`.
    pub(crate) props: hbDNNTensorProperties,
}

impl TensorInfo {
    fn new(d: &crate::runtime::TensorDesc) -> Result<TensorInfo> {
        let name = CString::new(d.name.as_str()).map_err(|_| Error::ModelFormat {
            path: d.name.clone(),
            reason: "tensor name contains a NUL byte".into(),
        })?;
        let (mut scale, mut zero_point): (Box<[f32]>, Box<[i8]>) = match &d.quant {
            Quant::None => (Box::new([]), Box::new([])),
            Quant::Scale {
                scale, zero_point, ..
            } => (scale.clone().into(), zero_point.clone().into()),
        };
        // Boxed slices never move their heap data, so the pointers stay valid after
        // `scale` / `zero_point` are moved into the struct.
        let props = c_properties(d, &mut scale, &mut zero_point);
        Ok(TensorInfo {
            name,
            _scale: scale,
            _zero_point: zero_point,
            props,
        })
    }
}

/// A model handle's target.
pub(crate) struct ModelEntry {
    pub(crate) model: ModelTarget,
    pub(crate) inputs: Vec<TensorInfo>,
    pub(crate) outputs: Vec<TensorInfo>,
}

// SAFETY: the raw pointers inside `TensorInfo::props` point into boxed slices owned by
// the same entry and are never written through by the library.
unsafe impl Send for ModelEntry {}
// SAFETY: see `Send`; the entry is read-only after construction.
unsafe impl Sync for ModelEntry {}

impl ModelEntry {
    fn new(model: ModelTarget) -> Result<ModelEntry> {
        let inputs = model
            .inputs()
            .iter()
            .map(TensorInfo::new)
            .collect::<Result<_>>()?;
        let outputs = model
            .outputs()
            .iter()
            .map(TensorInfo::new)
            .collect::<Result<_>>()?;
        Ok(ModelEntry {
            model,
            inputs,
            outputs,
        })
    }
}

/// A C done-callback with its userdata.
#[derive(Clone, Copy)]
pub(crate) struct UserCallback {
    pub(crate) cb: unsafe extern "C" fn(hbDNNTaskHandle_t, i32, *mut c_void),
    pub(crate) userdata: *mut c_void,
}

// SAFETY: the hbDNN contract lets the callback run on any thread with the userdata the
// caller registered; we only pass the pointer back.
unsafe impl Send for UserCallback {}

#[derive(Default)]
struct CompletionState {
    status: Option<i32>,
    user: Option<UserCallback>,
    /// The user callback ran (it fires at most once per task).
    fired: bool,
    /// The entry holds its submitted task (or was released): the callback may run.
    armed: bool,
    /// `finish` returned: the status is known and the callback (if any) has returned.
    ended: bool,
}

/// Completion state shared between a task entry and the runtime's done callback.
#[derive(Default)]
pub(crate) struct Completion {
    inner: Mutex<CompletionState>,
    armed_cv: Condvar,
    ended_cv: Condvar,
}

impl Completion {
    /// Called by the runtime when the task ends: waits until the entry holds its task
    /// (so the callback may wait on or release its own handle), records the status and
    /// runs the user callback if one is registered (outside the lock).
    pub(crate) fn finish(&self, token: usize, status: i32) {
        let user = {
            let mut g = self.inner.lock();
            while !g.armed {
                self.armed_cv.wait(&mut g);
            }
            g.status = Some(status);
            let user = g.user.take();
            g.fired |= user.is_some();
            user
        };
        if let Some(u) = user {
            // SAFETY: a C function pointer registered through hbDNNSetTaskDoneCb, called
            // with the task's handle and the caller's userdata, as documented.
            unsafe { (u.cb)(token as hbDNNTaskHandle_t, status, u.userdata) };
        }
        self.inner.lock().ended = true;
        self.ended_cv.notify_all();
    }

    /// Whether a user callback is registered and has not run yet.
    pub(crate) fn has_callback(&self) -> bool {
        self.inner.lock().user.is_some()
    }

    /// Waits until [`finish`](Self::finish) returned (`None` = no limit); the task's
    /// status, or `None` on timeout.
    pub(crate) fn wait_ended(&self, timeout: Option<std::time::Duration>) -> Option<i32> {
        let deadline = timeout.map(|t| std::time::Instant::now() + t);
        let mut g = self.inner.lock();
        while !g.ended {
            match deadline {
                Some(d) => {
                    if self.ended_cv.wait_until(&mut g, d).timed_out() && !g.ended {
                        return None;
                    }
                }
                None => self.ended_cv.wait(&mut g),
            }
        }
        g.status
    }

    /// The entry now holds its submitted task: the callback may run.
    pub(crate) fn arm(&self) {
        self.inner.lock().armed = true;
        self.armed_cv.notify_all();
    }

    /// Drops a registered user callback (the task was released before it ended).
    pub(crate) fn clear(&self) {
        let mut g = self.inner.lock();
        g.user = None;
        g.armed = true;
        self.armed_cv.notify_all();
    }

    /// Registers a user callback, running it at once if the task already ended. A task's
    /// callback fires at most once: after it fired, this is [`Error::ApiUse`].
    pub(crate) fn set(&self, token: usize, user: UserCallback) -> Result<()> {
        let done = {
            let mut g = self.inner.lock();
            match g.status {
                Some(_) if g.fired => {
                    return Err(Error::ApiUse(
                        "the task's done callback already ran (it fires once per task)".into(),
                    ))
                }
                Some(s) => {
                    g.fired = true;
                    Some(s)
                }
                None => {
                    g.user = Some(user);
                    None
                }
            }
        };
        if let Some(status) = done {
            // SAFETY: as in `finish`.
            unsafe { (user.cb)(token as hbDNNTaskHandle_t, status, user.userdata) };
        }
        Ok(())
    }
}

/// Model requests of one `hbDNNInfer` / `hbDNNRoiInfer` call, and buffers they point into.
#[derive(Default)]
pub(crate) struct Pending {
    pub(crate) parts: Vec<Part>,
    /// Library-owned input memory (ROI crops), freed when the task ends.
    pub(crate) owned: Vec<Box<[u8]>>,
}

/// Where a task is in its life.
pub(crate) enum TaskState {
    /// Being assembled with `more = 1` (holds a slot under the task limit).
    Building(Assembly),
    /// Submitted to the runtime or the daemon.
    Submitted(Submitted),
}

/// A task handle's target.
pub(crate) struct TaskEntry {
    pub(crate) state: Mutex<TaskState>,
    pub(crate) completion: Arc<Completion>,
}

impl TaskEntry {
    /// A task in the building state.
    pub(crate) fn building(assembly: Assembly) -> TaskEntry {
        TaskEntry {
            state: Mutex::new(TaskState::Building(assembly)),
            completion: Arc::new(Completion::default()),
        }
    }

    /// The submitted task; [`Error::ApiUse`] while it is being assembled.
    pub(crate) fn task(&self) -> Result<Submitted> {
        match &*self.state.lock() {
            TaskState::Submitted(t) => Ok(t.clone()),
            TaskState::Building(_) => Err(Error::ApiUse(
                "the task was not submitted: its last hbDNNInfer call must have more = 0".into(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{ElemType, TensorDesc, TensorLayout};

    #[test]
    fn scale_outputs_carry_arrays_that_outlive_moves() {
        let d = TensorDesc {
            name: "q".into(),
            valid_shape: vec![1, 4],
            aligned_shape: vec![1, 4],
            layout: TensorLayout::None,
            elem: ElemType::S8,
            quant: Quant::Scale {
                axis: 1,
                scale: vec![0.5, 0.25, 0.125, 1.0],
                zero_point: vec![0, 1, 2, 3],
            },
            aligned_byte_size: 4,
            stride: vec![4, 1],
        };
        let infos = vec![TensorInfo::new(&d).expect("info")];
        let moved = infos; // the Vec moves; the boxed arrays do not
        let p = moved[0].props;
        assert_eq!(p.quantiType, hbDNNQuantiType::SCALE as i32);
        assert_eq!(
            (p.quantizeAxis, p.scale.scaleLen, p.scale.zeroPointLen),
            (1, 4, 4)
        );
        assert_eq!(&p.stride[..2], &[4, 1]);
        // SAFETY: arrays of the reported lengths owned by `moved[0]`.
        unsafe {
            assert_eq!(
                std::slice::from_raw_parts(p.scale.scaleData, 4),
                &[0.5, 0.25, 0.125, 1.0]
            );
            assert_eq!(
                std::slice::from_raw_parts(p.scale.zeroPointData, 4),
                &[0, 1, 2, 3]
            );
        }
        let plain = TensorDesc {
            quant: Quant::None,
            ..d
        };
        let p = TensorInfo::new(&plain).expect("info").props;
        assert_eq!(p.quantiType, hbDNNQuantiType::NONE as i32);
        assert!(p.scale.scaleData.is_null() && p.scale.zeroPointData.is_null());
    }

    #[test]
    fn completion_runs_late_and_early_callbacks_once() {
        use std::sync::atomic::{AtomicI32, Ordering};
        static SEEN: AtomicI32 = AtomicI32::new(0);
        unsafe extern "C" fn cb(_t: hbDNNTaskHandle_t, status: i32, _u: *mut c_void) {
            SEEN.fetch_add(status, Ordering::SeqCst);
        }
        let user = UserCallback {
            cb,
            userdata: std::ptr::null_mut(),
        };
        let c = Completion::default();
        c.arm();
        c.set(7, user).unwrap();
        c.finish(7, 5);
        assert_eq!(SEEN.load(Ordering::SeqCst), 5);
        // Already fired: a second registration is refused and does not run.
        assert!(matches!(c.set(7, user), Err(Error::ApiUse(_))));
        assert_eq!(SEEN.load(Ordering::SeqCst), 5);
        let late = Completion::default();
        late.arm();
        late.finish(9, 5);
        late.set(9, user).unwrap(); // finished, never fired: runs at once, once
        assert!(late.set(9, user).is_err());
        assert_eq!(SEEN.load(Ordering::SeqCst), 10);
        let cleared = Completion::default();
        cleared.set(8, user).unwrap();
        cleared.clear();
        cleared.finish(8, 100);
        assert_eq!(
            SEEN.load(Ordering::SeqCst),
            10,
            "a cleared callback never runs"
        );
    }
}
