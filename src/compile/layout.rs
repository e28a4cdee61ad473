//! Channels-last regions: runs of depthwise and pointwise convs (the inverted-residual
//! blocks of mobile networks) computed on `[N, H, W, C]` tensors instead of `[N, C, H,
//! W]`.
//!
//! Why: in channels-last a 1x1 conv is one GEMM whose A operand is the activation read
//! in place (`[N*H*W, Cin]` rows) and whose B is the constant weights packed once, so no
//! activation is packed per run and the small output-channel counts of projections (16
//! to 64) are the GEMM's narrow side; a depthwise conv takes channels as vector lanes,
//! whatever the plane's width or stride. Planar 1x1 convs pack their whole input per
//! run, and planar depthwise convs lose lanes on row ends of small planes.
//!
//! What: convs are grouped into regions connected through their data and residual
//! inputs. A region with a depthwise conv whose boundary (tensors entering it from
//! planar producers, tensors leaving it to planar consumers) moves at most a quarter of
//! the elements its convs produce is rewritten:
//! - a 1x1 conv becomes `MatMul(x, W^T)` over the channels-last input (its bias a
//!   leading `ChannelAffine` of unit scale, its post-ops kept: channels are MatMul's
//!   last dim), a depthwise conv `ConvNhwc`, and so does a dense conv over at most
//!   [`STEM_MAX_CHANNELS`] input channels that opens a region (an image stem: its
//!   small input is the boundary instead of its large output);
//! - a `Transpose` to channels-last enters each boundary input once, a `Transpose`
//!   back produces each value a planar consumer (or the graph's output) reads, under
//!   its original id;
//! - a `GlobalAveragePool` of a region value becomes a mean over H and W of the
//!   channels-last value and a `Reshape` (a view) to `[N, C, 1, 1]`.
//!
//! Every rewrite computes the same function: the conformance suite runs the rewritten
//! graphs.

use crate::ir::{BinaryOp, DType, Graph, Node, Op, PostOp, ReduceOp, Tensor, Value, ValueId};
use std::collections::{HashMap, HashSet};

/// A region's boundary may move at most `1 / BOUNDARY_SHARE` of the elements its convs
/// produce (each boundary element costs a transpose: about a pass over it).
const BOUNDARY_SHARE: usize = 4;

/// Input channels up to which a dense conv is a [`Kind::Stem`]: its input, the region's
/// boundary, is then a fraction of its output.
const STEM_MAX_CHANNELS: usize = 4;

/// A stem's output must hold at least this many times the elements of its input:
/// MobileNetV2's (3 -> 32 channels, stride 2) holds 2.7 times as many and gains (its
/// transposes 107 -> 64 us); DBNet-MV3's (3 -> 16, stride 2 at 640x640) 1.3 times and
/// loses (input transpose 385-510 us against 297 for the planar stem's output).
const STEM_MIN_GROWTH: usize = 2;

/// How a conv is computed channels-last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// 1x1, stride 1, no pads, one group: a MatMul, or with `wide` a 1x1 `ConvNhwc` on
    /// the matrix engine's channels-last run ([`Dense::Wide`] layouts, where its planes
    /// fill the run's position tiles: [`wide_pointwise`]).
    Pointwise { wide: bool },
    /// One input and one output channel per group.
    Depthwise,
    /// A dense conv over few input channels (an image stem): im2col rows and a GEMM with
    /// the output channels as columns (`kernels::conv::dense_nhwc`). Only where it opens a
    /// region (below).
    Stem,
    /// A dense conv the matrix engine's channels-last run takes
    /// (`kernels::conv::conv_direct_nhwc`), only in [`Dense::Wide`] layouts: its input
    /// packs into the engine's planes by contiguous conversions and its output leaves as
    /// positions x channels, so chains of them (ResNet's blocks) skip the planar path's
    /// transposes on both sides.
    Dense,
    /// A 2-D MaxPool (`MaxPoolNhwc`), only in [`Dense::Wide`] layouts: ResNet's pool
    /// between its stem and first block, so that the stem opens the region.
    MaxPool,
    /// `Mul` of a `[N, C, H, W]` value (input `x`) by a per-channel `[N | 1, C, 1, 1]`
    /// one (the squeeze-excite scale of MobileNetV3 blocks).
    ChannelScale { x: usize },
}

/// Which dense convs a layout takes channels-last besides the image stems.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dense {
    /// None (f32 plans, and CPUs without a matrix engine).
    StemsOnly,
    /// Every dense conv the matrix engine's channels-last run takes ([`Kind::Dense`]):
    /// models compiled for bf16 on a CPU with AMX.
    Wide,
}

/// True when the matrix engine's channels-last run takes a 1x1 conv of `c_in` input
/// channels over planes of `positions`: enough channels for its K steps
/// ([`WIDE_MIN_CIN`](crate::kernels::conv::direct::WIDE_MIN_CIN)) and at most a fifth
/// more positions computed than kept by its position tiles. MobileNetV2 in bf16 on AMX,
/// one thread, per-node sums of interleaved rounds: 4.86 -> 4.09 ms (its 28x28 expands
/// 95-110 -> 30-39 us, the 112x112 one 533 -> 417); its 7x7 ones (49 positions in 64)
/// were as fast as MatMuls and stay MatMuls.
fn wide_pointwise(c_in: usize, positions: usize) -> bool {
    use crate::kernels::conv::direct::{WIDE_MIN_CIN, WIDE_WIDTH};
    c_in >= WIDE_MIN_CIN && positions.div_ceil(WIDE_WIDTH) * WIDE_WIDTH * 5 <= positions * 6
}

