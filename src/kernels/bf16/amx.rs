//! The AMX-BF16 row run of a direct conv: 32 output channels x 32 plane positions per
//! tile, four 16x16 f32 accumulator tiles fed by `tdpbf16ps` (1024 bf16 products into
//! 256 lanes per instruction), K in blocks of [`KB`] channel pairs, one tap at a time.
//!
//! Operands (the direct conv's phase planes, `crate::kernels::conv::direct`): the B tile
//! of pair block `pb`, tap `t` and position `f` is 16 plane rows (pairs `16 pb..`, one
//! plane each, `cps` dwords apart) of 16 consecutive positions starting at `offs[t] + f`,
//! loaded in place (`tileloadd` with the plane stride). A: per 32-row panel, one step
//! `s = pb * taps + t` after the other, each 32 rows of 16 pairs row-major ([`A_STEP`]
//! dwords: rows 0-15 then 16-31, each a 1 KiB tile; `direct::wide_index`).
//!
//! Sums: each output lane adds its pairs in the order the hardware's dot product takes
//! within a step, steps in order; the same for every position and channel whatever the
//! call's range, so disjoint ranges give one call's bits (not the AVX512_BF16 table's:
//! within a step the instruction's rounding is its own).
//!
//! Use of the tile registers needs the kernel's permission (`arch_prctl`
//! `ARCH_REQ_XCOMP_PERM`, asked once by [`available`]) and a tile configuration, which
//! each [`rows`] call loads on entry and releases on return: nothing else in the thread
//! can leave the tiles in a state these instructions do not expect.

use crate::kernels::conv::direct::WIDE_WIDTH as WIDTH;
use crate::kernels::conv::direct::{WIDE_KB as KB, WIDE_ROWS as ROWS, WIDE_STEP as A_STEP};
use std::arch::asm;

// The asm below addresses the second A tile 1 KiB on and the second B and C tiles 64
// bytes on: 16-row tiles of 16 dwords.
const _: () = assert!(KB == 16 && ROWS == 32 && WIDTH == 32 && A_STEP == 512);

/// True when this CPU has AMX-TILE and AMX-BF16 and the kernel lets this process use
/// the tile data (asked once; the answer is kept).
pub fn available() -> bool {
    static OK: once_cell::sync::OnceCell<bool> = once_cell::sync::OnceCell::new();
    *OK.get_or_init(|| {
        let (max, l7) = (
            std::arch::x86_64::__cpuid(0).eax,
            std::arch::x86_64::__cpuid_count(7, 0),
        );
        let (amx_bf16, amx_tile) = (l7.edx & (1 << 22) != 0, l7.edx & (1 << 24) != 0);
        if max < 7 || !amx_bf16 || !amx_tile {
            return false;
        }
        const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
        const XFEATURE_XTILEDATA: libc::c_long = 18;
        // SAFETY: a plain system call with two integer arguments; it changes nothing
        // but the process's permission to use the tile data (refused on kernels
        // without AMX support, which leaves us off).
        let r = unsafe {
            libc::syscall(
                libc::SYS_arch_prctl,
                ARCH_REQ_XCOMP_PERM,
                XFEATURE_XTILEDATA,
            )
        };
        r == 0
    })
}

/// The tile configuration: palette 1, all eight tiles 16 rows of 64 bytes.
#[repr(C, align(64))]
struct TileConfig([u8; 64]);

const CONFIG: TileConfig = {
    let mut b = [0u8; 64];
    b[0] = 1;
    let mut t = 0;
    while t < 8 {
        b[16 + 2 * t] = 64;
        b[48 + t] = 16;
        t += 1;
    }
    TileConfig(b)
};

/// Zeroes the four accumulator tiles (tmm0-3).
///
/// # Safety
/// Tiles configured with [`CONFIG`] in this thread.
#[inline(always)]
unsafe fn zero_acc() {
    // SAFETY: the caller configured the tiles.
    unsafe {
        asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            options(nostack, nomem)
        )
    }
}

