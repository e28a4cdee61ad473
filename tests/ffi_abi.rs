//! ABI facts of the C API through the rlib: struct sizes and offsets, status values,
//! error descriptions, versions, the backend table, the per-thread last error, and the
//! hb_dnn_ext.h data helpers.

use std::ffi::{c_char, CStr};
use std::mem::{offset_of, size_of};
use std::ptr::{null, null_mut};

use vnpu::error::{codes, describe_code};
use vnpu::ffi::*;

fn text(p: *const c_char) -> String {
    assert!(!p.is_null());
    // SAFETY: the library returns NUL-terminated strings.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

#[test]
fn struct_layouts_match_the_1_18_headers() {
    assert_eq!(size_of::<hbSysMem>(), 24);
    assert_eq!(size_of::<hbDNNTensorShape>(), 36);
    assert_eq!(size_of::<hbDNNQuantiShift>(), 16);
    assert_eq!(size_of::<hbDNNQuantiScale>(), 32);
    assert_eq!(size_of::<hbDNNTensorProperties>(), 176);
    assert_eq!(offset_of!(hbDNNTensorProperties, quantiType), 128);
    assert_eq!(offset_of!(hbDNNTensorProperties, stride), 140);
    assert_eq!(size_of::<hbDNNTensor>(), 272);
    assert_eq!(offset_of!(hbDNNTensor, properties), 96);
    assert_eq!(size_of::<hbDNNRoi>(), 16);
    assert_eq!(size_of::<hbDNNInferCtrlParam>(), 32);
    assert_eq!(offset_of!(hbDNNInferCtrlParam, customId), 16);
}

#[test]
fn status_enums_equal_the_error_codes() {
    let pairs = [
        (hbDNNStatus::HB_DNN_SUCCESS as i32, codes::HB_DNN_SUCCESS),
        (
            hbDNNStatus::HB_DNN_INVALID_ARGUMENT as i32,
            codes::HB_DNN_INVALID_ARGUMENT,
        ),
        (
            hbDNNStatus::HB_DNN_INVALID_MODEL as i32,
            codes::HB_DNN_INVALID_MODEL,
        ),
        (
            hbDNNStatus::HB_DNN_MODEL_NUMBER_EXCEED_LIMIT as i32,
            codes::HB_DNN_MODEL_NUMBER_EXCEED_LIMIT,
        ),
        (
            hbDNNStatus::HB_DNN_INVALID_PACKED_DNN_HANDLE as i32,
            codes::HB_DNN_INVALID_PACKED_DNN_HANDLE,
        ),
        (
            hbDNNStatus::HB_DNN_INVALID_DNN_HANDLE as i32,
            codes::HB_DNN_INVALID_DNN_HANDLE,
        ),
        (
            hbDNNStatus::HB_DNN_CAN_NOT_OPEN_FILE as i32,
            codes::HB_DNN_CAN_NOT_OPEN_FILE,
        ),
        (
            hbDNNStatus::HB_DNN_OUT_OF_MEMORY as i32,
            codes::HB_DNN_OUT_OF_MEMORY,
        ),
        (hbDNNStatus::HB_DNN_TIMEOUT as i32, codes::HB_DNN_TIMEOUT),
        (
            hbDNNStatus::HB_DNN_TASK_NUM_EXCEED_LIMIT as i32,
            codes::HB_DNN_TASK_NUM_EXCEED_LIMIT,
        ),
        (
            hbDNNStatus::HB_DNN_TASK_BATCH_SIZE_EXCEED_LIMIT as i32,
            codes::HB_DNN_TASK_BATCH_SIZE_EXCEED_LIMIT,
        ),
        (
            hbDNNStatus::HB_DNN_INVALID_TASK_HANDLE as i32,
            codes::HB_DNN_INVALID_TASK_HANDLE,
        ),
        (
            hbDNNStatus::HB_DNN_RUN_TASK_FAILED as i32,
            codes::HB_DNN_RUN_TASK_FAILED,
        ),
        (
            hbDNNStatus::HB_DNN_MODEL_IS_RUNNING as i32,
            codes::HB_DNN_MODEL_IS_RUNNING,
        ),
        (
            hbDNNStatus::HB_DNN_INCOMPATIBLE_MODEL as i32,
            codes::HB_DNN_INCOMPATIBLE_MODEL,
        ),
        (
            hbDNNStatus::HB_DNN_API_USE_ERROR as i32,
            codes::HB_DNN_API_USE_ERROR,
        ),
        (
            hbDNNStatus::HB_DNN_MULTI_PROGRESS_USE_ERROR as i32,
            codes::HB_DNN_MULTI_PROGRESS_USE_ERROR,
        ),
        (
            hbSysStatus::HB_SYS_INVALID_ARGUMENT as i32,
            codes::HB_SYS_INVALID_ARGUMENT,
        ),
        (
            hbSysStatus::HB_SYS_OUT_OF_MEMORY as i32,
            codes::HB_SYS_OUT_OF_MEMORY,
        ),
        (
            hbSysStatus::HB_SYS_REGISTER_MEM_FAILED as i32,
            codes::HB_SYS_REGISTER_MEM_FAILED,
        ),
    ];
    for (c, rust) in pairs {
        assert_eq!(c, rust);
        // SAFETY: any code is accepted.
        assert_eq!(text(unsafe { hbDNNGetErrorDesc(c) }), describe_code(c));
    }
    // SAFETY: as above.
    assert_eq!(text(unsafe { hbDNNGetErrorDesc(42) }), "unknown error code");
}

#[test]
fn versions_and_backend_table() {
    // SAFETY: static strings and table.
    unsafe {
        assert!(text(hbDNNGetVersion()).starts_with("1.24.5_(vnpu "));
        assert_eq!(text(vnpuGetVersion()), env!("CARGO_PKG_VERSION"));
        let t = &*vnpuGetBackendV1();
        assert_eq!(t.abiVersion, VNPU_BACKEND_ABI_VERSION);
        assert_eq!(t.structSize as usize, size_of::<vnpuBackendV1>());
        assert_eq!(t.hbDNNGetVersion as *const (), hbDNNGetVersion as *const ());
        assert_eq!(t.hbDNNInfer as *const (), hbDNNInfer as *const ());
        assert_eq!(
            t.hbSysUnregisterMem as *const (),
            hbSysUnregisterMem as *const ()
        );
        assert_eq!(
            (t.hbDNNWaitTaskDone)(null_mut(), 0),
            codes::HB_DNN_INVALID_TASK_HANDLE
        );
    }
}

#[test]
fn last_error_detail_is_per_thread_and_kept_after_success() {
    // SAFETY: NULL / junk handles are accepted and rejected.
    unsafe {
        assert_eq!(
            hbDNNRelease(0x1234 as hbPackedDNNHandle_t),
            codes::HB_DNN_INVALID_PACKED_DNN_HANDLE
        );
        let main_detail = text(vnpuGetLastErrorDetail());
        assert!(main_detail.contains("packed model"), "{main_detail}");
        let mut m = hbSysMem {
            phyAddr: 0,
            virAddr: null_mut(),
            memSize: 0,
        };
        assert_eq!(hbSysAllocMem(&mut m, 8), 0);
        assert_eq!(hbSysFreeMem(&mut m), 0);
        assert_eq!(
            text(vnpuGetLastErrorDetail()),
            main_detail,
            "success keeps the last failure"
        );
        std::thread::spawn(|| {
            assert_eq!(text(vnpuGetLastErrorDetail()), "");
            assert_eq!(
                hbDNNWaitTaskDone(null_mut(), 0),
                codes::HB_DNN_INVALID_TASK_HANDLE
            );
            assert!(text(vnpuGetLastErrorDetail()).contains("task"));
        })
        .join()
        .expect("thread");
        assert_eq!(text(vnpuGetLastErrorDetail()), main_detail);
    }
}

#[test]
fn loading_reports_missing_files_and_bad_counts() {
    let mut p: hbPackedDNNHandle_t = null_mut();
    let mut names = [c"/nonexistent/vnpu/model.bin".as_ptr()];
    // SAFETY: valid arrays of the given counts.
    unsafe {
        assert_eq!(
            hbDNNInitializeFromFiles(&mut p, names.as_mut_ptr(), 1),
            codes::HB_DNN_CAN_NOT_OPEN_FILE
        );
        assert!(text(vnpuGetLastErrorDetail()).contains("/nonexistent/vnpu/model.bin"));
        assert_eq!(
            hbDNNInitializeFromFiles(&mut p, names.as_mut_ptr(), 0),
            codes::HB_DNN_INVALID_ARGUMENT
        );
        assert_eq!(
            hbDNNInitializeFromFiles(&mut p, names.as_mut_ptr(), -3),
            codes::HB_DNN_INVALID_ARGUMENT
        );
        let mut null_name = [null::<c_char>()];
        assert_eq!(
            hbDNNInitializeFromFiles(&mut p, null_name.as_mut_ptr(), 1),
            codes::HB_DNN_INVALID_ARGUMENT
        );
        assert!(text(vnpuGetLastErrorDetail()).contains("modelFileNames[0]"));
        let blob = [0u8; 4];
        let mut data = [blob.as_ptr().cast()];
        let mut len = [0i32];
        assert_eq!(
            hbDNNInitializeFromDDR(&mut p, data.as_mut_ptr(), len.as_mut_ptr(), 1),
            codes::HB_DNN_INVALID_ARGUMENT
        );
    }
    assert!(p.is_null());
}

fn shape(dims: &[i32]) -> hbDNNTensorShape {
    let mut s = hbDNNTensorShape::default();
    s.dimensionSize[..dims.len()].copy_from_slice(dims);
    s.numDimensions = dims.len() as i32;
    s
}

#[test]
fn ext_helpers() {
    // SAFETY: buffers sized for the shapes passed.
    unsafe {
        let mut name = null();
        assert_eq!(hbDNNGetLayoutName(&mut name, 2), 0);
        assert_eq!(text(name), "NCHW");
        assert_eq!(
            hbDNNGetLayoutName(&mut name, 3),
            codes::HB_DNN_INVALID_ARGUMENT
        );

        // NHWC 1x1x2x3 -> NCHW.
        let nhwc: Vec<f32> = (0..6).map(|v| v as f32).collect();
        let mut nchw = vec![0f32; 6];
        assert_eq!(
            hbDNNConvertLayout(
                nchw.as_mut_ptr().cast(),
                2,
                nhwc.as_ptr().cast(),
                0,
                13,
                shape(&[1, 1, 2, 3]),
                false
            ),
            0
        );
        assert_eq!(nchw, [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);

        // Pad 1x1x2x3 u8 to 1x1x2x4 and back.
        let src: Vec<u8> = (1..=6).collect();
        let mut padded = vec![0xFFu8; 8];
        assert_eq!(
            hbDNNAddPadding(
                padded.as_mut_ptr().cast(),
                shape(&[1, 1, 2, 4]),
                src.as_ptr().cast(),
                shape(&[1, 1, 2, 3]),
                9
            ),
            0
        );
        assert_eq!(padded, [1, 2, 3, 0, 4, 5, 6, 0]);
        let mut back = vec![0u8; 6];
        assert_eq!(
            hbDNNRemovePadding(
                back.as_mut_ptr().cast(),
                shape(&[1, 1, 2, 3]),
                padded.as_ptr().cast(),
                shape(&[1, 1, 2, 4]),
                9
            ),
            0
        );
        assert_eq!(back, src);
        assert_eq!(
            hbDNNAddPadding(
                padded.as_mut_ptr().cast(),
                shape(&[1, 1, 1, 4]),
                src.as_ptr().cast(),
                shape(&[1, 1, 2, 3]),
                9
            ),
            codes::HB_DNN_INVALID_ARGUMENT
        );

        // Strided copy: 2x3 int16 with a 16-byte row stride.
        let dense: Vec<i16> = (10..16).collect();
        let mut strided = vec![0i16; 8 + 3];
        let dims = [2u32, 3];
        let strides = [16i32, 2];
        assert_eq!(
            hbDNNAddPaddingWithStride(
                strided.as_mut_ptr().cast(),
                dense.as_ptr().cast(),
                2,
                dims.as_ptr(),
                strides.as_ptr(),
                2
            ),
            0
        );
        assert_eq!(&strided[8..11], &[13, 14, 15]);
        let mut back16 = vec![0i16; 6];
        assert_eq!(
            hbDNNRemovePaddingWithStride(
                back16.as_mut_ptr().cast(),
                strided.as_ptr().cast(),
                2,
                dims.as_ptr(),
                strides.as_ptr(),
                2
            ),
            0
        );
        assert_eq!(back16, dense);

        // Per-channel dequantisation of an NHWC S8 tensor.
        let q: [i8; 4] = [2, -4, 6, 8];
        let scales = [0.5f32, 0.25];
        let mut out = [0f32; 4];
        assert_eq!(
            hbDNNUnquantizeByScale(
                out.as_mut_ptr(),
                8,
                shape(&[1, 1, 2, 2]),
                scales.as_ptr(),
                q.as_ptr().cast()
            ),
            0
        );
        assert_eq!(out, [1.0, -1.0, 3.0, 2.0]);
    }
}
