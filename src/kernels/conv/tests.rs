//! Conv kernels against naive definitions, every table against the portable one.

use super::*;
use crate::kernels::testutil::{assert_close, rand_vec};

/// Naive conv straight from the definition.
pub(crate) fn conv_naive(s: &ConvShape, x: &[f32], w: &[f32], bias: &[f32]) -> Vec<f32> {
    let mut y = vec![0.0; s.n * s.c_out * s.oh * s.ow];
    let (cig, cog) = (s.cin_g(), s.cout_g());
    for b in 0..s.n {
        for co in 0..s.c_out {
            let g = co / cog;
            for oy in 0..s.oh {
                for ox in 0..s.ow {
                    let mut acc = bias[co] as f64;
                    for ci in 0..cig {
                        for ky in 0..s.kh {
                            for kx in 0..s.kw {
                                let iy = (oy * s.sh + ky * s.dh) as isize - s.ph as isize;
                                let ix = (ox * s.sw + kx * s.dw) as isize - s.pw as isize;
                                if iy < 0 || ix < 0 || iy >= s.h as isize || ix >= s.w as isize {
                                    continue;
                                }
                                let xv = x[((b * s.c_in + g * cig + ci) * s.h + iy as usize) * s.w
                                    + ix as usize];
                                let wv = w[((co * cig + ci) * s.kh + ky) * s.kw + kx];
                                acc += xv as f64 * wv as f64;
                            }
                        }
                    }
                    y[((b * s.c_out + co) * s.oh + oy) * s.ow + ox] = acc as f32;
                }
            }
        }
    }
    y
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn shape(
    n: usize,
    c_in: usize,
    hw: (usize, usize),
    c_out: usize,
    k: (usize, usize),
    st: (usize, usize),
    d: (usize, usize),
    p: (usize, usize, usize, usize),
    group: usize,
) -> ConvShape {
    let oh = (hw.0 + p.0 + p.2 - d.0 * (k.0 - 1) - 1) / st.0 + 1;
    let ow = (hw.1 + p.1 + p.3 - d.1 * (k.1 - 1) - 1) / st.1 + 1;
    ConvShape {
        n,
        c_in,
        h: hw.0,
        w: hw.1,
        c_out,
        oh,
        ow,
        kh: k.0,
        kw: k.1,
        sh: st.0,
        sw: st.1,
        dh: d.0,
        dw: d.1,
        ph: p.0,
        pw: p.1,
        group,
    }
}

#[test]
fn conv_matches_naive() {
    let cases = [
        shape(1, 3, (9, 11), 8, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
        shape(2, 4, (7, 7), 13, (3, 3), (2, 2), (1, 1), (0, 1, 2, 0), 1),
        shape(1, 16, (5, 6), 7, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1),
        shape(1, 8, (10, 10), 8, (3, 3), (1, 1), (2, 2), (2, 2, 2, 2), 8),
        shape(1, 6, (9, 8), 6, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 6),
        shape(1, 8, (6, 6), 12, (3, 2), (1, 2), (1, 1), (1, 0, 1, 1), 2),
        shape(1, 5, (1, 20), 7, (1, 5), (1, 3), (1, 2), (0, 2, 0, 1), 1),
        shape(1, 4, (8, 8), 6, (7, 7), (2, 2), (1, 1), (3, 3, 3, 3), 1),
        // Wide stride-1 convs take the padded-rows path (several row chunks, row
        // table and packed B, dilation, asymmetric pads, groups, batch).
        shape(1, 5, (30, 40), 16, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
        shape(2, 3, (12, 70), 30, (3, 3), (1, 1), (2, 2), (2, 1, 0, 3), 1),
        shape(1, 4, (6, 36), 8, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 2),
        shape(1, 2, (3, 64), 7, (1, 3), (1, 1), (1, 1), (0, 0, 0, 0), 1),
    ];
    assert!(cases[8..].iter().all(|s| s.padded().is_some()));
    assert!(cases[..8].iter().all(|s| s.padded().is_none()));
    for isa in crate::kernels::isa::available_isas() {
        for s in &cases {
            let x = rand_vec(s.n * s.c_in * s.h * s.w, 1);
            let w = rand_vec(s.c_out * s.cin_g() * s.kh * s.kw, 2);
            let bias = rand_vec(s.c_out, 3);
            let wts = ConvWeights::pack(s, &w);
            let mut y = vec![f32::NAN; s.n * s.c_out * s.oh * s.ow];
            // Scratch left dirty (NaN before every call) must not matter: e.g. the
            // padded-rows path pads only the rows a column tile reads for its kept columns.
            let mut scratch = vec![f32::NAN; s.scratch_len()];
            let epi = Epilogue {
                bias: Some(&bias),
                ..Epilogue::NONE
            };
            // Two tiles on an aligned boundary must equal the whole.
            let al = channel_align(s);
            let mid = (s.c_out / 2 / al * al).min(s.c_out);
            let ohw = s.oh * s.ow;
            let mut run =
                |y: &mut [f32], c: (usize, usize), cols: (usize, usize), full: Option<&[f32]>| {
                    scratch.fill(f32::NAN);
                    conv2d(
                        isa,
                        s,
                        &wts,
                        &x,
                        y,
                        c.0,
                        c.1,
                        cols,
                        full,
                        &epi,
                        &mut scratch,
                    )
                };
            run(&mut y, (0, mid), (0, ohw), None);
            run(&mut y, (mid, s.c_out), (0, ohw), None);
            let want = conv_naive(s, &x, &w, &bias);
            assert_close(&y, &want, 1e-4);
            if s.group == 1 {
                // Output-position tiles on a column-panel boundary.
                let midc = ohw / 2 / gemm::NR * gemm::NR;
                y.fill(f32::NAN);
                run(&mut y, (0, s.c_out), (0, midc), None);
                run(&mut y, (0, s.c_out), (midc, ohw), None);
                assert_close(&y, &want, 1e-4);
            }
            if s.group == 1 && s.n == 1 {
                // Channel tiles over a pre-packed im2col matrix.
                let mut full = vec![0.0; full_b_len(s)];
                pack_b_full(s, &x, &mut full);
                y.fill(f32::NAN);
                let m = MR.min(s.c_out);
                run(&mut y, (0, m), (0, ohw), Some(&full));
                run(&mut y, (m, s.c_out), (0, ohw), Some(&full));
                assert_close(&y, &want, 1e-4);
            }
        }
    }
}

/// A ConvTranspose's shape: `(n, cin, cout, group)`, a square kernel `k`, stride `st`
/// and pad `pad` on an `(h, w)` input (no output padding).
fn deconv_shape(
    (n, cin, cout, group): (usize, usize, usize, usize),
    k: usize,
    st: usize,
    pad: usize,
    (h, w): (usize, usize),
) -> ConvShape {
    ConvShape {
        n,
        c_in: cin,
        h,
        w,
        c_out: cout,
        oh: (h - 1) * st + k - 2 * pad,
        ow: (w - 1) * st + k - 2 * pad,
        kh: k,
        kw: k,
        sh: st,
        sw: st,
        dh: 1,
        dw: 1,
        ph: pad,
        pw: pad,
        group,
    }
}

/// Post-ops of [`bias_residual_relu`].
const RESIDUAL_RELU: [crate::kernels::body::unary::PostOpRt; 2] = [
    crate::kernels::body::unary::PostOpRt::AddInput { slot: 0 },
    crate::kernels::body::unary::PostOpRt::Unary(crate::ir::UnaryOp::Relu),
];

/// The epilogue `relu(x + bias + residual)` (one residual, laid out like the output).
fn bias_residual_relu<'a>(bias: &'a [f32], residuals: &'a [&'a [f32]; 1]) -> Epilogue<'a> {
    Epilogue {
        bias: Some(bias),
        post: &RESIDUAL_RELU,
        residuals,
        ..Epilogue::NONE
    }
}

