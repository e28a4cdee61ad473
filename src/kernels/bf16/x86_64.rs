//! The AVX512_BF16 table: 6x32 and 6x16 tiles on `vdpbf16ps` (two bf16 products summed
//! into each f32 lane, 32 per instruction) and the panel conversion on
//! `vcvtne2ps2bf16` with a word interleave. Same bits as the portable table.
//!
//! Every entry of [`TABLE`] is a safe wrapper that checks the lengths its
//! `#[target_feature]` body relies on; the table is handed out by [`table`] only after
//! detecting AVX-512 F/BW/VL and AVX512_BF16, so each body runs only on a CPU that has
//! them.

use super::{pair, Bf16Table, MR, NR};
use crate::kernels::conv::direct::{by_positions, check_chan_tile, check_row_tile, Tiles, CW};
use std::arch::x86_64::*;

static TABLE: Bf16Table = Bf16Table {
    name: "avx512-bf16",
    tile2,
    tile1,
    pack_panel,
    conv_tiles: Tiles {
        rows: conv_tile,
        chans: conv_ctile,
        pairs: None,
    },
    pack_pairs,
    to_pairs: super::amx::to_pairs,
    wide: None,
    wide_gemm: None,
};

/// [`TABLE`] plus the AMX run of direct convs and the AMX GEMM.
static AMX_TABLE: Bf16Table = Bf16Table {
    name: "amx-bf16",
    wide: Some(crate::kernels::conv::direct::Wide {
        rows: super::amx::rows,
        store: super::amx::store_rows,
        pack: super::amx::pack_block,
        nhwc: super::amx::store_nhwc,
        pairs: super::amx::to_pairs,
    }),
    wide_gemm: Some(super::WideGemm {
        block: super::amx::gemm_block,
    }),
    ..TABLE
};

/// The AMX table, when this CPU has what [`TABLE`]'s bodies use and AMX-BF16 (which
/// the kernel lets this process use).
pub(super) fn amx_table() -> Option<&'static Bf16Table> {
    table()
        .filter(|_| super::amx::available())
        .map(|_| &AMX_TABLE)
}

/// The table, when this CPU has what its bodies use.
pub(super) fn table() -> Option<&'static Bf16Table> {
    (is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512bf16"))
    .then_some(&TABLE)
}

/// Checks that a tile of `panels` panels over `kp` pairs stays inside its operands.
fn check(kp: usize, a: &[u32], b: &[&[u32]], c: &[f32], ldc: usize, panels: usize) {
    assert!(a.len() >= kp * MR, "bf16 tile: short A panel");
    assert!(
        b.iter().all(|b| b.len() >= kp * NR),
        "bf16 tile: short B panel"
    );
    assert!(
        ldc >= panels * NR && c.len() >= (MR - 1) * ldc + panels * NR,
        "bf16 tile: short C"
    );
}

fn tile2(kp: usize, a: &[u32], b0: &[u32], b1: &[u32], c: &mut [f32], ldc: usize, acc: bool) {
    check(kp, a, &[b0, b1], c, ldc, 2);
    // SAFETY: the features were detected with the table (module doc); `check` bounds
    // every read (kp * MR of A, kp * NR of each B) and write (MR rows of 2 * NR at ldc).
    unsafe {
        tile2_512(
            kp,
            a.as_ptr(),
            b0.as_ptr(),
            b1.as_ptr(),
            c.as_mut_ptr(),
            ldc,
            acc,
        )
    }
}

fn tile1(kp: usize, a: &[u32], b: &[u32], c: &mut [f32], ldc: usize, acc: bool) {
    check(kp, a, &[b], c, ldc, 1);
    // SAFETY: as for `tile2`, with one panel of NR columns.
    unsafe { tile1_512(kp, a.as_ptr(), b.as_ptr(), c.as_mut_ptr(), ldc, acc) }
}

/// The pair `a` broadcast to every lane.
#[inline(always)]
fn bcast(a: u32) -> __m512bh {
    // SAFETY: a plain bit reinterpretation of one register (AVX-512 F is enabled in every
    // caller, which are `#[target_feature]` functions inlining this).
    unsafe { std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(a as i32)) }
}

