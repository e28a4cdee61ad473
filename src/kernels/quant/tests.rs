//! Int8 kernels against straightforward references (i64 sums, f32 QDQ formulas with
//! onnxruntime's rounding), and every table against the portable one, bit for bit.

use super::*;
use crate::kernels::body::conv::ConvShape;
use crate::kernels::body::pool::PoolShape;
use crate::kernels::isa::{tables, Isa, KernelTable};

/// `n` pseudo-random bytes from `seed` (xorshift).
pub(super) fn rand_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 32) as u8
        })
        .collect()
}

fn rand_i8(n: usize, seed: u64) -> Vec<i8> {
    rand_bytes(n, seed).into_iter().map(|v| v as i8).collect()
}

/// Reference requantisation, written the other way round (round, then clamp).
fn ref_requant(acc: i64, mult: f32, zp: i32, lo: u8, hi: u8) -> u8 {
    let v = (acc as i32) as f32 * mult;
    (v.round_ties_even() + zp as f32).clamp(lo as f32, hi as f32) as u8
}

/// Reference QuantizeLinear (onnxruntime's scalar form).
fn ref_quantize(x: f32, s: f32, zp: u8) -> u8 {
    ((x / s).round_ties_even() + zp as f32).clamp(0.0, 255.0) as u8
}

fn ref_dequantize(x: u8, s: f32, zp: u8) -> f32 {
    (x as i32 - zp as i32) as f32 * s
}

/// Per-channel multipliers, biases in a realistic range.
fn rq_params(c: usize, seed: u64) -> (Vec<f32>, Vec<i32>) {
    let r = rand_bytes(2 * c, seed);
    let mult = (0..c)
        .map(|i| 1.0 / 2000.0 * (1.0 + r[i] as f32 / 64.0))
        .collect();
    let bias = (0..c).map(|i| (r[c + i] as i32 - 128) * 37).collect();
    (mult, bias)
}

fn conv_shape(
    c: (usize, usize, usize),
    hw: (usize, usize),
    k: (usize, usize),
    st: (usize, usize),
    pad: (usize, usize),
    dil: (usize, usize),
) -> ConvShape {
    conv_shape_ends(c, hw, k, st, (pad, pad), dil)
}

/// A conv shape: `(c_in, c_out, group)`, `hw` input, kernel `k`, strides `st`, leading
/// and trailing pads `pads` (the output size follows), dilations `dil`.
pub(super) fn conv_shape_ends(
    c: (usize, usize, usize),
    hw: (usize, usize),
    k: (usize, usize),
    st: (usize, usize),
    (pad, end): ((usize, usize), (usize, usize)),
    dil: (usize, usize),
) -> ConvShape {
    let (c_in, c_out, group) = c;
    let oh = (hw.0 + pad.0 + end.0 - (dil.0 * (k.0 - 1) + 1)) / st.0 + 1;
    let ow = (hw.1 + pad.1 + end.1 - (dil.1 * (k.1 - 1) + 1)) / st.1 + 1;
    ConvShape {
        n: 1,
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
        dh: dil.0,
        dw: dil.1,
        ph: pad.0,
        pw: pad.1,
        group,
    }
}

/// The conv geometries every conv test runs.
fn conv_cases() -> Vec<ConvShape> {
    let mut v = vec![
        conv_shape((8, 16, 1), (9, 11), (3, 3), (1, 1), (1, 1), (1, 1)),
        conv_shape((5, 7, 1), (8, 8), (3, 3), (2, 2), (1, 1), (1, 1)),
        conv_shape((3, 13, 1), (10, 9), (3, 2), (1, 2), (2, 0), (2, 1)),
        conv_shape((16, 20, 1), (7, 7), (1, 1), (1, 1), (0, 0), (1, 1)),
        conv_shape((16, 8, 1), (8, 8), (1, 1), (2, 2), (0, 0), (1, 1)),
        conv_shape((8, 12, 4), (6, 7), (3, 3), (1, 1), (1, 1), (1, 1)),
        conv_shape((24, 24, 24), (9, 10), (3, 3), (1, 1), (1, 1), (1, 1)),
        conv_shape((10, 10, 10), (11, 8), (3, 3), (2, 2), (1, 1), (1, 1)),
        conv_shape((6, 6, 6), (12, 12), (5, 5), (1, 2), (2, 2), (2, 1)),
        conv_shape((1, 3, 1), (5, 5), (1, 1), (1, 1), (0, 0), (1, 1)),
        conv_shape((64, 70, 1), (20, 20), (3, 3), (1, 1), (1, 1), (1, 1)),
        // Channel quads with a zero-padded last quad (35 = 8 * 4 + 3), stride 2.
        conv_shape((35, 9, 1), (7, 9), (3, 3), (2, 2), (1, 1), (1, 1)),
        // Wide rows of 7 (5 outputs): the 256-column block ends on a row's last output.
        conv_shape((8, 8, 1), (40, 5), (3, 3), (1, 1), (1, 1), (1, 1)),
    ];
    let mut b2 = conv_shape((4, 6, 2), (5, 6), (2, 2), (1, 1), (1, 0), (1, 1));
    b2.n = 2;
    v.push(b2);
    v
}

/// i64 sums of a conv from the definition (padding contributes nothing), plus `bias`.
fn ref_conv_acc(s: &ConvShape, x: &[u8], zp: u8, w: &[i8], bias: &[i32]) -> Vec<i64> {
    let (cig, cog) = (s.cin_g(), s.cout_g());
    let mut y = vec![0i64; s.n * s.c_out * s.oh * s.ow];
    for b in 0..s.n {
        for co in 0..s.c_out {
            let g = co / cog;
            for oy in 0..s.oh {
                for ox in 0..s.ow {
                    let mut acc = bias[co] as i64;
                    for ci in 0..cig {
                        for ky in 0..s.kh {
                            for kx in 0..s.kw {
                                let iy = (oy * s.sh + ky * s.dh) as isize - s.ph as isize;
                                let ix = (ox * s.sw + kx * s.dw) as isize - s.pw as isize;
                                if iy < 0 || ix < 0 || iy >= s.h as isize || ix >= s.w as isize {
                                    continue;
                                }
                                let xv = x[((b * s.c_in + g * cig + ci) * s.h + iy as usize) * s.w
                                    + ix as usize] as i64
                                    - zp as i64;
                                let wv = w[((co * cig + ci) * s.kh + ky) * s.kw + kx] as i64;
                                acc += xv * wv;
                            }
                        }
                    }
                    y[((b * s.c_out + co) * s.oh + oy) * s.ow + ox] = acc;
                }
            }
        }
    }
    y
}

/// Runs conv case `s` with table `t`, weights packed in its layout: (u8 output, i32
/// output) for every channel, plus the u8 output of a channel sub-range.
fn run_conv(t: &KernelTable, s: &ConvShape, seed: u64) -> (Vec<u8>, Vec<i32>, Vec<u8>) {
    run_conv_in(t, t.quant.layout, s, seed)
}

/// [`run_conv`] with the weights packed in `lay`.
fn run_conv_in(
    t: &KernelTable,
    lay: QLayout,
    s: &ConvShape,
    seed: u64,
) -> (Vec<u8>, Vec<i32>, Vec<u8>) {
    let x = rand_bytes(s.n * s.c_in * s.h * s.w, seed);
    let w = rand_i8(s.c_out * s.k(), seed + 1);
    let x_zp = 117;
    let (mult, bias) = rq_params(s.c_out, seed + 2);
    let pw = QConvWeights::pack(lay, &w, s.c_out, s.cin_g(), s.kh, s.kw, s.group);
    assert!(s.is_depthwise() || pw.layout() == lay);
    let fb = pw.fold_bias(Some(&bias), x_zp);
    let rq = Requant {
        mult: &mult,
        bias: &fb,
        y_zp: 90,
        lo: 3,
        hi: 250,
    };
    let len = s.n * s.c_out * s.oh * s.ow;
    let mut sc = soiled_scratch(s, lay);
    let (mut y8, mut y32, mut ysub) = (vec![0u8; len], vec![0i32; len], vec![0u8; len]);
    qconv_u8(t.isa, s, &x, x_zp, &pw, &rq, &mut y8, (0, s.c_out), &mut sc);
    qconv_i32(
        t.isa,
        s,
        &x,
        x_zp,
        &pw,
        &fb,
        &mut y32,
        (0, s.c_out),
        &mut sc,
    );
    let (lo, hi) = (s.c_out / 3, s.c_out - s.c_out / 4);
    qconv_u8(t.isa, s, &x, x_zp, &pw, &rq, &mut ysub, (lo, hi), &mut sc);
    (y8, y32, ysub)
}