#[test]
fn deconv_matches_naive() {
    // y[co, iy*s - p + ky*d] += x[ci, iy] * w[ci, co, ky]
    for &(cin, cout, group, k, st, pad, h, w_) in &[
        (
            3usize, 4usize, 1usize, 3usize, 2usize, 1usize, 5usize, 4usize,
        ),
        (4, 6, 2, 2, 2, 0, 5, 4),
        // Kernel = stride 3: every output pixel stored once (no zero fill, no add).
        (2, 3, 1, 3, 3, 0, 4, 3),
        (2, 2, 1, 3, 1, 1, 5, 4),
        // Many input-row blocks (the cols block is bounded), a ragged last one.
        (3, 32, 1, 4, 2, 1, 31, 40),
        // Stride 2: paired taps with edge columns only one tap of a pair reaches, an odd
        // kernel's unpaired last tap, a one-column input (no column both reach).
        (3, 5, 1, 5, 2, 2, 7, 9),
        (2, 3, 1, 6, 2, 3, 5, 6),
        (2, 3, 1, 4, 2, 1, 3, 1),
        (2, 2, 1, 4, 2, 0, 4, 17),
        // Kernel < stride: output rows no input row reaches (zero, then the epilogue).
        (2, 3, 1, 2, 3, 0, 5, 4),
        (3, 40, 1, 1, 2, 0, 9, 33),
        // By phase convs (kernel a whole number of strides, depth >= 32): 4x4/2 with
        // pad 1 and 0 and an odd output width, 6x6/2 (three taps a phase), 6x6/3 (three
        // column phases).
        (8, 5, 1, 4, 2, 1, 9, 11),
        (8, 4, 1, 4, 2, 0, 5, 8),
        (16, 3, 1, 6, 2, 2, 7, 6),
        (9, 7, 1, 6, 3, 3, 4, 5),
    ] {
        let s = deconv_shape((1, cin, cout, group), k, st, pad, (h, w_));
        let (oh, ow) = (s.oh, s.ow);
        let (cig, cog) = (cin / group, cout / group);
        let x = rand_vec(cin * h * w_, 1);
        let wt = rand_vec(cin * cog * k * k, 2);
        let bias = rand_vec(cout, 3);
        let mut want = vec![0.0f32; cout * oh * ow];
        for co in 0..cout {
            want[co * oh * ow..(co + 1) * oh * ow].fill(bias[co]);
        }
        for ci in 0..cin {
            let g = ci / cig;
            for cl in 0..cog {
                let co = g * cog + cl;
                for iy in 0..h {
                    for ix in 0..w_ {
                        for ky in 0..k {
                            for kx in 0..k {
                                let oy = (iy * st + ky) as isize - pad as isize;
                                let ox = (ix * st + kx) as isize - pad as isize;
                                if oy < 0 || ox < 0 || oy >= oh as isize || ox >= ow as isize {
                                    continue;
                                }
                                want[(co * oh + oy as usize) * ow + ox as usize] += x
                                    [(ci * h + iy) * w_ + ix]
                                    * wt[((ci * cog + cl) * k + ky) * k + kx];
                            }
                        }
                    }
                }
            }
        }
        let plan = DeconvPlan::new(s, &wt);
        let phases = cin >= 8 && crate::kernels::isa::table().conv_tiles.is_some();
        assert_eq!(plan.by_phases(), phases, "{:?}", plan.s);
        let mut scratch = vec![0.0; plan.scratch_len()];
        // Bias and a residual add, then ReLU, fused; cut into (channels, rows) pieces
        // that must give the whole's result (a channel cut moves the GEMM's row blocks,
        // so rounding may differ in the last bit).
        let resid = rand_vec(cout * oh * ow, 4);
        let residuals: [&[f32]; 1] = [&resid];
        let epi = bias_residual_relu(&bias, &residuals);
        let want: Vec<f32> = want
            .iter()
            .zip(&resid)
            .map(|(w, r)| (w + r).max(0.0))
            .collect();
        for isa in crate::kernels::isa::available_isas() {
            let mut whole = vec![f32::NAN; cout * oh * ow];
            plan.run(isa, &x, &mut whole, (0, cout), (0, oh), &epi, &mut scratch);
            assert_close(&whole, &want, 1e-4);
            let mut y = vec![f32::NAN; cout * oh * ow];
            let r = oh / 3 + 1;
            plan.run(isa, &x, &mut y, (0, 1), (0, r), &epi, &mut scratch);
            plan.run(isa, &x, &mut y, (0, 1), (r, oh), &epi, &mut scratch);
            plan.run(isa, &x, &mut y, (1, cout), (oh - r, oh), &epi, &mut scratch);
            plan.run(isa, &x, &mut y, (1, cout), (0, oh - r), &epi, &mut scratch);
            assert_close(&y, &whole, 1e-6);
        }
    }
}

