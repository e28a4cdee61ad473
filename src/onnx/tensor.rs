//! Decoding of ONNX `TensorProto`s (initializers, `Constant` values, attribute tensors)
//! into IR tensors, from every encoding: `raw_data`, the typed repeated fields, and
//! external data files beside the model.
//!
//! Element types outside the IR are converted on the way in: float16, bfloat16 and
//! double become f32; int16 and uint16 become i32; uint32 and uint64 become i64 (a
//! uint64 above `i64::MAX` is an error). Strings and complex numbers are rejected.
//!
//! Invariants: the element count is computed with overflow checks and compared with the
//! data actually present *before* anything is allocated, so a corrupt file cannot make
//! us allocate more than it holds; an external data path must be relative and, with its
//! symlinks resolved, stay inside the model's directory (see [`super::file`]); the file
//! must be a regular file, the offset/length must lie within it, and the bytes must fit
//! what is left of the model's external-data limit, all checked before reading.

use std::cell::Cell;
use std::io::{Seek, SeekFrom};
use std::path::{Component, Path};

use super::file::{open_regular, read_exactly, resolve_inside};
use super::proto::{data_type as dt, TensorProto, DATA_LOCATION_EXTERNAL};
use crate::ir::{Tensor, TensorData};
use crate::{Error, Result};

/// Where a tensor is decoded: for error messages and external data.
pub(crate) struct TensorCtx<'a> {
    /// Model name used in `OnnxFormat` errors.
    pub model: &'a str,
    /// Directory external data paths are relative to.
    pub base_dir: Option<&'a Path>,
    /// External-data bytes the model may still load (shared by all its tensors).
    pub external_left: &'a Cell<u64>,
}

impl TensorCtx<'_> {
    fn err(&self, what: &str, reason: impl std::fmt::Display) -> Error {
        Error::OnnxFormat {
            model: self.model.to_string(),
            reason: format!("tensor '{what}': {reason}"),
        }
    }
}

/// Size in bytes of one element of an ONNX data type as stored in `raw_data`.
fn raw_size(code: i32) -> Option<usize> {
    Some(match code {
        dt::FLOAT | dt::INT32 | dt::UINT32 => 4,
        dt::UINT8 | dt::INT8 | dt::BOOL => 1,
        dt::UINT16 | dt::INT16 | dt::FLOAT16 | dt::BFLOAT16 => 2,
        dt::INT64 | dt::DOUBLE | dt::UINT64 => 8,
        _ => return None,
    })
}

/// Converts IEEE half-precision bits to f32.
pub(crate) fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h >> 15) as u32) << 31;
    let exp = ((h >> 10) & 0x1f) as u32;
    let mant = (h & 0x3ff) as u32;
    let bits = if exp == 0 {
        if mant == 0 {
            sign
        } else {
            // Subnormal: value = mant * 2^-24.
            let v = mant as f32 * (1.0 / 16_777_216.0);
            return if sign != 0 { -v } else { v };
        }
    } else if exp == 0x1f {
        sign | 0x7f80_0000 | (mant << 13)
    } else {
        sign | ((exp + 112) << 23) | (mant << 13)
    };
    f32::from_bits(bits)
}

/// The name used in messages for a tensor.
fn label(t: &TensorProto) -> &str {
    if t.name.is_empty() {
        "<unnamed>"
    } else {
        &t.name
    }
}

