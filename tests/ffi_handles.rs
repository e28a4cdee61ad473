//! C ABI through the rlib: packed / model / task handles (generational registry),
//! model queries, tensor validation against the model, `more` task assembly.

mod capi_support;

use std::ffi::{c_char, c_void, CStr};
use std::path::PathBuf;
use std::ptr::{null, null_mut};
use std::sync::atomic::{AtomicI32, Ordering};

use capi_support::{ctrl, model_named, props, tensor};
use once_cell::sync::Lazy;
use vnpu::compile::{CompileOptions, InputParams, InputType};
use vnpu::error::codes::*;
use vnpu::ffi::*;
use vnpu::ir::ImageFormat;
use vnpu::runtime::{CtrlParams, IoBuffer, PackedModel, Roi, RoiFrame, Runtime};

/// The committed tiny classifier compiled twice: "cls" takes NV12 1x3x64x64 (NCHW),
/// "feat" the raw f32 1x3x64x64 tensor; both output f32 [1, 10] probabilities.
/// (Model names come from the file stems.)
static MODELS: Lazy<PackedModel> = Lazy::new(|| {
    let src = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/models/tiny_classifier.onnx"
    ));
    let dir = std::env::temp_dir().join(format!("vnpu-ffi-handles-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let (cls, feat) = (dir.join("cls.onnx"), dir.join("feat.onnx"));
    std::fs::copy(&src, &cls).expect("copy model");
    std::fs::copy(&src, &feat).expect("copy model");
    let nv12 = CompileOptions {
        inputs: vec![InputParams {
            name: "images".into(),
            shape: None,
            input_type: InputType::Image(ImageFormat::Nv12),
            nhwc: false,
            train_bgr: false,
            mean: vec![],
            scale: vec![],
        }],
        ..CompileOptions::default()
    };
    let a = PackedModel::load_files_with(&[cls], &nv12).expect("nv12 model");
    let b = PackedModel::load_files_with(&[feat], &CompileOptions::default()).expect("f32 model");
    let _ = std::fs::remove_dir_all(&dir);
    PackedModel {
        models: a.models.into_iter().chain(b.models).collect(),
        sources: a.sources.into_iter().chain(b.sources).collect(),
    }
});

/// A fresh packed handle over the shared models.
fn packed() -> hbPackedDNNHandle_t {
    let m = &*MODELS;
    packed_handle(PackedModel {
        models: m.models.clone(),
        sources: m.sources.clone(),
    })
    .expect("register")
}

const NV12_BYTES: usize = 64 * 64 * 3 / 2;
const F32_BYTES: usize = 3 * 64 * 64 * 4;

