//! Fusion passes: fold BatchNorm and per-channel affine layers into Conv/ConvTranspose/
//! Gemm weights, fuse the simple layers that follow Conv/ConvTranspose/Gemm/MatMul into
//! their epilogue, and fuse attention (a mask Add into its Softmax, then
//! `MatMul -> Softmax -> MatMul` into one Attention).
//!
//! A fused node takes the place of the last node it absorbed (so every value it reads,
//! including a residual, is computed before it) and keeps all absorbed names.

use super::rewrite::{per_channel_values, remove_nodes, sole_consumer};
use crate::ir::{BinaryOp, Graph, Op, PostOp, Tensor, UnaryOp, ValueId};

/// The axis that holds output channels for an op with an epilogue.
fn channel_axis(g: &Graph, node: usize) -> Option<usize> {
    let n = &g.nodes[node];
    let rank = g.values[n.outputs[0]].shape.as_ref()?.len();
    match n.op {
        Op::Conv { .. } | Op::ConvTranspose { .. } => Some(1),
        Op::Gemm { .. } | Op::MatMul { .. } => rank.checked_sub(1),
        _ => None,
    }
}

/// Unary functions allowed in an epilogue.
fn fusable_unary(u: &UnaryOp) -> bool {
    matches!(
        u,
        UnaryOp::Relu
            | UnaryOp::LeakyRelu { .. }
            | UnaryOp::Clip { .. }
            | UnaryOp::Sigmoid
            | UnaryOp::Silu
            | UnaryOp::HardSigmoid { .. }
            | UnaryOp::HardSwish
            | UnaryOp::Elu { .. }
            | UnaryOp::Selu { .. }
            | UnaryOp::Tanh
            | UnaryOp::Gelu { .. }
            | UnaryOp::Softplus
    )
}

/// Replaces constant input `pos` of node `node` by a new constant.
fn set_const_input(g: &mut Graph, node: usize, pos: usize, t: Tensor) {
    let name = g.fresh_name(&format!("{}_folded", g.nodes[node].name));
    let v = g.add_const(name, t);
    let n = &mut g.nodes[node];
    if n.inputs.len() <= pos {
        n.inputs.resize(pos + 1, None);
    }
    n.inputs[pos] = Some(v);
}

/// Moves node `from` (the producer) to the position of `to` (its consumer), which is
/// removed; the producer takes over the consumer's outputs and names.
fn absorb_consumer(g: &mut Graph, from: usize, to: usize) {
    let consumer = g.nodes[to].clone();
    let mut producer = g.nodes[from].clone();
    producer.outputs = consumer.outputs.clone();
    producer.absorbed.extend(consumer.absorbed);
    g.nodes[to] = producer;
    remove_nodes(g, &[from]);
}

/// Output-channel scaling of a Conv / Gemm weight: returns `(W', b')` for
/// `y' = y * s + t`, or `None` when the weights are not constant f32.
fn scale_weights(g: &Graph, node: usize, s: &[f32], t: &[f32]) -> Option<(Tensor, Tensor)> {
    let n = &g.nodes[node];
    let w = g.const_input(n, 1)?;
    let wv = w.as_f32()?;
    let oc = s.len();
    let bias_in = g.const_input(n, 2);
    let mut w2 = wv.to_vec();
    match &n.op {
        Op::Conv { .. } => {
            if w.shape.first() != Some(&oc) {
                return None;
            }
            let per = wv.len() / oc;
            for o in 0..oc {
                for x in &mut w2[o * per..(o + 1) * per] {
                    *x *= s[o];
                }
            }
            conv_bias(n, bias_in.map(|b| &**b), s, t).map(|b| {
                (
                    Tensor::from_f32(w.shape.clone(), w2),
                    Tensor::from_f32(vec![oc], b),
                )
            })
        }
        Op::ConvTranspose { group, .. } => {
            // W is [Cin, Cout/group, k...]: output channel g*cout_g + j of group g.
            let (cin, group) = (*w.shape.first()?, *group);
            let cout_g = *w.shape.get(1)?;
            if group == 0 || cin % group != 0 || cout_g * group != oc {
                return None;
            }
            let per = wv.len() / (cin * cout_g);
            let cin_g = cin / group;
            for (ci, row) in w2.chunks_exact_mut(cout_g * per).enumerate() {
                let g = ci / cin_g;
                for (j, taps) in row.chunks_exact_mut(per).enumerate() {
                    taps.iter_mut().for_each(|x| *x *= s[g * cout_g + j]);
                }
            }
            conv_bias(n, bias_in.map(|b| &**b), s, t).map(|b| {
                (
                    Tensor::from_f32(w.shape.clone(), w2),
                    Tensor::from_f32(vec![oc], b),
                )
            })
        }
        Op::Gemm {
            alpha,
            beta,
            trans_b,
            ..
        } => {
            if w.shape.len() != 2 {
                return None;
            }
            let (k, ncols) = if *trans_b {
                (w.shape[1], w.shape[0])
            } else {
                (w.shape[0], w.shape[1])
            };
            if ncols != oc {
                return None;
            }
            for kk in 0..k {
                for (o, &so) in s.iter().enumerate() {
                    let idx = if *trans_b { o * k + kk } else { kk * oc + o };
                    w2[idx] *= so * alpha;
                }
            }
            // New bias: beta*C*s + t, broadcast to [oc] only when C is per-column.
            let b2: Vec<f32> = match bias_in {
                Some(c) => {
                    let cv = per_channel_values(c, &[1, oc], 1)?;
                    cv.iter()
                        .enumerate()
                        .map(|(o, &cb)| beta * cb * s[o] + t[o])
                        .collect()
                }
                None if n.inputs.get(2).copied().flatten().is_none() => t.to_vec(),
                None => return None,
            };
            Some((
                Tensor::from_f32(w.shape.clone(), w2),
                Tensor::from_f32(vec![oc], b2),
            ))
        }
        _ => None,
    }
}

