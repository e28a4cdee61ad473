//! Band fusion: a channels-last 1x1 expansion (`MatMul` over `[N, H, W, Cin]`) whose
//! only reader is a depthwise `ConvNhwc` becomes one `ExpandConvNhwc`, which computes
//! the expanded image band by band in scratch (`exec::plan::expand_dw`). The expanded
//! image of an inverted residual block is its largest tensor (MobileNetV2's 112x112x96:
//! 4.8 MB): written whole, it goes out to memory and comes back for the depthwise conv.
//!
//! Only shallow expansions are fused (fewer than [`MAX_DEPTH`] input channels; deeper
//! ones run on the matrix engine in bf16 plans, the fused node in f32) whose expanded
//! image is larger than [`MIN_BYTES`] (smaller ones stay in L2 anyway).

use super::rewrite::{remove_nodes, sole_consumer};
use crate::ir::{Graph, Op, PostOp};

/// Input channels below which an expansion is fused (bf16 plans run products of this
/// depth and deeper on the matrix engine, see `exec::plan::gemm`).
pub const MAX_DEPTH: usize = 64;

/// Bytes of the expanded image from which the pair is fused: a quarter of a 2 MiB L2
/// (MobileNetV2's 28x28x192 blocks, 602 KB: 377 -> 349 us for the three, medians of 9
/// interleaved rounds; its 14x14 ones, 301 KB, stay apart).
pub const MIN_BYTES: usize = 512 << 10;

/// Fuses every expansion + depthwise pair; returns how many.
pub fn fuse_expand_depthwise(g: &mut Graph) -> usize {
    merge_all(g, pair_at)
}

/// Two nodes made one: node `keep` (one of `first`, `last`) takes `op`, `inputs`, the
/// outputs of `last` and both nodes' absorbed names; the other node goes.
struct Merge {
    first: usize,
    last: usize,
    keep: usize,
    op: Op,
    inputs: Vec<Option<crate::ir::ValueId>>,
}

/// Applies `find` (a merge for node `i`, or none) until no node has one; returns how
/// many merges.
fn merge_all(g: &mut Graph, find: impl Fn(&Graph, usize) -> Option<Merge>) -> usize {
    let mut fused = 0;
    'outer: loop {
        for i in 0..g.nodes.len() {
            let Some(m) = find(g, i) else {
                continue;
            };
            let mut absorbed = g.nodes[m.first].absorbed.clone();
            absorbed.extend(g.nodes[m.last].absorbed.iter().cloned());
            let outputs = g.nodes[m.last].outputs.clone();
            let gone = if m.keep == m.first { m.last } else { m.first };
            let k = &mut g.nodes[m.keep];
            k.op = m.op;
            k.inputs = m.inputs;
            k.outputs = outputs;
            k.absorbed = absorbed;
            remove_nodes(g, &[gone]);
            fused += 1;
            continue 'outer;
        }
        return fused;
    }
}

/// The merge of node `mi` when it is an expansion read only by a depthwise conv: into
/// the conv's node.
fn pair_at(g: &Graph, mi: usize) -> Option<Merge> {
    let m = &g.nodes[mi];
    let Op::MatMul { post: expand } = &m.op else {
        return None;
    };
    let (&[Some(x), Some(w1)], &[e]) = (&m.inputs[..], &m.outputs[..]) else {
        return None;
    };
    g.values[w1].konst.as_ref()?;
    let (xs, w1s, es) = (g.shape(x)?, g.shape(w1)?, g.shape(e)?);
    let (&[nb, h, w, cin], &[cin2, ce]) = (xs, w1s) else {
        return None;
    };
    let residual = expand.iter().any(|p| matches!(p, PostOp::AddInput { .. }));
    let bytes = nb * h * w * ce * std::mem::size_of::<f32>();
    if cin != cin2 || es != [nb, h, w, ce] || residual || cin >= MAX_DEPTH || bytes < MIN_BYTES {
        return None;
    }
    let (di, 0) = sole_consumer(g, e)? else {
        return None;
    };
    let d = &g.nodes[di];
    let Op::ConvNhwc { geom, group, post } = &d.op else {
        return None;
    };
    let wd = d.inputs.get(1).copied().flatten()?;
    g.values[wd].konst.as_ref()?;
    if *group != ce || geom.kernel.len() != 2 || geom.dilations.iter().any(|&v| v != 1) {
        return None;
    }
    // X and W1 first, then the conv's weights, bias and residuals one place on.
    let mut inputs = vec![
        Some(x),
        Some(w1),
        Some(wd),
        d.inputs.get(2).copied().flatten(),
    ];
    inputs.extend(d.inputs.iter().skip(3).copied());
    let post = post
        .iter()
        .map(|p| match p {
            PostOp::AddInput { input } => PostOp::AddInput { input: input + 1 },
            p => p.clone(),
        })
        .collect();
    let op = Op::ExpandConvNhwc {
        expand: expand.clone(),
        geom: geom.clone(),
        group: *group,
        post,
    };
    Some(Merge {
        first: mi,
        last: di,
        keep: di,
        op,
        inputs,
    })
}