/// # Safety
/// AVX-512 F and AVX512_BF16 available; `a` readable for `kp * MR` dwords, `b0` and `b1`
/// for `kp * NR`; `c` writable for MR rows of `2 * NR` floats at stride `ldc`.
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn tile2_512(
    kp: usize,
    a: *const u32,
    b0: *const u32,
    b1: *const u32,
    c: *mut f32,
    ldc: usize,
    acc: bool,
) {
    let mut s0 = [_mm512_setzero_ps(); MR];
    let mut s1 = [_mm512_setzero_ps(); MR];
    if acc {
        for r in 0..MR {
            // SAFETY: row r of C is within the caller's bounds.
            unsafe {
                s0[r] = _mm512_loadu_ps(c.add(r * ldc));
                s1[r] = _mm512_loadu_ps(c.add(r * ldc + NR));
            }
        }
    }
    for p in 0..kp {
        // SAFETY: pair p of each panel is within the caller's bounds.
        let (v0, v1, ap) = unsafe {
            (
                std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(b0.add(p * NR).cast())),
                std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(b1.add(p * NR).cast())),
                a.add(p * MR),
            )
        };
        for r in 0..MR {
            // SAFETY: dword r of A's pair row p is within the caller's bounds.
            let va = bcast(unsafe { *ap.add(r) });
            s0[r] = _mm512_dpbf16_ps(s0[r], va, v0);
            s1[r] = _mm512_dpbf16_ps(s1[r], va, v1);
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

/// # Safety
/// As [`tile2_512`] with one panel `b` and NR columns of C.
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn tile1_512(kp: usize, a: *const u32, b: *const u32, c: *mut f32, ldc: usize, acc: bool) {
    let mut s = [_mm512_setzero_ps(); MR];
    if acc {
        for (r, v) in s.iter_mut().enumerate() {
            // SAFETY: row r of C is within the caller's bounds.
            *v = unsafe { _mm512_loadu_ps(c.add(r * ldc)) };
        }
    }
    for p in 0..kp {
        // SAFETY: pair p of the panel is within the caller's bounds.
        let (v, ap) = unsafe {
            (
                std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(b.add(p * NR).cast())),
                a.add(p * MR),
            )
        };
        for (r, acc) in s.iter_mut().enumerate() {
            // SAFETY: dword r of A's pair row p is within the caller's bounds.
            let va = bcast(unsafe { *ap.add(r) });
            *acc = _mm512_dpbf16_ps(*acc, va, v);
        }
    }
    for (r, v) in s.iter().enumerate() {
        // SAFETY: row r of C is within the caller's bounds.
        unsafe { _mm512_storeu_ps(c.add(r * ldc), *v) };
    }
}

fn pack_panel(src: &[f32], kc: usize, dst: &mut [u32]) {
    assert!(src.len() >= kc * NR, "bf16 pack_panel: short source");
    assert!(
        dst.len() >= kc.div_ceil(2) * NR,
        "bf16 pack_panel: short destination"
    );
    // SAFETY: the features were detected with the table (module doc); the lengths were
    // just checked.
    unsafe { pack_panel_512(src.as_ptr(), kc, dst.as_mut_ptr()) }
}

/// Word `2j` from word `j` (row 2q), word `2j + 1` from word `16 + j` (row 2q + 1).
static INTERLEAVE: [u16; 32] = {
    let mut t = [0u16; 32];
    let mut j = 0;
    while j < 16 {
        t[2 * j] = j as u16;
        t[2 * j + 1] = 16 + j as u16;
        j += 1;
    }
    t
};

/// # Safety
/// AVX-512 F/BW and AVX512_BF16 available; `src` readable for `kc * NR` floats, `dst`
/// writable for `kc.div_ceil(2) * NR` dwords.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn pack_panel_512(src: *const f32, kc: usize, dst: *mut u32) {
    // SAFETY: INTERLEAVE holds 64 bytes.
    let idx = unsafe { _mm512_loadu_si512(INTERLEAVE.as_ptr().cast()) };
    for q in 0..kc.div_ceil(2) {
        // SAFETY: rows 2q and (when it exists) 2q + 1 are within `kc` rows of `src`;
        // pair row q is within `dst`.
        unsafe {
            let lo = _mm512_loadu_ps(src.add(2 * q * NR));
            let hi = if 2 * q + 1 < kc {
                _mm512_loadu_ps(src.add((2 * q + 1) * NR))
            } else {
                _mm512_setzero_ps()
            };
            let h = std::mem::transmute::<__m512bh, __m512i>(_mm512_cvtne2ps_pbh(hi, lo));
            _mm512_storeu_si512(dst.add(q * NR).cast(), _mm512_permutexvar_epi16(idx, h));
        }
    }
}

