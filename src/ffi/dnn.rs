//! The core hbDNN functions (`dnn/hb_dnn.h`, `dnn/hb_dnn_status.h`): load and release
//! packed models, query models and tensors, submit / wait / release tasks.
//!
//! Each export is a thin shell: NULL checks, handle resolution through the registries
//! in `handles.rs`, tensor validation in `convert.rs`, then one call into `runtime`.
//! Out-params are written last, only on success.
#![allow(non_snake_case)]

use std::ffi::{c_char, c_void};
use std::path::PathBuf;
use std::sync::Arc;

use crate::error::{describe_code_c, Error, Result, UNKNOWN_CODE};
use crate::ffi::boundary::{self, c_str, count, non_null, write_out};
use crate::ffi::convert::{frame_input, image_hw, input_planes, output_buffers};
use crate::ffi::engine::{engine, Part};
use crate::ffi::handles::{
    PackedEntry, Pending, TaskEntry, TaskState, UserCallback, MODELS, PACKED, TASKS,
};
use crate::ffi::types::*;
use crate::runtime::roi::{crop_resize, Nv12Frame, RoiOutput};
use crate::runtime::{CtrlParams, ElemType, IoBuffer, Roi};

/// `hbDNNGetVersion` string: the hbDNN API version, then ours.
const VERSION: &str = concat!("1.24.5_(vnpu ", env!("CARGO_PKG_VERSION"), ")\0");

/// Most model files / blobs accepted in one load call.
const MAX_LOAD_COUNT: i32 = 4096;

/// Returns the version string, e.g. `"1.24.5_(vnpu 0.1.0)"`: hbDNN API version, then the
/// implementation. The string is library-owned and static.
///
/// # Safety
/// Always safe to call.
#[no_mangle]
pub unsafe extern "C" fn hbDNNGetVersion() -> *const c_char {
    boundary::value(VERSION.as_ptr().cast(), || VERSION.as_ptr().cast())
}

/// Returns a sentence describing `errorCode` (any value; unknown codes get a generic
/// sentence). The string is library-owned and static. For the cause of the last failure
/// on this thread see `vnpuGetLastErrorDetail`.
///
/// # Safety
/// Always safe to call.
#[no_mangle]
pub unsafe extern "C" fn hbDNNGetErrorDesc(errorCode: i32) -> *const c_char {
    boundary::value(UNKNOWN_CODE.as_ptr(), || {
        describe_code_c(errorCode).as_ptr()
    })
}

#[cfg(unix)]
fn path_of(s: &std::ffi::CStr) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    PathBuf::from(std::ffi::OsStr::from_bytes(s.to_bytes()))
}

#[cfg(not(unix))]
fn path_of(s: &std::ffi::CStr) -> PathBuf {
    PathBuf::from(s.to_string_lossy().into_owned())
}

/// Loads one or more compiled model files (`vnpu compile` output, or `.onnx` compiled on
/// load) into one packed model.
///
/// Returns 0 and stores a new handle in `*packedDNNHandle`; `HB_DNN_INVALID_ARGUMENT`
/// (NULL pointers, count < 1), `HB_DNN_CAN_NOT_OPEN_FILE`, `HB_DNN_INVALID_MODEL`,
/// `HB_DNN_INCOMPATIBLE_MODEL`. Thread-safe.
///
/// # Safety
/// `packedDNNHandle` must be NULL or writable; `modelFileNames` NULL or an array of
/// `modelFileCount` pointers, each NULL or a NUL-terminated path.
#[no_mangle]
pub unsafe extern "C" fn hbDNNInitializeFromFiles(
    packedDNNHandle: *mut hbPackedDNNHandle_t,
    modelFileNames: *mut *const c_char,
    modelFileCount: i32,
) -> i32 {
    boundary::status(|| {
        non_null(packedDNNHandle, "packedDNNHandle")?;
        non_null(modelFileNames, "modelFileNames")?;
        let n = count(modelFileCount, "modelFileCount", MAX_LOAD_COUNT)?;
        // SAFETY: non-null array of `n` pointers (caller's contract).
        let names = unsafe { std::slice::from_raw_parts(modelFileNames, n) };
        let mut paths = Vec::with_capacity(n);
        for (i, &p) in names.iter().enumerate() {
            non_null(p, &format!("modelFileNames[{i}]"))?;
            // SAFETY: non-null and NUL-terminated (caller's contract).
            let path = path_of(unsafe { std::ffi::CStr::from_ptr(p) });
            // Report an unreadable file as such, with its path, before any parsing.
            std::fs::File::open(&path).map_err(|e| Error::Io {
                path: path.clone(),
                reason: e.to_string(),
            })?;
            paths.push(path);
        }
        let token = PackedEntry::register_loaded(engine().load_files(&paths)?)?;
        // SAFETY: checked non-null above; writable per contract.
        unsafe { write_out(packedDNNHandle, token as hbPackedDNNHandle_t) };
        Ok(())
    })
}

