//! Generate family: `Shape`, `ConstantOfShape`, `Range`.

use super::NodeCx;
use crate::ir::{Op, Tensor};
use crate::onnx::import::Importer;
use crate::Result;

/// `Shape` (with the opset 15 `start`/`end` slice).
pub(super) fn shape(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let op = Op::Shape {
        start: cx.a.int_or("start", 0)?,
        end: cx.a.int("end")?,
    };
    imp.emit(cx, op, 1, 1)
}

/// `ConstantOfShape`: the fill value is a one-element tensor (default f32 zero).
pub(super) fn constant_of_shape(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let a = &cx.a;
    let value = match a.tensor("value")? {
        None => Tensor::from_f32(vec![1], vec![0.0]),
        Some(t) => {
            let v = imp.decode_tensor(t)?;
            if v.numel() != 1 {
                return Err(a.err(
                    "value",
                    format!("must hold one element, holds {}", v.numel()),
                ));
            }
            v
        }
    };
    imp.emit(cx, Op::ConstantOfShape { value }, 1, 1)
}

/// `Range`.
pub(super) fn range(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    imp.emit(cx, Op::Range, 3, 3)
}