/// A scratch grown for `s` and filled with junk, as a worker's is after other calls: a
/// kernel must not rely on anything it did not write itself.
fn soiled_scratch(s: &ConvShape, lay: QLayout) -> QScratch {
    let mut sc = QScratch::new();
    sc.reserve_conv(s, lay);
    sc.a.fill(-301);
    sc.q.fill(0xA7);
    sc.c.fill(-77);
    sc.row.fill(0x5C);
    sc.f.fill(f32::NAN);
    sc
}

#[test]
fn qconv_matches_reference() {
    for (ci, s) in conv_cases().iter().enumerate() {
        let seed = 100 + ci as u64;
        let x = rand_bytes(s.n * s.c_in * s.h * s.w, seed);
        let w = rand_i8(s.c_out * s.k(), seed + 1);
        let (mult, bias) = rq_params(s.c_out, seed + 2);
        let acc = ref_conv_acc(s, &x, 117, &w, &bias);
        let ohw = s.oh * s.ow;
        for t in tables() {
            let (y8, y32, ysub) = run_conv(t, s, seed);
            let (lo, hi) = (s.c_out / 3, s.c_out - s.c_out / 4);
            for (i, &a) in acc.iter().enumerate() {
                let c = (i / ohw) % s.c_out;
                let want = ref_requant(a, mult[c], 90, 3, 250);
                assert_eq!(y8[i], want, "case {ci} {s:?} table {} element {i}", t.name);
                assert_eq!(
                    y32[i] as i64, a,
                    "case {ci} table {} i32 element {i}",
                    t.name
                );
                let sub = if (lo..hi).contains(&c) { want } else { 0 };
                assert_eq!(
                    ysub[i], sub,
                    "case {ci} table {} channels {lo}..{hi}",
                    t.name
                );
            }
        }
    }
}

/// GEMM sizes: ragged m / n / k, k = 1, large k, more than one row and column block.
const GEMM_CASES: [(usize, usize, usize); 9] = [
    (1, 1, 1),
    (6, 16, 2),
    (7, 17, 3),
    (5, 33, 1),
    (13, 40, 77),
    (2, 10, 1500),
    (100, 300, 9),
    (97, 257, 64),
    (1, 1000, 512),
];

fn run_gemm(t: &KernelTable, mnk: (usize, usize, usize), seed: u64) -> (Vec<u8>, Vec<i32>) {
    run_gemm_in(t, t.quant.layout, mnk, seed)
}

/// [`run_gemm`] with B packed in `lay`.
fn run_gemm_in(
    t: &KernelTable,
    lay: QLayout,
    (m, n, k): (usize, usize, usize),
    seed: u64,
) -> (Vec<u8>, Vec<i32>) {
    let lda = k + 3;
    let a = rand_bytes(m * lda, seed);
    let b = rand_i8(k * n, seed + 1);
    let (mult, bias) = rq_params(n, seed + 2);
    let pb = QGemmB::pack(lay, &b, k, n);
    assert_eq!(pb.layout(), lay);
    let fb = pb.fold_bias(Some(&bias), 131);
    let rq = Requant {
        mult: &mult,
        bias: &fb,
        y_zp: 128,
        lo: 0,
        hi: 255,
    };
    let ldc = n + 1;
    let mut sc = QScratch::new();
    let (mut y8, mut y32) = (vec![7u8; m * ldc], vec![7i32; m * ldc]);
    qgemm_u8(t.isa, &a, lda, m, &pb, &rq, &mut y8, ldc, &mut sc);
    qgemm_i32(t.isa, &a, lda, m, &pb, &fb, &mut y32, ldc, &mut sc);
    (y8, y32)
}

#[test]
fn qgemm_matches_reference() {
    for (ci, &(m, n, k)) in GEMM_CASES.iter().enumerate() {
        let seed = 300 + ci as u64;
        let lda = k + 3;
        let a = rand_bytes(m * lda, seed);
        let b = rand_i8(k * n, seed + 1);
        let (mult, bias) = rq_params(n, seed + 2);
        for t in tables() {
            let (y8, y32) = run_gemm(t, (m, n, k), seed);
            let ldc = n + 1;
            for i in 0..m {
                for j in 0..n {
                    let acc = bias[j] as i64
                        + (0..k)
                            .map(|p| (a[i * lda + p] as i64 - 131) * b[p * n + j] as i64)
                            .sum::<i64>();
                    let want = ref_requant(acc, mult[j], 128, 0, 255);
                    assert_eq!(
                        y8[i * ldc + j],
                        want,
                        "case {ci} table {} ({i},{j})",
                        t.name
                    );
                    assert_eq!(
                        y32[i * ldc + j] as i64,
                        acc,
                        "case {ci} table {} i32",
                        t.name
                    );
                }
                assert_eq!(
                    (y8[i * ldc + n], y32[i * ldc + n]),
                    (7, 7),
                    "padding column"
                );
            }
        }
    }
}

#[test]
fn wide_weights_with_zero_point() {
    // u8 weights with zero point 200: w - 200 in [-200, 55].
    let (m, n, k) = (9, 21, 35);
    let a = rand_bytes(m * k, 1);
    let wu = rand_bytes(k * n, 2);
    let wide: Vec<i16> = wu.iter().map(|&v| v as i16 - 200).collect();
    let pb = QGemmB::pack_wide(&wide, k, n);
    let fb = pb.fold_bias(None, 255);
    let mut y = vec![0i32; m * n];
    qgemm_i32(
        Isa::Portable,
        &a,
        k,
        m,
        &pb,
        &fb,
        &mut y,
        n,
        &mut QScratch::new(),
    );
    for i in 0..m {
        for j in 0..n {
            let want: i64 = (0..k)
                .map(|p| (a[i * k + p] as i64 - 255) * (wide[p * n + j] as i64))
                .sum();
            assert_eq!(y[i * n + j] as i64, want);
        }
    }
}

#[test]
fn quantize_dequantize_follow_onnxruntime() {
    // Ties round to even, out of range saturates.
    let x = [
        0.25f32, 0.75, 1.25, -0.25, -0.75, 1000.0, -1000.0, 3.0, 63.5, 0.0,
    ];
    let mut q = [0u8; 10];
    quantize_f32(Isa::Portable, &x, 0.5, 3, &mut q);
    assert_eq!(q, [3, 5, 5, 3, 1, 255, 0, 9, 130, 3]);
    let xs: Vec<f32> = crate::kernels::testutil::rand_vec(1037, 5)
        .iter()
        .map(|v| v * 40.0)
        .collect();
    for t in tables() {
        for &(s, zp) in &[(0.1f32, 0u8), (0.37, 128), (0.013, 255)] {
            let mut q = vec![0u8; xs.len()];
            quantize_f32(t.isa, &xs, s, zp, &mut q);
            for (a, &v) in q.iter().zip(&xs) {
                assert_eq!(*a, ref_quantize(v, s, zp), "table {} {v}", t.name);
            }
            let mut d = vec![0f32; q.len()];
            dequantize_u8(t.isa, &q, s, zp, &mut d);
            for (a, &v) in d.iter().zip(&q) {
                assert_eq!(a.to_bits(), ref_dequantize(v, s, zp).to_bits());
            }
        }
    }
}

