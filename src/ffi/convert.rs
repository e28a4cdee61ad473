//! Checked conversions between the C mirrors (`types.rs`) and the runtime's types, and
//! the validation of caller tensors against a model's tensor descriptions.
//!
//! Every mismatch is an [`Error::TensorMismatch`] naming the tensor (direction, index
//! and name), the field, the expected and the actual value. What is accepted:
//! - `tensorType` equal to the model's, or NV12 ↔ NV12_SEPARATE switched;
//! - `tensorLayout` and `validShape` equal to the model's;
//! - `alignedShape` equal to the model's aligned or valid shape;
//! - `stride` equal to the model's or all zero (dense);
//! - non-null `virAddr` with `memSize` ≥ the bytes the tensor needs: `alignedByteSize`,
//!   or `H*W*3/2` for NV12, or `H*W` (Y) + `H*W/2` (UV) for NV12_SEPARATE. Memory need
//!   not come from `hbSysAlloc*`.

use crate::error::{Error, Result};
use crate::ffi::types::*;
use crate::runtime::{CtrlParams, ElemType, IoBuffer, Quant, Roi, TensorDesc, TensorLayout};

impl TryFrom<i32> for ElemType {
    type Error = Error;
    fn try_from(v: i32) -> Result<ElemType> {
        Ok(match v {
            0 => ElemType::ImgY,
            1 => ElemType::ImgNv12,
            2 => ElemType::ImgNv12Separate,
            3 => ElemType::ImgYuv444,
            4 => ElemType::ImgRgb,
            5 => ElemType::ImgBgr,
            8 => ElemType::S8,
            9 => ElemType::U8,
            11 => ElemType::S16,
            13 => ElemType::F32,
            14 => ElemType::S32,
            17 => ElemType::S64,
            _ => {
                return Err(Error::InvalidArgument {
                    name: "tensorType".into(),
                    reason: format!("{v} is not a supported hbDNNDataType"),
                })
            }
        })
    }
}

impl TryFrom<i32> for TensorLayout {
    type Error = Error;
    fn try_from(v: i32) -> Result<TensorLayout> {
        match v {
            0 => Ok(TensorLayout::Nhwc),
            2 => Ok(TensorLayout::Nchw),
            255 => Ok(TensorLayout::None),
            _ => Err(Error::InvalidArgument {
                name: "tensorLayout".into(),
                reason: format!("{v} is not an hbDNNTensorLayout"),
            }),
        }
    }
}

impl TryFrom<&hbDNNInferCtrlParam> for CtrlParams {
    type Error = Error;
    fn try_from(p: &hbDNNInferCtrlParam) -> Result<CtrlParams> {
        let bad = |field: &str, reason: String| Error::InvalidArgument {
            name: format!("inferCtrlParam.{field}"),
            reason,
        };
        if !(0..=255).contains(&p.priority) {
            return Err(bad(
                "priority",
                format!("{} is outside 0..=255", p.priority),
            ));
        }
        if p.bpuCoreId < 0 {
            return Err(bad(
                "bpuCoreId",
                format!("{} is not a core bit mask", p.bpuCoreId),
            ));
        }
        // dspCoreId is ignored: there is no DSP (documented; -1 is accepted too).
        Ok(CtrlParams {
            core_mask: p.bpuCoreId as u32,
            priority: p.priority as u8,
            custom_id: p.customId,
        })
    }
}

impl From<&hbDNNRoi> for Roi {
    fn from(r: &hbDNNRoi) -> Roi {
        Roi {
            left: r.left,
            top: r.top,
            right: r.right,
            bottom: r.bottom,
        }
    }
}

/// The C shape of a dimension list (at most 8 dims; longer lists are cut, which a
/// model never produces).
pub(crate) fn c_shape(dims: &[i32]) -> hbDNNTensorShape {
    let mut s = hbDNNTensorShape::default();
    let n = dims.len().min(HB_DNN_TENSOR_MAX_DIMENSIONS);
    s.dimensionSize[..n].copy_from_slice(&dims[..n]);
    s.numDimensions = n as i32;
    s
}