/// The bias of a Conv / ConvTranspose after `y' = y * s + t` (a missing bias is 0), or
/// `None` when it is not a constant of one value per channel.
fn conv_bias(
    n: &crate::ir::Node,
    bias_in: Option<&Tensor>,
    s: &[f32],
    t: &[f32],
) -> Option<Vec<f32>> {
    let oc = s.len();
    let b = match bias_in {
        Some(b) => b.as_f32()?.to_vec(),
        None if n.inputs.get(2).copied().flatten().is_none() => vec![0.0; oc],
        None => return None,
    };
    (b.len() == oc).then(|| (0..oc).map(|o| b[o] * s[o] + t[o]).collect())
}

/// After `scale_weights`, installs the new weights and normalises Gemm's alpha/beta.
fn install_weights(g: &mut Graph, node: usize, w: Tensor, b: Tensor) {
    set_const_input(g, node, 1, w);
    set_const_input(g, node, 2, b);
    if let Op::Gemm { alpha, beta, .. } = &mut g.nodes[node].op {
        *alpha = 1.0;
        *beta = 1.0;
    }
}

/// Folds `BatchNormalization` (inference form, constant statistics) that follows a Conv,
/// ConvTranspose or Gemm without epilogue into that node's weights and bias.
pub fn fold_batchnorm(g: &mut Graph) -> usize {
    let mut folded = 0;
    'outer: loop {
        for bi in 0..g.nodes.len() {
            let Op::BatchNorm { epsilon } = g.nodes[bi].op else {
                continue;
            };
            let Some(Some(x)) = g.nodes[bi].inputs.first().copied() else {
                continue;
            };
            let Some(ci) = g.producers()[x] else { continue };
            if sole_consumer(g, x) != Some((bi, 0)) {
                continue;
            }
            let ok_op = match &g.nodes[ci].op {
                Op::Conv { post, .. } | Op::ConvTranspose { post, .. } | Op::Gemm { post, .. } => {
                    post.is_empty()
                }
                _ => false,
            };
            if !ok_op {
                continue;
            }
            let bn = &g.nodes[bi];
            let params: Option<Vec<Vec<f32>>> = (1..5)
                .map(|k| {
                    g.const_input(bn, k)
                        .and_then(|t| t.as_f32().map(|v| v.to_vec()))
                })
                .collect();
            let Some(p) = params else { continue };
            let (gamma, beta, mean, var) = (&p[0], &p[1], &p[2], &p[3]);
            let oc = gamma.len();
            if [beta.len(), mean.len(), var.len()].iter().any(|&l| l != oc) {
                continue;
            }
            let s: Vec<f32> = (0..oc)
                .map(|c| gamma[c] / (var[c] + epsilon).sqrt())
                .collect();
            let t: Vec<f32> = (0..oc).map(|c| beta[c] - mean[c] * s[c]).collect();
            let Some((w, b)) = scale_weights(g, ci, &s, &t) else {
                continue;
            };
            install_weights(g, ci, w, b);
            absorb_consumer(g, ci, bi);
            folded += 1;
            continue 'outer;
        }
        break;
    }
    folded
}

/// What a consumer of a Conv/Gemm/MatMul output turns into when fused.
enum Fusion {
    /// Fold into weights: `y * s + t`.
    Weights { s: Vec<f32>, t: Vec<f32> },
    /// Append to the epilogue; `extra` is a residual value to append to the inputs.
    Post { op: PostOp, extra: Option<ValueId> },
}