#[test]
fn requant_is_dequantize_then_quantize() {
    // Every byte value, then each again in a run of 300 (whole and partial vectors).
    let x: Vec<u8> = (0..=255)
        .chain((0..300).map(|i| (i * 7 % 256) as u8))
        .collect();
    for t in tables() {
        let mut y = vec![0u8; x.len()];
        requant_u8(t.isa, &x, (0.05, 100), (0.08, 20), &mut y);
        for (&a, &b) in x.iter().zip(&y) {
            let want = ref_quantize(ref_dequantize(a, 0.05, 100), 0.08, 20);
            assert_eq!(b, want, "table {} byte {a}", t.name);
        }
    }
}

/// The u8 softmax on every kernel table bit for bit against the portable lane (the
/// terms table in both), over lane counts around the 16-lane groups, lanes longer than the
/// kept rows, and scales positive, negative, zero and NaN.
#[test]
fn softmax_block_matches_portable() {
    use crate::ir::QParam;
    let qy = QParam {
        scale: 1.0 / 256.0,
        zp: 5,
    };
    for (scale, zp) in [
        (0.11f32, 128u8),
        (0.02, 0),
        (-0.05, 17),
        (0.0, 3),
        (f32::NAN, 9),
    ] {
        let qx = QParam { scale, zp };
        let v = |q: usize| body::dequantize_one(q as u8, scale, zp);
        let exps: Vec<f32> = (0..256 * 256)
            .map(|i| f64::from(v(i % 256) - v(i / 256)).exp() as f32)
            .collect();
        for (len, inner) in [
            (16, 16),
            (16, 4116 % 100 + 16),
            (5, 47),
            (1, 33),
            (40, 17),
            (3, 15),
        ] {
            let x = rand_bytes(len * inner, (len * 1000 + inner) as u64);
            let p = body::SoftmaxParams {
                len,
                inner,
                qx,
                qy,
                exps: Some(&exps),
            };
            let mut want = vec![0u8; x.len()];
            body::softmax_block(&p, &x, &mut want);
            for t in tables() {
                let mut got = vec![0xEEu8; x.len()];
                (t.quant.softmax_block)(&p, &x, &mut got);
                assert_eq!(
                    got, want,
                    "table {} scale {scale} len {len} inner {inner}",
                    t.name
                );
            }
        }
    }
}

/// Every other byte on every kernel table against the definition, over lengths around
/// the 32-byte vectors, with the shortest source and a longer one.
#[test]
fn take_even_matches_definition() {
    for t in tables() {
        for n in [0usize, 1, 2, 31, 32, 33, 64, 100] {
            for extra in [0usize, 1, 40] {
                let src = rand_bytes((2 * n).saturating_sub(1) + extra, (n * 3 + extra) as u64);
                let mut dst = vec![0xEEu8; n + 2];
                (t.quant.take_even)(&src, &mut dst[..n]);
                for i in 0..n {
                    assert_eq!(
                        dst[i],
                        src[2 * i],
                        "table {} n {n} extra {extra} at {i}",
                        t.name
                    );
                }
                assert_eq!(&dst[n..], &[0xEE; 2], "table {} wrote past the end", t.name);
            }
        }
    }
}

/// Row copies on every kernel table: rows shorter and longer than a vector, strides
/// wider than the rows, nothing written between or after them.
#[test]
fn copy_rows_match_definition() {
    for t in tables() {
        for (rows, len, ss, ds) in [
            (0, 5, 9, 7),
            (1, 0, 1, 1),
            (3, 7, 9, 7),
            (5, 56, 58, 56),
            (2, 130, 131, 140),
        ] {
            let src = rand_bytes((rows.max(1) - 1) * ss + len + 3, (rows * len) as u64);
            let mut dst = vec![0xEEu8; (rows.max(1) - 1) * ds + len + 5];
            (t.quant.copy_rows)(&src, ss, &mut dst, ds, (rows, len));
            for (i, &d) in dst.iter().enumerate() {
                let (r, c) = (i / ds.max(1), i % ds.max(1));
                let want = if r < rows && c < len {
                    src[r * ss + c]
                } else {
                    0xEE
                };
                assert_eq!(d, want, "table {} rows {rows} len {len} at {i}", t.name);
            }
        }
    }
}

/// The table lookup on every kernel table against the definition, over lengths around
/// the vector sizes and every byte value (high bit set and clear).
#[test]
fn lut_matches_definition() {
    let table: [u8; 256] = std::array::from_fn(|i| (i as u8).wrapping_mul(37).wrapping_add(11));
    for t in tables() {
        for n in [0usize, 1, 63, 64, 65, 127, 128, 200, 256, 1000] {
            let x = rand_bytes(n, 400 + n as u64);
            let mut y = vec![0xEEu8; n + 3];
            lut_u8(t.isa, &table, &x, &mut y[..n]);
            for (i, &v) in x.iter().enumerate() {
                assert_eq!(y[i], table[usize::from(v)], "table {} n {n} at {i}", t.name);
            }
            assert_eq!(&y[n..], &[0xEE; 3], "table {} wrote past the end", t.name);
        }
    }
}

fn add_params() -> AddParams {
    AddParams {
        a_scale: 0.031,
        a_zp: 120,
        b_scale: 0.047,
        b_zp: 133,
        y_scale: 0.06,
        y_zp: 110,
        lo: 110,
        hi: 255,
    }
}

fn ref_add(p: &AddParams, a: u8, b: u8) -> u8 {
    let v = ref_dequantize(a, p.a_scale, p.a_zp) + ref_dequantize(b, p.b_scale, p.b_zp);
    ref_quantize(v, p.y_scale, p.y_zp).clamp(p.lo, p.hi)
}

fn run_add(t: &KernelTable, n: usize) -> Vec<Vec<u8>> {
    let p = add_params();
    let a = rand_bytes(n * 6, 11);
    let b = rand_bytes(n * 6, 12);
    let mut outs = vec![vec![0u8; n * 6]; 4];
    qadd(t.isa, &p, &a, &b, &mut outs[0]);
    qadd_bcast(t.isa, &p, QBcast::Scalar, &a, &b[..1], &mut outs[1]);
    qadd_bcast(t.isa, &p, QBcast::Rows, &a, &b[..n], &mut outs[2]);
    qadd_bcast(
        t.isa,
        &p,
        QBcast::Channels { inner: n },
        &a,
        &b[..3],
        &mut outs[3],
    );
    outs
}

#[test]
fn qadd_matches_float_qdq() {
    let p = add_params();
    for n in [1usize, 7, 33, 64] {
        let a = rand_bytes(n * 6, 11);
        let b = rand_bytes(n * 6, 12);
        for t in tables() {
            let o = run_add(t, n);
            for i in 0..n * 6 {
                assert_eq!(o[0][i], ref_add(&p, a[i], b[i]), "same {i}");
                assert_eq!(o[1][i], ref_add(&p, a[i], b[0]), "scalar {i}");
                assert_eq!(o[2][i], ref_add(&p, a[i], b[i % n]), "rows {i}");
                assert_eq!(o[3][i], ref_add(&p, a[i], b[(i / n) % 3]), "channels {i}");
            }
        }
    }
}

fn pool_shape(hw: (usize, usize), k: usize, st: usize, pad: usize, ceil: bool) -> PoolShape {
    let span = |n: usize| {
        let num = n + 2 * pad - k;
        (if ceil { num.div_ceil(st) } else { num / st }) + 1
    };
    PoolShape {
        planes: 3,
        h: hw.0,
        w: hw.1,
        oh: span(hw.0),
        ow: span(hw.1),
        kh: k,
        kw: k,
        sh: st,
        sw: st,
        dh: 1,
        dw: 1,
        pads: [pad; 4],
    }
}