/// The dimensions of a C shape, checking `numDimensions`.
pub(crate) fn shape_dims(s: &hbDNNTensorShape, what: &str) -> Result<Vec<i32>> {
    let n = s.numDimensions;
    if !(0..=HB_DNN_TENSOR_MAX_DIMENSIONS as i32).contains(&n) {
        return Err(Error::InvalidArgument {
            name: format!("{what}.numDimensions"),
            reason: format!("{n} is outside 0..=8"),
        });
    }
    Ok(s.dimensionSize[..n as usize].to_vec())
}

/// Bytes of one element of a data type (image types are bytes); `None` for 4-bit types
/// and unknown values.
pub(crate) fn element_size(data_type: i32) -> Option<usize> {
    match data_type {
        0..=5 | 8 | 9 => Some(1),
        10..=12 => Some(2),
        13..=15 => Some(4),
        16..=18 => Some(8),
        _ => None,
    }
}

/// Image height and width of an image shape in `layout` (4-D NCHW or NHWC).
pub(crate) fn image_hw(dims: &[i32], layout: TensorLayout) -> Option<(usize, usize)> {
    if dims.len() != 4 || dims.iter().any(|&d| d <= 0) {
        return None;
    }
    let (h, w) = match layout {
        TensorLayout::Nhwc => (dims[1], dims[2]),
        _ => (dims[2], dims[3]),
    };
    Some((h as usize, w as usize))
}

fn fmt_dims(d: &[i32]) -> String {
    format!("{d:?}")
}

fn elem_name(e: ElemType) -> String {
    format!("{} ({e:?})", e as i32)
}

/// The C properties of a runtime tensor description, with quantisation pointers into
/// `scale` / `zero_point` (owned by the caller, who keeps them alive and unmoved).
pub(crate) fn c_properties(
    d: &TensorDesc,
    scale: &mut [f32],
    zero_point: &mut [i8],
) -> hbDNNTensorProperties {
    let mut stride = [0i32; HB_DNN_TENSOR_MAX_DIMENSIONS];
    let n = d.stride.len().min(HB_DNN_TENSOR_MAX_DIMENSIONS);
    stride[..n].copy_from_slice(&d.stride[..n]);
    let ptr_or_null = |len: usize, p: *mut f32| if len == 0 { std::ptr::null_mut() } else { p };
    let (quanti, axis) = match &d.quant {
        Quant::None => (hbDNNQuantiType::NONE, 0),
        Quant::Scale { axis, .. } => (hbDNNQuantiType::SCALE, *axis),
    };
    hbDNNTensorProperties {
        validShape: c_shape(&d.valid_shape),
        alignedShape: c_shape(&d.aligned_shape),
        tensorLayout: d.layout as i32,
        tensorType: d.elem as i32,
        shift: hbDNNQuantiShift {
            shiftLen: 0,
            shiftData: std::ptr::null_mut(),
        },
        scale: hbDNNQuantiScale {
            scaleLen: scale.len() as i32,
            scaleData: ptr_or_null(scale.len(), scale.as_mut_ptr()),
            zeroPointLen: zero_point.len() as i32,
            zeroPointData: if zero_point.is_empty() {
                std::ptr::null_mut()
            } else {
                zero_point.as_mut_ptr()
            },
        },
        quantiType: quanti as i32,
        quantizeAxis: axis,
        alignedByteSize: i32::try_from(d.aligned_byte_size).unwrap_or(i32::MAX),
        stride,
    }
}

/// Which end of the model a tensor is on (for messages).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Side {
    Input,
    Output,
}

/// Names one caller tensor in error messages.
struct Who<'a> {
    side: Side,
    index: usize,
    desc: &'a TensorDesc,
}

