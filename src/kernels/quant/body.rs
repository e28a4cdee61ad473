//! Generic int8 kernel bodies: the plain-Rust code the portable table uses as is and the
//! AVX2 table compiles inside `#[target_feature]` functions (or replaces by intrinsics
//! giving the same bits).
//!
//! Rounding mirrors onnxruntime (MLAS): a value is scaled in f32, clamped to
//! `[lo - zp, hi - zp]` (a NaN becomes the lower bound, as `maxps` does), rounded half
//! to even and shifted by the zero point. Integer sums wrap like the SIMD adds.

use super::table::{ConvOps, QuadOffsets, TileDst, Q4MR, Q4NR, QMR, QNR};
use crate::ir::QParam;
use crate::kernels::body::pool::{valid_range, PoolShape};

/// `x` clamped to `[minv, maxv]` the way `maxps(x, minv)` then `minps(x, maxv)` do (a NaN
/// gives `minv`), rounded half to even, plus `zp`.
#[inline(always)]
pub fn clamp_round(v: f32, minv: f32, maxv: f32, zp: i32) -> u8 {
    let v = if v > minv { v } else { minv };
    let v = if v < maxv { v } else { maxv };
    (v.round_ties_even() as i32 + zp) as u8
}

/// Bounds `(lo - zp, hi - zp)` as floats, for [`clamp_round`].
#[inline(always)]
pub fn bounds(lo: u8, hi: u8, zp: i32) -> (f32, f32) {
    ((lo as i32 - zp) as f32, (hi as i32 - zp) as f32)
}

/// One requantised output: `clamp(rne((acc + bias) * mult) + zp, lo, hi)`.
#[inline(always)]
pub fn requant_one(acc: i32, bias: i32, mult: f32, zp: i32, lo: u8, hi: u8) -> u8 {
    let (minv, maxv) = bounds(lo, hi, zp);
    clamp_round(acc.wrapping_add(bias) as f32 * mult, minv, maxv, zp)
}

/// One quantised value: `clamp(rne(x / scale) + zp, 0, 255)` (QuantizeLinear).
#[inline(always)]
pub fn quantize_one(x: f32, scale: f32, zp: u8) -> u8 {
    let (minv, maxv) = bounds(0, 255, zp as i32);
    clamp_round(x / scale, minv, maxv, zp as i32)
}

/// One dequantised value: `(x - zp) * scale` (DequantizeLinear).
#[inline(always)]
pub fn dequantize_one(x: u8, scale: f32, zp: u8) -> f32 {
    (x as i32 - zp as i32) as f32 * scale
}

/// `saturate(round_half_even(x / scale) + zp)` into `[lo, hi]`, as onnxruntime's
/// QuantizeLinear computes it (division and rounding in f32); NaN gives the zero point.
#[inline]
pub fn quantize_to(x: f32, scale: f32, zp: i32, lo: f32, hi: f32) -> f32 {
    let v = (x / scale).round_ties_even() + zp as f32;
    if v.is_nan() {
        zp as f32
    } else {
        v.clamp(lo, hi)
    }
}

/// One QMul output: `a` and `b` dequantised, multiplied in f32, quantised to `y`
/// (the rule of the QMul plan's table and of the SiLU fusion's).
pub fn qmul_one(a: u8, b: u8, pa: QParam, pb: QParam, y: QParam) -> u8 {
    let v = dequantize_one(a, pa.scale, pa.zp) * dequantize_one(b, pb.scale, pb.zp);
    quantize_to(v, y.scale, i32::from(y.zp), 0.0, 255.0) as u8
}

