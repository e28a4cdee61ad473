//! Resize family: `Resize` (every opset form, `axes` expanded to all axes) and the
//! deprecated `Upsample`, imported as a Resize.

use super::NodeCx;
use crate::ir::shape::norm_axis;
use crate::ir::{CoordMode, NearestMode, Op, ResizeMode, Tensor, ValueId};
use crate::onnx::attrs::Attrs;
use crate::onnx::import::Importer;
use crate::Result;

/// `Resize`. Opset 11-12 files pass unused roi/scales as empty tensors: those become
/// omitted inputs.
pub(super) fn resize(imp: &mut Importer<'_>, mut cx: NodeCx<'_>) -> Result<()> {
    let op = resize_op(&cx.a)?;
    let axes = cx.a.ints("axes")?;
    imp.check(&cx, 1, 4)?;
    for slot in cx.ins.iter_mut().skip(1) {
        if slot.is_some_and(|v| {
            imp.graph().values[v]
                .konst
                .as_ref()
                .is_some_and(|k| k.numel() == 0)
        }) {
            *slot = None;
        }
    }
    if let Some(axes) = axes {
        expand_resize_axes(imp, &cx.a, &mut cx.ins, &axes)?;
    }
    imp.add(cx, op, 1)
}

/// The Resize op from the node's attributes.
fn resize_op(a: &Attrs<'_>) -> Result<Op> {
    let mode = match a.string_or("mode", "nearest")?.as_str() {
        "nearest" => ResizeMode::Nearest,
        "linear" => ResizeMode::Linear,
        "cubic" => ResizeMode::Cubic,
        other => return Err(a.err("mode", format!("unknown mode '{other}'"))),
    };
    let coord = match a
        .string_or("coordinate_transformation_mode", "half_pixel")?
        .as_str()
    {
        "half_pixel" => CoordMode::HalfPixel,
        "pytorch_half_pixel" => CoordMode::PytorchHalfPixel,
        "align_corners" => CoordMode::AlignCorners,
        "asymmetric" => CoordMode::Asymmetric,
        "tf_crop_and_resize" => CoordMode::TfCropAndResize,
        "half_pixel_symmetric" => CoordMode::HalfPixelSymmetric,
        other => {
            return Err(a.err(
                "coordinate_transformation_mode",
                format!("'{other}' is not supported"),
            ))
        }
    };
    let nearest = match a.string_or("nearest_mode", "round_prefer_floor")?.as_str() {
        "round_prefer_floor" => NearestMode::RoundPreferFloor,
        "round_prefer_ceil" => NearestMode::RoundPreferCeil,
        "floor" => NearestMode::Floor,
        "ceil" => NearestMode::Ceil,
        other => return Err(a.err("nearest_mode", format!("unknown value '{other}'"))),
    };
    if a.bool_or("antialias", false)? {
        return Err(a.err("antialias", "antialiased resize is not supported"));
    }
    let policy = a.string_or("keep_aspect_ratio_policy", "stretch")?;
    if policy != "stretch" {
        return Err(a.err(
            "keep_aspect_ratio_policy",
            format!("'{policy}' is not supported"),
        ));
    }
    Ok(Op::Resize {
        mode,
        coord,
        nearest,
        cubic_coeff_a: a.float_or("cubic_coeff_a", -0.75)?,
        exclude_outside: a.bool_or("exclude_outside", false)?,
        extrapolation_value: a.float_or("extrapolation_value", 0.0)?,
    })
}

/// Resize with an `axes` attribute (opset 18+): rewrites its constant roi / scales /
/// sizes to cover every axis (identity on the axes not listed), so the IR op always
/// works on all axes. Needs the input shape and those arguments to be known here.
fn expand_resize_axes(
    imp: &mut Importer<'_>,
    a: &Attrs<'_>,
    ins: &mut [Option<ValueId>],
    axes: &[i64],
) -> Result<()> {
    let x = ins.first().copied().flatten();
    let Some(shape) = x.and_then(|x| imp.graph().values[x].shape.clone()) else {
        return Err(a.err("axes", "needs the input shape to be known at import"));
    };
    let rank = shape.len();
    let mut pos = vec![None; rank];
    for (k, &ax) in axes.iter().enumerate() {
        match norm_axis(ax, rank) {
            Some(i) if pos[i].is_none() => pos[i] = Some(k),
            _ => {
                return Err(a.err(
                    "axes",
                    format!("{axes:?} is not a set of axes of rank {rank}"),
                ))
            }
        }
    }
    for slot in 1..ins.len().min(4) {
        let Some(v) = ins[slot] else { continue };
        let Some(t) = imp.graph().values[v].konst.clone() else {
            return Err(a.err("axes", "roi, scales and sizes must be constants"));
        };
        let k = axes.len();
        let full = match slot {
            // roi: starts of the listed axes then their ends.
            1 => {
                let r = t.to_f32_vec();
                if r.len() != 2 * k {
                    return Err(a.err("axes", format!("roi has {} values for {k} axes", r.len())));
                }
                let mut v: Vec<f32> = pos.iter().map(|p| p.map_or(0.0, |j| r[j])).collect();
                v.extend(pos.iter().map(|p| p.map_or(1.0, |j| r[k + j])));
                Tensor::from_f32(vec![2 * rank], v)
            }
            2 => {
                let sc = t.to_f32_vec();
                if sc.len() != k {
                    return Err(a.err("axes", format!("{} scales for {k} axes", sc.len())));
                }
                let v = pos.iter().map(|p| p.map_or(1.0, |j| sc[j])).collect();
                Tensor::from_f32(vec![rank], v)
            }
            _ => {
                let sz = t
                    .to_i64_vec()
                    .ok_or_else(|| a.err("axes", "sizes must be integers"))?;
                if sz.len() != k {
                    return Err(a.err("axes", format!("{} sizes for {k} axes", sz.len())));
                }
                let v = pos
                    .iter()
                    .zip(&shape)
                    .map(|(p, &d)| p.map_or(d as i64, |j| sz[j]))
                    .collect();
                Tensor::from_i64(vec![rank], v)
            }
        };
        let base = format!("{}/all_axes", imp.graph().values[v].name);
        ins[slot] = Some(imp.add_const(&base, full));
    }
    Ok(())
}

/// Upsample (deprecated since opset 10, still emitted by older exporters): a Resize
/// with `asymmetric` coordinates (and `floor` rounding for nearest).
pub(super) fn upsample(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let a = &cx.a;
    let mode = match a.string_or("mode", "nearest")?.as_str() {
        "nearest" => ResizeMode::Nearest,
        "linear" | "bilinear" => ResizeMode::Linear,
        other => return Err(a.err("mode", format!("unknown mode '{other}'"))),
    };
    imp.check(&cx, 2, 2)?;
    let op = Op::Resize {
        mode,
        coord: CoordMode::Asymmetric,
        nearest: NearestMode::Floor,
        cubic_coeff_a: -0.75,
        exclude_outside: false,
        extrapolation_value: 0.0,
    };
    let ins = vec![cx.ins[0], None, cx.ins[1], None];
    let outs = imp.outputs(cx.n, cx.name, 1)?;
    imp.push(cx.name.into(), op, ins, outs, cx.name);
    Ok(())
}
