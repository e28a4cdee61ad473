//! `#[repr(C)]` mirrors of every hbDNN / hbSys type, enum and constant (the 1.18+ /
//! 1.22 / 1.24 layout), plus vnpu's own C types. This is the only file that defines C
//! layouts; sizes and offsets are pinned by compile-time assertions at the bottom
//! (LP64) and, on the C side, by `c_examples/bad_input.c` and the header test.
//!
//! Fields whose C type is an enum but that callers fill by hand (`tensorLayout`,
//! `tensorType`, `quantiType`) are `int32_t` here, so that any value a C caller writes
//! is a valid Rust value; they are converted with checked `TryFrom` in `convert.rs`.
#![allow(non_camel_case_types, non_snake_case)]

use std::ffi::c_void;

/// Major version of the hbDNN API this library implements.
pub const HB_DNN_VERSION_MAJOR: u32 = 1;
/// Minor version of the hbDNN API this library implements.
pub const HB_DNN_VERSION_MINOR: u32 = 24;
/// Patch version of the hbDNN API this library implements.
pub const HB_DNN_VERSION_PATCH: u32 = 5;
/// Maximum number of tensor dimensions.
pub const HB_DNN_TENSOR_MAX_DIMENSIONS: usize = 8;
/// Version of the `vnpuBackendV1` table layout returned by `vnpuGetBackendV1`.
pub const VNPU_BACKEND_ABI_VERSION: u32 = 1;
/// Largest number of models (or ROI batches) in one task.
pub const VNPU_MAX_MODELS_PER_TASK: i32 = 255;
/// Alias of `HB_DNN_PRIORITY_HIGHEST`: requests preemption of running work.
pub const HB_DNN_PRIORITY_PREEMP: i32 = 255;

/// Handle of a packed model (one or more models loaded together).
pub type hbPackedDNNHandle_t = *mut c_void;
/// Handle of one model inside a packed model.
pub type hbDNNHandle_t = *mut c_void;
/// Handle of a submitted (or being assembled) task.
pub type hbDNNTaskHandle_t = *mut c_void;
/// Called once when a task ends: its handle, its status (0 = success) and the userdata
/// given to `hbDNNSetTaskDoneCb`. Runs on a library thread; it must not block for long.
pub type hbDNNTaskDoneCb =
    Option<unsafe extern "C" fn(taskHandle: hbDNNTaskHandle_t, status: i32, userdata: *mut c_void)>;

/// Status codes of the hbDNN functions.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum hbDNNStatus {
    HB_DNN_SUCCESS = 0,
    HB_DNN_INVALID_ARGUMENT = -6000001,
    HB_DNN_INVALID_MODEL = -6000002,
    HB_DNN_MODEL_NUMBER_EXCEED_LIMIT = -6000003,
    HB_DNN_INVALID_PACKED_DNN_HANDLE = -6000004,
    HB_DNN_INVALID_DNN_HANDLE = -6000005,
    HB_DNN_CAN_NOT_OPEN_FILE = -6000006,
    HB_DNN_OUT_OF_MEMORY = -6000007,
    HB_DNN_TIMEOUT = -6000008,
    HB_DNN_TASK_NUM_EXCEED_LIMIT = -6000009,
    HB_DNN_TASK_BATCH_SIZE_EXCEED_LIMIT = -6000010,
    HB_DNN_INVALID_TASK_HANDLE = -6000011,
    HB_DNN_RUN_TASK_FAILED = -6000012,
    HB_DNN_MODEL_IS_RUNNING = -6000013,
    HB_DNN_INCOMPATIBLE_MODEL = -6000014,
    HB_DNN_API_USE_ERROR = -6000015,
    HB_DNN_MULTI_PROGRESS_USE_ERROR = -6000016,
}

/// Status codes of the hbSys memory functions.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum hbSysStatus {
    HB_SYS_SUCCESS = 0,
    HB_SYS_INVALID_ARGUMENT = -6000129,
    HB_SYS_OUT_OF_MEMORY = -6000130,
    HB_SYS_REGISTER_MEM_FAILED = -6000131,
}

