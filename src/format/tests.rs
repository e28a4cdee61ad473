//! Unit tests of the compiled file: round trips, truncation, corruption, versions.

use super::*;
use crate::compile::{Fc, IoKind, IoLayout, IoSpec, Segment, Step};
use crate::ir::{DType, Graph, Node, Op, Placement, Tensor, UnaryOp, Value};

fn value(g: &mut Graph, name: &str) -> usize {
    g.add_value(Value {
        name: name.into(),
        dtype: DType::F32,
        shape: Some(vec![1, 4]),
        declared: None,
        konst: None,
    })
}

pub(super) fn model(name: &str) -> CompiledModel {
    let mut g = Graph {
        name: name.into(),
        ..Default::default()
    };
    let x = value(&mut g, "x");
    let w = g.add_const("w", Tensor::from_f32(vec![4], vec![1.0, 2.0, 3.0, 4.0]));
    let y = value(&mut g, "y");
    g.nodes.push(Node {
        name: "mul".into(),
        op: Op::Binary(crate::ir::BinaryOp::Mul),
        inputs: vec![Some(x), Some(w)],
        outputs: vec![y],
        absorbed: vec!["mul".into()],
        placement: Some(Placement::Bpu),
    });
    let z = value(&mut g, "z");
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
        quant: None,
    };
    let fc = |node| Fc {
        steps: vec![Step {
            node,
            tile: 0,
            tiles: 1,
        }],
        est_us: 1.0,
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
            fcs: vec![fc(0), fc(1)],
        }],
        max_time_per_fc: 1000,
        node_est_us: vec![1.0, 1.0],
        over_limit: vec![],
        precision: Default::default(),
        packed: Default::default(),
    }
}

/// Re-encodes the manifest of `bytes` after `edit`, with both checksums recomputed: what
/// someone editing a file by hand would produce.
pub(super) fn edit_manifest(
    bytes: &[u8],
    edit: impl FnOnce(&mut schema::ManifestRecord),
) -> Vec<u8> {
    let mlen = u64_at(bytes, 24) as usize;
    let woff = u64_at(bytes, 32) as usize;
    let mut rec = schema::ManifestRecord::decode(&bytes[HEADER_LEN..HEADER_LEN + mlen]).unwrap();
    edit(&mut rec);
    let m = rec.encode_to_vec();
    let new_woff = (HEADER_LEN + m.len()).div_ceil(WEIGHT_ALIGN) * WEIGHT_ALIGN;
    let mut out = vec![0u8; new_woff];
    out[..HEADER_LEN].copy_from_slice(&bytes[..HEADER_LEN]);
    out[HEADER_LEN..HEADER_LEN + m.len()].copy_from_slice(&m);
    out.extend_from_slice(&bytes[woff..]);
    out[24..32].copy_from_slice(&(m.len() as u64).to_le_bytes());
    out[32..40].copy_from_slice(&(new_woff as u64).to_le_bytes());
    let sum = manifest_checksum(&out, new_woff);
    out[48..56].copy_from_slice(&sum.to_le_bytes());
    out
}

#[test]
fn roundtrip_two_models() {
    let bytes = write_models(&[model("a"), model("b")]).unwrap();
    let back = read_models(&bytes, "mem").unwrap();
    assert_eq!(back.len(), 2);
    assert_eq!(back[1].name, "b");
    let w = back[0].graph.values[1].konst.as_ref().unwrap();
    assert!(w.data.is_mapped(), "constants are borrowed, not copied");
    assert_eq!(w.as_f32().unwrap(), &[1.0, 2.0, 3.0, 4.0]);
    assert_eq!(back[0].segments, model("a").segments);
    assert_eq!(back[0].inputs, model("a").inputs);
    assert_eq!(back[0].node_est_us, model("a").node_est_us);
    // Writing what was read gives the same bytes.
    assert_eq!(write_models(&back).unwrap(), bytes);
}

#[test]
fn the_timing_precision_round_trips_and_is_absent_for_f32() {
    use crate::exec::Precision;
    let f32_bytes = write_models(&[model("a")]).unwrap();
    let mut m = model("a");
    m.precision = Precision::Bf16;
    let bf16_bytes = write_models(&[m]).unwrap();
    // f32 writes nothing (files of earlier versions read as f32); bf16 its name.
    assert!(bf16_bytes.len() > f32_bytes.len());
    assert_eq!(
        read_models(&f32_bytes, "f32").unwrap()[0].precision,
        Precision::F32
    );
    assert_eq!(
        read_models(&bf16_bytes, "bf16").unwrap()[0].precision,
        Precision::Bf16
    );
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
    let woff = u64_at(&bytes, 32) as usize;
    for i in 0..bytes.len() {
        let mut b = bytes.clone();
        b[i] ^= 0x10;
        assert!(read_models(&b, "f").is_err(), "flip at {i} not detected");
        // Without the weights checksum, flips in the header (but the weights checksum
        // itself) and the manifest are still caught.
        if i < woff && !(56..64).contains(&i) {
            let owner = Arc::new(b.clone());
            assert!(read_shared(owner, "f", false).is_err(), "flip at {i}");
        }
    }
}

