//! Semantic validation of a decoded compiled model: everything the executor and the
//! scheduler rely on is checked against the graph the manifest describes, so that a
//! file whose manifest was edited (and its checksum recomputed) is refused at load
//! instead of failing an invariant at inference.
//!
//! Checked: every value index; values produced once, in topological order, constants
//! and graph inputs never overwritten; constants' type and shape equal to their value's;
//! every node's output types and shapes re-inferred with [`crate::ir::shape::infer_node`]
//! and equal to the declared ones; fused residual inputs present; boundary specs on the
//! graph's inputs/outputs with matching type and byte size; segments contiguous and
//! covering the nodes with matching placements; the FCs of each segment covering its
//! nodes in order, each node's tiles `0..tiles` exactly once; estimates finite.
//! Tile counts against the execution plan are [`validate_tiles`]'s (the plan is exec's).

use crate::compile::{CompiledModel, IoKind, Segment};
use crate::ir::{Placement, PostOp};

fn numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
}

fn finite_time(x: f64) -> bool {
    x.is_finite() && x >= 0.0
}

/// Checks a decoded model; the error says what is wrong.
pub fn validate_model(m: &CompiledModel) -> Result<(), String> {
    check_graph(m)?;
    check_boundary(m)?;
    check_segments(m)?;
    let nn = m.graph.nodes.len();
    if m.node_est_us.len() != nn || !m.node_est_us.iter().all(|&x| finite_time(x)) {
        return Err("node estimates do not match the nodes".into());
    }
    if m.over_limit
        .iter()
        .any(|o| o.node >= nn || !finite_time(o.est_us))
    {
        return Err("an over-limit entry names a missing node".into());
    }
    Ok(())
}

fn check_graph(m: &CompiledModel) -> Result<(), String> {
    let g = &m.graph;
    let nv = g.values.len();
    let mut defined = vec![false; nv];
    for (i, v) in g.values.iter().enumerate() {
        if let Some(k) = &v.konst {
            if v.dtype != k.dtype() || v.shape.as_deref() != Some(&k.shape[..]) {
                return Err(format!(
                    "constant '{}' (#{i}) does not match its value's type or shape",
                    v.name
                ));
            }
            defined[i] = true;
        }
    }
    for &i in &g.inputs {
        let v = g
            .values
            .get(i)
            .ok_or("a graph input references a missing value")?;
        if v.konst.is_some() || v.shape.is_none() || defined[i] {
            return Err(format!(
                "graph input '{}' is a constant, listed twice or has no static shape",
                v.name
            ));
        }
        defined[i] = true;
    }
    for n in &g.nodes {
        for v in n.inputs.iter().flatten() {
            if !defined.get(*v).copied().unwrap_or(false) {
                return Err(format!(
                    "node '{}' reads a value that is missing or not computed before it",
                    n.name
                ));
            }
        }
        if n.outputs.is_empty() {
            return Err(format!("node '{}' has no output", n.name));
        }
        let outs = crate::ir::shape::infer_node(g, n)
            .map_err(|e| format!("node '{}': shapes do not hold: {e}", n.name))?;
        for (&o, (dt, shape)) in n.outputs.iter().zip(&outs) {
            let v = g
                .values
                .get(o)
                .ok_or_else(|| format!("node '{}' writes a missing value", n.name))?;
            if defined[o] {
                return Err(format!(
                    "node '{}' overwrites value '{}' (a constant, an input or another node's)",
                    n.name, v.name
                ));
            }
            if v.dtype != *dt || v.shape.as_deref() != Some(&shape[..]) {
                return Err(format!(
                    "value '{}' is declared {} {:?} but node '{}' computes {} {shape:?}",
                    v.name,
                    v.dtype.name(),
                    v.shape,
                    n.name,
                    dt.name()
                ));
            }
            defined[o] = true;
        }
        for p in n.op.post_ops().into_iter().flatten() {
            if let PostOp::AddInput { input } = p {
                if n.inputs.get(*input).copied().flatten().is_none() {
                    return Err(format!("node '{}' fuses a missing residual input", n.name));
                }
            }
        }
    }
    for &o in &g.outputs {
        if !defined.get(o).copied().unwrap_or(false) {
            return Err("a graph output is missing or never computed".into());
        }
    }
    Ok(())
}