/// Decides how consumer `ci` (reading `x` at position `pos`) can fuse into producer `pi`.
fn classify(g: &Graph, pi: usize, ci: usize, pos: usize, x: ValueId) -> Option<Fusion> {
    let producer = &g.nodes[pi];
    let consumer = &g.nodes[ci];
    let out_shape = g.values[x].shape.clone()?;
    let axis = channel_axis(g, pi)?;
    let channels = out_shape[axis];
    let post_empty = producer
        .op
        .post_ops()
        .map(|p| p.is_empty())
        .unwrap_or(false);
    let weights_ok = post_empty
        && matches!(
            producer.op,
            Op::Conv { .. } | Op::ConvTranspose { .. } | Op::Gemm { .. }
        );
    if g.values[consumer.outputs[0]].shape.as_ref() != Some(&out_shape) {
        return None;
    }
    match &consumer.op {
        Op::Unary(u) if fusable_unary(u) => Some(Fusion::Post {
            op: PostOp::Unary(*u),
            extra: None,
        }),
        Op::Binary(b) => {
            let other_pos = 1 - pos;
            let other = consumer.inputs.get(other_pos).copied().flatten()?;
            let other_const = g.values[other].konst.clone();
            match (b, other_const) {
                (BinaryOp::PRelu, Some(c)) if pos == 0 => {
                    let slope = per_channel_values(&c, &out_shape, axis)?;
                    Some(Fusion::Post {
                        op: PostOp::ChannelPRelu { slope },
                        extra: None,
                    })
                }
                (BinaryOp::Mul | BinaryOp::Add | BinaryOp::Sub | BinaryOp::Div, Some(c)) => {
                    if matches!(b, BinaryOp::Sub | BinaryOp::Div) && pos != 0 {
                        return None;
                    }
                    let v = per_channel_values(&c, &out_shape, axis)?;
                    let (s, t): (Vec<f32>, Vec<f32>) = match b {
                        BinaryOp::Mul => (v, vec![0.0; channels]),
                        BinaryOp::Add => (vec![1.0; channels], v),
                        BinaryOp::Sub => (vec![1.0; channels], v.iter().map(|x| -x).collect()),
                        _ => (v.iter().map(|x| 1.0 / x).collect(), vec![0.0; channels]),
                    };
                    if weights_ok {
                        Some(Fusion::Weights { s, t })
                    } else {
                        Some(Fusion::Post {
                            op: PostOp::ChannelAffine { scale: s, shift: t },
                            extra: None,
                        })
                    }
                }
                (BinaryOp::Add, None) => {
                    let same = g.values[other].shape.as_ref() == Some(&out_shape)
                        && g.values[other].dtype == g.values[x].dtype
                        && other != x;
                    if !same {
                        return None;
                    }
                    let input = producer.inputs.len().max(3);
                    Some(Fusion::Post {
                        op: PostOp::AddInput { input },
                        extra: Some(other),
                    })
                }
                _ => None,
            }
        }
        _ => None,
    }
}

/// Rewrites `s = Add(x, mask); y = Softmax(s)` over the last axis, where `mask` holds the
/// trailing dims of `x` (leading dims 1: an attention mask broadcast over the heads) and
/// `s` is read only by the Softmax, into one `MaskedSoftmax(x, mask)` that absorbs both:
/// one pass over the scores instead of two. Returns how many were rewritten.
pub fn fuse_softmax_mask(g: &mut Graph) -> usize {
    let mut fused = 0;
    'outer: loop {
        for si in 0..g.nodes.len() {
            let Op::Softmax { axis } = g.nodes[si].op else {
                continue;
            };
            let Some(s) = g.nodes[si].inputs.first().copied().flatten() else {
                continue;
            };
            let Some(shape) = g.values[s].shape.clone() else {
                continue;
            };
            let last =
                crate::ir::shape::norm_axis(axis, shape.len()) == Some(shape.len().wrapping_sub(1));
            let len = shape.last().copied().unwrap_or(0);
            if !last || len == 0 || len > crate::compile::place::BPU_SOFTMAX_MAX_AXIS {
                continue;
            }
            if sole_consumer(g, s) != Some((si, 0)) {
                continue;
            }
            let Some(ai) = g.nodes.iter().position(|n| n.outputs.contains(&s)) else {
                continue;
            };
            if g.nodes[ai].op != Op::Binary(BinaryOp::Add) || g.nodes[ai].outputs.len() != 1 {
                continue;
            }
            let ins: Vec<ValueId> = g.nodes[ai].inputs.iter().flatten().copied().collect();
            let [p, q] = ins[..] else {
                continue;
            };
            let f32_shape = |v: ValueId| {
                (g.values[v].dtype == crate::ir::DType::F32)
                    .then(|| g.values[v].shape.clone())
                    .flatten()
            };
            let (Some(ps), Some(qs)) = (f32_shape(p), f32_shape(q)) else {
                continue;
            };
            let (x, m) = if ps == shape && crate::ir::shape::is_trailing_mask(&qs, &shape) {
                (p, q)
            } else if qs == shape && crate::ir::shape::is_trailing_mask(&ps, &shape) {
                (q, p)
            } else {
                continue;
            };
            if x == m || g.values[s].dtype != crate::ir::DType::F32 {
                continue;
            }
            let mut absorbed = g.nodes[ai].absorbed.clone();
            absorbed.extend(g.nodes[si].absorbed.iter().cloned());
            let n = &mut g.nodes[si];
            n.op = Op::MaskedSoftmax;
            n.inputs = vec![Some(x), Some(m)];
            n.absorbed = absorbed;
            remove_nodes(g, &[ai]);
            fused += 1;
            continue 'outer;
        }
        return fused;
    }
}

