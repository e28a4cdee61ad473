//! Records of the quant family: QuantizeLinear, DequantizeLinear (attribute `axis`
//! present only for per-axis parameters; `dtype` as an ONNX type code) and the int8
//! ops QConv, QGemm, QAdd, QRequant, QMaxPool (quantisation parameters as
//! `<name>_scale` / `<name>_zp` pairs; an absent `y` pair means an i32 output).
//!
//! QAvgPool, QGlobalAvgPool and QResize carry a record `version` (now 1): a reader
//! refuses a version it does not know, and checks every parameter (finite positive
//! scales, u8 zero points, known coordinate modes) so that a bad record is an error.

use super::{AttrsIn, AttrsOut};
use crate::ir::{CoordMode, Op, QParam};

/// Record version of QAvgPool / QGlobalAvgPool / QResize.
const RESAMPLE_VERSION: i64 = 1;

/// Coordinate modes of QResize as their ONNX names.
const COORDS: &[(CoordMode, &str)] = &[
    (CoordMode::HalfPixel, "half_pixel"),
    (CoordMode::PytorchHalfPixel, "pytorch_half_pixel"),
    (CoordMode::AlignCorners, "align_corners"),
    (CoordMode::Asymmetric, "asymmetric"),
    (CoordMode::HalfPixelSymmetric, "half_pixel_symmetric"),
];

/// Checks the record version of a versioned op.
fn check_version(a: &AttrsIn, op: &str) -> Result<(), String> {
    match a.opt_int("version") {
        Some(RESAMPLE_VERSION) => Ok(()),
        Some(v) => Err(format!(
            "{op}: record version {v} is not supported (this vnpu reads {RESAMPLE_VERSION}); \
             recompile the model"
        )),
        None => Err(format!("{op}: attribute 'version' is missing")),
    }
}

/// A required parameter pair with a finite, positive scale.
fn checked_q(a: &AttrsIn, name: &str) -> Result<QParam, String> {
    let q = req_q(a, name)?;
    if !(q.scale.is_finite() && q.scale > 0.0) {
        return Err(format!(
            "attribute '{name}_scale' is {}, not a finite positive scale",
            q.scale
        ));
    }
    Ok(q)
}

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
        Op::QLut { table } => {
            a.ints(
                "table",
                &table.iter().map(|&v| i64::from(v)).collect::<Vec<_>>(),
            );
            "QLut"
        }
        Op::QMul { a: qa, b: qb, y } => {
            put_q(a, "a", qa);
            put_q(a, "b", qb);
            put_q(a, "y", y);
            "QMul"
        }
        Op::QSoftmax { axis, x, y } => {
            a.usize("axis", *axis);
            put_q(a, "x", x);
            put_q(a, "y", y);
            "QSoftmax"
        }
        Op::QMaxPool { geom, ceil_mode } => {
            a.geom(geom);
            a.bool("ceil_mode", *ceil_mode);
            "QMaxPool"
        }
        Op::QAvgPool {
            geom,
            ceil_mode,
            count_include_pad,
            x,
            y,
        } => {
            a.int("version", RESAMPLE_VERSION);
            a.geom(geom);
            a.bool("ceil_mode", *ceil_mode);
            a.bool("count_include_pad", *count_include_pad);
            put_q(a, "x", x);
            put_q(a, "y", y);
            "QAvgPool"
        }
        Op::QGlobalAvgPool { x, y } => {
            a.int("version", RESAMPLE_VERSION);
            put_q(a, "x", x);
            put_q(a, "y", y);
            "QGlobalAvgPool"
        }
        Op::QResize { coord, x, y } => {
            a.int("version", RESAMPLE_VERSION);
            let name = COORDS.iter().find(|(c, _)| c == coord)?.1;
            a.string("coordinate_transformation_mode", name);
            put_q(a, "x", x);
            put_q(a, "y", y);
            "QResize"
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
            "QLut" => Op::QLut {
                table: a
                    .opt_ints("table")
                    .ok_or("QLut: attribute 'table' is missing")?
                    .into_iter()
                    .map(|v| {
                        u8::try_from(v).map_err(|_| "QLut: a table entry is not a u8".to_string())
                    })
                    .collect::<Result<_, _>>()?,
            },
            "QMul" => Op::QMul {
                a: req_q(a, "a")?,
                b: req_q(a, "b")?,
                y: req_q(a, "y")?,
            },
            "QSoftmax" => Op::QSoftmax {
                axis: a.usize("axis")?,
                x: req_q(a, "x")?,
                y: req_q(a, "y")?,
            },
            "QAvgPool" => {
                check_version(a, name)?;
                Op::QAvgPool {
                    geom: a.geom()?,
                    ceil_mode: a.bool("ceil_mode")?,
                    count_include_pad: a.bool("count_include_pad")?,
                    x: checked_q(a, "x")?,
                    y: checked_q(a, "y")?,
                }
            }
            "QGlobalAvgPool" => {
                check_version(a, name)?;
                Op::QGlobalAvgPool {
                    x: checked_q(a, "x")?,
                    y: checked_q(a, "y")?,
                }
            }
            "QResize" => {
                check_version(a, name)?;
                let m = a.string("coordinate_transformation_mode")?;
                let coord = COORDS
                    .iter()
                    .find(|(_, n)| *n == m)
                    .map(|(c, _)| *c)
                    .ok_or_else(|| format!("QResize: unknown coordinate mode '{m}'"))?;
                Op::QResize {
                    coord,
                    x: checked_q(a, "x")?,
                    y: checked_q(a, "y")?,
                }
            }
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
            | "QLut"
            | "QMul"
            | "QSoftmax"
            | "QAvgPool"
            | "QGlobalAvgPool"
            | "QResize"
    )
    .then(f)
}

