//! AVX2 2-D transpose of 32-bit elements (table entry `transpose32` of the AVX2 and
//! AVX-512 tables): whole 8x8 blocks transposed in registers (eight row loads, the
//! depthwise block kernel's `transpose8`, eight row stores), three rows into dense
//! three-element rows (an RGB image into channels-last pixels) by lane permutes, the
//! edges through the portable body.
//!
//! Reachable only through those tables, handed out after detecting AVX2 (and FMA).

use crate::kernels::body::transpose::{check, transpose32 as portable};
use std::arch::x86_64::*;

/// Lanes of one vector (the block side).
const L: usize = 8;

/// `dst[c * ds + r] = src[r * ss + c]` for `r < rows`, `c < cols`.
pub(super) fn transpose32(
    src: &[u32],
    ss: usize,
    dst: &mut [u32],
    ds: usize,
    rows: usize,
    cols: usize,
) {
    check(src, ss, dst, ds, rows, cols);
    if ds < rows {
        // Overlapping destination rows: the portable body's write order decides.
        return portable(src, ss, dst, ds, rows, cols);
    }
    if rows == 3 && ds == 3 {
        // SAFETY: AVX2 was detected with the table; `check` bounds 3 rows of `cols` in
        // `src` and `3 * cols` elements of `dst`.
        return unsafe { interleave3(src, ss, dst, cols) };
    }
    let (rf, cf) = (rows / L * L, cols / L * L);
    for c0 in (0..cf).step_by(L) {
        for r0 in (0..rf).step_by(L) {
            // SAFETY: AVX2 was detected with the table; rows r0..r0 + 8 of `src` hold
            // columns c0..c0 + 8 and rows c0..c0 + 8 of `dst` columns r0..r0 + 8
            // (`check` bounds rows x cols, and both blocks lie inside it).
            unsafe {
                block8(
                    src.as_ptr().add(r0 * ss + c0),
                    ss,
                    dst.as_mut_ptr().add(c0 * ds + r0),
                    ds,
                )
            };
        }
    }
    // The right edge (columns past cf, every row), then the bottom one.
    if cf < cols {
        portable(&src[cf..], ss, &mut dst[cf * ds..], ds, rows, cols - cf);
    }
    if rf < rows && cf > 0 {
        portable(&src[rf * ss..], ss, &mut dst[rf..], ds, rows - rf, cf);
    }
}

/// Three rows into three-element destination rows (`ds == 3`: an image's three channel
/// planes into channels-last pixels): each 8 columns from the three rows (three loads)
/// become 24 contiguous elements (three stores) through lane permutes and blends.
///
/// # Safety
/// AVX2 available; `src` holds 3 rows of stride `ss` with `cols` elements each and
/// `dst` holds `3 * cols` elements (the caller's `check`).
#[target_feature(enable = "avx2")]
unsafe fn interleave3(src: &[u32], ss: usize, dst: &mut [u32], cols: usize) {
    // Output vector k takes lane i from row `ROW[k][i]`, column `c0 + COL[k][i]`.
    const IA: [[i32; 8]; 3] = [
        [0, 0, 0, 1, 0, 0, 2, 0],
        [0, 3, 0, 0, 4, 0, 0, 5],
        [0, 0, 6, 0, 0, 7, 0, 0],
    ];
    const IB: [[i32; 8]; 3] = [
        [0, 0, 0, 0, 1, 0, 0, 2],
        [0, 0, 3, 0, 0, 4, 0, 0],
        [5, 0, 0, 6, 0, 0, 7, 0],
    ];
    const IC: [[i32; 8]; 3] = [
        [0, 0, 0, 0, 0, 1, 0, 0],
        [2, 0, 0, 3, 0, 0, 4, 0],
        [0, 5, 0, 0, 6, 0, 0, 7],
    ];
    let cf = cols / L * L;
    // SAFETY: AVX2 per the contract; every load reads 8 elements of a row below `cf`
    // and every store writes 8 of the first `3 * cf` elements of `dst`.
    unsafe {
        let idx = |t: &[[i32; 8]; 3], k: usize| _mm256_loadu_si256(t[k].as_ptr().cast());
        let (ia, ib, ic) = (
            [idx(&IA, 0), idx(&IA, 1), idx(&IA, 2)],
            [idx(&IB, 0), idx(&IB, 1), idx(&IB, 2)],
            [idx(&IC, 0), idx(&IC, 1), idx(&IC, 2)],
        );
        let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
        for c0 in (0..cf).step_by(L) {
            let a = _mm256_loadu_ps(s.add(c0).cast());
            let b = _mm256_loadu_ps(s.add(ss + c0).cast());
            let c = _mm256_loadu_ps(s.add(2 * ss + c0).cast());
            let perm = |k: usize| {
                (
                    _mm256_permutevar8x32_ps(a, ia[k]),
                    _mm256_permutevar8x32_ps(b, ib[k]),
                    _mm256_permutevar8x32_ps(c, ic[k]),
                )
            };
            let (a0, b0, c0v) = perm(0);
            let v0 = _mm256_blend_ps::<0x24>(_mm256_blend_ps::<0x92>(a0, b0), c0v);
            let (a1, b1, c1v) = perm(1);
            let v1 = _mm256_blend_ps::<0x49>(_mm256_blend_ps::<0x24>(a1, b1), c1v);
            let (a2, b2, c2v) = perm(2);
            let v2 = _mm256_blend_ps::<0x92>(_mm256_blend_ps::<0x49>(a2, b2), c2v);
            let o = d.add(3 * c0);
            _mm256_storeu_ps(o.cast(), v0);
            _mm256_storeu_ps(o.add(L).cast(), v1);
            _mm256_storeu_ps(o.add(2 * L).cast(), v2);
        }
    }
    if cf < cols {
        portable(&src[cf..], ss, &mut dst[3 * cf..], 3, 3, cols - cf);
    }
}

