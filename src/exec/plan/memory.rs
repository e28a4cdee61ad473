//! The memory plan of a whole graph: where every value lives (a constant, or a byte range
//! of the one arena), from value lifetimes over the node order ([`super::super::memplan`]).
//!
//! Graph inputs and outputs get slots live for the whole run; each node's outputs form
//! one block, live from the node to its last reader.

use super::super::memplan::{self, Buffer, ALIGN};
use super::super::Loc;
use crate::error::{Error, Result};
use crate::ir::Graph;

/// Where every value lives.
pub(crate) struct Layout {
    /// Bytes of arena a state needs.
    pub arena_bytes: usize,
    /// (offset, byte length) of each graph input.
    pub inputs: Vec<(usize, usize)>,
    /// Where each graph output lives.
    pub outputs: Vec<Loc>,
    /// Where each value lives (`None`: not produced, not an input, not a constant).
    pub val_loc: Vec<Option<Loc>>,
    /// (offset, byte length) of each node's output block.
    pub node_block: Vec<(usize, usize)>,
    /// (offset in the node's block, byte length) of each node output.
    pub node_outs: Vec<Vec<(usize, usize)>>,
    /// Producing node of each value (computed once: per-node lookups stay O(1)).
    pub producers: Vec<Option<usize>>,
}

fn value_bytes(g: &Graph, v: usize) -> Result<usize> {
    let val = &g.values[v];
    let shape = val.shape.as_ref().ok_or_else(|| Error::Shape {
        node: String::new(),
        op: String::new(),
        reason: format!("value '{}' has no static shape", val.name),
    })?;
    shape
        .iter()
        .try_fold(val.dtype.size(), |acc, &d| acc.checked_mul(d))
        .filter(|&b| b <= isize::MAX as usize / 2)
        .ok_or_else(|| Error::Shape {
            node: String::new(),
            op: String::new(),
            reason: format!("value '{}' of shape {shape:?} is too large", val.name),
        })
}

fn align_up(x: usize) -> usize {
    x.div_ceil(ALIGN) * ALIGN
}

/// Plans the arena: graph inputs and outputs get slots live for the whole run; each
/// node's outputs form one block live from the node to its last reader.
pub(crate) fn plan_memory(g: &Graph) -> Result<Layout> {
    let nv = g.values.len();
    let mut last_use = vec![0usize; nv];
    for (i, n) in g.nodes.iter().enumerate() {
        for &v in n.inputs.iter().flatten() {
            if v >= nv {
                return Err(Error::shape(
                    &n.name,
                    n.op.name(),
                    format!("input value {v} does not exist"),
                ));
            }
            last_use[v] = i;
        }
        for &v in &n.outputs {
            if v >= nv {
                return Err(Error::shape(
                    &n.name,
                    n.op.name(),
                    format!("output value {v} does not exist"),
                ));
            }
        }
    }
    let pinned: Vec<bool> = {
        let mut p = vec![false; nv];
        for &v in g.inputs.iter().chain(&g.outputs) {
            if v < nv {
                p[v] = true;
            }
        }
        p
    };
    let mut bufs = Vec::new();
    let mut input_buf = Vec::new();
    for &v in &g.inputs {
        if v >= nv {
            return Err(Error::InvalidArgument {
                name: "graph input".into(),
                reason: format!("value {v} does not exist"),
            });
        }
        input_buf.push(bufs.len());
        bufs.push(Buffer {
            size: value_bytes(g, v)?,
            first: 0,
            last: usize::MAX,
        });
    }
    let mut node_buf = Vec::new();
    let mut node_outs = Vec::new();
    for (i, n) in g.nodes.iter().enumerate() {
        let mut off = 0usize;
        let mut outs = Vec::new();
        let mut last = i;
        let mut pin = false;
        for &v in &n.outputs {
            let b = value_bytes(g, v).map_err(|e| match e {
                Error::Shape { reason, .. } => Error::Shape {
                    node: n.name.clone(),
                    op: n.op.name().into(),
                    reason: reason.replacen("value", "output", 1),
                },
                e => e,
            })?;
            outs.push((off, b));
            off = off
                .checked_add(align_up(b))
                .filter(|&o| o <= isize::MAX as usize / 2)
                .ok_or_else(|| {
                    Error::shape(&n.name, n.op.name(), "outputs too large for one block")
                })?;
            last = last.max(last_use[v]);
            pin |= pinned[v];
        }
        node_buf.push(bufs.len());
        node_outs.push(outs);
        let (first, last) = if pin { (0, usize::MAX) } else { (i, last) };
        bufs.push(Buffer {
            size: off,
            first,
            last,
        });
    }
    let (offsets, total) = memplan::assign(&bufs);
    let mut val_loc: Vec<Option<Loc>> = vec![None; nv];
    for (v, val) in g.values.iter().enumerate() {
        if let Some(k) = &val.konst {
            // Kernels size their reads by the value's shape: the data must match it.
            let numel = val.shape.as_ref().map(|s| s.iter().product::<usize>());
            if k.dtype() != val.dtype || numel.is_some_and(|n| n != k.numel()) {
                return Err(Error::shape(
                    "",
                    "",
                    format!(
                        "constant '{}' holds {} {} elements, its value is {} {:?}",
                        val.name,
                        k.numel(),
                        k.dtype().name(),
                        val.dtype.name(),
                        val.shape
                    ),
                ));
            }
            val_loc[v] = Some(Loc::Const(k.clone()));
        }
    }
    let mut inputs = Vec::new();
    for (k, &v) in g.inputs.iter().enumerate() {
        let (off, len) = (offsets[input_buf[k]], bufs[input_buf[k]].size);
        val_loc[v] = Some(Loc::Arena { off, len });
        inputs.push((off, len));
    }
    let mut node_block = Vec::new();
    for (i, n) in g.nodes.iter().enumerate() {
        let base = offsets[node_buf[i]];
        node_block.push((base, bufs[node_buf[i]].size));
        for (k, &v) in n.outputs.iter().enumerate() {
            let (o, len) = node_outs[i][k];
            val_loc[v] = Some(Loc::Arena { off: base + o, len });
        }
    }
    let outputs = g
        .outputs
        .iter()
        .map(|&v| {
            val_loc
                .get(v)
                .cloned()
                .flatten()
                .ok_or_else(|| Error::InvalidArgument {
                    name: "graph output".into(),
                    reason: format!("value {v} is neither produced, an input nor a constant"),
                })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Layout {
        arena_bytes: total.max(ALIGN),
        inputs,
        outputs,
        val_loc,
        node_block,
        node_outs,
        producers: g.producers(),
    })
}
