//! Int8 lowering of quantised (QDQ) graphs, after fusion ([`lower_int8`]).
//!
//! Steps:
//! 1. s8 activations move to the u8 domain: a per-tensor `Q → s8` read only by DQ
//!    nodes becomes `Q → u8` with `zp + 128` (the dequantised values are identical).
//! 2. Patterns become int8 nodes, each taking the place of its float op and writing the
//!    value its final Q wrote (that Q disappears):
//!    * `DQ(x), DQ(w const) [, DQ(b) | b const] → Conv [→ Relu/Clip] → Q` → `QConv`;
//!    * the same around Gemm (`alpha = beta = 1`, no `transA`) or MatMul (constant 2-D
//!      B) → `QGemm` (B stored `[k, n]`);
//!    * an integer-output chain (`ConvInteger` / `MatMulInteger` as imported: unit
//!      scales, `Q → i32`) → `QConv` / `QGemm` with an i32 output;
//!    * `DQ(a), DQ(b) → Add [→ Relu] → Q` → `QAdd`; `→ Mul → Q` → `QMul`, on equal
//!      shapes or with one operand broadcast as one block of dims ([`binary`]);
//!    * `DQ(x) → AveragePool / GlobalAveragePool / Resize(linear) → Q` → `QAvgPool` /
//!      `QGlobalAvgPool` / `QResize` (parameters may differ on the two sides,
//!      [`resample`]);
//!    * `DQ(x) → f → Q` for an element-wise function (Sigmoid, SiLU, HardSwish, Tanh,
//!      ...) → `QLut` (256 entries computed in f64 at compile time);
//!    * `DQ(x) → Softmax → Q` → `QSoftmax`;
//!    * `DQ(x) → op → Q` with equal parameters on both sides, for MaxPool (`QMaxPool`),
//!      Reshape / Flatten / Squeeze / Unsqueeze / Transpose / Slice / nearest Resize /
//!      Split (the same op, on u8), and Concat (inputs with other parameters first go
//!      through a `QRequant`).
//!
//!    What matches nothing stays DQ → f32 op → Q and runs in float (correct, slower).
//! 3. Dead nodes go; [`fold_constant_dequantize`] then evaluates the DQ nodes left on
//!    constants (weights of float ops).
//!
//! Exactness: weights and activations are used as stored; the requantisation
//! `round_half_even((acc + bias) * x_scale * w_scale / y_scale) + y_zp` differs from the
//! float reference only by f32 rounding (single ops within one step; a conv's
//! near-ties are settled the way the float reference rounds them, see
//! `kernels::quant::conv`, so that whole networks stay bit-exact). ReLU / Clip fold
//! into the clamp exactly (Q is monotonic). Weights are used only when they are
//! symmetric s8 after removing their zero point; a float bias is rounded to
//! `x_scale * w_scale` units.
//!
//! DequantizeLinear is never constant-folded by `fold` (the lowering needs the
//! integer weights behind it).

use std::collections::HashMap;
use std::sync::Arc;

use super::rewrite::remove_nodes;
use super::simplify::eliminate_dead_nodes;
use crate::error::{Error, Result};
use crate::ir::{
    BinaryOp, DType, Elems, Graph, Node, Op, PostOp, QParam, ResizeMode, Tensor, TensorData,
    UnaryOp, ValueId,
};

/// What a DequantizeLinear with constant parameters reads.
struct Dq {
    /// Its input.
    x: ValueId,
    scale: Vec<f32>,
    zp: Vec<i64>,
    axis: Option<usize>,
}

impl Dq {
    /// Per-tensor u8 parameters, when the input is u8 and per-tensor.
    fn u8_param(&self, g: &Graph) -> Option<QParam> {
        if g.values[self.x].dtype != DType::U8 || self.scale.len() != 1 {
            return None;
        }
        Some(QParam {
            scale: self.scale[0],
            zp: u8::try_from(self.zp[0]).ok()?,
        })
    }
}

/// The graph indexes the matcher reads.
struct Index {
    producer: Vec<Option<usize>>,
    /// (node, input position) of every read of a value.
    readers: Vec<Vec<(usize, usize)>>,
    is_output: Vec<bool>,
}