/// The phase convs' row tiles put straight into the output give the bits of the
/// channel tiles' phase plane interleaved (both tilings sum in the same order), for
/// whole calls and cuts of channels and rows, two images, a fused bias, residual and
/// ReLU.
#[test]
fn deconv_phase_rows_into_output_match_the_plane_path() {
    if crate::kernels::isa::table().conv_tiles.is_none() {
        return;
    }
    // (cin, cout, k, stride, pad, h, w): U-Net's 4x4/2 pad 1, pad 0 with an odd
    // width, 6x6/3 (three column phases).
    for &(cin, cout, k, st, pad, h, w_) in &[
        (32usize, 5usize, 4usize, 2usize, 1usize, 20usize, 37usize),
        (16, 7, 4, 2, 0, 13, 29),
        (12, 3, 6, 3, 3, 11, 21),
    ] {
        let s = deconv_shape((2, cin, cout, 1), k, st, pad, (h, w_));
        let (oh, ow) = (s.oh, s.ow);
        let wt = rand_vec(cin * cout * k * k, 1);
        let rows = deconv::by_phases_tiled(&s, &wt, direct::Tiling::Rows);
        let chans = deconv::by_phases_tiled(&s, &wt, direct::Tiling::Chans);
        let x = rand_vec(2 * cin * h * w_, 2);
        let (bias, resid) = (rand_vec(cout, 3), rand_vec(2 * cout * oh * ow, 4));
        let residuals: [&[f32]; 1] = [&resid];
        let epi = bias_residual_relu(&bias, &residuals);
        let isa = crate::kernels::isa::best_isa();
        let run = |p: &DeconvPlan, cuts: &[[usize; 4]]| {
            let mut y = vec![f32::NAN; 2 * cout * oh * ow];
            let mut scratch = vec![0.0; p.scratch_len()];
            for &[c0, c1, r0, r1] in cuts {
                p.run(isa, &x, &mut y, (c0, c1), (r0, r1), &epi, &mut scratch);
            }
            y.iter().map(|f| f.to_bits()).collect::<Vec<_>>()
        };
        let want = run(&chans, &[[0, cout, 0, oh]]);
        assert!(want.iter().all(|&b| f32::from_bits(b).is_finite()), "{s:?}");
        assert_eq!(run(&rows, &[[0, cout, 0, oh]]), want, "{s:?}");
        let (c1, r1) = (cout / 2, oh / 3);
        let cuts = [[0, c1, 0, r1], [c1, cout, 0, r1], [0, cout, r1, oh]];
        assert_eq!(run(&rows, &cuts), want, "{s:?} cut");
    }
}

