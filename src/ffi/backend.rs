//! vnpu's own C extensions: last error detail, version, and the versioned backend
//! table for hosts that `dlopen` the library and resolve a single symbol.
//!
//! Table rule: `vnpuBackendV1` only ever grows at the end; `structSize` tells a host
//! how many fields this library fills, `abiVersion` changes only on an incompatible
//! change (then a new `vnpuGetBackendV2` is added beside this one).
#![allow(non_snake_case, non_camel_case_types)]

use std::ffi::{c_char, c_void};

use crate::ffi::boundary;
use crate::ffi::config::*;
use crate::ffi::dnn::*;
use crate::ffi::ext::*;
use crate::ffi::sys::*;
use crate::ffi::types::*;

/// Version string of vnpu (e.g. `"0.1.0"`).
const VNPU_VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");

/// Every exported function of the C API, for hosts that `dlopen` the library.
#[repr(C)]
pub struct vnpuBackendV1 {
    /// `sizeof(vnpuBackendV1)` as built into the library.
    pub structSize: u32,
    /// `VNPU_BACKEND_ABI_VERSION` of the library.
    pub abiVersion: u32,
    /// `vnpuGetVersion`.
    pub vnpuGetVersion: unsafe extern "C" fn() -> *const c_char,
    /// `vnpuGetLastErrorDetail`.
    pub vnpuGetLastErrorDetail: unsafe extern "C" fn() -> *const c_char,
    /// `hbDNNGetVersion`.
    pub hbDNNGetVersion: unsafe extern "C" fn() -> *const c_char,
    /// `hbDNNGetErrorDesc`.
    pub hbDNNGetErrorDesc: unsafe extern "C" fn(i32) -> *const c_char,
    /// `hbDNNInitializeFromFiles`.
    pub hbDNNInitializeFromFiles:
        unsafe extern "C" fn(*mut hbPackedDNNHandle_t, *mut *const c_char, i32) -> i32,
    /// `hbDNNInitializeFromDDR`.
    pub hbDNNInitializeFromDDR:
        unsafe extern "C" fn(*mut hbPackedDNNHandle_t, *mut *const c_void, *mut i32, i32) -> i32,
    /// `hbDNNRelease`.
    pub hbDNNRelease: unsafe extern "C" fn(hbPackedDNNHandle_t) -> i32,
    /// `hbDNNGetModelNameList`.
    pub hbDNNGetModelNameList:
        unsafe extern "C" fn(*mut *mut *const c_char, *mut i32, hbPackedDNNHandle_t) -> i32,
    /// `hbDNNGetModelHandle`.
    pub hbDNNGetModelHandle:
        unsafe extern "C" fn(*mut hbDNNHandle_t, hbPackedDNNHandle_t, *const c_char) -> i32,
    /// `hbDNNGetInputCount`.
    pub hbDNNGetInputCount: unsafe extern "C" fn(*mut i32, hbDNNHandle_t) -> i32,
    /// `hbDNNGetOutputCount`.
    pub hbDNNGetOutputCount: unsafe extern "C" fn(*mut i32, hbDNNHandle_t) -> i32,
    /// `hbDNNGetInputName`.
    pub hbDNNGetInputName: unsafe extern "C" fn(*mut *const c_char, hbDNNHandle_t, i32) -> i32,
    /// `hbDNNGetOutputName`.
    pub hbDNNGetOutputName: unsafe extern "C" fn(*mut *const c_char, hbDNNHandle_t, i32) -> i32,
    /// `hbDNNGetInputTensorProperties`.
    pub hbDNNGetInputTensorProperties:
        unsafe extern "C" fn(*mut hbDNNTensorProperties, hbDNNHandle_t, i32) -> i32,
    /// `hbDNNGetOutputTensorProperties`.
    pub hbDNNGetOutputTensorProperties:
        unsafe extern "C" fn(*mut hbDNNTensorProperties, hbDNNHandle_t, i32) -> i32,
    /// `hbDNNInfer`.
    pub hbDNNInfer: unsafe extern "C" fn(
        *mut hbDNNTaskHandle_t,
        *mut *mut hbDNNTensor,
        *const hbDNNTensor,
        hbDNNHandle_t,
        *mut hbDNNInferCtrlParam,
    ) -> i32,
    /// `hbDNNRoiInfer`.
    pub hbDNNRoiInfer: unsafe extern "C" fn(
        *mut hbDNNTaskHandle_t,
        *mut *mut hbDNNTensor,
        *const hbDNNTensor,
        *mut hbDNNRoi,
        i32,
        hbDNNHandle_t,
        *mut hbDNNInferCtrlParam,
    ) -> i32,
    /// `hbDNNSetTaskDoneCb`.
    pub hbDNNSetTaskDoneCb:
        unsafe extern "C" fn(hbDNNTaskHandle_t, hbDNNTaskDoneCb, *mut c_void) -> i32,
    /// `hbDNNWaitTaskDone`.
    pub hbDNNWaitTaskDone: unsafe extern "C" fn(hbDNNTaskHandle_t, i32) -> i32,
    /// `hbDNNReleaseTask`.
    pub hbDNNReleaseTask: unsafe extern "C" fn(hbDNNTaskHandle_t) -> i32,
    /// `hbSysAllocMem`.
    pub hbSysAllocMem: unsafe extern "C" fn(*mut hbSysMem, u32) -> i32,
    /// `hbSysAllocCachedMem`.
    pub hbSysAllocCachedMem: unsafe extern "C" fn(*mut hbSysMem, u32) -> i32,
    /// `hbSysFlushMem`.
    pub hbSysFlushMem: unsafe extern "C" fn(*mut hbSysMem, i32) -> i32,
    /// `hbSysWriteMem`.
    pub hbSysWriteMem: unsafe extern "C" fn(*mut hbSysMem, *mut c_char, u32) -> i32,
    /// `hbSysReadMem`.
    pub hbSysReadMem: unsafe extern "C" fn(*mut c_char, *mut hbSysMem, u32) -> i32,
    /// `hbSysFreeMem`.
    pub hbSysFreeMem: unsafe extern "C" fn(*mut hbSysMem) -> i32,
    /// `hbSysRegisterMem`.
    pub hbSysRegisterMem: unsafe extern "C" fn(*mut hbSysMem) -> i32,
    /// `hbSysUnregisterMem`.
    pub hbSysUnregisterMem: unsafe extern "C" fn(*mut hbSysMem) -> i32,
    /// `hbDNNGetInputSource`.
    pub hbDNNGetInputSource: unsafe extern "C" fn(*mut i32, hbDNNHandle_t, i32) -> i32,
    /// `hbDNNGetEstimateLatency`.
    pub hbDNNGetEstimateLatency: unsafe extern "C" fn(*mut i32, hbDNNHandle_t) -> i32,
    /// `hbDNNGetTaskEstimateTime`.
    pub hbDNNGetTaskEstimateTime: unsafe extern "C" fn(*mut i32, hbDNNTaskHandle_t) -> i32,
    /// `hbDNNGetLayoutName`.
    pub hbDNNGetLayoutName: unsafe extern "C" fn(*mut *const c_char, i32) -> i32,
    /// `hbDNNUnquantizeByScale`.
    pub hbDNNUnquantizeByScale:
        unsafe extern "C" fn(*mut f32, i32, hbDNNTensorShape, *const f32, *const c_void) -> i32,
    /// `hbDNNAddPadding`.
    pub hbDNNAddPadding: unsafe extern "C" fn(
        *mut c_void,
        hbDNNTensorShape,
        *const c_void,
        hbDNNTensorShape,
        i32,
    ) -> i32,
    /// `hbDNNRemovePadding`.
    pub hbDNNRemovePadding: unsafe extern "C" fn(
        *mut c_void,
        hbDNNTensorShape,
        *const c_void,
        hbDNNTensorShape,
        i32,
    ) -> i32,
    /// `hbDNNAddPaddingWithStride`.
    pub hbDNNAddPaddingWithStride:
        unsafe extern "C" fn(*mut c_void, *const c_void, u32, *const u32, *const i32, u32) -> i32,
    /// `hbDNNRemovePaddingWithStride`.
    pub hbDNNRemovePaddingWithStride:
        unsafe extern "C" fn(*mut c_void, *const c_void, u32, *const u32, *const i32, u32) -> i32,
    /// `hbDNNConvertLayout`.
    pub hbDNNConvertLayout: unsafe extern "C" fn(
        *mut c_void,
        i32,
        *const c_void,
        i32,
        i32,
        hbDNNTensorShape,
        bool,
    ) -> i32,
    /// `vnpuSetConfig`.
    pub vnpuSetConfig: unsafe extern "C" fn(*const c_char, *const c_char) -> i32,
    /// `vnpuGetConfig`.
    pub vnpuGetConfig: unsafe extern "C" fn(*const c_char, *mut c_char, i32) -> i32,
    /// `vnpuTraceStart`.
    pub vnpuTraceStart: unsafe extern "C" fn() -> i32,
    /// `vnpuTraceStop`.
    pub vnpuTraceStop: unsafe extern "C" fn() -> i32,
    /// `vnpuTraceDump`.
    pub vnpuTraceDump: unsafe extern "C" fn(*const c_char) -> i32,
}

