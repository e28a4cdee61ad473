//! AVX-512 max pool of one plane (table entry `max_pool_plane`) for dilation 1, any row
//! stride and a column stride of 1 or 2: per output row, the window's input rows (prefetched a few output rows
//! ahead) are reduced into one row
//! (sixteen columns per vector) bordered with `-inf` on a stack buffer, then each output
//! vector takes the max of the kernel's `kw` shifted loads of that row (at stride 2, the
//! even lanes of two loads). Other shapes, and rows wider than the buffer, run the body
//! (`body::pool::max_pool_plane`).
//!
//! Every max is `v > acc ? v : acc` (`vmaxps` with the new value first), as the body's:
//! a NaN input never replaces the accumulator, so the result is the max of the window's
//! numbers whatever the order, and `-inf` for a window with none.

use super::x86_64_avx512_math::{alternate_lanes, first_lanes};
use crate::kernels::body::{self, pool::PoolShape};
use std::arch::x86_64::*;
use std::mem::MaybeUninit;

/// f32 lanes of one vector.
const L: usize = 16;
/// Floats of the reduced row buffer (the row with its pads, and the lanes the last
/// vectors' taps read past it), here and in the AVX2 module.
pub(super) const ROW: usize = 1024;

/// True when the separable kernels (this one, the AVX2 one) take `s`: dilation 1, a
/// column stride of 1 or 2 (any row stride: a CRNN's 2x1 pools of stride (2, 1) took
/// 3x onnxruntime's time on the body), and a reduced row that fits [`ROW`] with `slack` floats (three
/// vectors) past it. Panics unless `x` and `y` hold the planes.
pub(super) fn takes(s: &PoolShape, x: &[f32], y: &[f32], slack: usize) -> bool {
    assert!(
        x.len() >= s.h * s.w && y.len() >= s.oh * s.ow,
        "max pool plane"
    );
    s.dh == 1
        && s.dw == 1
        && s.sh >= 1
        && (s.sw == 1 || s.sw == 2)
        && s.kh > 0
        && s.kw > 0
        && s.ow > 0
        && row_len(s) + slack <= ROW
}

/// Table entry `max_pool_plane` of the AVX-512 table.
pub(super) fn max_pool_plane(s: &PoolShape, x: &[f32], y: &mut [f32]) {
    if !takes(s, x, y, 3 * L) {
        return generic(s, x, y);
    }
    // SAFETY: as above; `run` reads `x` and writes `y` inside the lengths just checked and
    // its stack row inside `ROW` (`row_len(s) + 48 <= ROW` checked).
    unsafe { run(s, x, y) }
}

// The body compiled with the AVX-512 table's features (the shapes `run` does not take).
feature_build!(
    "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma",
    generic,
    body::pool::max_pool_plane,
    (s: &PoolShape, x: &[f32], y: &mut [f32])
);

/// Floats of the reduced row the output columns' windows span: the left pad, and up to
/// the last output's last tap (at least the input row).
pub(super) fn row_len(s: &PoolShape) -> usize {
    let span = (s.ow.max(1) - 1) * s.sw + s.kw;
    span.max(s.pads[1] + s.w)
}

/// # Safety
/// AVX-512F available; `x` holds `h * w` floats, `y` `oh * ow`; `row_len(s) + 48 <=
/// ROW`; stride 1 or 2, dilation 1.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
unsafe fn run(s: &PoolShape, x: &[f32], y: &mut [f32]) {
    let ninf = _mm512_set1_ps(f32::NEG_INFINITY);
    let (pl, len) = (s.pads[1], row_len(s));
    // Written before it is read: the borders once, the input columns per output row.
    let mut buf = [MaybeUninit::<f32>::uninit(); ROW];
    let row = buf.as_mut_ptr() as *mut f32;
    // SAFETY: every access below stays inside `x` (rows iy < h, columns < w, masked),
    // `y` (rows oy < oh, columns < ow, masked) or the `ROW` floats of `buf` (the -inf
    // fill writes below `len + 48`, the taps of the last vector read below `len + 31`).
    unsafe {
        let mut i = 0;
        while i < len + 2 * L {
            _mm512_storeu_ps(row.add(i), ninf);
            i += L;
        }
        let xp = x.as_ptr();
        for oy in 0..s.oh {
            let top = (oy * s.sh) as isize - s.pads[0] as isize;
            let lo = top.max(0) as usize;
            let hi = ((top + s.kh as isize).max(0) as usize).min(s.h);
            let out = y.as_mut_ptr().add(oy * s.ow);
            if lo >= hi {
                // No input row in the window: -inf everywhere.
                let mut ox = 0;
                while ox < s.ow {
                    _mm512_mask_storeu_ps(out.add(ox), first_lanes(s.ow - ox), ninf);
                    ox += L;
                }
                continue;
            }
            // The window's rows reduced into the row's input columns, and the two input
            // rows from 4 x stride past the window fetched meanwhile (a pool reads a
            // conv's output of megabytes, mostly gone from L2: ResNet-18's 3x3/2 pool
            // with the caches evicted 361-479 -> 312-379 us, 391 -> 344 in the network).
            // `wrapping_add`: a prefetch address past the plane is never dereferenced.
            let next = xp.wrapping_add((hi + 4 * s.sh).min(s.h - 1) * s.w);
            let mut ix = 0;
            while ix < s.w {
                let m = first_lanes(s.w - ix);
                _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(ix).cast());
                _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(ix + s.w).cast());
                let mut acc = ninf;
                for iy in lo..hi {
                    let v = _mm512_maskz_loadu_ps(m, xp.add(iy * s.w + ix));
                    acc = _mm512_max_ps(v, acc);
                }
                _mm512_mask_storeu_ps(row.add(pl + ix), m, acc);
                ix += L;
            }
            // Each output vector: the kernel's taps along the reduced row.
            let mut ox = 0;
            while ox < s.ow {
                let mut acc = ninf;
                for kx in 0..s.kw {
                    let at = row.add(ox * s.sw + kx);
                    let v = if s.sw == 1 {
                        _mm512_loadu_ps(at)
                    } else {
                        alternate_lanes::<0>(_mm512_loadu_ps(at), _mm512_loadu_ps(at.add(L)))
                    };
                    acc = _mm512_max_ps(v, acc);
                }
                _mm512_mask_storeu_ps(out.add(ox), first_lanes(s.ow - ox), acc);
                ox += L;
            }
        }
    }
}