impl Index {
    fn new(g: &Graph) -> Index {
        let mut readers = vec![Vec::new(); g.values.len()];
        for (i, n) in g.nodes.iter().enumerate() {
            for (k, v) in n.inputs.iter().enumerate() {
                if let Some(v) = v {
                    readers[*v].push((i, k));
                }
            }
        }
        let mut is_output = vec![false; g.values.len()];
        for &o in &g.outputs {
            is_output[o] = true;
        }
        Index {
            producer: g.producers(),
            readers,
            is_output,
        }
    }

    /// The only reader of `v` (not a graph output).
    fn sole_reader(&self, v: ValueId) -> Option<(usize, usize)> {
        match self.readers[v][..] {
            [r] if !self.is_output[v] => Some(r),
            _ => None,
        }
    }
}

/// Float values of a constant.
fn const_f32(g: &Graph, v: Option<ValueId>) -> Option<Vec<f32>> {
    let t = g.values[v?].konst.as_ref()?;
    (t.dtype() == DType::F32).then(|| t.to_f32_vec())
}

/// Integer values of a constant (0 when the input is absent).
fn const_ints(g: &Graph, v: Option<ValueId>, n: usize) -> Option<Vec<i64>> {
    match v {
        None => Some(vec![0; n]),
        Some(v) => g.values[v].konst.as_ref()?.to_i64_vec(),
    }
}

/// The DequantizeLinear producing `v`, with constant scale and zero point.
fn dq_of(g: &Graph, ix: &Index, v: ValueId) -> Option<Dq> {
    let n = &g.nodes[ix.producer[v]?];
    let Op::DequantizeLinear { axis } = n.op else {
        return None;
    };
    let scale = const_f32(g, n.inputs.get(1).copied().flatten())?;
    let zp = const_ints(g, n.inputs.get(2).copied().flatten(), scale.len())?;
    (zp.len() == scale.len()).then_some(Dq {
        x: n.inputs[0]?,
        scale,
        zp,
        axis,
    })
}

/// The output side of a matched op: an optional activation node and the final Q.
struct QEnd {
    /// The activation node between the op and Q, if any.
    act: Option<(usize, UnaryOp)>,
    /// The Q node.
    q: usize,
    /// Its output.
    out: ValueId,
    /// u8 parameters, or `None` for an i32 output of unit scale.
    y: Option<QParam>,
}

/// Follows `v` through an optional ReLU/Clip node to its sole per-tensor Q reader.
fn q_end(g: &Graph, ix: &Index, v: ValueId) -> Option<QEnd> {
    let (mut r, _) = ix.sole_reader(v)?;
    let mut act = None;
    if let Op::Unary(u @ (UnaryOp::Relu | UnaryOp::Clip { .. })) = g.nodes[r].op {
        act = Some((r, u));
        r = ix.sole_reader(g.nodes[r].outputs[0])?.0;
    }
    let n = &g.nodes[r];
    let Op::QuantizeLinear { axis: None, dtype } = n.op else {
        return None;
    };
    let scale = const_f32(g, n.inputs.get(1).copied().flatten())?;
    let zp = const_ints(g, n.inputs.get(2).copied().flatten(), 1)?;
    if scale.len() != 1 || zp.len() != 1 {
        return None;
    }
    let y = match dtype {
        DType::U8 => Some(QParam {
            scale: scale[0],
            zp: u8::try_from(zp[0]).ok()?,
        }),
        DType::I32 if scale[0] == 1.0 && zp[0] == 0 && act.is_none() => None,
        _ => return None,
    };
    Some(QEnd {
        act,
        q: r,
        out: n.outputs[0],
        y,
    })
}

/// `Q(v)` in the u8 domain with the f32 formula (for Clip bounds).
fn quantize(v: f32, y: QParam) -> u8 {
    let q = (v / y.scale).round_ties_even() + f32::from(y.zp);
    q.clamp(0.0, 255.0) as u8
}

/// The clamp `[lo, hi]` of an int8 output with activation steps `acts` folded in.
fn bounds(y: Option<QParam>, acts: &[UnaryOp]) -> Option<(u8, u8)> {
    let (mut lo, mut hi) = (0u8, 255u8);
    for a in acts {
        let y = y?;
        match *a {
            UnaryOp::Relu => lo = lo.max(y.zp),
            UnaryOp::Clip { min, max } => {
                lo = lo.max(quantize(min, y));
                hi = hi.min(quantize(max, y));
            }
            _ => return None,
        }
    }
    (lo <= hi).then_some((lo, hi))
}

