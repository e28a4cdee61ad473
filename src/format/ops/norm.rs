//! Records of the norm family: BatchNorm, InstanceNorm, LayerNorm, Softmax, LogSoftmax.

use super::{AttrsIn, AttrsOut};
use crate::ir::Op;

pub(super) fn encode(op: &Op, a: &mut AttrsOut) -> Option<&'static str> {
    Some(match op {
        Op::BatchNorm { epsilon } => {
            a.float("epsilon", *epsilon);
            "BatchNormalization"
        }
        Op::InstanceNorm { epsilon } => {
            a.float("epsilon", *epsilon);
            "InstanceNormalization"
        }
        Op::LayerNorm { axis, epsilon } => {
            a.int("axis", *axis);
            a.float("epsilon", *epsilon);
            "LayerNormalization"
        }
        Op::Softmax { axis } => {
            a.int("axis", *axis);
            "Softmax"
        }
        Op::LogSoftmax { axis } => {
            a.int("axis", *axis);
            "LogSoftmax"
        }
        Op::MaskedSoftmax => "MaskedSoftmax",
        _ => return None,
    })
}

pub(super) fn decode(name: &str, a: &AttrsIn) -> Option<Result<Op, String>> {
    let f = || -> Result<Op, String> {
        Ok(match name {
            "BatchNormalization" => Op::BatchNorm {
                epsilon: a.float("epsilon")?,
            },
            "InstanceNormalization" => Op::InstanceNorm {
                epsilon: a.float("epsilon")?,
            },
            "LayerNormalization" => Op::LayerNorm {
                axis: a.int("axis")?,
                epsilon: a.float("epsilon")?,
            },
            "Softmax" => Op::Softmax {
                axis: a.int("axis")?,
            },
            "MaskedSoftmax" => Op::MaskedSoftmax,
            _ => Op::LogSoftmax {
                axis: a.int("axis")?,
            },
        })
    };
    matches!(
        name,
        "BatchNormalization"
            | "InstanceNormalization"
            | "LayerNormalization"
            | "Softmax"
            | "MaskedSoftmax"
            | "LogSoftmax"
    )
    .then(f)
}