/// The int8 GEMM micro-tile (see `QuantTable::tile`).
#[inline(always)]
pub fn tile(kp: usize, a: &[i16], b: &[i16], c: &mut [i32], ldc: usize) {
    assert!(a.len() >= kp * QMR * 2 && b.len() >= kp * QNR * 2);
    assert!(ldc >= QNR && c.len() >= (QMR - 1) * ldc + QNR);
    let mut t = [[0i32; QNR]; QMR];
    for (ap, bp) in a
        .chunks_exact(QMR * 2)
        .zip(b.chunks_exact(QNR * 2))
        .take(kp)
    {
        for (r, row) in t.iter_mut().enumerate() {
            let (a0, a1) = (ap[2 * r] as i32, ap[2 * r + 1] as i32);
            for (d, bb) in row.iter_mut().zip(bp.chunks_exact(2)) {
                let s = a0
                    .wrapping_mul(bb[0] as i32)
                    .wrapping_add(a1.wrapping_mul(bb[1] as i32));
                *d = d.wrapping_add(s);
            }
        }
    }
    for (r, row) in t.iter().enumerate() {
        c[r * ldc..r * ldc + QNR].copy_from_slice(row);
    }
}

/// The int8 quad micro-tile (see `QuantTable::quad_tile_su` / `quad_tile_us`): one
/// operand u8, the other s8, every product exact and summed in wrapping i32.
#[inline(always)]
pub fn quad_tile<A: Copy + Into<i32>, B: Copy + Into<i32>>(
    kq: usize,
    a: &[A],
    b: &[B],
    c: &mut [i32],
    ldc: usize,
) {
    assert!(a.len() >= kq * Q4MR * 4 && b.len() >= kq * Q4NR * 4);
    assert!(ldc >= Q4NR && c.len() >= (Q4MR - 1) * ldc + Q4NR);
    let mut t = [[0i32; Q4NR]; Q4MR];
    for (aq, bq) in a
        .chunks_exact(Q4MR * 4)
        .zip(b.chunks_exact(Q4NR * 4))
        .take(kq)
    {
        for (row, ar) in t.iter_mut().zip(aq.chunks_exact(4)) {
            for (d, bc) in row.iter_mut().zip(bq.chunks_exact(4)) {
                let s = ar
                    .iter()
                    .zip(bc)
                    .fold(0i32, |s, (&x, &y)| s.wrapping_add(x.into() * y.into()));
                *d = d.wrapping_add(s);
            }
        }
    }
    for (r, row) in t.iter().enumerate() {
        c[r * ldc..r * ldc + Q4NR].copy_from_slice(row);
    }
}

/// The conv quad micro-tile with B quads at offsets (see `QuantTable::quad_tile_su`).
#[inline(always)]
pub fn quad_tile_at(
    kq: usize,
    a: &[i8],
    b: &[u8],
    at: &QuadOffsets<'_>,
    c: &mut [i32],
    ldc: usize,
) {
    assert!(a.len() >= kq * Q4MR * 4);
    at.check(kq, b.len());
    assert!(ldc >= Q4NR && c.len() >= (Q4MR - 1) * ldc + Q4NR);
    let mut t = [[0i32; Q4NR]; Q4MR];
    for (q, aq) in a.chunks_exact(Q4MR * 4).take(kq).enumerate() {
        let bq = &b[at.at(q)..at.at(q) + Q4NR * 4];
        for (row, ar) in t.iter_mut().zip(aq.chunks_exact(4)) {
            for (d, bc) in row.iter_mut().zip(bq.chunks_exact(4)) {
                let s = ar.iter().zip(bc).fold(0i32, |s, (&x, &y)| {
                    s.wrapping_add(i32::from(x) * i32::from(y))
                });
                *d = d.wrapping_add(s);
            }
        }
    }
    for (r, row) in t.iter().enumerate() {
        c[r * ldc..r * ldc + Q4NR].copy_from_slice(row);
    }
}

/// `y[i] = table[x[i]]` (see `QuantTable::lut`).
#[inline(always)]
pub fn lut(table: &[u8; 256], x: &[u8], y: &mut [u8]) {
    assert_eq!(x.len(), y.len(), "lut: lengths");
    for (o, &v) in y.iter_mut().zip(x) {
        *o = table[usize::from(v)];
    }
}