impl Who<'_> {
    fn mismatch(&self, field: &str, expected: String, actual: String) -> Error {
        let side = match self.side {
            Side::Input => "input",
            Side::Output => "output",
        };
        Error::TensorMismatch {
            name: format!("{side} {} '{}'", self.index, self.desc.name),
            field: field.into(),
            expected,
            actual,
        }
    }
}

fn is_nv12(e: ElemType) -> bool {
    matches!(e, ElemType::ImgNv12 | ElemType::ImgNv12Separate)
}

/// Checks type, layout and shapes of a caller tensor against `desc`; returns the
/// caller's element type (which may be the NV12 twin of the model's).
fn check_header(who: &Who<'_>, p: &hbDNNTensorProperties) -> Result<ElemType> {
    let desc = who.desc;
    let ty = ElemType::try_from(p.tensorType)
        .map_err(|_| who.mismatch("tensorType", elem_name(desc.elem), p.tensorType.to_string()))?;
    let type_ok =
        ty == desc.elem || (matches!(who.side, Side::Input) && is_nv12(ty) && is_nv12(desc.elem));
    if !type_ok {
        return Err(who.mismatch("tensorType", elem_name(desc.elem), elem_name(ty)));
    }
    if p.tensorLayout != desc.layout as i32 {
        return Err(who.mismatch(
            "tensorLayout",
            (desc.layout as i32).to_string(),
            p.tensorLayout.to_string(),
        ));
    }
    let valid = shape_dims(&p.validShape, "validShape")
        .map_err(|e| who.mismatch("validShape", fmt_dims(&desc.valid_shape), e.to_string()))?;
    if valid != desc.valid_shape {
        return Err(who.mismatch("validShape", fmt_dims(&desc.valid_shape), fmt_dims(&valid)));
    }
    let aligned = shape_dims(&p.alignedShape, "alignedShape")
        .map_err(|e| who.mismatch("alignedShape", fmt_dims(&desc.aligned_shape), e.to_string()))?;
    if aligned != desc.aligned_shape && aligned != desc.valid_shape {
        return Err(who.mismatch(
            "alignedShape",
            fmt_dims(&desc.aligned_shape),
            fmt_dims(&aligned),
        ));
    }
    let n = desc.stride.len().min(HB_DNN_TENSOR_MAX_DIMENSIONS);
    let dense = p.stride.iter().all(|&s| s == 0);
    if !dense && p.stride[..n] != desc.stride[..n] {
        return Err(who.mismatch(
            "stride",
            format!("{:?} or all 0", desc.stride),
            format!("{:?}", &p.stride[..n]),
        ));
    }
    Ok(ty)
}

/// Checks one memory plane and turns it into an [`IoBuffer`] of `need` bytes.
fn plane(who: &Who<'_>, t: &hbDNNTensor, slot: usize, need: usize) -> Result<IoBuffer> {
    let m = &t.sysMem[slot];
    if m.virAddr.is_null() {
        return Err(who.mismatch(
            &format!("sysMem[{slot}].virAddr"),
            "non-NULL".into(),
            "NULL".into(),
        ));
    }
    if (m.memSize as usize) < need {
        return Err(who.mismatch(
            &format!("sysMem[{slot}].memSize"),
            format!(">= {need} bytes"),
            format!("{} bytes", m.memSize),
        ));
    }
    Ok(IoBuffer {
        ptr: m.virAddr.cast(),
        len: need,
    })
}

/// Byte sizes of the planes of a tensor of type `ty` described by `desc`.
fn plane_sizes(who: &Who<'_>, ty: ElemType) -> Result<Vec<usize>> {
    let desc = who.desc;
    if !is_nv12(ty) {
        return Ok(vec![desc.aligned_byte_size]);
    }
    let (h, w) = image_hw(&desc.valid_shape, desc.layout).ok_or_else(|| {
        who.mismatch(
            "validShape",
            "a 4-D image shape".into(),
            fmt_dims(&desc.valid_shape),
        )
    })?;
    Ok(if ty == ElemType::ImgNv12 {
        vec![h * w * 3 / 2]
    } else {
        vec![h * w, h * w / 2]
    })
}