#[test]
fn pools_match_float_qdq() {
    for s in [
        pool_shape((9, 10), 3, 2, 1, false),
        pool_shape((8, 8), 2, 2, 0, false),
        pool_shape((7, 9), 3, 2, 1, true),
    ] {
        let x = rand_bytes(s.planes * s.h * s.w, 21);
        let (xs, xz, ys, yz) = (0.02f32, 77u8, 0.015f32, 60u8);
        let xf: Vec<f32> = x.iter().map(|&v| ref_dequantize(v, xs, xz)).collect();
        let olen = s.planes * s.oh * s.ow;
        let mut fmax = vec![0f32; olen];
        crate::kernels::pool::max_pool(Isa::Portable, &s, &xf, &mut fmax, 0, s.planes);
        for t in tables() {
            let mut y = vec![0u8; olen];
            maxpool_u8(t.isa, &s, &x, &mut y, 0, s.planes);
            for (a, &f) in y.iter().zip(&fmax) {
                assert_eq!(*a, ref_quantize(f, xs, xz), "maxpool, table {}", t.name);
            }
        }
        for cip in [false, true] {
            let mut favg = vec![0f32; olen];
            crate::kernels::pool::avg_pool(&s, cip, &xf, &mut favg, 0, s.planes);
            let mut y = vec![0u8; olen];
            avgpool_u8(&s, cip, &x, (xs, xz), (ys, yz), &mut y, 0, s.planes);
            for (a, &f) in y.iter().zip(&favg) {
                assert_eq!(*a, ref_quantize(f, ys, yz), "avgpool include_pad {cip}");
            }
        }
    }
}

#[test]
fn resize_matches_float_qdq() {
    use crate::ir::CoordMode;
    use crate::kernels::resize::{bilinear, linear_taps};
    let (h, w, oh, ow) = (5, 7, 9, 15);
    let x = rand_bytes(2 * h * w, 31);
    let iy: Vec<usize> = (0..oh).map(|o| o * h / oh).collect();
    let ix: Vec<usize> = (0..ow).map(|o| o * w / ow).collect();
    let mut y = vec![0u8; 2 * oh * ow];
    resize_nearest_u8(h, w, &iy, &ix, &x, &mut y, 0, 2);
    for p in 0..2 {
        for oy in 0..oh {
            for ox in 0..ow {
                assert_eq!(y[(p * oh + oy) * ow + ox], x[(p * h + iy[oy]) * w + ix[ox]]);
            }
        }
    }
    let ty = linear_taps(CoordMode::HalfPixel, oh as f32 / h as f32, h, oh);
    let tx = linear_taps(CoordMode::HalfPixel, ow as f32 / w as f32, w, ow);
    let (xs, xz, ys, yz) = (0.02f32, 77u8, 0.02f32, 77u8);
    resize_bilinear_u8(&ty, &tx, h, w, &x, (xs, xz), (ys, yz), &mut y, 0, 2);
    let xf: Vec<f32> = x.iter().map(|&v| ref_dequantize(v, xs, xz)).collect();
    let mut yf = vec![0f32; 2 * oh * ow];
    bilinear(&ty, &tx, h, w, &xf, &mut yf, 0, 2);
    for (a, &f) in y.iter().zip(&yf) {
        // Another (equally valid) float formula: within one step.
        assert!((*a as i32 - ref_quantize(f, ys, yz) as i32).abs() <= 1);
    }
}

#[test]
fn global_avgpool_matches_float_qdq() {
    // Plane sizes from one value to 80 x 80 (a detector's P3 map).
    for (len, seed) in [(1usize, 1u64), (7, 2), (49, 3), (196, 4), (6400, 5)] {
        let planes = 5;
        let x = rand_bytes(planes * len, seed);
        let (xs, xz, ys, yz) = (0.037f32, 131u8, 0.011f32, 17u8);
        let mut y = vec![0u8; planes];
        global_avgpool_u8(len, &x, (xs, xz), (ys, yz), &mut y, 0, planes);
        let xf: Vec<f32> = x.iter().map(|&v| ref_dequantize(v, xs, xz)).collect();
        let mut f = vec![0f32; planes];
        crate::kernels::pool::global_pool(true, len, &xf, &mut f, 0, planes);
        for p in 0..planes {
            // The exact mean in f64, quantised: what both round to unless it is within
            // f32 rounding of a tie.
            let s: i64 = x[p * len..(p + 1) * len]
                .iter()
                .map(|&v| i64::from(v) - i64::from(xz))
                .sum();
            let exact = s as f64 * f64::from(xs) / len as f64 / f64::from(ys);
            let near_tie = (exact - exact.floor() - 0.5).abs() < 1e-4;
            let want = ref_quantize(f[p], ys, yz);
            if !near_tie {
                assert_eq!(y[p], want, "plane {p} of {len}");
            }
            assert!(
                (i32::from(y[p]) - i32::from(want)).abs() <= 1,
                "plane {p} of {len}"
            );
        }
    }
}

#[test]
fn broadcast_forms_and_runs() {
    let of = QBcast::of;
    assert_eq!(of(&[1, 8, 4, 4], &[1, 8, 4, 4]), Some(QBcast::Same));
    assert_eq!(of(&[1, 8, 4, 4], &[]), Some(QBcast::Scalar));
    assert_eq!(of(&[1, 8, 4, 4], &[1, 1, 1, 1]), Some(QBcast::Scalar));
    assert_eq!(
        of(&[1, 8, 4, 4], &[1, 8, 1, 1]),
        Some(QBcast::Channels { inner: 16 })
    );
    assert_eq!(
        of(&[2, 8, 4, 4], &[8, 1, 1]),
        Some(QBcast::Channels { inner: 16 })
    );
    assert_eq!(
        of(&[2, 8, 4, 4], &[2, 8, 1, 1]),
        Some(QBcast::Channels { inner: 16 })
    );
    assert_eq!(of(&[2, 8, 4, 4], &[4, 4]), Some(QBcast::Rows));
    assert_eq!(of(&[2, 8, 4, 4], &[1, 1, 4, 4]), Some(QBcast::Rows));
    assert_eq!(of(&[1, 1, 8], &[1, 1, 1, 8]), Some(QBcast::Same));
    assert_eq!(of(&[2, 8, 4, 4], &[8, 1, 4]), None);
    assert_eq!(of(&[2, 8, 4, 4], &[3, 1, 1]), None);
    assert_eq!(of(&[8, 1], &[8, 4]), None);
    assert_eq!(of(&[8], &[2, 8]), None);
    // Runs over any element range read `b` where the broadcast says.
    let (a_shape, n) = ([2usize, 3, 5], 30usize);
    /// The `b` index of output element `i`.
    type Index = fn(usize) -> usize;
    let cases: [(Vec<usize>, Index); 4] = [
        (vec![3, 1], |i| (i / 5) % 3),
        (vec![5], |i| i % 5),
        (vec![1], |_| 0),
        (vec![2, 3, 5], |i| i),
    ];
    for (b_shape, idx) in cases {
        let bc = of(&a_shape, &b_shape).expect("form");
        let b_len = b_shape.iter().product();
        for (lo, hi) in [(0, n), (3, 17), (7, 8), (11, 30), (4, 4)] {
            let mut seen = Vec::new();
            bc.for_each_run(b_len, lo, hi, |i0, i1, b0, b1| {
                assert!(b1 - b0 == 1 || b1 - b0 == i1 - i0, "{bc:?}");
                for i in i0..i1 {
                    seen.push((i, if b1 - b0 == 1 { b0 } else { b0 + i - i0 }));
                }
            });
            let want: Vec<(usize, usize)> = (lo..hi).map(|i| (i, idx(i))).collect();
            assert_eq!(seen, want, "{bc:?} over {lo}..{hi}");
        }
    }
}

/// Convs with K = 1..9 (1x1 over 1..9 channels, and 3x3 / 1x3 over one), M and N
/// around the tile sizes of both layouts (6 / 8 rows, 16 / 32 columns).
fn edge_conv_cases() -> Vec<ConvShape> {
    let mut v: Vec<ConvShape> = (1..=9)
        .map(|k| {
            let (cout, hw) = [(1, (1, 1)), (7, (5, 7)), (9, (3, 11)), (17, (8, 8))][k % 4];
            conv_shape((k, cout, 1), hw, (1, 1), (1, 1), (0, 0), (1, 1))
        })
        .collect();
    v.push(conv_shape(
        (1, 8, 1),
        (6, 11),
        (3, 3),
        (1, 1),
        (1, 1),
        (1, 1),
    ));
    v.push(conv_shape(
        (1, 6, 1),
        (4, 9),
        (1, 3),
        (1, 1),
        (0, 1),
        (1, 1),
    ));
    v.push(conv_shape(
        (13, 33, 1),
        (13, 13),
        (3, 3),
        (2, 2),
        (1, 1),
        (1, 1),
    ));
    v.push(conv_shape(
        (9, 16, 1),
        (17, 19),
        (2, 2),
        (1, 1),
        (0, 0),
        (1, 1),
    ));
    v.push(conv_shape(
        (12, 18, 3),
        (7, 9),
        (3, 1),
        (1, 1),
        (1, 0),
        (1, 1),
    ));
    v
}

