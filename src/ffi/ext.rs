//! The `dnn/hb_dnn_ext.h` functions that make sense on a host: input source, latency
//! estimates, layout names, dequantisation by scale, padding and layout conversion.
//!
//! The data helpers are safe functions over slices (tested below); the exports only
//! check pointers and shapes, compute the byte sizes involved and build the slices.
//! Board-only queries (output operator types, embedded description blobs, native
//! layouts) are not exported.
#![allow(non_snake_case)]

use std::ffi::{c_char, c_void};

use crate::error::{Error, Result};
use crate::ffi::boundary::{self, non_null, write_out};
use crate::ffi::convert::{element_size, shape_dims};
use crate::ffi::handles::{TaskState, MODELS, TASKS};
use crate::ffi::types::*;

fn bad(name: &str, reason: impl Into<String>) -> Error {
    Error::InvalidArgument {
        name: name.into(),
        reason: reason.into(),
    }
}

/// Stores where input `inputIndex` comes from: always `HB_DNN_INPUT_FROM_DDR` on a host
/// (NV12 inputs also accept `hbDNNRoiInfer`).
///
/// # Safety
/// `inputSource` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hbDNNGetInputSource(
    inputSource: *mut i32,
    dnnHandle: hbDNNHandle_t,
    inputIndex: i32,
) -> i32 {
    boundary::status(|| {
        non_null(inputSource, "inputSource")?;
        let m = MODELS.get(dnnHandle as usize)?;
        if inputIndex < 0 || inputIndex as usize >= m.inputs.len() {
            return Err(bad("inputIndex", format!("{inputIndex} is out of range")));
        }
        // SAFETY: checked non-null; writable per contract.
        unsafe { write_out(inputSource, hbDNNInputSource::HB_DNN_INPUT_FROM_DDR as i32) };
        Ok(())
    })
}

/// Stores the model's current latency estimate in microseconds (moving average of
/// measured runs; the compiler's estimate before the first run).
///
/// # Safety
/// `estimateLatency` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hbDNNGetEstimateLatency(
    estimateLatency: *mut i32,
    dnnHandle: hbDNNHandle_t,
) -> i32 {
    boundary::status(|| {
        non_null(estimateLatency, "estimateLatency")?;
        let m = MODELS.get(dnnHandle as usize)?;
        let us = i32::try_from(m.model.estimate_latency_us()).unwrap_or(i32::MAX);
        // SAFETY: checked non-null; writable per contract.
        unsafe { write_out(estimateLatency, us) };
        Ok(())
    })
}

/// Stores the estimated remaining time of a submitted task in microseconds.
/// A task still being assembled (`more = 1`) → `HB_DNN_API_USE_ERROR`.
///
/// # Safety
/// `estimateTime` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hbDNNGetTaskEstimateTime(
    estimateTime: *mut i32,
    taskHandle: hbDNNTaskHandle_t,
) -> i32 {
    boundary::status(|| {
        non_null(estimateTime, "estimateTime")?;
        let entry = TASKS.get(taskHandle as usize)?;
        let us = match &*entry.state.lock() {
            TaskState::Submitted(t) => t.estimate_time_us(),
            TaskState::Building(_) => {
                return Err(Error::ApiUse("the task was not submitted yet".into()))
            }
        };
        // SAFETY: checked non-null; writable per contract.
        unsafe { write_out(estimateTime, i32::try_from(us).unwrap_or(i32::MAX)) };
        Ok(())
    })
}

/// Stores the name of a layout value (`"NHWC"`, `"NCHW"`, `"NHCW_NATIVE"`, `"NONE"`;
/// static strings). Unknown value → `HB_DNN_INVALID_ARGUMENT`.
///
/// # Safety
/// `name` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hbDNNGetLayoutName(name: *mut *const c_char, layout: i32) -> i32 {
    boundary::status(|| {
        non_null(name, "name")?;
        let s = match layout {
            0 => c"NHWC",
            1 => c"NHCW_NATIVE",
            2 => c"NCHW",
            255 => c"NONE",
            _ => return Err(bad("layout", format!("{layout} is not a tensor layout"))),
        };
        // SAFETY: checked non-null; writable per contract.
        unsafe { write_out(name, s.as_ptr()) };
        Ok(())
    })
}

/// Number of elements of a shape with all dims > 0.
fn element_count(dims: &[i32], what: &str) -> Result<usize> {
    dims.iter().try_fold(1usize, |acc, &d| {
        if d <= 0 {
            return Err(bad(
                what,
                format!("dimension {d} in {dims:?} is not positive"),
            ));
        }
        acc.checked_mul(d as usize)
            .ok_or_else(|| bad(what, format!("{dims:?} is too large")))
    })
}

