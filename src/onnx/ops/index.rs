//! Index family: `Gather`, `GatherElements`, `GatherND`, `TopK`, `NonMaxSuppression`.

use super::NodeCx;
use crate::ir::Op;
use crate::onnx::import::Importer;
use crate::Result;

/// `Gather`.
pub(super) fn gather(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let axis = cx.a.int_or("axis", 0)?;
    imp.emit(cx, Op::Gather { axis }, 2, 2)
}

/// `GatherElements`.
pub(super) fn gather_elements(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let axis = cx.a.int_or("axis", 0)?;
    imp.emit(cx, Op::GatherElements { axis }, 2, 2)
}

/// `GatherND`.
pub(super) fn gather_nd(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let batch_dims = cx.a.int_or("batch_dims", 0)?;
    imp.emit(cx, Op::GatherND { batch_dims }, 2, 2)
}

/// `TopK` (values and indices).
pub(super) fn top_k(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let a = &cx.a;
    let op = Op::TopK {
        axis: a.int_or("axis", -1)?,
        largest: a.bool_or("largest", true)?,
        sorted: a.bool_or("sorted", true)?,
    };
    imp.emit_n(cx, op, 2, 2, 2)
}

/// `NonMaxSuppression`.
pub(super) fn non_max_suppression(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let center_point_box = cx.a.bool_or("center_point_box", false)?;
    imp.emit(cx, Op::NonMaxSuppression { center_point_box }, 2, 5)
}
