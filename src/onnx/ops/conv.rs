//! Conv family: `Conv` and `ConvTranspose`, and the kernel/stride/dilation/pad
//! geometry they share with the pooling ops ([`conv_geom`]).

use super::NodeCx;
use crate::ir::{ConvGeom, Op, ValueId};
use crate::onnx::attrs::Attrs;
use crate::onnx::import::Importer;
use crate::Result;

/// `Conv`.
pub(super) fn conv(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let a = &cx.a;
    let geom = conv_geom(imp, a, cx.input(1))?;
    let op = Op::Conv {
        geom,
        group: a.positive("group", a.int_or("group", 1)?)?,
        post: vec![],
    };
    imp.emit(cx, op, 2, 3)
}

/// `ConvTranspose`.
pub(super) fn conv_transpose(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let a = &cx.a;
    let geom = conv_geom(imp, a, cx.input(1))?;
    let ns = geom.kernel.len();
    let output_padding = match a.ints("output_padding")? {
        None => vec![0; ns],
        Some(v) => {
            if v.len() != ns {
                return Err(a.err(
                    "output_padding",
                    format!("needs {ns} values, has {}", v.len()),
                ));
            }
            let mut out = Vec::with_capacity(ns);
            for (i, &p) in v.iter().enumerate() {
                let limit = geom.strides[i].max(geom.dilations[i]);
                match usize::try_from(p) {
                    Ok(p) if p < limit => out.push(p),
                    _ => {
                        return Err(a.err(
                            "output_padding",
                            format!("value {p} must be in 0..{limit} (max of stride and dilation)"),
                        ))
                    }
                }
            }
            out
        }
    };
    let output_shape = match a.ints("output_shape")? {
        None => vec![],
        Some(v) => {
            let spatial = if v.len() == ns + 2 { &v[2..] } else { &v[..] };
            if spatial.len() != ns {
                return Err(a.err(
                    "output_shape",
                    format!("needs {ns} spatial values, has {}", v.len()),
                ));
            }
            spatial
                .iter()
                .map(|&d| {
                    usize::try_from(d)
                        .ok()
                        .filter(|&d| d > 0)
                        .ok_or_else(|| a.err("output_shape", format!("value {d} must be positive")))
                })
                .collect::<Result<_>>()?
        }
    };
    let op = Op::ConvTranspose {
        geom,
        group: a.positive("group", a.int_or("group", 1)?)?,
        output_padding,
        output_shape,
        post: vec![],
    };
    imp.emit(cx, op, 2, 3)
}

/// Kernel, strides, dilations and pads of Conv/ConvTranspose/pooling. Without a
/// `kernel_shape` attribute the kernel is the spatial dims of `weight`, when known.
pub(super) fn conv_geom(
    imp: &Importer<'_>,
    a: &Attrs<'_>,
    weight: Option<ValueId>,
) -> Result<ConvGeom> {
    let kernel: Vec<usize> = match a.ints("kernel_shape")? {
        Some(k) => k
            .iter()
            .map(|&d| a.positive("kernel_shape", d))
            .collect::<Result<_>>()?,
        // Absent: the spatial dims of the weights, when their shape is known
        // (an initializer or a graph input).
        None => match weight.and_then(|w| imp.graph().values[w].shape.as_ref()) {
            Some(s) if s.len() >= 3 => s[2..].to_vec(),
            _ => {
                return Err(a.err(
                    "kernel_shape",
                    "missing, and the weights have no known shape to take it from",
                ))
            }
        },
    };
    let ns = kernel.len();
    if ns == 0 {
        return Err(a.err("kernel_shape", "must have at least one spatial dimension"));
    }
    let per_dim = |attr: &str| -> Result<Vec<usize>> {
        match a.ints(attr)? {
            None => Ok(vec![1; ns]),
            Some(v) if v.len() == ns => v.iter().map(|&x| a.positive(attr, x)).collect(),
            Some(v) => Err(a.err(attr, format!("needs {ns} values, has {}", v.len()))),
        }
    };
    let strides = per_dim("strides")?;
    let dilations = per_dim("dilations")?;
    let explicit = match a.ints("pads")? {
        None => vec![0; 2 * ns],
        Some(v) if v.len() == 2 * ns => v
            .iter()
            .map(|&p| usize::try_from(p).map_err(|_| a.err("pads", format!("negative pad {p}"))))
            .collect::<Result<_>>()?,
        Some(v) => return Err(a.err("pads", format!("needs {} values, has {}", 2 * ns, v.len()))),
    };
    let (pads, auto_pad) = match a.string_or("auto_pad", "NOTSET")?.as_str() {
        "NOTSET" => (explicit, None),
        "VALID" => (vec![0; 2 * ns], None),
        s @ ("SAME_UPPER" | "SAME_LOWER") => (vec![0; 2 * ns], Some(s.to_string())),
        other => return Err(a.err("auto_pad", format!("unknown value '{other}'"))),
    };
    Ok(ConvGeom {
        kernel,
        strides,
        dilations,
        pads,
        auto_pad,
    })
}