#[cfg(test)]
mod tests {
    use super::super::{decode_op, encode_op};
    use crate::ir::{ConvGeom, CoordMode, DType, Op, QParam};

    #[test]
    fn every_quant_op_round_trips() {
        let q = |scale, zp| QParam { scale, zp };
        let geom = ConvGeom {
            kernel: vec![3, 3],
            strides: vec![2, 2],
            dilations: vec![1, 1],
            pads: vec![1, 1, 1, 1],
            auto_pad: None,
        };
        let ops = vec![
            Op::QuantizeLinear {
                axis: None,
                dtype: DType::I8,
            },
            Op::QuantizeLinear {
                axis: Some(1),
                dtype: DType::I32,
            },
            Op::DequantizeLinear { axis: Some(0) },
            Op::DequantizeLinear { axis: None },
            Op::QConv {
                geom: geom.clone(),
                group: 2,
                x: q(0.5, 3),
                w_scale: vec![0.1, 0.2],
                y: Some(q(0.25, 128)),
                lo: 128,
                hi: 250,
            },
            Op::QConv {
                geom: geom.clone(),
                group: 1,
                x: q(1.0, 0),
                w_scale: vec![1.0],
                y: None,
                lo: 0,
                hi: 255,
            },
            Op::QGemm {
                x: q(0.5, 3),
                w_scale: vec![0.1],
                y: Some(q(2.0, 7)),
                lo: 0,
                hi: 255,
            },
            Op::QAdd {
                a: q(0.1, 1),
                b: q(0.2, 2),
                y: q(0.3, 3),
                lo: 3,
                hi: 255,
            },
            Op::QMul {
                a: q(0.1, 1),
                b: q(0.2, 2),
                y: q(0.3, 3),
            },
            Op::QRequant {
                x: q(0.1, 1),
                y: q(0.2, 2),
            },
            Op::QSoftmax {
                axis: 1,
                x: q(0.1, 1),
                y: q(1.0 / 256.0, 0),
            },
            Op::QLut {
                table: (0..=255).rev().collect(),
            },
            Op::QMaxPool {
                geom: geom.clone(),
                ceil_mode: true,
            },
            Op::QAvgPool {
                geom,
                ceil_mode: false,
                count_include_pad: true,
                x: q(0.1, 1),
                y: q(0.05, 200),
            },
            Op::QGlobalAvgPool {
                x: q(0.1, 1),
                y: q(0.2, 0),
            },
            Op::QResize {
                coord: CoordMode::AlignCorners,
                x: q(0.1, 1),
                y: q(0.1, 1),
            },
        ];
        for op in ops {
            let (name, attrs) = encode_op(&op).expect("encode");
            assert_eq!(decode_op(&name, &attrs).expect("decode"), op);
        }
        let (name, mut attrs) = encode_op(&Op::QLut {
            table: vec![0; 256],
        })
        .expect("encode");
        attrs[0].ints[5] = 300;
        assert!(decode_op(&name, &attrs).is_err());
    }

    #[test]
    fn resample_records_are_validated() {
        let op = Op::QResize {
            coord: CoordMode::HalfPixel,
            x: QParam { scale: 0.5, zp: 3 },
            y: QParam { scale: 0.25, zp: 9 },
        };
        let (name, attrs) = encode_op(&op).expect("encode");
        let set = |attr: &str, f: &dyn Fn(&mut crate::format::schema::AttrRecord)| {
            let mut a = attrs.clone();
            f(a.iter_mut().find(|r| r.name == attr).expect(attr));
            decode_op(&name, &a)
        };
        assert!(set("version", &|r| r.i = 2)
            .expect_err("newer version")
            .contains("version 2"));
        assert!(set("x_scale", &|r| r.f = f32::NAN).is_err());
        assert!(set("y_scale", &|r| r.f = -1.0).is_err());
        assert!(set("y_zp", &|r| r.i = 256).is_err());
        assert!(set("coordinate_transformation_mode", &|r| r.s =
            "tf_crop_and_resize".into())
        .is_err());
        let without: Vec<_> = attrs
            .iter()
            .filter(|r| r.name != "version")
            .cloned()
            .collect();
        assert!(decode_op(&name, &without).is_err());
        let (name, attrs) = encode_op(&Op::QGlobalAvgPool {
            x: QParam { scale: 0.5, zp: 3 },
            y: QParam { scale: 0.0, zp: 9 },
        })
        .expect("encode");
        assert!(decode_op(&name, &attrs).is_err(), "zero scale");
    }
}
