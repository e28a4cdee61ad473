//! AVX2+FMA and AVX-512 depthwise conv over channels-last images (table entry
//! `depthwise_nhwc` of the AVX2 and AVX-512 tables; see `kernels::body::dw_nhwc`), one
//! body generic over the vector ([`Lanes`]: 8 lanes, or 16 with AVX-512, whose table runs
//! its whole 16-channel vectors on 16 lanes and the rest on 8). Per output row and
//! channel vector, the columns whose taps all lie inside the row run 8 pixels at a time
//! (eight independent FMA chains, one tap vector load per eight FMAs; at stride 1 with 3
//! or 5 taps a row, 6 or 5 pixels whose row inputs are loaded once), border columns one
//! pixel at a time with their taps checked, four channel vectors together (four
//! independent chains: one vector alone waits on each FMA's latency; on Zen 3,
//! MobileNetV2's 14x14 and 7x7 depthwise convs 48-50 -> 39-41 and 43-45 -> 34-37 us, the
//! MobileNetV3 DBNet's 5x5 ones at 20x20 -10 to -24 %); the channels past the last full
//! vector go through `body::dw_nhwc::pixel_fused`, whose `mul_add` lanes give the same
//! bits as the vector lanes (every lane is the same chain of FMAs whatever the width).
//! With AVX-512, undilated 3x3 and 5x5 convs on images up to [`NARROW`] wide (and wider
//! ones of many channels at stride 1) run
//! channel vectors outer instead ([`rows_in_registers`]): a vector's taps stay in
//! registers along the row, and a block of vectors' input rows in L1 from one output row
//! to the next.
//!
//! The entries are reachable only through the tables `super::x86_64_fma::table` and
//! `super::x86_64_avx512::table` hand out after detecting AVX2 and FMA (and AVX-512F).

use crate::kernels::body::conv::ConvShape;
use crate::kernels::body::dw_nhwc::{assert_fits, inner_columns, pixel_fused, row_taps, Act};
use std::arch::x86_64::*;

/// Output pixels accumulated together (independent FMA chains).
const PIXELS: usize = 8;
/// Channel vectors a border pixel accumulates together (independent FMA chains).
const BORDER_VECS: usize = 4;
/// Input widths up to which [`rows_in_registers`] runs the conv.
const NARROW: usize = 32;
/// Fewest channels of a stride-1 conv wider than [`NARROW`] that [`rows_in_registers`]
/// runs on a core that loads one 512-bit vector a cycle (`isa::one_wide_load_per_cycle`:
/// with more vectors per pixel, the pixel groups' order costs more than reading the input
/// rows once per channel block; cores that load two keep the groups' order there: Emerald
/// Rapids, `dw_bench` nhwc, 144@56 301 us in registers against 204 in groups). Zen 4,
/// `dw_bench` nhwc column, group order -> registers order: 144@56 156 -> 137 us, but
/// 32@112 128 -> 143 and the 5x5 64@80 221 -> 251; MobileNetV2's fused expansion + depthwise at 56x56x144 (four blocks, `vnpu
/// perf`) 2.60 -> 2.46 ms. At stride 2 the registers' order was slower (its 112x112x96
/// block 0.96 -> 1.01 ms). (A test of the kernel side in this condition compiled the
/// loops 4 % slower.)
const WIDE_MIN_C: usize = 128;
/// Input columns a tap row of [`pixels_in_registers`] reads at most: [`PIXELS`] pixels
/// at stride 2 with 5 taps.
const WINDOW_MAX: usize = (PIXELS - 1) * 2 + 5;
/// Bytes of input rows a channel block of [`rows_in_registers`] keeps in L1.
const BLOCK_BYTES: usize = 24 << 10;

/// Output rows `r0..r1` of a channels-last depthwise conv (see `KernelTable::
/// depthwise_nhwc`), AVX2 vectors.
#[allow(clippy::too_many_arguments)]
pub(super) fn depthwise_nhwc(
    s: &ConvShape,
    taps: &[f32],
    bias: &[f32],
    act: Act,
    x: &[f32],
    y: &mut [f32],
    r0: usize,
    r1: usize,
) {
    assert_fits(s, taps, bias, x, y, (r0, r1));
    // SAFETY: reachable only through tables handed out after detecting AVX2 and FMA;
    // every access in `run` stays inside the slices `assert_fits` checked.
    unsafe { run_avx2(s, taps, bias, act, x, y, (r0, r1), (0, s.c_in)) };
}