/// Fuses every depthwise `ConvNhwc` or `ExpandConvNhwc` whose output (at least
/// [`MIN_BYTES`]: smaller ones stay in L2 for the projection anyway) only a channels-last
/// 1x1 projection reads (`MatMul` by a constant `[C, Cout]`, at most
/// `gemm::A_IN_PLACE_MAX_N` outputs: A read in place) into one `DwProjectNhwc`; returns
/// how many. MobileNetV2's first blocks: their projection read the depthwise output back
/// from memory (112x112x32 -> 16: ~160 us in the network against 100 with it in cache).
/// The fused projection runs in f32 also in a bf16 plan.
pub fn fuse_projections(g: &mut Graph) -> usize {
    merge_all(g, projection_at)
}

/// The merge of node `di` when it is a depthwise conv whose output only a projection
/// reads: the projection into the conv's node.
fn projection_at(g: &Graph, di: usize) -> Option<Merge> {
    let d = &g.nodes[di];
    let (expand, geom, group, post) = match &d.op {
        Op::ConvNhwc { geom, group, post } => (None, geom, *group, post),
        Op::ExpandConvNhwc {
            expand,
            geom,
            group,
            post,
        } => (Some(expand.clone()), geom, *group, post),
        _ => return None,
    };
    let &[e] = &d.outputs[..] else {
        return None;
    };
    let &[nb, oh, ow, ch] = g.shape(e)? else {
        return None;
    };
    let residual = post.iter().any(|p| matches!(p, PostOp::AddInput { .. }));
    let bytes = nb * oh * ow * ch * std::mem::size_of::<f32>();
    if group != ch || ch < 2 || geom.kernel.len() != 2 || residual || bytes < MIN_BYTES {
        return None;
    }
    let (mi, 0) = sole_consumer(g, e)? else {
        return None;
    };
    let m = &g.nodes[mi];
    let Op::MatMul { post: project } = &m.op else {
        return None;
    };
    let w2 = m.inputs.get(1).copied().flatten()?;
    g.values[w2].konst.as_ref()?;
    let (&[wc, cout], 1) = (g.shape(w2)?, m.outputs.len()) else {
        return None;
    };
    if wc != ch || cout > crate::kernels::gemm::A_IN_PLACE_MAX_N {
        return None;
    }
    // The conv's inputs (X, [W1], W, and B or none in its place), W2, then the
    // projection's residuals.
    let base = usize::from(expand.is_some());
    let mut inputs: Vec<_> = d.inputs.iter().take(base + 2).copied().collect();
    if inputs.len() != base + 2 {
        return None;
    }
    inputs.push(d.inputs.get(base + 2).copied().flatten());
    inputs.push(Some(w2));
    inputs.extend(m.inputs.iter().skip(2).copied());
    let project = project
        .iter()
        .map(|p| match p {
            PostOp::AddInput { input } => PostOp::AddInput {
                input: input - 2 + base + 4,
            },
            p => p.clone(),
        })
        .collect();
    let op = Op::DwProjectNhwc {
        expand,
        geom: geom.clone(),
        group,
        post: post.clone(),
        project,
    };
    Some(Merge {
        first: di,
        last: mi,
        keep: di,
        op,
        inputs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::testutil::*;
    use crate::ir::{ConvGeom, UnaryOp};

    /// An inverted residual block's expansion and depthwise conv: X `[n, h, w, cin]`,
    /// a 1x1 to `ce` channels (bias, ReLU6), a `k`x`k` depthwise conv of stride `s`
    /// (bias, ReLU6, and a residual input where `residual`); `extra` also makes the
    /// expanded image a graph output.
    fn block(
        dims: (usize, usize, usize, usize, usize),
        ks: (usize, usize),
        residual: bool,
        extra: bool,
    ) -> Graph {
        block_padded(dims, ks, 0, residual, extra)
    }

    /// [`block`] with `tail` more pads after each spatial dim than before it.
    fn block_padded(
        (n, h, w, cin, ce): (usize, usize, usize, usize, usize),
        (k, s): (usize, usize),
        tail: usize,
        residual: bool,
        extra: bool,
    ) -> Graph {
        let mut b = GraphBuilder::new();
        let x = b.input("x", &[n, h, w, cin]);
        let w1 = b.konst("w1", &[cin, ce], rand_vec(cin * ce, 1));
        let relu6 = PostOp::Unary(UnaryOp::Clip { min: 0.0, max: 6.0 });
        let expand = vec![
            PostOp::ChannelAffine {
                scale: vec![1.0; ce],
                shift: rand_vec(ce, 2),
            },
            relu6.clone(),
        ];
        let e = b.node(
            "expand",
            Op::MatMul { post: expand },
            &[x, w1],
            &[n, h, w, ce],
        );
        let p = k / 2;
        let (oh, ow) = (
            (h + 2 * p + tail - k) / s + 1,
            (w + 2 * p + tail - k) / s + 1,
        );
        let wd = b.konst("wd", &[ce, 1, k, k], rand_vec(ce * k * k, 3));
        let bd = b.konst("bd", &[ce], rand_vec(ce, 4));
        let mut ins = vec![e, wd, bd];
        let mut post = vec![relu6];
        if residual {
            ins.push(b.input("r", &[n, oh, ow, ce]));
            post.push(PostOp::AddInput { input: 3 });
        }
        let geom = ConvGeom {
            kernel: vec![k, k],
            strides: vec![s, s],
            dilations: vec![1, 1],
            pads: vec![p, p, p + tail, p + tail],
            auto_pad: None,
        };
        let op = Op::ConvNhwc {
            geom,
            group: ce,
            post,
        };
        let y = b.node("dw", op, &ins, &[n, oh, ow, ce]);
        if extra {
            b.finish(&[y, e])
        } else {
            b.finish(&[y])
        }
    }

    /// The first output of `g` on pseudo-random inputs, every node in `tiles` tiles.
    fn run_tiled(g: &Graph, tiles: usize) -> Vec<f32> {
        let inputs: Vec<Vec<f32>> = g
            .inputs
            .iter()
            .enumerate()
            .map(|(i, v)| rand_vec(g.shape(*v).expect("shaped").iter().product(), 10 + i as u64))
            .collect();
        run_graph_tiled(g, &inputs, tiles).swap_remove(0)
    }

    /// The first of 1, 3 and 7 tiles per node in which fused graph `f` gives other
    /// bits (or another length) than `g` whole, if any.
    fn first_tiling_that_differs(g: &Graph, f: &Graph) -> Option<usize> {
        let want = run_tiled(g, 1);
        [1, 3, 7].into_iter().find(|&tiles| {
            let got = run_tiled(f, tiles);
            got.len() != want.len()
                || got
                    .iter()
                    .zip(&want)
                    .any(|(a, b)| a.to_bits() != b.to_bits())
        })
    }

    #[test]
    fn fused_blocks_give_the_two_nodes_bits_in_bands_and_tiles() {
        // Expanded images of 1.2-1.6 MB, several bands each (rows kept across bands at
        // stride 1, one row at stride 2 with a 3x3, a 5x5 at stride 1), two images.
        let cases = [
            ((1, 40, 40, 16, 192), (3, 1), false),
            ((1, 41, 39, 24, 192), (3, 2), true),
            ((1, 36, 36, 8, 256), (5, 1), true),
            ((2, 32, 33, 24, 160), (3, 2), false),
            ((2, 30, 30, 16, 160), (5, 2), true),
        ];
        // The last also with output rows that see only the bottom padding.
        let tails = [0, 0, 0, 0, 7];
        for ((dims, ks, residual), tail) in cases.into_iter().zip(tails) {
            let g = block_padded(dims, ks, tail, residual, false);
            let mut f = g.clone();
            assert_eq!(fuse_expand_depthwise(&mut f), 1, "{dims:?} {ks:?}");
            assert!(matches!(f.nodes[0].op, Op::ExpandConvNhwc { .. }));
            assert_eq!(f.nodes.len(), 1);
            let differs = first_tiling_that_differs(&g, &f);
            assert_eq!(differs, None, "{dims:?} {ks:?} residual {residual}: tiles");
        }
    }

    /// A depthwise conv (3x3 of stride `s`, bias, ReLU6) of X `[n, h, w, c]`, or of its
    /// expansion from `cin` channels where `cin` is some, then a projection to `cout`
    /// channels (bias, and a residual input where `residual`).
    fn projected(
        (n, h, w, c): (usize, usize, usize, usize),
        (cin, s): (Option<usize>, usize),
        cout: usize,
        residual: bool,
    ) -> Graph {
        let mut b = GraphBuilder::new();
        let relu6 = PostOp::Unary(UnaryOp::Clip { min: 0.0, max: 6.0 });
        let bias = |ch: usize, seed: u64| PostOp::ChannelAffine {
            scale: vec![1.0; ch],
            shift: rand_vec(ch, seed),
        };
        let x = match cin {
            Some(cin) => {
                let x = b.input("x", &[n, h, w, cin]);
                let w1 = b.konst("w1", &[cin, c], rand_vec(cin * c, 1));
                let post = vec![bias(c, 2), relu6.clone()];
                b.node("expand", Op::MatMul { post }, &[x, w1], &[n, h, w, c])
            }
            None => b.input("x", &[n, h, w, c]),
        };
        let (oh, ow) = ((h - 1) / s + 1, (w - 1) / s + 1);
        let wd = b.konst("wd", &[c, 1, 3, 3], rand_vec(c * 9, 3));
        let bd = b.konst("bd", &[c], rand_vec(c, 4));
        let geom = ConvGeom {
            kernel: vec![3, 3],
            strides: vec![s, s],
            dilations: vec![1, 1],
            pads: vec![1; 4],
            auto_pad: None,
        };
        let op = Op::ConvNhwc {
            geom,
            group: c,
            post: vec![relu6],
        };
        let d = b.node("dw", op, &[x, wd, bd], &[n, oh, ow, c]);
        let w2 = b.konst("w2", &[c, cout], rand_vec(c * cout, 5));
        let mut ins = vec![d, w2];
        let mut post = vec![bias(cout, 6)];
        if residual {
            ins.push(b.input("r", &[n, oh, ow, cout]));
            post.push(PostOp::AddInput { input: 2 });
        }
        let y = b.node("project", Op::MatMul { post }, &ins, &[n, oh, ow, cout]);
        b.finish(&[y])
    }

    #[test]
    fn fused_projections_give_the_nodes_bits_in_bands_and_tiles() {
        // Depthwise outputs of 0.6-1.6 MB, several bands each, with and without the
        // expansion before them, two images, ragged GEMM panels (rows of 45 and 41).
        let cases = [
            ((1, 112, 112, 32), (None, 1), 16, false),
            ((1, 180, 180, 24), (None, 2), 24, true),
            ((2, 45, 45, 64), (Some(16), 1), 24, true),
            ((1, 81, 81, 96), (Some(16), 2), 32, false),
        ];
        for (dims, (cin, s), cout, residual) in cases {
            let g = projected(dims, (cin, s), cout, residual);
            let mut f = g.clone();
            let expanded = fuse_expand_depthwise(&mut f);
            assert_eq!(expanded, usize::from(cin.is_some()), "{dims:?}");
            assert_eq!(fuse_projections(&mut f), 1, "{dims:?} {cin:?}");
            assert_eq!(f.nodes.len(), 1);
            assert!(
                matches!(&f.nodes[0].op, Op::DwProjectNhwc { expand, .. } if expand.is_some() == cin.is_some())
            );
            let differs = first_tiling_that_differs(&g, &f);
            assert_eq!(
                differs, None,
                "{dims:?} {cin:?} s{s} residual {residual}: tiles"
            );
        }
    }

    #[test]
    fn only_large_depthwise_outputs_read_by_one_narrow_projection_are_fused() {
        // A small depthwise output, a projection to more channels than A in place
        // takes: left as they are.
        let mut g = projected((1, 20, 20, 32), (None, 1), 16, false);
        assert_eq!(fuse_projections(&mut g), 0);
        let mut g = projected((1, 112, 112, 32), (None, 1), 64, false);
        assert_eq!(fuse_projections(&mut g), 0);
        assert!(matches!(g.nodes[1].op, Op::MatMul { .. }));
    }

    #[test]
    fn only_shallow_large_expansions_read_by_one_depthwise_conv_are_fused() {
        // The expanded image read elsewhere too, too deep an expansion, too small an
        // image: left as they are.
        let mut g = block((1, 40, 40, 16, 192), (3, 1), false, true);
        assert_eq!(fuse_expand_depthwise(&mut g), 0);
        let mut g = block((1, 40, 40, MAX_DEPTH, 192), (3, 1), false, false);
        assert_eq!(fuse_expand_depthwise(&mut g), 0);
        let mut g = block((1, 16, 16, 16, 96), (3, 1), false, false);
        assert_eq!(fuse_expand_depthwise(&mut g), 0);
        assert!(matches!(g.nodes[0].op, Op::MatMul { .. }));
    }
}

#[cfg(test)]
mod bad_input_tests {
    use crate::compile::testutil::*;
    use crate::exec::{ModelPlan, PlanOptions};
    use crate::ir::{ConvGeom, Op};
    use std::sync::Arc;

    /// An `ExpandConvNhwc` over X `[1, 8, 8, 4]` with expansion `w1` and depthwise
    /// weights `wd` (group 6), planned.
    fn plan(w1: &[usize], wd: &[usize]) -> crate::error::Result<ModelPlan> {
        let mut b = GraphBuilder::new();
        let x = b.input("x", &[1, 8, 8, 4]);
        let w1 = b.konst("w1", w1, rand_vec(w1.iter().product(), 1));
        let wd = b.konst("wd", wd, rand_vec(wd.iter().product(), 2));
        let op = Op::ExpandConvNhwc {
            expand: vec![],
            geom: ConvGeom {
                kernel: vec![3, 3],
                strides: vec![1, 1],
                dilations: vec![1, 1],
                pads: vec![1; 4],
                auto_pad: None,
            },
            group: 6,
            post: vec![],
        };
        let y = b.node("f", op, &[x, w1, wd], &[1, 8, 8, 6]);
        ModelPlan::new(Arc::new(b.finish(&[y])), &PlanOptions::default())
    }

    #[test]
    fn mismatched_expansion_or_depthwise_weights_are_named_errors() {
        assert!(plan(&[4, 6], &[6, 1, 3, 3]).is_ok());
        let e = plan(&[5, 6], &[6, 1, 3, 3]).expect_err("expansion of 5 rows for 4 channels");
        assert!(e.to_string().contains("expansion"), "{e}");
        let e = plan(&[4, 6], &[6, 1, 2, 3]).expect_err("depthwise taps of a 2x3 kernel");
        assert!(e.to_string().contains("weights"), "{e}");
    }
}
