//! Records of the reduce family: Reduce(*), ArgMax, ArgMin, CumSum.

use super::{AttrsIn, AttrsOut};
use crate::ir::{Op, ReduceOp};

const REDUCE: &[(ReduceOp, &str)] = &[
    (ReduceOp::Mean, "ReduceMean"),
    (ReduceOp::Sum, "ReduceSum"),
    (ReduceOp::Max, "ReduceMax"),
    (ReduceOp::Min, "ReduceMin"),
    (ReduceOp::Prod, "ReduceProd"),
    (ReduceOp::L1, "ReduceL1"),
    (ReduceOp::L2, "ReduceL2"),
    (ReduceOp::SumSquare, "ReduceSumSquare"),
    (ReduceOp::LogSumExp, "ReduceLogSumExp"),
];

pub(super) fn encode(op: &Op, a: &mut AttrsOut) -> Option<&'static str> {
    Some(match op {
        Op::Reduce {
            op,
            axes,
            keepdims,
            noop_with_empty_axes,
        } => {
            if let Some(ax) = axes {
                a.ints("axes", ax);
            }
            a.bool("keepdims", *keepdims);
            a.bool("noop_with_empty_axes", *noop_with_empty_axes);
            REDUCE.iter().find(|(r, _)| r == op)?.1
        }
        Op::ArgMax {
            axis,
            keepdims,
            select_last_index,
        }
        | Op::ArgMin {
            axis,
            keepdims,
            select_last_index,
        } => {
            a.int("axis", *axis);
            a.bool("keepdims", *keepdims);
            a.bool("select_last_index", *select_last_index);
            if matches!(op, Op::ArgMax { .. }) {
                "ArgMax"
            } else {
                "ArgMin"
            }
        }
        Op::CumSum { exclusive, reverse } => {
            a.bool("exclusive", *exclusive);
            a.bool("reverse", *reverse);
            "CumSum"
        }
        _ => return None,
    })
}

pub(super) fn decode(name: &str, a: &AttrsIn) -> Option<Result<Op, String>> {
    if let Some((op, _)) = REDUCE.iter().find(|(_, n)| *n == name) {
        let f = || -> Result<Op, String> {
            Ok(Op::Reduce {
                op: *op,
                axes: a.opt_ints("axes"),
                keepdims: a.bool("keepdims")?,
                noop_with_empty_axes: a.bool("noop_with_empty_axes")?,
            })
        };
        return Some(f());
    }
    let f = || -> Result<Op, String> {
        let (axis, keepdims, select_last_index) = match name {
            "CumSum" => {
                return Ok(Op::CumSum {
                    exclusive: a.bool("exclusive")?,
                    reverse: a.bool("reverse")?,
                })
            }
            _ => (
                a.int("axis")?,
                a.bool("keepdims")?,
                a.bool("select_last_index")?,
            ),
        };
        Ok(if name == "ArgMax" {
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
        })
    };
    matches!(name, "ArgMax" | "ArgMin" | "CumSum").then(f)
}