/// A u8 softmax over blocks of `len` rows of `inner` lanes (see
/// `QuantTable::softmax_block`): input and output quantisations, and the terms table
/// (`exps[m * 256 + q] = exp(v(q) - v(m))` for the input's dequantisation `v`) when the
/// plan built one.
#[derive(Debug, Clone, Copy)]
pub struct SoftmaxParams<'a> {
    /// Values per lane (the softmax axis).
    pub len: usize,
    /// Lanes, and the distance between a lane's values.
    pub inner: usize,
    /// Input quantisation.
    pub qx: QParam,
    /// Output quantisation.
    pub qy: QParam,
    /// The terms table (65536 entries), or `None`: terms computed.
    pub exps: Option<&'a [f32]>,
}

/// One softmax lane: `len` u8 values `inner` apart from `x[0]` into `y` likewise; its
/// terms from `p.exps` when given, else computed (the dequantised values, the lane's
/// largest subtracted in f32, `exp` in f64 rounded to f32).
pub fn softmax_lane(x: &[u8], y: &mut [u8], p: &SoftmaxParams<'_>) {
    let (len, inner, qx) = (p.len, p.inner, p.qx);
    // The byte of the largest dequantised value (`v` is monotonic in the byte). A NaN
    // scale makes every term NaN, as the direct formula does.
    let (mut lo, mut hi) = (u8::MAX, u8::MIN);
    for i in 0..len {
        lo = lo.min(x[i * inner]);
        hi = hi.max(x[i * inner]);
    }
    let m = if qx.scale >= 0.0 { hi } else { lo };
    let vm = dequantize_one(m, qx.scale, qx.zp);
    let row = p
        .exps
        .map(|e| &e[usize::from(m) * 256..(usize::from(m) + 1) * 256]);
    let term = |q: u8| match row {
        Some(r) => r[usize::from(q)],
        None => f64::from(dequantize_one(q, qx.scale, qx.zp) - vm).exp() as f32,
    };
    let mut sum = 0f32;
    for i in 0..len {
        sum += term(x[i * inner]);
    }
    let inv = 1.0 / sum;
    let (qy, zp) = (p.qy, i32::from(p.qy.zp));
    for i in 0..len {
        let e = term(x[i * inner]);
        y[i * inner] = quantize_to(e * inv, qy.scale, zp, 0.0, 255.0) as u8;
    }
}

/// Every lane of one block (`len * inner` bytes of `x` and `y`), lane by lane.
pub fn softmax_block(p: &SoftmaxParams<'_>, x: &[u8], y: &mut [u8]) {
    softmax_lanes(p, x, y, 0)
}

/// Lanes `j0..inner` of one block, lane by lane.
pub fn softmax_lanes(p: &SoftmaxParams<'_>, x: &[u8], y: &mut [u8], j0: usize) {
    let block = p.len * p.inner;
    assert!(x.len() >= block && y.len() >= block, "softmax: block size");
    if p.len == 0 {
        return;
    }
    for j in j0..p.inner {
        softmax_lane(&x[j..], &mut y[j..], p);
    }
}

/// `dst[i] = src[2 * i]` (see `QuantTable::take_even`).
#[inline(always)]
pub fn take_even(src: &[u8], dst: &mut [u8]) {
    assert!(
        src.len() + 1 >= 2 * dst.len(),
        "take_even: source too short"
    );
    for (i, d) in dst.iter_mut().enumerate() {
        *d = src[2 * i];
    }
}

/// Copies rows (see `QuantTable::copy_rows`).
#[inline(always)]
pub fn copy_rows(src: &[u8], ss: usize, dst: &mut [u8], ds: usize, (rows, len): (usize, usize)) {
    check_rows(src.len(), ss, dst.len(), ds, (rows, len));
    for r in 0..rows {
        dst[r * ds..r * ds + len].copy_from_slice(&src[r * ss..r * ss + len]);
    }
}

/// Panics unless `rows` rows of `len` bytes, `ss` and `ds` apart, lie inside `src_len`
/// and `dst_len` bytes.
pub fn check_rows(
    src_len: usize,
    ss: usize,
    dst_len: usize,
    ds: usize,
    (rows, len): (usize, usize),
) {
    if rows > 0 {
        assert!(
            src_len >= (rows - 1) * ss + len,
            "copy_rows: source too short"
        );
        assert!(
            dst_len >= (rows - 1) * ds + len,
            "copy_rows: destination too short"
        );
    }
}