/// Rewrites `s = MatMul(q, kt); p = Softmax(s)` over the last axis (or
/// `MaskedSoftmax(s, mask)`), `y = MatMul(p, v)` into one `Attention(q, kt, [mask], v)`
/// that absorbs all three: the scores are computed, normalised and consumed block by block
/// in cache instead of going through memory three times. Only where `s` and `p` are each
/// read by the next node alone, the MatMuls have no fused epilogue, every value is f32
/// with a static shape, q, kt and v have one rank (at least 2) and equal batch dims (no
/// broadcasting), and the softmax axis is short enough for the BPU (as the Softmax
/// alone would be placed). Returns how many were rewritten.
pub fn fuse_attention(g: &mut Graph) -> usize {
    let mut fused = 0;
    'outer: loop {
        for oi in 0..g.nodes.len() {
            let Some((mi, si, ins)) = attention_at(g, oi) else {
                continue;
            };
            let mut absorbed = g.nodes[mi].absorbed.clone();
            absorbed.extend(g.nodes[si].absorbed.iter().cloned());
            absorbed.extend(g.nodes[oi].absorbed.iter().cloned());
            let n = &mut g.nodes[oi];
            n.op = Op::Attention;
            n.inputs = ins.to_vec();
            n.absorbed = absorbed;
            remove_nodes(g, &[mi, si]);
            fused += 1;
            continue 'outer;
        }
        return fused;
    }
}

/// The attention pattern ending at node `oi` (the `MatMul(p, v)`), if it qualifies (see
/// [`fuse_attention`]): the indices of the scores MatMul and the softmax, and the
/// Attention inputs `[q, kt, mask, v]`.
fn attention_at(g: &Graph, oi: usize) -> Option<(usize, usize, [Option<ValueId>; 4])> {
    let plain_matmul = |i: usize| -> Option<(ValueId, ValueId)> {
        let n = &g.nodes[i];
        match (&n.op, &n.inputs[..], &n.outputs[..]) {
            (Op::MatMul { post }, [Some(a), Some(b)], [_]) if post.is_empty() => Some((*a, *b)),
            _ => None,
        }
    };
    let f32_shape = |v: ValueId| {
        (g.values[v].dtype == crate::ir::DType::F32)
            .then(|| g.values[v].shape.clone())
            .flatten()
    };
    let producer = |v: ValueId| g.nodes.iter().position(|n| n.outputs.contains(&v));
    let (p, v) = plain_matmul(oi)?;
    let si = producer(p)?;
    if sole_consumer(g, p) != Some((oi, 0)) || g.nodes[si].outputs.len() != 1 {
        return None;
    }
    let (s, mask) = match (&g.nodes[si].op, &g.nodes[si].inputs[..]) {
        (Op::Softmax { axis }, [Some(s)]) => {
            let rank = g.values[*s].shape.as_ref()?.len();
            if crate::ir::shape::norm_axis(*axis, rank) != Some(rank.wrapping_sub(1)) {
                return None;
            }
            (*s, None)
        }
        (Op::MaskedSoftmax, [Some(s), Some(m)]) => (*s, Some(*m)),
        _ => return None,
    };
    let mi = producer(s)?;
    if sole_consumer(g, s) != Some((si, 0)) {
        return None;
    }
    let (q, kt) = plain_matmul(mi)?;
    let out = g.nodes[oi].outputs[0];
    let [qs, ks, vs, ss, ps, os] = [q, kt, v, s, p, out].map(f32_shape);
    let (qs, ks, vs, ss, ps, os) = (qs?, ks?, vs?, ss?, ps?, os?);
    let r = qs.len();
    if r < 2 || ks.len() != r || vs.len() != r || ss.len() != r || ps != ss || os.len() != r {
        return None;
    }
    let (m, k, n, d) = (qs[r - 2], qs[r - 1], ks[r - 1], vs[r - 1]);
    let lead = &qs[..r - 2];
    let dims_ok = ks[r - 2] == k
        && vs[r - 2] == n
        && &ks[..r - 2] == lead
        && &vs[..r - 2] == lead
        && &ss[..r - 2] == lead
        && ss[r - 2..] == [m, n]
        && &os[..r - 2] == lead
        && os[r - 2..] == [m, d];
    if !dims_ok || n == 0 || n > crate::compile::place::BPU_SOFTMAX_MAX_AXIS {
        return None;
    }
    if let Some(mv) = mask {
        let ms = f32_shape(mv)?;
        if !crate::ir::shape::is_trailing_mask(&ms, &ss) {
            return None;
        }
    }
    Some((mi, si, [Some(q), Some(kt), mask, Some(v)]))
}

/// Rewrites `s = Sigmoid(x); y = Mul(x, s)` (either operand order, `s` read only by the
/// Mul) into one `y = Silu(x)` node that absorbs both, which [`fuse_post_ops`] can then
/// fold into the producer of `x` like any activation (YOLO-style SiLU after every conv).
pub fn fuse_silu(g: &mut Graph) -> usize {
    let mut fused = 0;
    'outer: loop {
        for si in 0..g.nodes.len() {
            if !matches!(g.nodes[si].op, Op::Unary(UnaryOp::Sigmoid)) {
                continue;
            }
            let (Some(x), Some(&s)) = (g.nodes[si].inputs[0], g.nodes[si].outputs.first()) else {
                continue;
            };
            let Some((mi, pos)) = sole_consumer(g, s) else {
                continue;
            };
            let m = &g.nodes[mi];
            let same_shape = g.values[m.outputs[0]].shape == g.values[x].shape;
            if !matches!(m.op, Op::Binary(BinaryOp::Mul))
                || m.inputs.get(1 - pos).copied().flatten() != Some(x)
                || !same_shape
            {
                continue;
            }
            let mut absorbed = g.nodes[si].absorbed.clone();
            absorbed.extend(g.nodes[mi].absorbed.iter().cloned());
            let n = &mut g.nodes[mi];
            n.op = Op::Unary(UnaryOp::Silu);
            n.inputs = vec![Some(x)];
            n.absorbed = absorbed;
            remove_nodes(g, &[si]);
            fused += 1;
            continue 'outer;
        }
        return fused;
    }
}

