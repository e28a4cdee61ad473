//! Hand-written AVX2+FMA depthwise conv kernels (table entry `depthwise_fused` of the
//! AVX2 table) for the common shapes: 3x3 and 5x5, stride 1 or 2 in both directions,
//! dilation 1, any padding. Other shapes go to the generic body (`body::depthwise`).
//!
//! Every input row is copied once into a small ring of zero-bordered rows in scratch
//! (stride 2: split into its even and odd padded columns, so that each tap reads eight
//! consecutive floats); rows above and below the plane are one shared zero row. A pass
//! then computes up to [`ROWS`] output rows, eight output columns per vector: every
//! loaded input vector serves each output row whose window holds it, the taps are
//! broadcast once per channel, and the accumulators stay in registers. Bias plus
//! ReLU / Clip / HardSwish (the common conv epilogues) is fused into the accumulators;
//! any other epilogue runs through `Epilogue::apply_body` on the rows a pass has just
//! written.
//!
//! The entry is reachable only through the AVX2 table, which `super::x86_64_fma::table`
//! hands out only after detecting AVX2 and FMA.

use crate::ir::UnaryOp;
use crate::kernels::body::depthwise::{DirectGeom as Geom, DIRECT_ROWS as ROWS};
use crate::kernels::body::{self, conv::ConvShape, epilogue::Epilogue, unary::PostOpRt};
use std::arch::x86_64::*;

/// Largest kernel side the direct kernels handle.
const KMAX: usize = 5;
/// Input rows one pass reads at most: `(ROWS - 1) * 2 + KMAX`.
const PASS_ROWS: usize = (ROWS - 1) * 2 + KMAX;
/// f32 lanes of one vector (output columns per step).
const LANES: usize = body::depthwise::DIRECT_LANES;

/// How the epilogue is applied.
#[derive(Clone, Copy)]
enum Fuse {
    /// Nothing to apply.
    None,
    /// In registers: accumulators start at `bias`, then `act`.
    Regs { bias: f32, act: Act },
    /// `Epilogue::apply_body` on the finished rows.
    Rows,
}

/// An activation applied in registers, as `Epilogue::apply_body` computes it.
#[derive(Clone, Copy)]
enum Act {
    None,
    /// `v > lo ? v : lo`, then `v < hi ? v : hi` (bias + ReLU / Clip).
    Clamp(f32, f32),
    /// `v * clamp(v / 6 + 0.5, 0, 1)`.
    HardSwish,
}

fn fuse_of(epi: &Epilogue<'_>, c: usize) -> Fuse {
    if epi.is_empty() {
        return Fuse::None;
    }
    if epi.addend.is_some() || !epi.channel_is_row {
        return Fuse::Rows;
    }
    let bias = epi.bias.map(|b| b[epi.channel_offset + c]);
    let act = match (bias, epi.post) {
        (_, [PostOpRt::Unary(UnaryOp::HardSwish)]) => Act::HardSwish,
        (Some(_), []) => Act::None,
        (Some(_), [PostOpRt::Unary(UnaryOp::Relu)]) => Act::Clamp(0.0, f32::INFINITY),
        (Some(_), [PostOpRt::Unary(UnaryOp::Clip { min, max })]) => Act::Clamp(*min, *max),
        _ => return Fuse::Rows,
    };
    Fuse::Regs {
        bias: bias.unwrap_or(0.0),
        act,
    }
}

/// Table entry `depthwise_fused`: output channel `c` of a depthwise conv into `y`
/// (`[C, OH*OW]`) with the epilogue fused; shapes the direct
/// kernels do not handle (or a scratch too short for them) go to the generic body.
pub(super) fn depthwise_direct(
    s: &ConvShape,
    w: &[f32],
    plane: &[f32],
    y: &mut [f32],
    c: usize,
    epi: &Epilogue<'_>,
    scratch: &mut [f32],
) {
    let ohw = s.oh * s.ow;
    match Geom::new(s) {
        Some(g) if scratch.len() >= g.scratch_len() => {
            assert!(w.len() >= g.k * g.k, "depthwise taps");
            assert!(plane.len() >= s.h * s.w, "depthwise plane");
            assert!(y.len() >= (c + 1) * ohw, "depthwise output");
            let fuse = fuse_of(epi, c);
            // SAFETY: this entry is reachable only through the AVX2 table, handed out
            // after detecting AVX2 and FMA; the asserts above and `Geom` bound every
            // access (see `plane_direct`).
            unsafe { plane_direct(s, &g, w, plane, y, c, epi, fuse, scratch) }
        }
        // SAFETY: as above, AVX2 and FMA were detected; the body indexes safely.
        _ => unsafe { generic(s, w, plane, y, c, epi, scratch) },
    }
}