/// Decodes a tensor proto into an IR tensor.
pub(crate) fn decode_tensor(t: &TensorProto, cx: &TensorCtx<'_>) -> Result<Tensor> {
    let name = label(t);
    if t.segment.is_some() {
        return Err(cx.err(name, "segmented tensors are not supported"));
    }
    let mut shape = Vec::with_capacity(t.dims.len());
    let mut numel: usize = 1;
    for &d in &t.dims {
        let d = usize::try_from(d).map_err(|_| cx.err(name, format!("negative dimension {d}")))?;
        numel = numel
            .checked_mul(d)
            .ok_or_else(|| cx.err(name, "element count overflows"))?;
        shape.push(d);
    }
    let code = t.data_type;
    let Some(esize) = raw_size(code) else {
        return Err(cx.err(
            name,
            format!("element type {} is not supported", dt::name(code)),
        ));
    };
    let nbytes = numel
        .checked_mul(esize)
        .ok_or_else(|| cx.err(name, "byte size overflows"))?;
    let external;
    let raw: Option<&[u8]> = if t.data_location == DATA_LOCATION_EXTERNAL {
        external = read_external(t, nbytes, cx)?;
        Some(&external)
    } else if !t.raw_data.is_empty() || (numel == 0 && no_typed_data(t)) {
        Some(&t.raw_data)
    } else {
        None
    };
    let data = match raw {
        Some(bytes) => {
            if bytes.len() != nbytes {
                return Err(cx.err(
                    name,
                    format!(
                        "holds {} bytes of data, shape {:?} of {} needs {}",
                        bytes.len(),
                        shape,
                        dt::name(code),
                        nbytes
                    ),
                ));
            }
            from_raw(code, bytes).ok_or_else(|| cx.err(name, "uint64 value exceeds int64"))?
        }
        None => from_typed(t, numel, cx)?,
    };
    Ok(Tensor { shape, data })
}

fn no_typed_data(t: &TensorProto) -> bool {
    t.float_data.is_empty()
        && t.int32_data.is_empty()
        && t.int64_data.is_empty()
        && t.double_data.is_empty()
        && t.uint64_data.is_empty()
}

/// Little-endian bytes to a vector of `T`: one `memcpy` when the bytes happen to be
/// aligned for `T` on a little-endian host (the usual case for a large `raw_data`),
/// element-wise decoding otherwise.
fn le_vec<T: bytemuck::Pod, const N: usize>(b: &[u8], from_le: fn([u8; N]) -> T) -> Vec<T> {
    #[cfg(target_endian = "little")]
    if let Ok(v) = bytemuck::try_cast_slice::<u8, T>(b) {
        return v.to_vec();
    }
    chunks::<N>(b).map(from_le).collect()
}

fn chunks<const N: usize>(b: &[u8]) -> impl Iterator<Item = [u8; N]> + '_ {
    b.chunks_exact(N).map(|c| {
        let mut a = [0u8; N];
        a.copy_from_slice(c);
        a
    })
}

/// Little-endian raw bytes (length already checked) to IR data; `None` for a uint64
/// value that does not fit i64.
fn from_raw(code: i32, b: &[u8]) -> Option<TensorData> {
    Some(match code {
        dt::FLOAT => TensorData::F32(le_vec(b, f32::from_le_bytes)),
        dt::UINT8 => TensorData::U8(b.to_vec()),
        dt::INT8 => TensorData::I8(b.iter().map(|&x| x as i8).collect()),
        dt::BOOL => TensorData::Bool(b.iter().map(|&x| u8::from(x != 0)).collect()),
        dt::INT16 => TensorData::I32(
            chunks::<2>(b)
                .map(|c| i16::from_le_bytes(c) as i32)
                .collect(),
        ),
        dt::UINT16 => TensorData::I32(
            chunks::<2>(b)
                .map(|c| u16::from_le_bytes(c) as i32)
                .collect(),
        ),
        dt::FLOAT16 => TensorData::F32(
            chunks::<2>(b)
                .map(|c| f16_to_f32(u16::from_le_bytes(c)))
                .collect(),
        ),
        dt::BFLOAT16 => TensorData::F32(
            chunks::<2>(b)
                .map(|c| f32::from_bits((u16::from_le_bytes(c) as u32) << 16))
                .collect(),
        ),
        dt::INT32 => TensorData::I32(le_vec(b, i32::from_le_bytes)),
        dt::UINT32 => TensorData::I64(
            chunks::<4>(b)
                .map(|c| u32::from_le_bytes(c) as i64)
                .collect(),
        ),
        dt::INT64 => TensorData::I64(le_vec(b, i64::from_le_bytes)),
        dt::DOUBLE => TensorData::F32(
            chunks::<8>(b)
                .map(|c| f64::from_le_bytes(c) as f32)
                .collect(),
        ),
        // UINT64, the only remaining code `raw_size` accepts.
        _ => TensorData::I64(
            chunks::<8>(b)
                .map(|c| i64::try_from(u64::from_le_bytes(c)).ok())
                .collect::<Option<Vec<_>>>()?,
        ),
    })
}

