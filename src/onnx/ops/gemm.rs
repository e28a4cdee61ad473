//! Gemm family: `Gemm` and `MatMul`.

use super::NodeCx;
use crate::ir::Op;
use crate::onnx::import::Importer;
use crate::Result;

/// `Gemm`.
pub(super) fn gemm(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let a = &cx.a;
    let op = Op::Gemm {
        alpha: a.float_or("alpha", 1.0)?,
        beta: a.float_or("beta", 1.0)?,
        trans_a: a.bool_or("transA", false)?,
        trans_b: a.bool_or("transB", false)?,
        post: vec![],
    };
    imp.emit(cx, op, 2, 3)
}

/// `MatMul`.
pub(super) fn matmul(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    imp.emit(cx, Op::MatMul { post: vec![] }, 2, 2)
}