/// The activation steps of a fused epilogue, if it has only ReLU / Clip.
fn post_acts(post: &[PostOp]) -> Option<Vec<UnaryOp>> {
    post.iter()
        .map(|p| match p {
            PostOp::Unary(u @ (UnaryOp::Relu | UnaryOp::Clip { .. })) => Some(*u),
            _ => None,
        })
        .collect()
}

/// Symmetric s8 weights from a DQ on a constant (zero points removed when the result
/// stays in s8), with one scale per channel of `channels` along `axis`.
fn s8_weights(g: &Graph, dq: &Dq, axis: usize, channels: usize) -> Option<(Vec<i8>, Vec<f32>)> {
    let t = g.values[dq.x].konst.as_ref()?;
    let shape = &t.shape;
    if dq.axis.is_some_and(|a| a != axis) || *shape.get(axis)? != channels {
        return None;
    }
    let per = dq.scale.len() == channels && channels > 1 || dq.axis.is_some();
    let inner: usize = shape[axis + 1..].iter().product();
    let vals: Vec<i64> = match t.elems() {
        Elems::I8(v) => v.iter().map(|&x| i64::from(x)).collect(),
        Elems::U8(v) => v.iter().map(|&x| i64::from(x)).collect(),
        _ => return None,
    };
    let w = vals
        .iter()
        .enumerate()
        .map(|(i, &x)| {
            let c = if per {
                (i / inner.max(1)) % channels
            } else {
                0
            };
            i8::try_from(x - dq.zp[c]).ok()
        })
        .collect::<Option<Vec<i8>>>()?;
    let scale = if per {
        dq.scale.clone()
    } else {
        vec![dq.scale[0]; channels]
    };
    Some((w, scale))
}

/// The i32 bias (in `x_scale * w_scale[c]` units) from input `b`: a DQ of an i32
/// constant or an f32 constant.
fn int_bias(g: &Graph, ix: &Index, b: ValueId, xs: f32, ws: &[f32]) -> Option<Vec<i32>> {
    let n = ws.len();
    let real: Vec<f64> = if let Some(dq) = dq_of(g, ix, b) {
        let t = g.values[dq.x].konst.as_ref()?;
        let q = t.to_i64_vec()?;
        if q.len() != n || (dq.scale.len() != 1 && dq.scale.len() != n) {
            return None;
        }
        let s = |c: usize| dq.scale[if dq.scale.len() == 1 { 0 } else { c }];
        let z = |c: usize| dq.zp[if dq.zp.len() == 1 { 0 } else { c }];
        // Already in accumulator units: use the integers as they are.
        if dq.zp.iter().all(|&z| z == 0)
            && (0..n).all(|c| ((s(c) - xs * ws[c]) / s(c)).abs() < 1e-6)
        {
            return q.iter().map(|&v| i32::try_from(v).ok()).collect();
        }
        (0..n)
            .map(|c| ((q[c] - z(c)) as f32 * s(c)) as f64)
            .collect()
    } else {
        let v = const_f32(g, Some(b))?;
        if v.len() != n {
            return None;
        }
        v.iter().map(|&x| f64::from(x)).collect()
    };
    real.iter()
        .zip(ws)
        .map(|(&b, &w)| {
            let q = (b / (f64::from(xs) * f64::from(w))).round_ties_even();
            (q.abs() < f64::from(i32::MAX)).then_some(q as i32)
        })
        .collect()
}

