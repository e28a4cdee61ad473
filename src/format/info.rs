//! A description of compiled models for `vnpu info` (text and stable JSON).
//!
//! JSON schema (stable; fields are only ever added):
//! `{"vnpu_version", "format_version", "kernel_table": {"name", "mr", "nr", "lanes"},
//!   "bf16_kernels" (the bf16 table a `VNPU_PRECISION=bf16` load uses, or null),
//!   "models": [{"name", "max_time_per_fc", "est_us", "precision" ("f32"|"bf16": what the
//!   node and FC times were measured in),
//!   "inputs"/"outputs": [{"name", "valid_shape", "aligned_shape", "layout", "type",
//!   "quantization" ("none" or {"type": "scale", "axis", "scale", "zero_point"}),
//!   "aligned_byte_size"}],
//!   "segments": [{"index", "kind": "BPU"|"CPU", "first_node", "node_count", "est_us",
//!     "fcs": [{"index", "est_us", "over_limit", "steps": [{"node", "tile", "tiles"}]}]}],
//!   "nodes": [{"index", "name", "op", "placement", "est_us", "absorbed": [..], "post_ops": [..]}],
//!   "over_limit": [{"node", "name", "est_us"}]}]}`

use serde_json::{json, Value as Json};

use crate::compile::{CompiledModel, IoKind, IoLayout, IoSpec};
use crate::ir::{Placement, PostOp};

fn io_json(s: &IoSpec) -> Json {
    let ty = match s.kind {
        IoKind::Image(f) => format!("{f:?}").to_lowercase(),
        IoKind::Tensor => s.dtype.name().to_string(),
    };
    let layout = match s.layout {
        IoLayout::Nchw => "NCHW",
        IoLayout::Nhwc => "NHWC",
        IoLayout::None => "NONE",
    };
    let (ty, quantization) = match &s.quant {
        None => (ty, json!("none")),
        Some(q) => (
            q.qtype.name().to_string(),
            json!({"type": "scale", "axis": q.axis, "scale": q.scale, "zero_point": q.zero_point}),
        ),
    };
    let ty = match (s.kind, s.dtype) {
        (IoKind::Image(_), crate::ir::DType::I8) => format!("{ty} (s8: byte = pixel - 128)"),
        _ => ty,
    };
    json!({
        "name": s.name, "valid_shape": s.shape, "aligned_shape": s.shape, "layout": layout,
        "type": ty, "quantization": quantization,
        "aligned_byte_size": crate::quant::io::boundary_bytes(s),
    })
}

/// One line about an output's quantisation (`none`, or `scale axis A [s0 s1 ...]`).
fn quant_text(s: &IoSpec) -> String {
    let Some(q) = &s.quant else {
        return "none".into();
    };
    let show = |v: Vec<String>| {
        if v.len() > 4 {
            format!("{} ... ({} values)", v[..4].join(" "), v.len())
        } else {
            v.join(" ")
        }
    };
    let mut t = format!(
        "scale axis {} [{}]",
        q.axis,
        show(q.scale.iter().map(|x| format!("{x:.6e}")).collect())
    );
    if !q.zero_point.is_empty() {
        t += &format!(
            " zero_point [{}]",
            show(q.zero_point.iter().map(|z| z.to_string()).collect())
        );
    }
    t
}

fn post_name(p: &PostOp) -> String {
    match p {
        PostOp::Unary(u) => u.name().to_string(),
        PostOp::ChannelAffine { .. } => "ChannelAffine".into(),
        PostOp::ChannelPRelu { .. } => "PRelu".into(),
        PostOp::AddInput { .. } => "AddResidual".into(),
    }
}

fn kind_name(p: Placement) -> &'static str {
    match p {
        Placement::Bpu => "BPU",
        Placement::Cpu => "CPU",
    }
}

/// The JSON description of one model.
pub fn model_json(m: &CompiledModel) -> Json {
    let over: std::collections::HashSet<usize> = m.over_limit.iter().map(|o| o.node).collect();
    let limit = m.max_time_per_fc as f64;
    let segments: Vec<Json> = m
        .segments
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let fcs: Vec<Json> = s
                .fcs
                .iter()
                .enumerate()
                .map(|(k, f)| {
                    let steps: Vec<Json> =
                        f.steps.iter().map(|st| json!({"node": st.node, "tile": st.tile, "tiles": st.tiles})).collect();
                    let flagged = s.kind == Placement::Bpu
                        && limit > 0.0
                        && f.est_us > limit
                        && f.steps.iter().any(|st| over.contains(&st.node));
                    json!({"index": k, "est_us": round2(f.est_us), "over_limit": flagged, "steps": steps})
                })
                .collect();
            json!({
                "index": i, "kind": kind_name(s.kind), "first_node": s.start, "node_count": s.end - s.start,
                "est_us": round2(s.est_us()), "fcs": fcs,
            })
        })
        .collect();
    let nodes: Vec<Json> = m
        .graph
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let post: Vec<String> =
                n.op.post_ops()
                    .map(|p| p.iter().map(post_name).collect())
                    .unwrap_or_default();
            json!({
                "index": i, "name": n.name, "op": n.op.name(),
                "placement": kind_name(n.placement.unwrap_or(Placement::Bpu)),
                "est_us": round2(m.node_est_us.get(i).copied().unwrap_or(0.0)),
                "absorbed": n.absorbed, "post_ops": post,
            })
        })
        .collect();
    let over_limit: Vec<Json> = m
        .over_limit
        .iter()
        .map(|o| json!({"node": o.node, "name": m.graph.nodes.get(o.node).map(|n| n.name.clone()), "est_us": round2(o.est_us)}))
        .collect();
    json!({
        "name": m.name, "max_time_per_fc": m.max_time_per_fc, "est_us": round2(m.est_us()),
        "precision": m.precision.name(),
        "inputs": m.inputs.iter().map(io_json).collect::<Vec<_>>(),
        "outputs": m.outputs.iter().map(io_json).collect::<Vec<_>>(),
        "segments": segments, "nodes": nodes, "over_limit": over_limit,
    })
}

