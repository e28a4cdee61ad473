//! Conversion between compiled models and their manifest records ([`super::schema`]);
//! constants go to (and are borrowed back from) the weights section.
//!
//! Decoding checks what a record alone can be wrong about (codes, names, ranges of the
//! constants in the weights section); how the pieces fit together is [`super::validate`]'s.

use std::sync::Arc;

use super::ops::{decode_op, encode_op, image_format_from_name, image_format_name, to_usizes};
use super::schema::*;
use super::WEIGHT_ALIGN;
use crate::compile::{CompiledModel, Fc, IoKind, IoLayout, IoSpec, OverLimit, Segment, Step};
use crate::exec::{PackGeometry, PackedWeights};
use crate::ir::{DType, Graph, Node, Op, Placement, SharedBytes, Tensor, Value};
use crate::kernels::packed::WeightBuf;
use crate::quant::io::{OutputQuant, QType};

/// The weights section of a loaded file.
pub(super) struct Weights {
    /// The whole file's bytes.
    pub(super) owner: Arc<dyn AsRef<[u8]> + Send + Sync>,
    /// Where the weights section is in them.
    pub(super) range: std::ops::Range<usize>,
}

fn placement_code(p: Option<Placement>) -> i32 {
    match p {
        None => 0,
        Some(Placement::Bpu) => 1,
        Some(Placement::Cpu) => 2,
    }
}

fn placement_of(code: i32) -> Result<Option<Placement>, String> {
    match code {
        0 => Ok(None),
        1 => Ok(Some(Placement::Bpu)),
        2 => Ok(Some(Placement::Cpu)),
        c => Err(format!("unknown placement code {c}")),
    }
}

fn dtype_of(code: i32) -> Result<DType, String> {
    DType::from_onnx_code(code).ok_or_else(|| format!("unknown element type code {code}"))
}

fn dims(v: &[usize]) -> Vec<u64> {
    v.iter().map(|&d| d as u64).collect()
}

fn usizes(v: &[u64], what: &str) -> Result<Vec<usize>, String> {
    to_usizes(v).ok_or_else(|| format!("{what} does not fit this host"))
}

fn index(v: u64, what: &str) -> Result<usize, String> {
    usize::try_from(v).map_err(|_| format!("{what} {v} does not fit this host"))
}

fn io_record(s: &IoSpec, value: u64) -> IoRecord {
    IoRecord {
        name: s.name.clone(),
        value,
        kind: match s.kind {
            IoKind::Tensor => "tensor".into(),
            IoKind::Image(f) => image_format_name(f).into(),
        },
        dtype: s.dtype.onnx_code(),
        layout: match s.layout {
            IoLayout::Nchw => "NCHW",
            IoLayout::Nhwc => "NHWC",
            IoLayout::None => "NONE",
        }
        .into(),
        shape: dims(&s.shape),
        byte_size: s.byte_size as u64,
        quant: s.quant.as_ref().map(|q| OutputQuantRecord {
            qtype: q.qtype.name().into(),
            axis: q.axis as u64,
            scale: q.scale.clone(),
            zero_point: q.zero_point.iter().map(|&z| z as i32).collect(),
        }),
    }
}

fn output_quant(r: &OutputQuantRecord, shape: &[usize]) -> Result<OutputQuant, String> {
    let q = OutputQuant {
        qtype: QType::from_name(&r.qtype)
            .ok_or_else(|| format!("unknown quantised type '{}'", r.qtype))?,
        axis: index(r.axis, "quantize axis")?,
        scale: r.scale.clone(),
        zero_point: r
            .zero_point
            .iter()
            .map(|&z| i8::try_from(z).map_err(|_| format!("zero point {z} is not int8")))
            .collect::<Result<_, _>>()?,
    };
    q.check(shape)?;
    Ok(q)
}

fn io_spec(r: &IoRecord) -> Result<IoSpec, String> {
    let kind = match r.kind.as_str() {
        "tensor" => IoKind::Tensor,
        k => IoKind::Image(
            image_format_from_name(k).ok_or_else(|| format!("unknown boundary kind '{k}'"))?,
        ),
    };
    let layout = match r.layout.as_str() {
        "NCHW" => IoLayout::Nchw,
        "NHWC" => IoLayout::Nhwc,
        "NONE" => IoLayout::None,
        l => return Err(format!("unknown layout '{l}'")),
    };
    let shape = usizes(&r.shape, "boundary shape")?;
    let quant = r
        .quant
        .as_ref()
        .map(|q| output_quant(q, &shape).map_err(|e| format!("output '{}': {e}", r.name)))
        .transpose()?;
    let dtype = dtype_of(r.dtype)?;
    if quant.is_some() && dtype != DType::F32 {
        return Err(format!("output '{}' is quantised but not f32", r.name));
    }
    Ok(IoSpec {
        name: r.name.clone(),
        value: index(r.value, "boundary value")?,
        kind,
        dtype,
        layout,
        shape,
        byte_size: index(r.byte_size, "boundary byte size")?,
        quant,
    })
}