fn conv_tile(
    a: &[u32],
    b: &[u32],
    offs: &[usize],
    cp: usize,
    cps: usize,
    c: &mut [f32],
    ldc: usize,
) {
    check_row_tile((a.len(), b.len(), c.len()), offs, cp, cps, ldc);
    // SAFETY: the features were detected with the table (module doc); the asserts bound
    // every read (`offs.len() * cp * MR` dwords of A; for each tap, `cp` rows of 2 * NR
    // dwords of B from `offs[t]` at stride `cps`) and write (MR rows of 2 * NR at ldc).
    unsafe { conv_tile_512(a.as_ptr(), b.as_ptr(), offs, cp, cps, c.as_mut_ptr(), ldc) }
}

/// # Safety
/// AVX-512 F and AVX512_BF16 available; the reads and writes [`conv_tile`] checks are in
/// bounds.
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn conv_tile_512(
    a: *const u32,
    b: *const u32,
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
            // SAFETY: this tap's pair row of channel pair p in B (2 * NR dwords from
            // `o + p * cps`) and this row of A (MR dwords) are within the caller's
            // bounds; A advances by one row per step.
            unsafe {
                let bp = b.add(o + p * cps);
                let v0 = std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(bp.cast()));
                let v1 =
                    std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(bp.add(NR).cast()));
                for r in 0..MR {
                    let va = bcast(*ap.add(r));
                    s0[r] = _mm512_dpbf16_ps(s0[r], va, v0);
                    s1[r] = _mm512_dpbf16_ps(s1[r], va, v1);
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

#[allow(clippy::too_many_arguments)]
fn conv_ctile(
    a: &[u32],
    b: &[u32],
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
    // SAFETY: the features were detected with the table (module doc); the asserts bound
    // every read (`offs.len() * cp * CW` dwords of A; per position, tap and pair, one
    // dword of B at `pos[j] + offs[t] + p * cps`) and write (`n` rows of CW floats).
    unsafe {
        by_positions!(n, conv_ctile_512(a, b, pos, offs, cp, cps, c, acc));
    }
}

/// # Safety
/// AVX-512 F and AVX512_BF16 available; `pos.len() == N`; the reads and writes
/// [`conv_ctile`] checks are in bounds.
#[target_feature(enable = "avx512f,avx512bf16")]
#[allow(clippy::too_many_arguments)]
unsafe fn conv_ctile_512<const N: usize>(
    a: *const u32,
    b: *const u32,
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
        // SAFETY: pair p's plane start is within the caller's bounds (cp > 0 here).
        let bp = unsafe { b.add(p * cps) };
        for &o in offs {
            // SAFETY: this step's A row (CW dwords) and each position's pair at
            // `pos[j] + o` of pair p are within the caller's bounds; A advances by one
            // row per step.
            unsafe {
                let a0 = std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(ap.cast()));
                let a1 =
                    std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(ap.add(NR).cast()));
                let bo = bp.add(o);
                for j in 0..N {
                    let vb = bcast(*bo.add(pos[j]));
                    s0[j] = _mm512_dpbf16_ps(s0[j], vb, a0);
                    s1[j] = _mm512_dpbf16_ps(s1[j], vb, a1);
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

fn pack_pairs(lo: &[f32], hi: Option<&[f32]>, stride: usize, dst: &mut [u32]) {
    let n = dst.len();
    if n == 0 {
        return;
    }
    let need = (n - 1) * stride + 1;
    assert!(
        lo.len() >= need && hi.is_none_or(|h| h.len() >= need),
        "bf16 pack_pairs: short source"
    );
    let len = hi.map_or(lo.len(), |h| h.len().min(lo.len()));
    let hp = hi.map_or(std::ptr::null(), |h| h.as_ptr());
    // SAFETY: the features were detected with the table (module doc); `len` floats of
    // each source are readable (null `hp`: no high row) and `n` dwords of `dst` writable.
    unsafe { pack_pairs_512(lo.as_ptr(), hp, len, stride, dst.as_mut_ptr(), n) }
}

/// Even elements of two vectors of 16: 0, 2, .., 30 of their concatenation.
static EVEN: [u32; 16] = {
    let mut t = [0u32; 16];
    let mut j = 0;
    while j < 16 {
        t[j] = 2 * j as u32;
        j += 1;
    }
    t
};

/// 16 floats of a row (stride 1 or 2) from float `start`, reading only its first `nread`
/// floats (the others count as zero); zeros for a null row.
///
/// # Safety
/// AVX-512 F available; `p` null or readable for `start + nread` floats.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn load16(
    p: *const f32,
    start: usize,
    nread: usize,
    stride: usize,
    even: __m512i,
) -> __m512 {
    let m = |n: usize| -> __mmask16 { ((1u32 << n.min(16)) - 1) as __mmask16 };
    // SAFETY: the masked loads touch only floats `start..start + nread`, within the
    // caller's bounds.
    unsafe {
        if p.is_null() {
            _mm512_setzero_ps()
        } else if stride == 1 {
            _mm512_maskz_loadu_ps(m(nread), p.add(start))
        } else {
            let a = _mm512_maskz_loadu_ps(m(nread), p.add(start));
            let b = _mm512_maskz_loadu_ps(m(nread.saturating_sub(16)), p.add(start + 16));
            _mm512_permutex2var_ps(a, even, b)
        }
    }
}

/// The permute indices of [`pairs16`]: the word interleave and the even floats.
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) fn pair_indices() -> (__m512i, __m512i) {
    // SAFETY: INTERLEAVE and EVEN hold 64 bytes each.
    unsafe {
        (
            _mm512_loadu_si512(INTERLEAVE.as_ptr().cast()),
            _mm512_loadu_si512(EVEN.as_ptr().cast()),
        )
    }
}

/// 16 K pairs from two rows (stride 1 or 2, from float `start`, reading `nread` floats
/// of each, as [`load16`]): dword `j` = `pair(lo[j * stride], hi[j * stride])`, rounded
/// to bf16; `(idx, even)` from [`pair_indices`].
///
/// # Safety
/// AVX-512 F/BW and AVX512_BF16 available; each row null or readable for `start +
/// nread` floats.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
#[inline]
pub(super) unsafe fn pairs16(
    (lo, hi): (*const f32, *const f32),
    (start, nread): (usize, usize),
    stride: usize,
    (idx, even): (__m512i, __m512i),
) -> __m512i {
    // SAFETY: the caller guarantees the reads; the rest is register work.
    unsafe {
        let (l, h) = (
            load16(lo, start, nread, stride, even),
            load16(hi, start, nread, stride, even),
        );
        let w = std::mem::transmute::<__m512bh, __m512i>(_mm512_cvtne2ps_pbh(h, l));
        _mm512_permutexvar_epi16(idx, w)
    }
}

/// # Safety
/// AVX-512 F/BW and AVX512_BF16 available; `lo` (and `hi` unless null) readable for
/// `len >= (n - 1) * stride + 1` floats, `dst` writable for `n` dwords.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn pack_pairs_512(
    lo: *const f32,
    hi: *const f32,
    len: usize,
    stride: usize,
    dst: *mut u32,
    n: usize,
) {
    if stride > 2 {
        for j in 0..n {
            // SAFETY: j * stride < len by the caller's bound on n.
            unsafe {
                let h = if hi.is_null() {
                    0.0
                } else {
                    *hi.add(j * stride)
                };
                *dst.add(j) = pair(*lo.add(j * stride), h);
            }
        }
        return;
    }
    let (idx, even) = pair_indices();
    let mut j = 0;
    while j < n {
        let r = (n - j).min(16);
        // Floats of this group inside the rows (at stride 2 the last group's odd
        // neighbour may lie past them).
        let (start, nread) = (j * stride, (r * stride).min(len - j * stride));
        // SAFETY: `load16` reads floats `start..start + nread`, within `len`; dwords
        // j..j + r of `dst` are within `n`.
        unsafe {
            let w = pairs16((lo, hi), (start, nread), stride, (idx, even));
            _mm512_mask_storeu_epi32(dst.add(j).cast(), ((1u32 << r) - 1) as __mmask16, w);
        }
        j += r;
    }
}