/// GEMMs with K = 1..9 and M, N around both tile geometries.
fn edge_gemm_cases() -> Vec<(usize, usize, usize)> {
    let mut v = Vec::new();
    for k in 1..=9 {
        for (m, n) in [(1, 1), (7, 31), (9, 33), (17, 65)] {
            v.push((m, n, k));
        }
    }
    v.push((100, 97, 13));
    v
}

#[test]
fn quad_entries_match_portable() {
    let p = &table::PORTABLE;
    for t in tables() {
        let q = t.quant;
        for kq in 0..=9 {
            let a = rand_bytes(kq * table::Q4MR * 4, kq as u64);
            let b = rand_bytes(kq * table::Q4NR * 4, 50 + kq as u64);
            let (ai, bi): (Vec<i8>, Vec<i8>) = (
                a.iter().map(|&v| v as i8).collect(),
                b.iter().map(|&v| v as i8).collect(),
            );
            let ldc = table::Q4NR + 3;
            let len = table::Q4MR * ldc;
            let (mut want, mut got) = (vec![-5i32; len], vec![-5i32; len]);
            // B quads packed, and scattered (reversed, unaligned, overlapping) in a
            // longer B: both against the packed tile of the definition.
            let packed: Vec<u32> = (0..kq as u32).map(|q| q * 128).collect();
            let scattered: Vec<u32> = (0..kq as u32)
                .map(|q| (kq as u32 - 1 - q) * 120 + q % 5)
                .collect();
            let far = rand_bytes(kq * 128 + 64, 70 + kq as u64);
            for (offs, src) in [(&packed, &b), (&scattered, &far)] {
                let at = table::QuadOffsets::new(offs);
                let gathered: Vec<u8> = offs
                    .iter()
                    .flat_map(|&o| src[o as usize..o as usize + 128].iter().copied())
                    .collect();
                body::quad_tile(kq, &ai, &gathered, &mut want, ldc);
                (q.quad_tile_su)(kq, &ai, src, &at, &mut got, ldc);
                assert_eq!(got, want, "quad_tile_su, table {}, kq {kq}", q.name);
            }
            (p.quad_tile_us)(kq, &a, &bi, &mut want, ldc);
            (q.quad_tile_us)(kq, &a, &bi, &mut got, ldc);
            assert_eq!(got, want, "quad_tile_us, table {}, kq {kq}", q.name);
        }
        for n in [0usize, 1, 31, 32, 63, 64, 65, 130, 200] {
            for k in [1usize, 3, 4, 9, 16] {
                let rows: Vec<Vec<u8>> =
                    (0..k).map(|r| rand_bytes(n, (n * 31 + r) as u64)).collect();
                let len = QLayout::Quads.b_len(k, n);
                let (mut want, mut got) = (vec![0xA5u8; len], vec![0xA5u8; len]);
                for p0 in (0..k).step_by(4) {
                    let src: Vec<&[u8]> = rows[p0..k.min(p0 + 4)].iter().map(|r| &r[..]).collect();
                    (p.scatter_quads)(k, p0, &src, &mut want);
                    (q.scatter_quads)(k, p0, &src, &mut got);
                }
                assert_eq!(got, want, "scatter_quads, table {}, n {n}, k {k}", q.name);
                if k == 4 {
                    // Four rows into exactly their n quads (interleaved planes).
                    // (The bytes past them, outside the slice passed, stay as they were.)
                    let mut exact = vec![0xA5u8; 4 * n + 256];
                    (q.scatter_quads)(4, 0, &src_rows(&rows), &mut exact[..4 * n]);
                    let want: Vec<u8> = (0..4 * n + 256)
                        .map(|i| if i < 4 * n { rows[i % 4][i / 4] } else { 0xA5 })
                        .collect();
                    assert_eq!(exact, want, "scatter_quads exact, table {}, n {n}", q.name);
                }
                // Every element of B at its place (padding left as it was).
                let panel = k.div_ceil(4) * table::Q4NR * 4;
                for (p0, row) in rows.iter().enumerate() {
                    for (j, &x) in row.iter().enumerate() {
                        let at = (j / table::Q4NR) * panel + (p0 / 4) * table::Q4NR * 4;
                        assert_eq!(got[at + (j % table::Q4NR) * 4 + p0 % 4], x);
                    }
                }
            }
        }
    }
}

/// The requantising quad tile against the stored tile requantised by the definition
/// (`ref_requant`) and the near-tie rule written out, over spans of rows and columns, K
/// depths, zero points and clamps; bytes outside the span stay as they were.
#[test]
fn quad_tile_su_u8_matches_definition() {
    use table::{TileDst, TilePost, Q4MR, Q4NR};
    let spans = [
        (0, 8, 32),
        (2, 5, 17),
        (7, 8, 1),
        (0, 1, 16),
        (3, 8, 31),
        (0, 8, 15),
    ];
    let posts = [
        (128i32, 0u8, 255u8),
        (0, 0, 255),
        (7, 7, 200),
        (250, 3, 250),
    ];
    for t in tables() {
        for (case, kq) in [0usize, 1, 3, 9].into_iter().enumerate() {
            let a = rand_i8(kq * Q4MR * 4, 90 + kq as u64);
            let b = rand_bytes(kq * Q4NR * 4, 95 + kq as u64);
            let mut acc = vec![0i32; Q4MR * Q4NR];
            body::quad_tile(kq, &a, &b, &mut acc, Q4NR);
            let packed: Vec<u32> = (0..kq as u32).map(|q| q * 128).collect();
            let at = table::QuadOffsets::new(&packed);
            for (pi, &(y_zp, lo, hi)) in posts.iter().enumerate() {
                let r = rand_bytes(2 * Q4MR, (10 * case + pi) as u64);
                let mut post = TilePost {
                    y_zp,
                    lo,
                    hi,
                    ..TilePost::default()
                };
                for i in 0..Q4MR {
                    post.bias[i] = (i32::from(r[i]) - 128) * 13;
                    // Even rows: multiplier 0.5 (odd sums are exact ties).
                    post.mult[i] = if i % 2 == 0 {
                        0.5
                    } else {
                        1.0 / (300.0 + f32::from(r[Q4MR + i]))
                    };
                }
                let (minv, maxv) = body::bounds(lo, hi, y_zp);
                for &(rlo, rhi, cols) in &spans {
                    let ldo = Q4NR + 5;
                    let mut got = vec![0xA5u8; Q4MR * ldo];
                    let dst = TileDst {
                        post: &post,
                        lo: rlo,
                        hi: rhi,
                        cols,
                        out: &mut got,
                        ldo,
                        eps: conv::TIE_EPS,
                    };
                    let masks = (t.quant.quad_tile_su_u8)(kq, (&a, &b, &at), dst);
                    for row in 0..Q4MR {
                        let mut want_mask = 0u32;
                        for j in 0..ldo {
                            let inside = (rlo..rhi).contains(&row) && j < cols;
                            let at = if row >= rlo {
                                (row - rlo) * ldo + j
                            } else {
                                usize::MAX
                            };
                            let Some(&g) = got.get(at) else { continue };
                            if !inside {
                                if row >= rlo && row < rhi {
                                    assert_eq!(g, 0xA5, "table {} wrote outside", t.name);
                                }
                                continue;
                            }
                            let sum = i64::from(acc[row * Q4NR + j].wrapping_add(post.bias[row]));
                            let want = ref_requant(sum, post.mult[row], y_zp, lo, hi);
                            assert_eq!(g, want, "table {} kq {kq} row {row} col {j}", t.name);
                            let v = (sum as i32 as f32 * post.mult[row]).clamp(minv, maxv);
                            if (v - v.round_ties_even()).abs() > 0.5 - conv::TIE_EPS {
                                want_mask |= 1 << j;
                            }
                        }
                        let m = if (rlo..rhi).contains(&row) {
                            masks[row]
                        } else {
                            0
                        };
                        assert_eq!(m, want_mask, "table {} kq {kq} row {row} ties", t.name);
                    }
                }
            }
        }
    }
}