/// `out[i] = in[i] * scales[i % channels]`, `in` a little-endian array of `data_type`.
fn unquantize(out: &mut [f32], data_type: i32, input: &[u8], scales: &[f32]) -> Result<()> {
    let c = scales.len();
    let read: fn(&[u8]) -> f32 = match data_type {
        8 => |b| b[0] as i8 as f32,
        9 => |b| b[0] as f32,
        11 => |b| i16::from_ne_bytes([b[0], b[1]]) as f32,
        12 => |b| u16::from_ne_bytes([b[0], b[1]]) as f32,
        13 => |b| f32::from_ne_bytes([b[0], b[1], b[2], b[3]]),
        14 => |b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as f32,
        15 => |b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as f32,
        _ => {
            return Err(bad(
                "inputDataType",
                format!("{data_type} cannot be unquantized (S8, U8, S16, U16, S32, U32, F32)"),
            ))
        }
    };
    let es = element_size(data_type).unwrap_or(1);
    for (i, (o, b)) in out.iter_mut().zip(input.chunks_exact(es)).enumerate() {
        *o = read(b) * scales[i % c];
    }
    Ok(())
}

/// Dequantises an NHWC tensor with per-channel scales (one per last dimension):
/// `output[i] = input[i] * scales[i % C]`.
///
/// # Safety
/// `output` writable for the element count of `inputShape` floats, `input` readable for
/// the same count of `inputDataType` elements, `scales` for C floats.
#[no_mangle]
pub unsafe extern "C" fn hbDNNUnquantizeByScale(
    output: *mut f32,
    inputDataType: i32,
    inputShape: hbDNNTensorShape,
    scales: *const f32,
    input: *const c_void,
) -> i32 {
    boundary::status(|| {
        non_null(output, "output")?;
        non_null(scales, "scales")?;
        non_null(input, "input")?;
        let dims = shape_dims(&inputShape, "inputShape")?;
        let n = element_count(&dims, "inputShape")?;
        let c = *dims
            .last()
            .ok_or_else(|| bad("inputShape", "has no dimensions"))? as usize;
        let es = element_size(inputDataType)
            .ok_or_else(|| bad("inputDataType", format!("{inputDataType} is not supported")))?;
        // SAFETY: sizes derived from `inputShape` as documented (caller's contract).
        let (out, inp, sc) = unsafe {
            (
                std::slice::from_raw_parts_mut(output, n),
                std::slice::from_raw_parts(input.cast::<u8>(), n * es),
                std::slice::from_raw_parts(scales, c),
            )
        };
        unquantize(out, inputDataType, inp, sc)
    })
}

/// Copies the overlapping region of two dense row-major tensors of the same rank
/// (`src_dims` and `dst_dims`, `es`-byte elements); the rest of `dst` is left alone.
fn copy_region(dst: &mut [u8], dst_dims: &[usize], src: &[u8], src_dims: &[usize], es: usize) {
    let rank = dst_dims.len();
    if rank == 0 {
        dst[..es].copy_from_slice(&src[..es]);
        return;
    }
    let common: Vec<usize> = dst_dims
        .iter()
        .zip(src_dims)
        .map(|(&a, &b)| a.min(b))
        .collect();
    if common.contains(&0) {
        return;
    }
    let row = common[rank - 1] * es;
    let strides = |dims: &[usize]| {
        let mut s = vec![es; rank];
        for i in (0..rank - 1).rev() {
            s[i] = s[i + 1] * dims[i + 1];
        }
        s
    };
    let (ds, ss) = (strides(dst_dims), strides(src_dims));
    let outer: usize = common[..rank - 1].iter().product();
    let mut idx = vec![0usize; rank - 1];
    for _ in 0..outer {
        let d: usize = idx.iter().zip(&ds).map(|(i, s)| i * s).sum();
        let s: usize = idx.iter().zip(&ss).map(|(i, s)| i * s).sum();
        dst[d..d + row].copy_from_slice(&src[s..s + row]);
        for k in (0..rank - 1).rev() {
            idx[k] += 1;
            if idx[k] < common[k] {
                break;
            }
            idx[k] = 0;
        }
    }
}

fn dims_usize(shape: &hbDNNTensorShape, what: &str) -> Result<Vec<usize>> {
    let dims = shape_dims(shape, what)?;
    element_count(&dims, what)?;
    Ok(dims.iter().map(|&d| d as usize).collect())
}