/// [`depthwise_nhwc`] with AVX-512: the whole 16-channel vectors on 16 lanes, the
/// channels past them on 8 (the same sums in the same order, so the same bits).
#[allow(clippy::too_many_arguments)]
pub(super) fn depthwise_nhwc_512(
    s: &ConvShape,
    taps: &[f32],
    bias: &[f32],
    act: Act,
    x: &[f32],
    y: &mut [f32],
    r0: usize,
    r1: usize,
) {
    let order = Order {
        wide_in_registers: super::one_wide_load_per_cycle(),
    };
    run_512_ordered(s, taps, bias, act, x, y, (r0, r1), order);
}

/// Which loop order the AVX-512 kernel may take where either gives the same bits.
#[derive(Clone, Copy)]
struct Order {
    /// Stride-1 images wider than [`NARROW`] of [`WIDE_MIN_C`] channels or more run in
    /// the registers' order (cores that load one 512-bit vector a cycle).
    wide_in_registers: bool,
}

/// [`depthwise_nhwc_512`] in the loop order `order` allows.
#[allow(clippy::too_many_arguments)]
fn run_512_ordered(
    s: &ConvShape,
    taps: &[f32],
    bias: &[f32],
    act: Act,
    x: &[f32],
    y: &mut [f32],
    (r0, r1): (usize, usize),
    order: Order,
) {
    assert_fits(s, taps, bias, x, y, (r0, r1));
    let wide = s.c_in / Avx512::N * Avx512::N;
    // SAFETY: reachable only through the AVX-512 table, handed out after detecting
    // AVX-512F, AVX2 and FMA (and the test below checks them); every access stays inside
    // the slices `assert_fits` checked.
    unsafe {
        run_avx512(s, taps, bias, act, x, y, (r0, r1), (0, wide), order);
        run_avx2(s, taps, bias, act, x, y, (r0, r1), (wide, s.c_in));
    }
}