/// Memory layout of a tensor (`hbDNNTensorProperties::tensorLayout`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum hbDNNTensorLayout {
    HB_DNN_LAYOUT_NHWC = 0,
    HB_DNN_LAYOUT_NCHW = 2,
    HB_DNN_LAYOUT_NONE = 255,
}

/// Extra layout value of `hb_dnn_ext.h` (board-native layout; not produced on a host).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum hbDNNExtraTensorLayout {
    HB_DNN_LAYOUT_NHCW_NATIVE = 1,
}

/// Element / image type of a tensor (`hbDNNTensorProperties::tensorType`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum hbDNNDataType {
    HB_DNN_IMG_TYPE_Y = 0,
    HB_DNN_IMG_TYPE_NV12 = 1,
    HB_DNN_IMG_TYPE_NV12_SEPARATE = 2,
    HB_DNN_IMG_TYPE_YUV444 = 3,
    HB_DNN_IMG_TYPE_RGB = 4,
    HB_DNN_IMG_TYPE_BGR = 5,
    HB_DNN_TENSOR_TYPE_S4 = 6,
    HB_DNN_TENSOR_TYPE_U4 = 7,
    HB_DNN_TENSOR_TYPE_S8 = 8,
    HB_DNN_TENSOR_TYPE_U8 = 9,
    HB_DNN_TENSOR_TYPE_F16 = 10,
    HB_DNN_TENSOR_TYPE_S16 = 11,
    HB_DNN_TENSOR_TYPE_U16 = 12,
    HB_DNN_TENSOR_TYPE_F32 = 13,
    HB_DNN_TENSOR_TYPE_S32 = 14,
    HB_DNN_TENSOR_TYPE_U32 = 15,
    HB_DNN_TENSOR_TYPE_F64 = 16,
    HB_DNN_TENSOR_TYPE_S64 = 17,
    HB_DNN_TENSOR_TYPE_U64 = 18,
    HB_DNN_TENSOR_TYPE_MAX = 19,
}

/// Quantisation kind of a tensor (`hbDNNTensorProperties::quantiType`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum hbDNNQuantiType {
    NONE = 0,
    SHIFT = 1,
    SCALE = 2,
}

/// Task priority bounds (`hbDNNInferCtrlParam::priority` is 0..=255, larger = sooner).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum hbDNNTaskPriority {
    HB_DNN_PRIORITY_LOWEST = 0,
    HB_DNN_PRIORITY_HIGHEST = 255,
}

/// Virtual core selection (`hbDNNInferCtrlParam::bpuCoreId`, a bit mask; 0 = any).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum hbBPUCore {
    HB_BPU_CORE_ANY = 0,
    HB_BPU_CORE_0 = 1,
    HB_BPU_CORE_1 = 2,
}

/// DSP core selection (accepted and ignored on a host).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum hbDSPCore {
    HB_DSP_CORE_ANY = 0,
    HB_DSP_CORE_0 = 1,
    HB_DSP_CORE_1 = 2,
}

/// `hbSysFlushMem` flags.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum hbSysMemFlushFlag {
    /// Before the CPU reads memory written by the accelerator.
    HB_SYS_MEM_CACHE_INVALIDATE = 1,
    /// After the CPU wrote memory the accelerator will read.
    HB_SYS_MEM_CACHE_CLEAN = 2,
}

/// Where a model input comes from (`hbDNNGetInputSource`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum hbDNNInputSource {
    HB_DNN_INPUT_FROM_DDR = 0,
    HB_DNN_INPUT_FROM_RESIZER = 1,
    HB_DNN_INPUT_FROM_PYRAMID = 2,
}