/// The generic body compiled with AVX2 and FMA.
///
/// # Safety
/// AVX2 and FMA must be available.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn generic(
    s: &ConvShape,
    w: &[f32],
    plane: &[f32],
    y: &mut [f32],
    c: usize,
    epi: &Epilogue<'_>,
    scratch: &mut [f32],
) {
    body::depthwise::depthwise_channel(s, w, plane, y, c, epi, scratch)
}

/// One channel through the direct kernels.
///
/// # Safety
/// AVX2 and FMA must be available; `g` is `Geom::new(s)`, `scratch` holds
/// `g.scratch_len()` floats, `w` `k * k`, `plane` `h * w`, `y` `(c + 1) * oh * ow`.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn plane_direct(
    s: &ConvShape,
    g: &Geom,
    w: &[f32],
    plane: &[f32],
    y: &mut [f32],
    c: usize,
    epi: &Epilogue<'_>,
    fuse: Fuse,
    scratch: &mut [f32],
) {
    let (k, st) = (g.k, g.st);
    let ohw = s.oh * s.ow;
    let scratch = &mut scratch[..g.scratch_len()];
    scratch.fill(0.0);
    let (ring, zero) = scratch.split_at_mut(g.slots * g.row_len);
    let (ring, zero) = (ring.as_mut_ptr(), zero.as_ptr());
    let mut wv = [_mm256_setzero_ps(); KMAX * KMAX];
    for (d, t) in wv.iter_mut().zip(&w[..k * k]) {
        *d = _mm256_set1_ps(*t);
    }
    let (bias, act) = match fuse {
        Fuse::Regs { bias, act } => (bias, act),
        Fuse::None | Fuse::Rows => (0.0, Act::None),
    };
    let init = _mm256_set1_ps(bias);
    let clamp = match act {
        Act::Clamp(lo, hi) => Some((_mm256_set1_ps(lo), _mm256_set1_ps(hi))),
        _ => None,
    };
    let hswish = matches!(act, Act::HardSwish);
    // Padded rows below `filled` that hold input are in the ring (slot: row % slots).
    let mut filled = 0;
    let mut oy = 0;
    while oy < s.oh {
        let r = pass_rows(s.oh - oy);
        let first = oy * st;
        let count = (r - 1) * st + k;
        let mut rows = [zero; PASS_ROWS];
        for (i, p) in rows.iter_mut().enumerate().take(count) {
            let pr = first + i;
            let Some(iy) = pr.checked_sub(s.ph).filter(|&iy| iy < s.h) else {
                continue;
            };
            // SAFETY: slot pr % slots < slots of `row_len` floats lies inside the ring.
            let slot = unsafe { ring.add((pr % g.slots) * g.row_len) };
            if pr >= filled {
                // SAFETY: as above; no other reference to the ring is live.
                let dst = unsafe { std::slice::from_raw_parts_mut(slot, g.row_len) };
                fill_row(&plane[iy * s.w..(iy + 1) * s.w], s.pw, g.half, dst);
            }
            *p = slot;
        }
        filled = filled.max(first + count);
        // The rest of the channel plane: a partial vector may be stored whole while the
        // rows after it (written later) hold what it spills over.
        let out = &mut y[c * ohw + oy * s.ow..(c + 1) * ohw];
        let p = Pass {
            rows: &rows,
            half: g.half,
            ow: s.ow,
            wv: &wv,
            init,
            clamp,
            hswish,
        };
        // SAFETY: every row pointer is a ring slot or the zero row, `g.row_len` floats
        // each, enough for every column the pass reads (see `Geom::new`); `out` holds
        // at least the `r` output rows of the pass.
        unsafe {
            match (k, st, r) {
                (3, 1, 4) => p.run::<3, 1, 4>(out),
                (3, 1, 2) => p.run::<3, 1, 2>(out),
                (3, 1, _) => p.run::<3, 1, 1>(out),
                (3, _, 4) => p.run::<3, 2, 4>(out),
                (3, _, 2) => p.run::<3, 2, 2>(out),
                (3, _, _) => p.run::<3, 2, 1>(out),
                (_, 1, 4) => p.run::<5, 1, 4>(out),
                (_, 1, 2) => p.run::<5, 1, 2>(out),
                (_, 1, _) => p.run::<5, 1, 1>(out),
                (_, _, 4) => p.run::<5, 2, 4>(out),
                (_, _, 2) => p.run::<5, 2, 2>(out),
                (_, _, _) => p.run::<5, 2, 1>(out),
            }
        }
        if let Fuse::Rows = fuse {
            epi.apply_body(y, ohw, c, 1, oy * s.ow, r * s.ow);
        }
        oy += r;
    }
}