/// One K step of the 2 x 2 block: A tiles from `a0` and `a1` (16 rows at stride `sa`
/// bytes), B tiles from `b0` and `b1` (16 rows at stride `sb` bytes), `acc(h, w) +=
/// A_h · B_w` (accumulator `2 h + w`).
///
/// # Safety
/// Tiles configured with [`CONFIG`]; each of the four tiles' 16 rows of 64 bytes
/// readable.
#[inline(always)]
unsafe fn step(
    (a0, a1, sa): (*const u32, *const u32, usize),
    (b0, b1, sb): (*const u32, *const u32, usize),
) {
    // SAFETY: the caller guarantees the configuration and the reads.
    unsafe {
        asm!(
            "tileloadd tmm4, [{a0} + {sa}*1]",
            "tileloadd tmm6, [{b0} + {sb}*1]",
            "tileloadd tmm7, [{b1} + {sb}*1]",
            "tdpbf16ps tmm0, tmm4, tmm6",
            "tdpbf16ps tmm1, tmm4, tmm7",
            "tileloadd tmm5, [{a1} + {sa}*1]",
            "tdpbf16ps tmm2, tmm5, tmm6",
            "tdpbf16ps tmm3, tmm5, tmm7",
            a0 = in(reg) a0,
            a1 = in(reg) a1,
            b0 = in(reg) b0,
            b1 = in(reg) b1,
            sa = in(reg) sa,
            sb = in(reg) sb,
            options(nostack, readonly)
        )
    }
}

/// Stores the accumulators as a 32 x 32 f32 block at `c`, rows `stride` bytes apart.
///
/// # Safety
/// Tiles configured with [`CONFIG`]; 32 rows of 128 bytes at `c`, `stride` apart,
/// writable.
#[inline(always)]
unsafe fn store_acc(c: *mut f32, stride: usize) {
    // SAFETY: the caller guarantees the configuration and the writes.
    unsafe {
        asm!(
            "tilestored [{c} + {cs}*1], tmm0",
            "tilestored [{c} + {cs}*1 + 64], tmm1",
            "tilestored [{c2} + {cs}*1], tmm2",
            "tilestored [{c2} + {cs}*1 + 64], tmm3",
            c = in(reg) c,
            c2 = in(reg) c.wrapping_byte_add(16 * stride),
            cs = in(reg) stride,
            options(nostack)
        )
    }
}

