//! Records of the elementwise family: Unary(*), Binary(*), Where, ClipDynamic, Cast.
//! Unary records are also the steps of fused epilogues.

use super::{AttrsIn, AttrsOut};
use crate::ir::{BinaryOp, Op, UnaryOp};

pub(super) fn encode(op: &Op, a: &mut AttrsOut) -> Option<&'static str> {
    Some(match op {
        Op::Unary(u) => encode_unary(u, a),
        Op::Binary(b) => match b {
            BinaryOp::Add => "Add",
            BinaryOp::Sub => "Sub",
            BinaryOp::Mul => "Mul",
            BinaryOp::Div => "Div",
            BinaryOp::Pow => "Pow",
            BinaryOp::Max => "Max",
            BinaryOp::Min => "Min",
            BinaryOp::Mod { fmod } => {
                a.bool("fmod", *fmod);
                "Mod"
            }
            BinaryOp::Equal => "Equal",
            BinaryOp::Less => "Less",
            BinaryOp::LessOrEqual => "LessOrEqual",
            BinaryOp::Greater => "Greater",
            BinaryOp::GreaterOrEqual => "GreaterOrEqual",
            BinaryOp::And => "And",
            BinaryOp::Or => "Or",
            BinaryOp::Xor => "Xor",
            BinaryOp::PRelu => "PRelu",
        },
        Op::Where => "Where",
        Op::ClipDynamic => "ClipDynamic",
        Op::Cast { to } => {
            a.int("to", i64::from(to.onnx_code()));
            "Cast"
        }
        _ => return None,
    })
}

pub(super) fn decode(name: &str, a: &AttrsIn) -> Option<Result<Op, String>> {
    if let Some(u) = decode_unary(name, a) {
        return Some(u.map(Op::Unary));
    }
    let b = match name {
        "Add" => BinaryOp::Add,
        "Sub" => BinaryOp::Sub,
        "Mul" => BinaryOp::Mul,
        "Div" => BinaryOp::Div,
        "Pow" => BinaryOp::Pow,
        "Max" => BinaryOp::Max,
        "Min" => BinaryOp::Min,
        "Mod" => match a.bool("fmod") {
            Ok(fmod) => BinaryOp::Mod { fmod },
            Err(e) => return Some(Err(e)),
        },
        "Equal" => BinaryOp::Equal,
        "Less" => BinaryOp::Less,
        "LessOrEqual" => BinaryOp::LessOrEqual,
        "Greater" => BinaryOp::Greater,
        "GreaterOrEqual" => BinaryOp::GreaterOrEqual,
        "And" => BinaryOp::And,
        "Or" => BinaryOp::Or,
        "Xor" => BinaryOp::Xor,
        "PRelu" => BinaryOp::PRelu,
        "Where" => return Some(Ok(Op::Where)),
        "ClipDynamic" => return Some(Ok(Op::ClipDynamic)),
        "Cast" => return Some(a.dtype("to").map(|to| Op::Cast { to })),
        _ => return None,
    };
    Some(Ok(Op::Binary(b)))
}

/// The record name and attributes of a unary function.
pub(super) fn encode_unary(u: &UnaryOp, a: &mut AttrsOut) -> &'static str {
    match u {
        UnaryOp::Relu => "Relu",
        UnaryOp::LeakyRelu { alpha } => {
            a.float("alpha", *alpha);
            "LeakyRelu"
        }
        UnaryOp::Clip { min, max } => {
            a.float("min", *min);
            a.float("max", *max);
            "Clip"
        }
        UnaryOp::Sigmoid => "Sigmoid",
        UnaryOp::HardSigmoid { alpha, beta } => {
            a.float("alpha", *alpha);
            a.float("beta", *beta);
            "HardSigmoid"
        }
        UnaryOp::HardSwish => "HardSwish",
        UnaryOp::Elu { alpha } => {
            a.float("alpha", *alpha);
            "Elu"
        }
        UnaryOp::Selu { alpha, gamma } => {
            a.float("alpha", *alpha);
            a.float("gamma", *gamma);
            "Selu"
        }
        UnaryOp::Tanh => "Tanh",
        UnaryOp::Gelu { tanh_approx } => {
            a.bool("tanh_approx", *tanh_approx);
            "Gelu"
        }
        UnaryOp::Erf => "Erf",
        UnaryOp::Softplus => "Softplus",
        UnaryOp::Exp => "Exp",
        UnaryOp::Log => "Log",
        UnaryOp::Abs => "Abs",
        UnaryOp::Neg => "Neg",
        UnaryOp::Sqrt => "Sqrt",
        UnaryOp::Reciprocal => "Reciprocal",
        UnaryOp::Floor => "Floor",
        UnaryOp::Ceil => "Ceil",
        UnaryOp::Round => "Round",
        UnaryOp::Sign => "Sign",
        UnaryOp::Not => "Not",
        UnaryOp::Sin => "Sin",
        UnaryOp::Cos => "Cos",
        UnaryOp::Identity => "Identity",
        UnaryOp::Silu => "Silu",
    }
}

/// The unary function of a record name, `None` when the name is not a unary one.
pub(super) fn decode_unary(name: &str, a: &AttrsIn) -> Option<Result<UnaryOp, String>> {
    let f = || -> Result<UnaryOp, String> {
        Ok(match name {
            "LeakyRelu" => UnaryOp::LeakyRelu {
                alpha: a.float("alpha")?,
            },
            "Clip" => UnaryOp::Clip {
                min: a.float("min")?,
                max: a.float("max")?,
            },
            "HardSigmoid" => UnaryOp::HardSigmoid {
                alpha: a.float("alpha")?,
                beta: a.float("beta")?,
            },
            "Elu" => UnaryOp::Elu {
                alpha: a.float("alpha")?,
            },
            "Selu" => UnaryOp::Selu {
                alpha: a.float("alpha")?,
                gamma: a.float("gamma")?,
            },
            "Gelu" => UnaryOp::Gelu {
                tanh_approx: a.bool("tanh_approx")?,
            },
            _ => return Err(String::new()),
        })
    };
    Some(Ok(match name {
        "Relu" => UnaryOp::Relu,
        "Sigmoid" => UnaryOp::Sigmoid,
        "HardSwish" => UnaryOp::HardSwish,
        "Tanh" => UnaryOp::Tanh,
        "Erf" => UnaryOp::Erf,
        "Softplus" => UnaryOp::Softplus,
        "Exp" => UnaryOp::Exp,
        "Log" => UnaryOp::Log,
        "Abs" => UnaryOp::Abs,
        "Neg" => UnaryOp::Neg,
        "Sqrt" => UnaryOp::Sqrt,
        "Reciprocal" => UnaryOp::Reciprocal,
        "Floor" => UnaryOp::Floor,
        "Ceil" => UnaryOp::Ceil,
        "Round" => UnaryOp::Round,
        "Sign" => UnaryOp::Sign,
        "Not" => UnaryOp::Not,
        "Sin" => UnaryOp::Sin,
        "Cos" => UnaryOp::Cos,
        "Identity" => UnaryOp::Identity,
        "Silu" => UnaryOp::Silu,
        "LeakyRelu" | "Clip" | "HardSigmoid" | "Elu" | "Selu" | "Gelu" => return Some(f()),
        _ => return None,
    }))
}
