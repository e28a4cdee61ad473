//! Winograd conv against the direct definition (error bounded relative to `Σ|x||w|`, as
//! onnxruntime's Winograd tests bound it), tiles against the whole, every table against
//! the portable one.

use super::*;
use crate::ir::UnaryOp;
use crate::kernels::conv::{conv2d, ConvWeights};
use crate::kernels::testutil::rand_vec;
use crate::kernels::unary::PostOpRt;

pub(super) fn shape(
    n: usize,
    c_in: usize,
    (h, w): (usize, usize),
    c_out: usize,
    p: [usize; 4],
) -> ConvShape {
    ConvShape {
        n,
        c_in,
        h,
        w,
        c_out,
        oh: h + p[0] + p[2] - 2,
        ow: w + p[1] + p[3] - 2,
        kh: 3,
        kw: 3,
        sh: 1,
        sw: 1,
        dh: 1,
        dw: 1,
        ph: p[0],
        pw: p[1],
        group: 1,
    }
}

/// Direct conv in f64: the exact result and `Σ|x||w| + |bias|` per output.
pub(super) fn direct(s: &ConvShape, x: &[f32], w: &[f32], bias: &[f32]) -> (Vec<f64>, Vec<f64>) {
    let len = s.n * s.c_out * s.oh * s.ow;
    let (mut y, mut mag) = (vec![0.0; len], vec![0.0; len]);
    for b in 0..s.n {
        for co in 0..s.c_out {
            for oy in 0..s.oh {
                for ox in 0..s.ow {
                    let (mut acc, mut m) = (f64::from(bias[co]), f64::from(bias[co].abs()));
                    for ci in 0..s.c_in {
                        for ky in 0..3 {
                            for kx in 0..3 {
                                let iy = (oy + ky) as isize - s.ph as isize;
                                let ix = (ox + kx) as isize - s.pw as isize;
                                if iy < 0 || ix < 0 || iy >= s.h as isize || ix >= s.w as isize {
                                    continue;
                                }
                                let xv = f64::from(
                                    x[((b * s.c_in + ci) * s.h + iy as usize) * s.w + ix as usize],
                                );
                                let wv = f64::from(w[((co * s.c_in + ci) * 3 + ky) * 3 + kx]);
                                acc += xv * wv;
                                m += (xv * wv).abs();
                            }
                        }
                    }
                    let i = ((b * s.c_out + co) * s.oh + oy) * s.ow + ox;
                    y[i] = acc;
                    mag[i] = m;
                }
            }
        }
    }
    (y, mag)
}

/// Asserts `|got - want| <= tol * mag` element-wise.
fn assert_within(got: &[f32], want: &[f64], mag: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len());
    for (i, ((g, w), m)) in got.iter().zip(want).zip(mag).enumerate() {
        let err = (f64::from(*g) - w).abs();
        assert!(
            err <= tol * m.max(1e-30),
            "{what}: element {i}: got {g}, want {w} (scale {m})"
        );
    }
}

/// Relative error bound: a few hundred f32 ulps of `Σ|x||w|` (the direct GEMM is within a
/// few tens).
const TOL: f64 = 3e-5;

pub(super) fn cases() -> Vec<ConvShape> {
    vec![
        // Edge tiles on both sides, asymmetric and no padding, a batch, Cin over one K
        // block, ragged channel panels, blocks of several panels.
        shape(1, 3, (9, 11), 8, [1, 1, 1, 1]),
        shape(2, 5, (8, 8), 7, [0, 0, 0, 0]),
        shape(1, 4, (13, 10), 13, [2, 1, 0, 2]),
        shape(1, 16, (17, 23), 20, [1, 1, 1, 1]),
        shape(1, 260, (6, 7), 6, [1, 0, 1, 0]),
        shape(1, 2, (40, 45), 3, [1, 1, 1, 1]),
        // Tile rows of 16 and more tiles: runs of adjacent inner tiles in one panel.
        shape(1, 3, (10, 150), 5, [1, 1, 1, 1]),
        shape(1, 2, (9, 66), 3, [0, 0, 0, 0]),
        // Blocks of more panels than the AVX-512 input transform takes in one group (8).
        shape(1, 2, (36, 84), 3, [1, 1, 1, 1]),
        // Four tiles across (14x14): four runs of side-by-side tiles a panel.
        shape(1, 5, (14, 14), 6, [1, 1, 1, 1]),
        shape(1, 1, (3, 3), 1, [0, 0, 0, 0]),
        // Channels past one chunk of GEMM results (3 chunks in F(4x4), 2 in F(2x2)).
        shape(1, 8, (6, 7), 300, [1, 1, 1, 1]),
    ]
}