fn sum(buf: &[u8]) -> f32 {
    buf.chunks_exact(4)
        .map(|b| f32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        .sum()
}

#[test]
fn names_models_and_properties() {
    let p = packed();
    let mut list: *mut *const c_char = null_mut();
    let mut n = 0;
    // SAFETY: valid out-pointers.
    assert_eq!(unsafe { hbDNNGetModelNameList(&mut list, &mut n, p) }, 0);
    assert_eq!(n, 2);
    let names: Vec<String> = (0..n as usize)
        .map(|i| {
            // SAFETY: the library returned `n` valid C strings.
            unsafe { CStr::from_ptr(*list.add(i)) }
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(names, ["cls", "feat"]);

    let cls = model_named(p, c"cls");
    let (mut ins, mut outs) = (0, 0);
    let mut name: *const c_char = null();
    // SAFETY: valid out-pointers; names are library-owned.
    unsafe {
        assert_eq!(hbDNNGetInputCount(&mut ins, cls), 0);
        assert_eq!(hbDNNGetOutputCount(&mut outs, cls), 0);
        assert_eq!((ins, outs), (1, 1));
        assert_eq!(hbDNNGetInputName(&mut name, cls, 0), 0);
        assert_eq!(CStr::from_ptr(name).to_str().expect("utf8"), "images");
        assert_eq!(hbDNNGetOutputName(&mut name, cls, 0), 0);
        assert_eq!(CStr::from_ptr(name).to_str().expect("utf8"), "probs");
        assert_eq!(
            hbDNNGetInputName(&mut name, cls, 1),
            HB_DNN_INVALID_ARGUMENT
        );
        assert_eq!(
            hbDNNGetOutputName(&mut name, cls, -1),
            HB_DNN_INVALID_ARGUMENT
        );
        let mut source = -1;
        assert_eq!(hbDNNGetInputSource(&mut source, cls, 0), 0);
        assert_eq!(source, hbDNNInputSource::HB_DNN_INPUT_FROM_DDR as i32);
        let mut latency = -1;
        assert_eq!(hbDNNGetEstimateLatency(&mut latency, cls), 0);
        assert!(latency >= 0);
    }
    let image = props(cls, false, 0);
    assert_eq!(image.tensorType, hbDNNDataType::HB_DNN_IMG_TYPE_NV12 as i32);
    assert_eq!(
        image.tensorLayout,
        hbDNNTensorLayout::HB_DNN_LAYOUT_NCHW as i32
    );
    assert_eq!(image.validShape.numDimensions, 4);
    assert_eq!(&image.validShape.dimensionSize[..4], &[1, 3, 64, 64]);
    assert_eq!(image.quantiType, hbDNNQuantiType::NONE as i32);
    let probs = props(cls, true, 0);
    assert_eq!(
        probs.tensorType,
        hbDNNDataType::HB_DNN_TENSOR_TYPE_F32 as i32
    );
    assert_eq!(probs.alignedByteSize, 40);
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
    let feat = model_named(p, c"feat");
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
        let feat2 = model_named(p2, c"feat");
        assert_eq!(hbDNNRelease(feat2), HB_DNN_INVALID_PACKED_DNN_HANDLE);
        assert_eq!(hbDNNGetInputCount(&mut n, p2), HB_DNN_INVALID_DNN_HANDLE);
        assert_ne!(p2, p, "a reused slot gets a new generation");
        assert_eq!(hbDNNRelease(p2), 0);
    }
}

/// Breaks one field of the input or the output.
type Breaker = fn(&mut hbDNNTensor, &mut hbDNNTensor);

#[test]
fn tensor_mismatches_are_reported_with_detail() {
    let p = packed();
    let cls = model_named(p, c"cls");
    let mut in_buf = vec![0u8; NV12_BYTES];
    let mut out_buf = vec![0u8; 40];
    let input = tensor(props(cls, false, 0), &mut in_buf);
    let output = tensor(props(cls, true, 0), &mut out_buf);
    let mut c = ctrl(0, 1);
    let cases: [(Breaker, &str); 8] = [
        (|i, _| i.sysMem[0].memSize -= 1, "sysMem[0].memSize"),
        (|i, _| i.properties.tensorType = 13, "tensorType"),
        (
            |i, _| i.properties.validShape.dimensionSize[3] = 8,
            "validShape",
        ),
        (
            |i, _| i.properties.alignedShape.numDimensions = 3,
            "alignedShape",
        ),
        (|i, _| i.properties.tensorLayout = 0, "tensorLayout"),
        (|i, _| i.sysMem[0].virAddr = null_mut(), "virAddr"),
        (|_, o| o.sysMem[0].memSize = 39, "output 0 'probs'"),
        (
            |_, o| o.properties.validShape.dimensionSize[1] = 11,
            "output 0 'probs'",
        ),
    ];
    for (break_it, expected) in cases {
        let (mut i, mut o) = (input, output);
        break_it(&mut i, &mut o);
        let mut task = null_mut();
        let mut out_ptr: *mut hbDNNTensor = &mut o;
        // SAFETY: valid pointers; one input and one output as the model has.
        let rc = unsafe { hbDNNInfer(&mut task, &mut out_ptr, &i, cls, &mut c) };
        assert_eq!(rc, HB_DNN_INVALID_ARGUMENT, "{expected}");
        assert!(task.is_null());
        let detail = last_error_detail();
        assert!(detail.contains(expected), "{expected}: {detail}");
    }
    // NV12_SEPARATE instead of NV12 is allowed when both planes are given.
    let mut y = vec![0u8; 64 * 64];
    let mut uv = vec![0u8; 64 * 32];
    let mut sep = tensor(props(cls, false, 0), &mut y);
    sep.properties.tensorType = hbDNNDataType::HB_DNN_IMG_TYPE_NV12_SEPARATE as i32;
    sep.sysMem[1].virAddr = uv.as_mut_ptr().cast();
    sep.sysMem[1].memSize = uv.len() as u32;
    let mut task = null_mut();
    let mut o = output;
    let mut out_ptr: *mut hbDNNTensor = &mut o;
    // SAFETY: as above; more = 1 only assembles the task.
    unsafe {
        assert_eq!(hbDNNInfer(&mut task, &mut out_ptr, &sep, cls, &mut c), 0);
        assert_eq!(hbDNNReleaseTask(task), 0);
        assert_eq!(hbDNNRelease(p), 0);
    }
}

static CALLBACK_STATUS: AtomicI32 = AtomicI32::new(1);

unsafe extern "C" fn record(_task: hbDNNTaskHandle_t, status: i32, userdata: *mut c_void) {
    assert_eq!(userdata as usize, 0xC0FFEE);
    CALLBACK_STATUS.store(status, Ordering::SeqCst);
}

#[test]
fn infer_wait_release_end_to_end() {
    let p = packed();
    let feat = model_named(p, c"feat");
    let mut x = vec![0u8; F32_BYTES];
    for (k, b) in x.chunks_exact_mut(4).enumerate() {
        b.copy_from_slice(&((k % 17) as f32 / 17.0).to_ne_bytes());
    }
    let mut y = vec![0u8; 40];
    let input = tensor(props(feat, false, 0), &mut x);
    let mut output = tensor(props(feat, true, 0), &mut y);
    let mut out_ptr: *mut hbDNNTensor = &mut output;
    let mut task: hbDNNTaskHandle_t = null_mut();
    let mut c = ctrl(0, 0);
    c.priority = 255;
    // SAFETY: valid pointers; buffers outlive the task (waited below).
    unsafe {
        assert_eq!(hbDNNInfer(&mut task, &mut out_ptr, &input, feat, &mut c), 0);
        assert_eq!(
            hbDNNSetTaskDoneCb(task, Some(record), 0xC0FFEE as *mut c_void),
            0
        );
        assert_eq!(hbDNNWaitTaskDone(task, 0), 0);
        assert_eq!(
            hbDNNWaitTaskDone(task, 5),
            0,
            "second wait on a finished task"
        );
        let mut est = -1;
        assert_eq!(hbDNNGetTaskEstimateTime(&mut est, task), 0);
        // Appending to a submitted task is misuse.
        assert_eq!(
            hbDNNInfer(&mut task, &mut out_ptr, &input, feat, &mut c),
            HB_DNN_API_USE_ERROR
        );
        assert_eq!(hbDNNReleaseTask(task), 0);
        assert_eq!(hbDNNWaitTaskDone(task, 0), HB_DNN_INVALID_TASK_HANDLE);
    }
    assert_eq!(CALLBACK_STATUS.load(Ordering::SeqCst), 0);
    assert!((sum(&y) - 1.0).abs() < 1e-3, "softmax output sums to 1");
    // SAFETY: a handle we own.
    assert_eq!(unsafe { hbDNNRelease(p) }, 0);
}

#[test]
fn more_tasks_assemble_under_one_handle() {
    let p = packed();
    let cls = model_named(p, c"cls");
    let feat = model_named(p, c"feat");
    let mut img = vec![128u8; NV12_BYTES];
    let mut x = vec![0u8; F32_BYTES];
    let (mut y1, mut y2) = (vec![0u8; 40], vec![0u8; 40]);
    let in1 = tensor(props(cls, false, 0), &mut img);
    let in2 = tensor(props(feat, false, 0), &mut x);
    let mut o1 = tensor(props(cls, true, 0), &mut y1);
    let mut o2 = tensor(props(feat, true, 0), &mut y2);
    let (mut p1, mut p2): (*mut hbDNNTensor, *mut hbDNNTensor) = (&mut o1, &mut o2);
    let mut task: hbDNNTaskHandle_t = null_mut();
    // SAFETY: valid pointers throughout; handles are tokens.
    unsafe {
        assert_eq!(
            hbDNNInfer(&mut task, &mut p1, &in1, cls, &mut ctrl(0, 1)),
            0
        );
        let first = task;
        assert!(!first.is_null());
        assert_eq!(hbDNNWaitTaskDone(task, 0), HB_DNN_API_USE_ERROR);
        let mut est = 0;
        assert_eq!(
            hbDNNGetTaskEstimateTime(&mut est, task),
            HB_DNN_API_USE_ERROR
        );
        assert_eq!(
            hbDNNInfer(&mut task, &mut p2, &in2, feat, &mut ctrl(0, 0)),
            0
        );
        assert_eq!(task, first, "appending keeps the same handle");
        assert_eq!(hbDNNWaitTaskDone(task, 0), 0);
        assert_eq!(hbDNNReleaseTask(task), 0);
        assert_eq!(hbDNNReleaseTask(task), HB_DNN_INVALID_TASK_HANDLE);
    }
    assert!((sum(&y1) - 1.0).abs() < 1e-3 && (sum(&y2) - 1.0).abs() < 1e-3);

    // 255 models at most in one task; a released handle cannot be appended to.
    let mut task: hbDNNTaskHandle_t = null_mut();
    // SAFETY: as above; the task is never submitted.
    unsafe {
        for _ in 0..255 {
            assert_eq!(
                hbDNNInfer(&mut task, &mut p2, &in2, feat, &mut ctrl(0, 1)),
                0
            );
        }
        assert_eq!(
            hbDNNInfer(&mut task, &mut p2, &in2, feat, &mut ctrl(0, 1)),
            HB_DNN_TASK_BATCH_SIZE_EXCEED_LIMIT
        );
        assert_eq!(hbDNNReleaseTask(task), 0);
        assert_eq!(
            hbDNNInfer(&mut task, &mut p2, &in2, feat, &mut ctrl(0, 0)),
            HB_DNN_INVALID_TASK_HANDLE
        );
        assert_eq!(hbDNNRelease(p), 0);
    }
}

#[test]
fn roi_infer_validates_and_runs() {
    let p = packed();
    let cls = model_named(p, c"cls");
    let feat = model_named(p, c"feat");
    // A 128x96 NV12 frame with a 160-byte row stride.
    let (w, h, stride) = (128usize, 96usize, 160usize);
    let mut frame = vec![0u8; stride * h * 3 / 2];
    for (k, v) in frame.iter_mut().enumerate() {
        *v = (k % 251) as u8;
    }
    let mut fp = props(cls, false, 0);
    fp.validShape.dimensionSize[2] = h as i32;
    fp.validShape.dimensionSize[3] = w as i32;
    fp.alignedShape = fp.validShape;
    fp.alignedShape.dimensionSize[3] = stride as i32;
    let input = tensor(fp, &mut frame);
    let mut out = vec![0u8; 80];
    let mut output = tensor(props(cls, true, 0), &mut out);
    output.sysMem[0].memSize = 40;
    let mut out_ptr: *mut hbDNNTensor = &mut output;
    let mut c = ctrl(0, 0);
    let mut task = null_mut();
    let roi = |left, top, right, bottom| hbDNNRoi {
        left,
        top,
        right,
        bottom,
    };
    let inputs = [input, input];
    // SAFETY: valid pointers; `inputs` holds one frame per ROI group.
    unsafe {
        let mut bad = [roi(1, 0, 63, 63)];
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
        let mut outside = [roi(0, 0, 129, 63)];
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
        let mut two = [roi(0, 0, 63, 63), roi(64, 32, 127, 95)];
        (*out_ptr).properties.validShape.dimensionSize[0] = 2;
        // Output memory for one ROI is too small for two ...
        assert_eq!(
            hbDNNRoiInfer(
                &mut task,
                &mut out_ptr,
                inputs.as_ptr(),
                two.as_mut_ptr(),
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
                two.as_mut_ptr(),
                2,
                cls,
                &mut c
            ),
            0
        );
        assert_eq!(hbDNNWaitTaskDone(task, 0), 0);
        assert_eq!(hbDNNReleaseTask(task), 0);
        task = null_mut();
        assert_eq!(
            hbDNNRoiInfer(
                &mut task,
                &mut out_ptr,
                &input,
                two.as_mut_ptr(),
                1,
                feat,
                &mut c
            ),
            HB_DNN_INVALID_ARGUMENT
        );
        assert!(last_error_detail().contains("no NV12 or Y input"));
        assert_eq!(
            hbDNNRoiInfer(
                &mut task,
                &mut out_ptr,
                &input,
                two.as_mut_ptr(),
                256,
                cls,
                &mut c
            ),
            HB_DNN_TASK_BATCH_SIZE_EXCEED_LIMIT
        );
        assert_eq!(hbDNNRelease(p), 0);
    }
    assert!((sum(&out[..40]) - 1.0).abs() < 1e-3 && (sum(&out[40..]) - 1.0).abs() < 1e-3);
    assert_ne!(
        &out[..40],
        &out[40..],
        "different crops give different outputs"
    );

    // The C path gives exactly what the runtime's own ROI entry point gives.
    let mut direct = vec![0u8; 80];
    let frame_ref = RoiFrame {
        y: IoBuffer::from_slice(&mut frame[..stride * h]),
        uv: IoBuffer::from_slice(&mut frame[stride * h..]),
        width: w,
        height: h,
        y_stride: stride,
        uv_stride: stride,
    };
    let rois = [
        Roi {
            left: 0,
            top: 0,
            right: 63,
            bottom: 63,
        },
        Roi {
            left: 64,
            top: 32,
            right: 127,
            bottom: 95,
        },
    ];
    let runtime = Runtime::global().expect("runtime");
    let cls_model = MODELS.models[0].clone();
    let outputs = [IoBuffer::from_slice(&mut direct)];
    let task = runtime
        .submit_roi(
            &cls_model,
            frame_ref,
            &rois,
            &outputs,
            CtrlParams::default(),
        )
        .expect("submit_roi");
    task.wait(None).expect("wait");
    task.release().expect("release");
    assert_eq!(direct, out);
}

#[test]
fn null_pointers_are_invalid_arguments() {
    let p = packed();
    let feat = model_named(p, c"feat");
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
        let mut c = ctrl(0, 0);
        assert_eq!(
            hbDNNInfer(&mut task, null_mut(), null(), feat, &mut c),
            HB_DNN_INVALID_ARGUMENT
        );
        assert!(last_error_detail().contains("output"));
        let mut no_outputs: *mut hbDNNTensor = null_mut();
        let mut x = vec![0u8; F32_BYTES];
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
