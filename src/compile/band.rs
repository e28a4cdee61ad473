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
    let mut fused = 0;
    'outer: loop {
        for mi in 0..g.nodes.len() {
            let Some((di, op, inputs)) = pair_at(g, mi) else {
                continue;
            };
            let mut absorbed = g.nodes[mi].absorbed.clone();
            absorbed.extend(g.nodes[di].absorbed.iter().cloned());
            let d = &mut g.nodes[di];
            d.op = op;
            d.inputs = inputs;
            d.absorbed = absorbed;
            remove_nodes(g, &[mi]);
            fused += 1;
            continue 'outer;
        }
        return fused;
    }
}

/// The fused op and its inputs when node `mi` is an expansion read only by a depthwise
/// conv (at node index `di`).
fn pair_at(g: &Graph, mi: usize) -> Option<(usize, Op, Vec<Option<crate::ir::ValueId>>)> {
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
    Some((di, op, inputs))
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
            let want = run_tiled(&g, 1);
            for tiles in [1, 3, 7] {
                let got = run_tiled(&f, tiles);
                assert_eq!(got.len(), want.len());
                let same = got
                    .iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{dims:?} {ks:?} residual {residual}, {tiles} tiles");
            }
        }
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