/// Appends `b` to the weights section at the next aligned offset (little-endian
/// elements of `size` bytes); returns the offset.
fn append_aligned(weights: &mut Vec<u8>, b: &[u8], size: usize) -> u64 {
    let pad = (WEIGHT_ALIGN - weights.len() % WEIGHT_ALIGN) % WEIGHT_ALIGN;
    weights.resize(weights.len() + pad, 0);
    let offset = weights.len() as u64;
    if cfg!(target_endian = "little") {
        weights.extend_from_slice(b);
    } else {
        weights.extend(b.chunks_exact(size).flat_map(|c| c.iter().rev()));
    }
    offset
}

/// The record of `packed`, its buffers appended to `weights`; `None` when empty.
fn encode_packed(packed: &PackedWeights, weights: &mut Vec<u8>) -> Option<PackedWeightsRecord> {
    if packed.is_empty() {
        return None;
    }
    let g = &packed.geometry;
    Some(PackedWeightsRecord {
        table: g.table.clone(),
        mr: g.mr as u64,
        nr: g.nr as u64,
        kc: g.kc as u64,
        revision: g.revision,
        blobs: packed
            .nodes
            .iter()
            .map(|(node, buf)| {
                let b: &[u8] = bytemuck::cast_slice(&buf[..]);
                PackedBlobRecord {
                    node: *node as u64,
                    offset: append_aligned(weights, b, 4),
                    len: b.len() as u64,
                }
            })
            .collect(),
    })
}

/// The packed weights of a record, borrowed from `w` after checking every buffer's node
/// (an existing Conv, Gemm or MatMul, in increasing order), range, size and alignment.
/// Empty when there are none, or when they cannot be borrowed on this host (big-endian):
/// the plan then packs the weights itself.
fn decode_packed(
    r: Option<&PackedWeightsRecord>,
    nodes: &[Node],
    w: &Weights,
) -> Result<PackedWeights, String> {
    let Some(r) = r else {
        return Ok(PackedWeights::default());
    };
    let geometry = PackGeometry {
        table: r.table.clone(),
        mr: index(r.mr, "packed mr")?,
        nr: index(r.nr, "packed nr")?,
        kc: index(r.kc, "packed kc")?,
        revision: r.revision,
    };
    let wlen = (w.range.end - w.range.start) as u64;
    let mut out = Vec::with_capacity(r.blobs.len());
    for b in &r.blobs {
        let node = index(b.node, "packed weights node")?;
        let n = nodes
            .get(node)
            .ok_or_else(|| format!("packed weights name node {node}, which does not exist"))?;
        if !matches!(n.op, Op::Conv { .. } | Op::Gemm { .. } | Op::MatMul { .. }) {
            return Err(format!(
                "packed weights on node '{}', a {} (only Conv, Gemm and MatMul have them)",
                n.name,
                n.op.name()
            ));
        }
        if out.last().is_some_and(|(p, _)| *p >= node) {
            return Err("packed weights are not in increasing node order".into());
        }
        let in_range = b.offset.checked_add(b.len).is_some_and(|e| e <= wlen);
        if !in_range || b.offset % WEIGHT_ALIGN as u64 != 0 || b.len % 4 != 0 {
            return Err(format!(
                "packed weights of node '{}' are out of bounds, misaligned or of a wrong size",
                n.name
            ));
        }
        // In range of the weights section, hence of the file (a usize-sized buffer).
        let start = w.range.start + b.offset as usize;
        let bytes = SharedBytes::new(w.owner.clone(), start..start + b.len as usize)
            .ok_or("packed weights are out of bounds")?;
        match WeightBuf::shared(bytes) {
            Some(buf) => out.push((node, buf)),
            None => return Ok(PackedWeights::default()),
        }
    }
    Ok(PackedWeights {
        geometry,
        nodes: out,
    })
}

