//! The memory plan of a whole graph: where every value lives (a constant, or a byte range
//! of the one arena), from value lifetimes over the node order ([`super::super::memplan`]).
//!
//! Graph inputs and outputs get slots live for the whole run; each node's outputs form
//! one block, live from the node to its last reader.
//!
//! Views: a Reshape, Flatten, Squeeze or Unsqueeze of a value made by an earlier node
//! takes that value's bytes as its output (its copy is skipped), as does a Split along
//! an axis after dims of size 1 (its outputs are consecutive slices of its input); the
//! producer's block then stays live until the view's outputs are last read
//! ([`view_input`]).
//!
//! Zero-copy Concat: when everything before a Concat's axis has size 1 (an N=1 channel
//! concat, say) its output is its inputs laid end to end, so an input made by a node of
//! the graph can be written by that node straight into its slice of the output block
//! (see [`concat_in_place`]); the Concat then copies only the other inputs. The node
//! blocks so nested in a Concat's block share its one buffer, live from the first of
//! their producers to the last reader of any of them.

use super::super::memplan::{self, Buffer, ALIGN};
use super::super::Loc;
use crate::error::{Error, Result};
use crate::ir::{Graph, Op};

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
    /// Per node: the inputs already in place in its output block (a Concat's inputs whose
    /// producers wrote them there), which its kernel must not copy.
    pub in_place: Vec<Vec<usize>>,
}

/// Which node blocks live inside a Concat's output block ([`concat_in_place`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InPlace {
    /// Per node: `(concat node, byte offset in its output block)` where the node writes
    /// its one output.
    pub parent: Vec<Option<(usize, usize)>>,
    /// Per node: the indices of its inputs so placed (Concat nodes only).
    pub placed: Vec<Vec<usize>>,
}

/// Chooses the Concat inputs to produce in place. A Concat qualifies when the dims
/// before its axis multiply to 1 (its output is its inputs end to end); an input of it
/// is produced in place when it is a non-empty value made by exactly one earlier node,
/// is not a graph input, output or constant, appears once in this Concat, and its
/// producer is not placed in another Concat already and has that one output (or its
/// outputs are consecutive inputs of this Concat, in order, each qualifying: a Split).
/// A Concat output may itself be placed in a later Concat (nested). `pinned`: per
/// value, a graph input or output.
pub(crate) fn concat_in_place(g: &Graph, pinned: &[bool]) -> InPlace {
    let nv = g.values.len();
    let mut parent = vec![None; g.nodes.len()];
    let mut placed = vec![Vec::new(); g.nodes.len()];
    let mut makers = vec![0usize; nv];
    let mut producer = vec![None; nv];
    for (i, n) in g.nodes.iter().enumerate() {
        for &o in n.outputs.iter().filter(|&&o| o < nv) {
            makers[o] += 1;
            producer[o] = Some(i);
        }
    }
    for (c, n) in g.nodes.iter().enumerate() {
        let Op::Concat { axis } = n.op else { continue };
        let [o] = n.outputs[..] else { continue };
        let Some(out) = g.values.get(o) else { continue };
        let Some(os) = out.shape.as_deref() else {
            continue;
        };
        let Some(a) = crate::ir::shape::norm_axis(axis, os.len()) else {
            continue;
        };
        if os[..a].iter().product::<usize>() != 1 {
            continue;
        }
        // (input index, value, byte offset in the output, bytes) of each present input;
        // anything the Concat plan would reject leaves the node alone.
        let mut parts = Vec::new();
        let mut off = 0usize;
        let fits = n.inputs.iter().enumerate().all(|(i, v)| {
            let Some(v) = *v else { return true };
            let Some(val) = g.values.get(v) else {
                return false;
            };
            let Some(s) = val.shape.as_deref() else {
                return false;
            };
            if val.dtype != out.dtype
                || s.len() != os.len()
                || (0..os.len()).any(|d| d != a && s[d] != os[d])
            {
                return false;
            }
            let Ok(bytes) = value_bytes(g, v) else {
                return false;
            };
            parts.push((i, v, off, bytes));
            off = off.saturating_add(bytes);
            true
        });
        if !fits || value_bytes(g, o).ok() != Some(off) {
            continue;
        }
        let ok = |v: usize, bytes: usize| {
            bytes > 0
                && n.inputs.iter().filter(|&&x| x == Some(v)).count() == 1
                && !pinned[v]
                && g.values[v].konst.is_none()
                && makers[v] == 1
        };
        let mut j = 0;
        while j < parts.len() {
            let (_, v, off, _) = parts[j];
            let Some(p) = producer[v] else {
                j += 1;
                continue;
            };
            // A node with several outputs (a Split) qualifies when they are consecutive
            // inputs here, in order: its block is then their slices end to end.
            let outs = &g.nodes[p].outputs;
            let run = parts.get(j..j + outs.len()).filter(|run| {
                run.iter()
                    .zip(outs)
                    .all(|(&(_, v, _, b), &o)| v == o && ok(v, b))
            });
            match run {
                Some(run) if p < c && parent[p].is_none() => {
                    parent[p] = Some((c, off));
                    placed[c].extend(run.iter().map(|r| r.0));
                    j += outs.len();
                }
                _ => j += 1,
            }
        }
    }
    InPlace { parent, placed }
}