/// Lowers QDQ patterns into int8 nodes (see the module doc); returns how many nodes
/// were lowered.
pub fn lower_int8(g: &mut Graph) -> Result<usize> {
    to_u8_domain(g);
    let mut lowered = 0;
    let mut dead = Vec::new();
    let mut insert: HashMap<usize, Vec<Node>> = HashMap::new();
    let ix = Index::new(g);
    for i in 0..g.nodes.len() {
        let m = match &g.nodes[i].op {
            Op::Conv { .. } | Op::Gemm { .. } | Op::MatMul { .. } => match_linear(g, &ix, i),
            Op::Binary(BinaryOp::Add | BinaryOp::Mul) => binary::match_add(g, &ix, i),
            Op::AveragePool { .. }
            | Op::GlobalAveragePool
            | Op::Resize {
                mode: ResizeMode::Linear,
                ..
            } => resample::match_resample(g, &ix, i),
            Op::Unary(_) => match_unary(g, &ix, i),
            Op::Split { .. } => match_split(g, &ix, i),
            _ => match_moving(g, &ix, i),
        };
        let Some(m) = m else { continue };
        let absorbed: Vec<String> = m
            .dead
            .iter()
            .flat_map(|&d| g.nodes[d].absorbed.clone())
            .collect();
        let n = &mut g.nodes[i];
        n.op = m.op;
        n.inputs = m.inputs;
        n.outputs = m.outs;
        n.absorbed.extend(absorbed);
        dead.extend(m.dead);
        if !m.before.is_empty() {
            insert.insert(i, m.before);
        }
        lowered += 1;
    }
    remove_and_insert(g, &dead, insert);
    if lowered > 0 {
        eliminate_dead_nodes(g);
        fuse_lut_mul(g);
        crate::ir::shape::infer_graph(g)?;
    }
    Ok(lowered)
}

/// A QLut read only by a QMul whose other operand is the QLut's own input (a quantised
/// SiLU, `x * sigmoid(x)`) becomes one QLut: both steps depend on the byte `x` alone,
/// so the composed 256 entries give the same bytes as the two nodes. Returns how many
/// pairs were fused.
fn fuse_lut_mul(g: &mut Graph) -> usize {
    let ix = Index::new(g);
    let mut dead = Vec::new();
    for m in 0..g.nodes.len() {
        let Op::QMul { a, b, y } = g.nodes[m].op else {
            continue;
        };
        let [Some(in0), Some(in1)] = g.nodes[m].inputs[..] else {
            continue;
        };
        // The QLut on either side, the other side its input.
        let lut = [(1, in1, in0), (0, in0, in1)]
            .into_iter()
            .find_map(|(k, s, x)| {
                let l = ix.producer[s]?;
                let Op::QLut { table } = &g.nodes[l].op else {
                    return None;
                };
                let sole = ix.sole_reader(s) == Some((m, k));
                (sole && g.nodes[l].inputs[..] == [Some(x)] && !dead.contains(&l))
                    .then(|| (l, k, x, table.clone()))
            });
        let Some((l, k, x, table)) = lut else {
            continue;
        };
        let fused: Vec<u8> = (0..=255u8)
            .map(|q| {
                let s = table[usize::from(q)];
                let (qa, qb) = if k == 1 { (q, s) } else { (s, q) };
                crate::kernels::quant::body::qmul_one(qa, qb, a, b, y)
            })
            .collect();
        let absorbed = g.nodes[l].absorbed.clone();
        let n = &mut g.nodes[m];
        n.op = Op::QLut { table: fused };
        n.inputs = vec![Some(x)];
        n.absorbed.extend(absorbed);
        dead.push(l);
    }
    remove_nodes(g, &dead);
    dead.len()
}

/// Removes nodes `dead` and inserts `insert[i]` right before node `i`.
fn remove_and_insert(g: &mut Graph, dead: &[usize], mut insert: HashMap<usize, Vec<Node>>) {
    if insert.is_empty() {
        remove_nodes(g, dead);
        return;
    }
    let mut kill = vec![false; g.nodes.len()];
    for &d in dead {
        kill[d] = true;
    }
    let old = std::mem::take(&mut g.nodes);
    for (i, n) in old.into_iter().enumerate() {
        if let Some(before) = insert.remove(&i) {
            g.nodes.extend(before);
        }
        if !kill[i] {
            g.nodes.push(n);
        }
    }
}

/// A matched pattern: the int8 op replacing node `i`, its inputs and output, the nodes
/// it absorbs (removed), and nodes to insert before it.
struct Match {
    op: Op,
    inputs: Vec<Option<ValueId>>,
    outs: Vec<ValueId>,
    dead: Vec<usize>,
    before: Vec<Node>,
}

/// Adds a constant value.
fn add_const(g: &mut Graph, base: &str, t: Tensor) -> ValueId {
    let name = g.fresh_name(base);
    g.add_const(name, t)
}