/// The channels-last form of node `n`, if it has one: a 2-D f32 conv over a 4-D input
/// with constant weights (and bias), or a per-channel scale.
fn kind_of(g: &Graph, n: &Node, dense: Dense) -> Option<Kind> {
    if let Op::Binary(BinaryOp::Mul) = n.op {
        return channel_scale(g, n);
    }
    if let Op::MaxPool { geom, .. } = &n.op {
        let x = n.inputs.first().copied().flatten()?;
        let four = g.shape(x).is_some_and(|s| s.len() == 4);
        let plain = geom.kernel.len() == 2 && geom.auto_pad.is_none() && n.outputs.len() == 1;
        let f32_in = g.values[x].dtype == DType::F32;
        return (dense == Dense::Wide && four && plain && f32_in).then_some(Kind::MaxPool);
    }
    let Op::Conv { geom, group, .. } = &n.op else {
        return None;
    };
    let x = g.shape(n.inputs.first().copied().flatten()?)?;
    let wv = n.inputs.get(1).copied().flatten()?;
    let w = g.shape(wv)?;
    let f32_const = |v: ValueId| g.values[v].dtype == DType::F32 && g.values[v].konst.is_some();
    if x.len() != 4 || w.len() != 4 || !f32_const(wv) || geom.auto_pad.is_some() {
        return None;
    }
    if g.values[n.inputs[0]?].dtype != DType::F32 || n.outputs.len() != 1 {
        return None;
    }
    if let Some(b) = n.inputs.get(2).copied().flatten() {
        if !f32_const(b) {
            return None;
        }
    }
    let c = x[1];
    if *group == 1
        && geom.kernel == [1, 1]
        && geom.strides == [1, 1]
        && geom.pads.iter().all(|&p| p == 0)
    {
        let wide = dense == Dense::Wide && wide_pointwise(c, x[2] * x[3]);
        return Some(Kind::Pointwise { wide });
    }
    if geom.kernel.len() != 2 || geom.pads.len() != 4 || geom.dilations.len() != 2 {
        return None;
    }
    if (0..2).any(|i| geom.pads[i] >= geom.kernel[i] * geom.dilations[i]) {
        // A leading pad past the kernel's reach (outputs without taps).
        return None;
    }
    if *group == c && w[0] == c && w[1] == 1 {
        return Some(Kind::Depthwise);
    }
    let out = g.shape(*n.outputs.first()?)?;
    if out.len() != 4 || *group != 1 || w[1] != c {
        return None;
    }
    let s = crate::kernels::conv::ConvShape {
        n: x[0],
        c_in: c,
        h: x[2],
        w: x[3],
        c_out: out[1],
        oh: out[2],
        ow: out[3],
        kh: geom.kernel[0],
        kw: geom.kernel[1],
        sh: geom.strides[0],
        sw: geom.strides[1],
        dh: geom.dilations[0],
        dw: geom.dilations[1],
        ph: geom.pads[0],
        pw: geom.pads[1],
        group: 1,
    };
    if dense == Dense::Wide && crate::kernels::conv::direct::wide_applies(&s) {
        return Some(Kind::Dense);
    }
    // A stem the channels-last kernel computes, whose output holds at least
    // STEM_MIN_GROWTH times its input's elements (the input's transpose, a few rows,
    // costs more per element than the output's would).
    let grows = out.iter().product::<usize>() >= STEM_MIN_GROWTH * x.iter().product::<usize>();
    let stem = c <= STEM_MAX_CHANNELS && crate::kernels::conv::dense_nhwc_applies(&s);
    (grows && stem).then_some(Kind::Stem)
}

/// `Kind::ChannelScale` when `n` (a `Mul`) multiplies an f32 `[N, C, H, W]` value by an
/// f32 `[N | 1, C, 1, 1]` one.
fn channel_scale(g: &Graph, n: &Node) -> Option<Kind> {
    let [Some(a), Some(b)] = n.inputs[..] else {
        return None;
    };
    let f32_shape = |v: ValueId| {
        (g.values[v].dtype == DType::F32)
            .then(|| g.shape(v))
            .flatten()
    };
    let (sa, sb, so) = (f32_shape(a)?, f32_shape(b)?, g.shape(*n.outputs.first()?)?);
    let scale_of = |x: &[usize], s: &[usize]| {
        x.len() == 4
            && s.len() == 4
            && (s[0] == x[0] || s[0] == 1)
            && s[1] == x[1]
            && s[2..] == [1, 1]
    };
    let x = if scale_of(sa, sb) && sa == so {
        0
    } else if scale_of(sb, sa) && sb == so {
        1
    } else {
        return None;
    };
    (n.outputs.len() == 1).then_some(Kind::ChannelScale { x })
}

/// The data inputs of a region node (a conv's input and residuals, a scale's `x`), by
/// input position.
fn data_inputs(n: &Node, kind: Kind) -> Vec<usize> {
    if let Kind::ChannelScale { x } = kind {
        return vec![x];
    }
    let mut v = vec![0];
    if let Some(post) = n.op.post_ops() {
        for p in post {
            if let PostOp::AddInput { input } = p {
                v.push(*input);
            }
        }
    }
    v
}

fn find(parent: &mut [usize], i: usize) -> usize {
    let mut r = i;
    while parent[r] != r {
        r = parent[r];
    }
    parent[i] = r;
    r
}

/// Rewrites the profitable channels-last regions of `g` (see the module doc), image
/// stems the only dense convs; returns the number of nodes rewritten (convs, scales,
/// pools).
pub fn channels_last(g: &mut Graph) -> usize {
    channels_last_with(g, Dense::StemsOnly)
}

/// [`channels_last`] taking the dense convs `dense` says too; a region then needs a
/// depthwise or a [`Kind::Dense`] conv.
pub fn channels_last_with(g: &mut Graph, dense: Dense) -> usize {
    let mut kinds: Vec<Option<Kind>> = g.nodes.iter().map(|n| kind_of(g, n, dense)).collect();
    // Consumers per value.
    let mut consumers: Vec<Vec<usize>> = vec![Vec::new(); g.values.len()];
    for (i, n) in g.nodes.iter().enumerate() {
        for v in n.inputs.iter().flatten() {
            consumers[*v].push(i);
        }
    }
    trim_leaves(g, &consumers, &mut kinds);
    let producers = g.producers();
    keep_opening_stems(g, &consumers, &producers, &mut kinds);
    let mut accepted = accepted_regions(g, &kinds, &consumers, &producers);
    // A region that wide dense convs or pools join may fail the boundary rule where its
    // depthwise part alone passes (DBNet-MV3's backbone, its FPN convs joining): leave
    // the rejected regions' dense convs and pools out and decide again, as a stems-only
    // layout would for what is left.
    loop {
        let wide_member = |k: Option<Kind>| matches!(k, Some(Kind::Dense | Kind::MaxPool));
        let demoted: Vec<usize> = (0..g.nodes.len())
            .filter(|&i| !accepted[i] && wide_member(kinds[i]))
            .collect();
        if demoted.is_empty() {
            break;
        }
        for i in demoted {
            kinds[i] = None;
        }
        trim_leaves(g, &consumers, &mut kinds);
        keep_opening_stems(g, &consumers, &producers, &mut kinds);
        accepted = accepted_regions(g, &kinds, &consumers, &producers);
    }
    if !accepted.contains(&true) {
        return 0;
    }
    rewrite(g, &kinds, &accepted, &consumers)
}