/// Loads one or more compiled models from memory (the bytes are copied or validated
/// before return; the caller may free them afterwards).
///
/// Return codes as `hbDNNInitializeFromFiles`; a length ≤ 0 is `HB_DNN_INVALID_ARGUMENT`.
///
/// # Safety
/// `modelData` / `modelDataLengths` must be NULL or arrays of `modelDataCount` entries;
/// each data pointer NULL or valid for its length.
#[no_mangle]
pub unsafe extern "C" fn hbDNNInitializeFromDDR(
    packedDNNHandle: *mut hbPackedDNNHandle_t,
    modelData: *mut *const c_void,
    modelDataLengths: *mut i32,
    modelDataCount: i32,
) -> i32 {
    boundary::status(|| {
        non_null(packedDNNHandle, "packedDNNHandle")?;
        non_null(modelData, "modelData")?;
        non_null(modelDataLengths, "modelDataLengths")?;
        let n = count(modelDataCount, "modelDataCount", MAX_LOAD_COUNT)?;
        // SAFETY: non-null arrays of `n` entries (caller's contract).
        let (ptrs, lens) = unsafe {
            (
                std::slice::from_raw_parts(modelData, n),
                std::slice::from_raw_parts(modelDataLengths, n),
            )
        };
        let mut blobs = Vec::with_capacity(n);
        for (i, (&p, &len)) in ptrs.iter().zip(lens).enumerate() {
            non_null(p, &format!("modelData[{i}]"))?;
            count(len, &format!("modelDataLengths[{i}]"), i32::MAX)?;
            // SAFETY: non-null and valid for `len` bytes (caller's contract).
            blobs.push(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len as usize) });
        }
        let token = PackedEntry::register_loaded(engine().load_bytes(&blobs)?)?;
        // SAFETY: checked non-null above; writable per contract.
        unsafe { write_out(packedDNNHandle, token as hbPackedDNNHandle_t) };
        Ok(())
    })
}

/// Releases a packed model and all its model handles. Running tasks keep their models
/// alive until they end. NULL, stale or double release → `HB_DNN_INVALID_PACKED_DNN_HANDLE`.
///
/// # Safety
/// Any value is accepted.
#[no_mangle]
pub unsafe extern "C" fn hbDNNRelease(packedDNNHandle: hbPackedDNNHandle_t) -> i32 {
    boundary::status(|| {
        let entry = PACKED.remove(packedDNNHandle as usize)?;
        for (_, token) in &entry.models {
            // Already-removed model handles are not an error here.
            let _ = MODELS.remove(*token);
        }
        Ok(())
    })
}

/// Stores the model names of a packed model: an array of `*modelNameCount` C strings,
/// all library-owned and valid until `hbDNNRelease`.
///
/// # Safety
/// Out-pointers must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hbDNNGetModelNameList(
    modelNameList: *mut *mut *const c_char,
    modelNameCount: *mut i32,
    packedDNNHandle: hbPackedDNNHandle_t,
) -> i32 {
    boundary::status(|| {
        non_null(modelNameList, "modelNameList")?;
        non_null(modelNameCount, "modelNameCount")?;
        let entry = PACKED.get(packedDNNHandle as usize)?;
        let (list, n) = entry.name_list();
        // SAFETY: both checked non-null; writable per contract.
        unsafe {
            write_out(modelNameList, list.cast_mut());
            write_out(modelNameCount, n);
        }
        Ok(())
    })
}

