//! The AVX-512 tile of the f32 direct conv (`kernels::conv::direct`): 6 rows x 32
//! positions (two vectors), a sum over input channels and taps with one broadcast weight
//! and two plane loads per step. Same bits as `conv::direct::conv_tile_f32`.

use super::{MR, NR};
use std::arch::x86_64::*;

/// [`crate::kernels::conv::direct::ConvTile`] on AVX-512 (the table is handed out only
/// after detecting AVX-512 F).
pub(super) fn conv_tile(
    a: &[f32],
    b: &[f32],
    offs: &[usize],
    cp: usize,
    cps: usize,
    c: &mut [f32],
    ldc: usize,
) {
    assert!(a.len() >= offs.len() * cp * MR, "conv tile: short A panel");
    if cp > 0 {
        let far = offs
            .iter()
            .max()
            .map_or(0, |&o| o + (cp - 1) * cps + 2 * NR);
        assert!(b.len() >= far, "conv tile: short planes");
    }
    assert!(
        ldc >= 2 * NR && c.len() >= (MR - 1) * ldc + 2 * NR,
        "conv tile: short C"
    );
    // SAFETY: AVX-512 F was detected with the table; the asserts bound every read
    // (`offs.len() * cp * MR` floats of A; per tap, `cp` rows of 2 * NR floats of B
    // from `offs[t]` at stride `cps`) and write (MR rows of 2 * NR at `ldc`).
    unsafe { tile_512(a.as_ptr(), b.as_ptr(), offs, cp, cps, c.as_mut_ptr(), ldc) }
}

/// # Safety
/// AVX-512 F available; the reads and writes [`conv_tile`] checks are in bounds.
#[target_feature(enable = "avx512f,fma")]
unsafe fn tile_512(
    a: *const f32,
    b: *const f32,
    offs: &[usize],
    cp: usize,
    cps: usize,
    c: *mut f32,
    ldc: usize,
) {
    let mut s0 = [_mm512_setzero_ps(); MR];
    let mut s1 = [_mm512_setzero_ps(); MR];
    let mut ap = a;
    for p in 0..cp {
        for &o in offs {
            // SAFETY: this tap's row of channel p in B (2 * NR floats from
            // `o + p * cps`) and this row of A (MR floats) are within the caller's
            // bounds; A advances by one row per step.
            unsafe {
                let bp = b.add(o + p * cps);
                let v0 = _mm512_loadu_ps(bp);
                let v1 = _mm512_loadu_ps(bp.add(NR));
                for r in 0..MR {
                    let va = _mm512_set1_ps(*ap.add(r));
                    s0[r] = _mm512_fmadd_ps(va, v0, s0[r]);
                    s1[r] = _mm512_fmadd_ps(va, v1, s1[r]);
                }
                ap = ap.add(MR);
            }
        }
    }
    for r in 0..MR {
        // SAFETY: row r of C is within the caller's bounds.
        unsafe {
            _mm512_storeu_ps(c.add(r * ldc), s0[r]);
            _mm512_storeu_ps(c.add(r * ldc + NR), s1[r]);
        }
    }
}
