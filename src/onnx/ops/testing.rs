//! Testing family (cargo feature `test-ops` only): `Spin` and `Fail` of the
//! `ai.vnpu.test` domain, used by the scheduling tests and benches.

use super::NodeCx;
use crate::ir::Op;
use crate::onnx::import::Importer;
use crate::Result;

/// `Spin { micros }`: copies its input after busy-waiting.
pub(super) fn spin(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let a = &cx.a;
    let m = a.int_req("micros")?;
    let micros = u64::try_from(m).map_err(|_| a.err("micros", format!("must be >= 0, got {m}")))?;
    imp.emit(cx, Op::Spin { micros }, 1, 1)
}

/// `Fail { panic }`: fails (or panics) when run.
pub(super) fn fail(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let panic = cx.a.bool_or("panic", false)?;
    imp.emit(cx, Op::Fail { panic }, 1, 1)
}
