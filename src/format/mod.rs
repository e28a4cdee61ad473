//! The compiled model file: write, load (mmap) and validate.
//!
//! Layout (little-endian):
//! ```text
//! 0   magic      8  b"VNPUMODL"
//! 8   version    4  FORMAT_VERSION
//! 12  header     4  HEADER_LEN (64)
//! 16  manifest   8+8 offset, length   (bincode: names, graphs without weights, segments, FCs)
//! 32  weights    8+8 offset, length   (every constant, each 64-byte aligned)
//! 48  checksum   8  hash of bytes [64, end)
//! 56  reserved   8  zero
//! ```
//! A file holds one or more models (a packed model). Loading checks, in order: size,
//! magic, version, header fields, bounds, checksum, then decodes the manifest with a size
//! limit and checks every constant's range, alignment and element count before any slice
//! is made. A mapped file is untrusted input: no path panics on it.

pub mod info;

use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::compile::CompiledModel;
use crate::error::{Error, Result};
use crate::ir::{DType, Tensor, TensorData};

/// File magic.
pub const MAGIC: &[u8; 8] = b"VNPUMODL";
/// Current format version; files with a larger one are refused as incompatible.
pub const FORMAT_VERSION: u32 = 1;
/// Header size in bytes.
pub const HEADER_LEN: usize = 64;
/// Alignment of every constant in the weights section.
pub const WEIGHT_ALIGN: usize = 64;

/// Where one constant lives in the weights section.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ConstEntry {
    value: usize,
    dtype: DType,
    shape: Vec<usize>,
    offset: u64,
    len: u64,
}

/// The manifest: models without weights, plus where each model's constants live.
#[derive(Debug, Serialize, Deserialize)]
struct Manifest {
    vnpu_version: String,
    models: Vec<CompiledModel>,
    consts: Vec<Vec<ConstEntry>>,
}

/// A 64-bit hash over the bytes, 8 at a time (fast enough for 100 MB files).
pub fn checksum(data: &[u8]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut h: u64 = 0xCBF2_9CE4_8422_2325 ^ (data.len() as u64).wrapping_mul(K);
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        h = (h ^ w).wrapping_mul(K);
        h ^= h >> 31;
    }
    for &b in chunks.remainder() {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01B3);
    }
    h ^ (h >> 29)
}

fn tensor_bytes(t: &Tensor) -> &[u8] {
    match &t.data {
        TensorData::F32(v) => bytemuck::cast_slice(v),
        TensorData::U8(v) | TensorData::Bool(v) => v,
        TensorData::I8(v) => bytemuck::cast_slice(v),
        TensorData::I32(v) => bytemuck::cast_slice(v),
        TensorData::I64(v) => bytemuck::cast_slice(v),
    }
}

