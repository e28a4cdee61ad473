//! Records of the quant family: QuantizeLinear, DequantizeLinear (attribute `axis`
//! present only for per-axis parameters; `dtype` as an ONNX type code).

use super::{AttrsIn, AttrsOut};
use crate::ir::Op;

/// The optional axis as a record attribute.
fn put_axis(a: &mut AttrsOut, axis: Option<usize>) {
    if let Some(x) = axis {
        a.usize("axis", x);
    }
}

/// The optional axis of a record.
fn get_axis(a: &AttrsIn) -> Result<Option<usize>, String> {
    a.get("axis").map(|_| a.usize("axis")).transpose()
}

pub(super) fn encode(op: &Op, a: &mut AttrsOut) -> Option<&'static str> {
    Some(match op {
        Op::QuantizeLinear { axis, dtype } => {
            put_axis(a, *axis);
            a.int("dtype", i64::from(dtype.onnx_code()));
            "QuantizeLinear"
        }
        Op::DequantizeLinear { axis } => {
            put_axis(a, *axis);
            "DequantizeLinear"
        }
        _ => return None,
    })
}

pub(super) fn decode(name: &str, a: &AttrsIn) -> Option<Result<Op, String>> {
    let f = || -> Result<Op, String> {
        Ok(match name {
            "QuantizeLinear" => Op::QuantizeLinear {
                axis: get_axis(a)?,
                dtype: a.dtype("dtype")?,
            },
            _ => Op::DequantizeLinear { axis: get_axis(a)? },
        })
    };
    matches!(name, "QuantizeLinear" | "DequantizeLinear").then(f)
}