/// Fuses chains of simple layers after Conv/ConvTranspose/Gemm/MatMul: activations, per-channel
/// scale/shift (into the weights when possible), PRelu and a residual Add.
pub fn fuse_post_ops(g: &mut Graph) -> usize {
    let mut fused = 0;
    'outer: loop {
        for pi in 0..g.nodes.len() {
            if g.nodes[pi].op.post_ops().is_none() || g.nodes[pi].outputs.len() != 1 {
                continue;
            }
            let x = g.nodes[pi].outputs[0];
            let Some((ci, pos)) = sole_consumer(g, x) else {
                continue;
            };
            let Some(f) = classify(g, pi, ci, pos, x) else {
                continue;
            };
            match f {
                Fusion::Weights { s, t } => {
                    let Some((w, b)) = scale_weights(g, pi, &s, &t) else {
                        continue;
                    };
                    install_weights(g, pi, w, b);
                }
                Fusion::Post { op, extra } => {
                    let n = &mut g.nodes[pi];
                    if let Some(r) = extra {
                        let PostOp::AddInput { input } = op else {
                            unreachable!("residual post-op")
                        };
                        n.inputs.resize(input, None);
                        n.inputs.push(Some(r));
                    }
                    n.op.post_ops_mut().expect("has epilogue").push(op);
                }
            }
            absorb_consumer(g, pi, ci);
            fused += 1;
            continue 'outer;
        }
        break;
    }
    fused
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::testutil::*;
    use crate::ir::ConvGeom;

    fn conv_op() -> Op {
        Op::Conv {
            geom: ConvGeom {
                kernel: vec![3, 3],
                strides: vec![1, 1],
                dilations: vec![1, 1],
                pads: vec![1, 1, 1, 1],
                auto_pad: None,
            },
            group: 1,
            post: vec![],
        }
    }

    fn conv_graph(
        b: &mut GraphBuilder,
        x: ValueId,
        name: &str,
        ic: usize,
        oc: usize,
        seed: u64,
    ) -> ValueId {
        let w = b.konst(
            &format!("{name}_w"),
            &[oc, ic, 3, 3],
            rand_vec(oc * ic * 9, seed),
        );
        let bias = b.konst(&format!("{name}_b"), &[oc], rand_vec(oc, seed + 1));
        b.node(name, conv_op(), &[x, w, bias], &[1, oc, 5, 5])
    }

    #[test]
    fn batchnorm_folds_into_conv() {
        let mut b = GraphBuilder::new();
        let x = b.input("x", &[1, 2, 5, 5]);
        let c = conv_graph(&mut b, x, "conv", 2, 3, 1);
        let gamma = b.konst("g", &[3], vec![1.5, 0.5, 2.0]);
        let beta = b.konst("be", &[3], vec![0.1, -0.2, 0.3]);
        let mean = b.konst("m", &[3], vec![0.05, 0.1, -0.1]);
        let var = b.konst("v", &[3], vec![0.9, 1.1, 0.5]);
        let y = b.node(
            "bn",
            Op::BatchNorm { epsilon: 1e-5 },
            &[c, gamma, beta, mean, var],
            &[1, 3, 5, 5],
        );
        let mut g = b.finish(&[y]);
        let input = vec![rand_vec(50, 7)];
        let before = run_graph(&g, &input);
        assert_eq!(fold_batchnorm(&mut g), 1);
        assert_eq!(g.nodes.len(), 1);
        assert_eq!(g.nodes[0].absorbed, vec!["conv", "bn"]);
        assert_close(&before, &run_graph(&g, &input), 1e-5);
    }

    /// BatchNorm folds into a grouped ConvTranspose's weights, a ReLU and a residual
    /// add fuse into its epilogue; the result is unchanged.
    #[test]
    fn batchnorm_relu_and_residual_fuse_into_conv_transpose() {
        let mut b = GraphBuilder::new();
        let x = b.input("x", &[1, 4, 3, 3]);
        let r = b.input("r", &[1, 6, 6, 6]);
        let w = b.konst("w", &[4, 3, 2, 2], rand_vec(48, 11));
        let op = Op::ConvTranspose {
            geom: ConvGeom {
                kernel: vec![2, 2],
                strides: vec![2, 2],
                dilations: vec![1, 1],
                pads: vec![0, 0, 0, 0],
                auto_pad: None,
            },
            group: 2,
            output_padding: vec![],
            output_shape: vec![],
            post: vec![],
        };
        let c = b.node("deconv", op, &[x, w], &[1, 6, 6, 6]);
        let ks: Vec<ValueId> = (0..4)
            .map(|k| {
                let v = rand_vec(6, 20 + k as u64)
                    .iter()
                    .map(|v| v.abs() + 0.5)
                    .collect();
                b.konst(&format!("bn{k}"), &[6], v)
            })
            .collect();
        let bn = b.node(
            "bn",
            Op::BatchNorm { epsilon: 1e-5 },
            &[c, ks[0], ks[1], ks[2], ks[3]],
            &[1, 6, 6, 6],
        );
        let add = b.node("add", Op::Binary(BinaryOp::Add), &[bn, r], &[1, 6, 6, 6]);
        let y = b.node("relu", Op::Unary(UnaryOp::Relu), &[add], &[1, 6, 6, 6]);
        let mut g = b.finish(&[y]);
        let input = vec![rand_vec(36, 7), rand_vec(216, 8)];
        let before = run_graph(&g, &input);
        assert_eq!(fold_batchnorm(&mut g), 1);
        assert_eq!(fuse_post_ops(&mut g), 2);
        assert_eq!(g.nodes.len(), 1);
        assert_eq!(g.nodes[0].absorbed, vec!["deconv", "bn", "add", "relu"]);
        assert_eq!(g.nodes[0].op.post_ops().map(|p| p.len()), Some(2));
        assert_close(&before, &run_graph(&g, &input), 1e-5);
    }

    #[test]
    fn conv_relu_residual_chain_fuses() {
        let mut b = GraphBuilder::new();
        let x = b.input("x", &[1, 3, 5, 5]);
        let c1 = conv_graph(&mut b, x, "conv1", 3, 3, 3);
        let s = b.konst("scale", &[1, 3, 1, 1], vec![2.0, 0.5, -1.0]);
        let m = b.node("mul", Op::Binary(BinaryOp::Mul), &[c1, s], &[1, 3, 5, 5]);
        let r = b.node("relu", Op::Unary(UnaryOp::Relu), &[m], &[1, 3, 5, 5]);
        let c2 = conv_graph(&mut b, r, "conv2", 3, 3, 5);
        let a = b.node("add", Op::Binary(BinaryOp::Add), &[c2, x], &[1, 3, 5, 5]);
        let y = b.node(
            "clip",
            Op::Unary(UnaryOp::Clip { min: 0.0, max: 6.0 }),
            &[a],
            &[1, 3, 5, 5],
        );
        let mut g = b.finish(&[y]);
        let input = vec![rand_vec(75, 9)];
        let before = run_graph(&g, &input);
        assert_eq!(fuse_post_ops(&mut g), 4);
        assert_eq!(g.nodes.len(), 2);
        assert_eq!(g.nodes[0].absorbed, vec!["conv1", "mul", "relu"]);
        assert_eq!(g.nodes[1].absorbed, vec!["conv2", "add", "clip"]);
        // The scale went into the weights; relu stays an epilogue step.
        assert_eq!(
            g.nodes[0].op.post_ops().unwrap(),
            &vec![PostOp::Unary(UnaryOp::Relu)]
        );
        assert!(matches!(
            g.nodes[1].op.post_ops().unwrap()[0],
            PostOp::AddInput { input: 3 }
        ));
        assert_close(&before, &run_graph(&g, &input), 1e-5);
    }

    #[test]
    fn sigmoid_times_input_becomes_silu_then_fuses_into_the_conv() {
        for swap in [false, true] {
            let mut b = GraphBuilder::new();
            let x = b.input("x", &[1, 2, 5, 5]);
            let c = conv_graph(&mut b, x, "conv", 2, 2, 21);
            let s = b.node("sig", Op::Unary(UnaryOp::Sigmoid), &[c], &[1, 2, 5, 5]);
            let ins = if swap { [s, c] } else { [c, s] };
            let y = b.node("mul", Op::Binary(BinaryOp::Mul), &ins, &[1, 2, 5, 5]);
            let mut g = b.finish(&[y]);
            let input = vec![rand_vec(50, 23)];
            let before = run_graph(&g, &input);
            assert_eq!(fuse_silu(&mut g), 1);
            assert_eq!(fuse_post_ops(&mut g), 1);
            assert_eq!(g.nodes.len(), 1);
            assert_eq!(g.nodes[0].absorbed, vec!["conv", "sig", "mul"]);
            assert_eq!(
                g.nodes[0].op.post_ops().unwrap(),
                &[PostOp::Unary(UnaryOp::Silu)][..]
            );
            assert_close(&before, &run_graph(&g, &input), 1e-5);
        }
        // A sigmoid read by anything else, or a Mul by another value, is left alone.
        let mut b = GraphBuilder::new();
        let x = b.input("x", &[1, 2, 5, 5]);
        let z = b.input("z", &[1, 2, 5, 5]);
        let s = b.node("sig", Op::Unary(UnaryOp::Sigmoid), &[x], &[1, 2, 5, 5]);
        let y = b.node("mul", Op::Binary(BinaryOp::Mul), &[z, s], &[1, 2, 5, 5]);
        let mut g = b.finish(&[y]);
        assert_eq!(fuse_silu(&mut g), 0);
        let mut b = GraphBuilder::new();
        let x = b.input("x", &[1, 2, 5, 5]);
        let s = b.node("sig", Op::Unary(UnaryOp::Sigmoid), &[x], &[1, 2, 5, 5]);
        let y = b.node("mul", Op::Binary(BinaryOp::Mul), &[x, s], &[1, 2, 5, 5]);
        let mut g = b.finish(&[y, s]);
        assert_eq!(fuse_silu(&mut g), 0);
    }

    #[test]
    fn scale_after_activation_becomes_channel_affine() {
        let mut b = GraphBuilder::new();
        let x = b.input("x", &[1, 2, 5, 5]);
        let c = conv_graph(&mut b, x, "conv", 2, 2, 11);
        let r = b.node("sig", Op::Unary(UnaryOp::Sigmoid), &[c], &[1, 2, 5, 5]);
        let s = b.konst("shift", &[2, 1, 1], vec![0.5, -0.5]);
        let y = b.node("add", Op::Binary(BinaryOp::Add), &[r, s], &[1, 2, 5, 5]);
        let mut g = b.finish(&[y]);
        let input = vec![rand_vec(50, 13)];
        let before = run_graph(&g, &input);
        assert_eq!(fuse_post_ops(&mut g), 2);
        assert!(matches!(
            g.nodes[0].op.post_ops().unwrap()[1],
            PostOp::ChannelAffine { .. }
        ));
        assert_close(&before, &run_graph(&g, &input), 1e-5);
    }

    #[test]
    fn shared_output_is_not_fused() {
        let mut b = GraphBuilder::new();
        let x = b.input("x", &[1, 2, 5, 5]);
        let c = conv_graph(&mut b, x, "conv", 2, 2, 17);
        let r = b.node("relu", Op::Unary(UnaryOp::Relu), &[c], &[1, 2, 5, 5]);
        let y = b.node("add", Op::Binary(BinaryOp::Add), &[r, c], &[1, 2, 5, 5]);
        let mut g = b.finish(&[y]);
        assert_eq!(fuse_post_ops(&mut g), 0);
    }

    #[test]
    fn gemm_batchnorm_and_relu() {
        let mut b = GraphBuilder::new();
        let x = b.input("x", &[2, 4]);
        let w = b.konst("w", &[3, 4], rand_vec(12, 21));
        let c = b.konst("c", &[3], rand_vec(3, 22));
        let gm = b.node(
            "gemm",
            Op::Gemm {
                alpha: 0.5,
                beta: 2.0,
                trans_a: false,
                trans_b: true,
                post: vec![],
            },
            &[x, w, c],
            &[2, 3],
        );
        let gamma = b.konst("g", &[3], vec![1.5, 0.5, 2.0]);
        let beta = b.konst("be", &[3], vec![0.1, -0.2, 0.3]);
        let mean = b.konst("m", &[3], vec![0.05, 0.1, -0.1]);
        let var = b.konst("v", &[3], vec![0.9, 1.1, 0.5]);
        let bn = b.node(
            "bn",
            Op::BatchNorm { epsilon: 1e-5 },
            &[gm, gamma, beta, mean, var],
            &[2, 3],
        );
        let y = b.node("relu", Op::Unary(UnaryOp::Relu), &[bn], &[2, 3]);
        let mut g = b.finish(&[y]);
        let input = vec![rand_vec(8, 23)];
        let before = run_graph(&g, &input);
        assert_eq!(fold_batchnorm(&mut g), 1);
        assert_eq!(fuse_post_ops(&mut g), 1);
        assert_eq!(g.nodes.len(), 1);
        assert_close(&before, &run_graph(&g, &input), 1e-5);
    }

    /// `Softmax(Add(x, mask))` over the last axis with a `[1, 1, L, L]` mask becomes one
    /// MaskedSoftmax (same outputs, shapes hold); a mask that is not x's trailing dims, a
    /// Softmax over another axis and an Add read twice stay as they are.
    #[test]
    fn softmax_mask_fuses_only_over_trailing_dims_and_the_last_axis() {
        let cases: [(&[usize], i64, bool, bool); 5] = [
            (&[1, 1, 4, 5], -1, false, true),
            (&[4, 5], 3, false, true),
            (&[1, 2, 1, 5], -1, false, false),
            (&[1, 1, 4, 5], 2, false, false),
            (&[1, 1, 4, 5], -1, true, false),
        ];
        for (mshape, axis, shared, fuses) in cases {
            let mut b = GraphBuilder::new();
            let x = b.input("x", &[1, 2, 4, 5]);
            let n: usize = mshape.iter().product();
            let mask = b.konst("mask", mshape, rand_vec(n, 41));
            let s = b.node("add", Op::Binary(BinaryOp::Add), &[x, mask], &[1, 2, 4, 5]);
            let y = b.node("softmax", Op::Softmax { axis }, &[s], &[1, 2, 4, 5]);
            let outs = if shared { vec![y, s] } else { vec![y] };
            let mut g = b.finish(&outs);
            let input = vec![rand_vec(40, 42)];
            let before = run_graph(&g, &input);
            assert_eq!(
                fuse_softmax_mask(&mut g),
                usize::from(fuses),
                "{mshape:?} {axis}"
            );
            if fuses {
                assert_eq!(g.nodes.len(), 1);
                assert_eq!(g.nodes[0].op, Op::MaskedSoftmax);
                assert_eq!(g.nodes[0].absorbed, ["add", "softmax"]);
                for n in &g.nodes {
                    crate::ir::shape::infer_node(&g, n).expect("fused shapes hold");
                }
            }
            assert_close(&before, &run_graph(&g, &input), 1e-6);
        }
    }

    /// What [`attention_case`] varies from the plain `MatMul -> Softmax -> MatMul`.
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum AttnVariant {
        Plain,
        /// An `Add` of a `[1, 1, 4, 5]` mask, then `fuse_softmax_mask` first.
        Masked,
        ScoresReadTwice,
        ProbsReadTwice,
        /// Softmax over the query axis.
        OtherAxis,
        /// kt and v broadcast over the heads (`[1, 1, ...]`).
        BroadcastBatch,
        /// q and the values after it typed u8 (an int8 graph; not run).
        Int8,
        /// The output MatMul with a fused ReLU.
        PostOp,
    }

    /// q `[1, 2, 4, 3]`, kt `[1, 2, 3, 5]`, v `[1, 2, 5, 6]` through the variant.
    fn attention_case(variant: AttnVariant) -> (Graph, Vec<Vec<f32>>) {
        use AttnVariant as V;
        let mut b = GraphBuilder::new();
        let lead: &[usize] = if variant == V::BroadcastBatch {
            &[1, 1]
        } else {
            &[1, 2]
        };
        let q = b.input("q", &[1, 2, 4, 3]);
        let kt = b.input("kt", &[lead, &[3, 5]].concat());
        let v = b.input("v", &[lead, &[5, 6]].concat());
        let inputs = vec![
            rand_vec(24, 51),
            rand_vec(lead[1] * 15, 52),
            rand_vec(lead[1] * 30, 53),
        ];
        let mm = Op::MatMul { post: vec![] };
        let mut s = b.node("qk", mm.clone(), &[q, kt], &[1, 2, 4, 5]);
        let scores = s;
        if variant == V::Masked {
            let mask = b.konst("mask", &[1, 1, 4, 5], rand_vec(20, 54));
            s = b.node("add", Op::Binary(BinaryOp::Add), &[s, mask], &[1, 2, 4, 5]);
        }
        let axis = if variant == V::OtherAxis { 2 } else { -1 };
        let p = b.node("softmax", Op::Softmax { axis }, &[s], &[1, 2, 4, 5]);
        let post = if variant == V::PostOp {
            vec![PostOp::Unary(UnaryOp::Relu)]
        } else {
            vec![]
        };
        let y = b.node("pv", Op::MatMul { post }, &[p, v], &[1, 2, 4, 6]);
        let outs = match variant {
            V::ScoresReadTwice => vec![y, scores],
            V::ProbsReadTwice => vec![y, p],
            _ => vec![y],
        };
        let mut g = b.finish(&outs);
        if variant == V::Int8 {
            for val in [q, scores, p, y] {
                g.values[val].dtype = crate::ir::DType::U8;
            }
        }
        (g, inputs)
    }

    /// `MatMul -> Softmax (last axis, optionally masked) -> MatMul` becomes one Attention
    /// (same outputs, shapes hold); an intermediate read twice, a softmax over another
    /// axis, broadcast batch dims, int8 values and a fused epilogue stay as they are.
    #[test]
    fn attention_fuses_only_the_plain_chain() {
        use AttnVariant as V;
        let cases = [
            (V::Plain, true),
            (V::Masked, true),
            (V::ScoresReadTwice, false),
            (V::ProbsReadTwice, false),
            (V::OtherAxis, false),
            (V::BroadcastBatch, false),
            (V::Int8, false),
            (V::PostOp, false),
        ];
        for (variant, fuses) in cases {
            let (mut g, inputs) = attention_case(variant);
            let before = (variant != V::Int8).then(|| run_graph(&g, &inputs));
            if variant == V::Masked {
                assert_eq!(fuse_softmax_mask(&mut g), 1);
            }
            let nodes = g.nodes.len();
            assert_eq!(fuse_attention(&mut g), usize::from(fuses), "{variant:?}");
            if fuses {
                assert_eq!(g.nodes.len(), 1);
                assert_eq!(g.nodes[0].op, Op::Attention);
                let absorbed: &[&str] = if variant == V::Masked {
                    &["qk", "add", "softmax", "pv"]
                } else {
                    &["qk", "softmax", "pv"]
                };
                assert_eq!(g.nodes[0].absorbed, absorbed);
                assert_eq!(g.nodes[0].inputs[2].is_some(), variant == V::Masked);
                crate::ir::shape::infer_node(&g, &g.nodes[0]).expect("fused shapes hold");
            } else {
                assert_eq!(g.nodes.len(), nodes, "{variant:?}");
            }
            if let Some(before) = before {
                assert_close(&before, &run_graph(&g, &inputs), 1e-6);
            }
        }
    }

    /// A softmax axis too long for the BPU keeps its nodes (they are placed apart).
    #[test]
    fn attention_keeps_a_long_softmax_axis() {
        let n = crate::compile::place::BPU_SOFTMAX_MAX_AXIS + 1;
        let mut b = GraphBuilder::new();
        let q = b.input("q", &[1, 1]);
        let kt = b.input("kt", &[1, n]);
        let v = b.input("v", &[n, 1]);
        let s = b.node("qk", Op::MatMul { post: vec![] }, &[q, kt], &[1, n]);
        let p = b.node("softmax", Op::Softmax { axis: 1 }, &[s], &[1, n]);
        let y = b.node("pv", Op::MatMul { post: vec![] }, &[p, v], &[1, 1]);
        let mut g = b.finish(&[y]);
        assert_eq!(fuse_attention(&mut g), 0);
    }
}
