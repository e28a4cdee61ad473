//! Task limits through the C ABI, in a process of its own (the runtime is global):
//! un-released tasks count against the live-task limit until hbDNNReleaseTask, and the
//! C loaders accept ONNX files and bytes (compiled on load).

use std::ffi::c_char;
use std::ptr::null_mut;

use vnpu::error::codes::*;
use vnpu::ffi::*;

const MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/models/tiny_classifier.onnx");

fn first_model(p: hbPackedDNNHandle_t) -> hbDNNHandle_t {
    let mut names: *mut *const c_char = null_mut();
    let mut n = 0;
    let mut h = null_mut();
    // SAFETY: valid out-pointers; the name list is library-owned.
    unsafe {
        assert_eq!(hbDNNGetModelNameList(&mut names, &mut n, p), 0);
        assert_eq!(n, 1);
        assert_eq!(hbDNNGetModelHandle(&mut h, p, *names), 0);
    }
    h
}

fn props(h: hbDNNHandle_t, output: bool) -> hbDNNTensorProperties {
    // SAFETY: an all-zero hbDNNTensorProperties is valid (integers and NULL pointers).
    let mut p: hbDNNTensorProperties = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer.
    let rc = unsafe {
        if output {
            hbDNNGetOutputTensorProperties(&mut p, h, 0)
        } else {
            hbDNNGetInputTensorProperties(&mut p, h, 0)
        }
    };
    assert_eq!(rc, 0);
    p
}

fn tensor(p: hbDNNTensorProperties, buf: &mut [u8]) -> hbDNNTensor {
    let mem = hbSysMem {
        phyAddr: 0,
        virAddr: null_mut(),
        memSize: 0,
    };
    let mut t = hbDNNTensor {
        sysMem: [mem; 4],
        properties: p,
    };
    t.sysMem[0].virAddr = buf.as_mut_ptr().cast();
    t.sysMem[0].memSize = buf.len() as u32;
    t
}

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
    let in_props = props(h, false);
    let out_props = props(h, true);
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
            props(h, false).tensorType,
            hbDNNDataType::HB_DNN_TENSOR_TYPE_F32 as i32
        );
        assert_eq!(hbDNNRelease(p), 0);
    }
}