/// Stores the handle of the model named `modelName` (valid until `hbDNNRelease` of its
/// packed model). Unknown name → `HB_DNN_INVALID_ARGUMENT`.
///
/// # Safety
/// `dnnHandle` NULL or writable; `modelName` NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn hbDNNGetModelHandle(
    dnnHandle: *mut hbDNNHandle_t,
    packedDNNHandle: hbPackedDNNHandle_t,
    modelName: *const c_char,
) -> i32 {
    boundary::status(|| {
        non_null(dnnHandle, "dnnHandle")?;
        let entry = PACKED.get(packedDNNHandle as usize)?;
        // SAFETY: NULL or NUL-terminated (caller's contract).
        let name = unsafe { c_str(modelName, "modelName") }?;
        let token = entry
            .models
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| *t)
            .ok_or_else(|| Error::UnknownModel {
                name: name.into(),
                available: entry
                    .models
                    .iter()
                    .map(|(n, _)| n.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
        // SAFETY: checked non-null; writable per contract.
        unsafe { write_out(dnnHandle, token as hbDNNHandle_t) };
        Ok(())
    })
}

fn index_of(i: i32, len: usize, what: &str) -> Result<usize> {
    usize::try_from(i)
        .ok()
        .filter(|&i| i < len)
        .ok_or_else(|| Error::InvalidArgument {
            name: what.into(),
            reason: format!("{i} is outside 0..{len}"),
        })
}

/// Stores the number of inputs of a model.
///
/// # Safety
/// `inputCount` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hbDNNGetInputCount(inputCount: *mut i32, dnnHandle: hbDNNHandle_t) -> i32 {
    boundary::status(|| {
        non_null(inputCount, "inputCount")?;
        let m = MODELS.get(dnnHandle as usize)?;
        // SAFETY: checked non-null; writable per contract.
        unsafe { write_out(inputCount, m.inputs.len() as i32) };
        Ok(())
    })
}

/// Stores the number of outputs of a model.
///
/// # Safety
/// `outputCount` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hbDNNGetOutputCount(
    outputCount: *mut i32,
    dnnHandle: hbDNNHandle_t,
) -> i32 {
    boundary::status(|| {
        non_null(outputCount, "outputCount")?;
        let m = MODELS.get(dnnHandle as usize)?;
        // SAFETY: checked non-null; writable per contract.
        unsafe { write_out(outputCount, m.outputs.len() as i32) };
        Ok(())
    })
}

/// Stores the name of input `inputIndex` (library-owned, valid while loaded).
///
/// # Safety
/// `name` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hbDNNGetInputName(
    name: *mut *const c_char,
    dnnHandle: hbDNNHandle_t,
    inputIndex: i32,
) -> i32 {
    boundary::status(|| {
        non_null(name, "name")?;
        let m = MODELS.get(dnnHandle as usize)?;
        let i = index_of(inputIndex, m.inputs.len(), "inputIndex")?;
        // SAFETY: checked non-null; writable per contract.
        unsafe { write_out(name, m.inputs[i].name.as_ptr()) };
        Ok(())
    })
}

/// Stores the name of output `outputIndex` (library-owned, valid while loaded).
///
/// # Safety
/// `name` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hbDNNGetOutputName(
    name: *mut *const c_char,
    dnnHandle: hbDNNHandle_t,
    outputIndex: i32,
) -> i32 {
    boundary::status(|| {
        non_null(name, "name")?;
        let m = MODELS.get(dnnHandle as usize)?;
        let i = index_of(outputIndex, m.outputs.len(), "outputIndex")?;
        // SAFETY: checked non-null; writable per contract.
        unsafe { write_out(name, m.outputs[i].name.as_ptr()) };
        Ok(())
    })
}

/// Copies the properties of input `inputIndex` into `*properties` (quantisation arrays
/// point into library memory valid while loaded).
///
/// # Safety
/// `properties` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hbDNNGetInputTensorProperties(
    properties: *mut hbDNNTensorProperties,
    dnnHandle: hbDNNHandle_t,
    inputIndex: i32,
) -> i32 {
    boundary::status(|| {
        non_null(properties, "properties")?;
        let m = MODELS.get(dnnHandle as usize)?;
        let i = index_of(inputIndex, m.inputs.len(), "inputIndex")?;
        // SAFETY: checked non-null; writable per contract.
        unsafe { write_out(properties, m.inputs[i].props) };
        Ok(())
    })
}

