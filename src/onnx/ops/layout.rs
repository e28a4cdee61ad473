//! Layout family: ops that move or reshape data without computing on it — `Concat`,
//! `Split`, `Slice`, `Reshape`, `Flatten`, `Squeeze`, `Unsqueeze`, `Transpose`, `Pad`,
//! `Expand`, `Tile`, `DepthToSpace`, `SpaceToDepth`.

use super::NodeCx;
use crate::ir::{Op, PadMode};
use crate::onnx::import::Importer;
use crate::Result;

/// `Concat`.
pub(super) fn concat(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let axis = cx.a.int_req("axis")?;
    imp.emit(cx, Op::Concat { axis }, 1, usize::MAX)
}

/// `Split`: sizes as attribute (opset < 13) or input, or equal parts; one IR output per
/// node output.
pub(super) fn split(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let a = &cx.a;
    let nout = cx.n.output.len().max(1);
    if let Some(k) = a.int("num_outputs")? {
        if usize::try_from(k).ok() != Some(nout) {
            return Err(a.err(
                "num_outputs",
                format!("is {k} but the node has {nout} outputs"),
            ));
        }
    }
    let split = a.ints("split")?;
    if let Some(s) = &split {
        if s.len() != nout || s.iter().any(|&x| x < 0) {
            return Err(a.err(
                "split",
                format!("{s:?} does not give {nout} non-negative sizes"),
            ));
        }
    }
    let op = Op::Split {
        axis: a.int_or("axis", 0)?,
        split,
        num_outputs: nout,
    };
    imp.emit_n(cx, op, 1, 2, nout)
}

/// `Slice` (opset 10+ form: starts/ends/axes/steps as inputs).
pub(super) fn slice(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    imp.emit(cx, Op::Slice, 3, 5)
}

/// `Reshape`.
pub(super) fn reshape(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let allowzero = cx.a.bool_or("allowzero", false)?;
    imp.emit(cx, Op::Reshape { allowzero }, 2, 2)
}

/// `Flatten`.
pub(super) fn flatten(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let axis = cx.a.int_or("axis", 1)?;
    imp.emit(cx, Op::Flatten { axis }, 1, 1)
}

/// `Squeeze` (axes as attribute or input).
pub(super) fn squeeze(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let axes = cx.a.ints("axes")?;
    imp.emit(cx, Op::Squeeze { axes }, 1, 2)
}

/// `Unsqueeze` (axes as attribute or input; one of them is required).
pub(super) fn unsqueeze(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let axes = cx.a.ints("axes")?;
    if axes.is_none() && cx.input(1).is_none() {
        return Err(cx
            .a
            .err("axes", "Unsqueeze needs axes (attribute or input)"));
    }
    imp.emit(cx, Op::Unsqueeze { axes }, 1, 2)
}

/// `Transpose` (`perm` must be a permutation; absent reverses the axes).
pub(super) fn transpose(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let a = &cx.a;
    let perm = match a.ints("perm")? {
        None => None,
        Some(p) => {
            let mut seen = vec![false; p.len()];
            let mut out = Vec::with_capacity(p.len());
            for &x in &p {
                match usize::try_from(x).ok().filter(|&x| x < p.len()) {
                    Some(x) if !seen[x] => {
                        seen[x] = true;
                        out.push(x);
                    }
                    _ => return Err(a.err("perm", format!("{p:?} is not a permutation"))),
                }
            }
            Some(out)
        }
    };
    imp.emit(cx, Op::Transpose { perm }, 1, 1)
}

/// `Pad` (opset 11+ form: pads, constant value and axes as inputs).
pub(super) fn pad(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let a = &cx.a;
    let mode = match a.string_or("mode", "constant")?.as_str() {
        "constant" => PadMode::Constant,
        "reflect" => PadMode::Reflect,
        "edge" => PadMode::Edge,
        "wrap" => PadMode::Wrap,
        other => return Err(a.err("mode", format!("unknown pad mode '{other}'"))),
    };
    imp.emit(cx, Op::Pad { mode }, 2, 4)
}

/// `Expand`.
pub(super) fn expand(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    imp.emit(cx, Op::Expand, 2, 2)
}

/// `Tile`.
pub(super) fn tile(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    imp.emit(cx, Op::Tile, 2, 2)
}

/// `DepthToSpace` (DCR or CRD order).
pub(super) fn depth_to_space(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let a = &cx.a;
    let blocksize = a.positive("blocksize", a.int_req("blocksize")?)?;
    let crd_mode = match a.string_or("mode", "DCR")?.as_str() {
        "DCR" => false,
        "CRD" => true,
        other => return Err(a.err("mode", format!("unknown mode '{other}'"))),
    };
    let op = Op::DepthToSpace {
        blocksize,
        crd_mode,
    };
    imp.emit(cx, op, 1, 1)
}

/// `SpaceToDepth`.
pub(super) fn space_to_depth(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let a = &cx.a;
    let blocksize = a.positive("blocksize", a.int_req("blocksize")?)?;
    imp.emit(cx, Op::SpaceToDepth { blocksize }, 1, 1)
}
