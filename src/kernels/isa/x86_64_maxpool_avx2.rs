//! AVX2 max pool of one plane (table entry `max_pool_plane` of the AVX2 table), the
//! AVX-512 table's separable design (`x86_64_maxpool`) on 8 lanes: for dilation 1, any
//! row stride and a column stride of 1 or 2, per output row the window's input rows are
//! reduced into one row bordered with `-inf` on a stack buffer, then each output vector
//! takes the max of the kernel's `kw` shifted loads of that row (at stride 2, the even
//! lanes of two loads): `kh + kw` maxes per output instead of `kh * kw` (YOLO's SPP /
//! SPPF pools are 5x5 to 13x13). Other shapes, and rows wider than the buffer, run the
//! body (`body::pool::max_pool_plane`).
//!
//! Every max is `v > acc ? v : acc` (`vmaxps` with the new value first), as the body's:
//! a NaN input never replaces the accumulator, so the result is the max of the window's
//! numbers whatever the order, and `-inf` for a window with none.

use super::x86_64_maxpool::{row_len, takes, ROW};
use crate::kernels::body::{self, pool::PoolShape};
use std::arch::x86_64::*;
use std::mem::MaybeUninit;

/// f32 lanes of one vector.
const L: usize = 8;

/// Table entry `max_pool_plane` of the AVX2 table.
pub(super) fn max_pool_plane(s: &PoolShape, x: &[f32], y: &mut [f32]) {
    if !takes(s, x, y, 3 * L) {
        return generic(s, x, y);
    }
    // SAFETY: AVX2 was detected (the table is handed out only then); `run` reads `x` and
    // writes `y` inside the lengths just checked and its stack row inside `ROW`
    // (`row_len(s) + 3 * L <= ROW` checked).
    unsafe { run(s, x, y) }
}

// The body compiled with the AVX2 table's features (the shapes `run` does not take).
feature_build!(
    "avx2,fma",
    generic,
    body::pool::max_pool_plane,
    (s: &PoolShape, x: &[f32], y: &mut [f32])
);

/// Lane mask of the first `n` lanes (all of them from 8 on), for masked loads and
/// stores.
///
/// # Safety
/// AVX available.
#[inline(always)]
unsafe fn first_lanes(n: usize) -> __m256i {
    let n = n.min(L) as i32;
    // SAFETY: register-only intrinsics; AVX per the contract.
    unsafe {
        let idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx)
    }
}

/// The even lanes of `lo` then those of `hi` (stride 2: elements 0, 2, .., 14).
///
/// # Safety
/// AVX2 available.
#[inline(always)]
unsafe fn even_lanes(lo: __m256, hi: __m256) -> __m256 {
    // SAFETY: register-only intrinsics; AVX2 per the contract.
    unsafe {
        // [lo0 lo2 hi0 hi2 | lo4 lo6 hi4 hi6] -> [lo0 lo2 lo4 lo6 hi0 hi2 hi4 hi6]
        let e = _mm256_shuffle_ps::<0b10_00_10_00>(lo, hi);
        _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(e)))
    }
}

/// # Safety
/// AVX2 available; `x` holds `h * w` floats, `y` `oh * ow`; `row_len(s) + 3 * L <=
/// ROW`; stride 1 or 2, dilation 1.
#[target_feature(enable = "avx2,fma")]
unsafe fn run(s: &PoolShape, x: &[f32], y: &mut [f32]) {
    let ninf = _mm256_set1_ps(f32::NEG_INFINITY);
    let (pl, len) = (s.pads[1], row_len(s));
    // Written before it is read: the borders once, the input columns per output row
    // (whole vectors past the row's end are put back to -inf after each row).
    let mut buf = [MaybeUninit::<f32>::uninit(); ROW];
    let row = buf.as_mut_ptr() as *mut f32;
    // SAFETY: every access below stays inside `x` (rows iy < h, columns < w: whole
    // vectors only where `ix + L <= w`, masked loads otherwise), `y` (rows oy < oh,
    // columns < ow: whole vectors only where `ox + L <= ow`, masked stores otherwise) or
    // the `ROW` floats of `buf` (the -inf fill writes below `len + 2 * L`, the reduced
    // row's vectors below `pl + w + L <= len + L`, the taps of the last output vector
    // read below `len + 2 * L`).
    unsafe {
        let mut i = 0;
        while i < len + 2 * L {
            _mm256_storeu_ps(row.add(i), ninf);
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
                    _mm256_maskstore_ps(out.add(ox), first_lanes(s.ow - ox), ninf);
                    ox += L;
                }
                continue;
            }
            // The window's rows reduced into the row's input columns.
            let mut ix = 0;
            while ix < s.w {
                let mut acc = ninf;
                if ix + L <= s.w {
                    for iy in lo..hi {
                        acc = _mm256_max_ps(_mm256_loadu_ps(xp.add(iy * s.w + ix)), acc);
                    }
                } else {
                    let m = first_lanes(s.w - ix);
                    for iy in lo..hi {
                        let v = _mm256_maskload_ps(xp.add(iy * s.w + ix), m);
                        acc = _mm256_max_ps(v, acc);
                    }
                }
                _mm256_storeu_ps(row.add(pl + ix), acc);
                ix += L;
            }
            // The lanes stored past the row's last column: the right border again.
            if !s.w.is_multiple_of(L) {
                _mm256_storeu_ps(row.add(pl + s.w), ninf);
            }
            // Each output vector: the kernel's taps along the reduced row.
            let mut ox = 0;
            while ox < s.ow {
                let mut acc = ninf;
                for kx in 0..s.kw {
                    let at = row.add(ox * s.sw + kx);
                    let v = if s.sw == 1 {
                        _mm256_loadu_ps(at)
                    } else {
                        even_lanes(_mm256_loadu_ps(at), _mm256_loadu_ps(at.add(L)))
                    };
                    acc = _mm256_max_ps(v, acc);
                }
                if ox + L <= s.ow {
                    _mm256_storeu_ps(out.add(ox), acc);
                } else {
                    _mm256_maskstore_ps(out.add(ox), first_lanes(s.ow - ox), acc);
                }
                ox += L;
            }
        }
    }
}