/// Copies the properties of output `outputIndex` into `*properties` (SCALE outputs carry
/// scale / zero-point arrays valid while loaded).
///
/// # Safety
/// `properties` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hbDNNGetOutputTensorProperties(
    properties: *mut hbDNNTensorProperties,
    dnnHandle: hbDNNHandle_t,
    outputIndex: i32,
) -> i32 {
    boundary::status(|| {
        non_null(properties, "properties")?;
        let m = MODELS.get(dnnHandle as usize)?;
        let i = index_of(outputIndex, m.outputs.len(), "outputIndex")?;
        // SAFETY: checked non-null; writable per contract.
        unsafe { write_out(properties, m.outputs[i].props) };
        Ok(())
    })
}

/// Adds `pending` to the task in `*slot` (NULL = a new task) through its runtime
/// [`TaskBuilder`](crate::runtime::TaskBuilder), which submits it when `more` is 0. Writes
/// the task handle on success.
///
/// # Safety
/// `slot` must be non-null, readable and writable.
unsafe fn add_to_task(
    slot: *mut hbDNNTaskHandle_t,
    pending: Pending,
    ctrl: &hbDNNInferCtrlParam,
) -> Result<()> {
    let params = CtrlParams::try_from(ctrl)?;
    let more = ctrl.more != 0;
    // SAFETY: non-null, readable (caller's contract).
    let current = unsafe { slot.read() } as usize;
    let (entry, token, fresh) = if current == 0 {
        let entry = Arc::new(TaskEntry::building(engine().assembly()));
        let token = TASKS.insert(entry.clone())?;
        (entry, token, true)
    } else {
        (TASKS.get(current)?, current, false)
    };
    let fail = |e: Error| {
        if fresh {
            let _ = TASKS.remove(token);
        }
        Err(e)
    };
    // Take the builder out of the entry (without holding its lock while submitting: a
    // done callback may call back into us).
    let mut builder = match &mut *entry.state.lock() {
        TaskState::Building(b) => b.take(),
        TaskState::Submitted(_) => {
            return fail(Error::ApiUse(
                "*taskHandle holds a submitted task; set it to NULL before hbDNNInfer \
                 (only a task built with more = 1 can be appended to)"
                    .into(),
            ))
        }
    };
    match builder.add(
        pending.parts,
        pending.owned,
        more,
        params,
        token,
        &entry.completion,
    ) {
        Ok(None) => *entry.state.lock() = TaskState::Building(builder),
        Ok(Some(task)) => {
            *entry.state.lock() = TaskState::Submitted(task.clone());
            entry.completion.arm();
            if TASKS.get(token).is_err() {
                // Another thread released the handle while we submitted: nobody can
                // release this task any more, so release it now.
                let _ = task.release();
                return Err(Error::InvalidTaskHandle(
                    "the task was released while it was being submitted".into(),
                ));
            }
        }
        Err(e) => {
            *entry.state.lock() = TaskState::Building(builder);
            return fail(e);
        }
    }
    // SAFETY: non-null, writable (caller's contract).
    unsafe { write_out(slot, token as hbDNNTaskHandle_t) };
    Ok(())
}

