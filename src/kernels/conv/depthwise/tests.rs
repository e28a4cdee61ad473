//! Depthwise kernels against the naive definition (with a fused epilogue), and every
//! table against the portable one, over edge sizes: widths below, at and around the
//! vector width, odd widths, strides 1/2/3, asymmetric strides, pads 0..k, dilation.

use super::super::{conv2d, depthwise_scratch_len, ConvWeights};
use super::*;
use crate::ir::UnaryOp;
use crate::kernels::testutil::{assert_close, rand_vec};
use crate::kernels::unary::PostOpRt;

/// `(h, w, k, (sh, sw), d, (ph, pw, ph_end, pw_end))` of the cases.
type Case = (
    usize,
    usize,
    usize,
    (usize, usize),
    usize,
    (usize, usize, usize, usize),
);

const CASES: [Case; 31] = [
    (1, 1, 3, (1, 1), 1, (1, 1, 1, 1)),
    (5, 7, 3, (1, 1), 1, (1, 1, 1, 1)),
    (7, 7, 3, (2, 2), 1, (1, 1, 1, 1)),
    (9, 8, 3, (1, 1), 1, (0, 0, 0, 0)),
    (14, 14, 3, (1, 1), 1, (1, 1, 1, 1)),
    (14, 14, 3, (2, 2), 1, (0, 0, 1, 1)),
    (11, 33, 3, (1, 1), 1, (1, 1, 1, 1)),
    (12, 41, 3, (2, 2), 1, (1, 1, 1, 1)),
    (6, 67, 3, (2, 1), 1, (2, 0, 1, 2)),
    (5, 70, 3, (1, 2), 1, (0, 2, 2, 0)),
    (20, 20, 5, (1, 1), 1, (2, 2, 2, 2)),
    (9, 39, 5, (2, 2), 1, (2, 2, 2, 2)),
    (7, 45, 5, (1, 1), 1, (0, 1, 4, 3)),
    (3, 80, 5, (2, 2), 1, (2, 2, 2, 2)),
    (4, 4, 5, (1, 1), 1, (4, 4, 4, 4)),
    (3, 2, 5, (2, 2), 1, (3, 3, 3, 3)),
    (10, 37, 3, (1, 1), 2, (2, 2, 2, 2)),
    (9, 31, 7, (1, 1), 1, (3, 3, 3, 3)),
    (8, 29, 3, (3, 3), 1, (1, 1, 1, 1)),
    (6, 50, 2, (2, 2), 1, (0, 0, 0, 0)),
    // Planes of 14 and 28 columns (in rows of 16 and 32), pads 0..2.
    (28, 28, 3, (1, 1), 1, (1, 1, 1, 1)),
    (14, 14, 5, (1, 1), 1, (2, 2, 2, 2)),
    (6, 15, 3, (1, 1), 1, (0, 0, 0, 0)),
    (5, 14, 3, (1, 1), 1, (2, 2, 0, 1)),
    // Stride 2 onto output rows of 14 and 28 columns: odd, even and no left pad.
    (28, 28, 3, (2, 2), 1, (1, 1, 1, 1)),
    (8, 56, 3, (2, 2), 1, (1, 1, 1, 1)),
    (6, 28, 5, (2, 2), 1, (2, 2, 2, 2)),
    (7, 29, 3, (2, 2), 1, (0, 0, 1, 1)),
    // Narrow images (the AVX-512 taps-in-registers rows): uneven strides and pads, a
    // row of inner pixels past two groups of eight, a 5x5 at stride 2 across.
    (9, 20, 3, (2, 1), 1, (1, 0, 1, 2)),
    (6, 31, 3, (1, 1), 1, (1, 1, 1, 1)),
    (10, 17, 5, (1, 2), 1, (2, 1, 2, 2)),
];