/// Output rows a pass of a direct depthwise plane kernel computes with `left` rows to
/// go: 4, 2 or 1 (the kernels' unrolled row counts).
#[inline(always)]
pub(super) fn pass_rows(left: usize) -> usize {
    match left {
        n if n >= 4 => 4,
        n if n >= 2 => 2,
        _ => 1,
    }
}

/// Lanes `0..n` of a vector (`n <= 8`): the load / store mask.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn mask(n: usize) -> __m256i {
    _mm256_cmpgt_epi32(
        _mm256_set1_epi32(n as i32),
        _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
    )
}

/// Copies input row `src` into ring slot `dst` (zero-bordered): padded column `pw + i`
/// holds `src[i]`; with `half > 0` (stride 2) even padded columns go to the first half,
/// odd ones to the second. Whole vectors are written (zeros past the row's end, inside
/// the lengths `Geom::new` reserves); the left border is never written (stays zero).
#[target_feature(enable = "avx2,fma")]
fn fill_row(src: &[f32], pw: usize, half: usize, dst: &mut [f32]) {
    let n = src.len();
    let sp = src.as_ptr();
    if half == 0 {
        let d = &mut dst[pw..pw + n.div_ceil(8) * 8];
        for i in 0..n / 8 {
            // SAFETY: 8 floats from 8 * i are inside `src` and inside `d`.
            unsafe { _mm256_storeu_ps(d.as_mut_ptr().add(8 * i), _mm256_loadu_ps(sp.add(8 * i))) };
        }
        if !n.is_multiple_of(8) {
            let i = n / 8 * 8;
            // SAFETY: the mask loads only the `n % 8` floats left in `src`; `d` holds 8
            // floats from i (its length is n rounded up to 8).
            unsafe {
                let v = _mm256_maskload_ps(sp.add(i), mask(n % 8));
                _mm256_storeu_ps(d.as_mut_ptr().add(i), v);
            }
        }
        return;
    }
    let (ev, od) = dst.split_at_mut(half);
    // Input column 2i is padded column pw + 2i: even half when pw is even.
    let (to_even_x, to_odd_x) = if pw.is_multiple_of(2) {
        (&mut ev[pw / 2..], &mut od[pw / 2..])
    } else {
        (&mut od[(pw - 1) / 2..], &mut ev[pw.div_ceil(2)..])
    };
    let chunks = n.div_ceil(16);
    assert!(to_even_x.len() >= 8 * chunks && to_odd_x.len() >= 8 * chunks);
    for i in 0..chunks {
        let left = n - 16 * i;
        // SAFETY: the loads read only floats inside `src` (masked past its end; the
        // second vector only when more than 8 are left), the stores 8 floats from
        // 8 * i of destinations holding 8 * chunks (asserted above).
        unsafe {
            let p = sp.add(16 * i);
            let (a, b) = if left >= 16 {
                (_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8)))
            } else if left > 8 {
                (
                    _mm256_loadu_ps(p),
                    _mm256_maskload_ps(p.add(8), mask(left - 8)),
                )
            } else {
                (_mm256_maskload_ps(p, mask(left)), _mm256_setzero_ps())
            };
            // Per 128-bit lane [a0 a2 b0 b2 | a4 a6 b4 b6], then lanes reordered.
            let e = _mm256_shuffle_ps::<0x88>(a, b);
            let o = _mm256_shuffle_ps::<0xDD>(a, b);
            let e = _mm256_castpd_ps(_mm256_permute4x64_pd::<0xD8>(_mm256_castps_pd(e)));
            let o = _mm256_castpd_ps(_mm256_permute4x64_pd::<0xD8>(_mm256_castps_pd(o)));
            _mm256_storeu_ps(to_even_x.as_mut_ptr().add(8 * i), e);
            _mm256_storeu_ps(to_odd_x.as_mut_ptr().add(8 * i), o);
        }
    }
}