crate::kernels::isa::twin_test!(conv_tables_match_portable, 1e-5, |t| {
    let mut out = Vec::new();
    for (hw, k, st, d, p) in [
        (1, 1, 1, 1, 0),
        (7, 3, 1, 1, 1),
        (9, 3, 2, 1, 1),
        (8, 5, 2, 2, 4),
        (17, 3, 1, 2, 0),
        (40, 3, 1, 1, 1),
    ] {
        let oh = (hw + 2 * p - d * (k - 1) - 1) / st + 1;
        let s = ConvShape {
            n: 1,
            c_in: 2,
            h: hw,
            w: hw,
            c_out: 2,
            oh,
            ow: oh,
            kh: k,
            kw: k,
            sh: st,
            sw: st,
            dh: d,
            dw: d,
            ph: p,
            pw: p,
            group: 2,
        };
        let x = rand_vec(hw * hw, 6);
        let w = rand_vec(k * k, 7);
        let mut y = vec![0.0; oh * oh];
        let mut scratch = vec![0.0; depthwise_scratch_len(&s)];
        (t.depthwise_plane)(&s, &w, &x, &mut y, &mut scratch);
        out.extend_from_slice(&y);
        // The whole conv, dense (group 1), through the table's ISA.
        let sd = ConvShape {
            c_out: 7,
            group: 1,
            ..s.clone()
        };
        let xd = rand_vec(2 * hw * hw, 8);
        let wd = rand_vec(7 * 2 * k * k, 9);
        let wts = ConvWeights::pack(&sd, &wd);
        let mut yd = vec![0.0; 7 * oh * oh];
        let mut scratch = vec![0.0; sd.scratch_len()];
        conv2d(
            t.isa,
            &sd,
            &wts,
            &xd,
            &mut yd,
            0,
            7,
            (0, oh * oh),
            None,
            &Epilogue::NONE,
            &mut scratch,
        );
        out.extend_from_slice(&yd);
    }
    out
});

