//! Records of the index family: Gather, GatherElements, GatherND, TopK,
//! NonMaxSuppression.

use super::{AttrsIn, AttrsOut};
use crate::ir::Op;

pub(super) fn encode(op: &Op, a: &mut AttrsOut) -> Option<&'static str> {
    Some(match op {
        Op::Gather { axis } => {
            a.int("axis", *axis);
            "Gather"
        }
        Op::GatherElements { axis } => {
            a.int("axis", *axis);
            "GatherElements"
        }
        Op::GatherND { batch_dims } => {
            a.int("batch_dims", *batch_dims);
            "GatherND"
        }
        Op::TopK {
            axis,
            largest,
            sorted,
        } => {
            a.int("axis", *axis);
            a.bool("largest", *largest);
            a.bool("sorted", *sorted);
            "TopK"
        }
        Op::NonMaxSuppression { center_point_box } => {
            a.bool("center_point_box", *center_point_box);
            "NonMaxSuppression"
        }
        _ => return None,
    })
}

pub(super) fn decode(name: &str, a: &AttrsIn) -> Option<Result<Op, String>> {
    let f = || -> Result<Op, String> {
        Ok(match name {
            "Gather" => Op::Gather {
                axis: a.int("axis")?,
            },
            "GatherElements" => Op::GatherElements {
                axis: a.int("axis")?,
            },
            "GatherND" => Op::GatherND {
                batch_dims: a.int("batch_dims")?,
            },
            "TopK" => Op::TopK {
                axis: a.int("axis")?,
                largest: a.bool("largest")?,
                sorted: a.bool("sorted")?,
            },
            _ => Op::NonMaxSuppression {
                center_point_box: a.bool("center_point_box")?,
            },
        })
    };
    matches!(
        name,
        "Gather" | "GatherElements" | "GatherND" | "TopK" | "NonMaxSuppression"
    )
    .then(f)
}