/// The typed repeated fields to IR data.
fn from_typed(t: &TensorProto, numel: usize, cx: &TensorCtx<'_>) -> Result<TensorData> {
    let name = label(t);
    let check = |have: usize, field: &str| -> Result<()> {
        if have == numel {
            Ok(())
        } else {
            Err(cx.err(
                name,
                format!(
                    "{field} holds {have} elements, shape {:?} needs {numel}",
                    t.dims
                ),
            ))
        }
    };
    let narrow = |v: i32, lo: i32, hi: i32| -> Result<i32> {
        if (lo..=hi).contains(&v) {
            Ok(v)
        } else {
            Err(cx.err(
                name,
                format!(
                    "int32_data value {v} out of range for {}",
                    dt::name(t.data_type)
                ),
            ))
        }
    };
    let i32d = &t.int32_data;
    Ok(match t.data_type {
        dt::FLOAT => {
            check(t.float_data.len(), "float_data")?;
            TensorData::F32(t.float_data.clone())
        }
        dt::INT64 => {
            check(t.int64_data.len(), "int64_data")?;
            TensorData::I64(t.int64_data.clone())
        }
        dt::DOUBLE => {
            check(t.double_data.len(), "double_data")?;
            TensorData::F32(t.double_data.iter().map(|&x| x as f32).collect())
        }
        dt::UINT32 | dt::UINT64 => {
            check(t.uint64_data.len(), "uint64_data")?;
            let v = t
                .uint64_data
                .iter()
                .map(|&x| {
                    i64::try_from(x)
                        .map_err(|_| cx.err(name, format!("uint64 value {x} exceeds int64")))
                })
                .collect::<Result<Vec<_>>>()?;
            TensorData::I64(v)
        }
        code => {
            check(i32d.len(), "int32_data")?;
            match code {
                dt::INT32 => TensorData::I32(i32d.clone()),
                dt::INT16 => TensorData::I32(
                    i32d.iter()
                        .map(|&v| narrow(v, i16::MIN as i32, i16::MAX as i32))
                        .collect::<Result<_>>()?,
                ),
                dt::UINT16 => TensorData::I32(
                    i32d.iter()
                        .map(|&v| narrow(v, 0, u16::MAX as i32))
                        .collect::<Result<_>>()?,
                ),
                dt::INT8 => TensorData::I8(
                    i32d.iter()
                        .map(|&v| narrow(v, -128, 127).map(|v| v as i8))
                        .collect::<Result<_>>()?,
                ),
                dt::UINT8 => TensorData::U8(
                    i32d.iter()
                        .map(|&v| narrow(v, 0, 255).map(|v| v as u8))
                        .collect::<Result<_>>()?,
                ),
                dt::BOOL => TensorData::Bool(i32d.iter().map(|&v| u8::from(v != 0)).collect()),
                dt::FLOAT16 => TensorData::F32(
                    i32d.iter()
                        .map(|&v| narrow(v, 0, u16::MAX as i32).map(|v| f16_to_f32(v as u16)))
                        .collect::<Result<_>>()?,
                ),
                // BFLOAT16 (the only remaining accepted code).
                _ => TensorData::F32(
                    i32d.iter()
                        .map(|&v| {
                            narrow(v, 0, u16::MAX as i32).map(|v| f32::from_bits((v as u32) << 16))
                        })
                        .collect::<Result<_>>()?,
                ),
            }
        }
    })
}