static BACKEND_V1: vnpuBackendV1 = vnpuBackendV1 {
    structSize: std::mem::size_of::<vnpuBackendV1>() as u32,
    abiVersion: VNPU_BACKEND_ABI_VERSION,
    vnpuGetVersion,
    vnpuGetLastErrorDetail,
    hbDNNGetVersion,
    hbDNNGetErrorDesc,
    hbDNNInitializeFromFiles,
    hbDNNInitializeFromDDR,
    hbDNNRelease,
    hbDNNGetModelNameList,
    hbDNNGetModelHandle,
    hbDNNGetInputCount,
    hbDNNGetOutputCount,
    hbDNNGetInputName,
    hbDNNGetOutputName,
    hbDNNGetInputTensorProperties,
    hbDNNGetOutputTensorProperties,
    hbDNNInfer,
    hbDNNRoiInfer,
    hbDNNSetTaskDoneCb,
    hbDNNWaitTaskDone,
    hbDNNReleaseTask,
    hbSysAllocMem,
    hbSysAllocCachedMem,
    hbSysFlushMem,
    hbSysWriteMem,
    hbSysReadMem,
    hbSysFreeMem,
    hbSysRegisterMem,
    hbSysUnregisterMem,
    hbDNNGetInputSource,
    hbDNNGetEstimateLatency,
    hbDNNGetTaskEstimateTime,
    hbDNNGetLayoutName,
    hbDNNUnquantizeByScale,
    hbDNNAddPadding,
    hbDNNRemovePadding,
    hbDNNAddPaddingWithStride,
    hbDNNRemovePaddingWithStride,
    hbDNNConvertLayout,
    vnpuSetConfig,
    vnpuGetConfig,
    vnpuTraceStart,
    vnpuTraceStop,
    vnpuTraceDump,
};