/// Which nodes of `g` lie in an accepted region, given each node's channels-last kind:
/// nodes joined through their data inputs, a region accepted when it holds a depthwise
/// or wide dense conv and its boundary moves at most `1 / BOUNDARY_SHARE` of the
/// elements its nodes produce.
fn accepted_regions(
    g: &Graph,
    kinds: &[Option<Kind>],
    consumers: &[Vec<usize>],
    producers: &[Option<usize>],
) -> Vec<bool> {
    let mut parent: Vec<usize> = (0..g.nodes.len()).collect();
    for (i, n) in g.nodes.iter().enumerate() {
        if kinds[i].is_none() {
            continue;
        }
        for pos in data_inputs(n, kinds[i].expect("region node")) {
            let Some(v) = n.inputs.get(pos).copied().flatten() else {
                continue;
            };
            if let Some(p) = producers[v].filter(|&p| kinds[p].is_some()) {
                let (a, b) = (find(&mut parent, i), find(&mut parent, p));
                parent[a] = b;
            }
        }
    }
    let elems = |v: ValueId| g.shape(v).map_or(0, |s| s.iter().product::<usize>());
    let gap_of = |i: usize| {
        matches!(g.nodes[i].op, Op::GlobalAveragePool)
            && g.shape(g.nodes[i].outputs[0]).is_some_and(|s| s.len() == 4)
    };
    // Per region root: (has a depthwise or wide dense conv, boundary elements, produced
    // elements).
    let mut stats: HashMap<usize, (bool, usize, usize)> = HashMap::new();
    let mut entered: HashSet<(usize, ValueId)> = HashSet::new();
    for i in 0..g.nodes.len() {
        let Some(k) = kinds[i] else { continue };
        let root = find(&mut parent, i);
        let n = &g.nodes[i];
        let out = n.outputs[0];
        let mut boundary = 0;
        for pos in data_inputs(n, kinds[i].expect("region node")) {
            let Some(v) = n.inputs.get(pos).copied().flatten() else {
                continue;
            };
            let inside = producers[v].is_some_and(|p| kinds[p].is_some());
            if !inside && entered.insert((root, v)) {
                boundary += elems(v);
            }
        }
        let leaves = g.outputs.contains(&out)
            || consumers[out]
                .iter()
                .any(|&c| kinds[c].is_none() && !gap_of(c));
        if leaves {
            boundary += elems(out);
        }
        let e = stats.entry(root).or_insert((false, 0, 0));
        e.0 |= matches!(k, Kind::Depthwise | Kind::Dense);
        e.1 += boundary;
        e.2 += elems(out);
    }
    (0..g.nodes.len())
        .map(|i| {
            kinds[i].is_some() && {
                let (dw, bnd, work) = stats[&find(&mut parent, i)];
                dw && bnd * BOUNDARY_SHARE <= work
            }
        })
        .collect()
}