/// The run of `tiles` row tiles from plane position `f0`: `C[r][i * WIDTH + j] =
/// Σ_pb Σ_t Σ_q A[(pb * taps + t) * A_STEP + r * KB + q] · B[offs[t] + (pb * KB + q) *
/// cps + f0 + i * WIDTH + j]` for `r < ROWS`, `j < WIDTH`, written to `c` at stride
/// `ldc`; `cp` (a multiple of [`KB`]) channel pairs. Panics unless every access stays
/// inside the operands, or when AMX is not [`available`].
#[allow(clippy::too_many_arguments)]
pub fn rows(
    a: &[u32],
    b: &[u32],
    offs: &[usize],
    cp: usize,
    cps: usize,
    (f0, tiles): (usize, usize),
    c: &mut [f32],
    ldc: usize,
) {
    assert!(available(), "amx rows: AMX is not available");
    assert!(
        cp.is_multiple_of(KB),
        "amx rows: pairs not a multiple of {KB}"
    );
    let (taps, blocks) = (offs.len(), cp / KB);
    assert!(a.len() >= taps * blocks * A_STEP, "amx rows: short A panel");
    if tiles == 0 {
        return;
    }
    if cp > 0 && taps > 0 {
        let far = offs.iter().max().map_or(0, |&o| o) + (cp - 1) * cps + f0 + tiles * WIDTH;
        assert!(b.len() >= far, "amx rows: short planes");
    }
    assert!(
        ldc >= tiles * WIDTH && c.len() >= (ROWS - 1) * ldc + tiles * WIDTH,
        "amx rows: short C"
    );
    let (bs, cs) = (cps * 4, ldc * 4);
    // SAFETY: AMX-TILE/BF16 are present and permitted (`available`); the configuration
    // is a valid palette-1 layout (8 tiles of 16 x 64 bytes) in 64 aligned bytes.
    unsafe { asm!("ldtilecfg [{0}]", in(reg) CONFIG.0.as_ptr(), options(nostack)) };
    for i in 0..tiles {
        let f = f0 + i * WIDTH;
        // SAFETY: tiles configured above.
        unsafe { zero_acc() };
        for pb in 0..blocks {
            for (t, &o) in offs.iter().enumerate() {
                let pa = a[(pb * taps + t) * A_STEP..].as_ptr();
                let pb0 = b[o + pb * KB * cps + f..].as_ptr();
                // SAFETY: the A step (2 x 16 rows of 64 bytes from `pa`, contiguous) and
                // both B tiles (16 rows of 64 bytes at stride `cps` dwords, from `pb0` and
                // 16 dwords on) lie inside `a` and `b` by the asserts above (the
                // farthest row starts at `offs[t] + (cp - 1) * cps + f`, + 32 dwords).
                unsafe {
                    step(
                        (pa, pa.wrapping_add(256), 64),
                        (pb0, pb0.wrapping_add(16), bs),
                    )
                };
            }
        }
        let pc = c[i * WIDTH..].as_mut_ptr();
        // SAFETY: C holds ROWS rows of `tiles * WIDTH` floats at stride `ldc` (asserted):
        // tile (h, w) covers rows 16 h.. and columns i * WIDTH + 16 w.., 16 x 64 bytes.
        unsafe { store_acc(pc, cs) };
    }
    // SAFETY: returns the tiles to their initial state (configured above).
    unsafe { asm!("tilerelease", options(nostack, nomem)) };
}

/// One row block of a bf16 GEMM on AMX tiles: `C[r][j] = Σ_q A[r][q] · B[q][j]` (sums of
/// K pairs) for `r < rows` (at most [`ROWS`]) and `j < n`, written to `c` at stride
/// `ldc`. A: [`ROWS`] rows of `lda` dwords (pairs), `kp` of them used (a multiple of
/// [`KB`]); B: 16-column panels of `kp * 16` dwords (pair `q`'s 16 columns at `q * 16`),
/// `n.div_ceil(WIDTH) * 2` of them. Full 32 x 32 blocks are stored straight into C, the
/// others through a local block. Panics unless every access stays inside the operands,
/// or when AMX is not [`available`].
#[allow(clippy::too_many_arguments)]
pub fn gemm_block(
    kp: usize,
    (a, lda): (&[u32], usize),
    b: &[u32],
    (rows, n): (usize, usize),
    c: &mut [f32],
    ldc: usize,
) {
    assert!(available(), "amx gemm: AMX is not available");
    assert!(kp.is_multiple_of(KB) && lda >= kp, "amx gemm: bad depth");
    assert!(rows <= ROWS, "amx gemm: more than {ROWS} rows");
    if rows == 0 || n == 0 {
        return;
    }
    let blocks = n.div_ceil(WIDTH);
    assert!(a.len() >= (ROWS - 1) * lda + kp, "amx gemm: short A");
    assert!(b.len() >= blocks * 2 * kp * 16, "amx gemm: short B");
    assert!(
        ldc >= n && c.len() >= (rows - 1) * ldc + n,
        "amx gemm: short C"
    );
    let (la, lc) = (lda * 4, ldc * 4);
    let mut local = [0.0f32; ROWS * WIDTH];
    // SAFETY: as in `rows`: AMX present and permitted, a valid configuration.
    unsafe { asm!("ldtilecfg [{0}]", in(reg) CONFIG.0.as_ptr(), options(nostack)) };
    for jb in 0..blocks {
        // SAFETY: tiles configured above.
        unsafe { zero_acc() };
        let (b0, b1) = (2 * jb * kp * 16, (2 * jb + 1) * kp * 16);
        for s in 0..kp / KB {
            let pa = a[s * KB..].as_ptr();
            let pa1 = a[16 * lda + s * KB..].as_ptr();
            let (pb0, pb1) = (b[b0 + s * 256..].as_ptr(), b[b1 + s * 256..].as_ptr());
            // SAFETY: A tiles: 16 rows of 64 bytes at stride `lda` dwords from row 0 and
            // row 16, pairs `16 s..` (< kp <= lda); B tiles: 1 KiB from pair `16 s` of
            // panels 2 jb and 2 jb + 1; all inside the asserted lengths.
            unsafe { step((pa, pa1, la), (pb0, pb1, 64)) };
        }
        let j = jb * WIDTH;
        let cols = WIDTH.min(n - j);
        let direct = rows == ROWS && cols == WIDTH;
        let (pc, stride) = if direct {
            (c[j..].as_mut_ptr(), lc)
        } else {
            (local.as_mut_ptr(), WIDTH * 4)
        };
        // SAFETY: `direct`: C holds 32 rows of columns j..j + 32 at stride `ldc`
        // (asserted); else `local` holds 32 x 32 floats at 128-byte rows.
        unsafe { store_acc(pc, stride) };
        if !direct {
            for r in 0..rows {
                c[r * ldc + j..][..cols].copy_from_slice(&local[r * WIDTH..][..cols]);
            }
        }
    }
    // SAFETY: returns the tiles to their initial state.
    unsafe { asm!("tilerelease", options(nostack, nomem)) };
}