fn shape(&(h, w, k, (sh, sw), d, (ph, pw, phe, pwe)): &Case, c: usize) -> ConvShape {
    ConvShape {
        n: 1,
        c_in: c,
        h,
        w,
        c_out: c,
        oh: (h + ph + phe - d * (k - 1) - 1) / sh + 1,
        ow: (w + pw + pwe - d * (k - 1) - 1) / sw + 1,
        kh: k,
        kw: k,
        sh,
        sw,
        dh: d,
        dw: d,
        ph,
        pw,
        group: c,
    }
}

/// Naive depthwise conv of every channel, then bias, ReLU and a residual.
fn naive(s: &ConvShape, x: &[f32], w: &[f32], bias: &[f32], res: &[f32]) -> Vec<f32> {
    let (ohw, hw, kk) = (s.oh * s.ow, s.h * s.w, s.kh * s.kw);
    let mut y = vec![0.0; s.c_out * ohw];
    for c in 0..s.c_out {
        for oy in 0..s.oh {
            for ox in 0..s.ow {
                let mut acc = 0.0f64;
                for ky in 0..s.kh {
                    for kx in 0..s.kw {
                        let iy = (oy * s.sh + ky * s.dh) as isize - s.ph as isize;
                        let ix = (ox * s.sw + kx * s.dw) as isize - s.pw as isize;
                        if iy >= 0 && ix >= 0 && iy < s.h as isize && ix < s.w as isize {
                            let xv = x[c * hw + iy as usize * s.w + ix as usize];
                            acc += xv as f64 * w[c * kk + ky * s.kw + kx] as f64;
                        }
                    }
                }
                let i = c * ohw + oy * s.ow + ox;
                y[i] = (acc as f32 + bias[c]).max(0.0) + res[i];
            }
        }
    }
    y
}

#[test]
fn depthwise_matches_naive_with_fused_epilogue() {
    for isa in crate::kernels::isa::available_isas() {
        for case in &CASES {
            let s = shape(case, 3);
            let ohw = s.oh * s.ow;
            let x = rand_vec(3 * s.h * s.w, 1);
            let w = rand_vec(3 * s.kh * s.kw, 2);
            let bias = rand_vec(3, 3);
            let res = rand_vec(3 * ohw, 4);
            let post = [
                PostOpRt::Unary(UnaryOp::Relu),
                PostOpRt::AddInput { slot: 0 },
            ];
            let residuals: [&[f32]; 1] = [&res];
            let epi = Epilogue {
                bias: Some(&bias),
                post: &post,
                residuals: &residuals,
                ..Epilogue::NONE
            };
            let wts = ConvWeights::pack(&s, &w);
            let mut y = vec![f32::NAN; 3 * ohw];
            let mut scratch = vec![0.0; s.scratch_len()];
            // Two channel tiles.
            for (lo, hi) in [(0, 1), (1, 3)] {
                let (x, y, sc) = (&x, &mut y, &mut scratch);
                conv2d(isa, &s, &wts, x, y, lo, hi, (0, ohw), None, &epi, sc);
            }
            assert_close(&y, &naive(&s, &x, &w, &bias, &res), 1e-4);
        }
    }
}

crate::kernels::isa::twin_test!(depthwise_tables_match_portable, 1e-5, |t| {
    let mut out = Vec::new();
    for case in &CASES {
        let s = shape(case, 2);
        let ohw = s.oh * s.ow;
        let x = rand_vec(2 * s.h * s.w, 6);
        let w = rand_vec(2 * s.kh * s.kw, 7);
        let bias = rand_vec(2, 8);
        let post = [PostOpRt::Unary(UnaryOp::HardSwish)];
        let epi = Epilogue {
            bias: Some(&bias),
            post: &post,
            ..Epilogue::NONE
        };
        let kk = s.kh * s.kw;
        let mut y = vec![0.0; 2 * ohw];
        let mut scratch = vec![0.0; depthwise_scratch_len(&s)];
        for c in 0..2 {
            let plane = &x[c * s.h * s.w..(c + 1) * s.h * s.w];
            (t.depthwise_fused)(
                &s,
                &w[c * kk..(c + 1) * kk],
                plane,
                &mut y,
                c,
                &epi,
                &mut scratch,
            );
        }
        out.extend_from_slice(&y);
        let mut p = vec![0.0; ohw];
        (t.depthwise_plane)(&s, &w[..kk], &x[..s.h * s.w], &mut p, &mut scratch);
        out.extend_from_slice(&p);
    }
    out
});

