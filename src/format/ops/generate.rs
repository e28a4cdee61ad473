//! Records of the generate family: Shape, ConstantOfShape, Range.

use super::{AttrsIn, AttrsOut};
use crate::ir::Op;

pub(super) fn encode(op: &Op, a: &mut AttrsOut) -> Option<&'static str> {
    Some(match op {
        Op::Shape { start, end } => {
            a.int("start", *start);
            if let Some(e) = end {
                a.int("end", *e);
            }
            "Shape"
        }
        Op::ConstantOfShape { value } => {
            a.tensor("value", value);
            "ConstantOfShape"
        }
        Op::Range => "Range",
        _ => return None,
    })
}

pub(super) fn decode(name: &str, a: &AttrsIn) -> Option<Result<Op, String>> {
    let f = || -> Result<Op, String> {
        Ok(match name {
            "Shape" => Op::Shape {
                start: a.int("start")?,
                end: a.opt_int("end"),
            },
            "ConstantOfShape" => Op::ConstantOfShape {
                value: a.tensor("value")?,
            },
            _ => Op::Range,
        })
    };
    matches!(name, "Shape" | "ConstantOfShape" | "Range").then(f)
}
