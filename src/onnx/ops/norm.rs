//! Norm family: `BatchNormalization`, `InstanceNormalization`, `LayerNormalization`,
//! `Softmax` and `LogSoftmax` (the opset < 13 forms expand to Flatten → Softmax →
//! Reshape).

use super::NodeCx;
use crate::ir::shape::norm_axis;
use crate::ir::{DType, Op, Tensor};
use crate::onnx::import::Importer;
use crate::Result;

/// `BatchNormalization` in inference mode (its running-statistics outputs must be
/// unused).
pub(super) fn batch_norm(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let a = &cx.a;
    if a.bool_or("training_mode", false)? {
        return Err(a.err(
            "training_mode",
            "training mode is not supported (inference only)",
        ));
    }
    if a.int_or("spatial", 1)? != 1 {
        return Err(a.err("spatial", "only spatial=1 is supported"));
    }
    a.ignore(&["momentum"]);
    let epsilon = a.float_or("epsilon", 1e-5)?;
    imp.emit(cx, Op::BatchNorm { epsilon }, 5, 5)
}

/// `InstanceNormalization`.
pub(super) fn instance_norm(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let epsilon = cx.a.float_or("epsilon", 1e-5)?;
    imp.emit(cx, Op::InstanceNorm { epsilon }, 3, 3)
}

/// `LayerNormalization` (its statistics outputs must be unused).
pub(super) fn layer_norm(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let a = &cx.a;
    // stash_type only sets the precision of the statistics; we compute in f32.
    a.ignore(&["stash_type"]);
    let op = Op::LayerNorm {
        axis: a.int_or("axis", -1)?,
        epsilon: a.float_or("epsilon", 1e-5)?,
    };
    imp.emit(cx, op, 2, 3)
}

/// `Softmax` / `LogSoftmax`. From opset 13 the op works on one axis; before, it
/// coerces the input to 2-D at `axis` (default 1), which we express as
/// Flatten → Softmax(axis 1) → Reshape back to the input's shape.
pub(super) fn softmax(imp: &mut Importer<'_>, cx: NodeCx<'_>, log: bool) -> Result<()> {
    let make = |axis| {
        if log {
            Op::LogSoftmax { axis }
        } else {
            Op::Softmax { axis }
        }
    };
    let legacy = imp.opset() < 13;
    let axis = cx.a.int_or("axis", if legacy { 1 } else { -1 })?;
    imp.check(&cx, 1, 1)?;
    let name = cx.name;
    let x = cx
        .input(0)
        .ok_or_else(|| imp.fmt(format!("node '{name}' has an empty input")))?;
    let rank = imp.graph().values[x].shape.as_ref().map(Vec::len);
    let last_axis =
        axis == -1 || rank.is_some_and(|r| norm_axis(axis, r).is_some_and(|i| i + 1 == r));
    let outs = imp.outputs(cx.n, name, 1)?;
    if !legacy || last_axis {
        imp.push(name.into(), make(axis), cx.ins, outs, name);
        return Ok(());
    }
    let dt = imp.graph().values[outs[0]].dtype;
    // The original shape: a constant when already known, else computed.
    let shape = match imp.graph().values[x].shape.clone() {
        Some(s) => {
            let dims = s.iter().map(|&d| d as i64).collect();
            imp.add_const(
                &format!("{name}/shape"),
                Tensor::from_i64(vec![s.len()], dims),
            )
        }
        None => {
            let id = imp.temp(name, "shape", DType::I64);
            let op = Op::Shape {
                start: 0,
                end: None,
            };
            imp.push(format!("{name}/shape"), op, vec![Some(x)], vec![id], name);
            id
        }
    };
    let flat = imp.temp(name, "flat", dt);
    let soft = imp.temp(name, "soft2d", dt);
    imp.push(
        format!("{name}/flatten"),
        Op::Flatten { axis },
        vec![Some(x)],
        vec![flat],
        name,
    );
    imp.push(name.into(), make(1), vec![Some(flat)], vec![soft], name);
    imp.push(
        format!("{name}/reshape"),
        Op::Reshape { allowzero: false },
        vec![Some(soft), Some(shape)],
        outs,
        name,
    );
    Ok(())
}