/// Serialises models into the file format.
pub fn write_models(models: &[CompiledModel]) -> Result<Vec<u8>> {
    let mut weights: Vec<u8> = Vec::new();
    let mut consts = Vec::new();
    let mut stripped = Vec::new();
    for m in models {
        let mut entries = Vec::new();
        let mut m2 = m.clone();
        for (vi, val) in m2.graph.values.iter_mut().enumerate() {
            if let Some(t) = val.konst.take() {
                let pad = (WEIGHT_ALIGN - weights.len() % WEIGHT_ALIGN) % WEIGHT_ALIGN;
                weights.resize(weights.len() + pad, 0);
                let b = tensor_bytes(&t);
                entries.push(ConstEntry {
                    value: vi,
                    dtype: t.dtype(),
                    shape: t.shape.clone(),
                    offset: weights.len() as u64,
                    len: b.len() as u64,
                });
                weights.extend_from_slice(b);
            }
        }
        consts.push(entries);
        stripped.push(m2);
    }
    let manifest = Manifest {
        vnpu_version: crate::VERSION.to_string(),
        models: stripped,
        consts,
    };
    let mbytes = bincode::serialize(&manifest).map_err(|e| Error::ModelFormat {
        path: "<memory>".into(),
        reason: format!("cannot encode manifest: {e}"),
    })?;
    let manifest_off = HEADER_LEN;
    let weights_off = (manifest_off + mbytes.len()).div_ceil(WEIGHT_ALIGN) * WEIGHT_ALIGN;
    let mut out = vec![0u8; weights_off + weights.len()];
    out[manifest_off..manifest_off + mbytes.len()].copy_from_slice(&mbytes);
    out[weights_off..].copy_from_slice(&weights);
    out[0..8].copy_from_slice(MAGIC);
    out[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    out[12..16].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
    out[16..24].copy_from_slice(&(manifest_off as u64).to_le_bytes());
    out[24..32].copy_from_slice(&(mbytes.len() as u64).to_le_bytes());
    out[32..40].copy_from_slice(&(weights_off as u64).to_le_bytes());
    out[40..48].copy_from_slice(&(weights.len() as u64).to_le_bytes());
    let sum = checksum(&out[HEADER_LEN..]);
    out[48..56].copy_from_slice(&sum.to_le_bytes());
    Ok(out)
}

/// Writes models to a file.
pub fn save_models(path: &Path, models: &[CompiledModel]) -> Result<()> {
    let bytes = write_models(models)?;
    std::fs::write(path, bytes).map_err(|e| Error::Io {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// True when the bytes start with our magic.
pub fn is_compiled(bytes: &[u8]) -> bool {
    bytes.len() >= 8 && &bytes[..8] == MAGIC
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Recognisable foreign formats, for a better message.
fn foreign_kind(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"HBM")
        || bytes.starts_with(b"HORIZON")
        || bytes.windows(7).take(256).any(|w| w == b"HORIZON")
    {
        return Some(
            "a vendor NPU model (.bin/.hbm); recompile the ONNX model with `vnpu compile`",
        );
    }
    if bytes.starts_with(b"\x7fELF") {
        return Some("an ELF binary");
    }
    if bytes.starts_with(b"PK\x03\x04") {
        return Some("a zip archive");
    }
    None
}

/// Loads and validates models from file bytes; `path` is used in messages only.
pub fn read_models(bytes: &[u8], path: &str) -> Result<Vec<CompiledModel>> {
    let bad = |reason: String| Error::ModelFormat {
        path: path.to_string(),
        reason,
    };
    if bytes.is_empty() {
        return Err(bad("the file is empty".into()));
    }
    if bytes.len() < 8 || &bytes[..8] != MAGIC {
        let what = foreign_kind(bytes).unwrap_or("not a vnpu compiled model (bad magic)");
        return Err(bad(what.into()));
    }
    if bytes.len() < HEADER_LEN {
        return Err(bad(format!(
            "truncated: {} bytes, the header alone is {HEADER_LEN}",
            bytes.len()
        )));
    }
    let version = u32_at(bytes, 8);
    if version > FORMAT_VERSION {
        return Err(Error::IncompatibleModel {
            path: path.to_string(),
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    if version == 0 || u32_at(bytes, 12) as usize != HEADER_LEN {
        return Err(bad("corrupted header".into()));
    }
    let (moff, mlen) = (u64_at(bytes, 16), u64_at(bytes, 24));
    let (woff, wlen) = (u64_at(bytes, 32), u64_at(bytes, 40));
    let total = bytes.len() as u64;
    let end_of = |off: u64, len: u64| off.checked_add(len).filter(|&e| e <= total);
    let (Some(mend), Some(wend)) = (end_of(moff, mlen), end_of(woff, wlen)) else {
        return Err(bad(format!(
            "truncated: sections end past the file's {total} bytes"
        )));
    };
    if moff < HEADER_LEN as u64 || woff < mend || wend != total || woff % WEIGHT_ALIGN as u64 != 0 {
        return Err(bad("corrupted header: inconsistent section offsets".into()));
    }
    let want = u64_at(bytes, 48);
    if checksum(&bytes[HEADER_LEN..]) != want {
        return Err(bad("checksum mismatch: the file is corrupted".into()));
    }
    use bincode::Options;
    let manifest: Manifest = bincode::DefaultOptions::new()
        .with_fixint_encoding()
        .with_limit(mlen)
        .deserialize(&bytes[moff as usize..mend as usize])
        .map_err(|e| bad(format!("manifest cannot be decoded: {e}")))?;
    if manifest.models.len() != manifest.consts.len() || manifest.models.is_empty() {
        return Err(bad(
            "manifest holds no model or mismatched constant tables".into()
        ));
    }
    let weights = &bytes[woff as usize..wend as usize];
    let mut models = manifest.models;
    for (m, entries) in models.iter_mut().zip(manifest.consts) {
        for e in entries {
            let numel = e.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
            let ok = numel.and_then(|n| n.checked_mul(e.dtype.size())) == Some(e.len as usize)
                && e.offset.checked_add(e.len).is_some_and(|x| x <= wlen)
                && e.value < m.graph.values.len();
            if !ok {
                return Err(bad(format!(
                    "constant #{} of model '{}' is out of bounds",
                    e.value, m.name
                )));
            }
            let raw = &weights[e.offset as usize..(e.offset + e.len) as usize];
            let data = match e.dtype {
                DType::F32 => TensorData::F32(
                    raw.chunks_exact(4)
                        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                        .collect(),
                ),
                DType::I32 => TensorData::I32(
                    raw.chunks_exact(4)
                        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                        .collect(),
                ),
                DType::I64 => TensorData::I64(
                    raw.chunks_exact(8)
                        .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                        .collect(),
                ),
                DType::U8 => TensorData::U8(raw.to_vec()),
                DType::Bool => TensorData::Bool(raw.to_vec()),
                DType::I8 => TensorData::I8(raw.iter().map(|&b| b as i8).collect()),
            };
            m.graph.values[e.value].konst = Some(Arc::new(Tensor {
                shape: e.shape,
                data,
            }));
        }
        validate_model(m).map_err(|r| bad(format!("model '{}': {r}", m.name)))?;
    }
    Ok(models)
}

/// Structural checks on a decoded model: indices in range, FCs covering segments.
fn validate_model(m: &CompiledModel) -> std::result::Result<(), String> {
    let nv = m.graph.values.len();
    let nn = m.graph.nodes.len();
    for n in &m.graph.nodes {
        if n.inputs
            .iter()
            .flatten()
            .chain(n.outputs.iter())
            .any(|&v| v >= nv)
        {
            return Err(format!("node '{}' references a missing value", n.name));
        }
    }
    if m.graph
        .inputs
        .iter()
        .chain(&m.graph.outputs)
        .any(|&v| v >= nv)
    {
        return Err("graph inputs/outputs reference missing values".into());
    }
    if m.inputs.len() != m.graph.inputs.len() || m.outputs.len() != m.graph.outputs.len() {
        return Err("boundary description does not match the graph".into());
    }
    let mut next = 0;
    for s in &m.segments {
        if s.start != next || s.end < s.start || s.end > nn || s.fcs.is_empty() {
            return Err("segments do not cover the nodes in order".into());
        }
        for fc in &s.fcs {
            for st in &fc.steps {
                if st.node < s.start || st.node >= s.end || st.tiles == 0 || st.tile >= st.tiles {
                    return Err("an FC step is outside its segment".into());
                }
            }
        }
        next = s.end;
    }
    if next != nn {
        return Err("segments do not cover every node".into());
    }
    if m.node_est_us.len() != nn {
        return Err("node estimates do not match the nodes".into());
    }
    Ok(())
}

/// Reads and validates a compiled model file through a read-only memory map.
pub fn load_file(path: &Path) -> Result<Vec<CompiledModel>> {
    let file = std::fs::File::open(path).map_err(|e| Error::Io {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let shown = path.display().to_string();
    if len == 0 {
        return read_models(&[], &shown);
    }
    // SAFETY: the map is read-only and private to this call; the bytes are treated as
    // untrusted input and fully validated. A concurrent truncation of the file by another
    // process could fault; model files are not expected to change while loading.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::Io {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    read_models(&map, &shown)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::{Fc, Step};
    use crate::compile::{IoKind, IoLayout, IoSpec, Segment};
    use crate::ir::{Graph, Node, Op, Placement, UnaryOp, Value};

    fn model(name: &str) -> CompiledModel {
        let mut g = Graph {
            name: name.into(),
            ..Default::default()
        };
        let x = g.add_value(Value {
            name: "x".into(),
            dtype: DType::F32,
            shape: Some(vec![1, 4]),
            declared: None,
            konst: None,
        });
        let w = g.add_const("w", Tensor::from_f32(vec![4], vec![1.0, 2.0, 3.0, 4.0]));
        let y = g.add_value(Value {
            name: "y".into(),
            dtype: DType::F32,
            shape: Some(vec![1, 4]),
            declared: None,
            konst: None,
        });
        g.nodes.push(Node {
            name: "mul".into(),
            op: Op::Binary(crate::ir::BinaryOp::Mul),
            inputs: vec![Some(x), Some(w)],
            outputs: vec![y],
            absorbed: vec!["mul".into()],
            placement: Some(Placement::Bpu),
        });
        let z = g.add_value(Value {
            name: "z".into(),
            dtype: DType::F32,
            shape: Some(vec![1, 4]),
            declared: None,
            konst: None,
        });
        g.nodes.push(Node {
            name: "relu".into(),
            op: Op::Unary(UnaryOp::Relu),
            inputs: vec![Some(y)],
            outputs: vec![z],
            absorbed: vec!["relu".into()],
            placement: Some(Placement::Bpu),
        });
        g.inputs = vec![x];
        g.outputs = vec![z];
        let spec = |n: &str, v| IoSpec {
            name: n.into(),
            value: v,
            kind: IoKind::Tensor,
            dtype: DType::F32,
            layout: IoLayout::None,
            shape: vec![1, 4],
            byte_size: 16,
        };
        CompiledModel {
            name: name.into(),
            inputs: vec![spec("x", x)],
            outputs: vec![spec("z", z)],
            graph: g,
            segments: vec![Segment {
                kind: Placement::Bpu,
                start: 0,
                end: 2,
                fcs: vec![
                    Fc {
                        steps: vec![Step {
                            node: 0,
                            tile: 0,
                            tiles: 1,
                        }],
                        est_us: 1.0,
                    },
                    Fc {
                        steps: vec![Step {
                            node: 1,
                            tile: 0,
                            tiles: 1,
                        }],
                        est_us: 1.0,
                    },
                ],
            }],
            max_time_per_fc: 1000,
            node_est_us: vec![1.0, 1.0],
            over_limit: vec![],
        }
    }

    #[test]
    fn roundtrip_two_models() {
        let bytes = write_models(&[model("a"), model("b")]).unwrap();
        let back = read_models(&bytes, "mem").unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back[1].name, "b");
        let w = back[0].graph.values[1].konst.as_ref().unwrap();
        assert_eq!(w.as_f32().unwrap(), &[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(back[0].segments, model("a").segments);
    }

    #[test]
    fn every_truncation_is_a_clean_error() {
        let bytes = write_models(&[model("a")]).unwrap();
        for len in 0..bytes.len() {
            let e = read_models(&bytes[..len], "t").unwrap_err();
            assert!(matches!(e, Error::ModelFormat { .. }), "len {len}: {e}");
        }
    }

    #[test]
    fn every_bit_flip_is_detected() {
        let bytes = write_models(&[model("a")]).unwrap();
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x10;
            assert!(read_models(&b, "f").is_err(), "flip at {i} not detected");
        }
    }

    #[test]
    fn foreign_newer_and_random_files() {
        let e = read_models(b"HBM\x01rest of a vendor model file.....", "v.hbm").unwrap_err();
        assert!(e.to_string().contains("vendor"), "{e}");
        let mut b = write_models(&[model("a")]).unwrap();
        b[8..12].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
        let e = read_models(&b, "new").unwrap_err();
        assert!(matches!(e, Error::IncompatibleModel { .. }));
        let mut s = 12345u64;
        for n in [1usize, 63, 64, 65, 1000] {
            let junk: Vec<u8> = (0..n)
                .map(|_| {
                    s = s.wrapping_mul(6364136223846793005).wrapping_add(1);
                    (s >> 33) as u8
                })
                .collect();
            assert!(read_models(&junk, "r").is_err());
            let mut with_magic = MAGIC.to_vec();
            with_magic.extend_from_slice(&junk);
            assert!(read_models(&with_magic, "r").is_err());
        }
        assert!(read_models(&[], "empty")
            .unwrap_err()
            .to_string()
            .contains("empty"));
    }
}