/// Submits an inference of one model (asynchronous).
///
/// `*taskHandle` must be NULL to start a new task. With `inferCtrlParam->more = 1` the
/// model is added to a task that is submitted by a later call with `more = 0` on the
/// *same* `taskHandle` variable (up to 255 models). `input` is an array of the model's
/// input count; `*output` an array of its output count, allocated by the caller with at
/// least `alignedByteSize` bytes each. All memory must stay valid until the task ends.
/// Returns 0, `HB_DNN_INVALID_ARGUMENT` (NULLs, tensor mismatch: see
/// `vnpuGetLastErrorDetail`), `HB_DNN_INVALID_DNN_HANDLE`, `HB_DNN_INVALID_TASK_HANDLE`,
/// `HB_DNN_API_USE_ERROR` (`*taskHandle` is a submitted task),
/// `HB_DNN_TASK_NUM_EXCEED_LIMIT`, `HB_DNN_TASK_BATCH_SIZE_EXCEED_LIMIT`. Thread-safe.
///
/// Task limit: a task counts against `HB_MAX_TASK_NUM` from the first call that creates
/// it, while it is still being assembled with `more = 1`, until `hbDNNReleaseTask`; so a
/// chain that is never finished must be released to give its slot back.
/// `inferCtrlParam->dspCoreId` is ignored (any value, -1 included, is accepted).
///
/// # Safety
/// Pointers must be NULL or valid: `taskHandle` read/write, `output` → array pointer,
/// `input` array of the model's input count, `inferCtrlParam` readable.
#[no_mangle]
pub unsafe extern "C" fn hbDNNInfer(
    taskHandle: *mut hbDNNTaskHandle_t,
    output: *mut *mut hbDNNTensor,
    input: *const hbDNNTensor,
    dnnHandle: hbDNNHandle_t,
    inferCtrlParam: *mut hbDNNInferCtrlParam,
) -> i32 {
    boundary::status(|| {
        non_null(taskHandle, "taskHandle")?;
        non_null(output, "output")?;
        non_null(input, "input")?;
        non_null(inferCtrlParam, "inferCtrlParam")?;
        let m = MODELS.get(dnnHandle as usize)?;
        // SAFETY: `output` is non-null and readable (caller's contract).
        let outputs = unsafe { output.read() };
        non_null(outputs, "*output")?;
        // SAFETY: arrays of the model's input / output count (caller's contract).
        let (ins, outs) = unsafe {
            (
                std::slice::from_raw_parts(input, m.model.inputs().len()),
                std::slice::from_raw_parts(outputs, m.model.outputs().len()),
            )
        };
        let inputs = m
            .model
            .inputs()
            .iter()
            .zip(ins)
            .enumerate()
            .map(|(i, (d, t))| input_planes(i, d, t))
            .collect::<Result<Vec<_>>>()?;
        let outputs = m
            .model
            .outputs()
            .iter()
            .zip(outs)
            .enumerate()
            .map(|(i, (d, t))| Ok(output_buffers(i, d, t, 1)?.remove(0)))
            .collect::<Result<Vec<_>>>()?;
        let part = Part {
            model: m.model.clone(),
            inputs,
            outputs,
        };
        // SAFETY: `inferCtrlParam` non-null and readable (caller's contract).
        let ctrl = unsafe { inferCtrlParam.read() };
        let pending = Pending {
            parts: vec![part],
            owned: Vec::new(),
        };
        // SAFETY: `taskHandle` non-null, read/write (caller's contract).
        unsafe { add_to_task(taskHandle, pending, &ctrl) }
    })
}

/// Crops ROI `roi` from `frame` and resizes it to input `desc`; returns the planes and
/// the owned buffer they point into.
fn roi_input(
    frame: &crate::ffi::convert::FrameInput,
    roi: &Roi,
    desc: &crate::runtime::TensorDesc,
    index: usize,
) -> Result<(Vec<IoBuffer>, Box<[u8]>)> {
    let (h, w) = image_hw(&desc.valid_shape, desc.layout).ok_or_else(|| Error::TensorMismatch {
        name: format!("input {index} '{}'", desc.name),
        field: "validShape".into(),
        expected: "a 4-D image shape".into(),
        actual: format!("{:?}", desc.valid_shape),
    })?;
    // SAFETY: `frame_input` checked both planes against the caller's memSize, and the
    // caller keeps the memory valid for the call.
    let (y, uv) = unsafe {
        (
            std::slice::from_raw_parts(frame.y.ptr, frame.y.len),
            std::slice::from_raw_parts(frame.uv.ptr, frame.uv.len),
        )
    };
    let nv12 = Nv12Frame::new(y, uv, frame.width, frame.height, frame.stride, frame.stride)?;
    let kind = if desc.elem == ElemType::ImgY {
        RoiOutput::Y
    } else {
        RoiOutput::Nv12
    };
    let mut buf = vec![0u8; kind.byte_size(w, h)].into_boxed_slice();
    crop_resize(&nv12, roi, kind, w, h, &mut buf)?;
    let base = buf.as_mut_ptr();
    let planes = if desc.elem == ElemType::ImgNv12Separate {
        vec![
            IoBuffer {
                ptr: base,
                len: w * h,
            },
            IoBuffer {
                ptr: base.wrapping_add(w * h),
                len: w * h / 2,
            },
        ]
    } else {
        vec![IoBuffer {
            ptr: base,
            len: buf.len(),
        }]
    };
    Ok((planes, buf))
}