/// The input a view node's outputs alias, and its producer: a Reshape, Flatten, Squeeze
/// or Unsqueeze (output: the input's bytes) or a Split along an axis after dims of size
/// 1 only (outputs: consecutive slices of the input's bytes), whose data input is made
/// by an earlier node (not a graph input or constant), of the outputs' dtype and byte
/// size in all, none of them a graph input or output.
fn view_input(
    g: &Graph,
    n: &crate::ir::Node,
    pinned: &[bool],
    producers: &[Option<usize>],
) -> Option<(usize, usize)> {
    let v = (*n.inputs.first()?)?;
    let val = g.values.get(v)?;
    let shape = val.shape.as_deref()?;
    match &n.op {
        Op::Reshape { .. } | Op::Flatten { .. } | Op::Squeeze { .. } | Op::Unsqueeze { .. } => {
            if n.outputs.len() != 1 {
                return None;
            }
        }
        Op::Split { axis, .. } => {
            let a = crate::ir::shape::norm_axis(*axis, shape.len())?;
            if shape[..a].iter().product::<usize>() != 1 {
                return None;
            }
            // Each output keeps every dim but the axis.
            let fits = n.outputs.iter().all(|&o| {
                g.values
                    .get(o)
                    .and_then(|x| x.shape.as_deref())
                    .is_some_and(|os| {
                        os.len() == shape.len()
                            && (0..os.len()).all(|d| d == a || os[d] == shape[d])
                    })
            });
            if !fits {
                return None;
            }
        }
        _ => return None,
    }
    let bytes = value_bytes(g, v).ok().filter(|&b| b > 0)?;
    let mut total = 0usize;
    for &o in &n.outputs {
        let out = g.values.get(o)?;
        if out.dtype != val.dtype || pinned.get(o).copied().unwrap_or(true) {
            return None;
        }
        total = total.checked_add(value_bytes(g, o).ok()?)?;
    }
    let p = producers.get(v).copied().flatten()?;
    (total == bytes && !pinned[v] && val.konst.is_none()).then_some((v, p))
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
/// node's outputs form one block live from the node to its last reader. With
/// `concat_zero_copy`, Concat inputs are produced in place where [`concat_in_place`]
/// allows.
pub(crate) fn plan_memory(g: &Graph, concat_zero_copy: bool) -> Result<Layout> {
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
    let mut nested = if concat_zero_copy {
        concat_in_place(g, &pinned)
    } else {
        InPlace {
            parent: vec![None; g.nodes.len()],
            placed: vec![Vec::new(); g.nodes.len()],
        }
    };
    let producers = g.producers();
    // Views (a Reshape's output is its input's bytes, a Split's outputs slices of them):
    // their blocks lie in their input's place, set below as its producer's outputs are.
    let mut views = vec![false; g.nodes.len()];
    let mut node_size = Vec::new();
    let mut node_life = Vec::new();
    let mut node_outs: Vec<Vec<(usize, usize)>> = Vec::new();
    for (i, n) in g.nodes.iter().enumerate() {
        let view = (concat_zero_copy && nested.parent[i].is_none())
            .then(|| view_input(g, n, &pinned, &producers))
            .flatten();
        // (An input from a later node is refused when the node is planned.)
        if let Some((v, p)) = view.filter(|&(_, p)| p < i) {
            let k = g.nodes[p].outputs.iter().position(|&o| o == v).unwrap_or(0);
            nested.parent[i] = Some((p, node_outs[p][k].0));
            views[i] = true;
        }
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
        if nested.parent[i].is_some() {
            // Unpadded, as the Concat lays its inputs out.
            off = 0;
            for o in &mut outs {
                o.0 = off;
                off += o.1;
            }
        }
        node_size.push(off);
        node_outs.push(outs);
        node_life.push(if pin { (0, usize::MAX) } else { (i, last) });
    }
    // The outermost block holding each node's block, and the byte offset there.
    let root = |mut i: usize| {
        let mut off = 0;
        while let Some((c, o)) = nested.parent[i] {
            off += o;
            i = c;
        }
        (i, off)
    };
    // A Concat's block (the outermost of nested ones) is live while any block in it is.
    for i in 0..g.nodes.len() {
        let (r, _) = root(i);
        if r != i {
            let (f, l) = node_life[i];
            node_life[r] = (node_life[r].0.min(f), node_life[r].1.max(l));
        }
    }
    let mut node_buf = vec![usize::MAX; g.nodes.len()];
    for i in 0..g.nodes.len() {
        if nested.parent[i].is_none() {
            node_buf[i] = bufs.len();
            bufs.push(Buffer {
                size: node_size[i],
                first: node_life[i].0,
                last: node_life[i].1,
            });
        }
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
        let (r, off) = root(i);
        let base = offsets[node_buf[r]] + off;
        node_block.push((base, node_size[i]));
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
        producers,
        in_place: nested
            .placed
            .into_iter()
            .zip(&views)
            .map(|(placed, &view)| if view { vec![0] } else { placed })
            .collect(),
    })
}