/// Reads the bytes of an external-data tensor, with every bound checked.
fn read_external(t: &TensorProto, nbytes: usize, cx: &TensorCtx<'_>) -> Result<Vec<u8>> {
    let name = label(t);
    let mut location = None;
    let mut offset: u64 = 0;
    let mut length: Option<u64> = None;
    for e in &t.external_data {
        match e.key.as_str() {
            "location" => location = Some(e.value.as_str()),
            "offset" => {
                offset = e
                    .value
                    .parse()
                    .map_err(|_| cx.err(name, format!("bad external data offset '{}'", e.value)))?
            }
            "length" => {
                length =
                    Some(e.value.parse().map_err(|_| {
                        cx.err(name, format!("bad external data length '{}'", e.value))
                    })?)
            }
            // Integrity hash: optional, not verified.
            "checksum" => {}
            other => return Err(cx.err(name, format!("unknown external data key '{other}'"))),
        }
    }
    let location = location.ok_or_else(|| cx.err(name, "external data without a location"))?;
    let rel = Path::new(location);
    if location.is_empty()
        || rel
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(cx.err(
            name,
            format!("external data location '{location}' must be a relative path inside the model directory"),
        ));
    }
    let base = cx.base_dir.ok_or_else(|| {
        cx.err(
            name,
            format!("data is in external file '{location}' but no base directory was given"),
        )
    })?;
    let path = resolve_inside(base, rel).map_err(|r| cx.err(name, format!("external data {r}")))?;
    let io = |e: std::io::Error| Error::Io {
        path: path.clone(),
        reason: format!("external data of tensor '{name}': {e}"),
    };
    // The resolved path has no symlink left: one swapped in meanwhile is refused.
    let (mut f, flen) = open_regular(&path, true)?;
    let length = length.unwrap_or_else(|| flen.saturating_sub(offset));
    let end = offset
        .checked_add(length)
        .ok_or_else(|| cx.err(name, "external data range overflows"))?;
    if end > flen {
        return Err(cx.err(
            name,
            format!("external data range {offset}..{end} exceeds '{location}' ({flen} bytes)"),
        ));
    }
    if length != nbytes as u64 {
        return Err(cx.err(
            name,
            format!(
                "external data length {length} does not match the {nbytes} bytes its shape needs"
            ),
        ));
    }
    let left = cx.external_left.get();
    if length > left {
        return Err(cx.err(
            name,
            format!(
                "external data of {length} bytes in '{location}' is over the model's \
                 external-data limit ({left} bytes left)"
            ),
        ));
    }
    cx.external_left.set(left - length);
    f.seek(SeekFrom::Start(offset)).map_err(io)?;
    read_exactly(&mut f, length, &path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::proto::StringStringEntryProto;

    /// A generous external-data allowance for the tests.
    fn left() -> Cell<u64> {
        Cell::new(1 << 20)
    }

    fn cx(left: &Cell<u64>) -> TensorCtx<'_> {
        TensorCtx {
            model: "m",
            base_dir: None,
            external_left: left,
        }
    }

    #[test]
    fn every_encoding_decodes() {
        let raw = TensorProto {
            dims: vec![2],
            data_type: dt::FLOAT,
            raw_data: [1.5f32, -2.0]
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect(),
            ..Default::default()
        };
        assert_eq!(
            decode_tensor(&raw, &cx(&left())).expect("raw").data,
            TensorData::F32(vec![1.5, -2.0])
        );
        let i64t = TensorProto {
            dims: vec![3],
            data_type: dt::INT64,
            int64_data: vec![1, -1, 9],
            ..Default::default()
        };
        assert_eq!(
            decode_tensor(&i64t, &cx(&left())).expect("i64").data,
            TensorData::I64(vec![1, -1, 9])
        );
        let i8t = TensorProto {
            dims: vec![2],
            data_type: dt::INT8,
            int32_data: vec![-5, 7],
            ..Default::default()
        };
        assert_eq!(
            decode_tensor(&i8t, &cx(&left())).expect("i8").data,
            TensorData::I8(vec![-5, 7])
        );
        let f64t = TensorProto {
            dims: vec![],
            data_type: dt::DOUBLE,
            double_data: vec![0.25],
            ..Default::default()
        };
        let t = decode_tensor(&f64t, &cx(&left())).expect("f64");
        assert_eq!(
            (t.shape.clone(), t.data),
            (vec![], TensorData::F32(vec![0.25]))
        );
        let h = TensorProto {
            dims: vec![3],
            data_type: dt::FLOAT16,
            raw_data: [0x3c00u16, 0xc000, 0x3555]
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect(),
            ..Default::default()
        };
        let v = decode_tensor(&h, &cx(&left())).expect("f16").to_f32_vec();
        assert_eq!(&v[..2], &[1.0, -2.0]);
        assert!((v[2] - 0.333_25).abs() < 1e-4);
        let u64t = TensorProto {
            dims: vec![1],
            data_type: dt::UINT64,
            uint64_data: vec![u64::MAX],
            ..Default::default()
        };
        assert!(decode_tensor(&u64t, &cx(&left())).is_err());
    }

    #[test]
    fn aligned_and_unaligned_raw_bytes_agree() {
        let vals = [1.0f32, -0.5, 3.25, f32::MAX];
        let mut buf = vec![0u8];
        buf.extend(vals.iter().flat_map(|x| x.to_le_bytes()));
        buf.push(0);
        // One of the two offsets is misaligned for f32, whatever the allocation.
        for off in [1, 2] {
            let got = le_vec(&buf[off..off + 16], f32::from_le_bytes);
            let want: Vec<f32> = chunks::<4>(&buf[off..off + 16])
                .map(f32::from_le_bytes)
                .collect();
            assert_eq!(got, want);
        }
        assert_eq!(le_vec(&buf[1..17], f32::from_le_bytes), vals);
    }

    #[test]
    fn size_mismatch_and_bad_types_are_errors() {
        let short = TensorProto {
            dims: vec![1_000_000_000, 1_000_000_000],
            data_type: dt::FLOAT,
            raw_data: vec![0; 8],
            ..Default::default()
        };
        let e = decode_tensor(&short, &cx(&left())).expect_err("too short");
        assert!(matches!(e, Error::OnnxFormat { .. }));
        let overflow = TensorProto {
            dims: vec![i64::MAX, i64::MAX],
            data_type: dt::FLOAT,
            ..Default::default()
        };
        assert!(decode_tensor(&overflow, &cx(&left())).is_err());
        let string = TensorProto {
            dims: vec![1],
            data_type: dt::STRING,
            string_data: vec![b"x".to_vec()],
            ..Default::default()
        };
        let e = decode_tensor(&string, &cx(&left())).expect_err("string");
        assert!(e.to_string().contains("string"), "{e}");
    }

    #[test]
    fn external_data_is_bounds_checked() {
        let dir = std::env::temp_dir().join(format!("vnpu-onnx-tensor-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let bytes: Vec<u8> = [1.0f32, 2.0, 3.0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        std::fs::write(dir.join("w.bin"), &bytes).expect("write");
        let ext = |loc: &str, off: &str, len: &str, dims: Vec<i64>| TensorProto {
            name: "w".into(),
            dims,
            data_type: dt::FLOAT,
            data_location: DATA_LOCATION_EXTERNAL,
            external_data: vec![
                StringStringEntryProto {
                    key: "location".into(),
                    value: loc.into(),
                },
                StringStringEntryProto {
                    key: "offset".into(),
                    value: off.into(),
                },
                StringStringEntryProto {
                    key: "length".into(),
                    value: len.into(),
                },
            ],
            ..Default::default()
        };
        let budget = left();
        let c = TensorCtx {
            model: "m",
            base_dir: Some(&dir),
            external_left: &budget,
        };
        let t = decode_tensor(&ext("w.bin", "4", "8", vec![2]), &c).expect("in bounds");
        assert_eq!(t.data, TensorData::F32(vec![2.0, 3.0]));
        assert!(decode_tensor(&ext("w.bin", "8", "8", vec![2]), &c).is_err());
        assert!(decode_tensor(&ext("w.bin", "0", "8", vec![3]), &c).is_err());
        assert!(decode_tensor(&ext("../w.bin", "0", "8", vec![2]), &c).is_err());
        assert!(decode_tensor(&ext("/etc/passwd", "0", "8", vec![2]), &c).is_err());
        assert!(decode_tensor(&ext("w.bin", "0", "8", vec![2]), &cx(&left())).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
