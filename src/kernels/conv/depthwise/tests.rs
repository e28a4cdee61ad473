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

const CASES: [Case; 20] = [
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
