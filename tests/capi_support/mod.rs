//! Shared support of the tests that drive vnpu through its C API (`vnpu::ffi`): control
//! parameters, tensors over caller memory, model handles and tensor properties.
//!
//! Every helper asserts that the C call it makes returns 0, so a failure points at the
//! call that broke rather than at a later symptom.
#![allow(dead_code)]

use std::ffi::{c_void, CStr, CString};
use std::path::Path;
use std::ptr::null_mut;

use vnpu::ffi::*;

/// Control parameters with the given priority and `more` flag (any core, custom id 0).
pub fn ctrl(priority: i32, more: i32) -> hbDNNInferCtrlParam {
    hbDNNInferCtrlParam {
        bpuCoreId: 0,
        dspCoreId: 0,
        priority,
        more,
        customId: 0,
        reserved1: 0,
        reserved2: 0,
    }
}

/// A tensor with properties `p` whose first memory block is `len` bytes at `ptr`.
pub fn tensor_at(p: hbDNNTensorProperties, ptr: *mut c_void, len: usize) -> hbDNNTensor {
    let mem = hbSysMem {
        phyAddr: 0,
        virAddr: null_mut(),
        memSize: 0,
    };
    let mut t = hbDNNTensor {
        sysMem: [mem; 4],
        properties: p,
    };
    t.sysMem[0].virAddr = ptr;
    t.sysMem[0].memSize = len as u32;
    t
}

/// A tensor with properties `p` over the bytes of `buf`.
pub fn tensor(p: hbDNNTensorProperties, buf: &mut [u8]) -> hbDNNTensor {
    tensor_at(p, buf.as_mut_ptr().cast(), buf.len())
}

/// Input (`output == false`) or output tensor properties `i` of model `h`.
pub fn props(h: hbDNNHandle_t, output: bool, i: i32) -> hbDNNTensorProperties {
    // SAFETY: an all-zero hbDNNTensorProperties is a valid value (integers, NULL pointers).
    let mut p: hbDNNTensorProperties = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer; `h` is checked by the call.
    let rc = unsafe {
        if output {
            hbDNNGetOutputTensorProperties(&mut p, h, i)
        } else {
            hbDNNGetInputTensorProperties(&mut p, h, i)
        }
    };
    assert_eq!(rc, 0, "tensor properties {i} (output: {output})");
    p
}

/// The handle of model `name` in pack `p`.
pub fn model_named(p: hbPackedDNNHandle_t, name: &CStr) -> hbDNNHandle_t {
    let mut h = null_mut();
    // SAFETY: valid out-pointer and NUL-terminated name.
    assert_eq!(unsafe { hbDNNGetModelHandle(&mut h, p, name.as_ptr()) }, 0);
    h
}

/// The handle of the first model of pack `p`.
pub fn first_model(p: hbPackedDNNHandle_t) -> hbDNNHandle_t {
    let (mut list, mut n) = (null_mut(), 0);
    // SAFETY: valid out-pointers; on success `list` holds `n` >= 1 valid names.
    unsafe {
        assert_eq!(hbDNNGetModelNameList(&mut list, &mut n, p), 0);
        assert!(n >= 1, "a pack without models");
        model_named(p, CStr::from_ptr(*list))
    }
}

/// Loads the compiled model file `path` through `hbDNNInitializeFromFiles`: (pack, its
/// first model).
pub fn load_file(path: &Path) -> (hbPackedDNNHandle_t, hbDNNHandle_t) {
    let c = CString::new(path.to_str().expect("UTF-8 path")).expect("path without NUL");
    let mut names = [c.as_ptr()];
    let mut p = null_mut();
    // SAFETY: valid out-pointer and one valid NUL-terminated path.
    assert_eq!(
        unsafe { hbDNNInitializeFromFiles(&mut p, names.as_mut_ptr(), 1) },
        0,
        "loading {}",
        path.display()
    );
    (p, first_model(p))
}
