//! Task limits through the C ABI, in a process of its own (the runtime is global):
//! un-released tasks count against the live-task limit until hbDNNReleaseTask, and the
//! C loaders accept ONNX files and bytes (compiled on load).

mod capi_support;

use std::ptr::null_mut;

use capi_support::{first_model, props, tensor};
use vnpu::error::codes::*;
use vnpu::ffi::*;

const MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/models/tiny_classifier.onnx");

#[test]
fn unreleased_tasks_hit_the_limit_until_released() {
    let bytes = std::fs::read(MODEL).expect("model");
    let mut data = [bytes.as_ptr().cast()];
    let mut len = [bytes.len() as i32];
    let mut p = null_mut();
    assert_eq!(
        // SAFETY: arrays of one entry; the bytes outlive the call.
        unsafe { hbDNNInitializeFromDDR(&mut p, data.as_mut_ptr(), len.as_mut_ptr(), 1) },
        0
    );
    let h = first_model(p);
    let in_props = props(h, false, 0);
    let out_props = props(h, true, 0);
    let mut x = vec![0u8; in_props.alignedByteSize as usize];
    let input = tensor(in_props, &mut x);
    let mut outs: Vec<Vec<u8>> = (0..40)
        .map(|_| vec![0u8; out_props.alignedByteSize as usize])
        .collect();
    let mut ctrl = hbDNNInferCtrlParam {
        bpuCoreId: 0,
        dspCoreId: 0,
        priority: 0,
        more: 0,
        customId: 0,
        reserved1: 0,
        reserved2: 0,
    };
    let mut tasks = Vec::new();
    let mut refused = 0;
    for o in outs.iter_mut() {
        let mut out = tensor(out_props, o);
        let mut out_ptr: *mut hbDNNTensor = &mut out;
        let mut task = null_mut();
        // SAFETY: valid pointers; outputs outlive the tasks (waited below).
        let rc = unsafe { hbDNNInfer(&mut task, &mut out_ptr, &input, h, &mut ctrl) };
        match rc {
            0 => tasks.push(task),
            HB_DNN_TASK_NUM_EXCEED_LIMIT => {
                assert!(task.is_null());
                refused += 1;
            }
            other => panic!("unexpected status {other}: {}", last_error_detail()),
        }
    }
    assert_eq!(tasks.len(), 32, "at most 32 live tasks");
    assert_eq!(refused, 8);
    for t in &tasks {
        // SAFETY: live task handles.
        unsafe {
            assert_eq!(hbDNNWaitTaskDone(*t, 0), 0);
            assert_eq!(hbDNNReleaseTask(*t), 0);
        }
    }
    // Released tasks no longer count.
    let mut out = tensor(out_props, &mut outs[0]);
    let mut out_ptr: *mut hbDNNTensor = &mut out;
    let mut task = null_mut();
    // SAFETY: as above.
    unsafe {
        assert_eq!(hbDNNInfer(&mut task, &mut out_ptr, &input, h, &mut ctrl), 0);
        assert_eq!(
            hbDNNWaitTaskDone(task, -1),
            0,
            "negative timeout waits until done"
        );
        assert_eq!(hbDNNReleaseTask(task), 0);
        assert_eq!(hbDNNRelease(p), 0);
    }
}

#[test]
fn onnx_files_load_through_the_c_api() {
    let path = std::ffi::CString::new(MODEL).expect("path");
    let mut names = [path.as_ptr()];
    let mut p = null_mut();
    // SAFETY: one valid path.
    unsafe {
        assert_eq!(hbDNNInitializeFromFiles(&mut p, names.as_mut_ptr(), 1), 0);
        let h = first_model(p);
        assert_eq!(
            props(h, false, 0).tensorType,
            hbDNNDataType::HB_DNN_TENSOR_TYPE_F32 as i32
        );
        assert_eq!(hbDNNRelease(p), 0);
    }
}