/// Validates caller input tensor `index` against `desc`; returns its planes.
pub(crate) fn input_planes(
    index: usize,
    desc: &TensorDesc,
    t: &hbDNNTensor,
) -> Result<Vec<IoBuffer>> {
    let who = Who {
        side: Side::Input,
        index,
        desc,
    };
    let ty = check_header(&who, &t.properties)?;
    plane_sizes(&who, ty)?
        .into_iter()
        .enumerate()
        .map(|(slot, need)| plane(&who, t, slot, need))
        .collect()
}

/// Validates caller output tensor `index` against `desc`; `batch` outputs are
/// concatenated along N (ROI inference), so memory for `batch` copies is required and
/// dim 0 of `validShape` may be `batch` times the model's. Returns one buffer per batch
/// item.
pub(crate) fn output_buffers(
    index: usize,
    desc: &TensorDesc,
    t: &hbDNNTensor,
    batch: usize,
) -> Result<Vec<IoBuffer>> {
    let who = Who {
        side: Side::Output,
        index,
        desc,
    };
    let mut props = t.properties;
    if batch > 1 {
        // Accept N = batch × model N by normalising dim 0 before the common checks.
        for shape in [&mut props.validShape, &mut props.alignedShape] {
            let model_n = desc.valid_shape.first().copied().unwrap_or(1);
            if shape.numDimensions > 0 && shape.dimensionSize[0] == model_n * batch as i32 {
                shape.dimensionSize[0] = model_n;
            }
        }
    }
    check_header(&who, &props)?;
    let one = desc.aligned_byte_size;
    let all = plane(&who, t, 0, one * batch)?;
    Ok((0..batch)
        .map(|b| IoBuffer {
            // Offsets stay inside the `one * batch` bytes checked above.
            ptr: all.ptr.wrapping_add(b * one),
            len: one,
        })
        .collect())
}

/// A caller NV12 frame for ROI inference: its planes, size and row stride.
pub(crate) struct FrameInput {
    pub(crate) y: IoBuffer,
    pub(crate) uv: IoBuffer,
    pub(crate) width: usize,
    pub(crate) height: usize,
    pub(crate) stride: usize,
}

