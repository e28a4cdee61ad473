//! C ABI through the rlib: packed / model / task handles (generational registry),
//! model queries, tensor validation against the model, `more` task assembly.

use std::ffi::{c_char, CStr};
use std::ptr::{null, null_mut};
use std::sync::Arc;

use vnpu::error::codes::*;
use vnpu::ffi::*;
use vnpu::runtime::{ElemType, Model, PackedModel, Quant, TensorDesc, TensorLayout};

fn desc(name: &str, elem: ElemType, shape: &[i32], bytes: usize, quant: Quant) -> TensorDesc {
    TensorDesc {
        name: name.into(),
        valid_shape: shape.to_vec(),
        aligned_shape: shape.to_vec(),
        layout: TensorLayout::Nchw,
        elem,
        quant,
        aligned_byte_size: bytes,
        stride: vec![0; shape.len()],
    }
}

/// Two models: "cls" (NV12 1x3x4x4 input; F32 [1,10] and quantised S8 [1,4] outputs)
/// and "feat" (F32 [1,2] input and output).
fn packed() -> hbPackedDNNHandle_t {
    let cls = Model {
        name: "cls".into(),
        inputs: vec![desc(
            "image",
            ElemType::ImgNv12,
            &[1, 3, 4, 4],
            24,
            Quant::None,
        )],
        outputs: vec![
            desc("scores", ElemType::F32, &[1, 10], 40, Quant::None),
            desc(
                "q",
                ElemType::S8,
                &[1, 4],
                4,
                Quant::Scale {
                    axis: 1,
                    scale: vec![0.5, 0.25, 0.125, 1.0],
                    zero_point: vec![0, 1, 2, 3],
                },
            ),
        ],
    };
    let feat = Model {
        name: "feat".into(),
        inputs: vec![desc("x", ElemType::F32, &[1, 2], 8, Quant::None)],
        outputs: vec![desc("y", ElemType::F32, &[1, 2], 8, Quant::None)],
    };
    packed_handle(PackedModel {
        models: vec![Arc::new(cls), Arc::new(feat)],
    })
    .expect("register")
}

fn model(p: hbPackedDNNHandle_t, name: &CStr) -> hbDNNHandle_t {
    let mut h = null_mut();
    // SAFETY: valid out-pointer and NUL-terminated name.
    assert_eq!(unsafe { hbDNNGetModelHandle(&mut h, p, name.as_ptr()) }, 0);
    h
}

fn props(h: hbDNNHandle_t, output: bool, i: i32) -> hbDNNTensorProperties {
    // SAFETY: an all-zero hbDNNTensorProperties is a valid value (integers, NULL pointers).
    let mut p: hbDNNTensorProperties = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer.
    let rc = unsafe {
        if output {
            hbDNNGetOutputTensorProperties(&mut p, h, i)
        } else {
            hbDNNGetInputTensorProperties(&mut p, h, i)
        }
    };
    assert_eq!(rc, 0);
    p
}

/// A tensor with the model's properties and memory in `buf` at `slot`.
fn tensor(p: hbDNNTensorProperties, buf: &mut [u8]) -> hbDNNTensor {
    let empty = hbSysMem {
        phyAddr: 0,
        virAddr: null_mut(),
        memSize: 0,
    };
    let mut t = hbDNNTensor {
        sysMem: [empty; 4],
        properties: p,
    };
    t.sysMem[0].virAddr = buf.as_mut_ptr().cast();
    t.sysMem[0].memSize = buf.len() as u32;
    t
}

fn ctrl(more: i32) -> hbDNNInferCtrlParam {
    hbDNNInferCtrlParam {
        bpuCoreId: 0,
        dspCoreId: 0,
        priority: 0,
        more,
        customId: 0,
        reserved1: 0,
        reserved2: 0,
    }
}