fn check_boundary(m: &CompiledModel) -> Result<(), String> {
    let g = &m.graph;
    let pairs = [
        (&m.inputs, &g.inputs, "input"),
        (&m.outputs, &g.outputs, "output"),
    ];
    for (specs, values, what) in pairs {
        if specs.len() != values.len() {
            return Err(format!(
                "{what} descriptions do not match the graph's {what}s"
            ));
        }
        for (s, &v) in specs.iter().zip(values.iter()) {
            let val = &g.values[v];
            let vshape = val.shape.as_deref().unwrap_or(&[]);
            let bytes = numel(vshape).and_then(|n| n.checked_mul(val.dtype.size()));
            if s.value != v
                || s.dtype != val.dtype
                || bytes != Some(s.byte_size)
                || (s.kind == IoKind::Tensor && numel(&s.shape) != numel(vshape))
            {
                return Err(format!(
                    "{what} '{}' does not describe graph value '{}'",
                    s.name, val.name
                ));
            }
        }
    }
    Ok(())
}

fn check_segments(m: &CompiledModel) -> Result<(), String> {
    let nn = m.graph.nodes.len();
    let mut next = 0;
    for (i, s) in m.segments.iter().enumerate() {
        if s.start != next || s.end <= s.start || s.end > nn || s.fcs.is_empty() {
            return Err("segments do not cover the nodes in order".into());
        }
        if m.graph.nodes[s.start..s.end]
            .iter()
            .any(|n| n.placement != Some(s.kind))
        {
            return Err(format!("segment {i} holds a node placed elsewhere"));
        }
        if s.kind == Placement::Cpu && s.fcs.len() != 1 {
            return Err(format!("CPU segment {i} has {} FCs, not 1", s.fcs.len()));
        }
        check_steps(m, s).map_err(|e| format!("segment {i}: {e}"))?;
        next = s.end;
    }
    if next != nn {
        return Err("segments do not cover every node".into());
    }
    Ok(())
}

/// The steps of a segment's FCs, in order, are each node's tiles `0..tiles` in order.
fn check_steps(m: &CompiledModel, s: &Segment) -> Result<(), String> {
    let mut node = s.start;
    let mut tile = 0u32;
    let mut tiles = 0u32;
    for fc in &s.fcs {
        if fc.steps.is_empty() || !finite_time(fc.est_us) {
            return Err("an FC is empty or has a bad estimate".into());
        }
        for st in &fc.steps {
            if tile == 0 {
                tiles = st.tiles;
            }
            if st.node != node || st.tile != tile || st.tiles == 0 || st.tiles != tiles {
                return Err(format!(
                    "an FC step (node {}, tile {}/{}) is out of order: expected node {node} \
                     tile {tile}",
                    st.node, st.tile, st.tiles
                ));
            }
            // No more tiles than output elements: a sane bound before the plan exists.
            let out = m.graph.nodes[node].outputs[0];
            let elems = m.graph.values[out].shape.as_deref().and_then(numel);
            if st.tiles as usize > elems.unwrap_or(1).max(1) {
                return Err(format!(
                    "node {node} is cut into more tiles than it has elements"
                ));
            }
            tile += 1;
            if tile == st.tiles {
                node += 1;
                tile = 0;
            }
        }
    }
    if node != s.end || tile != 0 {
        return Err("the FCs do not cover the segment's nodes".into());
    }
    Ok(())
}

/// Checks every FC step's tile count against what the execution plan allows for its
/// node (`tiles_for`, e.g. [`crate::exec::ModelPlan::tiles_for`]).
pub fn validate_tiles(m: &CompiledModel, tiles_for: impl Fn(usize) -> usize) -> Result<(), String> {
    for s in &m.segments {
        for st in s.fcs.iter().flat_map(|f| &f.steps) {
            if st.tiles > 1 && st.tiles as usize > tiles_for(st.node) {
                return Err(format!(
                    "node {} is cut into {} tiles; its plan allows {}",
                    st.node,
                    st.tiles,
                    tiles_for(st.node)
                ));
            }
        }
    }
    Ok(())
}