#[test]
fn winograd_matches_direct_over_edge_shapes() {
    for isa in crate::kernels::isa::available_isas() {
        for (s, tile) in cases().into_iter().flat_map(|s| [(s.clone(), 4), (s, 2)]) {
            let x = rand_vec(s.n * s.c_in * s.h * s.w, 1);
            let w = rand_vec(s.c_out * s.c_in * 9, 2);
            let bias = rand_vec(s.c_out, 3);
            let (want, mag) = direct(&s, &x, &w, &bias);
            let mut p = WinogradPlan::with_tile(&s, &w, tile);
            // Blocks of one panel, so that the shapes with many tiles have several.
            if s.oh * s.ow > 300 {
                p.set_block_tiles(NR);
            }
            let epi = Epilogue {
                bias: Some(&bias),
                ..Epilogue::NONE
            };
            let mut scratch = vec![f32::NAN; p.scratch_len()];
            let mut y = vec![f32::NAN; want.len()];
            let th = p.tile_rows();
            p.run(
                isa,
                &x,
                &mut y,
                (0, s.c_out),
                (0, th),
                None,
                &epi,
                &mut scratch,
            );
            assert_within(&y, &want, &mag, TOL, &format!("{s:?} F({tile},3) whole"));
            // Position tiles (tile rows, any cut) and channel tiles equal the whole bit
            // for bit.
            let whole = y.clone();
            for mid in [1, th / 2, th.saturating_sub(1)] {
                y.fill(f32::NAN);
                p.run(
                    isa,
                    &x,
                    &mut y,
                    (0, s.c_out),
                    (0, mid),
                    None,
                    &epi,
                    &mut scratch,
                );
                p.run(
                    isa,
                    &x,
                    &mut y,
                    (0, s.c_out),
                    (mid, th),
                    None,
                    &epi,
                    &mut scratch,
                );
                assert!(y == whole, "{s:?} row tiles cut at {mid}");
            }
            if s.n == 1 && s.c_out > MR {
                let mut v = vec![f32::NAN; p.input_len()];
                p.transform_input(&x, &mut v);
                y.fill(f32::NAN);
                let m = (s.c_out / 2 / MR * MR).max(MR);
                for c in [(0, m), (m, s.c_out)] {
                    p.run(isa, &x, &mut y, c, (0, th), Some(&v), &epi, &mut scratch);
                }
                assert!(y == whole, "{s:?} channel tiles");
            }
            // Ranges of tiles cut anywhere (mid tile row, mid panel, mid block), with a
            // shared transformed input or without, equal the whole bit for bit.
            let t = p.plane_tiles();
            let mut v = vec![f32::NAN; if s.n == 1 { p.input_len() } else { 0 }];
            if s.n == 1 {
                p.transform_input(&x, &mut v);
            }
            for cuts in [
                vec![1],
                vec![t / 3, t / 3 + 1, 2 * t / 3],
                vec![NR + 3, t - 1],
            ] {
                let mut bounds = vec![0];
                bounds.extend(cuts.into_iter().filter(|&c| c > 0 && c < t));
                bounds.push(t);
                for shared in [false, true] {
                    if shared && s.n != 1 {
                        continue;
                    }
                    y.fill(f32::NAN);
                    for r in bounds.windows(2) {
                        let sh = shared.then_some(&v[..]);
                        let ch = (0, s.c_out);
                        p.run_tiles(isa, &x, &mut y, ch, (r[0], r[1]), sh, &epi, &mut scratch);
                    }
                    assert!(y == whole, "{s:?} tile ranges {bounds:?} shared {shared}");
                }
            }
        }
    }
}