#[test]
fn first_near_tie_matches_portable() {
    // Sums in [-256, 256): with mult 0.5 odd ones are exact ties, with 1/3 none is.
    let acc: Vec<i32> = rand_bytes(4 * 700, 77)
        .chunks_exact(4)
        .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) >> 23)
        .collect();
    let even: Vec<i32> = acc.iter().map(|&a| a & !1).collect();
    let p = &table::PORTABLE;
    for t in tables() {
        let f = t.quant.first_near_tie;
        for (a, mult) in [
            (&acc, 0.5f32),
            (&even, 0.5),
            (&acc, 1.0 / 3.0),
            (&acc, 5e-4),
        ] {
            for (lo, hi, zp) in [(0u8, 255u8, 128i32), (20, 200, 0)] {
                let b = body::bounds(lo, hi, zp);
                for start in [0usize, 1, 63, 64, 65, 699] {
                    let (x, bias) = (&a[start..], 37);
                    let want = (p.first_near_tie)(x, bias, mult, b, conv::TIE_EPS);
                    let got = f(x, bias, mult, b, conv::TIE_EPS);
                    assert_eq!(got, want, "table {} mult {mult} start {start}", t.name);
                }
            }
        }
        let b = body::bounds(0, 255, 128);
        assert_eq!(f(&even, 0, 0.5, b, conv::TIE_EPS), even.len());
        assert!(f(&acc, 0, 0.5, b, conv::TIE_EPS) < acc.len());
    }
}

#[test]
fn requant_near_tie_matches_portable() {
    // Sums in [-256, 256) (ties with mult 0.5) and wide ones (clamped), every tail length.
    let acc: Vec<i32> = rand_bytes(4 * 300, 78)
        .chunks_exact(4)
        .enumerate()
        .map(|(i, b)| {
            i32::from_le_bytes([b[0], b[1], b[2], b[3]]) >> (if i % 7 == 0 { 8 } else { 23 })
        })
        .collect();
    let even: Vec<i32> = acc.iter().map(|&a| a & !1).collect();
    let p = &table::PORTABLE;
    for t in tables() {
        let f = t.quant.requant_near_tie;
        for (a, mult) in [
            (&acc, 0.5f32),
            (&even, 0.5),
            (&acc, 1.0 / 3.0),
            (&acc, 5e-4),
        ] {
            for (lo, hi, zp) in [(0u8, 255u8, 128i32), (20, 200, 0), (0, 255, 3)] {
                for len in [0usize, 1, 15, 16, 17, 31, 33, 64, 100, 300] {
                    let x = &a[a.len() - len..];
                    let (mut want, mut got) = (vec![0u8; len], vec![7u8; len]);
                    let i =
                        (p.requant_near_tie)(x, -41, mult, zp, lo, hi, conv::TIE_EPS, &mut want);
                    let j = f(x, -41, mult, zp, lo, hi, conv::TIE_EPS, &mut got);
                    assert_eq!(
                        (j, &got),
                        (i, &want),
                        "table {} mult {mult} len {len}",
                        t.name
                    );
                    let mut plain = vec![0u8; len];
                    (t.quant.requant_scalar)(x, -41, mult, zp, lo, hi, &mut plain);
                    assert_eq!(plain, want, "requant_scalar, table {} len {len}", t.name);
                }
            }
        }
        let mut out = vec![0u8; even.len()];
        assert_eq!(
            f(&even, 0, 0.5, 128, 0, 255, conv::TIE_EPS, &mut out),
            even.len()
        );
    }
}

/// Rows as the slices `scatter_quads` takes.
fn src_rows(rows: &[Vec<u8>]) -> Vec<&[u8]> {
    rows.iter().map(|r| &r[..]).collect()
}

#[test]
fn ref_chains_match_mul_add() {
    let stride = 203;
    let len = body::REF_LANES * stride;
    let x: Vec<f32> = rand_i8(len, 91)
        .iter()
        .map(|&v| v as f32 * 0.0173)
        .collect();
    let w: Vec<f32> = rand_i8(len, 92)
        .iter()
        .map(|&v| v as f32 * 0.0031)
        .collect();
    for t in tables() {
        for steps in [0usize, 1, 5, 8, 13, 128, 200, 203] {
            let mut want = [0.25f32; body::REF_LANES];
            for s in 0..steps {
                for (l, c) in want.iter_mut().enumerate() {
                    let i = l * stride + s;
                    *c = x[i].mul_add(w[i], *c);
                }
            }
            let mut got = [0.25f32; body::REF_LANES];
            // The last lane's operands end at its last step.
            let n = (body::REF_LANES - 1) * stride + steps;
            (t.quant.ref_chains)(&x[..n], &w[..n], stride, steps, &mut got);
            assert_eq!(
                got.map(f32::to_bits),
                want.map(f32::to_bits),
                "table {} steps {steps}",
                t.name
            );
        }
    }
}

#[test]
fn ref_gather_matches_definition() {
    let x: Vec<u8> = rand_i8(300, 93).iter().map(|&v| v as u8).collect();
    // Taps in any order, up to the last byte (whose dword would pass the end).
    let taps: Vec<u32> = (0..77u32)
        .map(|i| (i * 37) % 300)
        .chain([299, 298, 297, 296, 0, 1])
        .collect();
    for t in tables() {
        for n in [0usize, 1, 15, 16, 17, 40, taps.len()] {
            // The first n taps, and the last n (the end of the input among them).
            for lo in [0, taps.len() - n] {
                let taps = &taps[lo..lo + n];
                let want: Vec<u32> = taps
                    .iter()
                    .map(|&p| ((i32::from(x[p as usize]) - 131) as f32 * 0.0371).to_bits())
                    .collect();
                let mut got = vec![f32::NAN; taps.len()];
                (t.quant.ref_gather)(&x, taps, 131, 0.0371, &mut got);
                let got: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
                assert_eq!(got, want, "table {} taps {}", t.name, taps.len());
            }
        }
        // A tap past the input is refused, not read.
        let r = std::panic::catch_unwind(|| {
            let mut out = [0f32; 16];
            (t.quant.ref_gather)(&x[..100], &[100; 16], 0, 1.0, &mut out);
        });
        assert!(r.is_err(), "table {}: tap past the input", t.name);
    }
}