/// The JSON description of a file's models.
pub fn file_json(models: &[CompiledModel]) -> Json {
    json!({
        "vnpu_version": crate::VERSION,
        "format_version": super::FORMAT_VERSION,
        "kernel_table": kernel_table_json(),
        "bf16_kernels": crate::kernels::bf16::native().map(|t| t.name),
        "models": models.iter().map(model_json).collect::<Vec<_>>(),
    })
}

/// The kernel table this host runs models with (chosen by CPU detection or
/// `VNPU_KERNEL_TABLE`): name, GEMM tile and vector width.
fn kernel_table_json() -> Json {
    let t = crate::kernels::isa::table();
    json!({ "name": t.name, "mr": t.mr, "nr": t.nr, "lanes": t.lanes })
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// A human-readable description of a file's models.
pub fn file_text(models: &[CompiledModel]) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let t = crate::kernels::isa::table();
    let _ = writeln!(
        s,
        "kernel table on this host: {} (GEMM tile {}x{}, {} f32 lanes)",
        t.name, t.mr, t.nr, t.lanes
    );
    let bf16 = crate::kernels::bf16::native().map_or("none on this CPU", |t| t.name);
    let _ = writeln!(s, "bf16 kernels (VNPU_PRECISION=bf16): {bf16}");
    for m in models {
        let _ = writeln!(
            s,
            "model {}  (max_time_per_fc {} us, estimated {:.0} us, times measured in {})",
            m.name,
            m.max_time_per_fc,
            m.est_us(),
            m.precision.name()
        );
        for (title, list) in [("input", &m.inputs), ("output", &m.outputs)] {
            for io in list.iter() {
                let j = io_json(io);
                let _ = writeln!(
                    s,
                    "  {title:<6} {:<20} shape {:?} layout {} type {} quant {} bytes {}",
                    io.name,
                    io.shape,
                    j["layout"].as_str().unwrap_or(""),
                    j["type"].as_str().unwrap_or(""),
                    quant_text(io),
                    j["aligned_byte_size"]
                );
            }
        }
        for (i, seg) in m.segments.iter().enumerate() {
            let _ = writeln!(
                s,
                "  segment {i}: {} nodes {}..{} ({} nodes), {} FC(s), {:.0} us",
                kind_name(seg.kind),
                seg.start,
                seg.end,
                seg.end - seg.start,
                seg.fcs.len(),
                seg.est_us()
            );
            if seg.kind == Placement::Bpu {
                for (k, fc) in seg.fcs.iter().enumerate() {
                    let first = fc.steps.first().map(|st| st.node).unwrap_or(0);
                    let last = fc.steps.last().map(|st| st.node).unwrap_or(0);
                    let _ = writeln!(
                        s,
                        "    fc {k}: nodes {first}..={last}, {} steps, {:.0} us",
                        fc.steps.len(),
                        fc.est_us
                    );
                }
            }
        }
        for (i, n) in m.graph.nodes.iter().enumerate() {
            let post: Vec<String> =
                n.op.post_ops()
                    .map(|p| p.iter().map(post_name).collect())
                    .unwrap_or_default();
            let fused = if post.is_empty() {
                String::new()
            } else {
                format!(" +{}", post.join("+"))
            };
            let _ = writeln!(
                s,
                "  node {i:>4} {:<3} {:<18} {:>9.1} us  {}  [{}]",
                kind_name(n.placement.unwrap_or(Placement::Bpu)),
                format!("{}{}", n.op.name(), fused),
                m.node_est_us.get(i).copied().unwrap_or(0.0),
                n.name,
                n.absorbed.join(", ")
            );
        }
        for o in &m.over_limit {
            let name = m
                .graph
                .nodes
                .get(o.node)
                .map(|n| n.name.as_str())
                .unwrap_or("?");
            let _ = writeln!(
                s,
                "  WARNING: node {} ({name}) cannot be split below the limit: {:.0} us",
                o.node, o.est_us
            );
        }
    }
    s
}