#[test]
fn winograd_fuses_the_epilogue() {
    let s = shape(1, 16, (19, 14), 12, [1, 1, 1, 1]);
    let isa = crate::kernels::isa::best_isa();
    let ohw = s.oh * s.ow;
    let x = rand_vec(s.c_in * s.h * s.w, 4);
    let w = rand_vec(s.c_out * s.c_in * 9, 5);
    let bias = rand_vec(s.c_out, 6);
    let res = rand_vec(s.c_out * ohw, 7);
    let post = [
        PostOpRt::AddInput { slot: 0 },
        PostOpRt::Unary(UnaryOp::Relu),
    ];
    let residuals: [&[f32]; 1] = [&res];
    let epi = Epilogue {
        bias: Some(&bias),
        post: &post,
        residuals: &residuals,
        ..Epilogue::NONE
    };
    // The im2col path with the same epilogue is the reference.
    let mut want = vec![0.0; s.c_out * ohw];
    let wts = ConvWeights::pack(&s, &w);
    let mut scratch = vec![0.0; s.scratch_len()];
    conv2d(
        isa,
        &s,
        &wts,
        &x,
        &mut want,
        0,
        s.c_out,
        (0, ohw),
        None,
        &epi,
        &mut scratch,
    );
    let p = WinogradPlan::new(&s, &w);
    let mut scratch = vec![0.0; p.scratch_len()];
    let mut y = vec![f32::NAN; want.len()];
    // Row tiles that end mid-block and mid-tile-row still finish every row's epilogue.
    let th = p.tile_rows();
    for r in [(0, 1), (1, 3), (3, th)] {
        p.run(isa, &x, &mut y, (0, s.c_out), r, None, &epi, &mut scratch);
    }
    for (i, (g, w)) in y.iter().zip(&want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
            "element {i}: got {g}, want {w}"
        );
    }
}

#[test]
fn winograd_selection() {
    let big = shape(1, 64, (56, 56), 64, [1, 1, 1, 1]);
    assert!(WinogradPlan::wins(&big));
    // F(4x4) on large planes, F(2x2) where 4x4 tiles would leave the panels mostly
    // padding (ResNet's 7x7 stage: 4 tiles of 4x4, 16 of 2x2).
    assert_eq!(WinogradPlan::tile_for(&big), 4);
    assert_eq!(
        WinogradPlan::tile_for(&shape(1, 256, (14, 14), 256, [1, 1, 1, 1])),
        4
    );
    let small = shape(1, 512, (7, 7), 512, [1, 1, 1, 1]);
    assert_eq!(WinogradPlan::tile_for(&small), 2);
    assert!(WinogradPlan::wins(&small));
    // Too few input channels: below 8 always, below 16 where the table has a direct
    // conv tile.
    let shallow = |c_in| shape(1, c_in, (56, 56), 64, [1, 1, 1, 1]);
    assert!(!WinogradPlan::wins(&shallow(4)));
    assert!(!WinogradPlan::wins(&shallow(7)));
    let direct = crate::kernels::isa::table().conv_tiles.is_some();
    assert_eq!(WinogradPlan::wins(&shallow(8)), !direct);
    assert!(WinogradPlan::wins(&shallow(16)));
    assert!(!WinogradPlan::wins(&shape(1, 64, (4, 4), 64, [1, 1, 1, 1])));
    // A 13x13 plane: 16 tiles of 4x4 compute 256 outputs for 169, and still win.
    let odd = shape(1, 192, (13, 13), 192, [1, 1, 1, 1]);
    assert_eq!(WinogradPlan::tile_for(&odd), 4);
    assert!(WinogradPlan::wins(&odd));
    assert!(crate::compile::cost::winograd_wins(&odd));
    // A thin plane (a CRNN's 4x80 stage): 20 tiles of 4x4.
    let thin = shape(1, 256, (4, 80), 256, [1, 1, 1, 1]);
    assert!(WinogradPlan::wins(&thin));
    assert!(crate::compile::cost::winograd_wins(&thin));
    let strided = ConvShape {
        sh: 2,
        sw: 2,
        oh: 28,
        ow: 28,
        ..big.clone()
    };
    assert!(!WinogradPlan::applies(&strided));
    let grouped = ConvShape { group: 2, ..big };
    assert!(!WinogradPlan::applies(&grouped));
}