/// A table's `quad_tile_su`.
pub type ConvTile = fn(usize, &[i8], &[u8], &QuadOffsets<'_>, &mut [i32], usize);

/// [`quad_tile_at`] requantised (see `QuantTable::quad_tile_su_u8`), the tile computed by
/// `tile` (a table's `quad_tile_su`).
#[inline(always)]
pub fn quad_tile_u8_with(
    tile: ConvTile,
    kq: usize,
    (a, b, at): ConvOps<'_>,
    dst: TileDst<'_>,
) -> [u32; Q4MR] {
    dst.check();
    let mut acc = [0i32; Q4MR * Q4NR];
    tile(kq, a, b, at, &mut acc, Q4NR);
    let post = dst.post;
    let (minv, maxv) = bounds(post.lo, post.hi, post.y_zp);
    let mut masks = [0u32; Q4MR];
    for r in dst.lo..dst.hi {
        let row = &acc[r * Q4NR..r * Q4NR + dst.cols];
        let out = &mut dst.out[(r - dst.lo) * dst.ldo..][..dst.cols];
        for (j, (d, &a)) in out.iter_mut().zip(row).enumerate() {
            let v = a.wrapping_add(post.bias[r]) as f32 * post.mult[r];
            *d = clamp_round(v, minv, maxv, post.y_zp);
            let c = v.clamp(minv, maxv);
            if off_round(c) > 0.5 - dst.eps {
                masks[r] |= 1 << j;
            }
        }
    }
    masks
}

/// The portable `quad_tile_su_u8`.
#[inline(always)]
pub fn quad_tile_u8(kq: usize, ops: ConvOps<'_>, dst: TileDst<'_>) -> [u32; Q4MR] {
    quad_tile_u8_with(quad_tile_at, kq, ops, dst)
}

/// Scatters rows `p..p + src.len()` of B (see `QuantTable::scatter_quads`).
#[inline(always)]
pub fn scatter_quads(k: usize, p: usize, src: &[&[u8]], out: &mut [u8]) {
    assert!(p.is_multiple_of(4) && (1..=4).contains(&src.len()) && p < k);
    let panel = k.div_ceil(4) * Q4NR * 4;
    let off = (p / 4) * Q4NR * 4;
    let n = src[0].len();
    assert!(src.iter().all(|r| r.len() == n));
    let full = if src.len() == 4 { n / Q4NR } else { 0 };
    for jp in 0..full {
        // Fixed sizes: the interleave compiles to byte shuffles.
        let row = |r: usize| -> &[u8; Q4NR] {
            src[r][jp * Q4NR..(jp + 1) * Q4NR]
                .try_into()
                .expect("Q4NR bytes")
        };
        let (c0, c1, c2, c3) = (row(0), row(1), row(2), row(3));
        let at = jp * panel + off;
        let dst: &mut [u8; 4 * Q4NR] = (&mut out[at..at + 4 * Q4NR])
            .try_into()
            .expect("4 Q4NR bytes");
        for j in 0..Q4NR {
            dst[4 * j..4 * j + 4].copy_from_slice(&[c0[j], c1[j], c2[j], c3[j]]);
        }
    }
    for (r, row) in src.iter().enumerate() {
        for (j, &v) in row.iter().enumerate().skip(full * Q4NR) {
            out[(j / Q4NR) * panel + off + (j % Q4NR) * 4 + r] = v;
        }
    }
}

/// `(v + ROUND_MAGIC) - ROUND_MAGIC` is `v` rounded half to even for |v| < 2^22, and the
/// low byte of `v + ROUND_MAGIC`'s bits is that integer's (the constant's mantissa ends in
/// a zero byte).
pub const ROUND_MAGIC: f32 = 12_582_912.0;

/// Distance of `v` (|v| < 2^22) from the nearest integer, without a libm call: `v`
/// rounded half to even by the [`ROUND_MAGIC`] trick. A requantised value farther than
/// `0.5 - eps` is a near-tie.
#[inline(always)]
pub fn off_round(v: f32) -> f32 {
    (v - ((v + ROUND_MAGIC) - ROUND_MAGIC)).abs()
}

/// The first `j` whose requantised value `(acc[j] + bias) * mult` (clamped to the
/// output range) lies within `eps` of a rounding boundary, or `acc.len()` (see
/// `QuantTable::first_near_tie`).
#[inline(always)]
pub fn first_near_tie(acc: &[i32], bias: i32, mult: f32, bounds: (f32, f32), eps: f32) -> usize {
    let (minv, maxv) = bounds;
    // `v` clamped to the output range widened by one (so |v| < 2^22). The scan
    // vectorises; the chunk with a near-tie is walked again element by element.
    let off =
        |a: i32| off_round((a.wrapping_add(bias) as f32 * mult).clamp(minv - 1.0, maxv + 1.0));
    let near = 0.5 - eps;
    for (k, chunk) in acc.chunks(64).enumerate() {
        if !chunk.iter().fold(false, |h, &a| h | (off(a) > near)) {
            continue;
        }
        if let Some(i) = chunk.iter().position(|&a| off(a) > near) {
            return k * 64 + i;
        }
    }
    acc.len()
}

/// Requantisation of one channel's outputs and the first near-tie among them (see
/// `QuantTable::requant_near_tie`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn requant_near_tie(
    acc: &[i32],
    bias: i32,
    mult: f32,
    zp: i32,
    lo: u8,
    hi: u8,
    eps: f32,
    out: &mut [u8],
) -> usize {
    requant_scalar(acc, bias, mult, zp, lo, hi, out);
    first_near_tie(acc, bias, mult, bounds(lo, hi, zp), eps)
}

