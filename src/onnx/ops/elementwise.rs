//! Elementwise family: unary activations and math (`Unary`), broadcasting binary ops
//! (`Binary`, variadic Sum/Mean/Max/Min as chains of them), `Where`, `Clip` with input
//! bounds (`ClipDynamic`), `Cast`/`CastLike`, and `Dropout` (an identity at inference).

use super::NodeCx;
use crate::ir::{BinaryOp, DType, Op, Tensor, UnaryOp};
use crate::onnx::import::Importer;
use crate::onnx::proto;
use crate::{Error, Result};

/// A unary op without attributes.
pub(super) fn unary(imp: &mut Importer<'_>, cx: NodeCx<'_>, op: UnaryOp) -> Result<()> {
    imp.emit(cx, Op::Unary(op), 1, 1)
}

/// A binary op without attributes.
pub(super) fn binary(imp: &mut Importer<'_>, cx: NodeCx<'_>, op: BinaryOp) -> Result<()> {
    imp.emit(cx, Op::Binary(op), 2, 2)
}

/// `LeakyRelu`.
pub(super) fn leaky_relu(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let alpha = cx.a.float_or("alpha", 0.01)?;
    imp.emit(cx, Op::Unary(UnaryOp::LeakyRelu { alpha }), 1, 1)
}

/// `Elu`.
pub(super) fn elu(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let alpha = cx.a.float_or("alpha", 1.0)?;
    imp.emit(cx, Op::Unary(UnaryOp::Elu { alpha }), 1, 1)
}

/// `Selu`.
pub(super) fn selu(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let op = UnaryOp::Selu {
        alpha: cx.a.float_or("alpha", 1.673_263_2)?,
        gamma: cx.a.float_or("gamma", 1.050_701)?,
    };
    imp.emit(cx, Op::Unary(op), 1, 1)
}

/// `HardSigmoid`.
pub(super) fn hard_sigmoid(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let op = UnaryOp::HardSigmoid {
        alpha: cx.a.float_or("alpha", 0.2)?,
        beta: cx.a.float_or("beta", 0.5)?,
    };
    imp.emit(cx, Op::Unary(op), 1, 1)
}

/// `Gelu` (exact or tanh approximation).
pub(super) fn gelu(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let a = &cx.a;
    let tanh_approx = match a.string_or("approximate", "none")?.as_str() {
        "none" => false,
        "tanh" => true,
        other => return Err(a.err("approximate", format!("unknown value '{other}'"))),
    };
    imp.emit(cx, Op::Unary(UnaryOp::Gelu { tanh_approx }), 1, 1)
}

/// `Clip`: bounds as attributes (opset < 11) or as optional inputs.
pub(super) fn clip(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let a = &cx.a;
    if a.has("min") || a.has("max") {
        let min = a.float_or("min", f32::NEG_INFINITY)?;
        let max = a.float_or("max", f32::INFINITY)?;
        imp.emit(cx, Op::Unary(UnaryOp::Clip { min, max }), 1, 1)
    } else {
        imp.emit(cx, Op::ClipDynamic, 1, 3)
    }
}

/// `Dropout`: an identity at inference; training mode (random dropping) is refused.
pub(super) fn dropout(imp: &mut Importer<'_>, mut cx: NodeCx<'_>) -> Result<()> {
    cx.a.ignore(&["seed", "ratio"]);
    imp.check(&cx, 1, 3)?;
    let training = cx.input(2).map(|v| {
        imp.graph().values[v]
            .konst
            .as_ref()
            .map(|k| k.to_f32_vec().first().copied().unwrap_or(0.0) != 0.0)
    });
    if matches!(training, Some(Some(true)) | Some(None)) {
        return Err(Error::BadAttribute {
            node: cx.name.to_string(),
            op: cx.op_type().to_string(),
            attr: "training_mode".into(),
            reason: "training mode (random dropping) is not supported; vnpu runs inference".into(),
        });
    }
    // The ratio / training_mode inputs mean nothing at inference.
    cx.ins.truncate(1);
    imp.add(cx, Op::Unary(UnaryOp::Identity), 1)
}