/// The record of one model; its constants, then its `packed` weights, are appended to
/// `weights`, each aligned. Constants no node or output reads (left behind by compiler
/// passes) are not stored: values are renumbered without them.
pub(super) fn encode_model(
    m: &CompiledModel,
    packed: &PackedWeights,
    weights: &mut Vec<u8>,
) -> Result<ModelRecord, String> {
    let uses = m.graph.use_counts();
    let mut new_id = vec![u64::MAX; m.graph.values.len()];
    let mut values = Vec::with_capacity(m.graph.values.len());
    for (i, v) in m.graph.values.iter().enumerate() {
        if v.konst.is_some() && uses[i] == 0 {
            continue;
        }
        new_id[i] = values.len() as u64;
        let konst = v.konst.as_ref().map(|t| {
            let b = t.bytes();
            let offset = append_aligned(weights, b, t.dtype().size());
            ConstRecord {
                dtype: t.dtype().onnx_code(),
                shape: dims(&t.shape),
                offset,
                len: b.len() as u64,
            }
        });
        values.push(ValueRecord {
            name: v.name.clone(),
            dtype: v.dtype.onnx_code(),
            has_shape: v.shape.is_some(),
            shape: v.shape.as_deref().map(dims).unwrap_or_default(),
            has_declared: v.declared.is_some(),
            declared: v
                .declared
                .iter()
                .flatten()
                .map(|d| d.map_or(-1, |x| x as i64))
                .collect(),
            konst,
        });
    }
    let id = |v: usize| new_id.get(v).copied().unwrap_or(u64::MAX);
    let mut nodes = Vec::with_capacity(m.graph.nodes.len());
    for n in &m.graph.nodes {
        let (op_type, attrs) = encode_op(&n.op).map_err(|e| format!("node '{}': {e}", n.name))?;
        nodes.push(NodeRecord {
            name: n.name.clone(),
            op_type,
            attrs,
            inputs: n
                .inputs
                .iter()
                .map(|i| i.map_or(-1, |v| id(v) as i64))
                .collect(),
            outputs: n.outputs.iter().map(|&v| id(v)).collect(),
            absorbed: n.absorbed.clone(),
            placement: placement_code(n.placement),
        });
    }
    let segments = m
        .segments
        .iter()
        .map(|s| SegmentRecord {
            kind: placement_code(Some(s.kind)),
            start: s.start as u64,
            end: s.end as u64,
            fcs: s
                .fcs
                .iter()
                .map(|f| FcRecord {
                    steps: f
                        .steps
                        .iter()
                        .map(|st| StepRecord {
                            node: st.node as u64,
                            tile: st.tile,
                            tiles: st.tiles,
                        })
                        .collect(),
                    est_us: f.est_us,
                })
                .collect(),
        })
        .collect();
    Ok(ModelRecord {
        name: m.name.clone(),
        graph_name: m.graph.name.clone(),
        values,
        nodes,
        graph_inputs: m.graph.inputs.iter().map(|&v| id(v)).collect(),
        graph_outputs: m.graph.outputs.iter().map(|&v| id(v)).collect(),
        inputs: m.inputs.iter().map(|s| io_record(s, id(s.value))).collect(),
        outputs: m
            .outputs
            .iter()
            .map(|s| io_record(s, id(s.value)))
            .collect(),
        segments,
        max_time_per_fc: m.max_time_per_fc,
        node_est_us: m.node_est_us.clone(),
        over_limit: m
            .over_limit
            .iter()
            .map(|o| OverLimitRecord {
                node: o.node as u64,
                est_us: o.est_us,
            })
            .collect(),
        packed: encode_packed(packed, weights),
        precision: match m.precision {
            crate::exec::Precision::F32 => String::new(),
            p => p.name().into(),
        },
    })
}