/// Kind of the operator producing a model output (`hbDNNGetOutputOperatorType`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum hbDNNOutputOperatorType {
    HB_DNN_OUTPUT_OPERATOR_TYPE_UNKNOWN = 0,
    HB_DNN_OUTPUT_OPERATOR_TYPE_CONV = 1,
    HB_DNN_OUTPUT_OPERATOR_TYPE_DETECTION_POST_PROCESS = 2,
    HB_DNN_OUTPUT_OPERATOR_TYPE_RCNN_POST_PROCESS = 3,
    HB_DNN_OUTPUT_OPERATOR_TYPE_DETECTION_POST_PROCESS_STABLE_SORT = 4,
    HB_DNN_OUTPUT_OPERATOR_TYPE_CHANNEL_ARGMAX = 5,
    HB_DNN_OUTPUT_OPERATOR_TYPE_AUX_DPP_STABLE_SORT = 6,
    HB_DNN_OUTPUT_OPERATOR_TYPE_CHANNEL_ARGMAX_SPLIT = 7,
    HB_DNN_OUTPUT_OPERATOR_TYPE_FILTER = 8,
    HB_DNN_OUTPUT_OPERATOR_TYPE_CONV3D = 9,
    HB_DNN_OUTPUT_OPERATOR_TYPE_MAGIC = 10,
    HB_DNN_OUTPUT_OPERATOR_TYPE_RLE = 11,
    HB_DNN_OUTPUT_OPERATOR_TYPE_MODEL_INPUT_SCATTER = 12,
    HB_DNN_OUTPUT_OPERATOR_TYPE_MODEL_INPUT_GATHER = 13,
    HB_DNN_OUTPUT_OPERATOR_TYPE_MODEL_INPUT_GATHER_ELEMENTS = 14,
    HB_DNN_OUTPUT_OPERATOR_TYPE_MODEL_INPUT_TOP_K = 15,
}

/// Kind of a model-embedded description blob (`hbDNNGetModelDesc` & co.).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum hbDNNDescType {
    HB_DNN_DESC_TYPE_UNKNOWN = 0,
    HB_DNN_DESC_TYPE_STRING = 1,
    HB_DNN_DESC_TYPE_BINARY = 2,
}

/// A memory block: `virAddr` is the CPU address, `phyAddr` the device address (equal to
/// `virAddr` on a host), `memSize` its length in bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct hbSysMem {
    pub phyAddr: u64,
    pub virAddr: *mut c_void,
    pub memSize: u32,
}

/// A tensor shape: the first `numDimensions` entries of `dimensionSize` are used.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct hbDNNTensorShape {
    pub dimensionSize: [i32; HB_DNN_TENSOR_MAX_DIMENSIONS],
    pub numDimensions: i32,
}

/// Alias of `hbDNNTensorShape` used by the layout helpers.
pub type hbDNNDimension = hbDNNTensorShape;

/// Shift quantisation parameters (`real = q / 2^shiftData[i]`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct hbDNNQuantiShift {
    pub shiftLen: i32,
    pub shiftData: *mut u8,
}

/// Scale quantisation parameters (`real = (q - zeroPointData[i]) * scaleData[i]`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct hbDNNQuantiScale {
    pub scaleLen: i32,
    pub scaleData: *mut f32,
    pub zeroPointLen: i32,
    pub zeroPointData: *mut i8,
}

/// Everything about one model input or output. Pointers inside point into library
/// memory valid while the packed model is loaded.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct hbDNNTensorProperties {
    pub validShape: hbDNNTensorShape,
    pub alignedShape: hbDNNTensorShape,
    /// An `hbDNNTensorLayout` value.
    pub tensorLayout: i32,
    /// An `hbDNNDataType` value.
    pub tensorType: i32,
    pub shift: hbDNNQuantiShift,
    pub scale: hbDNNQuantiScale,
    /// An `hbDNNQuantiType` value.
    pub quantiType: i32,
    pub quantizeAxis: i32,
    pub alignedByteSize: i32,
    pub stride: [i32; HB_DNN_TENSOR_MAX_DIMENSIONS],
}