/// The epilogues the direct kernels treat differently: none, bias alone, bias + ReLU /
/// Clip (fused in registers), and the rest (applied on finished rows).
fn epilogue_kinds() -> Vec<Vec<PostOpRt>> {
    vec![
        vec![],
        vec![PostOpRt::Unary(UnaryOp::Relu)],
        vec![PostOpRt::Unary(UnaryOp::Clip { min: 0.0, max: 6.0 })],
        vec![PostOpRt::Unary(UnaryOp::HardSwish)],
        vec![PostOpRt::AddInput { slot: 0 }],
        vec![
            PostOpRt::Unary(UnaryOp::Relu),
            PostOpRt::AddInput { slot: 0 },
        ],
        vec![PostOpRt::PRelu {
            slope: vec![0.25, -0.5],
        }],
        vec![PostOpRt::Affine {
            scale: vec![1.5, -0.75],
            shift: vec![0.1, 0.2],
        }],
    ]
}

// The direct kernels' shapes (3x3 / 5x5, stride 1 / 2) over edge sizes: widths 1..=17
// (below, at and around two vectors), odd heights, pads 0 / 1 / 2 (symmetric and
// asymmetric ends), every epilogue kind with and without bias, both channels of a
// two-channel image.
crate::kernels::isa::twin_test!(depthwise_fused_direct_matches_portable, 1e-5, |t| {
    let mut out = Vec::new();
    let kinds = epilogue_kinds();
    let mut seed = 100;
    for k in [3, 5] {
        for st in [1, 2] {
            for h in [1, 3, 5, 9] {
                for w in 1..=17 {
                    for (p, pe) in [(0, 0), (1, 1), (2, 2), (1, 0), (0, 2)] {
                        let case = (h, w, k, (st, st), 1, (p, p, pe, pe));
                        if h + p + pe < k || w + p + pe < k {
                            continue;
                        }
                        let s = shape(&case, 2);
                        seed += 1;
                        let kind = &kinds[seed % kinds.len()];
                        let with_bias = seed % 3 != 0;
                        out.extend(direct_case(t, &s, kind, with_bias, seed as u64));
                    }
                }
            }
        }
    }
    // Every epilogue kind, with and without bias, on a mid-size plane.
    for kind in &kinds {
        for with_bias in [false, true] {
            for (k, st) in [(3, 1), (3, 2), (5, 1), (5, 2)] {
                let s = shape(&(13, 23, k, (st, st), 1, (k / 2, k / 2, k / 2, k / 2)), 2);
                out.extend(direct_case(t, &s, kind, with_bias, 7));
            }
        }
    }
    out
});

/// Both channels of one image through `depthwise_fused` with epilogue `post` (bias
/// when `with_bias`, the residual for `AddInput`), into the output plane.
fn direct_case(
    t: &crate::kernels::isa::KernelTable,
    s: &ConvShape,
    post: &[PostOpRt],
    with_bias: bool,
    seed: u64,
) -> Vec<f32> {
    let (ohw, hw, kk) = (s.oh * s.ow, s.h * s.w, s.kh * s.kw);
    let x = rand_vec(2 * hw, seed);
    let w = rand_vec(2 * kk, seed + 1);
    let bias = rand_vec(2, seed + 2);
    let res = rand_vec(2 * ohw, seed + 3);
    let residuals: [&[f32]; 1] = [&res];
    let epi = Epilogue {
        bias: with_bias.then_some(&bias[..]),
        post,
        residuals: &residuals,
        ..Epilogue::NONE
    };
    let mut y = vec![f32::NAN; 2 * ohw];
    // Scratch left dirty by an earlier call must not matter.
    let mut scratch = vec![f32::NAN; depthwise_scratch_len(s)];
    for c in 0..2 {
        let plane = &x[c * hw..(c + 1) * hw];
        let wc = &w[c * kk..(c + 1) * kk];
        (t.depthwise_fused)(s, wc, plane, &mut y, c, &epi, &mut scratch);
    }
    y
}