/// Shared body of `hbDNNAddPadding` / `hbDNNRemovePadding`.
///
/// # Safety
/// `output` / `input` valid for their shapes' byte sizes.
unsafe fn pad(
    output: *mut c_void,
    output_shape: &hbDNNTensorShape,
    input: *const c_void,
    input_shape: &hbDNNTensorShape,
    data_type: i32,
    adding: bool,
) -> Result<()> {
    non_null(output, "output")?;
    non_null(input, "input")?;
    let od = dims_usize(output_shape, "outputShape")?;
    let id = dims_usize(input_shape, "inputShape")?;
    if od.len() != 4 || id.len() != 4 {
        return Err(bad("shape", "padding works on 4-D shapes"));
    }
    let ok = od
        .iter()
        .zip(&id)
        .all(|(o, i)| if adding { o >= i } else { o <= i });
    if !ok {
        let rel = if adding { ">=" } else { "<=" };
        return Err(bad(
            "outputShape",
            format!("{od:?} must be {rel} inputShape {id:?} in every dimension"),
        ));
    }
    let es = element_size(data_type)
        .ok_or_else(|| bad("dataType", format!("{data_type} is not supported")))?;
    let (on, inn) = (
        od.iter().product::<usize>() * es,
        id.iter().product::<usize>() * es,
    );
    // SAFETY: valid for the shapes' byte sizes (caller's contract); distinct buffers.
    let (out, inp) = unsafe {
        (
            std::slice::from_raw_parts_mut(output.cast::<u8>(), on),
            std::slice::from_raw_parts(input.cast::<u8>(), inn),
        )
    };
    if adding {
        out.fill(0);
    }
    copy_region(out, &od, inp, &id, es);
    Ok(())
}

/// Copies a dense 4-D tensor into a larger one, zero-filling the padding at the end of
/// each dimension.
///
/// # Safety
/// `output` writable for `outputShape` elements, `input` readable for `inputShape`
/// elements, not overlapping.
#[no_mangle]
pub unsafe extern "C" fn hbDNNAddPadding(
    output: *mut c_void,
    outputShape: hbDNNTensorShape,
    input: *const c_void,
    inputShape: hbDNNTensorShape,
    dataType: i32,
) -> i32 {
    // SAFETY: forwarded caller contract.
    boundary::status(|| unsafe { pad(output, &outputShape, input, &inputShape, dataType, true) })
}

/// Copies the valid region of a padded 4-D tensor into a smaller dense one.
///
/// # Safety
/// As `hbDNNAddPadding`.
#[no_mangle]
pub unsafe extern "C" fn hbDNNRemovePadding(
    output: *mut c_void,
    outputShape: hbDNNTensorShape,
    input: *const c_void,
    inputShape: hbDNNTensorShape,
    dataType: i32,
) -> i32 {
    // SAFETY: forwarded caller contract.
    boundary::status(|| unsafe { pad(output, &outputShape, input, &inputShape, dataType, false) })
}

/// Byte span of a strided tensor: last byte offset + one element.
fn strided_span(dims: &[usize], strides: &[usize], es: usize) -> usize {
    dims.iter()
        .zip(strides)
        .map(|(d, s)| (d - 1) * s)
        .sum::<usize>()
        + es
}

/// Copies between a dense tensor and a strided one: `to_strided` reads `src` densely
/// and writes `dst` at strided offsets, otherwise the reverse.
fn copy_strided(
    dst: &mut [u8],
    src: &[u8],
    dims: &[usize],
    strides: &[usize],
    es: usize,
    to_strided: bool,
) {
    let n: usize = dims.iter().product();
    let rank = dims.len();
    let mut idx = vec![0usize; rank];
    for i in 0..n {
        let off: usize = idx.iter().zip(strides).map(|(a, b)| a * b).sum();
        let (d, s) = if to_strided {
            (off, i * es)
        } else {
            (i * es, off)
        };
        dst[d..d + es].copy_from_slice(&src[s..s + es]);
        for k in (0..rank).rev() {
            idx[k] += 1;
            if idx[k] < dims[k] {
                break;
            }
            idx[k] = 0;
        }
    }
}