/// QConv / QGemm from a Conv, Gemm or MatMul between DQ and Q.
fn match_linear(g: &mut Graph, ix: &Index, i: usize) -> Option<Match> {
    let n = &g.nodes[i];
    let (xq, wq) = (
        dq_of(g, ix, n.inputs[0]?)?,
        dq_of(g, ix, n.inputs.get(1).copied()??)?,
    );
    let end = q_end(g, ix, n.outputs[0])?;
    let x = xq.u8_param(g)?;
    let wshape = g.values[wq.x].shape.clone()?;
    let (post, mut acts) = match &n.op {
        Op::Conv { post, .. } | Op::MatMul { post } | Op::Gemm { post, .. } => {
            (post.clone(), Vec::new())
        }
        _ => return None,
    };
    acts.extend(post_acts(&post)?);
    if let Some((_, a)) = end.act {
        acts.push(a);
    }
    let (lo, hi) = match end.y {
        Some(_) => bounds(end.y, &acts)?,
        None if acts.is_empty() => (0, 255),
        None => return None,
    };
    let name = n.name.clone();
    let bias_in = n.inputs.get(2).copied().flatten();
    let (op, w, ws) = match n.op.clone() {
        Op::Conv { geom, group, .. } => {
            let cout = *wshape.first()?;
            let (w, ws) = s8_weights(g, &wq, 0, cout)?;
            let t = Tensor::new(wshape.clone(), TensorData::I8(w));
            let op = |ws: Vec<f32>| Op::QConv {
                geom,
                group,
                x,
                w_scale: ws,
                y: end.y,
                lo,
                hi,
            };
            (op(ws.clone()), t, ws)
        }
        Op::Gemm {
            alpha,
            beta,
            trans_a,
            trans_b,
            ..
        } => {
            if alpha != 1.0 || beta != 1.0 || trans_a || wshape.len() != 2 {
                return None;
            }
            let (k, cols, axis) = if trans_b {
                (wshape[1], wshape[0], 0)
            } else {
                (wshape[0], wshape[1], 1)
            };
            let (w, ws) = s8_weights(g, &wq, axis, cols)?;
            let w = if trans_b { transpose(&w, cols, k) } else { w };
            let t = Tensor::new(vec![k, cols], TensorData::I8(w));
            let op = Op::QGemm {
                x,
                w_scale: ws.clone(),
                y: end.y,
                lo,
                hi,
            };
            (op, t, ws)
        }
        Op::MatMul { .. } => {
            if wshape.len() != 2 || g.values[n.inputs[0]?].shape.as_ref()?.len() < 2 {
                return None;
            }
            let (w, ws) = s8_weights(g, &wq, 1, wshape[1])?;
            let t = Tensor::new(wshape.clone(), TensorData::I8(w));
            let op = Op::QGemm {
                x,
                w_scale: ws.clone(),
                y: end.y,
                lo,
                hi,
            };
            (op, t, ws)
        }
        _ => return None,
    };
    if end.y.is_none() && (x.scale != 1.0 || ws.iter().any(|&s| s != 1.0)) {
        return None;
    }
    let bias = match bias_in {
        None => None,
        Some(b) => Some(int_bias(g, ix, b, x.scale, &ws)?),
    };
    let wv = add_const(g, &format!("{name}/w_i8"), w);
    let bv = bias.map(|b| {
        let len = b.len();
        add_const(
            g,
            &format!("{name}/b_i32"),
            Tensor::new(vec![len], TensorData::I32(b)),
        )
    });
    let mut dead = vec![end.q];
    dead.extend(end.act.map(|(a, _)| a));
    Some(Match {
        op,
        inputs: vec![Some(xq.x), Some(wv), bv],
        outs: vec![end.out],
        dead,
        before: Vec::new(),
    })
}

/// `[rows, cols]` row-major transposed to `[cols, rows]`.
fn transpose(w: &[i8], rows: usize, cols: usize) -> Vec<i8> {
    let mut t = vec![0i8; w.len()];
    for r in 0..rows {
        for c in 0..cols {
            t[c * rows + r] = w[r * cols + c];
        }
    }
    t
}