#[test]
fn square_shape_has_same_style_pads_and_output_size() {
    let s = ConvShape::square(16, 7, 32, 3, 2, 1);
    assert_eq!((s.oh, s.ow, s.ph, s.pw, s.sh, s.sw), (4, 4, 1, 1, 2, 2));
    assert_eq!(
        (s.n, s.c_in, s.c_out, s.kh, s.kw, s.dh, s.dw),
        (1, 16, 32, 3, 3, 1, 1)
    );
    let d = ConvShape::square(8, 10, 8, 5, 1, 8);
    assert_eq!((d.oh, d.ph), (10, 2));
    assert!(d.is_depthwise());
}

/// Im2col by the definition: row `(ci, ky, kx)`, column `oy * OW + ox`, zero in padding.
fn im2col_naive(s: &ConvShape, x: &[f32]) -> Vec<f32> {
    let (k, ohw) = (s.k(), s.oh * s.ow);
    let mut m = vec![0.0; k * ohw];
    for p in 0..k {
        let (ci, ky, kx) = (p / (s.kh * s.kw), p / s.kw % s.kh, p % s.kw);
        for j in 0..ohw {
            let iy = ((j / s.ow) * s.sh + ky * s.dh) as isize - s.ph as isize;
            let ix = ((j % s.ow) * s.sw + kx * s.dw) as isize - s.pw as isize;
            if (0..s.h as isize).contains(&iy) && (0..s.w as isize).contains(&ix) {
                m[p * ohw + j] = x[(ci * s.h + iy as usize) * s.w + ix as usize];
            }
        }
    }
    m
}

/// Strided, dilated, padded and odd geometries for the implicit-GEMM packing.
fn panel_shapes() -> Vec<ConvShape> {
    vec![
        shape(1, 3, (23, 23), 16, (7, 7), (2, 2), (1, 1), (3, 3, 3, 3), 1),
        shape(1, 5, (9, 37), 8, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 1),
        shape(1, 4, (11, 13), 8, (3, 3), (1, 1), (2, 2), (2, 0, 1, 3), 1),
        shape(1, 3, (10, 50), 8, (3, 5), (3, 3), (1, 2), (0, 2, 2, 0), 1),
        shape(1, 2, (8, 8), 8, (1, 1), (2, 2), (1, 1), (0, 0, 0, 0), 1),
        shape(1, 2, (3, 3), 8, (3, 3), (2, 2), (1, 1), (2, 2, 2, 2), 1),
        shape(1, 7, (7, 66), 8, (3, 3), (2, 1), (1, 1), (1, 1, 1, 1), 1),
        // Stride 2 with pieces of 8-15 columns, the last row read up to the plane's end.
        shape(1, 3, (6, 33), 8, (3, 3), (2, 2), (1, 1), (0, 0, 0, 0), 1),
        shape(1, 2, (5, 47), 8, (1, 1), (2, 2), (1, 1), (0, 0, 0, 0), 1),
    ]
}

