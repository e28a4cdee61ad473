//! Reduce family: `Reduce*` (axes as attribute or input), `ArgMax`/`ArgMin`, `CumSum`.

use super::NodeCx;
use crate::ir::{Op, ReduceOp};
use crate::onnx::import::Importer;
use crate::Result;

/// `ReduceMean`, `ReduceSum`, ... (`op` says which).
pub(super) fn reduce(imp: &mut Importer<'_>, cx: NodeCx<'_>, op: ReduceOp) -> Result<()> {
    let a = &cx.a;
    let op = Op::Reduce {
        op,
        axes: a.ints("axes")?,
        keepdims: a.bool_or("keepdims", true)?,
        noop_with_empty_axes: a.bool_or("noop_with_empty_axes", false)?,
    };
    imp.emit(cx, op, 1, 2)
}

/// `ArgMax` (`max`) or `ArgMin`.
pub(super) fn arg_extreme(imp: &mut Importer<'_>, cx: NodeCx<'_>, max: bool) -> Result<()> {
    let a = &cx.a;
    let axis = a.int_or("axis", 0)?;
    let keepdims = a.bool_or("keepdims", true)?;
    let select_last_index = a.bool_or("select_last_index", false)?;
    let op = if max {
        Op::ArgMax {
            axis,
            keepdims,
            select_last_index,
        }
    } else {
        Op::ArgMin {
            axis,
            keepdims,
            select_last_index,
        }
    };
    imp.emit(cx, op, 1, 1)
}

/// `CumSum`.
pub(super) fn cum_sum(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let op = Op::CumSum {
        exclusive: cx.a.bool_or("exclusive", false)?,
        reverse: cx.a.bool_or("reverse", false)?,
    };
    imp.emit(cx, op, 2, 2)
}