/// A tensor: its memory (`sysMem[0]`; `NV12_SEPARATE` uses `sysMem[0]` = Y and
/// `sysMem[1]` = UV) and its properties.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct hbDNNTensor {
    pub sysMem: [hbSysMem; 4],
    pub properties: hbDNNTensorProperties,
}

/// A region of interest; all four bounds are inclusive.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct hbDNNRoi {
    pub left: i32,
    pub top: i32,
    pub right: i32,
    pub bottom: i32,
}

/// Per-task control parameters; initialise with `HB_DNN_INITIALIZE_INFER_CTRL_PARAM`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct hbDNNInferCtrlParam {
    /// Bit mask of allowed cores (`HB_BPU_CORE_*`), 0 = any.
    pub bpuCoreId: i32,
    /// Ignored (no DSP): any value, -1 included, is accepted.
    pub dspCoreId: i32,
    /// 0..=255, larger runs sooner; 255 preempts.
    pub priority: i32,
    /// Non-zero: more models follow into the same task (see `hbDNNInfer`).
    pub more: i32,
    /// Tie-break among equal priorities: smaller runs sooner.
    pub customId: i64,
    pub reserved1: i32,
    pub reserved2: i32,
}

// The C layouts (sizes and `offsetof` values, LP64) of HBDNN_API.md §5.
#[cfg(target_pointer_width = "64")]
const _: () = {
    use std::mem::{align_of, offset_of, size_of};
    assert!(size_of::<hbSysMem>() == 24 && align_of::<hbSysMem>() == 8);
    assert!(offset_of!(hbSysMem, virAddr) == 8 && offset_of!(hbSysMem, memSize) == 16);
    assert!(size_of::<hbDNNTensorShape>() == 36);
    assert!(offset_of!(hbDNNTensorShape, numDimensions) == 32);
    assert!(size_of::<hbDNNQuantiShift>() == 16);
    assert!(offset_of!(hbDNNQuantiShift, shiftData) == 8);
    assert!(size_of::<hbDNNQuantiScale>() == 32);
    assert!(offset_of!(hbDNNQuantiScale, scaleData) == 8);
    assert!(offset_of!(hbDNNQuantiScale, zeroPointLen) == 16);
    assert!(offset_of!(hbDNNQuantiScale, zeroPointData) == 24);
    assert!(size_of::<hbDNNTensorProperties>() == 176 && align_of::<hbDNNTensorProperties>() == 8);
    assert!(offset_of!(hbDNNTensorProperties, alignedShape) == 36);
    assert!(offset_of!(hbDNNTensorProperties, tensorLayout) == 72);
    assert!(offset_of!(hbDNNTensorProperties, tensorType) == 76);
    assert!(offset_of!(hbDNNTensorProperties, shift) == 80);
    assert!(offset_of!(hbDNNTensorProperties, scale) == 96);
    assert!(offset_of!(hbDNNTensorProperties, quantiType) == 128);
    assert!(offset_of!(hbDNNTensorProperties, quantizeAxis) == 132);
    assert!(offset_of!(hbDNNTensorProperties, alignedByteSize) == 136);
    assert!(offset_of!(hbDNNTensorProperties, stride) == 140);
    assert!(size_of::<hbDNNTensor>() == 272);
    assert!(offset_of!(hbDNNTensor, properties) == 96);
    assert!(size_of::<hbDNNRoi>() == 16);
    assert!(size_of::<hbDNNInferCtrlParam>() == 32 && align_of::<hbDNNInferCtrlParam>() == 8);
    assert!(offset_of!(hbDNNInferCtrlParam, more) == 12);
    assert!(offset_of!(hbDNNInferCtrlParam, customId) == 16);
    assert!(offset_of!(hbDNNInferCtrlParam, reserved2) == 28);
    assert!(size_of::<hbDNNQuantiType>() == 4);
    assert!(size_of::<hbDNNStatus>() == 4 && size_of::<hbSysStatus>() == 4);
};