/// One pass over up to [`ROWS`] output rows.
struct Pass<'a> {
    /// Padded input rows from the pass's first (ring slots or the zero row).
    rows: &'a [*const f32; PASS_ROWS],
    /// Floats of one half of a stride-2 row.
    half: usize,
    /// Output columns.
    ow: usize,
    /// The taps, broadcast (`ky * k + kx`).
    wv: &'a [__m256; KMAX * KMAX],
    /// Accumulator start (the bias or 0).
    init: __m256,
    /// Clamp after the taps (`lo`, `hi`).
    clamp: Option<(__m256, __m256)>,
    /// HardSwish after the taps.
    hswish: bool,
}

impl Pass<'_> {
    /// Output rows `0..R` of the pass into `out` (at least `R * ow` floats).
    ///
    /// # Safety
    /// AVX2 and FMA must be available; rows `0..(R - 1) * S + K` of `self.rows` are
    /// valid for reads of the row length of `Geom::new` (`K`, `S` as there).
    #[target_feature(enable = "avx2,fma")]
    unsafe fn run<const K: usize, const S: usize, const R: usize>(&self, out: &mut [f32]) {
        let ow = self.ow;
        assert!(out.len() >= R * ow);
        let full = ow / LANES;
        let tail = ow - full * LANES;
        // The partial vector first: stored whole where `out` has room, its spill over
        // the next row's first columns is then overwritten by that row's stores. (One
        // call site of `step`, so that it is inlined.)
        let vecs = full + usize::from(tail > 0);
        for i in 0..vecs {
            // The partial vector (v = full) at i = 0, then vectors 0..full.
            let v = (i + full) % vecs;
            // SAFETY: the rows hold every column of vector v < ow.div_ceil(8) (caller).
            let acc = unsafe { self.step::<K, S, R>(v * LANES) };
            for (j, a) in acc.iter().enumerate() {
                let o = j * ow + v * LANES;
                // SAFETY: 8 floats from o inside `out`, or the masked `tail` ones of the
                // partial vector (o + tail = (j + 1) * ow <= out.len()).
                unsafe {
                    let p = out.as_mut_ptr().add(o);
                    if o + LANES <= out.len() {
                        _mm256_storeu_ps(p, *a);
                    } else {
                        _mm256_maskstore_ps(p, mask(tail), *a);
                    }
                }
            }
        }
    }

    /// Output columns `col..col + 8` of rows `0..R`: every input vector loaded once and
    /// used by each output row whose window holds it.
    ///
    /// # Safety
    /// As [`Pass::run`], and the vector at `col` is one the pass computes.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn step<const K: usize, const S: usize, const R: usize>(
        &self,
        col: usize,
    ) -> [__m256; R] {
        let mut acc = [self.init; R];
        for i in 0..(R - 1) * S + K {
            let rp = self.rows[i];
            for kx in 0..K {
                // Stride 2: tap kx of output column ox reads padded column 2 ox + kx,
                // i.e. position ox + kx / 2 of the even (kx even) or odd half.
                let off = if S == 1 {
                    col + kx
                } else {
                    (kx % 2) * self.half + col + kx / 2
                };
                // SAFETY: inside the row (caller; see `Geom::new` for the row length).
                let xv = unsafe { _mm256_loadu_ps(rp.add(off)) };
                for (j, a) in acc.iter_mut().enumerate() {
                    // Input row i is tap row i - j * S of output row j.
                    if i >= j * S && i - j * S < K {
                        *a = _mm256_fmadd_ps(self.wv[(i - j * S) * K + kx], xv, *a);
                    }
                }
            }
        }
        if let Some((lo, hi)) = self.clamp {
            for a in acc.iter_mut() {
                *a = _mm256_min_ps(_mm256_max_ps(*a, lo), hi);
            }
        } else if self.hswish {
            let (sixth, half) = (_mm256_set1_ps(1.0 / 6.0), _mm256_set1_ps(0.5));
            let (zero, one) = (_mm256_setzero_ps(), _mm256_set1_ps(1.0));
            for a in acc.iter_mut() {
                let t = _mm256_add_ps(_mm256_mul_ps(*a, sixth), half);
                *a = _mm256_mul_ps(*a, _mm256_min_ps(_mm256_max_ps(t, zero), one));
            }
        }
        acc
    }
}