// The output transform sums points with weights up to 8 x 8, so the tables' rounding
// differences (fused or separate multiply-add in the GEMM) grow by about that much.
crate::kernels::isa::twin_test!(winograd_tables_match_portable, 2e-4, |t| {
    let mut out = Vec::new();
    for (s, tile) in cases().into_iter().flat_map(|s| [(s.clone(), 4), (s, 2)]) {
        let x = rand_vec(s.n * s.c_in * s.h * s.w, 8);
        let w = rand_vec(s.c_out * s.c_in * 9, 9);
        let bias = rand_vec(s.c_out, 10);
        let post = [PostOpRt::Unary(UnaryOp::Clip {
            min: -0.5,
            max: 2.0,
        })];
        let epi = Epilogue {
            bias: Some(&bias),
            post: &post,
            ..Epilogue::NONE
        };
        let p = WinogradPlan::with_tile(&s, &w, tile);
        let mut scratch = vec![0.0; p.scratch_len()];
        let mut y = vec![0.0; s.n * s.c_out * s.oh * s.ow];
        let th = p.tile_rows();
        p.run(
            t.isa,
            &x,
            &mut y,
            (0, s.c_out),
            (0, th),
            None,
            &epi,
            &mut scratch,
        );
        out.extend_from_slice(&y);
    }
    out
});

