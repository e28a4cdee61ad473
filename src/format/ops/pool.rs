//! Records of the pool family: MaxPool, MaxPoolNhwc, AveragePool, GlobalAveragePool,
//! GlobalMaxPool.

use super::{AttrsIn, AttrsOut};
use crate::ir::Op;

pub(super) fn encode(op: &Op, a: &mut AttrsOut) -> Option<&'static str> {
    Some(match op {
        Op::MaxPool { geom, ceil_mode } => {
            a.geom(geom);
            a.bool("ceil_mode", *ceil_mode);
            "MaxPool"
        }
        Op::MaxPoolNhwc { geom, ceil_mode } => {
            a.geom(geom);
            a.bool("ceil_mode", *ceil_mode);
            "MaxPoolNhwc"
        }
        Op::AveragePool {
            geom,
            ceil_mode,
            count_include_pad,
        } => {
            a.geom(geom);
            a.bool("ceil_mode", *ceil_mode);
            a.bool("count_include_pad", *count_include_pad);
            "AveragePool"
        }
        Op::GlobalAveragePool => "GlobalAveragePool",
        Op::GlobalMaxPool => "GlobalMaxPool",
        _ => return None,
    })
}

pub(super) fn decode(name: &str, a: &AttrsIn) -> Option<Result<Op, String>> {
    let f = || -> Result<Op, String> {
        Ok(match name {
            "MaxPool" => Op::MaxPool {
                geom: a.geom()?,
                ceil_mode: a.bool("ceil_mode")?,
            },
            "MaxPoolNhwc" => Op::MaxPoolNhwc {
                geom: a.geom()?,
                ceil_mode: a.bool("ceil_mode")?,
            },
            "AveragePool" => Op::AveragePool {
                geom: a.geom()?,
                ceil_mode: a.bool("ceil_mode")?,
                count_include_pad: a.bool("count_include_pad")?,
            },
            "GlobalAveragePool" => Op::GlobalAveragePool,
            _ => Op::GlobalMaxPool,
        })
    };
    matches!(
        name,
        "MaxPool" | "MaxPoolNhwc" | "AveragePool" | "GlobalAveragePool" | "GlobalMaxPool"
    )
    .then(f)
}