/// Chains of the float reference's dot products run side by side (see
/// `QuantTable::ref_chains`).
pub const REF_LANES: usize = 8;

/// `chains[l] = fma(x[l * stride + s], w[l * stride + s], chains[l])` for every
/// lane `l` and every step `s < steps` in order (see `QuantTable::ref_chains`).
#[inline(always)]
pub fn ref_chains(
    x: &[f32],
    w: &[f32],
    stride: usize,
    steps: usize,
    chains: &mut [f32; REF_LANES],
) {
    check_chains(x, w, stride, steps);
    for s in 0..steps {
        for (l, c) in chains.iter_mut().enumerate() {
            *c = x[l * stride + s].mul_add(w[l * stride + s], *c);
        }
    }
}

/// Panics unless `x` and `w` hold the operands of [`ref_chains`]: [`REF_LANES`] lanes
/// of `steps` values, `stride` apart.
#[inline(always)]
pub fn check_chains(x: &[f32], w: &[f32], stride: usize, steps: usize) {
    let need = (REF_LANES - 1) * stride + steps;
    assert!(
        steps <= stride && x.len() >= need && w.len() >= need,
        "ref_chains: {REF_LANES} lanes of {steps} steps, {stride} apart"
    );
}

/// `out[i] = (x[taps[i]] - zp) * scale` in f32 (see `QuantTable::ref_gather`).
#[inline(always)]
pub fn ref_gather(x: &[u8], taps: &[u32], zp: u8, scale: f32, out: &mut [f32]) {
    assert_eq!(taps.len(), out.len(), "ref_gather: one tap per output");
    for (o, &t) in out.iter_mut().zip(taps) {
        *o = (i32::from(x[t as usize]) - i32::from(zp)) as f32 * scale;
    }
}

/// Requantisation of one channel's outputs (see `QuantTable::requant_scalar`).
#[inline(always)]
pub fn requant_scalar(acc: &[i32], bias: i32, mult: f32, zp: i32, lo: u8, hi: u8, out: &mut [u8]) {
    let (minv, maxv) = bounds(lo, hi, zp);
    for (o, &a) in out.iter_mut().zip(acc) {
        *o = clamp_round(a.wrapping_add(bias) as f32 * mult, minv, maxv, zp);
    }
}

