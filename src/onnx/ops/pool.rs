//! Pool family: `MaxPool`, `AveragePool`, `GlobalAveragePool`, `GlobalMaxPool`.

use super::conv::conv_geom;
use super::NodeCx;
use crate::ir::Op;
use crate::onnx::import::Importer;
use crate::Result;

/// `MaxPool` (its optional indices output must be unused).
pub(super) fn max_pool(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let a = &cx.a;
    let geom = conv_geom(imp, a, None)?;
    if a.int_or("storage_order", 0)? != 0 && cx.n.output.get(1).is_some_and(|o| !o.is_empty()) {
        return Err(a.err("storage_order", "only row-major (0) indices are supported"));
    }
    let op = Op::MaxPool {
        geom,
        ceil_mode: a.bool_or("ceil_mode", false)?,
    };
    imp.emit(cx, op, 1, 1)
}

/// `AveragePool`.
pub(super) fn average_pool(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let a = &cx.a;
    let geom = conv_geom(imp, a, None)?;
    let op = Op::AveragePool {
        geom,
        ceil_mode: a.bool_or("ceil_mode", false)?,
        count_include_pad: a.bool_or("count_include_pad", false)?,
    };
    imp.emit(cx, op, 1, 1)
}

/// `GlobalAveragePool`.
pub(super) fn global_average_pool(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    imp.emit(cx, Op::GlobalAveragePool, 1, 1)
}

/// `GlobalMaxPool`.
pub(super) fn global_max_pool(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    imp.emit(cx, Op::GlobalMaxPool, 1, 1)
}