#[test]
fn im2col_panels_match_definition_in_every_table() {
    use crate::kernels::gemm::{KC, NR};
    for s in panel_shapes() {
        let x = rand_vec(s.c_in * s.h * s.w, 31);
        let want = im2col_naive(&s, &x);
        let (k, ohw) = (s.k(), s.oh * s.ow);
        for t in crate::kernels::isa::tables() {
            // Blocks that start and end mid row and mid panel row, K blocks of every
            // size the GEMM uses.
            for (k0, kc) in [(0, k.min(KC)), (k / 3, (k - k / 3).min(5)), (k - 1, 1)] {
                for (j0, n) in [
                    (0, ohw),
                    (NR, ohw - NR.min(ohw)),
                    (0, 1),
                    (ohw / 2 / NR * NR, 3),
                ] {
                    if n == 0 {
                        continue;
                    }
                    let n_pad = n.div_ceil(NR) * NR;
                    let mut buf = vec![f32::NAN; kc * n_pad];
                    (t.im2col_panels)(&s, &x, k0, kc, j0, n, &mut buf);
                    for p in 0..kc {
                        for c in 0..n_pad {
                            let got = buf[c / NR * kc * NR + p * NR + c % NR];
                            let w = if c < n {
                                want[(k0 + p) * ohw + j0 + c]
                            } else {
                                0.0
                            };
                            assert_eq!(
                                got.to_bits(),
                                w.to_bits(),
                                "{} {s:?} k {k0}+{p} col {j0}+{c}",
                                t.name
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn strided_convs_match_naive_with_fused_epilogue() {
    use crate::ir::UnaryOp;
    use crate::kernels::unary::PostOpRt;
    // Many output channels (packed-block GEMM), several K blocks and column blocks.
    let mut cases = panel_shapes();
    cases.push(shape(
        1,
        40,
        (40, 41),
        50,
        (3, 3),
        (2, 2),
        (1, 1),
        (1, 1, 1, 1),
        1,
    ));
    cases.push(shape(
        1,
        3,
        (61, 61),
        64,
        (7, 7),
        (2, 2),
        (1, 1),
        (3, 3, 3, 3),
        1,
    ));
    cases.push(shape(
        2,
        6,
        (15, 9),
        12,
        (3, 3),
        (2, 2),
        (1, 1),
        (1, 0, 0, 1),
        2,
    ));
    let post = [
        PostOpRt::AddInput { slot: 0 },
        PostOpRt::Unary(UnaryOp::Relu),
    ];
    for isa in crate::kernels::isa::available_isas() {
        for s in &cases {
            assert!(s.padded().is_none());
            let x = rand_vec(s.n * s.c_in * s.h * s.w, 41);
            let w = rand_vec(s.c_out * s.cin_g() * s.kh * s.kw, 42);
            let bias = rand_vec(s.c_out, 43);
            let len = s.n * s.c_out * s.oh * s.ow;
            let res = rand_vec(len, 44);
            let residuals: [&[f32]; 1] = [&res];
            let epi = Epilogue {
                bias: Some(&bias),
                post: &post,
                residuals: &residuals,
                ..Epilogue::NONE
            };
            let wts = ConvWeights::pack(s, &w);
            let mut y = vec![f32::NAN; len];
            let mut scratch = vec![0.0; s.scratch_len()];
            let ohw = s.oh * s.ow;
            conv2d(
                isa,
                s,
                &wts,
                &x,
                &mut y,
                0,
                s.c_out,
                (0, ohw),
                None,
                &epi,
                &mut scratch,
            );
            let want: Vec<f32> = conv_naive(s, &x, &w, &bias)
                .iter()
                .zip(&res)
                .map(|(v, r)| (v + r).max(0.0))
                .collect();
            assert_close(&y, &want, 1e-4);
            if s.group == 1 && s.n == 1 {
                let mut full = vec![0.0; full_b_len(s)];
                pack_b_full_on(isa, s, &x, &mut full);
                y.fill(f32::NAN);
                let m = MR.min(s.c_out);
                conv2d(
                    isa,
                    s,
                    &wts,
                    &x,
                    &mut y,
                    0,
                    m,
                    (0, ohw),
                    Some(&full),
                    &epi,
                    &mut scratch,
                );
                conv2d(
                    isa,
                    s,
                    &wts,
                    &x,
                    &mut y,
                    m,
                    s.c_out,
                    (0, ohw),
                    Some(&full),
                    &epi,
                    &mut scratch,
                );
                assert_close(&y, &want, 1e-4);
            }
        }
    }
}