/// Requantisation with one channel per element (see `QuantTable::requant_cols`).
#[inline(always)]
pub fn requant_cols(
    acc: &[i32],
    bias: &[i32],
    mult: &[f32],
    zp: i32,
    lo: u8,
    hi: u8,
    out: &mut [u8],
) {
    let (minv, maxv) = bounds(lo, hi, zp);
    for (((o, &a), &b), &m) in out.iter_mut().zip(acc).zip(bias).zip(mult) {
        *o = clamp_round(a.wrapping_add(b) as f32 * m, minv, maxv, zp);
    }
}

/// QuantizeLinear to u8 (see `QuantTable::quantize`).
#[inline(always)]
pub fn quantize(x: &[f32], scale: f32, zp: u8, out: &mut [u8]) {
    let (minv, maxv) = bounds(0, 255, zp as i32);
    for (o, &v) in out.iter_mut().zip(x) {
        *o = clamp_round(v / scale, minv, maxv, zp as i32);
    }
}

/// DequantizeLinear from u8 (see `QuantTable::dequantize`).
#[inline(always)]
pub fn dequantize(x: &[u8], scale: f32, zp: u8, out: &mut [f32]) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = dequantize_one(v, scale, zp);
    }
}

/// Parameters of the u8 add `y = Q(DQ(a) + DQ(b))` with the output clamped to `[lo, hi]`
/// (a fused ReLU raises `lo` to the zero point).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AddParams {
    /// Scale and zero point of `a`.
    pub a_scale: f32,
    pub a_zp: u8,
    /// Scale and zero point of `b`.
    pub b_scale: f32,
    pub b_zp: u8,
    /// Scale and zero point of the output.
    pub y_scale: f32,
    pub y_zp: u8,
    /// Output clamp (0 and 255 when nothing is fused).
    pub lo: u8,
    pub hi: u8,
}

impl AddParams {
    /// One output from one element of each input: the float QDQ formula, op for op.
    #[inline(always)]
    pub fn one(&self, a: u8, b: u8, minv: f32, maxv: f32) -> u8 {
        let fa = dequantize_one(a, self.a_scale, self.a_zp);
        let fb = dequantize_one(b, self.b_scale, self.b_zp);
        clamp_round((fa + fb) / self.y_scale, minv, maxv, self.y_zp as i32)
    }
}

/// The u8 add (see `QuantTable::qadd`): `b` holds `a.len()` elements, or one that is
/// broadcast.
#[inline(always)]
pub fn qadd(p: &AddParams, a: &[u8], b: &[u8], out: &mut [u8]) {
    let (minv, maxv) = bounds(p.lo, p.hi, p.y_zp as i32);
    assert!(out.len() <= a.len() && (b.len() == 1 || out.len() <= b.len()));
    if b.len() == 1 && out.len() != 1 {
        let bv = b[0];
        for (o, &x) in out.iter_mut().zip(a) {
            *o = p.one(x, bv, minv, maxv);
        }
    } else {
        for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
            *o = p.one(x, y, minv, maxv);
        }
    }
}

/// Outputs accumulated per block in [`dw_taps`] (the block stays in registers / L1).
const DW_BLOCK: usize = 128;

/// Depthwise accumulation (see `QuantTable::dw_taps`): `acc[j] = sum_t w[t] *
/// src[offs[t] + j]` for every `j < acc.len()`.
#[inline(always)]
pub fn dw_taps(offs: &[usize], w: &[i16], src: &[i16], acc: &mut [i32]) {
    let n = acc.len();
    assert!(offs.len() <= w.len() && offs.iter().all(|&o| o + n <= src.len()));
    for (jb, ab) in acc.chunks_mut(DW_BLOCK).enumerate() {
        let (j0, len) = (jb * DW_BLOCK, ab.len());
        let mut t = [0i32; DW_BLOCK];
        for (&o, &wv) in offs.iter().zip(w) {
            let wv = wv as i32;
            for (d, &x) in t[..len].iter_mut().zip(&src[o + j0..o + j0 + len]) {
                *d = d.wrapping_add(wv * x as i32);
            }
        }
        ab.copy_from_slice(&t[..len]);
    }
}