/// Every output of one table over the edge sizes, as exact f32s (i32 split in halves).
fn twin_outputs(t: &'static KernelTable) -> Vec<f32> {
    let mut v = Vec::new();
    let push8 = |v: &mut Vec<f32>, x: &[u8]| v.extend(x.iter().map(|&b| b as f32));
    let push32 = |v: &mut Vec<f32>, x: &[i32]| {
        for &a in x {
            v.push((a >> 16) as f32);
            v.push((a & 0xffff) as f32);
        }
    };
    for (i, s) in conv_cases().iter().enumerate() {
        let (a, b, c) = run_conv(t, s, 500 + i as u64);
        push8(&mut v, &a);
        push32(&mut v, &b);
        push8(&mut v, &c);
    }
    for (i, &c) in GEMM_CASES.iter().enumerate() {
        let (a, b) = run_gemm(t, c, 600 + i as u64);
        push8(&mut v, &a);
        push32(&mut v, &b);
    }
    // Both layouts on every table, over the edge sizes of both tile geometries.
    for lay in [QLayout::Pairs, QLayout::Quads] {
        for (i, s) in edge_conv_cases().iter().enumerate() {
            let (a, b, c) = run_conv_in(t, lay, s, 700 + i as u64);
            push8(&mut v, &a);
            push32(&mut v, &b);
            push8(&mut v, &c);
        }
        for (i, c) in edge_gemm_cases().into_iter().enumerate() {
            let (a, b) = run_gemm_in(t, lay, c, 800 + i as u64);
            push8(&mut v, &a);
            push32(&mut v, &b);
        }
    }
    for n in [1, 5, 8, 31, 32, 33, 100] {
        for o in run_add(t, n) {
            push8(&mut v, &o);
        }
        let mut xs: Vec<f32> = crate::kernels::testutil::rand_vec(n * 3, 9)
            .iter()
            .map(|x| x * 9.0)
            .collect();
        // Ties, saturation and NaN.
        let special = [
            0.035f32,
            -0.105,
            1e9,
            -1e9,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
        ];
        for (d, s) in xs.iter_mut().step_by(3).zip(special) {
            *d = s;
        }
        let mut q = vec![0u8; xs.len()];
        quantize_f32(t.isa, &xs, 0.07, 121, &mut q);
        push8(&mut v, &q);
        let mut d = vec![0f32; q.len()];
        dequantize_u8(t.isa, &q, 0.07, 121, &mut d);
        v.extend(d);
    }
    let s = pool_shape((9, 10), 3, 2, 1, false);
    let x = rand_bytes(s.planes * s.h * s.w, 3);
    let mut y = vec![0u8; s.planes * s.oh * s.ow];
    maxpool_u8(t.isa, &s, &x, &mut y, 0, s.planes);
    push8(&mut v, &y);
    v
}

crate::kernels::isa::twin_test!(quant_tables_match_portable, 0.0, twin_outputs);

/// The float QDQ reference of a conv written out: f32 dequantised operands; with
/// several output channels per group one FMA chain per block of K values (MLAS SGEMM:
/// 128, or 256 / 512 / 1024 when the output plane has at most 64 / 32 / 16 pixels and
/// fewer pixels than K values), the chains summed in order; with one (depthwise) the
/// rounded products summed four at a time into the total (MLAS's one-row SGEMM), a last
/// pair, a last one; then the bias, then QuantizeLinear.
#[allow(clippy::too_many_arguments)]
fn ref_float_conv(
    s: &ConvShape,
    x: &[u8],
    (xs, xz): (f32, u8),
    w: &[i8],
    ws: &[f32],
    bias: &[i32],
    (ys, yz): (f32, u8),
) -> Vec<u8> {
    ref_float_values(s, x, (xs, xz), w, ws, bias)
        .iter()
        .map(|&v| ref_quantize(v, ys, yz))
        .collect()
}

/// The float reference's values before QuantizeLinear (see [`ref_float_conv`]).
fn ref_float_values(
    s: &ConvShape,
    x: &[u8],
    (xs, xz): (f32, u8),
    w: &[i8],
    ws: &[f32],
    bias: &[i32],
) -> Vec<f32> {
    let (cig, mg) = (s.cin_g(), s.cout_g());
    let (n, k) = (s.oh * s.ow, s.k());
    let block = match n {
        _ if n >= k => 128,
        0..=16 => 1024,
        17..=32 => 512,
        33..=64 => 256,
        _ => 128,
    };
    let mut y = vec![0f32; s.c_out * s.oh * s.ow];
    for co in 0..s.c_out {
        let g = co / mg;
        for oy in 0..s.oh {
            for ox in 0..s.ow {
                let (mut total, mut chain, mut p) = (0f32, 0f32, 0usize);
                let mut prods = Vec::new();
                for ci in 0..cig {
                    for ky in 0..s.kh {
                        for kx in 0..s.kw {
                            let iy = (oy * s.sh + ky * s.dh) as isize - s.ph as isize;
                            let ix = (ox * s.sw + kx * s.dw) as isize - s.pw as isize;
                            let inside =
                                iy >= 0 && ix >= 0 && iy < s.h as isize && ix < s.w as isize;
                            let xv = if inside {
                                let q = x[((g * cig + ci) * s.h + iy as usize) * s.w + ix as usize];
                                ref_dequantize(q, xs, xz)
                            } else {
                                0.0
                            };
                            let wv = w[((co * cig + ci) * s.kh + ky) * s.kw + kx] as f32 * ws[co];
                            p += 1;
                            if mg == 1 {
                                prods.push(xv * wv);
                                continue;
                            }
                            chain = xv.mul_add(wv, chain);
                            if p % block == 0 || p == k {
                                total = if p <= block { chain } else { total + chain };
                                chain = 0.0;
                            }
                        }
                    }
                }
                if mg == 1 {
                    let mut rest = &prods[..];
                    while let [a, b, c, d, tail @ ..] = rest {
                        total += ((a + b) + c) + d;
                        rest = tail;
                    }
                    if let [a, b, tail @ ..] = rest {
                        total += a + b;
                        rest = tail;
                    }
                    if let [a] = rest {
                        total += a;
                    }
                }
                y[(co * s.oh + oy) * s.ow + ox] = total + bias[co] as f32 * (xs * ws[co]);
            }
        }
    }
    y
}

/// Random u8 input, s8 weights and i32 bias (`seed`, `seed + 1`, `seed + 2`) of a
/// near-tie test conv of shape `s`.
fn tie_case_inputs(s: &ConvShape, seed: u64) -> (Vec<u8>, Vec<i8>, Vec<i32>) {
    let x = rand_bytes(s.c_in * s.h * s.w, seed);
    let w = rand_i8(s.c_out * s.k(), seed + 1);
    let bias = rand_i8(s.c_out, seed + 2)
        .iter()
        .map(|&b| b as i32 * 97)
        .collect();
    (x, w, bias)
}

/// Conv shapes of the near-tie tests: one K block and several (with a short last one),
/// several passes of REF_BLOCK_K steps per block, padding, stride, dilation, groups,
/// depthwise.
fn tie_cases() -> Vec<ConvShape> {
    vec![
        conv_shape((16, 24, 1), (9, 11), (3, 3), (1, 1), (1, 1), (1, 1)),
        conv_shape((64, 8, 1), (7, 7), (3, 3), (2, 2), (1, 1), (1, 1)),
        conv_shape((40, 12, 2), (6, 7), (3, 3), (1, 1), (1, 1), (1, 1)),
        conv_shape((300, 8, 1), (5, 5), (1, 1), (1, 1), (0, 0), (1, 1)),
        conv_shape((300, 8, 1), (6, 9), (1, 1), (1, 1), (0, 0), (1, 1)),
        // Three blocks of 128, 128 and 44 K values.
        conv_shape((300, 16, 1), (12, 12), (1, 1), (1, 1), (0, 0), (1, 1)),
        conv_shape((100, 16, 1), (4, 4), (3, 3), (1, 1), (1, 1), (1, 1)),
        conv_shape((130, 16, 1), (5, 4), (3, 3), (2, 2), (1, 1), (1, 1)),
        conv_shape((48, 48, 48), (19, 23), (3, 3), (1, 1), (1, 1), (1, 1)),
        conv_shape((40, 40, 40), (60, 37), (3, 3), (2, 2), (1, 1), (1, 1)),
        conv_shape((24, 24, 24), (9, 10), (5, 5), (1, 1), (2, 2), (1, 1)),
        conv_shape((24, 8, 8), (9, 10), (3, 3), (1, 1), (1, 1), (1, 1)),
        conv_shape((64, 16, 1), (9, 9), (1, 1), (2, 2), (0, 0), (1, 1)),
        conv_shape((32, 8, 1), (6, 6), (1, 1), (1, 1), (1, 1), (1, 1)),
        conv_shape((16, 8, 1), (11, 11), (3, 3), (1, 1), (2, 2), (2, 2)),
        conv_shape((64, 32, 1), (9, 9), (5, 5), (1, 1), (2, 2), (1, 1)),
    ]
}

