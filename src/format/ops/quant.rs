//! Records of the quant family: QuantizeLinear, DequantizeLinear (attribute `axis`
//! present only for per-axis parameters; `dtype` as an ONNX type code) and the int8
//! ops QConv, QGemm, QAdd, QRequant, QMaxPool (quantisation parameters as
//! `<name>_scale` / `<name>_zp` pairs; an absent `y` pair means an i32 output).

use super::{AttrsIn, AttrsOut};
use crate::ir::{Op, QParam};

/// Writes `q` as `<name>_scale` and `<name>_zp`.
fn put_q(a: &mut AttrsOut, name: &str, q: &QParam) {
    a.float(&format!("{name}_scale"), q.scale);
    a.int(&format!("{name}_zp"), i64::from(q.zp));
}

/// Reads `<name>_scale` / `<name>_zp`; `None` when absent.
fn get_q(a: &AttrsIn, name: &str) -> Result<Option<QParam>, String> {
    let (s, z) = (format!("{name}_scale"), format!("{name}_zp"));
    if a.get(&s).is_none() {
        return Ok(None);
    }
    let zp = u8::try_from(a.int(&z)?).map_err(|_| format!("attribute '{z}' is not a u8"))?;
    Ok(Some(QParam {
        scale: a.float(&s)?,
        zp,
    }))
}

/// Reads a required parameter pair.
fn req_q(a: &AttrsIn, name: &str) -> Result<QParam, String> {
    get_q(a, name)?.ok_or_else(|| format!("attribute '{name}_scale' is missing"))
}

/// Reads a u8 attribute.
fn get_u8(a: &AttrsIn, name: &str) -> Result<u8, String> {
    u8::try_from(a.int(name)?).map_err(|_| format!("attribute '{name}' is not a u8"))
}

/// The clamp bounds of an int8 op.
fn put_bounds(a: &mut AttrsOut, lo: u8, hi: u8) {
    a.int("lo", i64::from(lo));
    a.int("hi", i64::from(hi));
}

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
        Op::QConv {
            geom,
            group,
            x,
            w_scale,
            y,
            lo,
            hi,
        } => {
            a.geom(geom);
            a.usize("group", *group);
            put_q(a, "x", x);
            a.floats("w_scale", w_scale);
            if let Some(y) = y {
                put_q(a, "y", y);
            }
            put_bounds(a, *lo, *hi);
            "QConv"
        }
        Op::QGemm {
            x,
            w_scale,
            y,
            lo,
            hi,
        } => {
            put_q(a, "x", x);
            a.floats("w_scale", w_scale);
            if let Some(y) = y {
                put_q(a, "y", y);
            }
            put_bounds(a, *lo, *hi);
            "QGemm"
        }
        Op::QAdd {
            a: qa,
            b: qb,
            y,
            lo,
            hi,
        } => {
            put_q(a, "a", qa);
            put_q(a, "b", qb);
            put_q(a, "y", y);
            put_bounds(a, *lo, *hi);
            "QAdd"
        }
        Op::QRequant { x, y } => {
            put_q(a, "x", x);
            put_q(a, "y", y);
            "QRequant"
        }
        Op::QMaxPool { geom, ceil_mode } => {
            a.geom(geom);
            a.bool("ceil_mode", *ceil_mode);
            "QMaxPool"
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
            "DequantizeLinear" => Op::DequantizeLinear { axis: get_axis(a)? },
            "QConv" => Op::QConv {
                geom: a.geom()?,
                group: a.usize("group")?,
                x: req_q(a, "x")?,
                w_scale: a.floats("w_scale")?,
                y: get_q(a, "y")?,
                lo: get_u8(a, "lo")?,
                hi: get_u8(a, "hi")?,
            },
            "QGemm" => Op::QGemm {
                x: req_q(a, "x")?,
                w_scale: a.floats("w_scale")?,
                y: get_q(a, "y")?,
                lo: get_u8(a, "lo")?,
                hi: get_u8(a, "hi")?,
            },
            "QAdd" => Op::QAdd {
                a: req_q(a, "a")?,
                b: req_q(a, "b")?,
                y: req_q(a, "y")?,
                lo: get_u8(a, "lo")?,
                hi: get_u8(a, "hi")?,
            },
            "QRequant" => Op::QRequant {
                x: req_q(a, "x")?,
                y: req_q(a, "y")?,
            },
            _ => Op::QMaxPool {
                geom: a.geom()?,
                ceil_mode: a.bool("ceil_mode")?,
            },
        })
    };
    matches!(
        name,
        "QuantizeLinear"
            | "DequantizeLinear"
            | "QConv"
            | "QGemm"
            | "QAdd"
            | "QRequant"
            | "QMaxPool"
    )
    .then(f)
}
