//! `KernelTable::mm_cols` with AVX-512: the ragged last strip of at most
//! [`COLS_MAX`](super::COLS_MAX) columns of a GEMM with packed A (a Winograd point's
//! product over 20 tiles has a 4-column one: 16 + 4). Each 16-lane vector holds one
//! column of two A panels' six rows (lanes 0..6 and 8..14, each an 8-lane load under a
//! mask), so one step is an FMA of twelve sums per panel pair and column, sharing the
//! column's broadcast of B: half the FMAs of the AVX2 form (one panel's six rows per
//! 8-lane vector). Every sum is one chain of FMAs in step order, so the same bits as the
//! tile. The dispatch over groups of pairs is `super::cols_entry`.

use super::{MR, NR};
use std::arch::x86_64::*;

/// The six lanes of one panel's step (its rows) in an 8-lane load.
const SIX: __mmask8 = 0x3F;

super::cols_entry!(cols_pairs, 2);

/// `P` panel pairs x `T` columns of [`mm_cols`]: rows `0..rows` of `c` written (`rows`
/// within `2 * P` panels, more than `2 * P - 2`); a pair whose second panel is past
/// `rows` loads only its first.
///
/// # Safety
/// AVX-512 F available; `a` readable for `ceil(rows / MR) * kc * MR` floats, `b` for
/// `kc * NR`, `c` writable at `r * ldc + j` for `r < rows`, `j < T`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
unsafe fn cols_pairs<const P: usize, const T: usize>(
    kc: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    rows: usize,
    acc: bool,
) {
    let np = rows.div_ceil(MR);
    let hi: [__mmask8; P] = std::array::from_fn(|i| if 2 * i + 1 < np { SIX } else { 0 });
    let mut sums = [[_mm512_setzero_ps(); T]; P];
    for p in 0..kc {
        // SAFETY: B's step p holds NR >= T floats; panel 2i's step p (six floats) and,
        // where its mask is set, panel 2i + 1's are within `a` (the caller's bounds);
        // masked-off lanes are not read.
        unsafe {
            let bv: [__m512; T] = std::array::from_fn(|j| _mm512_set1_ps(*b.add(p * NR + j)));
            for (i, row) in sums.iter_mut().enumerate() {
                let a0 = a.add(2 * i * kc * MR + p * MR);
                // Six floats of each panel's step p (no load crosses into the next
                // step, so none reads past the last panel), the second panel's into
                // lanes 8..14.
                let lo = _mm256_maskz_loadu_ps(SIX, a0);
                let up = _mm256_maskz_loadu_ps(hi[i], a0.wrapping_add(kc * MR));
                let av = _mm512_insertf32x8(_mm512_castps256_ps512(lo), up, 1);
                for (s, bj) in row.iter_mut().zip(&bv) {
                    *s = _mm512_fmadd_ps(av, *bj, *s);
                }
            }
        }
    }
    for (i, row) in sums.iter().enumerate() {
        for (j, s) in row.iter().enumerate() {
            let mut lanes = [0.0f32; 16];
            // SAFETY: sixteen floats of `lanes`.
            unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), *s) };
            for (half, base) in [(0, 2 * i * MR), (8, (2 * i + 1) * MR)] {
                for r in 0..MR.min(rows.saturating_sub(base)) {
                    let v = lanes[half + r];
                    // SAFETY: row base + r < rows, column j < T (the caller's bounds).
                    let d = unsafe { &mut *c.add((base + r) * ldc + j) };
                    *d = if acc { *d + v } else { v };
                }
            }
        }
    }
}