// The across-channels block kernels (tables that have one) against the portable
// per-plane kernel: every case above (whatever its width), channel counts below, at
// and past one block, blocks starting off a block boundary, every epilogue kind.
#[test]
fn depthwise_block_matches_portable() {
    use crate::kernels::body::dw_block::{block_scratch_len, BLOCK_LANES};
    let portable = crate::kernels::isa::Isa::Portable.table();
    let kinds = epilogue_kinds();
    let mut checked = 0;
    for t in crate::kernels::isa::tables() {
        let Some(block) = t.depthwise_block else {
            continue;
        };
        for (i, case) in CASES.iter().enumerate() {
            for c in [1, 5, 16, 21, 37] {
                let s = shape(case, c);
                let (hw, ohw, kk) = (s.h * s.w, s.oh * s.ow, s.kh * s.kw);
                let x = rand_vec(c * hw, 20 + i as u64);
                let w = rand_vec(c * kk, 40 + i as u64);
                let bias = rand_vec(c, 60);
                let res = rand_vec(c * ohw, 61);
                let residuals: [&[f32]; 1] = [&res];
                for post in &kinds {
                    let post: Vec<PostOpRt> = post
                        .iter()
                        .map(|p| match p {
                            PostOpRt::PRelu { .. } => PostOpRt::PRelu {
                                slope: bias.clone(),
                            },
                            PostOpRt::Affine { .. } => PostOpRt::Affine {
                                scale: bias.clone(),
                                shift: bias.iter().map(|v| v * 0.5).collect(),
                            },
                            p => p.clone(),
                        })
                        .collect();
                    for with_bias in [false, true] {
                        let epi = Epilogue {
                            bias: with_bias.then_some(&bias[..]),
                            post: &post,
                            residuals: &residuals,
                            ..Epilogue::NONE
                        };
                        let mut scratch =
                            vec![0.0; depthwise_scratch_len(&s).max(block_scratch_len(&s))];
                        let mut want = vec![0.0; c * ohw];
                        for ch in 0..c {
                            let plane = &x[ch * hw..(ch + 1) * hw];
                            let taps = &w[ch * kk..(ch + 1) * kk];
                            (portable.depthwise_fused)(
                                &s,
                                taps,
                                plane,
                                &mut want,
                                ch,
                                &epi,
                                &mut scratch,
                            );
                        }
                        // Blocks from channel 0, and from channel 1 (a ragged first block).
                        for lo in [0, 1.min(c - 1)] {
                            let mut got = vec![f32::NAN; c * ohw];
                            got[..lo * ohw].copy_from_slice(&want[..lo * ohw]);
                            let mut c0 = lo;
                            while c0 < c {
                                let nc = BLOCK_LANES.min(c - c0);
                                block(&s, &w, &x, &mut got, c0, nc, &epi, &mut scratch);
                                c0 += nc;
                            }
                            for (j, (g, e)) in got.iter().zip(&want).enumerate() {
                                assert!(
                                    (g - e).abs() <= 1e-5 * (1.0 + e.abs()),
                                    "{}: case {i}, {c} channels, from {lo}, {post:?}, bias \
                                     {with_bias}: element {j}: got {g}, portable {e}",
                                    t.name
                                );
                            }
                            checked += 1;
                        }
                    }
                }
            }
        }
    }
    // Tables without the entry check nothing; the AVX2 and AVX-512 ones must be
    // exercised here.
    let isas = crate::kernels::isa::available_isas();
    use crate::kernels::isa::Isa;
    if isas.contains(&Isa::Avx512) || isas.contains(&Isa::Avx2Fma) {
        assert!(checked > 0);
    }
}