/// Input row bytes the separable max pool keeps on the stack (wider planes take the
/// tap-by-tap path).
const MAXPOOL_ROW: usize = 4096;

/// Max pool of one u8 plane: running maximum over the valid taps (a window wholly in
/// padding gives 0, what quantising `-inf` gives). Separable: per output row, the valid
/// input rows of the window are reduced into one row first (contiguous, vectorised), then
/// the horizontal taps run over that row only; `max` is exact, so this gives the bits of
/// the tap-by-tap order.
#[inline(always)]
pub fn max_pool_plane(s: &PoolShape, xp: &[u8], yp: &mut [u8]) {
    if s.w > MAXPOOL_ROW || s.kh == 1 {
        return max_pool_taps(s, xp, yp);
    }
    let (mut buf, mut split) = ([0u8; MAXPOOL_ROW], [0u8; MAXPOOL_ROW]);
    let tmp = &mut buf[..s.w];
    // Stride-2 rows are split into even and odd columns, so that each tap reads one
    // of them contiguously.
    let half = s.w.div_ceil(2);
    for oy in 0..s.oh {
        tmp.fill(0);
        for ky in 0..s.kh {
            let iy = (oy * s.sh + ky * s.dh) as isize - s.pads[0] as isize;
            if iy < 0 || iy >= s.h as isize {
                continue;
            }
            let src = &xp[iy as usize * s.w..(iy as usize + 1) * s.w];
            for (t, v) in tmp.iter_mut().zip(src) {
                *t = (*t).max(*v);
            }
        }
        let row = &mut yp[oy * s.ow..(oy + 1) * s.ow];
        row.fill(0);
        if s.sw == 2 {
            let (even, odd) = split.split_at_mut(half);
            for (j, pair) in tmp.chunks_exact(2).enumerate() {
                even[j] = pair[0];
                odd[j] = pair[1];
            }
            if s.w % 2 == 1 {
                even[half - 1] = tmp[s.w - 1];
            }
        }
        for kx in 0..s.kw {
            let (lo, hi) = valid_range(s.ow, s.sw, s.pads[1], kx * s.dw, s.w);
            if lo >= hi {
                continue;
            }
            let ix0 = lo * s.sw + kx * s.dw - s.pads[1];
            if s.sw == 2 {
                let src = &split[(ix0 % 2) * half + ix0 / 2..];
                for (d, v) in row[lo..hi].iter_mut().zip(src) {
                    *d = (*d).max(*v);
                }
                continue;
            }
            for (d, v) in row[lo..hi].iter_mut().zip(tmp[ix0..].iter().step_by(s.sw)) {
                *d = (*d).max(*v);
            }
        }
    }
}

/// [`max_pool_plane`] tap by tap (planes wider than [`MAXPOOL_ROW`], one-row kernels).
#[inline(always)]
fn max_pool_taps(s: &PoolShape, xp: &[u8], yp: &mut [u8]) {
    for oy in 0..s.oh {
        let row = &mut yp[oy * s.ow..(oy + 1) * s.ow];
        row.fill(0);
        for ky in 0..s.kh {
            let iy = (oy * s.sh + ky * s.dh) as isize - s.pads[0] as isize;
            if iy < 0 || iy >= s.h as isize {
                continue;
            }
            let src = &xp[iy as usize * s.w..(iy as usize + 1) * s.w];
            for kx in 0..s.kw {
                let (lo, hi) = valid_range(s.ow, s.sw, s.pads[1], kx * s.dw, s.w);
                if lo >= hi {
                    continue;
                }
                let ix0 = lo * s.sw + kx * s.dw - s.pads[1];
                for (d, v) in row[lo..hi].iter_mut().zip(src[ix0..].iter().step_by(s.sw)) {
                    *d = (*d).max(*v);
                }
            }
        }
    }
}