/// Shared body of the `...PaddingWithStride` functions.
///
/// # Safety
/// `dim` / `stride` arrays of `dim_num`; buffers valid for the sizes they imply.
unsafe fn pad_with_stride(
    output: *mut c_void,
    input: *const c_void,
    dim_num: u32,
    dim: *const u32,
    stride: *const i32,
    element_size: u32,
    to_strided: bool,
) -> Result<()> {
    non_null(output, "output")?;
    non_null(input, "input")?;
    non_null(dim, "dim")?;
    non_null(stride, "stride")?;
    if dim_num == 0 || dim_num as usize > HB_DNN_TENSOR_MAX_DIMENSIONS {
        return Err(bad("dimNum", format!("{dim_num} is outside 1..=8")));
    }
    if element_size == 0 || element_size > 8 {
        return Err(bad(
            "elementSize",
            format!("{element_size} is outside 1..=8"),
        ));
    }
    let es = element_size as usize;
    // SAFETY: arrays of `dim_num` entries (caller's contract).
    let (dims, strides) = unsafe {
        (
            std::slice::from_raw_parts(dim, dim_num as usize),
            std::slice::from_raw_parts(stride, dim_num as usize),
        )
    };
    if dims.contains(&0) {
        return Err(bad("dim", format!("{dims:?} has a zero dimension")));
    }
    if strides.iter().any(|&s| s < es as i32) {
        return Err(bad(
            "stride",
            format!("{strides:?} has a stride below the element size"),
        ));
    }
    let dims: Vec<usize> = dims.iter().map(|&d| d as usize).collect();
    let strides: Vec<usize> = strides.iter().map(|&s| s as usize).collect();
    let dense_len = dims.iter().product::<usize>() * es;
    let strided_len = strided_span(&dims, &strides, es);
    let (out_len, in_len) = if to_strided {
        (strided_len, dense_len)
    } else {
        (dense_len, strided_len)
    };
    // SAFETY: valid for these sizes (caller's contract); distinct buffers.
    let (out, inp) = unsafe {
        (
            std::slice::from_raw_parts_mut(output.cast::<u8>(), out_len),
            std::slice::from_raw_parts(input.cast::<u8>(), in_len),
        )
    };
    copy_strided(out, inp, &dims, &strides, es, to_strided);
    Ok(())
}

/// Copies a dense tensor of `dim[0..dimNum]` elements into a strided one (`stride` in
/// bytes per dimension).
///
/// # Safety
/// `dim` / `stride` arrays of `dimNum`; `input` readable for the dense size, `output`
/// writable up to its last strided element; not overlapping.
#[no_mangle]
pub unsafe extern "C" fn hbDNNAddPaddingWithStride(
    output: *mut c_void,
    input: *const c_void,
    dimNum: u32,
    dim: *const u32,
    stride: *const i32,
    elementSize: u32,
) -> i32 {
    // SAFETY: forwarded caller contract.
    boundary::status(|| unsafe {
        pad_with_stride(output, input, dimNum, dim, stride, elementSize, true)
    })
}

/// Copies a strided tensor (`stride` in bytes) into a dense one of `dim[0..dimNum]`.
///
/// # Safety
/// As `hbDNNAddPaddingWithStride` with the roles of the buffers swapped.
#[no_mangle]
pub unsafe extern "C" fn hbDNNRemovePaddingWithStride(
    output: *mut c_void,
    input: *const c_void,
    dimNum: u32,
    dim: *const u32,
    stride: *const i32,
    elementSize: u32,
) -> i32 {
    // SAFETY: forwarded caller contract.
    boundary::status(|| unsafe {
        pad_with_stride(output, input, dimNum, dim, stride, elementSize, false)
    })
}

/// Transposes a 4-D tensor between NHWC and NCHW (or copies for equal layouts),
/// optionally reversing the byte order of each element.
fn convert_layout(
    out: &mut [u8],
    out_nchw: bool,
    inp: &[u8],
    in_nchw: bool,
    dims: [usize; 4],
    es: usize,
    swap: bool,
) {
    let [n, d1, d2, d3] = dims;
    // Logical (n, c, h, w) of the input.
    let (c, h, w) = if in_nchw { (d1, d2, d3) } else { (d3, d1, d2) };
    let offset = |nchw: bool, b: usize, ci: usize, y: usize, x: usize| {
        if nchw {
            ((b * c + ci) * h + y) * w + x
        } else {
            ((b * h + y) * w + x) * c + ci
        }
    };
    for b in 0..n {
        for ci in 0..c {
            for y in 0..h {
                for x in 0..w {
                    let s = offset(in_nchw, b, ci, y, x) * es;
                    let d = offset(out_nchw, b, ci, y, x) * es;
                    let dst = &mut out[d..d + es];
                    dst.copy_from_slice(&inp[s..s + es]);
                    if swap {
                        dst.reverse();
                    }
                }
            }
        }
    }
}

