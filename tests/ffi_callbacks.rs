//! Done callbacks through the C ABI, in a process of its own: waiting on the callback's own
//! task and releasing it from inside the callback, submitting and waiting on another task
//! from a callback, and a callback registered after completion firing once. Order and
//! status codes only, never wall time.

mod capi_support;

use std::ffi::{c_char, c_void, CString};
use std::ptr::null_mut;
use std::sync::Mutex;

use capi_support::{ctrl, tensor};
use vnpu::error::codes::*;
use vnpu::ffi::*;

const MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/models/tiny_classifier.onnx");

/// What one callback saw.
#[derive(Debug, Default)]
struct Seen {
    status: Vec<i32>,
    own_wait: Vec<i32>,
    own_release: Vec<i32>,
    inner: Vec<i32>,
}

/// Everything a callback needs to submit a second inference.
struct Ctx {
    seen: Mutex<Seen>,
    model: hbDNNHandle_t,
    input: hbDNNTensor,
    output: Mutex<hbDNNTensor>,
    release_inside: bool,
    submit_inside: bool,
}

unsafe extern "C" fn on_done(task: hbDNNTaskHandle_t, status: i32, user: *mut c_void) {
    // SAFETY: `user` is the `Ctx` registered below, alive until the test ends.
    let ctx = unsafe { &*(user as *const Ctx) };
    // SAFETY: the callback's own live handle.
    let own = unsafe { hbDNNWaitTaskDone(task, 0) };
    let mut inner = None;
    if ctx.submit_inside {
        let mut t = null_mut();
        let mut out = ctx.output.lock().unwrap();
        let mut o: *mut hbDNNTensor = &mut *out;
        let mut c = ctrl(0, 0);
        // SAFETY: valid pointers; the memory outlives the inner task (waited here).
        let rc = unsafe { hbDNNInfer(&mut t, &mut o, &ctx.input, ctx.model, &mut c) };
        inner = Some(if rc == 0 {
            // SAFETY: the inner task's handle, when submitted.
            unsafe {
                let w = hbDNNWaitTaskDone(t, 0);
                assert_eq!(hbDNNReleaseTask(t), 0);
                w
            }
        } else {
            rc
        });
    }
    // SAFETY: the callback's own live handle.
    let released = ctx
        .release_inside
        .then(|| unsafe { hbDNNReleaseTask(task) });
    let mut s = ctx.seen.lock().unwrap();
    s.status.push(status);
    s.own_wait.push(own);
    s.own_release.extend(released);
    s.inner.extend(inner);
}

#[test]
fn c_callbacks_wait_release_submit_and_fire_once() {
    let path = CString::new(MODEL).unwrap();
    let mut names = [path.as_ptr()];
    let mut p = null_mut();
    let mut list: *mut *const c_char = null_mut();
    let mut n = 0;
    let mut h = null_mut();
    // SAFETY: valid out-pointers and one valid path.
    unsafe {
        assert_eq!(hbDNNInitializeFromFiles(&mut p, names.as_mut_ptr(), 1), 0);
        assert_eq!(hbDNNGetModelNameList(&mut list, &mut n, p), 0);
        assert_eq!(hbDNNGetModelHandle(&mut h, p, *list), 0);
    }
    // SAFETY: all-zero properties are valid; valid out-pointers.
    let (mut ip, mut op): (hbDNNTensorProperties, hbDNNTensorProperties) =
        unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
    // SAFETY: as above.
    unsafe {
        assert_eq!(hbDNNGetInputTensorProperties(&mut ip, h, 0), 0);
        assert_eq!(hbDNNGetOutputTensorProperties(&mut op, h, 0), 0);
    }
    let mut x = vec![0u8; ip.alignedByteSize as usize];
    let mut y = vec![0u8; op.alignedByteSize as usize];
    let mut y_inner = vec![0u8; op.alignedByteSize as usize];
    for (release_inside, submit_inside) in [(false, false), (true, false), (false, true)] {
        let ctx = Box::new(Ctx {
            seen: Mutex::default(),
            model: h,
            input: tensor(ip, &mut x),
            output: Mutex::new(tensor(op, &mut y_inner)),
            release_inside,
            submit_inside,
        });
        let user = &*ctx as *const Ctx as *mut c_void;
        let mut out = tensor(op, &mut y);
        let mut o: *mut hbDNNTensor = &mut out;
        let mut t = null_mut();
        // A task assembled in two calls: the callback is registered before it is
        // submitted, so it runs on the library's callback thread.
        let mut c = ctrl(0, 1);
        // SAFETY: valid pointers; the memory outlives the task.
        unsafe {
            assert_eq!(hbDNNInfer(&mut t, &mut o, &ctx.input, h, &mut c), 0);
            assert_eq!(hbDNNSetTaskDoneCb(t, Some(on_done), user), 0);
            c.more = 0;
            let mut o2: *mut hbDNNTensor = &mut out;
            assert_eq!(hbDNNInfer(&mut t, &mut o2, &ctx.input, h, &mut c), 0);
        }
        if release_inside {
            // The handle is released by the callback: wait for the callback through the
            // seen status, then the handle is gone.
            while ctx.seen.lock().unwrap().status.is_empty() {
                std::thread::yield_now();
            }
            assert_eq!(
                // SAFETY: a released handle is a documented error.
                unsafe { hbDNNWaitTaskDone(t, 0) },
                HB_DNN_INVALID_TASK_HANDLE
            );
        } else {
            // SAFETY: a live handle.
            unsafe {
                assert_eq!(hbDNNWaitTaskDone(t, 0), 0);
                // Registering after the callback fired: refused, not called again.
                assert_eq!(
                    hbDNNSetTaskDoneCb(t, Some(on_done), user),
                    HB_DNN_API_USE_ERROR
                );
                assert_eq!(hbDNNReleaseTask(t), 0);
            }
        }
        let s = ctx.seen.lock().unwrap();
        assert_eq!(s.status, vec![0], "fired once with success");
        assert_eq!(s.own_wait, vec![0], "own wait inside the callback");
        if release_inside {
            assert_eq!(s.own_release, vec![0]);
        }
        if submit_inside {
            assert_eq!(
                s.inner,
                vec![0],
                "a task submitted and waited in a callback"
            );
        }
    }
    // A callback registered after completion of a task that had none fires once.
    let ctx = Box::new(Ctx {
        seen: Mutex::default(),
        model: h,
        input: tensor(ip, &mut x),
        output: Mutex::new(tensor(op, &mut y_inner)),
        release_inside: false,
        submit_inside: false,
    });
    let user = &*ctx as *const Ctx as *mut c_void;
    let mut out = tensor(op, &mut y);
    let mut o: *mut hbDNNTensor = &mut out;
    let mut t = null_mut();
    let mut c = ctrl(0, 0);
    // SAFETY: valid pointers; the memory outlives the task.
    unsafe {
        assert_eq!(hbDNNInfer(&mut t, &mut o, &ctx.input, h, &mut c), 0);
        assert_eq!(hbDNNWaitTaskDone(t, 0), 0);
        assert_eq!(hbDNNSetTaskDoneCb(t, Some(on_done), user), 0);
        assert_eq!(
            hbDNNSetTaskDoneCb(t, Some(on_done), user),
            HB_DNN_API_USE_ERROR
        );
        assert_eq!(hbDNNReleaseTask(t), 0);
        assert_eq!(hbDNNRelease(p), 0);
    }
    assert_eq!(ctx.seen.lock().unwrap().status, vec![0]);
}