/// Data movement between DQ and Q with the same parameters, on u8 directly.
fn match_moving(g: &mut Graph, ix: &Index, i: usize) -> Option<Match> {
    let n = &g.nodes[i];
    let op = match &n.op {
        Op::MaxPool { geom, ceil_mode } if n.outputs.len() == 1 => Op::QMaxPool {
            geom: geom.clone(),
            ceil_mode: *ceil_mode,
        },
        Op::Softmax { axis } => {
            let rank = g.values[n.inputs[0]?].shape.as_ref()?.len();
            let axis = crate::ir::shape::norm_axis(*axis, rank)?;
            let dq = dq_of(g, ix, n.inputs[0]?)?;
            let x = dq.u8_param(g)?;
            let end = q_end(g, ix, n.outputs[0])?;
            if end.act.is_some() {
                return None;
            }
            return Some(Match {
                op: Op::QSoftmax { axis, x, y: end.y? },
                inputs: vec![Some(dq.x)],
                outs: vec![end.out],
                dead: vec![end.q],
                before: Vec::new(),
            });
        }
        Op::Resize {
            mode: ResizeMode::Nearest,
            ..
        }
        | Op::Reshape { .. }
        | Op::Flatten { .. }
        | Op::Squeeze { .. }
        | Op::Unsqueeze { .. }
        | Op::Transpose { .. }
        | Op::Slice
        | Op::Concat { .. } => n.op.clone(),
        _ => return None,
    };
    let end = q_end(g, ix, n.outputs[0])?;
    let y = end.y?;
    if end.act.is_some() {
        return None;
    }
    let is_concat = matches!(op, Op::Concat { .. });
    let data = if is_concat { n.inputs.len() } else { 1 };
    let mut inputs = n.inputs.clone();
    let mut before = Vec::new();
    let name = n.name.clone();
    for (k, slot) in inputs.iter_mut().enumerate().take(data) {
        let dq = dq_of(g, ix, (*slot)?)?;
        let p = dq.u8_param(g)?;
        if p == y {
            *slot = Some(dq.x);
        } else if is_concat {
            let v = g.values[dq.x].clone();
            let out = g.add_value(crate::ir::Value {
                name: g.fresh_name(&format!("{name}/requant{k}")),
                konst: None,
                declared: None,
                ..v
            });
            before.push(Node {
                name: format!("{name}/requant{k}"),
                op: Op::QRequant { x: p, y },
                inputs: vec![Some(dq.x)],
                outputs: vec![out],
                absorbed: vec![],
                placement: None,
            });
            *slot = Some(out);
        } else {
            return None;
        }
    }
    Some(Match {
        op,
        inputs,
        outs: vec![end.out],
        dead: vec![end.q],
        before,
    })
}

/// `f(x)` in f64 for the element-wise functions a table can hold.
fn eval_unary(u: UnaryOp, x: f64) -> Option<f64> {
    let sig = |x: f64| 1.0 / (1.0 + (-x).exp());
    Some(match u {
        UnaryOp::Relu => x.max(0.0),
        UnaryOp::LeakyRelu { alpha } => {
            if x >= 0.0 {
                x
            } else {
                x * f64::from(alpha)
            }
        }
        UnaryOp::Clip { min, max } => x.max(f64::from(min)).min(f64::from(max)),
        UnaryOp::Sigmoid => sig(x),
        UnaryOp::HardSigmoid { alpha, beta } => {
            (f64::from(alpha) * x + f64::from(beta)).clamp(0.0, 1.0)
        }
        UnaryOp::HardSwish => x * (x / 6.0 + 0.5).clamp(0.0, 1.0),
        UnaryOp::Silu => x * sig(x),
        UnaryOp::Elu { alpha } => {
            if x >= 0.0 {
                x
            } else {
                f64::from(alpha) * (x.exp() - 1.0)
            }
        }
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Softplus => x.exp().ln_1p(),
        UnaryOp::Exp => x.exp(),
        UnaryOp::Abs => x.abs(),
        UnaryOp::Neg => -x,
        UnaryOp::Identity => x,
        _ => return None,
    })
}

/// QLut from `DQ(x) → f → [Relu/Clip →] Q` for an element-wise `f` (the table computes
/// `f` in f64, then quantises as Q does).
fn match_unary(g: &Graph, ix: &Index, i: usize) -> Option<Match> {
    let n = &g.nodes[i];
    let Op::Unary(u) = n.op else { return None };
    let dq = dq_of(g, ix, n.inputs[0]?)?;
    let x = dq.u8_param(g)?;
    let end = q_end(g, ix, n.outputs[0])?;
    let y = end.y?;
    let mut table = Vec::with_capacity(256);
    for q in 0..=255u8 {
        let v = (i32::from(q) - i32::from(x.zp)) as f32 * x.scale;
        let mut f = eval_unary(u, f64::from(v))? as f32;
        if let Some((_, a)) = end.act {
            f = eval_unary(a, f64::from(f))? as f32;
        }
        table.push(quantize(f, y));
    }
    let mut dead = vec![end.q];
    dead.extend(end.act.map(|(a, _)| a));
    Some(Match {
        op: Op::QLut { table },
        inputs: vec![Some(dq.x)],
        outs: vec![end.out],
        dead,
        before: Vec::new(),
    })
}