/// Converts a 4-D tensor of `inputShape` (in `inputLayout`) to `outputLayout` (NHWC ↔
/// NCHW), optionally reversing each element's byte order. Other layouts →
/// `HB_DNN_INVALID_ARGUMENT`.
///
/// # Safety
/// `input` readable and `output` writable for the tensor's byte size; not overlapping.
#[no_mangle]
pub unsafe extern "C" fn hbDNNConvertLayout(
    output: *mut c_void,
    outputLayout: i32,
    input: *const c_void,
    inputLayout: i32,
    dataType: i32,
    inputShape: hbDNNTensorShape,
    convertEndianness: bool,
) -> i32 {
    boundary::status(|| {
        non_null(output, "output")?;
        non_null(input, "input")?;
        let is_nchw = |l: i32, what: &str| match l {
            0 => Ok(false),
            2 => Ok(true),
            _ => Err(bad(what, format!("{l} is not NHWC (0) or NCHW (2)"))),
        };
        let (out_nchw, in_nchw) = (
            is_nchw(outputLayout, "outputLayout")?,
            is_nchw(inputLayout, "inputLayout")?,
        );
        let dims = dims_usize(&inputShape, "inputShape")?;
        let dims: [usize; 4] = dims
            .try_into()
            .map_err(|_| bad("inputShape", "layout conversion works on 4-D shapes"))?;
        let es = element_size(dataType)
            .ok_or_else(|| bad("dataType", format!("{dataType} is not supported")))?;
        let len = dims.iter().product::<usize>() * es;
        // SAFETY: both valid for `len` bytes and distinct (caller's contract).
        let (out, inp) = unsafe {
            (
                std::slice::from_raw_parts_mut(output.cast::<u8>(), len),
                std::slice::from_raw_parts(input.cast::<u8>(), len),
            )
        };
        convert_layout(out, out_nchw, inp, in_nchw, dims, es, convertEndianness);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unquantize_per_channel() {
        let input: Vec<u8> = [-2i8, 4, 6, -8].iter().map(|&v| v as u8).collect();
        let mut out = [0f32; 4];
        unquantize(&mut out, 8, &input, &[0.5, 0.25]).expect("ok");
        assert_eq!(out, [-1.0, 1.0, 3.0, -2.0]);
        assert!(unquantize(&mut out, 6, &input, &[1.0]).is_err());
    }

    #[test]
    fn add_then_remove_padding_round_trips() {
        let src: Vec<u8> = (1..=12).collect();
        let mut padded = vec![0xAAu8; 2 * 3 * 4];
        copy_region(&mut padded, &[1, 2, 3, 4], &src, &[1, 2, 2, 3], 1);
        assert_eq!(&padded[..4], &[1, 2, 3, 0xAA]);
        assert_eq!(&padded[4..7], &[4, 5, 6]);
        let mut back = vec![0u8; 12];
        copy_region(&mut back, &[1, 2, 2, 3], &padded, &[1, 2, 3, 4], 1);
        assert_eq!(back, src);
    }

    #[test]
    fn strided_round_trip() {
        let dense: Vec<u8> = (0..6).collect();
        let (dims, strides) = ([2usize, 3], [8usize, 2]);
        let mut strided = vec![0u8; strided_span(&dims, &strides, 1)];
        copy_strided(&mut strided, &dense, &dims, &strides, 1, true);
        assert_eq!(strided[8], 3);
        assert_eq!(strided[12], 5);
        let mut back = vec![0u8; 6];
        copy_strided(&mut back, &strided, &dims, &strides, 1, false);
        assert_eq!(back, dense);
    }

    #[test]
    fn nhwc_to_nchw_and_back() {
        // n=1, h=2, w=2, c=3 in NHWC: value = 10*c + (y*2 + x)
        let mut nhwc = vec![0u8; 12];
        for y in 0..2 {
            for x in 0..2 {
                for c in 0..3 {
                    nhwc[(y * 2 + x) * 3 + c] = (10 * c + y * 2 + x) as u8;
                }
            }
        }
        let mut nchw = vec![0u8; 12];
        convert_layout(&mut nchw, true, &nhwc, false, [1, 2, 2, 3], 1, false);
        assert_eq!(&nchw[..4], &[0, 1, 2, 3]);
        assert_eq!(&nchw[8..], &[20, 21, 22, 23]);
        let mut back = vec![0u8; 12];
        convert_layout(&mut back, false, &nchw, true, [1, 3, 2, 2], 1, false);
        assert_eq!(back, nhwc);
        let mut swapped = vec![0u8; 4];
        convert_layout(
            &mut swapped,
            true,
            &[1, 2, 3, 4],
            true,
            [1, 1, 1, 2],
            2,
            true,
        );
        assert_eq!(swapped, [2, 1, 4, 3]);
    }
}