/// Every case of [`CASES`] channels-last over 1-136 channels (below, at and past one and
/// two vectors; 35 and 40 past the border pixels' group of four vectors; 136 wide enough
/// for the AVX-512 registers' order on images wider than its narrow ones), rows in two
/// calls, with register and non-register epilogues.
fn nhwc_outputs(t: &'static crate::kernels::isa::KernelTable) -> Vec<f32> {
    use crate::kernels::body::dw_nhwc::pack_taps;
    let mut out = Vec::new();
    let mut seed = 300;
    for case in &CASES {
        for c in [1usize, 3, 8, 9, 16, 19, 35, 40, 72, 100, 136] {
            seed += 1;
            let s = shape(case, c);
            let khw = s.kh * s.kw;
            let x = rand_vec(2 * s.h * s.w * c, seed);
            let w = rand_vec(c * khw, seed + 1000);
            let bias = rand_vec(c, seed + 2000);
            let taps = pack_taps(&w, c, khw);
            let s = ConvShape { n: 2, ..s };
            let res = rand_vec(2 * s.oh * s.ow * c, seed + 3000);
            let resid = [&res[..]];
            let posts = [
                vec![PostOpRt::Unary(UnaryOp::Clip { min: 0.0, max: 6.0 })],
                vec![PostOpRt::AddInput { slot: 0 }],
                vec![],
            ];
            for post in &posts {
                let epi = Epilogue {
                    post,
                    residuals: &resid,
                    channel_is_row: false,
                    ..Epilogue::NONE
                };
                let mut y = vec![f32::NAN; 2 * s.oh * s.ow * c];
                let mid = s.oh / 2 + 1;
                let isa = t.isa;
                let (lo, hi) = y.split_at_mut(mid * s.ow * c);
                depthwise_nhwc(isa, &s, &taps, &bias, &x, lo, (0, mid), &epi);
                depthwise_nhwc(isa, &s, &taps, &bias, &x, hi, (mid, 2 * s.oh), &epi);
                out.extend_from_slice(&y);
            }
        }
    }
    out
}

crate::kernels::isa::twin_test!(depthwise_nhwc_tables_match_portable, 1e-5, nhwc_outputs);

#[test]
fn depthwise_nhwc_matches_the_planar_conv() {
    // The channels-last conv against the planar one of the same weights, transposed.
    use crate::kernels::body::dw_nhwc::pack_taps;
    for (i, case) in CASES.iter().enumerate() {
        let c = 11;
        let s = shape(case, c);
        let (hw, ohw, khw) = (s.h * s.w, s.oh * s.ow, s.kh * s.kw);
        let x = rand_vec(c * hw, i as u64);
        let w = rand_vec(c * khw, 50 + i as u64);
        let bias = rand_vec(c, 90 + i as u64);
        let mut xt = vec![0.0; c * hw];
        for ch in 0..c {
            for p in 0..hw {
                xt[p * c + ch] = x[ch * hw + p];
            }
        }
        let relu = [PostOpRt::Unary(UnaryOp::Relu)];
        let epi = Epilogue {
            post: &relu,
            channel_is_row: false,
            ..Epilogue::NONE
        };
        let mut y = vec![0.0; c * ohw];
        let isa = crate::kernels::isa::best_isa();
        let taps = pack_taps(&w, c, khw);
        depthwise_nhwc(isa, &s, &taps, &bias, &xt, &mut y, (0, s.oh), &epi);
        let planar_epi = Epilogue {
            bias: Some(&bias),
            post: &relu,
            ..Epilogue::NONE
        };
        let mut want = vec![0.0; c * ohw];
        let mut scratch = vec![0.0; depthwise_scratch_len(&s)];
        depthwise(isa, &s, &w, &x, &mut want, 0, c, &planar_epi, &mut scratch);
        let mut got = vec![0.0; c * ohw];
        for ch in 0..c {
            for p in 0..ohw {
                got[ch * ohw + p] = y[p * c + ch];
            }
        }
        assert_close(&got, &want, 1e-5);
    }
}