// The near-tie reference values of every output (settled all together, so that the
// FMA chains of many near-ties' K blocks share passes) against the float reference's,
// bit for bit: one K block, several (with a short last one), several passes of REF_BLOCK_K
// steps per block, padding, stride, groups, depthwise.
#[test]
fn float_ties_values_match_the_reference_bit_for_bit() {
    let cases = tie_cases();
    let (xs, xz, ys) = (0.0213f32, 117u8, 0.37f32);
    for (ci, s) in cases.iter().enumerate() {
        let seed = 700 + ci as u64;
        let (x, w, bias) = tie_case_inputs(s, seed);
        let ws: Vec<f32> = (0..s.c_out).map(|c| 0.0011 + c as f32 * 1.7e-5).collect();
        let want = ref_float_values(s, &x, (xs, xz), &w, &ws, &bias);
        let ties = FloatTies::new(s, &w, &ws, Some(&bias), xs, ys);
        let (ohw, cig, mg) = (s.oh * s.ow, s.cin_g(), s.cout_g());
        for t in tables() {
            let mut got = vec![f32::NAN; want.len()];
            for g in 0..s.group {
                let xg = &x[g * cig * s.h * s.w..(g + 1) * cig * s.h * s.w];
                let all: Vec<(usize, usize)> = (g * mg..(g + 1) * mg)
                    .flat_map(|c| (0..ohw).map(move |j| (c, j)))
                    .collect();
                ties.settle(t.quant, s, (xg, xz), &all, |i, v| {
                    got[all[i].0 * ohw + all[i].1] = v;
                });
            }
            for (i, (&g, &v)) in got.iter().zip(&want).enumerate() {
                assert_eq!(
                    g.to_bits(),
                    (v / ys).to_bits(),
                    "case {ci} {s:?} table {} output {i}",
                    t.name
                );
            }
        }
    }
}

// A batch of near-ties fed more than it holds settles as it goes: every output of a conv
// pushed through one `TieBatch` lands requantised from its own reference value.
#[test]
fn tie_batch_settles_every_push() {
    let s = &tie_cases()[5];
    let (xs, xz, ys, yz) = (0.0213f32, 117u8, 0.37f32, 121u8);
    let x = rand_bytes(s.c_in * s.h * s.w, 900);
    let w = rand_i8(s.c_out * s.k(), 901);
    let ws: Vec<f32> = (0..s.c_out).map(|c| 0.0011 + c as f32 * 1.7e-5).collect();
    let ties = FloatTies::new(s, &w, &ws, None, xs, ys);
    let ohw = s.oh * s.ow;
    let (mult, bias) = (vec![1.0f32; s.c_out], vec![0i32; s.c_out]);
    let rq = Requant {
        mult: &mult,
        bias: &bias,
        y_zp: yz as i32,
        lo: 0,
        hi: 255,
    };
    let want = ref_float_conv(s, &x, (xs, xz), &w, &ws, &vec![0; s.c_out], (ys, yz));
    for t in tables() {
        let mut got = vec![0u8; want.len()];
        let mut batch = conv::TieBatch::new();
        for i in 0..s.c_out * ohw {
            let tie = ((i / ohw, i % ohw), i);
            batch.push((&ties, t.quant, s), (&x, xz), &rq, tie, &mut got);
        }
        batch.settle((&ties, t.quant, s), (&x, xz), &rq, &mut got);
        assert_eq!(got, want, "table {}", t.name);
    }
}

#[test]
fn qconv_ties_round_like_the_float_reference() {
    let cases = tie_cases();
    let (xs, xz, ys, yz) = (0.0213f32, 117u8, 0.37f32, 121u8);
    let mut settled = 0;
    for (ci, s) in cases.iter().enumerate() {
        let seed = 500 + ci as u64;
        let (x, w, bias) = tie_case_inputs(s, seed);
        // Each channel's scale puts one of its outputs on a rounding boundary in exact
        // arithmetic, so that the f32 noise of each side decides it.
        let acc = ref_conv_acc(s, &x, xz, &w, &bias);
        let ws: Vec<f32> = (0..s.c_out)
            .map(|c| {
                let ws = 0.0011 + c as f32 * 1.7e-5;
                let ohw = s.oh * s.ow;
                let a = acc[c * ohw + (c * 7) % ohw];
                if a == 0 {
                    return ws;
                }
                let m = (a as f64 * f64::from(xs * ws) / f64::from(ys)).floor();
                ((m + 0.5) * f64::from(ys) / (a as f64 * f64::from(xs))) as f32
            })
            .collect();
        let want = ref_float_conv(s, &x, (xs, xz), &w, &ws, &bias, (ys, yz));
        // Both packed layouts: K pairs, and K quads (each tile requantised in place).
        for lay in [QLayout::Pairs, QLayout::Quads] {
            let pw = QConvWeights::pack(lay, &w, s.c_out, s.cin_g(), s.kh, s.kw, s.group);
            let fb = pw.fold_bias(Some(&bias), xz);
            let mult: Vec<f32> = ws.iter().map(|&v| xs * v / ys).collect();
            let rq = Requant {
                mult: &mult,
                bias: &fb,
                y_zp: yz as i32,
                lo: 0,
                hi: 255,
            };
            let ties = FloatTies::new(s, &w, &ws, Some(&bias), xs, ys);
            for t in tables() {
                let mut sc = QScratch::new();
                let (mut plain, mut got) = (vec![0u8; want.len()], vec![0u8; want.len()]);
                qconv_u8(
                    t.isa,
                    s,
                    &x,
                    xz,
                    &pw,
                    &rq,
                    &mut plain,
                    (0, s.c_out),
                    &mut sc,
                );
                let chans = (0, s.c_out);
                qconv_u8_ties(t.isa, s, &x, xz, &pw, &rq, &ties, &mut got, chans, &mut sc);
                assert_eq!(got, want, "case {ci} {s:?} {lay:?} table {}", t.name);
                settled += plain.iter().zip(&got).filter(|(a, b)| a != b).count();
            }
        }
    }
    println!("near-ties settled differently from the plain requantisation: {settled}");
    assert!(
        settled > 0,
        "the cases hold near-ties the plain path rounds otherwise"
    );
}

/// The u8 max pool of every table against the window maximum taken tap by tap, over
/// kernels, strides, dilations, pads and rows of more than one 64-byte vector (windows
/// in padding give 0).
#[test]
fn separable_maxpool_matches_taps() {
    for (h, w, k, st, d, pad) in [
        (9usize, 10usize, 3usize, 2usize, 1usize, 1usize),
        (7, 7, 5, 1, 1, 2),
        (8, 11, 3, 1, 2, 2),
        (6, 5, 2, 2, 1, 0),
        (5, 13, 13, 1, 1, 6),
        (4, 4, 1, 1, 1, 0),
        (6, 112, 3, 2, 1, 1),
        (5, 130, 5, 1, 1, 2),
        (4, 67, 2, 2, 1, 0),
    ] {
        let oh = (h + 2 * pad - d * (k - 1) - 1) / st + 1;
        let ow = (w + 2 * pad - d * (k - 1) - 1) / st + 1;
        let s = PoolShape {
            planes: 1,
            h,
            w,
            oh,
            ow,
            kh: k,
            kw: k,
            sh: st,
            sw: st,
            dh: d,
            dw: d,
            pads: [pad; 4],
        };
        let x = rand_bytes(h * w, 5);
        let mut want = vec![0u8; oh * ow];
        for (i, m) in want.iter_mut().enumerate() {
            let (oy, ox) = (i / ow, i % ow);
            for ky in 0..k {
                for kx in 0..k {
                    let iy = (oy * st + ky * d) as isize - pad as isize;
                    let ix = (ox * st + kx * d) as isize - pad as isize;
                    if (0..h as isize).contains(&iy) && (0..w as isize).contains(&ix) {
                        *m = (*m).max(x[iy as usize * w + ix as usize]);
                    }
                }
            }
        }
        for t in tables() {
            let mut y = vec![0xAAu8; oh * ow];
            (t.quant.max_pool_plane)(&s, &x, &mut y);
            let what = format!("{h}x{w} k{k} s{st} d{d} p{pad}, table {}", t.name);
            assert_eq!(y, want, "{what}");
        }
    }
}