/// Leaves out of the regions the 1x1 convs whose output only planar nodes read (an FPN's
/// lateral convs after a backbone) when their input is smaller than their output: the
/// boundary then moves the input rather than the output. Repeated until none is left
/// (a conv whose consumers just left becomes such a leaf).
fn trim_leaves(g: &Graph, consumers: &[Vec<usize>], kinds: &mut [Option<Kind>]) {
    let elems = |v: ValueId| g.shape(v).map_or(0, |s| s.iter().product::<usize>());
    loop {
        let mut changed = false;
        for (i, n) in g.nodes.iter().enumerate() {
            if !matches!(kinds[i], Some(Kind::Pointwise { .. })) {
                continue;
            }
            let out = n.outputs[0];
            let planar_only = consumers[out]
                .iter()
                .all(|&c| kinds[c].is_none() && !matches!(g.nodes[c].op, Op::GlobalAveragePool));
            let x = n.inputs[0].map_or(usize::MAX, elems);
            if planar_only && x < elems(out) {
                kinds[i] = None;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
}

/// Leaves out the stems that do not open a region: a stem's input must come from a
/// planar node (or the graph) and a region node must read its output; else the stem
/// would only move the boundary inside a planar part.
fn keep_opening_stems(
    g: &Graph,
    consumers: &[Vec<usize>],
    producers: &[Option<usize>],
    kinds: &mut [Option<Kind>],
) {
    for (i, n) in g.nodes.iter().enumerate() {
        if kinds[i] != Some(Kind::Stem) {
            continue;
        }
        let from_region = n.inputs[0]
            .and_then(|x| producers[x])
            .is_some_and(|p| kinds[p].is_some());
        let out = n.outputs[0];
        let feeds_region = consumers[out]
            .iter()
            .any(|&c| kinds[c].is_some_and(|k| k != Kind::Stem));
        if from_region || !feeds_region {
            kinds[i] = None;
        }
    }
}

/// `[N, C, H, W]` -> `[N, H, W, C]`.
fn nhwc(s: &[usize]) -> Vec<usize> {
    vec![s[0], s[2], s[3], s[1]]
}

/// Builds the new node list with the accepted convs channels-last.
fn rewrite(
    g: &mut Graph,
    kinds: &[Option<Kind>],
    accepted: &[bool],
    consumers: &[Vec<usize>],
) -> usize {
    let gap: Vec<bool> = g
        .nodes
        .iter()
        .map(|n| matches!(n.op, Op::GlobalAveragePool))
        .collect();
    let old = std::mem::take(&mut g.nodes);
    let mut nodes = Vec::with_capacity(old.len() + 8);
    // Planar value -> its channels-last twin.
    let mut twin: HashMap<ValueId, ValueId> = HashMap::new();
    let mut converted = 0;
    let new_value = |g: &mut Graph, base: &str, shape: Vec<usize>| {
        let name = g.fresh_name(base);
        g.add_value(Value {
            name,
            dtype: DType::F32,
            shape: Some(shape),
            declared: None,
            konst: None,
        })
    };
    let to_nhwc =
        |g: &mut Graph, nodes: &mut Vec<Node>, twin: &mut HashMap<ValueId, ValueId>, v| {
            if let Some(&t) = twin.get(&v) {
                return t;
            }
            let s = g.shape(v).expect("shaped").to_vec();
            let base = format!("{}_nhwc", g.values[v].name);
            let t = new_value(g, &base, nhwc(&s));
            let name = g.fresh_name(&format!("{}_to_nhwc", g.values[v].name));
            nodes.push(Node {
                name: name.clone(),
                op: Op::Transpose {
                    perm: Some(vec![0, 2, 3, 1]),
                },
                inputs: vec![Some(v)],
                outputs: vec![t],
                absorbed: vec![name],
                placement: None,
            });
            twin.insert(v, t);
            t
        };
    for (i, mut n) in old.into_iter().enumerate() {
        if accepted[i] {
            converted += 1;
            let out = n.outputs[0];
            let os = g.shape(out).expect("shaped").to_vec();
            let t_out = new_value(g, &format!("{}_nhwc", g.values[out].name), nhwc(&os));
            let kind = kinds[i].expect("accepted nodes have a kind");
            let mut inputs = n.inputs.clone();
            for pos in data_inputs(&n, kind) {
                if let Some(v) = inputs[pos] {
                    inputs[pos] = Some(to_nhwc(g, &mut nodes, &mut twin, v));
                }
            }
            // The op moves into the rewritten node (the placeholder left behind is dropped).
            let op = std::mem::replace(&mut n.op, Op::Attention);
            let (op, inputs) = match (kind, op) {
                (
                    Kind::Depthwise | Kind::Stem | Kind::Dense | Kind::Pointwise { wide: true },
                    Op::Conv { geom, group, post },
                ) => (Op::ConvNhwc { geom, group, post }, inputs),
                (Kind::MaxPool, Op::MaxPool { geom, ceil_mode }) => {
                    (Op::MaxPoolNhwc { geom, ceil_mode }, inputs)
                }
                (Kind::Pointwise { .. }, Op::Conv { post, .. }) => pointwise(g, inputs, post),
                (Kind::ChannelScale { x }, op) => {
                    // The scale `[N', C, 1, 1]` as `[N', 1, 1, C]`: the same bytes, a view.
                    let sv = inputs[1 - x].expect("two inputs");
                    let ss = g.shape(sv).expect("shaped").to_vec();
                    let shape = g.add_const(
                        g.fresh_name(&format!("{}_shape", n.name)),
                        Tensor::from_i64(vec![4], vec![ss[0] as i64, 1, 1, ss[1] as i64]),
                    );
                    let view = new_value(
                        g,
                        &format!("{}_nhwc", g.values[sv].name),
                        vec![ss[0], 1, 1, ss[1]],
                    );
                    let name = g.fresh_name(&format!("{}_as_nhwc", g.values[sv].name));
                    nodes.push(Node {
                        name: name.clone(),
                        op: Op::Reshape { allowzero: false },
                        inputs: vec![Some(sv), Some(shape)],
                        outputs: vec![view],
                        absorbed: vec![name],
                        placement: None,
                    });
                    let mut ins = inputs;
                    ins[1 - x] = Some(view);
                    (op, ins)
                }
                _ => unreachable!("region kinds match their ops"),
            };
            nodes.push(Node {
                op,
                inputs,
                outputs: vec![t_out],
                ..n
            });
            twin.insert(out, t_out);
            // A pool over the value reads its twin (below); other planar consumers and
            // the graph's outputs need it back.
            let planar_use =
                g.outputs.contains(&out) || consumers[out].iter().any(|&c| !accepted[c] && !gap[c]);
            if planar_use {
                let name = g.fresh_name(&format!("{}_to_nchw", g.values[out].name));
                nodes.push(Node {
                    name: name.clone(),
                    op: Op::Transpose {
                        perm: Some(vec![0, 3, 1, 2]),
                    },
                    inputs: vec![Some(t_out)],
                    outputs: vec![out],
                    absorbed: vec![name],
                    placement: None,
                });
            }
            continue;
        }
        let gap_input = n.inputs.first().copied().flatten();
        if let (Op::GlobalAveragePool, Some(x)) = (&n.op, gap_input) {
            if let Some(&t) = twin.get(&x) {
                let out = n.outputs[0];
                let os = g.shape(out).expect("shaped").to_vec();
                let mean = new_value(
                    g,
                    &format!("{}_nhwc", g.values[out].name),
                    vec![os[0], 1, 1, os[1]],
                );
                let shape = g.add_const(
                    g.fresh_name(&format!("{}_shape", n.name)),
                    Tensor::from_i64(vec![4], os.iter().map(|&d| d as i64).collect()),
                );
                nodes.push(Node {
                    op: Op::Reduce {
                        op: ReduceOp::Mean,
                        axes: Some(vec![1, 2]),
                        keepdims: true,
                        noop_with_empty_axes: false,
                    },
                    inputs: vec![Some(t)],
                    outputs: vec![mean],
                    ..n.clone()
                });
                let name = g.fresh_name(&format!("{}_as_nchw", n.name));
                nodes.push(Node {
                    name: name.clone(),
                    op: Op::Reshape { allowzero: false },
                    inputs: vec![Some(mean), Some(shape)],
                    outputs: vec![out],
                    absorbed: vec![name],
                    placement: None,
                });
                continue;
            }
        }
        nodes.push(n);
    }
    g.nodes = nodes;
    converted
}

/// The `MatMul` of a 1x1 conv over channels-last `inputs` (the conv's, data inputs
/// already twinned): B = W^T `[Cin, Cout]`, the bias a leading unit-scale
/// `ChannelAffine`, residuals renumbered after A and B.
fn pointwise(
    g: &mut Graph,
    inputs: Vec<Option<ValueId>>,
    post: Vec<PostOp>,
) -> (Op, Vec<Option<ValueId>>) {
    let wv = inputs[1].expect("conv weights");
    let ws = g.shape(wv).expect("shaped").to_vec();
    let (co, ci) = (ws[0], ws[1]);
    let w = g.values[wv].konst.as_ref().expect("constant").to_f32_vec();
    let mut wt = vec![0.0f32; ci * co];
    for o in 0..co {
        for i in 0..ci {
            wt[i * co + o] = w[o * ci + i];
        }
    }
    let name = g.fresh_name(&format!("{}_wt", g.values[wv].name));
    let wt = g.add_const(name, Tensor::from_f32(vec![ci, co], wt));
    let mut new_inputs = vec![inputs[0], Some(wt)];
    let mut new_post = Vec::with_capacity(post.len() + 1);
    if let Some(b) = inputs.get(2).copied().flatten() {
        let shift = g.values[b].konst.as_ref().expect("constant").to_f32_vec();
        new_post.push(PostOp::ChannelAffine {
            scale: vec![1.0; co],
            shift,
        });
    }
    for p in post {
        new_post.push(match p {
            PostOp::AddInput { input } => {
                new_inputs.push(inputs[input]);
                PostOp::AddInput {
                    input: new_inputs.len() - 1,
                }
            }
            p => p,
        });
    }
    (Op::MatMul { post: new_post }, new_inputs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::testutil::*;
    use crate::ir::{ConvGeom, UnaryOp};

    fn geom(k: usize, s: usize, p: usize) -> ConvGeom {
        ConvGeom {
            kernel: vec![k, k],
            strides: vec![s, s],
            dilations: vec![1, 1],
            pads: vec![p; 4],
            auto_pad: None,
        }
    }

    fn conv(g: ConvGeom, group: usize, post: Vec<PostOp>) -> Op {
        Op::Conv {
            geom: g,
            group,
            post,
        }
    }

    /// An inverted-residual block: planar stem conv, 1x1 expand (+Clip), depthwise
    /// stride `s` (+Clip), 1x1 project (+ the block's input as residual when stride 1),
    /// then either a global pool or the block's output as a graph output.
    /// A graph input `[1, 3, h, h]` and a planar 3x3 stem conv to `c` channels.
    fn stem(b: &mut GraphBuilder, c: usize, h: usize) -> ValueId {
        let x = b.input("x", &[1, 3, h, h]);
        let w0 = b.konst("w0", &[c, 3, 3, 3], rand_vec(c * 27, 1));
        b.node(
            "stem",
            conv(geom(3, 1, 1), 1, vec![]),
            &[x, w0],
            &[1, c, h, h],
        )
    }

    fn block(s: usize, pool: bool) -> Graph {
        block_sized(s, pool, (8, 48, 10))
    }

    /// [`block`] with `c` block channels, `e` expanded channels, `h` x `h` planes.
    fn block_sized(s: usize, pool: bool, (c, e, h): (usize, usize, usize)) -> Graph {
        let oh = (h + 2 - 3) / s + 1;
        let clip = PostOp::Unary(UnaryOp::Clip { min: 0.0, max: 6.0 });
        let mut b = GraphBuilder::new();
        let stem = stem(&mut b, c, h);
        let w1 = b.konst("w1", &[e, c, 1, 1], rand_vec(e * c, 2));
        let b1 = b.konst("b1", &[e], rand_vec(e, 3));
        let ex = b.node(
            "expand",
            conv(geom(1, 1, 0), 1, vec![clip.clone()]),
            &[stem, w1, b1],
            &[1, e, h, h],
        );
        let w2 = b.konst("w2", &[e, 1, 3, 3], rand_vec(e * 9, 4));
        let b2 = b.konst("b2", &[e], rand_vec(e, 5));
        let dw = b.node(
            "dw",
            conv(geom(3, s, 1), e, vec![clip]),
            &[ex, w2, b2],
            &[1, e, oh, oh],
        );
        let w3 = b.konst("w3", &[c, e, 1, 1], rand_vec(c * e, 6));
        let b3 = b.konst("b3", &[c], rand_vec(c, 7));
        let out = if s == 1 {
            b.node_opt(
                "project",
                conv(geom(1, 1, 0), 1, vec![PostOp::AddInput { input: 3 }]),
                &[Some(dw), Some(w3), Some(b3), Some(stem)],
                &[1, c, oh, oh],
            )
        } else {
            b.node(
                "project",
                conv(geom(1, 1, 0), 1, vec![]),
                &[dw, w3, b3],
                &[1, c, oh, oh],
            )
        };
        if pool {
            let p = b.node("pool", Op::GlobalAveragePool, &[out], &[1, c, 1, 1]);
            b.finish(&[p])
        } else {
            b.finish(&[out])
        }
    }

    fn ops(g: &Graph) -> Vec<&'static str> {
        g.nodes.iter().map(|n| n.op.name()).collect()
    }

    #[test]
    fn inverted_residual_blocks_run_channels_last_with_the_same_outputs() {
        for (s, pool) in [(1, true), (2, true), (1, false), (2, false)] {
            let g0 = block(s, pool);
            let x = rand_vec(3 * 10 * 10, 9);
            let want = run_graph(&g0, std::slice::from_ref(&x));
            let mut g = g0.clone();
            assert_eq!(channels_last(&mut g), 4, "stride {s} pool {pool}");
            let names = ops(&g);
            // The stem opens the region: the graph's input enters once; a pooled region
            // leaves through the mean and a view, an output region through one
            // transpose back.
            let transposes = names.iter().filter(|&&n| n == "Transpose").count();
            assert_eq!(transposes, if pool { 1 } else { 2 }, "{names:?}");
            assert_eq!(names.iter().filter(|&&n| n == "MatMul").count(), 2);
            let nhwc = names.iter().filter(|&&n| n == "ConvNhwc").count();
            assert_eq!(nhwc, 2, "the stem and the depthwise conv: {names:?}");
            assert!(!names.contains(&"Conv"), "{names:?}");
            assert_eq!(names.contains(&"ReduceMean"), pool, "{names:?}");
            assert_eq!(g.outputs, g0.outputs, "outputs keep their values");
            let got = run_graph(&g, &[x]);
            assert_close(&got, &want, 1e-5);
        }
    }

    #[test]
    fn wide_layouts_run_pointwise_convs_on_the_engine_where_planes_fill_its_tiles() {
        // 16x16 planes (256 positions, whole position tiles): the expansion and the
        // projection become 1x1 `ConvNhwc`s; 7x7 planes (49 positions in 64): MatMuls.
        for (h, pointwise_convs) in [(16, 2), (7, 0)] {
            let g0 = block_sized(1, true, (16, 48, h));
            let x = rand_vec(3 * h * h, 9);
            let want = run_graph(&g0, std::slice::from_ref(&x));
            let mut g = g0.clone();
            assert_eq!(channels_last_with(&mut g, Dense::Wide), 4, "{h}x{h}");
            let names = ops(&g);
            let count = |op: &str| names.iter().filter(|&&n| n == op).count();
            assert_eq!(count("ConvNhwc"), 2 + pointwise_convs, "{names:?}");
            assert_eq!(count("MatMul"), 2 - pointwise_convs, "{names:?}");
            assert!(!names.contains(&"Conv"), "{names:?}");
            let got = run_graph(&g, &[x]);
            assert_close(&got, &want, 1e-5);
        }
    }

    /// A ResNet-style stage on `c` channels at `h` x `h` (a graph input, so no stem): two
    /// basic blocks (3x3 + ReLU, 3x3 + the block's input + ReLU), then a strided one with a 1x1
    /// stride-2 downsample as the residual, then a global pool.
    fn basic_blocks(c: usize, h: usize) -> Graph {
        let relu = PostOp::Unary(UnaryOp::Relu);
        let add_relu = vec![PostOp::AddInput { input: 3 }, relu.clone()];
        let mut b = GraphBuilder::new();
        let x = b.input("x", &[1, c, h, h]);
        let mut k = 10;
        let mut wb = |b: &mut GraphBuilder, co: usize, ci: usize, kk: usize| {
            k += 2;
            let w = b.konst(
                &format!("w{k}"),
                &[co, ci, kk, kk],
                rand_vec(co * ci * kk * kk, k),
            );
            let bias = b.konst(&format!("b{k}"), &[co], rand_vec(co, k + 1));
            (w, bias)
        };
        let mut y2 = x;
        for i in 0..2 {
            let (w1, b1) = wb(&mut b, c, c, 3);
            let geom1 = conv(geom(3, 1, 1), 1, vec![relu.clone()]);
            let y1 = b.node(&format!("a{i}"), geom1, &[y2, w1, b1], &[1, c, h, h]);
            let (w2, b2) = wb(&mut b, c, c, 3);
            y2 = b.node_opt(
                &format!("b{i}"),
                conv(geom(3, 1, 1), 1, add_relu.clone()),
                &[Some(y1), Some(w2), Some(b2), Some(y2)],
                &[1, c, h, h],
            );
        }
        let (c2, oh) = (2 * c, (h - 1) / 2 + 1);
        let (wd, bd) = wb(&mut b, c2, c, 1);
        let ds = b.node(
            "ds",
            conv(geom(1, 2, 0), 1, vec![]),
            &[y2, wd, bd],
            &[1, c2, oh, oh],
        );
        let (w3, b3) = wb(&mut b, c2, c, 3);
        let y3 = b.node(
            "c3",
            conv(geom(3, 2, 1), 1, vec![relu]),
            &[y2, w3, b3],
            &[1, c2, oh, oh],
        );
        let (w4, b4) = wb(&mut b, c2, c2, 3);
        let y4 = b.node_opt(
            "c4",
            conv(geom(3, 1, 1), 1, add_relu),
            &[Some(y3), Some(w4), Some(b4), Some(ds)],
            &[1, c2, oh, oh],
        );
        let p = b.node("pool", Op::GlobalAveragePool, &[y4], &[1, c2, 1, 1]);
        b.finish(&[p])
    }

    /// Runs `g` on `x` in `precision` with `threads` intra-op threads.
    fn run_in(g: &Graph, x: &[f32], precision: crate::exec::Precision, threads: usize) -> Vec<u8> {
        use crate::exec::{ModelPlan, PlanOptions};
        let opts = PlanOptions {
            intra_op_threads: threads,
            precision,
            ..Default::default()
        };
        let plan = ModelPlan::new(std::sync::Arc::new(g.clone()), &opts).expect("plan");
        let mut st = plan.new_state();
        plan.set_input(&mut st, 0, bytemuck::cast_slice(x)).unwrap();
        plan.run_all(&mut st).unwrap();
        let mut out = vec![0u8; plan.output_len(0)];
        plan.read_output(&st, 0, &mut out).unwrap();
        out
    }

    #[test]
    fn wide_layouts_take_resnet_blocks_channels_last_with_the_same_outputs() {
        use crate::exec::Precision;
        let (c, h) = (16, 13);
        let g0 = basic_blocks(c, h);
        // Stems-only layouts leave dense convs planar.
        assert_eq!(channels_last(&mut g0.clone()), 0);
        let mut g = g0.clone();
        assert_eq!(channels_last_with(&mut g, Dense::Wide), 7);
        let names = ops(&g);
        assert_eq!(
            names.iter().filter(|&&n| n == "ConvNhwc").count(),
            7,
            "{names:?}"
        );
        assert_eq!(
            names.iter().filter(|&&n| n == "Transpose").count(),
            1,
            "{names:?}"
        );
        assert!(!names.contains(&"Conv"), "{names:?}");
        let x = rand_vec(c * h * h, 9);
        // f32 (the GEMM kernel, depths past one block): the planar graph's outputs (its
        // strided conv sums in another order: within rounding).
        let want = run_graph(&g0, std::slice::from_ref(&x));
        assert_close(&run_graph(&g, std::slice::from_ref(&x)), &want, 1e-4);
        let f32s = |b: &[u8]| bytemuck::cast_slice::<u8, f32>(b).to_vec();
        // bf16 where the CPU has it: with AMX the matrix engine's channels-last run, the
        // planar bf16 plan's bits (the same sums in the same order); without, the f32
        // GEMM kernel. One thread's bits on any thread count.
        if Precision::Bf16.available() {
            let one = run_in(&g, &x, Precision::Bf16, 1);
            let wide = crate::kernels::bf16::native().is_some_and(|t| t.wide.is_some());
            if wide {
                assert!(
                    one == run_in(&g0, &x, Precision::Bf16, 1),
                    "planar bf16 bits"
                );
            } else {
                assert_close(&[f32s(&one)], &want, 1e-4);
            }
            for threads in [2, 3] {
                assert!(
                    run_in(&g, &x, Precision::Bf16, threads) == one,
                    "{threads} threads"
                );
            }
        }
        for threads in [2, 3] {
            let one = run_in(&g, &x, Precision::F32, 1);
            assert!(
                run_in(&g, &x, Precision::F32, threads) == one,
                "f32, {threads} threads"
            );
        }
    }

    #[test]
    fn wide_layouts_keep_a_depthwise_region_that_a_dense_conv_would_sink() {
        // An inverted-residual block (a region on its own), then a dense 3x3 conv to 256
        // channels as the graph's output: with the conv the region's boundary (that
        // output) moves more than a quarter of what it produces, so the conv stays
        // planar and the block is channels-last as in a stems-only layout.
        let mut b = GraphBuilder::new();
        let (c, e, h) = (16, 48, 10);
        let stem = stem(&mut b, c, h);
        let w1 = b.konst("w1", &[e, c, 1, 1], rand_vec(e * c, 2));
        let ex = b.node(
            "expand",
            conv(geom(1, 1, 0), 1, vec![]),
            &[stem, w1],
            &[1, e, h, h],
        );
        let w2 = b.konst("w2", &[e, 1, 3, 3], rand_vec(e * 9, 4));
        let dw = b.node(
            "dw",
            conv(geom(3, 1, 1), e, vec![]),
            &[ex, w2],
            &[1, e, h, h],
        );
        let w3 = b.konst("w3", &[c, e, 1, 1], rand_vec(c * e, 6));
        let pr = b.node(
            "project",
            conv(geom(1, 1, 0), 1, vec![]),
            &[dw, w3],
            &[1, c, h, h],
        );
        let w4 = b.konst("w4", &[256, c, 3, 3], rand_vec(256 * c * 9, 8));
        let y = b.node(
            "dense",
            conv(geom(3, 1, 1), 1, vec![]),
            &[pr, w4],
            &[1, 256, h, h],
        );
        let g0 = b.finish(&[y]);
        let mut stems_only = g0.clone();
        assert_eq!(channels_last(&mut stems_only), 4);
        let mut g = g0.clone();
        assert_eq!(channels_last_with(&mut g, Dense::Wide), 4);
        assert_eq!(ops(&g), ops(&stems_only));
        assert!(ops(&g).contains(&"Conv"), "the dense conv stays planar");
        let x = rand_vec(3 * h * h, 9);
        let want = run_graph(&g0, std::slice::from_ref(&x));
        // Sums of 144 products in another order (the channels-last MatMul's), with
        // cancellation: to a bound of the output's range.
        let got = run_graph(&g, &[x]);
        let top = want[0].iter().fold(0f32, |m, v| m.max(v.abs()));
        for (a, e) in got[0].iter().zip(&want[0]) {
            assert!((a - e).abs() <= 1e-5 * top, "{a} vs {e} (largest {top})");
        }
    }

    #[test]
    fn wide_layouts_take_a_resnet_stem_and_its_pool_channels_last() {
        use crate::exec::Precision;
        // x -> 7x7/2 stem (3 -> 64) + ReLU -> 3x3/2 max pool -> a basic block -> pool.
        let relu = PostOp::Unary(UnaryOp::Relu);
        let mut b = GraphBuilder::new();
        let x = b.input("x", &[1, 3, 32, 32]);
        let w0 = b.konst("w0", &[64, 3, 7, 7], rand_vec(64 * 147, 1));
        let stem = b.node(
            "stem",
            conv(geom(7, 2, 3), 1, vec![relu.clone()]),
            &[x, w0],
            &[1, 64, 16, 16],
        );
        let mp = Op::MaxPool {
            geom: geom(3, 2, 1),
            ceil_mode: false,
        };
        let p = b.node("maxpool", mp, &[stem], &[1, 64, 8, 8]);
        let w1 = b.konst("w1", &[64, 64, 3, 3], rand_vec(64 * 576, 2));
        let y1 = b.node(
            "c1",
            conv(geom(3, 1, 1), 1, vec![relu.clone()]),
            &[p, w1],
            &[1, 64, 8, 8],
        );
        let w2 = b.konst("w2", &[64, 64, 3, 3], rand_vec(64 * 576, 3));
        let add_relu = vec![PostOp::AddInput { input: 3 }, relu];
        let y2 = b.node_opt(
            "c2",
            conv(geom(3, 1, 1), 1, add_relu),
            &[Some(y1), Some(w2), None, Some(p)],
            &[1, 64, 8, 8],
        );
        let gp = b.node("pool", Op::GlobalAveragePool, &[y2], &[1, 64, 1, 1]);
        let g0 = b.finish(&[gp]);
        let mut g = g0.clone();
        assert_eq!(
            channels_last_with(&mut g, Dense::Wide),
            4,
            "3 convs and the pool"
        );
        let names = ops(&g);
        assert!(names.contains(&"MaxPoolNhwc"), "{names:?}");
        assert!(
            !names.contains(&"MaxPool") && !names.contains(&"Conv"),
            "{names:?}"
        );
        assert_eq!(
            names.iter().filter(|&&n| n == "Transpose").count(),
            1,
            "{names:?}"
        );
        let xs = rand_vec(3 * 32 * 32, 5);
        let want = run_graph(&g0, std::slice::from_ref(&xs));
        assert_close(&run_graph(&g, std::slice::from_ref(&xs)), &want, 1e-5);
        if Precision::Bf16.available() {
            let f32s = |b: &[u8]| bytemuck::cast_slice::<u8, f32>(b).to_vec();
            let got = f32s(&run_in(&g, &xs, Precision::Bf16, 1));
            let planar = f32s(&run_in(&g0, &xs, Precision::Bf16, 1));
            // The stem's taps sum in another order channels-last: bf16's rounding apart.
            let top = planar.iter().fold(0f32, |m, v| m.max(v.abs()));
            for (a, e) in got.iter().zip(&planar) {
                assert!((a - e).abs() <= 1e-2 * top, "{a} vs {e} (largest {top})");
            }
        }
    }

    #[test]
    fn channels_last_blocks_on_intra_op_threads_give_one_threads_bits() {
        use crate::exec::{ModelPlan, PlanOptions};
        // Big enough for intra-op chunks (estimated from the MACs, so whatever the
        // host): 56x56 planes (MatMul rows, depthwise rows), and 7x7 planes with more
        // columns than rows (MatMul rows all the same).
        for (dims, pool) in [((16, 96, 56), false), ((160, 320, 7), true)] {
            let mut g = block_sized(1, pool, dims);
            assert_eq!(channels_last(&mut g), 4);
            let g = std::sync::Arc::new(g);
            let x = rand_vec(3 * dims.2 * dims.2, 3);
            let mut outs = Vec::new();
            for threads in [1, 2, 3] {
                let opts = PlanOptions {
                    intra_op_threads: threads,
                    ..Default::default()
                };
                let plan = ModelPlan::new(g.clone(), &opts).expect("plan");
                let mut st = plan.new_state();
                plan.set_input(&mut st, 0, bytemuck::cast_slice(&x))
                    .unwrap();
                plan.run_all(&mut st).unwrap();
                let mut out = vec![0u8; plan.output_len(0)];
                plan.read_output(&st, 0, &mut out).unwrap();
                outs.push(out);
            }
            assert!(outs[1] == outs[0] && outs[2] == outs[0], "{dims:?}");
        }
    }

    #[test]
    fn squeeze_excite_scales_join_and_wide_leaf_convs_leave_the_region() {
        // stem -> expand -> depthwise -> x * sigmoid(mean(x)) -> project -> a leaf 1x1 conv
        // to 4x the channels read by a planar 3x3 conv (an FPN's lateral conv).
        let (c, e, h) = (8, 48, 12);
        let hs = PostOp::Unary(UnaryOp::HardSwish);
        let mut b = GraphBuilder::new();
        let stem = stem(&mut b, c, h);
        let w1 = b.konst("w1", &[e, c, 1, 1], rand_vec(e * c, 2));
        let ex = b.node(
            "expand",
            conv(geom(1, 1, 0), 1, vec![hs.clone()]),
            &[stem, w1],
            &[1, e, h, h],
        );
        let w2 = b.konst("w2", &[e, 1, 5, 5], rand_vec(e * 25, 3));
        let dw = b.node(
            "dw",
            conv(geom(5, 1, 2), e, vec![hs]),
            &[ex, w2],
            &[1, e, h, h],
        );
        let m = b.node("pool", Op::GlobalAveragePool, &[dw], &[1, e, 1, 1]);
        let sg = b.node("gate", Op::Unary(UnaryOp::Sigmoid), &[m], &[1, e, 1, 1]);
        let se = b.node("se", Op::Binary(BinaryOp::Mul), &[sg, dw], &[1, e, h, h]);
        let w3 = b.konst("w3", &[c, e, 1, 1], rand_vec(c * e, 4));
        let pr = b.node(
            "project",
            conv(geom(1, 1, 0), 1, vec![]),
            &[se, w3],
            &[1, c, h, h],
        );
        let w4 = b.konst("w4", &[4 * c, c, 1, 1], rand_vec(4 * c * c, 5));
        let lat = b.node(
            "lateral",
            conv(geom(1, 1, 0), 1, vec![]),
            &[pr, w4],
            &[1, 4 * c, h, h],
        );
        let w5 = b.konst("w5", &[2, 4 * c, 3, 3], rand_vec(2 * 4 * c * 9, 6));
        let o = b.node(
            "head",
            conv(geom(3, 1, 1), 1, vec![]),
            &[lat, w5],
            &[1, 2, h, h],
        );
        let g0 = b.finish(&[o]);
        let xv = rand_vec(3 * h * h, 7);
        let want = run_graph(&g0, std::slice::from_ref(&xv));
        let mut g = g0.clone();
        // stem, expand, depthwise, the scale, project; the lateral conv stays planar.
        assert_eq!(channels_last(&mut g), 5);
        let names = ops(&g);
        assert_eq!(
            names.iter().filter(|&&n| n == "Conv").count(),
            2,
            "{names:?}"
        );
        assert_eq!(
            names.iter().filter(|&&n| n == "Transpose").count(),
            2,
            "{names:?}"
        );
        assert!(
            names.contains(&"Mul") && names.contains(&"ConvNhwc"),
            "{names:?}"
        );
        let got = run_graph(&g, &[xv]);
        // The channels-last stem sums its taps in another order; outputs reach hundreds
        // through the wide lateral and head convs, so the small ones are differences of
        // large terms: compare against the output's scale.
        let scale = want[0].iter().fold(1.0f32, |m, v| m.max(v.abs()));
        for (g, w) in got[0].iter().zip(&want[0]) {
            assert!((g - w).abs() <= 1e-5 * scale, "{g} vs {w} (scale {scale})");
        }
    }

    #[test]
    fn few_channel_convs_join_a_region_only_to_open_it() {
        // A stem read by a planar conv only; a region (expand, depthwise, project to 4
        // channels) whose 4-channel output a 3x3 conv reads: neither 4-channel-input
        // conv goes channels-last.
        let clip = PostOp::Unary(UnaryOp::Clip { min: 0.0, max: 6.0 });
        let (c, e, h) = (8, 48, 10);
        let mut b = GraphBuilder::new();
        let st = stem(&mut b, c, h);
        let w1 = b.konst("w1", &[c, c, 3, 3], rand_vec(c * c * 9, 2));
        let p = b.node(
            "planar",
            conv(geom(3, 1, 1), 1, vec![]),
            &[st, w1],
            &[1, c, h, h],
        );
        let w2 = b.konst("w2", &[e, c, 1, 1], rand_vec(e * c, 3));
        let ex = b.node(
            "expand",
            conv(geom(1, 1, 0), 1, vec![clip.clone()]),
            &[p, w2],
            &[1, e, h, h],
        );
        let w3 = b.konst("w3", &[e, 1, 3, 3], rand_vec(e * 9, 4));
        let dw = b.node(
            "dw",
            conv(geom(3, 1, 1), e, vec![clip]),
            &[ex, w3],
            &[1, e, h, h],
        );
        let w4 = b.konst("w4", &[4, e, 1, 1], rand_vec(4 * e, 5));
        let pr = b.node(
            "project",
            conv(geom(1, 1, 0), 1, vec![]),
            &[dw, w4],
            &[1, 4, h, h],
        );
        let w5 = b.konst("w5", &[2, 4, 3, 3], rand_vec(2 * 4 * 9, 6));
        let o = b.node(
            "head",
            conv(geom(3, 1, 1), 1, vec![]),
            &[pr, w5],
            &[1, 2, h, h],
        );
        let g0 = b.finish(&[o]);
        let xv = rand_vec(3 * h * h, 7);
        let want = run_graph(&g0, std::slice::from_ref(&xv));
        let mut g = g0.clone();
        assert_eq!(channels_last(&mut g), 3, "expand, depthwise, project");
        let names = ops(&g);
        let planar = names.iter().filter(|&&n| n == "Conv").count();
        assert_eq!(planar, 3, "stem, planar conv, head: {names:?}");
        let got = run_graph(&g, &[xv]);
        assert_close(&got, &want, 1e-5);
    }

    #[test]
    fn a_region_whose_boundary_outweighs_its_work_stays_planar() {
        // One depthwise conv between planar convs: its input and output would both be
        // transposed, as many elements as it produces.
        let clip = PostOp::Unary(UnaryOp::Clip { min: 0.0, max: 6.0 });
        let mut b = GraphBuilder::new();
        let x = b.input("x", &[1, 4, 8, 8]);
        let w0 = b.konst("w0", &[16, 4, 3, 3], rand_vec(16 * 36, 1));
        let a = b.node(
            "a",
            conv(geom(3, 1, 1), 1, vec![]),
            &[x, w0],
            &[1, 16, 8, 8],
        );
        let w1 = b.konst("w1", &[16, 1, 3, 3], rand_vec(16 * 9, 2));
        let d = b.node(
            "dw",
            conv(geom(3, 1, 1), 16, vec![clip]),
            &[a, w1],
            &[1, 16, 8, 8],
        );
        let w2 = b.konst("w2", &[4, 16, 3, 3], rand_vec(4 * 144, 3));
        let o = b.node("c", conv(geom(3, 1, 1), 1, vec![]), &[d, w2], &[1, 4, 8, 8]);
        let mut g = b.finish(&[o]);
        assert_eq!(channels_last(&mut g), 0);
        assert_eq!(ops(&g), ["Conv", "Conv", "Conv"]);
    }

    #[test]
    fn a_region_without_a_depthwise_conv_stays_planar() {
        let mut b = GraphBuilder::new();
        let x = b.input("x", &[1, 8, 6, 6]);
        let w0 = b.konst("w0", &[8, 8, 1, 1], rand_vec(64, 1));
        let a = b.node("a", conv(geom(1, 1, 0), 1, vec![]), &[x, w0], &[1, 8, 6, 6]);
        let w1 = b.konst("w1", &[8, 8, 1, 1], rand_vec(64, 2));
        let o = b.node("b", conv(geom(1, 1, 0), 1, vec![]), &[a, w1], &[1, 8, 6, 6]);
        let mut g = b.finish(&[o]);
        assert_eq!(channels_last(&mut g), 0);
    }
}