/// `Mod` (integer or `fmod` semantics).
pub(super) fn modulo(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let fmod = cx.a.bool_or("fmod", false)?;
    imp.emit(cx, Op::Binary(BinaryOp::Mod { fmod }), 2, 2)
}

/// `Where`.
pub(super) fn where_(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    imp.emit(cx, Op::Where, 3, 3)
}

/// `Cast`. The IR computes floats in f32: casts to other float widths keep the value
/// in f32 (more precise than the model asked for).
pub(super) fn cast(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let a = &cx.a;
    let code = a.int_req("to")?;
    let code = i32::try_from(code).unwrap_or(0);
    let to = match code {
        proto::data_type::FLOAT16 | proto::data_type::BFLOAT16 | proto::data_type::DOUBLE => {
            Some(DType::F32)
        }
        c => DType::from_onnx_code(c),
    };
    let to = to.ok_or_else(|| {
        a.err(
            "to",
            format!("cast to {} is not supported", proto::data_type::name(code)),
        )
    })?;
    // saturate only concerns float8 targets, which are rejected above.
    a.ignore(&["saturate"]);
    imp.emit(cx, Op::Cast { to }, 1, 1)
}

/// `CastLike`: the target type must be known at import (input, constant or inferred).
pub(super) fn cast_like(imp: &mut Importer<'_>, mut cx: NodeCx<'_>) -> Result<()> {
    let to = cx
        .input(1)
        .map(|t| &imp.graph().values[t])
        .filter(|v| v.shape.is_some())
        .map(|v| v.dtype)
        .ok_or_else(|| Error::UnsupportedOp {
            node: cx.name.into(),
            op: cx.op_type().into(),
            detail: "the type of target_type is not known at import".into(),
        })?;
    cx.a.ignore(&["saturate"]);
    imp.check(&cx, 2, 2)?;
    // The second input only carried its type.
    cx.ins.truncate(1);
    imp.add(cx, Op::Cast { to }, 1)
}

/// Variadic `Sum`/`Mean`/`Max`/`Min` as a left-to-right chain of binary `bin` nodes
/// (`Mean`: a `Sum` chain divided by the count).
pub(super) fn variadic(
    imp: &mut Importer<'_>,
    cx: NodeCx<'_>,
    bin: BinaryOp,
    is_mean: bool,
) -> Result<()> {
    imp.check(&cx, 1, usize::MAX)?;
    let name = cx.name;
    if cx.ins.iter().any(Option::is_none) {
        return Err(imp.fmt(format!(
            "node '{name}' ({}) has an empty input",
            cx.op_type()
        )));
    }
    let outs = imp.outputs(cx.n, name, 1)?;
    let out = outs[0];
    let dt = imp.graph().values[out].dtype;
    let ins = cx.ins;
    if ins.len() == 1 {
        imp.push(name.into(), Op::Unary(UnaryOp::Identity), ins, outs, name);
        return Ok(());
    }
    let steps = ins.len() - 1;
    let mut acc = ins[0];
    for (k, rhs) in ins.iter().enumerate().skip(1) {
        let last = k == steps && !is_mean;
        let dst = if last {
            out
        } else {
            imp.temp(name, &format!("acc{k}"), dt)
        };
        let node_name = if last {
            name.to_string()
        } else {
            format!("{name}/{k}")
        };
        imp.push(node_name, Op::Binary(bin), vec![acc, *rhs], vec![dst], name);
        acc = Some(dst);
    }
    if is_mean {
        let count = ins.len() as f32;
        let cid = imp.add_const(
            &format!("{name}/count"),
            Tensor::from_f32(vec![], vec![count]),
        );
        imp.push(
            name.into(),
            Op::Binary(BinaryOp::Div),
            vec![acc, Some(cid)],
            vec![out],
            name,
        );
    }
    Ok(())
}