/// A vector of one ISA: its lanes and the operations the kernel uses.
trait Lanes {
    /// The vector.
    type V: Copy;
    /// Its f32 lanes.
    const N: usize;
    /// The `N` floats at `p` (unaligned).
    ///
    /// # Safety
    /// The ISA available; `N` floats at `p` readable.
    unsafe fn load(p: *const f32) -> Self::V;
    /// `v` into the `N` floats at `p` (unaligned).
    ///
    /// # Safety
    /// The ISA available; `N` floats at `p` writable.
    unsafe fn store(p: *mut f32, v: Self::V);
    /// `a * b + c`, one rounding per lane.
    ///
    /// # Safety
    /// The ISA available.
    unsafe fn fmadd(a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    /// The activation on every accumulator.
    ///
    /// # Safety
    /// The ISA available.
    unsafe fn act(act: Act, acc: &mut [Self::V]);
    /// [`Group::border`] for `W` vectors, out of line with the ISA's features.
    ///
    /// # Safety
    /// As [`Group::border`].
    unsafe fn border<const W: usize>(g: &Group<'_>, bias: [Self::V; W], act: Act);
}

/// AVX2 + FMA: 8 lanes.
struct Avx2;
/// AVX-512F: 16 lanes.
struct Avx512;

impl Lanes for Avx2 {
    type V = __m256;
    const N: usize = 8;
    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m256 {
        // SAFETY: per the contract.
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m256) {
        // SAFETY: per the contract.
        unsafe { _mm256_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn fmadd(a: __m256, b: __m256, c: __m256) -> __m256 {
        // SAFETY: register-only; FMA per the contract.
        unsafe { _mm256_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn act(act: Act, acc: &mut [__m256]) {
        // SAFETY: AVX per the contract.
        unsafe { act.apply8(acc) }
    }
    #[inline(always)]
    unsafe fn border<const W: usize>(g: &Group<'_>, bias: [__m256; W], act: Act) {
        // SAFETY: per the contract.
        unsafe { border_avx2(g, bias, act) }
    }
}

impl Lanes for Avx512 {
    type V = __m512;
    const N: usize = 16;
    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m512 {
        // SAFETY: per the contract.
        unsafe { _mm512_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m512) {
        // SAFETY: per the contract.
        unsafe { _mm512_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn fmadd(a: __m512, b: __m512, c: __m512) -> __m512 {
        // SAFETY: register-only; AVX-512F per the contract.
        unsafe { _mm512_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn act(act: Act, acc: &mut [__m512]) {
        // SAFETY: AVX-512F per the contract.
        unsafe { act.apply16(acc) }
    }
    #[inline(always)]
    unsafe fn border<const W: usize>(g: &Group<'_>, bias: [__m512; W], act: Act) {
        // SAFETY: per the contract.
        unsafe { border_avx512(g, bias, act) }
    }
}

/// [`Group::border`] on AVX2 vectors, out of line.
///
/// # Safety
/// AVX2 and FMA available; as [`Group::border`].
#[target_feature(enable = "avx2,fma")]
#[inline(never)]
unsafe fn border_avx2<const W: usize>(g: &Group<'_>, bias: [__m256; W], act: Act) {
    // SAFETY: per the contract.
    unsafe { g.border::<Avx2, W>(bias, act) }
}

/// [`Group::border`] on AVX-512 vectors, out of line.
///
/// # Safety
/// AVX-512F available; as [`Group::border`].
#[target_feature(enable = "avx512f,avx2,fma")]
#[inline(never)]
unsafe fn border_avx512<const W: usize>(g: &Group<'_>, bias: [__m512; W], act: Act) {
    // SAFETY: per the contract.
    unsafe { g.border::<Avx512, W>(bias, act) }
}

/// [`run`] on AVX2 vectors.
///
/// # Safety
/// AVX2 and FMA available; as [`run`].
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn run_avx2(
    s: &ConvShape,
    taps: &[f32],
    bias: &[f32],
    act: Act,
    x: &[f32],
    y: &mut [f32],
    rows: (usize, usize),
    chans: (usize, usize),
) {
    let order = Order {
        wide_in_registers: false,
    };
    // SAFETY: per the contract.
    unsafe { run::<Avx2>(s, taps, bias, act, x, y, rows, chans, order) }
}

/// [`run`] on AVX-512 vectors.
///
/// # Safety
/// AVX-512F, AVX2 and FMA available; as [`run`].
#[target_feature(enable = "avx512f,avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn run_avx512(
    s: &ConvShape,
    taps: &[f32],
    bias: &[f32],
    act: Act,
    x: &[f32],
    y: &mut [f32],
    rows: (usize, usize),
    chans: (usize, usize),
    order: Order,
) {
    // SAFETY: per the contract.
    unsafe { run::<Avx512>(s, taps, bias, act, x, y, rows, chans, order) }
}

/// Output rows `r0..r1`, channels `c_lo..c_hi` (their whole vectors, then the rest one
/// channel at a time).
///
/// # Safety
/// `L`'s ISA available; the slices as checked by `assert_fits`; `c_lo <= c_hi <= C`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn run<L: Lanes>(
    s: &ConvShape,
    taps: &[f32],
    bias: &[f32],
    act: Act,
    x: &[f32],
    y: &mut [f32],
    (r0, r1): (usize, usize),
    (c_lo, c_hi): (usize, usize),
    order: Order,
) {
    let c = s.c_in;
    let n = L::N;
    let full = c_lo + (c_hi - c_lo) / n * n;
    if in_registers::<L>(s, order) {
        if full < c_hi {
            for r in r0..r1 {
                for ox in 0..s.ow {
                    pixel_fused(s, taps, bias, act, x, (y, r0), (r, ox), (full, c_hi));
                }
            }
        }
        let (rows, chans) = ((r0, r1), (c_lo, full));
        // SAFETY: per the contract, and the shape `in_registers` checked.
        unsafe {
            match s.kh {
                3 => rows_in_registers::<L, 3, 9>(s, taps, bias, act, x, y, rows, chans),
                _ => rows_in_registers::<L, 5, 25>(s, taps, bias, act, x, y, rows, chans),
            }
        }
        return;
    }
    let (lo, hi) = inner_columns(s);
    for r in r0..r1 {
        let (b, oy) = (r / s.oh, r % s.oh);
        // The channels past the last full vector, every column.
        if full < c_hi {
            for ox in 0..s.ow {
                pixel_fused(s, taps, bias, act, x, (y, r0), (r, ox), (full, c_hi));
            }
        }
        let (ky0, ky1) = row_taps(s, oy);
        // SAFETY: rows ky0..ky1 of output row oy and the columns of inner pixels
        // lo..hi lie inside image b (`row_taps`, `inner_columns`); channels v..v + n (a
        // border group's v..v + n * BORDER_VECS) <= full <= c_hi <= c; the output pixels
        // lie inside row r - r0 of `y` (checked to hold rows r0..r1); `L`'s ISA is
        // available (the contract).
        unsafe {
            let xb = x.as_ptr().add(b * s.h * s.w * c);
            let yr = y.as_mut_ptr().add((r - r0) * s.ow * c);
            let at = |ox: usize, v: usize| Group {
                s,
                xb: xb.add(v),
                taps: taps.as_ptr().add(v),
                out: yr.add(ox * c + v),
                oy,
                ox,
                rows: (ky0, ky1),
            };
            let bv = |v: usize| L::load(bias.as_ptr().add(v));
            // Pixel groups outer, channel vectors inner: a group's input window
            // (rows x (8 * stride + reach) pixels x C) stays in L1 across its vectors.
            // Border pixels take BORDER_VECS channel vectors at a time (independent FMA
            // chains; one vector alone waits on each FMA's latency). They build their
            // groups themselves: with `at` used in a third loop (or as an always-inlined
            // method) the inner loops compiled slower on Zen 3 (56x56x144 212 -> 232-243
            // us, 14x14x576 55 -> 58-68).
            let border = |ox: usize| {
                let g = |v: usize| Group {
                    s,
                    xb: xb.add(v),
                    taps: taps.as_ptr().add(v),
                    out: yr.add(ox * c + v),
                    oy,
                    ox,
                    rows: (ky0, ky1),
                };
                let mut v = c_lo;
                while v + BORDER_VECS * n <= full {
                    let b: [L::V; BORDER_VECS] = std::array::from_fn(|j| bv(v + j * n));
                    L::border(&g(v), b, act);
                    v += BORDER_VECS * n;
                }
                while v < full {
                    L::border(&g(v), [bv(v)], act);
                    v += n;
                }
            };
            for ox in 0..lo {
                border(ox);
            }
            let mut ox = lo;
            // 3 or 5 taps wide, stride 1 or 2: row inputs reused from registers, a few
            // pixels at a time (inputs, accumulators and a tap in 16 registers).
            let form = if s.dw == 1 { (s.kw, s.sw) } else { (0, 0) };
            let per = match form {
                (3, 1) => 6,
                (5, 1) => 5,
                (3, 2) => 4,
                _ => 0,
            };
            while per > 0 && ox + per <= hi {
                for v in (c_lo..full).step_by(n) {
                    let g = at(ox, v);
                    match form {
                        (3, 1) => g.row_reuse::<L, 6, 8, 3, 1>(bv(v), act),
                        (5, 1) => g.row_reuse::<L, 5, 9, 5, 1>(bv(v), act),
                        _ => g.row_reuse::<L, 4, 9, 3, 2>(bv(v), act),
                    }
                }
                ox += per;
            }
            while ox < hi {
                let m = PIXELS.min(hi - ox);
                for v in (c_lo..full).step_by(n) {
                    let g = at(ox, v);
                    match m {
                        8 => g.pixels::<L, 8>(bv(v), act),
                        7 => g.pixels::<L, 7>(bv(v), act),
                        6 => g.pixels::<L, 6>(bv(v), act),
                        5 => g.pixels::<L, 5>(bv(v), act),
                        4 => g.pixels::<L, 4>(bv(v), act),
                        3 => g.pixels::<L, 3>(bv(v), act),
                        2 => g.pixels::<L, 2>(bv(v), act),
                        _ => g.pixels::<L, 1>(bv(v), act),
                    }
                }
                ox += m;
            }
            for ox in hi..s.ow {
                border(ox);
            }
        }
    }
}

/// Up to [`PIXELS`] inner output pixels of one row and one channel vector.
struct Group<'a> {
    s: &'a ConvShape,
    /// The image's first pixel at the vector's channel.
    xb: *const f32,
    /// The first tap at the vector's channel.
    taps: *const f32,
    /// The first output pixel at the vector's channel.
    out: *mut f32,
    oy: usize,
    ox: usize,
    /// In-bounds tap rows.
    rows: (usize, usize),
}

impl Group<'_> {
    /// Pixels `ox..ox + N` of a stride-1, undilated conv `K` taps wide: per tap row,
    /// the `M = N + K - 1` input vectors the pixels read are loaded once and each feeds
    /// its taps from a register (the loads, not the FMAs, bound [`Group::pixels`] at
    /// stride 1). Same sums in the same order as [`Group::pixels`].
    ///
    /// # Safety
    /// As [`Group::pixels`], and `s.sw == s.dw == 1`, `s.kw == K`.
    #[inline(always)]
    unsafe fn row_reuse<
        L: Lanes,
        const N: usize,
        const M: usize,
        const K: usize,
        const S: usize,
    >(
        &self,
        bias: L::V,
        act: Act,
    ) {
        debug_assert!(M == S * (N - 1) + K && self.s.sw == S && self.s.dw == 1 && self.s.kw == K);
        let s = self.s;
        let c = s.c_in;
        // SAFETY: the pixels' taps, columns ox - pw .. ox - pw + M, lie inside the row
        // (the contract); the channel vector inside each pixel.
        unsafe {
            let mut acc = [bias; N];
            for ky in self.rows.0..self.rows.1 {
                let iy = self.oy * s.sh + ky * s.dh - s.ph;
                let col = self.xb.add((iy * s.w + self.ox * S - s.pw) * c);
                let x: [L::V; M] = std::array::from_fn(|q| L::load(col.add(q * c)));
                for kx in 0..K {
                    let wv = L::load(self.taps.add((ky * K + kx) * c));
                    for (q, a) in acc.iter_mut().enumerate() {
                        *a = L::fmadd(wv, x[q * S + kx], *a);
                    }
                }
            }
            L::act(act, &mut acc);
            for (q, a) in acc.iter().enumerate() {
                L::store(self.out.add(q * c), *a);
            }
        }
    }

    /// Pixel `ox` alone, its taps inside the row only, for `W` consecutive channel
    /// vectors: bias, those taps one FMA each in `(ky, kx)` order, then the activation.
    ///
    /// # Safety
    /// `L`'s ISA available; the rows as for [`Group::pixels`], channel vectors `0..W`
    /// from the group's channel inside the pixel.
    #[inline(always)]
    unsafe fn border<L: Lanes, const W: usize>(&self, bias: [L::V; W], act: Act) {
        let s = self.s;
        let c = s.c_in;
        // SAFETY: rows come from `row_taps` and columns are checked against the row
        // before each load; the W channel vectors lie inside the pixel.
        unsafe {
            let mut acc = bias;
            for ky in self.rows.0..self.rows.1 {
                let iy = self.oy * s.sh + ky * s.dh - s.ph;
                let row = self.xb.add(iy * s.w * c);
                for kx in 0..s.kw {
                    let ix = (self.ox * s.sw + kx * s.dw) as isize - s.pw as isize;
                    if ix < 0 || ix >= s.w as isize {
                        continue;
                    }
                    let tp = self.taps.add((ky * s.kw + kx) * c);
                    let xp = row.add(ix as usize * c);
                    for (j, a) in acc.iter_mut().enumerate() {
                        let wv = L::load(tp.add(j * L::N));
                        *a = L::fmadd(wv, L::load(xp.add(j * L::N)), *a);
                    }
                }
            }
            L::act(act, &mut acc);
            for (j, a) in acc.iter().enumerate() {
                L::store(self.out.add(j * L::N), *a);
            }
        }
    }

    /// Pixels `ox..ox + N`: bias, every in-bounds tap one FMA in `(ky, kx)` order, then
    /// the activation.
    ///
    /// # Safety
    /// `L`'s ISA available; the pixels inner columns of the image (see `run`).
    #[inline(always)]
    unsafe fn pixels<L: Lanes, const N: usize>(&self, bias: L::V, act: Act) {
        let s = self.s;
        let c = s.c_in;
        // SAFETY: per the contract, every tap of these pixels lies inside the image and
        // the channel vector inside the pixel.
        unsafe {
            let mut acc = [bias; N];
            let step = s.sw * c;
            for ky in self.rows.0..self.rows.1 {
                let iy = self.oy * s.sh + ky * s.dh - s.ph;
                let row = self.xb.add(iy * s.w * c);
                for kx in 0..s.kw {
                    let wv = L::load(self.taps.add((ky * s.kw + kx) * c));
                    let ix = self.ox * s.sw + kx * s.dw - s.pw;
                    let col = row.add(ix * c);
                    for (q, a) in acc.iter_mut().enumerate() {
                        *a = L::fmadd(wv, L::load(col.add(q * step)), *a);
                    }
                }
            }
            L::act(act, &mut acc);
            for (q, a) in acc.iter().enumerate() {
                L::store(self.out.add(q * c), *a);
            }
        }
    }
}

/// Whether [`rows_in_registers`] runs the conv `s` on `L`'s vectors: an undilated 3x3 or
/// 5x5 of stride 1 or 2 across, on an image at most [`NARROW`] wide (or wider, at stride
/// 1 with at least [`WIDE_MIN_C`] channels), with AVX-512 (16 lanes: 32 registers hold a
/// vector's nine taps and eight accumulators). Other images go pixel groups outer
/// ([`Group`]), which reads each input line from memory once.
/// Xeon (AVX-512), hot caches, best of 1000, before -> after: MobileNetV2's 3x3 at
/// 14x14x576 61 -> 45 us, 7x7x960 37 -> 23, 28x28x192 65 -> 47, 14x14x576 stride 2 23
/// -> 15; the MobileNetV3 DBNet's 5x5 at 20x20x480 288 -> 133; at 56x56x144 the
/// registers' order was 15-40 % slower (each output row reads its input rows again);
/// on Zen 4 (one 512-bit load a cycle) it is faster there (see [`WIDE_MIN_C`]).
#[inline(always)]
fn in_registers<L: Lanes>(s: &ConvShape, order: Order) -> bool {
    L::N == 16
        && s.dh == 1
        && s.dw == 1
        && s.kh == s.kw
        && (s.kh == 3 || s.kh == 5)
        && (s.sw == 1 || s.sw == 2)
        && (s.w <= NARROW || (s.sw == 1 && s.c_in >= WIDE_MIN_C && order.wide_in_registers))
}

/// Output rows `r0..r1`, whole channel vectors `c_lo..full` of an undilated `K`x`K`
/// conv (`KK = K * K`), in blocks of channel vectors whose input rows stay in L1 (one
/// output row after another, then the next block): per row and channel vector, the
/// vector's taps are loaded once into registers and the row's inner pixels run
/// [`PIXELS`] at a time (independent FMA chains), the border pixels one at a time
/// with their taps outside the image skipped. Each output is its bias, then its
/// in-bounds taps in `(ky, kx)` order, then the activation: the sums of
/// [`Group::pixels`].
///
/// # Safety
/// `L`'s ISA available; the slices as checked by `assert_fits`; `s.dh == s.dw == 1`,
/// `s.kh == s.kw == K`; `c_lo <= full <= C`, `full - c_lo` whole vectors.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn rows_in_registers<L: Lanes, const K: usize, const KK: usize>(
    s: &ConvShape,
    taps: &[f32],
    bias: &[f32],
    act: Act,
    x: &[f32],
    y: &mut [f32],
    (r0, r1): (usize, usize),
    (c_lo, full): (usize, usize),
) {
    let c = s.c_in;
    let (lo, hi) = inner_columns(s);
    let (sw, pw) = (s.sw, s.pw);
    // Channel blocks outer: the block's K input rows (`s.w` pixels of `vb` vectors)
    // stay in L1 from one output row to the next.
    let vb = (BLOCK_BYTES / (K * s.w * L::N * 4)).max(1) * L::N;
    let mut cb = c_lo;
    while cb < full {
        let ce = (cb + vb).min(full);
        for r in r0..r1 {
            let (b, oy) = (r / s.oh, r % s.oh);
            let (ky0, ky1) = row_taps(s, oy);
            // SAFETY: tap rows ky0..ky1 of output row oy lie inside image b (`row_taps`),
            // the inner pixels' columns inside the row (`inner_columns`), the border
            // pixels' columns are checked; channels v..v + N <= full <= C; output row
            // r - r0 lies inside `y` (checked to hold rows r0..r1).
            unsafe {
                let xb = x.as_ptr().add(b * s.h * s.w * c);
                let yr = y.as_mut_ptr().add((r - r0) * s.ow * c);
                let mut v = cb;
                while v < ce {
                    // No closures here: they would not inherit the ISA's features, and the
                    // intrinsics in them would be calls.
                    let mut t = [L::load(taps.as_ptr().add(v)); KK];
                    for (i, ti) in t.iter_mut().enumerate().skip(1) {
                        *ti = L::load(taps.as_ptr().add(i * c + v));
                    }
                    let bv = L::load(bias.as_ptr().add(v));
                    let mut rows = [std::ptr::null::<f32>(); K];
                    for (ky, row) in rows.iter_mut().enumerate() {
                        if (ky0..ky1).contains(&ky) {
                            *row = xb.add((oy * s.sh + ky - s.ph) * s.w * c + v);
                        }
                    }
                    let geom = (sw, pw, c, s.w);
                    for ox in 0..lo {
                        border_in_registers::<L, K, KK>(&t, bv, &rows, ox, geom, act, yr.add(v));
                    }
                    let mut ox = lo;
                    if sw == 1 {
                        ox = inner_run::<L, K, KK, 1>(
                            &t,
                            bv,
                            &rows,
                            (ox, hi, pw, c),
                            act,
                            yr.add(v),
                        );
                    } else {
                        ox = inner_run::<L, K, KK, 2>(
                            &t,
                            bv,
                            &rows,
                            (ox, hi, pw, c),
                            act,
                            yr.add(v),
                        );
                    }
                    debug_assert_eq!(ox, hi);
                    for ox in hi..s.ow {
                        border_in_registers::<L, K, KK>(&t, bv, &rows, ox, geom, act, yr.add(v));
                    }
                    v += L::N;
                }
            }
        }
        cb = ce;
    }
}

/// Inner pixels `ox..ox + N` of one channel vector at stride `S`: taps `t` (tap-major)
/// in registers, tap row `ky`'s input at `rows[ky]` (null: outside the image), output at
/// `out` (stride `c` a pixel). Each input column of a tap row is loaded once and feeds
/// every pixel whose window holds it, so that each pixel still sums its taps in `kx`
/// order.
///
/// # Safety
/// `L`'s ISA available; every tap of the pixels inside its non-null row.
#[inline(always)]
unsafe fn pixels_in_registers<
    L: Lanes,
    const K: usize,
    const KK: usize,
    const N: usize,
    const S: usize,
>(
    t: &[L::V; KK],
    bias: L::V,
    rows: &[*const f32; K],
    (ox, pw, c): (usize, usize, usize),
    act: Act,
    out: *mut f32,
) {
    // SAFETY: per the contract.
    unsafe {
        let mut acc = [bias; N];
        for ky in 0..K {
            if rows[ky].is_null() {
                continue;
            }
            let p = rows[ky].add((ox * S - pw) * c);
            // The row's `(N - 1) * S + K` input columns, each loaded once (at most
            // `WINDOW_MAX`: the bound is a constant, the columns past the window are
            // never read). Pixels outer, taps inner, every index a constant: with the
            // columns outer and a check per pixel, the loops stayed rolled at stride 2
            // and indexed the taps in memory (Emerald Rapids, 28x28x192 stride 2: 24 us).
            let m = const { (N - 1) * S + K };
            const { assert!((N - 1) * S + K <= WINDOW_MAX) };
            let x: [L::V; WINDOW_MAX] =
                std::array::from_fn(|j| if j < m { L::load(p.add(j * c)) } else { t[0] });
            for (q, a) in acc.iter_mut().enumerate() {
                for kx in 0..K {
                    *a = L::fmadd(t[ky * K + kx], x[q * S + kx], *a);
                }
            }
        }
        L::act(act, &mut acc);
        let mut o = out.add(ox * c);
        for a in acc {
            L::store(o, a);
            o = o.add(c);
        }
    }
}

/// Inner pixels `ox..hi` of one channel vector at stride `S`, [`PIXELS`] at a time, then
/// four, then one; returns `hi`.
///
/// # Safety
/// As [`pixels_in_registers`] for every pixel.
#[inline(always)]
unsafe fn inner_run<L: Lanes, const K: usize, const KK: usize, const S: usize>(
    t: &[L::V; KK],
    bias: L::V,
    rows: &[*const f32; K],
    (mut ox, hi, pw, c): (usize, usize, usize, usize),
    act: Act,
    out: *mut f32,
) -> usize {
    // SAFETY: per the contract.
    unsafe {
        while ox + PIXELS <= hi {
            pixels_in_registers::<L, K, KK, PIXELS, S>(t, bias, rows, (ox, pw, c), act, out);
            ox += PIXELS;
        }
        if ox + 4 <= hi {
            pixels_in_registers::<L, K, KK, 4, S>(t, bias, rows, (ox, pw, c), act, out);
            ox += 4;
        }
        while ox < hi {
            pixels_in_registers::<L, K, KK, 1, S>(t, bias, rows, (ox, pw, c), act, out);
            ox += 1;
        }
    }
    ox
}

/// Border pixel `ox` of one channel vector (as [`pixels_in_registers`]), its taps
/// outside the row (`geom`: stride, pad, channels, input width) skipped.
///
/// # Safety
/// As [`pixels_in_registers`] for the taps inside the row.
#[inline(always)]
unsafe fn border_in_registers<L: Lanes, const K: usize, const KK: usize>(
    t: &[L::V; KK],
    bias: L::V,
    rows: &[*const f32; K],
    ox: usize,
    (sw, pw, c, w): (usize, usize, usize, usize),
    act: Act,
    out: *mut f32,
) {
    // SAFETY: per the contract; columns are checked against the row.
    unsafe {
        let mut acc = [bias];
        for ky in 0..K {
            if rows[ky].is_null() {
                continue;
            }
            for kx in 0..K {
                let ix = (ox * sw + kx) as isize - pw as isize;
                if ix < 0 || ix >= w as isize {
                    continue;
                }
                let xv = L::load(rows[ky].add(ix as usize * c));
                acc[0] = L::fmadd(t[ky * K + kx], xv, acc[0]);
            }
        }
        L::act(act, &mut acc);
        L::store(out.add(ox * c), acc[0]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::body::dw_nhwc::pack_taps;
    use crate::kernels::testutil::rand_vec;

    /// Both loop orders of a wide stride-1 image (the one the CPU picks and the other)
    /// give the same bits, whichever core this runs on: 3x3 and 5x5, channels past the
    /// last whole vector, a clamp.
    #[test]
    fn wide_images_same_bits_in_either_order() {
        if !(is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma"))
        {
            return;
        }
        for (k, c) in [(3usize, WIDE_MIN_C + 8), (5, WIDE_MIN_C + 16)] {
            let s = ConvShape::square(c, NARROW + 9, c, k, 1, c);
            let (h, w) = (s.h, s.w);
            let x = rand_vec(h * w * c, 7);
            let taps = pack_taps(&rand_vec(c * k * k, 11), c, k * k);
            let bias = rand_vec(c, 13);
            let act = Act::Clamp(-0.5, 3.0);
            let run = |wide_in_registers: bool| {
                let mut y = vec![f32::NAN; h * w * c];
                let order = Order { wide_in_registers };
                run_512_ordered(&s, &taps, &bias, act, &x, &mut y, (0, h), order);
                y
            };
            let (a, b) = (run(true), run(false));
            assert!(
                a.iter().all(|v| v.is_finite()),
                "{k}x{k}: unwritten outputs"
            );
            let same = a.iter().zip(&b).all(|(u, v)| u.to_bits() == v.to_bits());
            assert!(same, "{k}x{k}, {c} channels: the two orders differ");
        }
    }
}
