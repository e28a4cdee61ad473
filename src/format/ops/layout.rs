//! Records of the layout family: Concat, Split, Slice, Reshape, Flatten, Squeeze,
//! Unsqueeze, Transpose, Pad, Expand, Tile, DepthToSpace, SpaceToDepth.

use super::{AttrsIn, AttrsOut};
use crate::ir::{Op, PadMode};

const PAD_MODES: &[(PadMode, &str)] = &[
    (PadMode::Constant, "constant"),
    (PadMode::Reflect, "reflect"),
    (PadMode::Edge, "edge"),
    (PadMode::Wrap, "wrap"),
];

pub(super) fn encode(op: &Op, a: &mut AttrsOut) -> Option<&'static str> {
    Some(match op {
        Op::Concat { axis } => {
            a.int("axis", *axis);
            "Concat"
        }
        Op::Split {
            axis,
            split,
            num_outputs,
        } => {
            a.int("axis", *axis);
            if let Some(s) = split {
                a.ints("split", s);
            }
            a.usize("num_outputs", *num_outputs);
            "Split"
        }
        Op::Slice => "Slice",
        Op::Reshape { allowzero } => {
            a.bool("allowzero", *allowzero);
            "Reshape"
        }
        Op::Flatten { axis } => {
            a.int("axis", *axis);
            "Flatten"
        }
        Op::Squeeze { axes } | Op::Unsqueeze { axes } => {
            if let Some(ax) = axes {
                a.ints("axes", ax);
            }
            if matches!(op, Op::Squeeze { .. }) {
                "Squeeze"
            } else {
                "Unsqueeze"
            }
        }
        Op::Transpose { perm } => {
            if let Some(p) = perm {
                a.usizes("perm", p);
            }
            "Transpose"
        }
        Op::Pad { mode } => {
            a.string("mode", PAD_MODES.iter().find(|(m, _)| m == mode)?.1);
            "Pad"
        }
        Op::Expand => "Expand",
        Op::Tile => "Tile",
        Op::DepthToSpace {
            blocksize,
            crd_mode,
        } => {
            a.usize("blocksize", *blocksize);
            a.bool("crd_mode", *crd_mode);
            "DepthToSpace"
        }
        Op::SpaceToDepth { blocksize } => {
            a.usize("blocksize", *blocksize);
            "SpaceToDepth"
        }
        _ => return None,
    })
}

pub(super) fn decode(name: &str, a: &AttrsIn) -> Option<Result<Op, String>> {
    let f = || -> Result<Op, String> {
        Ok(match name {
            "Concat" => Op::Concat {
                axis: a.int("axis")?,
            },
            "Split" => Op::Split {
                axis: a.int("axis")?,
                split: a.opt_ints("split"),
                num_outputs: a.usize("num_outputs")?,
            },
            "Slice" => Op::Slice,
            "Reshape" => Op::Reshape {
                allowzero: a.bool("allowzero")?,
            },
            "Flatten" => Op::Flatten {
                axis: a.int("axis")?,
            },
            "Squeeze" => Op::Squeeze {
                axes: a.opt_ints("axes"),
            },
            "Unsqueeze" => Op::Unsqueeze {
                axes: a.opt_ints("axes"),
            },
            "Transpose" => Op::Transpose {
                perm: match a.get("perm") {
                    Some(_) => Some(a.usizes("perm")?),
                    None => None,
                },
            },
            "Pad" => {
                let m = a.string("mode")?;
                let mode = PAD_MODES.iter().find(|(_, n)| *n == m);
                Op::Pad {
                    mode: mode.ok_or_else(|| format!("Pad: unknown mode '{m}'"))?.0,
                }
            }
            "Expand" => Op::Expand,
            "Tile" => Op::Tile,
            "DepthToSpace" => Op::DepthToSpace {
                blocksize: a.usize("blocksize")?,
                crd_mode: a.bool("crd_mode")?,
            },
            _ => Op::SpaceToDepth {
                blocksize: a.usize("blocksize")?,
            },
        })
    };
    matches!(
        name,
        "Concat"
            | "Split"
            | "Slice"
            | "Reshape"
            | "Flatten"
            | "Squeeze"
            | "Unsqueeze"
            | "Transpose"
            | "Pad"
            | "Expand"
            | "Tile"
            | "DepthToSpace"
            | "SpaceToDepth"
    )
    .then(f)
}