#[test]
fn foreign_newer_older_and_random_files() {
    let e = read_models(b"HBM\x01rest of a vendor model file.....", "v.hbm").unwrap_err();
    assert!(e.to_string().contains("vendor"), "{e}");
    let mut b = write_models(&[model("a")]).unwrap();
    b[8..12].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
    let e = read_models(&b, "new").unwrap_err();
    assert!(matches!(e, Error::IncompatibleModel { .. }));
    b[8..12].copy_from_slice(&1u32.to_le_bytes());
    let e = read_models(&b, "old").unwrap_err().to_string();
    assert!(
        e.contains("older format version 1: recompile with `vnpu compile`"),
        "{e}"
    );
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

#[test]
fn edited_manifests_with_recomputed_checksums_are_refused() {
    let bytes = write_models(&[model("a")]).unwrap();
    // The helper itself produces a loadable file when nothing is changed.
    assert!(read_models(&edit_manifest(&bytes, |_| {}), "same").is_ok());
    type Edit = Box<dyn Fn(&mut schema::ModelRecord)>;
    let edits: Vec<(&str, Edit)> = vec![
        ("value shape", Box::new(|m| m.values[2].shape = vec![1, 5])),
        ("node input", Box::new(|m| m.nodes[0].inputs[0] = 99)),
        ("order", Box::new(|m| m.nodes.swap(0, 1))),
        (
            "op type",
            Box::new(|m| m.nodes[1].op_type = "Softmax".into()),
        ),
        (
            "unknown op",
            Box::new(|m| m.nodes[1].op_type = "Nope".into()),
        ),
        ("segment end", Box::new(|m| m.segments[0].end = 1)),
        (
            "step tile",
            Box::new(|m| m.segments[0].fcs[0].steps[0].tiles = 2),
        ),
        (
            "step node",
            Box::new(|m| m.segments[0].fcs[1].steps[0].node = 0),
        ),
        ("io value", Box::new(|m| m.inputs[0].value = 2)),
        ("io size", Box::new(|m| m.outputs[0].byte_size = 4)),
        (
            "const shape",
            Box::new(|m| m.values[1].konst.as_mut().unwrap().shape = vec![2]),
        ),
        (
            "const offset",
            Box::new(|m| m.values[1].konst.as_mut().unwrap().offset = 4),
        ),
        (
            "const len",
            Box::new(|m| m.values[1].konst.as_mut().unwrap().len = 1 << 40),
        ),
        (
            "estimates",
            Box::new(|m| m.node_est_us.pop().map(|_| ()).unwrap_or(())),
        ),
        ("placement", Box::new(|m| m.nodes[0].placement = 2)),
        ("graph output", Box::new(|m| m.graph_outputs = vec![7])),
        ("precision", Box::new(|m| m.precision = "fp8".into())),
    ];
    for (what, f) in edits {
        let b = edit_manifest(&bytes, |r| f(&mut r.models[0]));
        let e = read_models(&b, "edited").expect_err(what);
        assert!(matches!(e, Error::ModelFormat { .. }), "{what}: {e}");
    }
}

#[test]
fn two_models_of_one_name_are_refused_with_the_name() {
    let bytes = write_models(&[model("twin"), model("twin")]).unwrap();
    let e = read_models(&bytes, "pack").unwrap_err();
    assert!(matches!(e, Error::ModelFormat { .. }));
    assert!(e.to_string().contains("two models are named 'twin'"), "{e}");
}

#[cfg(unix)]
#[test]
fn devices_fifos_and_directories_are_refused_without_blocking() {
    for p in ["/dev/zero", "/dev/null", "/tmp"] {
        let e = load_file(Path::new(p)).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{p}: {e}");
    }
    let dir = std::env::temp_dir().join(format!("vnpu_fifo_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("model.bin");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let e = load_file(&fifo).unwrap_err();
    assert!(e.to_string().contains("not a regular file"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn mapped_file_loads_and_verifies() {
    let dir = std::env::temp_dir().join(format!("vnpu_map_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("m.vnpu");
    save_models(&p, &[model("a")]).unwrap();
    let ms = load_file(&p).unwrap();
    let w = ms[0].graph.values[1].konst.as_ref().unwrap();
    assert!(w.data.is_mapped());
    assert_eq!(w.as_f32().unwrap(), &[1.0, 2.0, 3.0, 4.0]);
    verify_file(&p).unwrap();
    // A changed weight: loads (structurally sound), but verification refuses it.
    let mut b = std::fs::read(&p).unwrap();
    let last = b.len() - 1;
    b[last] ^= 1;
    std::fs::write(&p, &b).unwrap();
    assert!(load_file(&p).is_ok());
    let e = verify_file(&p).unwrap_err();
    assert!(e.to_string().contains("weights checksum"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn checksum_sees_every_byte_and_the_length() {
    let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
    let h = checksum(&data);
    for i in [0, 31, 32, 500, 999] {
        let mut d = data.clone();
        d[i] ^= 1;
        assert_ne!(checksum(&d), h, "byte {i}");
    }
    assert_ne!(checksum(&data[..999]), h);
    assert_ne!(checksum(&[]), checksum(&[0]));
}