/// Returns the detail of the last failing call on the calling thread (which argument,
/// file, tensor field, expected and actual values), or `""` if none failed. The string
/// is owned by the library and valid until the next failing call on this thread.
///
/// # Safety
/// Always safe to call.
#[no_mangle]
pub unsafe extern "C" fn vnpuGetLastErrorDetail() -> *const c_char {
    boundary::value(c"".as_ptr(), boundary::last_error_ptr)
}

/// Returns the vnpu version (static string, e.g. `"0.1.0"`).
///
/// # Safety
/// Always safe to call.
#[no_mangle]
pub unsafe extern "C" fn vnpuGetVersion() -> *const c_char {
    boundary::value(VNPU_VERSION.as_ptr().cast(), || {
        VNPU_VERSION.as_ptr().cast()
    })
}

/// Returns the static table of every C function (never NULL). Check `abiVersion` ==
/// `VNPU_BACKEND_ABI_VERSION` and `structSize` >= the size you compiled against.
///
/// # Safety
/// Always safe to call.
#[no_mangle]
pub unsafe extern "C" fn vnpuGetBackendV1() -> *const vnpuBackendV1 {
    boundary::value(&BACKEND_V1 as *const vnpuBackendV1, || {
        &BACKEND_V1 as *const vnpuBackendV1
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn table_is_filled_and_callable() {
        // SAFETY: returns a pointer to a static table.
        let t = unsafe { &*vnpuGetBackendV1() };
        assert_eq!(t.abiVersion, VNPU_BACKEND_ABI_VERSION);
        assert_eq!(t.structSize as usize, std::mem::size_of::<vnpuBackendV1>());
        // SAFETY: static NUL-terminated strings.
        let v = unsafe { CStr::from_ptr((t.vnpuGetVersion)()) };
        assert_eq!(v.to_str().expect("utf8"), env!("CARGO_PKG_VERSION"));
        // SAFETY: calling through the table with a NULL handle is a documented error.
        let code = unsafe { (t.hbDNNReleaseTask)(std::ptr::null_mut()) };
        assert_eq!(code, crate::error::codes::HB_DNN_INVALID_TASK_HANDLE);
        // SAFETY: as above.
        let detail = unsafe { CStr::from_ptr((t.vnpuGetLastErrorDetail)()) };
        assert!(detail.to_string_lossy().contains("task"));
    }
}