/// One 8x8 block: 8 rows of 8 elements from `s` (stride `ss`) into 8 rows at `d`
/// (stride `ds`), transposed.
///
/// # Safety
/// AVX2 available; the 8 rows of 8 at `s` readable, at `d` writable.
#[target_feature(enable = "avx2")]
unsafe fn block8(s: *const u32, ss: usize, d: *mut u32, ds: usize) {
    // SAFETY: the caller's bounds; AVX per the contract (transpose8 is register-only).
    unsafe {
        let r: [__m256; L] = std::array::from_fn(|i| _mm256_loadu_ps(s.add(i * ss).cast()));
        for (i, v) in super::x86_64_dw_block_avx2::transpose8(r)
            .iter()
            .enumerate()
        {
            _mm256_storeu_ps(d.add(i * ds).cast(), *v);
        }
    }
}

#[cfg(test)]
mod tests {
    /// Every table's transpose equals the portable one over edge sizes and strides.
    #[test]
    fn tables_transpose_like_the_portable_body() {
        for (rows, cols) in [
            (1, 1),
            (7, 9),
            (8, 8),
            (16, 24),
            (17, 33),
            (85, 40),
            (3, 64),
            (3, 1),
            (3, 8),
            (3, 23),
            (3, 224),
            (2, 5),
            (4, 19),
        ] {
            // Destination rows apart and dense (three rows into RGB pixels).
            for ds in [rows + 5, rows] {
                let ss = cols + 3;
                let src: Vec<u32> = (0..rows * ss)
                    .map(|i| (i as u32).wrapping_mul(2654435761))
                    .collect();
                let mut want = vec![7u32; cols * ds];
                crate::kernels::body::transpose::transpose32(&src, ss, &mut want, ds, rows, cols);
                for r in 0..rows {
                    for c in 0..cols {
                        assert_eq!(want[c * ds + r], src[r * ss + c]);
                    }
                }
                for t in crate::kernels::isa::tables() {
                    let mut got = vec![7u32; cols * ds];
                    (t.transpose32)(&src, ss, &mut got, ds, rows, cols);
                    assert_eq!(got, want, "{} {rows}x{cols} ds {ds}", t.name);
                }
            }
        }
    }

    /// Every table's strided gather equals the portable one (strides 1-4, lengths
    /// around the vector widths, sources exactly as long as the last element needs).
    #[test]
    fn tables_gather_like_the_portable_body() {
        for stride in 1..=4usize {
            for len in [0usize, 1, 7, 8, 9, 15, 16, 17, 31, 33, 64, 101] {
                let n = len.saturating_sub(1) * stride + usize::from(len > 0);
                let src: Vec<u32> = (0..n as u32).map(|i| i.wrapping_mul(2654435761)).collect();
                let mut want = vec![7u32; len];
                crate::kernels::body::transpose::gather_words(&src, stride, &mut want);
                for (i, w) in want.iter().enumerate() {
                    assert_eq!(*w, src[i * stride]);
                }
                for t in crate::kernels::isa::tables() {
                    let mut got = vec![7u32; len];
                    (t.gather_words)(&src, stride, &mut got);
                    assert_eq!(got, want, "{} stride {stride} len {len}", t.name);
                }
            }
        }
    }
}