/// `src` rounded to bf16 (as [`super::to_bf16`]) into K pairs: `dst[q] =
/// pair(src[2q], src[2q + 1])`, a zero high half past the end; `dst` at least
/// `src.len().div_ceil(2)` dwords (only those written).
pub fn to_pairs(src: &[f32], dst: &mut [u32]) {
    let n = src.len();
    assert!(
        dst.len() >= n.div_ceil(2),
        "amx to_pairs: short destination"
    );
    assert!(
        is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bf16"),
        "amx to_pairs: AVX512_BF16 is not available"
    );
    // SAFETY: AVX-512 F and AVX512_BF16 detected above; the lengths are asserted.
    unsafe { to_pairs_512(src.as_ptr(), n, dst.as_mut_ptr()) }
}

/// # Safety
/// AVX-512 F and AVX512_BF16 available; `src` readable for `n` floats, `dst` writable
/// for `n.div_ceil(2)` dwords.
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn to_pairs_512(src: *const f32, n: usize, dst: *mut u32) {
    use std::arch::x86_64::*;
    let mut i = 0;
    while i + 32 <= n {
        // SAFETY: floats i..i + 32 and dwords i / 2..i / 2 + 16 are inside the operands.
        unsafe {
            let lo = _mm512_loadu_ps(src.add(i));
            let hi = _mm512_loadu_ps(src.add(i + 16));
            let v = _mm512_cvtne2ps_pbh(hi, lo);
            _mm512_storeu_si512(
                dst.add(i / 2).cast(),
                std::mem::transmute::<__m512bh, __m512i>(v),
            );
        }
        i += 32;
    }
    if i < n {
        let rem = n - i;
        let m_lo = if rem >= 16 { 0xffff } else { (1u32 << rem) - 1 } as u16;
        let m_hi = if rem > 16 {
            ((1u32 << (rem - 16)) - 1) as u16
        } else {
            0
        };
        let words = rem.div_ceil(2);
        let m_out = ((1u32 << words) - 1) as u16;
        // SAFETY: masked loads read floats i..n only; the masked store writes dwords
        // i / 2..(n + 1) / 2 only.
        unsafe {
            let lo = _mm512_maskz_loadu_ps(m_lo, src.add(i));
            let hi = _mm512_maskz_loadu_ps(m_hi, src.add((i + 16).min(n)));
            let v = _mm512_cvtne2ps_pbh(hi, lo);
            let v = std::mem::transmute::<__m512bh, __m512i>(v);
            _mm512_mask_storeu_epi32(dst.add(i / 2).cast(), m_out, v);
        }
    }
}