/// Submits an ROI inference: for each batch group, each image model input (NV12,
/// NV12_SEPARATE or Y) is taken from the caller's full NV12 frame (`input` tensors carry
/// the *frame* shape) by cropping its ROI (inclusive bounds; left/top even, right/bottom
/// odd) and resizing it bilinearly to the model input size; the model runs once per
/// group.
///
/// `input` holds `batch × inputCount` tensors (group `i` = indices
/// `[i·inputCount, (i+1)·inputCount)`), `rois` holds `batch × imageInputCount` entries,
/// `1 ≤ roiCount ≤ 255`. Each output tensor holds the results of all groups
/// concatenated along N (`batch × alignedByteSize` bytes). Return codes and the task
/// rules (`more`, `*taskHandle`) as `hbDNNInfer`; a bad ROI or frame is
/// `HB_DNN_INVALID_ARGUMENT`.
///
/// # Safety
/// As `hbDNNInfer`, with `input` holding `batch × inputCount` tensors and `rois`
/// `roiCount` entries.
#[no_mangle]
pub unsafe extern "C" fn hbDNNRoiInfer(
    taskHandle: *mut hbDNNTaskHandle_t,
    output: *mut *mut hbDNNTensor,
    input: *const hbDNNTensor,
    rois: *mut hbDNNRoi,
    roiCount: i32,
    dnnHandle: hbDNNHandle_t,
    inferCtrlParam: *mut hbDNNInferCtrlParam,
) -> i32 {
    boundary::status(|| {
        non_null(taskHandle, "taskHandle")?;
        non_null(output, "output")?;
        non_null(input, "input")?;
        non_null(rois, "rois")?;
        non_null(inferCtrlParam, "inferCtrlParam")?;
        if roiCount > VNPU_MAX_MODELS_PER_TASK {
            return Err(Error::TaskBatchLimit {
                limit: VNPU_MAX_MODELS_PER_TASK as usize,
            });
        }
        let n_rois = count(roiCount, "roiCount", VNPU_MAX_MODELS_PER_TASK)?;
        let m = MODELS.get(dnnHandle as usize)?;
        let model = &m.model;
        let resizer: Vec<bool> = model
            .inputs()
            .iter()
            .map(|d| {
                matches!(
                    d.elem,
                    ElemType::ImgNv12 | ElemType::ImgNv12Separate | ElemType::ImgY
                )
            })
            .collect();
        let per_group = resizer.iter().filter(|&&r| r).count();
        if per_group == 0 {
            return Err(Error::InvalidArgument {
                name: "dnnHandle".into(),
                reason: format!(
                    "model '{}' has no NV12 or Y input; hbDNNRoiInfer needs one",
                    model.name()
                ),
            });
        }
        if n_rois % per_group != 0 {
            return Err(Error::InvalidArgument {
                name: "roiCount".into(),
                reason: format!(
                    "{n_rois} is not a multiple of the model's {per_group} image inputs"
                ),
            });
        }
        let batch = n_rois / per_group;
        // SAFETY: `output` is non-null and readable (caller's contract).
        let outputs = unsafe { output.read() };
        non_null(outputs, "*output")?;
        let n_in = model.inputs().len();
        // SAFETY: arrays of the documented lengths (caller's contract).
        let (ins, outs, rois) = unsafe {
            (
                std::slice::from_raw_parts(input, batch * n_in),
                std::slice::from_raw_parts(outputs, model.outputs().len()),
                std::slice::from_raw_parts(rois, n_rois),
            )
        };
        let mut out_bufs = model
            .outputs()
            .iter()
            .zip(outs)
            .enumerate()
            .map(|(i, (d, t))| output_buffers(i, d, t, batch))
            .collect::<Result<Vec<_>>>()?;
        let mut pending = Pending::default();
        let mut roi_iter = rois.iter();
        for b in 0..batch {
            let mut inputs = Vec::with_capacity(n_in);
            for (i, d) in model.inputs().iter().enumerate() {
                let t = &ins[b * n_in + i];
                if resizer[i] {
                    let frame = frame_input(i, d, t)?;
                    let roi =
                        roi_iter
                            .next()
                            .map(Roi::from)
                            .ok_or_else(|| Error::InvalidArgument {
                                name: "rois".into(),
                                reason: "fewer ROIs than image inputs".into(),
                            })?;
                    let (planes, buf) = roi_input(&frame, &roi, d, i)?;
                    pending.owned.push(buf);
                    inputs.push(planes);
                } else {
                    inputs.push(input_planes(i, d, t)?);
                }
            }
            let outputs = out_bufs.iter_mut().map(|o| o[b]).collect();
            pending.parts.push(Part {
                model: model.clone(),
                inputs,
                outputs,
            });
        }
        // SAFETY: `inferCtrlParam` non-null and readable (caller's contract).
        let ctrl = unsafe { inferCtrlParam.read() };
        // SAFETY: `taskHandle` non-null, read/write (caller's contract).
        unsafe { add_to_task(taskHandle, pending, &ctrl) }
    })
}

