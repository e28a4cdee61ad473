//! The AVX-512 tiles of the f32 direct conv (`kernels::conv::direct`), sums over input
//! channels and taps: the row tile, 6 rows x 32 positions (two vectors) with one
//! broadcast weight and two plane loads per step, alone or in pairs (12 rows sharing
//! the plane loads), and the channel tile, up to 8 positions x 32 channels with two
//! weight loads and one broadcast plane element per position and step, its sums resumable
//! across K blocks. Same bits as `conv::direct::conv_tile_f32` / `conv_ctile_f32`.

use super::{MR, NR};
use crate::kernels::conv::direct::{by_positions, check_chan_tile, check_row_tile, Tiles, CW};
use std::arch::x86_64::*;

/// The AVX-512 tiles.
pub(super) const TILES: Tiles<f32> = Tiles {
    rows: conv_tile,
    chans: conv_ctile,
    pairs: Some(conv_tile_pair),
};

/// Two row tiles at once (`Tiles::pairs`): 2 * MR channels x 2 * NR positions, the
/// weights of each half from its own MR-row panel, one plane load pair per step for
/// 24 products (the AVX-512 table handed out only after detecting AVX-512 F).
fn conv_tile_pair(
    a: &[f32],
    b: &[f32],
    offs: &[usize],
    cp: usize,
    cps: usize,
    c: &mut [f32],
    ldc: usize,
) {
    let half = offs.len() * cp * MR;
    let rest = (a.len() - half.min(a.len()), b.len(), c.len());
    check_row_tile(rest, offs, cp, cps, ldc);
    let short = c.len() < (2 * MR - 1) * ldc + 2 * NR;
    assert!(!short, "conv pair tile: short C");
    // SAFETY: AVX-512 F was detected with the table; the asserts bound every read
    // (two panels of `offs.len() * cp * MR` floats of A; per tap, `cp` rows of 2 * NR
    // floats of B from `offs[t]` at stride `cps`) and write (2 * MR rows of 2 * NR at
    // `ldc`).
    unsafe {
        tiles_512::<2>(
            (a.as_ptr(), half),
            b.as_ptr(),
            offs,
            (cp, cps),
            c.as_mut_ptr(),
            ldc,
        )
    }
}

/// [`crate::kernels::conv::direct::ConvTile`] on AVX-512 (the table is handed out only
/// after detecting AVX-512 F).
fn conv_tile(
    a: &[f32],
    b: &[f32],
    offs: &[usize],
    cp: usize,
    cps: usize,
    c: &mut [f32],
    ldc: usize,
) {
    check_row_tile((a.len(), b.len(), c.len()), offs, cp, cps, ldc);
    // SAFETY: AVX-512 F was detected with the table; the asserts bound every read
    // (`offs.len() * cp * MR` floats of A; per tap, `cp` rows of 2 * NR floats of B
    // from `offs[t]` at stride `cps`) and write (MR rows of 2 * NR at `ldc`).
    unsafe {
        tiles_512::<1>(
            (a.as_ptr(), 0),
            b.as_ptr(),
            offs,
            (cp, cps),
            c.as_mut_ptr(),
            ldc,
        )
    }
}

