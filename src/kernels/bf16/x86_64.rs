//! The AVX512_BF16 table: 6x32 and 6x16 tiles on `vdpbf16ps` (two bf16 products summed
//! into each f32 lane, 32 per instruction) and the panel conversion on
//! `vcvtne2ps2bf16` with a word interleave. Same bits as the portable table.
//!
//! Every entry of [`TABLE`] is a safe wrapper that checks the lengths its
//! `#[target_feature]` body relies on; the table is handed out by [`table`] only after
//! detecting AVX-512 F/BW/VL and AVX512_BF16, so each body runs only on a CPU that has
//! them.

use super::{Bf16Table, MR, NR};
use std::arch::x86_64::*;

static TABLE: Bf16Table = Bf16Table {
    name: "avx512-bf16",
    tile2,
    tile1,
    pack_panel,
};

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