/// Split of a u8 tensor whose every output is quantised again with the input's
/// parameters: the same Split on u8.
fn match_split(g: &Graph, ix: &Index, i: usize) -> Option<Match> {
    let n = &g.nodes[i];
    let dq = dq_of(g, ix, n.inputs[0]?)?;
    let x = dq.u8_param(g)?;
    let mut outs = Vec::new();
    let mut dead = Vec::new();
    for &o in &n.outputs {
        let end = q_end(g, ix, o)?;
        if end.y != Some(x) || end.act.is_some() {
            return None;
        }
        outs.push(end.out);
        dead.push(end.q);
    }
    let mut inputs = n.inputs.clone();
    inputs[0] = Some(dq.x);
    Some(Match {
        op: n.op.clone(),
        inputs,
        outs,
        dead,
        before: Vec::new(),
    })
}

/// Step 1: per-tensor `Q → s8` read only by DQ nodes becomes `Q → u8` (`zp + 128`).
fn to_u8_domain(g: &mut Graph) {
    let ix = Index::new(g);
    for i in 0..g.nodes.len() {
        let n = &g.nodes[i];
        let Op::QuantizeLinear {
            axis: None,
            dtype: DType::I8,
        } = n.op
        else {
            continue;
        };
        let out = n.outputs[0];
        if ix.is_output[out]
            || ix.readers[out].is_empty()
            || ix.readers[out]
                .iter()
                .any(|&(r, k)| k != 0 || !matches!(g.nodes[r].op, Op::DequantizeLinear { .. }))
        {
            continue;
        }
        let Some(zp) = const_ints(g, n.inputs.get(2).copied().flatten(), 1) else {
            continue;
        };
        let Some(z) = zp.first().and_then(|&z| u8::try_from(z + 128).ok()) else {
            continue;
        };
        if zp.len() != 1 {
            continue;
        }
        let name = format!("{}/zp_u8", n.name);
        let zv = add_const(g, &name, Tensor::new(vec![], TensorData::U8(vec![z])));
        let n = &mut g.nodes[i];
        n.op = Op::QuantizeLinear {
            axis: None,
            dtype: DType::U8,
        };
        if n.inputs.len() < 3 {
            n.inputs.resize(3, None);
        }
        n.inputs[2] = Some(zv);
        g.values[out].dtype = DType::U8;
        for &(r, _) in &ix.readers[out] {
            let d = &mut g.nodes[r];
            if d.inputs.len() < 3 {
                d.inputs.resize(3, None);
            }
            d.inputs[2] = Some(zv);
        }
    }
}

/// Evaluates every DequantizeLinear whose inputs are all constant into an f32 constant
/// and removes the node. Returns the number of nodes folded.
pub fn fold_constant_dequantize(g: &mut Graph) -> Result<usize> {
    let mut folded = Vec::new();
    for i in 0..g.nodes.len() {
        let node = &g.nodes[i];
        if !matches!(node.op, Op::DequantizeLinear { .. }) {
            continue;
        }
        let inputs: Vec<Option<&Tensor>> = node
            .inputs
            .iter()
            .map(|v| v.and_then(|v| g.values[v].konst.as_deref()))
            .collect();
        if node
            .inputs
            .iter()
            .zip(&inputs)
            .any(|(v, t)| v.is_some() && t.is_none())
        {
            continue;
        }
        let outs = crate::exec::eval_node(g, node, &inputs).map_err(|e| {
            Error::shape(
                &node.name,
                node.op.name(),
                format!("constant folding failed: {e}"),
            )
        })?;
        let ids = node.outputs.clone();
        for (o, t) in ids.into_iter().zip(outs) {
            g.values[o].konst = Some(Arc::new(t));
        }
        folded.push(i);
    }
    remove_nodes(g, &folded);
    Ok(folded.len())
}

mod binary;
mod resample;
#[cfg(test)]
mod tests;