/// Through the executor: a Conv node with a fused residual add and ReLU that the plan
/// computes by Winograd, run whole and by every tile (tile rows, or channel tiles
/// sharing the transformed input), against the direct definition.
#[test]
fn planned_conv_takes_winograd_whole_and_tiled() {
    use crate::exec::{ModelPlan, PlanOptions, Tile};
    use crate::ir::{ConvGeom, DType, Graph, Node, Op, PostOp, Tensor, Value};
    use std::sync::Arc;
    // (Cin, HxW, Cout): few channels, then a plane larger than the channels, then one
    // smaller than them (channel tiles).
    for (ci, hw, co) in [(48usize, 24usize, 18usize), (48, 24, 48), (32, 16, 264)] {
        let s = shape(1, ci, (hw, hw), co, [1, 1, 1, 1]);
        assert!(
            crate::compile::cost::winograd_wins(&s),
            "{s:?} picks Winograd"
        );
        let ohw = hw * hw;
        let x = rand_vec(ci * ohw, 11);
        let w = rand_vec(co * ci * 9, 12);
        let bias = rand_vec(co, 13);
        let res = rand_vec(co * ohw, 14);
        let mut g = Graph::default();
        let val = |g: &mut Graph, dims: &[usize]| {
            let name = format!("v{}", g.values.len());
            g.add_value(Value {
                name,
                dtype: DType::F32,
                shape: Some(dims.to_vec()),
                declared: None,
                konst: None,
            })
        };
        let xi = val(&mut g, &[1, ci, hw, hw]);
        let ri = val(&mut g, &[1, co, hw, hw]);
        let yi = val(&mut g, &[1, co, hw, hw]);
        g.inputs = vec![xi, ri];
        let wi = g.add_const("w", Tensor::from_f32(vec![co, ci, 3, 3], w.clone()));
        let bi = g.add_const("b", Tensor::from_f32(vec![co], bias.clone()));
        g.nodes.push(Node {
            name: "conv".into(),
            op: Op::Conv {
                geom: ConvGeom {
                    kernel: vec![3, 3],
                    strides: vec![1, 1],
                    dilations: vec![],
                    pads: vec![1, 1, 1, 1],
                    auto_pad: None,
                },
                group: 1,
                post: vec![PostOp::AddInput { input: 3 }, PostOp::Unary(UnaryOp::Relu)],
            },
            inputs: vec![Some(xi), Some(wi), Some(bi), Some(ri)],
            outputs: vec![yi],
            absorbed: vec!["conv".into()],
            placement: Some(crate::ir::Placement::Bpu),
        });
        g.outputs = vec![yi];
        let opts = PlanOptions {
            intra_op_threads: 1,
            profile: false,
            ..Default::default()
        };
        let plan = ModelPlan::new(Arc::new(g), &opts).expect("plan");
        let tiles = plan.tiles_for(0);
        let t = WinogradPlan::tile_for(&s);
        let panels = (hw.div_ceil(t) * hw.div_ceil(t)).div_ceil(crate::kernels::gemm::NR);
        // Finer than its panels, one image's units: the channel panels on each block of
        // plane tiles.
        let blocks = WinogradPlan::new(&s, &w).input_blocks();
        let want_tiles = panels.max(blocks * co.div_ceil(MR));
        assert_eq!(tiles, want_tiles, "Winograd tiling");
        let (want, mag) = direct(&s, &x, &w, &bias);
        let want: Vec<f64> = want
            .iter()
            .zip(&res)
            .map(|(a, r)| (a + f64::from(*r)).max(0.0))
            .collect();
        let mag: Vec<f64> = mag
            .iter()
            .zip(&res)
            .map(|(m, r)| m + f64::from(r.abs()))
            .collect();
        // Tile ranges (up to `panels` tiles), channel tiles beyond: every cut equals
        // the whole node bit for bit.
        let mut whole: Option<Vec<f32>> = None;
        for count in [1, 2, 3, panels, panels + 1, tiles] {
            if count > tiles {
                continue;
            }
            let mut st = plan.new_state();
            plan.set_input(&mut st, 0, bytemuck::cast_slice(&x))
                .expect("x");
            plan.set_input(&mut st, 1, bytemuck::cast_slice(&res))
                .expect("res");
            for index in 0..count {
                plan.run_node(&mut st, 0, Tile { index, count })
                    .expect("run");
            }
            let mut out = vec![0u8; plan.output_len(0)];
            plan.read_output(&st, 0, &mut out).expect("read");
            let y: Vec<f32> = out
                .chunks_exact(4)
                .map(|b| f32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            assert_within(&y, &want, &mag, TOL, &format!("{s:?} in {count} tiles"));
            match &whole {
                None => whole = Some(y),
                Some(w) => assert!(&y == w, "{s:?}: {count} tiles differ from the whole"),
            }
        }
    }
}

/// Every table's input transform gives the portable body's bits (the AVX-512 table
/// gathers the F(4x4) patches with a transposition): blocks starting anywhere, ragged
/// last panels, tile rows that split panels, edge lanes among inner ones.
#[test]
fn input_transform_tables_match_portable_bits() {
    for s in cases() {
        for tile in [4, 2] {
            let g = WinoGeom::new(&s, tile);
            let x = rand_vec(s.c_in * s.h * s.w, 21);
            let tiles = g.tw * g.th;
            for (tb, nb) in [
                (0, tiles),
                (tiles / 3, tiles - tiles / 3),
                (1, tiles.min(2) - 1),
            ] {
                if nb == 0 {
                    continue;
                }
                let len = g.points() * body::point_stride(s.c_in * nb.div_ceil(NR) * NR);
                let mut want = vec![f32::NAN; len];
                body::input_block(&g, &x, tb, nb, &mut want);
                for t in crate::kernels::isa::available_isas() {
                    let mut got = vec![f32::NAN; len];
                    (t.table().wino_input)(&g, &x, tb, nb, &mut got);
                    let same = got
                        .iter()
                        .zip(&want)
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{s:?} tile {tile} block {tb}+{nb} table {t:?}");
                }
            }
        }
    }
}

/// Every table's output transform writes the portable body's bits, and the same
/// elements: blocks starting anywhere, kept tile ranges cutting a panel, edge tiles
/// clipped, a channel range.
#[test]
fn output_transform_tables_match_portable_bits() {
    for s in cases() {
        for tile in [4, 2] {
            let g = WinoGeom::new(&s, tile);
            let tiles = g.tw * g.th;
            let ohw = s.oh * s.ow;
            for (tb, nb) in [(0, tiles), (tiles / 3, tiles - tiles / 3)] {
                let nbp = nb.div_ceil(NR) * NR;
                let (c_lo, c_hi) = (s.c_out / 3, s.c_out);
                let pstride = body::point_stride((c_hi - c_lo) * nbp);
                let mv = rand_vec(g.points() * pstride, 23);
                let m = body::PointRows {
                    m: &mv,
                    pstride,
                    ldm: nbp,
                };
                for keep in [(tb, tb + nb), (tb + 1, tb + nb - nb / 4)] {
                    let mut want = vec![f32::NAN; s.c_out * ohw];
                    let b = body::OutBlock {
                        tb,
                        nb,
                        keep,
                        chans: (c_lo, c_hi),
                        y_c0: 0,
                    };
                    body::output_block(&g, &m, &b, &mut want);
                    for t in crate::kernels::isa::available_isas() {
                        let mut got = vec![f32::NAN; s.c_out * ohw];
                        let f = t.table().wino_output;
                        f(&g, &m, &b, &mut got);
                        let same = got
                            .iter()
                            .zip(&want)
                            .all(|(a, b)| a.to_bits() == b.to_bits());
                        assert!(
                            same,
                            "{s:?} tile {tile} block {tb}+{nb} keep {keep:?} {t:?}"
                        );
                    }
                }
            }
        }
    }
}