/// `P` row tiles side by side: panel `q`'s weights from `a + q * half`, its MR rows of
/// C from row `q * MR`; every output one chain of fused multiply-adds in K order.
///
/// # Safety
/// AVX-512 F available; the reads and writes [`conv_tile`] / [`conv_tile_pair`] check
/// are in bounds.
#[target_feature(enable = "avx512f,fma")]
unsafe fn tiles_512<const P: usize>(
    (a, half): (*const f32, usize),
    b: *const f32,
    offs: &[usize],
    (cp, cps): (usize, usize),
    c: *mut f32,
    ldc: usize,
) {
    let mut s0 = [[_mm512_setzero_ps(); MR]; P];
    let mut s1 = [[_mm512_setzero_ps(); MR]; P];
    let mut ap = a;
    for p in 0..cp {
        for &o in offs {
            // SAFETY: this tap's row of channel p in B (2 * NR floats from
            // `o + p * cps`) and this step's row of each panel (MR floats, panel q
            // `q * half` floats on) are within the caller's bounds.
            unsafe {
                let bp = b.add(o + p * cps);
                let v0 = _mm512_loadu_ps(bp);
                let v1 = _mm512_loadu_ps(bp.add(NR));
                for q in 0..P {
                    for r in 0..MR {
                        let va = _mm512_set1_ps(*ap.add(q * half + r));
                        s0[q][r] = _mm512_fmadd_ps(va, v0, s0[q][r]);
                        s1[q][r] = _mm512_fmadd_ps(va, v1, s1[q][r]);
                    }
                }
                ap = ap.add(MR);
            }
        }
    }
    for q in 0..P {
        for r in 0..MR {
            // SAFETY: row q * MR + r of C is within the caller's bounds.
            unsafe {
                let row = c.add((q * MR + r) * ldc);
                _mm512_storeu_ps(row, s0[q][r]);
                _mm512_storeu_ps(row.add(NR), s1[q][r]);
            }
        }
    }
}

/// [`crate::kernels::conv::direct::ChanTile`] on AVX-512 (the table is handed out only
/// after detecting AVX-512 F).
#[allow(clippy::too_many_arguments)]
fn conv_ctile(
    a: &[f32],
    b: &[f32],
    pos: &[usize],
    offs: &[usize],
    cp: usize,
    cps: usize,
    c: &mut [f32],
    acc: bool,
) {
    let n = pos.len();
    check_chan_tile((a.len(), b.len(), c.len()), pos, offs, cp, cps);
    let (a, b, c) = (a.as_ptr(), b.as_ptr(), c.as_mut_ptr());
    // SAFETY: AVX-512 F was detected with the table; the asserts bound every read
    // (`offs.len() * cp * CW` floats of A; per position, tap and channel, one float of B
    // at `pos[j] + offs[t] + p * cps`) and write (`n` rows of CW floats of C).
    unsafe {
        by_positions!(n, ctile_512(a, b, pos, offs, cp, cps, c, acc));
    }
}

/// # Safety
/// AVX-512 F available; `pos.len() == N`; the reads and writes [`conv_ctile`] checks
/// are in bounds.
#[target_feature(enable = "avx512f,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn ctile_512<const N: usize>(
    a: *const f32,
    b: *const f32,
    pos: &[usize],
    offs: &[usize],
    cp: usize,
    cps: usize,
    c: *mut f32,
    acc: bool,
) {
    let mut s0 = [_mm512_setzero_ps(); N];
    let mut s1 = [_mm512_setzero_ps(); N];
    if acc {
        for j in 0..N {
            // SAFETY: row j of C (CW floats) is within the caller's bounds.
            unsafe {
                s0[j] = _mm512_loadu_ps(c.add(j * CW));
                s1[j] = _mm512_loadu_ps(c.add(j * CW + NR));
            }
        }
    }
    let pos: [usize; N] = std::array::from_fn(|j| pos[j]);
    let mut ap = a;
    for p in 0..cp {
        // SAFETY: channel p's plane start is within the caller's bounds (cp > 0 here).
        let bp = unsafe { b.add(p * cps) };
        for &o in offs {
            // SAFETY: this step's A row (CW floats) and each position's element at
            // `pos[j] + o` of channel p are within the caller's bounds; A advances by
            // one row per step.
            unsafe {
                let a0 = _mm512_loadu_ps(ap);
                let a1 = _mm512_loadu_ps(ap.add(NR));
                let bo = bp.add(o);
                for j in 0..N {
                    let vb = _mm512_set1_ps(*bo.add(pos[j]));
                    s0[j] = _mm512_fmadd_ps(vb, a0, s0[j]);
                    s1[j] = _mm512_fmadd_ps(vb, a1, s1[j]);
                }
                ap = ap.add(CW);
            }
        }
    }
    for j in 0..N {
        // SAFETY: row j of C (CW floats) is within the caller's bounds.
        unsafe {
            _mm512_storeu_ps(c.add(j * CW), s0[j]);
            _mm512_storeu_ps(c.add(j * CW + NR), s1[j]);
        }
    }
}