/// A constant borrowed from the weights section, after checking its range, size and
/// alignment.
fn constant(c: &ConstRecord, w: &Weights) -> Result<Tensor, String> {
    let dtype = dtype_of(c.dtype)?;
    let shape = usizes(&c.shape, "constant shape")?;
    let numel = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    let size = numel.and_then(|n| n.checked_mul(dtype.size()));
    let wlen = (w.range.end - w.range.start) as u64;
    let in_range = c.offset.checked_add(c.len).is_some_and(|e| e <= wlen);
    if size.map(|s| s as u64) != Some(c.len)
        || !in_range
        || !c.offset.is_multiple_of(WEIGHT_ALIGN as u64)
    {
        return Err("a constant is out of bounds, misaligned or of the wrong size".into());
    }
    // In range of the weights section, hence of the file (a usize-sized buffer).
    let start = w.range.start + c.offset as usize;
    let range = start..start + c.len as usize;
    let bytes =
        SharedBytes::new(w.owner.clone(), range.clone()).ok_or("a constant is out of bounds")?;
    match Tensor::mapped(shape.clone(), dtype, bytes) {
        Some(t) => Ok(t),
        // A big-endian host (or an owner that is not aligned): copy.
        None => Ok(Tensor::from_le_bytes(
            dtype,
            shape,
            &(*w.owner).as_ref()[range],
        )),
    }
}

/// The compiled model of a record; constants are views into `weights`.
pub(super) fn decode_model(r: ModelRecord, weights: &Weights) -> Result<CompiledModel, String> {
    let mut values = Vec::with_capacity(r.values.len());
    for (i, v) in r.values.iter().enumerate() {
        let konst = match &v.konst {
            Some(c) => Some(Arc::new(
                constant(c, weights).map_err(|e| format!("value #{i} '{}': {e}", v.name))?,
            )),
            None => None,
        };
        let declared = v.has_declared.then(|| {
            v.declared
                .iter()
                .map(|&d| usize::try_from(d).ok())
                .collect::<Vec<_>>()
        });
        values.push(Value {
            name: v.name.clone(),
            dtype: dtype_of(v.dtype)?,
            shape: if v.has_shape {
                Some(usizes(&v.shape, "value shape")?)
            } else {
                None
            },
            declared,
            konst,
        });
    }
    let mut nodes = Vec::with_capacity(r.nodes.len());
    for n in &r.nodes {
        let op = decode_op(&n.op_type, &n.attrs).map_err(|e| format!("node '{}': {e}", n.name))?;
        let inputs = n
            .inputs
            .iter()
            .map(|&i| match i {
                -1 => Ok(None),
                i => usize::try_from(i)
                    .map(Some)
                    .map_err(|_| format!("node '{}': bad input index {i}", n.name)),
            })
            .collect::<Result<Vec<_>, String>>()?;
        nodes.push(Node {
            name: n.name.clone(),
            op,
            inputs,
            outputs: usizes(&n.outputs, "node output")?,
            absorbed: n.absorbed.clone(),
            placement: placement_of(n.placement)?,
        });
    }
    let packed = decode_packed(r.packed.as_ref(), &nodes, weights)?;
    let mut segments = Vec::with_capacity(r.segments.len());
    for s in &r.segments {
        let kind = placement_of(s.kind)?.ok_or("a segment has no placement")?;
        let mut fcs = Vec::with_capacity(s.fcs.len());
        for f in &s.fcs {
            let steps = f
                .steps
                .iter()
                .map(|st| {
                    Ok(Step {
                        node: index(st.node, "step node")?,
                        tile: st.tile,
                        tiles: st.tiles,
                    })
                })
                .collect::<Result<Vec<_>, String>>()?;
            fcs.push(Fc {
                steps,
                est_us: f.est_us,
            });
        }
        segments.push(Segment {
            kind,
            start: index(s.start, "segment start")?,
            end: index(s.end, "segment end")?,
            fcs,
        });
    }
    let precision = crate::exec::Precision::parse(&r.precision)
        .ok_or_else(|| format!("unknown precision '{}'", r.precision))?;
    Ok(CompiledModel {
        precision,
        name: r.name,
        graph: Graph {
            name: r.graph_name,
            values,
            nodes,
            inputs: usizes(&r.graph_inputs, "graph input")?,
            outputs: usizes(&r.graph_outputs, "graph output")?,
        },
        segments,
        inputs: r
            .inputs
            .iter()
            .map(|i| match i.quant {
                Some(_) => Err(format!("input '{}' has an output quantisation", i.name)),
                None => io_spec(i),
            })
            .collect::<Result<_, _>>()?,
        outputs: r.outputs.iter().map(io_spec).collect::<Result<_, _>>()?,
        max_time_per_fc: r.max_time_per_fc,
        node_est_us: r.node_est_us,
        over_limit: r
            .over_limit
            .iter()
            .map(|o| {
                Ok(OverLimit {
                    node: index(o.node, "over-limit node")?,
                    est_us: o.est_us,
                })
            })
            .collect::<Result<_, String>>()?,
        packed,
    })
}