#[test]
fn names_models_and_properties() {
    let p = packed();
    let mut list: *mut *const c_char = null_mut();
    let mut n = 0;
    // SAFETY: valid out-pointers.
    assert_eq!(unsafe { hbDNNGetModelNameList(&mut list, &mut n, p) }, 0);
    assert_eq!(n, 2);
    // SAFETY: the library returned `n` valid C strings.
    let names: Vec<String> = (0..n as usize)
        .map(|i| {
            unsafe { CStr::from_ptr(*list.add(i)) }
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(names, ["cls", "feat"]);

    let cls = model(p, c"cls");
    let (mut ins, mut outs) = (0, 0);
    // SAFETY: valid out-pointers.
    unsafe {
        assert_eq!(hbDNNGetInputCount(&mut ins, cls), 0);
        assert_eq!(hbDNNGetOutputCount(&mut outs, cls), 0);
    }
    assert_eq!((ins, outs), (1, 2));
    let mut name: *const c_char = null();
    // SAFETY: valid out-pointer; the name is library-owned.
    unsafe {
        assert_eq!(hbDNNGetOutputName(&mut name, cls, 1), 0);
        assert_eq!(CStr::from_ptr(name).to_str().expect("utf8"), "q");
        assert_eq!(
            hbDNNGetInputName(&mut name, cls, 1),
            HB_DNN_INVALID_ARGUMENT
        );
    }
    let image = props(cls, false, 0);
    assert_eq!(image.tensorType, hbDNNDataType::HB_DNN_IMG_TYPE_NV12 as i32);
    assert_eq!(
        image.tensorLayout,
        hbDNNTensorLayout::HB_DNN_LAYOUT_NCHW as i32
    );
    assert_eq!(image.validShape.numDimensions, 4);
    assert_eq!(&image.validShape.dimensionSize[..4], &[1, 3, 4, 4]);
    assert_eq!(image.quantiType, hbDNNQuantiType::NONE as i32);
    let q = props(cls, true, 1);
    assert_eq!(q.quantiType, hbDNNQuantiType::SCALE as i32);
    assert_eq!(q.quantizeAxis, 1);
    assert_eq!((q.scale.scaleLen, q.scale.zeroPointLen), (4, 4));
    // SAFETY: arrays of the reported lengths, valid while the pack is loaded.
    unsafe {
        assert_eq!(
            std::slice::from_raw_parts(q.scale.scaleData, 4),
            &[0.5, 0.25, 0.125, 1.0]
        );
        assert_eq!(
            std::slice::from_raw_parts(q.scale.zeroPointData, 4),
            &[0, 1, 2, 3]
        );
    }
    let mut unknown = null_mut();
    // SAFETY: valid out-pointer and name.
    let rc = unsafe { hbDNNGetModelHandle(&mut unknown, p, c"nope".as_ptr()) };
    assert_eq!(rc, HB_DNN_INVALID_ARGUMENT);
    assert!(unknown.is_null(), "out-param untouched on failure");
    assert!(last_error_detail().contains("cls, feat"));
    // SAFETY: a handle we own.
    assert_eq!(unsafe { hbDNNRelease(p) }, 0);
}

#[test]
fn released_handles_are_stale_never_crash() {
    let p = packed();
    let feat = model(p, c"feat");
    // SAFETY: handles are tokens; any value is accepted.
    unsafe {
        assert_eq!(hbDNNRelease(p), 0);
        assert_eq!(hbDNNRelease(p), HB_DNN_INVALID_PACKED_DNN_HANDLE);
        let mut n = 0;
        assert_eq!(hbDNNGetInputCount(&mut n, feat), HB_DNN_INVALID_DNN_HANDLE);
        let mut h = null_mut();
        assert_eq!(
            hbDNNGetModelHandle(&mut h, p, c"feat".as_ptr()),
            HB_DNN_INVALID_PACKED_DNN_HANDLE
        );
        // A model handle is not a packed handle and vice versa.
        let p2 = packed();
        let feat2 = model(p2, c"feat");
        assert_eq!(hbDNNRelease(feat2), HB_DNN_INVALID_PACKED_DNN_HANDLE);
        assert_eq!(hbDNNGetInputCount(&mut n, p2), HB_DNN_INVALID_DNN_HANDLE);
        assert_ne!(p2, p, "a reused slot gets a new generation");
        assert_eq!(hbDNNRelease(p2), 0);
    }
    assert!(last_error_detail().contains("stale") || last_error_detail().contains("not a"));
}

/// Breaks one field of the input or the outputs.
type Breaker = Box<dyn Fn(&mut hbDNNTensor, &mut [hbDNNTensor; 2])>;

#[test]
fn tensor_mismatches_are_reported_with_detail() {
    let p = packed();
    let cls = model(p, c"cls");
    let mut in_buf = vec![0u8; 24];
    let mut out0 = vec![0u8; 40];
    let mut out1 = vec![0u8; 4];
    let input = tensor(props(cls, false, 0), &mut in_buf);
    let mut outputs = [
        tensor(props(cls, true, 0), &mut out0),
        tensor(props(cls, true, 1), &mut out1),
    ];
    let mut c = ctrl(1);
    let cases: Vec<(Breaker, &str)> = vec![
        (
            Box::new(|i, _| i.sysMem[0].memSize = 23),
            "sysMem[0].memSize",
        ),
        (Box::new(|i, _| i.properties.tensorType = 13), "tensorType"),
        (
            Box::new(|i, _| i.properties.validShape.dimensionSize[3] = 8),
            "validShape",
        ),
        (
            Box::new(|i, _| i.properties.alignedShape.numDimensions = 3),
            "alignedShape",
        ),
        (
            Box::new(|i, _| i.properties.tensorLayout = 0),
            "tensorLayout",
        ),
        (Box::new(|i, _| i.sysMem[0].virAddr = null_mut()), "virAddr"),
        (Box::new(|_, o| o[1].sysMem[0].memSize = 3), "output 1 'q'"),
        (
            Box::new(|_, o| o[0].properties.validShape.dimensionSize[1] = 11),
            "output 0 'scores'",
        ),
    ];
    for (break_it, expected) in cases {
        let mut i = input;
        let mut o = outputs;
        break_it(&mut i, &mut o);
        let mut task = null_mut();
        let mut out_ptr = o.as_mut_ptr();
        // SAFETY: valid pointers; the arrays have the model's counts.
        let rc = unsafe { hbDNNInfer(&mut task, &mut out_ptr, &i, cls, &mut c) };
        assert_eq!(rc, HB_DNN_INVALID_ARGUMENT, "{expected}");
        assert!(task.is_null());
        let detail = last_error_detail();
        assert!(detail.contains(expected), "{expected}: {detail}");
    }
    // NV12_SEPARATE instead of NV12 is allowed when both planes are given.
    let mut y = vec![0u8; 16];
    let mut uv = vec![0u8; 8];
    let mut sep = tensor(props(cls, false, 0), &mut y);
    sep.properties.tensorType = hbDNNDataType::HB_DNN_IMG_TYPE_NV12_SEPARATE as i32;
    sep.sysMem[1].virAddr = uv.as_mut_ptr().cast();
    sep.sysMem[1].memSize = 8;
    let mut task = null_mut();
    let mut out_ptr = outputs.as_mut_ptr();
    // SAFETY: as above; more = 1 only assembles the task.
    unsafe {
        assert_eq!(hbDNNInfer(&mut task, &mut out_ptr, &sep, cls, &mut c), 0);
        assert_eq!(hbDNNReleaseTask(task), 0);
        assert_eq!(hbDNNRelease(p), 0);
    }
}

#[test]
fn more_tasks_assemble_under_one_handle() {
    let p = packed();
    let feat = model(p, c"feat");
    let mut x = vec![0u8; 8];
    let mut y = vec![0u8; 8];
    let input = tensor(props(feat, false, 0), &mut x);
    let mut output = tensor(props(feat, true, 0), &mut y);
    let mut out_ptr: *mut hbDNNTensor = &mut output;
    let mut task: hbDNNTaskHandle_t = null_mut();
    let mut c = ctrl(1);
    // SAFETY: valid pointers throughout; handles are tokens.
    unsafe {
        assert_eq!(hbDNNInfer(&mut task, &mut out_ptr, &input, feat, &mut c), 0);
        let first = task;
        assert!(!first.is_null());
        assert_eq!(hbDNNInfer(&mut task, &mut out_ptr, &input, feat, &mut c), 0);
        assert_eq!(task, first, "appending keeps the same handle");
        assert_eq!(hbDNNWaitTaskDone(task, 0), HB_DNN_API_USE_ERROR);
        let mut est = 0;
        assert_eq!(
            hbDNNGetTaskEstimateTime(&mut est, task),
            HB_DNN_API_USE_ERROR
        );
        // 255 models at most in one task.
        for _ in 2..255 {
            assert_eq!(hbDNNInfer(&mut task, &mut out_ptr, &input, feat, &mut c), 0);
        }
        assert_eq!(
            hbDNNInfer(&mut task, &mut out_ptr, &input, feat, &mut c),
            HB_DNN_TASK_BATCH_SIZE_EXCEED_LIMIT
        );
        assert_eq!(hbDNNReleaseTask(task), 0);
        assert_eq!(hbDNNReleaseTask(task), HB_DNN_INVALID_TASK_HANDLE);
        assert_eq!(hbDNNWaitTaskDone(task, 0), HB_DNN_INVALID_TASK_HANDLE);
        // A released task handle cannot be appended to.
        assert_eq!(
            hbDNNInfer(&mut task, &mut out_ptr, &input, feat, &mut c),
            HB_DNN_INVALID_TASK_HANDLE
        );
        assert_eq!(hbDNNRelease(p), 0);
    }
}

#[test]
fn roi_infer_validates_rois_and_frames() {
    let p = packed();
    let cls = model(p, c"cls");
    let feat = model(p, c"feat");
    // A 16x8 NV12 frame with a 32-byte row stride.
    let mut frame = vec![0u8; 32 * 8 * 3 / 2];
    let mut fp = props(cls, false, 0);
    fp.validShape.dimensionSize[2] = 8;
    fp.validShape.dimensionSize[3] = 16;
    fp.alignedShape = fp.validShape;
    fp.alignedShape.dimensionSize[3] = 32;
    let input = tensor(fp, &mut frame);
    let mut out0 = vec![0u8; 80];
    let mut out1 = vec![0u8; 8];
    let mut outputs = [
        tensor(props(cls, true, 0), &mut out0),
        tensor(props(cls, true, 1), &mut out1),
    ];
    let mut out_ptr = outputs.as_mut_ptr();
    let mut c = ctrl(1);
    let mut task = null_mut();
    let roi = |left, top, right, bottom| hbDNNRoi {
        left,
        top,
        right,
        bottom,
    };
    // SAFETY: valid pointers; `input` holds one tensor per ROI group.
    unsafe {
        let mut bad = [roi(1, 0, 7, 7)];
        assert_eq!(
            hbDNNRoiInfer(
                &mut task,
                &mut out_ptr,
                &input,
                bad.as_mut_ptr(),
                1,
                cls,
                &mut c
            ),
            HB_DNN_INVALID_ARGUMENT
        );
        assert!(last_error_detail().contains("even"));
        let mut outside = [roi(0, 0, 17, 7)];
        assert_eq!(
            hbDNNRoiInfer(
                &mut task,
                &mut out_ptr,
                &input,
                outside.as_mut_ptr(),
                1,
                cls,
                &mut c
            ),
            HB_DNN_INVALID_ARGUMENT
        );
        assert!(last_error_detail().contains("outside"));
        let mut fine = [roi(0, 0, 7, 7), roi(8, 0, 15, 7)];
        let inputs = [input, input];
        // Outputs sized for one ROI are too small for two ...
        (*out_ptr).sysMem[0].memSize = 40;
        assert_eq!(
            hbDNNRoiInfer(
                &mut task,
                &mut out_ptr,
                inputs.as_ptr(),
                fine.as_mut_ptr(),
                2,
                cls,
                &mut c
            ),
            HB_DNN_INVALID_ARGUMENT
        );
        assert!(
            last_error_detail().contains("memSize"),
            "{}",
            last_error_detail()
        );
        // ... and enough for two ROIs concatenated along N.
        (*out_ptr).sysMem[0].memSize = 80;
        assert_eq!(
            hbDNNRoiInfer(
                &mut task,
                &mut out_ptr,
                inputs.as_ptr(),
                fine.as_mut_ptr(),
                2,
                cls,
                &mut c
            ),
            0
        );
        assert_eq!(hbDNNReleaseTask(task), 0);
        task = null_mut();
        assert_eq!(
            hbDNNRoiInfer(
                &mut task,
                &mut out_ptr,
                &input,
                fine.as_mut_ptr(),
                1,
                cls,
                &mut c
            ),
            0
        );
        assert_eq!(hbDNNReleaseTask(task), 0);
        task = null_mut();
        assert_eq!(
            hbDNNRoiInfer(
                &mut task,
                &mut out_ptr,
                &input,
                fine.as_mut_ptr(),
                1,
                feat,
                &mut c
            ),
            HB_DNN_INVALID_ARGUMENT
        );
        assert!(last_error_detail().contains("no NV12 input"));
        assert_eq!(
            hbDNNRoiInfer(
                &mut task,
                &mut out_ptr,
                &input,
                fine.as_mut_ptr(),
                256,
                cls,
                &mut c
            ),
            HB_DNN_TASK_BATCH_SIZE_EXCEED_LIMIT
        );
        assert_eq!(hbDNNRelease(p), 0);
    }
}

#[test]
fn null_pointers_are_invalid_arguments() {
    let p = packed();
    let feat = model(p, c"feat");
    let mut n = 0;
    // SAFETY: NULL is checked before any use.
    unsafe {
        assert_eq!(
            hbDNNInitializeFromFiles(null_mut(), null_mut(), 1),
            HB_DNN_INVALID_ARGUMENT
        );
        assert_eq!(
            hbDNNGetModelNameList(null_mut(), &mut n, p),
            HB_DNN_INVALID_ARGUMENT
        );
        assert_eq!(
            hbDNNGetInputCount(null_mut(), feat),
            HB_DNN_INVALID_ARGUMENT
        );
        assert_eq!(
            hbDNNGetInputTensorProperties(null_mut(), feat, 0),
            HB_DNN_INVALID_ARGUMENT
        );
        let mut task = null_mut();
        let mut c = ctrl(0);
        assert_eq!(
            hbDNNInfer(&mut task, null_mut(), null(), feat, &mut c),
            HB_DNN_INVALID_ARGUMENT
        );
        assert!(last_error_detail().contains("output"));
        let mut no_outputs: *mut hbDNNTensor = null_mut();
        let mut x = vec![0u8; 8];
        let input = tensor(props(feat, false, 0), &mut x);
        assert_eq!(
            hbDNNInfer(&mut task, &mut no_outputs, &input, feat, &mut c),
            HB_DNN_INVALID_ARGUMENT
        );
        assert!(last_error_detail().contains("*output"));
        assert_eq!(
            hbDNNSetTaskDoneCb(null_mut(), None, null_mut()),
            HB_DNN_INVALID_TASK_HANDLE
        );
        assert_eq!(hbDNNRelease(p), 0);
    }
}