/// Registers `cb(taskHandle, status, userdata)`, called once when the task ends (at once,
/// on this thread, if it already has). The callback runs on a library callback thread,
/// never on a core, one callback at a time in completion order; it may call
/// `hbDNNWaitTaskDone` on its own task (returns the task's final status at once) or on
/// other tasks, submit new tasks and wait for them, and call `hbDNNReleaseTask` on its
/// task. A second registration before the end replaces the first; a task's callback fires
/// at most once, so registering after it fired is `HB_DNN_API_USE_ERROR` (it is not
/// called). NULL `cb` → `HB_DNN_INVALID_ARGUMENT`.
///
/// # Safety
/// `cb` must be NULL or a function safe to call from any thread with `userdata`.
#[no_mangle]
pub unsafe extern "C" fn hbDNNSetTaskDoneCb(
    taskHandle: hbDNNTaskHandle_t,
    cb: hbDNNTaskDoneCb,
    userdata: *mut c_void,
) -> i32 {
    boundary::status(|| {
        let token = taskHandle as usize;
        let entry = TASKS.get(token)?;
        let cb = cb.ok_or_else(|| Error::InvalidArgument {
            name: "cb".into(),
            reason: "is NULL".into(),
        })?;
        entry.completion.set(token, UserCallback { cb, userdata })?;
        if let Ok(task) = entry.task() {
            task.callback_registered();
        }
        Ok(())
    })
}

/// Waits for a task: `timeout > 0` at most that many milliseconds (`HB_DNN_TIMEOUT`
/// leaves the task intact), `timeout ≤ 0` until it ends. Returns 0 on success, the
/// task's failure code, `HB_DNN_INVALID_TASK_HANDLE`, or `HB_DNN_API_USE_ERROR` for a
/// task still being assembled (`more = 1`). Waiting again on a finished task returns its
/// status again. It returns once the task's done callback has returned; called from
/// inside that callback, it returns the task's final status at once.
///
/// # Safety
/// Any value is accepted.
#[no_mangle]
pub unsafe extern "C" fn hbDNNWaitTaskDone(taskHandle: hbDNNTaskHandle_t, timeout: i32) -> i32 {
    boundary::status(|| {
        let task = TASKS.get(taskHandle as usize)?.task()?;
        task.wait((timeout > 0).then_some(timeout as u64))
    })
}

/// Releases a task: a queued task is cancelled; a running one is stopped at its next FC
/// or segment boundary and this call waits for the FC in flight (at most one FC), so the
/// task's input and output memory may be freed once it returns. If the task's done
/// callback is running on another thread, this call waits until it returned, so the
/// callback's userdata may be freed then (called from inside that callback it returns at
/// once). Its done callback is not called afterwards. A task being assembled
/// (`more = 1`) is dropped and its slot under `HB_MAX_TASK_NUM` returned. NULL, stale or
/// double release → `HB_DNN_INVALID_TASK_HANDLE`.
///
/// # Safety
/// Any value is accepted.
#[no_mangle]
pub unsafe extern "C" fn hbDNNReleaseTask(taskHandle: hbDNNTaskHandle_t) -> i32 {
    boundary::status(|| {
        let entry = TASKS.remove(taskHandle as usize)?;
        entry.completion.clear();
        // Not under the entry's lock: release waits for a running callback, which may
        // call into this handle.
        let task = match &*entry.state.lock() {
            TaskState::Submitted(task) => Some(task.clone()),
            TaskState::Building(_) => None,
        };
        // A task being assembled returns its slot under the task limit when `entry` drops.
        task.map_or(Ok(()), |t| t.release())
    })
}