/// Validates a full-frame NV12 input of ROI inference (its shape is the frame's, not the
/// model's). The row stride is `alignedShape`'s W when that is ≥ W, else W.
pub(crate) fn frame_input(index: usize, desc: &TensorDesc, t: &hbDNNTensor) -> Result<FrameInput> {
    let who = Who {
        side: Side::Input,
        index,
        desc,
    };
    let p = &t.properties;
    let ty = ElemType::try_from(p.tensorType)
        .ok()
        .filter(|&e| is_nv12(e))
        .ok_or_else(|| {
            who.mismatch(
                "tensorType",
                "NV12 (1) or NV12_SEPARATE (2) frame".into(),
                p.tensorType.to_string(),
            )
        })?;
    let layout = TensorLayout::try_from(p.tensorLayout)
        .map_err(|_| who.mismatch("tensorLayout", "0 or 2".into(), p.tensorLayout.to_string()))?;
    let valid = shape_dims(&p.validShape, "validShape")
        .map_err(|e| who.mismatch("validShape", "[1, 3, H, W]".into(), e.to_string()))?;
    let (height, width) = image_hw(&valid, layout)
        .filter(|(h, w)| h % 2 == 0 && w % 2 == 0)
        .ok_or_else(|| {
            who.mismatch(
                "validShape",
                "a 4-D frame shape with even H and W".into(),
                fmt_dims(&valid),
            )
        })?;
    let aligned = shape_dims(&p.alignedShape, "alignedShape").unwrap_or_default();
    let stride = image_hw(&aligned, layout)
        .map(|(_, aw)| aw)
        .filter(|&aw| aw >= width)
        .unwrap_or(width);
    let (y, uv) = if ty == ElemType::ImgNv12 {
        let all = plane(&who, t, 0, stride * height * 3 / 2)?;
        (
            IoBuffer {
                ptr: all.ptr,
                len: stride * height,
            },
            IoBuffer {
                ptr: all.ptr.wrapping_add(stride * height),
                len: stride * height / 2,
            },
        )
    } else {
        (
            plane(&who, t, 0, stride * height)?,
            plane(&who, t, 1, stride * height / 2)?,
        )
    };
    Ok(FrameInput {
        y,
        uv,
        width,
        height,
        stride,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(elem: ElemType, shape: Vec<i32>, bytes: usize) -> TensorDesc {
        TensorDesc {
            name: "data".into(),
            valid_shape: shape.clone(),
            aligned_shape: shape,
            layout: TensorLayout::Nchw,
            elem,
            quant: Quant::None,
            aligned_byte_size: bytes,
            stride: vec![0; 4],
        }
    }

    fn tensor_for(d: &TensorDesc, buf: &mut [u8]) -> hbDNNTensor {
        let mut t = hbDNNTensor {
            sysMem: [hbSysMem {
                phyAddr: 0,
                virAddr: std::ptr::null_mut(),
                memSize: 0,
            }; 4],
            properties: c_properties(d, &mut [], &mut []),
        };
        t.sysMem[0].virAddr = buf.as_mut_ptr().cast();
        t.sysMem[0].memSize = buf.len() as u32;
        t
    }

    #[test]
    fn matching_input_and_nv12_twin() {
        let d = desc(ElemType::ImgNv12, vec![1, 3, 4, 8], 48);
        let mut buf = vec![0u8; 48];
        let mut t = tensor_for(&d, &mut buf);
        let planes = input_planes(0, &d, &t).expect("ok");
        assert_eq!(planes.len(), 1);
        assert_eq!(planes[0].len, 48);
        t.properties.tensorType = hbDNNDataType::HB_DNN_IMG_TYPE_NV12_SEPARATE as i32;
        let mut uv = vec![0u8; 16];
        t.sysMem[1].virAddr = uv.as_mut_ptr().cast();
        t.sysMem[1].memSize = 16;
        let planes = input_planes(0, &d, &t).expect("separate");
        assert_eq!((planes[0].len, planes[1].len), (32, 16));
    }

    #[test]
    fn mismatches_name_tensor_field_expected_actual() {
        let d = desc(ElemType::F32, vec![1, 3, 2, 2], 48);
        let mut buf = vec![0u8; 48];
        let mut t = tensor_for(&d, &mut buf);
        t.properties.validShape.dimensionSize[1] = 4;
        let e = input_planes(0, &d, &t).unwrap_err().to_string();
        assert!(
            e.contains("input 0 'data'") && e.contains("validShape"),
            "{e}"
        );
        assert!(
            e.contains("[1, 3, 2, 2]") && e.contains("[1, 4, 2, 2]"),
            "{e}"
        );
        let mut t = tensor_for(&d, &mut buf);
        t.sysMem[0].memSize = 47;
        let e = input_planes(0, &d, &t).unwrap_err().to_string();
        assert!(
            e.contains("sysMem[0].memSize") && e.contains(">= 48"),
            "{e}"
        );
        let mut t = tensor_for(&d, &mut buf);
        t.properties.tensorType = hbDNNDataType::HB_DNN_TENSOR_TYPE_U8 as i32;
        let e = input_planes(0, &d, &t).unwrap_err();
        assert_eq!(e.code(), crate::error::codes::HB_DNN_INVALID_ARGUMENT);
        let mut t = tensor_for(&d, &mut buf);
        t.properties.tensorLayout = 0;
        assert!(input_planes(0, &d, &t)
            .unwrap_err()
            .to_string()
            .contains("tensorLayout"));
        let mut t = tensor_for(&d, &mut buf);
        t.properties.stride[0] = 7;
        assert!(input_planes(0, &d, &t)
            .unwrap_err()
            .to_string()
            .contains("stride"));
        let mut t = tensor_for(&d, &mut buf);
        t.sysMem[0].virAddr = std::ptr::null_mut();
        assert!(input_planes(0, &d, &t)
            .unwrap_err()
            .to_string()
            .contains("virAddr"));
        let mut t = tensor_for(&d, &mut buf);
        t.properties.validShape.numDimensions = 9;
        assert!(input_planes(0, &d, &t).is_err());
    }

    #[test]
    fn batched_outputs_are_split() {
        let d = desc(ElemType::F32, vec![1, 10], 40);
        let mut buf = vec![0u8; 120];
        let mut t = tensor_for(&d, &mut buf);
        t.properties.validShape.dimensionSize[0] = 3;
        let bufs = output_buffers(0, &d, &t, 3).expect("batched");
        assert_eq!(bufs.len(), 3);
        assert_eq!(bufs[2].ptr as usize - bufs[0].ptr as usize, 80);
        t.sysMem[0].memSize = 119;
        assert!(output_buffers(0, &d, &t, 3).is_err());
    }

    #[test]
    fn ctrl_params() {
        let mut p = hbDNNInferCtrlParam {
            bpuCoreId: 2,
            dspCoreId: 0,
            priority: 255,
            more: 0,
            customId: -3,
            reserved1: 0,
            reserved2: 0,
        };
        let c = CtrlParams::try_from(&p).expect("ok");
        assert_eq!((c.core_mask, c.priority, c.custom_id), (2, 255, -3));
        p.priority = 256;
        assert!(CtrlParams::try_from(&p).is_err());
        p.priority = 0;
        p.bpuCoreId = -1;
        assert!(CtrlParams::try_from(&p).is_err());
        // dspCoreId is ignored, -1 included.
        p.bpuCoreId = 0;
        for dsp in [-1, i32::MIN, 7] {
            p.dspCoreId = dsp;
            assert!(CtrlParams::try_from(&p).is_ok(), "dspCoreId {dsp}");
        }
    }

    #[test]
    fn elem_and_layout_conversions_round_trip() {
        for v in [0, 1, 2, 3, 4, 5, 8, 9, 11, 13, 14, 17] {
            assert_eq!(ElemType::try_from(v).expect("known") as i32, v);
        }
        assert!(ElemType::try_from(6).is_err());
        assert!(ElemType::try_from(-1).is_err());
        for v in [0, 2, 255] {
            assert_eq!(TensorLayout::try_from(v).expect("known") as i32, v);
        }
        assert!(TensorLayout::try_from(1).is_err());
        assert_eq!(element_size(13), Some(4));
        assert_eq!(element_size(6), None);
        assert_eq!(image_hw(&[1, 3, 4, 8], TensorLayout::Nchw), Some((4, 8)));
        assert_eq!(image_hw(&[1, 4, 8, 3], TensorLayout::Nhwc), Some((4, 8)));
    }

    #[test]
    fn frame_with_row_stride() {
        let d = desc(ElemType::ImgNv12, vec![1, 3, 4, 4], 24);
        let mut buf = vec![0u8; 16 * 6 * 3 / 2];
        let mut t = tensor_for(&d, &mut buf);
        t.properties.validShape = c_shape(&[1, 3, 6, 10]);
        t.properties.alignedShape = c_shape(&[1, 3, 6, 16]);
        let f = frame_input(0, &d, &t).expect("frame");
        assert_eq!((f.width, f.height, f.stride), (10, 6, 16));
        assert_eq!(f.uv.ptr as usize - f.y.ptr as usize, 96);
        t.properties.validShape = c_shape(&[1, 3, 5, 10]);
        assert!(frame_input(0, &d, &t).is_err());
    }
}
