//! Reading `.npy` files (NumPy format versions 1–3, C order, little-endian): the
//! calibration samples of post-training quantisation.

use std::path::Path;

use crate::error::{Error, Result};
use crate::ir::{DType, Tensor, TensorData};

fn bad(path: &Path, reason: impl Into<String>) -> Error {
    Error::CompileOption {
        option: "calibration_data".into(),
        reason: format!("{}: {}", path.display(), reason.into()),
    }
}

/// The value of `'key': value` in a `.npy` header dictionary (raw text up to the next
/// top-level comma or closing brace).
fn header_field<'h>(header: &'h str, key: &str) -> Option<&'h str> {
    let at = header.find(&format!("'{key}'"))?;
    let rest = header[at + key.len() + 2..]
        .trim_start()
        .strip_prefix(':')?;
    let rest = rest.trim_start();
    if let Some(inner) = rest.strip_prefix('(') {
        return inner.find(')').map(|e| &inner[..e]);
    }
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    Some(rest[..end].trim())
}

/// Parses a `.npy` file into a tensor. `f8` data is narrowed to f32; other dtypes keep
/// their type (`f4`, `u1`, `i1`, `i4`, `i8`, `b1`).
pub fn parse_npy(path: &Path, b: &[u8]) -> Result<Tensor> {
    if b.len() < 10 || &b[..6] != b"\x93NUMPY" {
        return Err(bad(path, "not a .npy file (no \\x93NUMPY magic)"));
    }
    let (hlen, start) = match b[6] {
        1 => (u16::from_le_bytes([b[8], b[9]]) as usize, 10),
        2 | 3 if b.len() >= 12 => (u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize, 12),
        v => return Err(bad(path, format!("unsupported .npy version {v}"))),
    };
    let header = b
        .get(start..start + hlen)
        .ok_or_else(|| bad(path, "truncated .npy header"))?;
    let header = std::str::from_utf8(header).map_err(|_| bad(path, ".npy header is not text"))?;
    let descr = header_field(header, "descr")
        .ok_or_else(|| bad(path, ".npy header has no 'descr'"))?
        .trim_matches(['\'', '"']);
    if header_field(header, "fortran_order").is_some_and(|v| v.starts_with("True")) {
        return Err(bad(
            path,
            "Fortran-ordered .npy is not supported (save C order)",
        ));
    }
    let shape_txt =
        header_field(header, "shape").ok_or_else(|| bad(path, ".npy header has no 'shape'"))?;
    let shape = shape_txt
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.trim_end_matches('L')
                .parse::<usize>()
                .map_err(|_| bad(path, format!("bad .npy shape ({shape_txt})")))
        })
        .collect::<Result<Vec<usize>>>()?;
    let numel = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| bad(path, "shape overflows"))?;
    let data = &b[start + hlen..];
    let (kind, size) = match descr {
        "<f4" | "=f4" => (DType::F32, 4),
        "<f8" | "=f8" => (DType::F32, 8),
        "|u1" | "<u1" | "=u1" => (DType::U8, 1),
        "|i1" | "<i1" | "=i1" => (DType::I8, 1),
        "<i4" | "=i4" => (DType::I32, 4),
        "<i8" | "=i8" => (DType::I64, 8),
        "|b1" => (DType::Bool, 1),
        d if d.starts_with('>') => {
            return Err(bad(path, format!("big-endian .npy ({d}) is not supported")))
        }
        d => return Err(bad(path, format!("unsupported .npy dtype '{d}'"))),
    };
    let need = numel
        .checked_mul(size)
        .ok_or_else(|| bad(path, "shape overflows"))?;
    if data.len() < need {
        return Err(bad(
            path,
            format!(
                "truncated .npy data: {} bytes for shape {shape:?} ({descr}), need {need}",
                data.len()
            ),
        ));
    }
    let data = &data[..need];
    Ok(if size == 8 && kind == DType::F32 {
        let v = data
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f32)
            .collect();
        Tensor::new(shape, TensorData::F32(v))
    } else {
        Tensor::from_le_bytes(kind, shape, data)
    })
}

/// Reads a `.npy` file.
pub fn read_npy(path: &Path) -> Result<Tensor> {
    let bytes = std::fs::read(path).map_err(|e| bad(path, e.to_string()))?;
    parse_npy(path, &bytes)
}

/// Encodes a tensor as `.npy` version 1 (tests and tools).
pub fn encode_npy(t: &Tensor) -> Vec<u8> {
    let descr = match t.dtype() {
        DType::F32 => "<f4",
        DType::U8 => "|u1",
        DType::I8 => "|i1",
        DType::I32 => "<i4",
        DType::I64 => "<i8",
        DType::Bool => "|b1",
    };
    let dims = t.shape.iter().map(|d| format!("{d},")).collect::<String>();
    let mut h = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': ({dims}), }}");
    while (10 + h.len() + 1) % 64 != 0 {
        h.push(' ');
    }
    h.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(h.len() as u16).to_le_bytes());
    out.extend_from_slice(h.as_bytes());
    out.extend_from_slice(t.bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_f64_narrowing() {
        let t = Tensor::from_f32(vec![2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.5, -6.0]);
        let b = encode_npy(&t);
        let r = parse_npy(Path::new("x.npy"), &b).unwrap();
        assert_eq!(r.shape, vec![2, 3]);
        assert_eq!(r.to_f32_vec(), t.to_f32_vec());
        // f8 written by hand.
        let mut h = "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }".to_string();
        while !(10 + h.len() + 1).is_multiple_of(64) {
            h.push(' ');
        }
        h.push('\n');
        let mut b = b"\x93NUMPY\x01\x00".to_vec();
        b.extend_from_slice(&(h.len() as u16).to_le_bytes());
        b.extend_from_slice(h.as_bytes());
        b.extend_from_slice(&1.5f64.to_le_bytes());
        b.extend_from_slice(&(-2.25f64).to_le_bytes());
        let r = parse_npy(Path::new("y.npy"), &b).unwrap();
        assert_eq!(r.to_f32_vec(), vec![1.5, -2.25]);
        assert_eq!(r.dtype(), DType::F32);
    }

    #[test]
    fn bad_files_are_named_errors() {
        let e = parse_npy(Path::new("a.npy"), b"hello world").unwrap_err();
        assert!(
            e.to_string().contains("a.npy") && e.to_string().contains("magic"),
            "{e}"
        );
        let mut b = encode_npy(&Tensor::from_f32(vec![4], vec![0.0; 4]));
        b.truncate(b.len() - 3);
        let e = parse_npy(Path::new("b.npy"), &b).unwrap_err();
        assert!(e.to_string().contains("truncated"), "{e}");
    }
}
