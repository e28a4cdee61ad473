//! The AMX-BF16 row run of a direct conv: 32 plane positions x 32 output channels per
//! tile, four 16x16 f32 accumulator tiles fed by `tdpbf16ps` (1024 bf16 products into
//! 256 lanes per instruction), K in blocks of [`KB`] channel pairs, one tap at a time,
//! each block transposed into 32 channel rows of 32 positions on the way out.
//!
//! Operands (the direct conv's position-major phase planes,
//! `crate::kernels::conv::direct`): the A tile of pair block `pb`, tap `t` and
//! positions `f..f + 16` is 16 lines (one per position, `cp` dwords apart) of 16 pairs
//! starting at `offs[t] + f * cp + 16 pb`, loaded in place; every line starts a cache
//! line whatever the tap, since `cp` is a multiple of 16 dwords. B: per 32-channel
//! panel, one step `s = pb * taps + t` after the other, each two 1 KiB tiles (channels
//! 0-15, then 16-31) of 16 pair lines ([`A_STEP`] dwords; `direct::wide_index`).
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
use crate::kernels::conv::direct::{NhwcOut, WideOut};
use crate::kernels::conv::direct::{WIDE_KB as KB, WIDE_ROWS as ROWS, WIDE_STEP as A_STEP};
use std::arch::asm;

// The asm below addresses the second A tile 1 KiB on and the second B and C tiles 64
// bytes on: 16-row tiles of 16 dwords.
const _: () = assert!(KB == 16 && ROWS == 32 && WIDTH == 32 && A_STEP == 512);

/// True when this CPU has AMX-TILE and AMX-BF16, the AVX-512 F/BW and AVX512_BF16 the
/// packing and transposes around the tiles use, and the kernel lets this process use
/// the tile data (asked once; the answer is kept).
pub fn available() -> bool {
    static OK: once_cell::sync::OnceCell<bool> = once_cell::sync::OnceCell::new();
    *OK.get_or_init(|| {
        if std::arch::x86_64::__cpuid(0).eax < 7 {
            return false;
        }
        let l7 = std::arch::x86_64::__cpuid_count(7, 0);
        let (amx_bf16, amx_tile) = (l7.edx & (1 << 22) != 0, l7.edx & (1 << 24) != 0);
        let vectors = is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512bf16");
        if !amx_bf16 || !amx_tile || !vectors {
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
/// A_h · B_w` (accumulator `2 h + w`). Each product follows the load it needs (a tile
/// load took ~14 ns on a 2.6 GHz Xeon VM, a product ~6: this order ran a hot 2 x 2
/// loop at 511 GMAC/s against 443 with both B loads first).
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
            "tdpbf16ps tmm0, tmm4, tmm6",
            "tileloadd tmm7, [{b1} + {sb}*1]",
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
/// Σ_pb Σ_t Σ_q A[(pb * taps + t) * A_STEP + (r / 16) * 256 + q * 16 + r % 16] ·
/// B[offs[t] + (f0 + i * WIDTH + j) * cp + pb * KB + q]` for `r < ROWS`, `j < WIDTH`,
/// written to `c` at stride `ldc`; `cp` (a multiple of [`KB`]) channel pairs per
/// position. Panics unless every access stays inside the operands, or when AMX is not
/// [`available`].
pub fn rows(
    a: &[u32],
    b: &[u32],
    offs: &[usize],
    cp: usize,
    (f0, tiles): (usize, usize),
    c: &mut [f32],
    ldc: usize,
) {
    assert!(
        tiles == 0 || (ldc >= tiles * WIDTH && c.len() >= (ROWS - 1) * ldc + tiles * WIDTH),
        "amx rows: short C"
    );
    run_tiles(a, b, offs, cp, (f0, tiles), |i, block| {
        transpose_into(block, &mut c[i * WIDTH..], ldc)
    });
}

/// [`rows`] stored straight into the output where `out` says (plane position `f` at
/// output position `out.base + f`), through `out.epi`. Panics as [`rows`] does, or
/// unless every store stays inside `out.y` ([`WideOut::check`]).
pub fn store_rows(
    a: &[u32],
    b: &[u32],
    offs: &[usize],
    cp: usize,
    (f0, tiles): (usize, usize),
    out: &mut WideOut<'_>,
) {
    out.check();
    if out.rows.0 == out.rows.1 {
        return;
    }
    run_tiles(a, b, offs, cp, (f0, tiles), |i, block| {
        store_out(block, f0 + i * WIDTH, out)
    });
}

/// [`rows`] stored into a channels-last output where `out` says (plane position `f`
/// at output position `f / wq * OW + f % wq`, columns past the output dropped), through
/// `out.epi`. Panics as [`rows`] does, or unless every store stays inside `out.y`
/// ([`NhwcOut::check`]).
pub fn store_nhwc(
    a: &[u32],
    b: &[u32],
    offs: &[usize],
    cp: usize,
    (f0, tiles): (usize, usize),
    out: &mut NhwcOut<'_>,
) {
    out.check();
    if out.chans == 0 {
        return;
    }
    run_tiles(a, b, offs, cp, (f0, tiles), |i, block| {
        store_positions(block, f0 + i * WIDTH, out)
    });
}

/// Stores a position-major block (`src[j * WIDTH + r]`: plane position `f + j`, panel
/// row `r`) into the channels-last output, one position's channels (two vectors) at a
/// time, through the epilogue.
fn store_positions(src: &[f32; ROWS * WIDTH], f: usize, out: &mut NhwcOut<'_>) {
    // SAFETY: AVX-512 F is present (`run_tiles` asserted `available`, which requires
    // it); `out.check` held on entry to `store_nhwc`.
    unsafe { store_positions_512(src, f, out) }
}

/// [`store_positions`] with AVX-512 F.
///
/// # Safety
/// AVX-512 F available; `out` passed [`NhwcOut::check`].
#[target_feature(enable = "avx512f")]
unsafe fn store_positions_512(src: &[f32; ROWS * WIDTH], f: usize, out: &mut NhwcOut<'_>) {
    use std::arch::x86_64::*;
    let lanes = |n: usize| {
        if n >= 16 {
            0xffff
        } else {
            ((1u32 << n) - 1) as u16
        }
    };
    let masks = [lanes(out.chans), lanes(out.chans.saturating_sub(16))];
    let e = out.epi;
    let (lo, hi) = e.clamp.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
    let (lo, hi) = (_mm512_set1_ps(lo), _mm512_set1_ps(hi));
    let bias = e.bias.map(|b| {
        [0, 1].map(|h| {
            // SAFETY: the bias holds chan0 + chans floats (`out.check`): masked lanes
            // below that only.
            unsafe { _mm512_maskz_loadu_ps(masks[h], b.as_ptr().add(out.chan0 + 16 * h)) }
        })
    });
    // Plane row q and column col of position f + j, stepped along.
    let (mut q, mut col) = (f / out.wq, f % out.wq);
    for j in 0..WIDTH {
        if j > 0 {
            col += 1;
            if col == out.wq {
                (q, col) = (q + 1, 0);
            }
        }
        let p = q * out.ow + col;
        if col >= out.ow || p < out.cols.0 || p >= out.cols.1 {
            continue;
        }
        let at = p * out.cout + out.chan0;
        for h in 0..2 {
            let m = masks[h];
            if m == 0 {
                continue;
            }
            // SAFETY: block row j holds 32 floats; the masked lanes are channels chan0 +
            // 16 h.. of position p < cols.1, below chan0 + chans: inside `y` and the
            // residual (`out.check`).
            unsafe {
                let mut o = _mm512_loadu_ps(src.as_ptr().add(j * WIDTH + 16 * h));
                if let Some(b) = bias {
                    o = _mm512_add_ps(o, b[h]);
                }
                if let Some(r) = e.residual {
                    o = _mm512_add_ps(o, _mm512_maskz_loadu_ps(m, r.as_ptr().add(at + 16 * h)));
                }
                if e.clamp.is_some() {
                    o = _mm512_min_ps(_mm512_max_ps(o, lo), hi);
                }
                _mm512_mask_storeu_ps(out.y.as_mut_ptr().add(at + 16 * h), m, o);
            }
        }
    }
}

/// The products of [`rows`], each tile's 32 positions x 32 channels (position-major:
/// `block[j * WIDTH + r]`) handed to `sink` with the tile's index.
fn run_tiles(
    a: &[u32],
    b: &[u32],
    offs: &[usize],
    cp: usize,
    (f0, tiles): (usize, usize),
    mut sink: impl FnMut(usize, &[f32; ROWS * WIDTH]),
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
        let far = offs.iter().max().map_or(0, |&o| o) + (f0 + tiles * WIDTH) * cp;
        assert!(b.len() >= far, "amx rows: short planes");
    }
    let sa = cp * 4;
    let mut local = Block([0.0; ROWS * WIDTH]);
    // SAFETY: AMX-TILE/BF16 are present and permitted (`available`); the configuration
    // is a valid palette-1 layout (8 tiles of 16 x 64 bytes) in 64 aligned bytes.
    unsafe { asm!("ldtilecfg [{0}]", in(reg) CONFIG.0.as_ptr(), options(nostack)) };
    for i in 0..tiles {
        let f = f0 + i * WIDTH;
        // SAFETY: tiles configured above.
        unsafe { zero_acc() };
        for pb in 0..blocks {
            for (t, &o) in offs.iter().enumerate() {
                let pw = a[(pb * taps + t) * A_STEP..].as_ptr();
                let px = b[o + f * cp + pb * KB..].as_ptr();
                // SAFETY: the position tiles (16 lines of 64 bytes `cp` dwords apart,
                // from `px` and 16 lines on) lie inside `b` (the farthest line starts
                // at `offs[t] + (f0 + tiles * WIDTH - 1) * cp + cp - KB`, asserted);
                // the step's two weight tiles (2 KiB from `pw`) inside `a`.
                unsafe {
                    step(
                        (px, px.wrapping_add(16 * cp), sa),
                        (pw, pw.wrapping_add(256), 64),
                    )
                };
            }
        }
        // SAFETY: `local` holds 32 rows of 32 floats (128 bytes each).
        unsafe { store_acc(local.0.as_mut_ptr(), WIDTH * 4) };
        sink(i, &local.0);
    }
    // SAFETY: returns the tiles to their initial state (configured above).
    unsafe { asm!("tilerelease", options(nostack, nomem)) };
}

/// Stores a position-major block (`src[j * WIDTH + r]`: position `f + j`, panel row
/// `r`) where `out` says, 16 positions x 16 rows at a time transposed, through the
/// epilogue.
fn store_out(src: &[f32; ROWS * WIDTH], f: usize, out: &mut WideOut<'_>) {
    for h in [0, 16] {
        let (mask, q0) = out.lanes(f + h);
        if mask == 0 {
            continue;
        }
        for w in [0, 16] {
            let (r_lo, r_hi) = (out.rows.0.max(w), out.rows.1.min(w + 16));
            if r_lo >= r_hi {
                continue;
            }
            let c0 = out.chan0 + w;
            let e = out.epi;
            // SAFETY: AVX-512 F is present (`run_tiles` asserted `available`, which
            // requires it); the block reads rows h..h + 16, columns w..w + 16 of `src`;
            // the stores (and residual reads) touch channel planes c0 + k for k in
            // r_lo - w..r_hi - w (below chan0 + rows.1, inside `y` and the residual by
            // `out.check`) at the mask's lanes of positions q0.., inside `cols`, so
            // inside the plane; the bias holds those channels (checked too).
            unsafe {
                store16(
                    src.as_ptr().add(h * WIDTH + w),
                    out.y.as_mut_ptr().add(c0 * out.ohw + q0),
                    out.ohw,
                    (r_lo - w, r_hi - w, mask),
                    (
                        e.bias.map(|b| &b[c0..]),
                        e.residual
                            .map(|r| r.as_ptr().wrapping_add(c0 * out.ohw + q0)),
                        e.clamp,
                    ),
                )
            };
        }
    }
}

/// The epilogue of [`store16`]: the bias from the block's first channel, the residual
/// at the block's first output, the clamp.
type StoreEpi<'a> = (Option<&'a [f32]>, Option<*const f32>, Option<(f32, f32)>);

/// Rows `k` in `ks.0..ks.1` of the transpose of the 16 x 16 block at `src` (rows
/// `WIDTH` apart), through the epilogue `(bias, residual, clamp)` (`bias[k]` added, the
/// residual's element at `residual + k * ld + l` added, clamped), lanes `l` of mask
/// `ks.2` stored at `dst + k * ld + l`.
///
/// # Safety
/// AVX-512 F available; the block readable; the masked lanes writable at `dst` and
/// readable at `residual` for every such row; `bias` holds `ks.1` floats.
#[target_feature(enable = "avx512f")]
unsafe fn store16(
    src: *const f32,
    dst: *mut f32,
    ld: usize,
    ks: (usize, usize, u16),
    (bias, residual, clamp): StoreEpi<'_>,
) {
    use std::arch::x86_64::*;
    // SAFETY: the caller guarantees the reads and the masked writes.
    unsafe {
        let mut r = [_mm512_setzero_ps(); 16];
        for (k, v) in r.iter_mut().enumerate() {
            *v = _mm512_loadu_ps(src.add(k * WIDTH));
        }
        let t = transpose_regs(&r);
        let (lo, hi) = clamp.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
        let (lo, hi) = (_mm512_set1_ps(lo), _mm512_set1_ps(hi));
        let m = ks.2;
        for k in ks.0..ks.1 {
            let mut o = match bias {
                Some(b) => _mm512_add_ps(t[k], _mm512_set1_ps(b[k])),
                None => t[k],
            };
            if let Some(res) = residual {
                o = _mm512_add_ps(o, _mm512_maskz_loadu_ps(m, res.add(k * ld)));
            }
            if clamp.is_some() {
                o = _mm512_min_ps(_mm512_max_ps(o, lo), hi);
            }
            _mm512_mask_storeu_ps(dst.add(k * ld), m, o);
        }
    }
}

/// A 32 x 32 f32 block on its own cache lines.
#[repr(C, align(64))]
struct Block([f32; ROWS * WIDTH]);

/// `c[r * ldc + j] = src[j * WIDTH + r]` for `r < ROWS`, `j < WIDTH`: a position-major
/// block of accumulators into channel rows.
fn transpose_into(src: &[f32; ROWS * WIDTH], c: &mut [f32], ldc: usize) {
    assert!(
        ldc >= WIDTH && c.len() >= (ROWS - 1) * ldc + WIDTH,
        "amx transpose: short C"
    );
    for (h, w) in [(0, 0), (0, 16), (16, 0), (16, 16)] {
        // SAFETY: AVX-512 F is present (`run_tiles` asserted `available`, which
        // requires it, before any accumulator was stored); block (h, w) reads source rows h..h + 16, columns
        // w..w + 16, and writes rows w..w + 16, columns h..h + 16 of C, inside `c` by
        // the assert above.
        unsafe {
            transpose16(
                src.as_ptr().add(h * WIDTH + w),
                WIDTH,
                c.as_mut_ptr().add(w * ldc + h),
                ldc,
            )
        };
    }
}

/// `dst[r * ds + j] = src[j * ss + r]` for `r, j < 16`.
///
/// # Safety
/// AVX-512 F available; 16 rows of 16 floats readable at `src` (stride `ss`) and
/// writable at `dst` (stride `ds`).
#[target_feature(enable = "avx512f")]
unsafe fn transpose16(src: *const f32, ss: usize, dst: *mut f32, ds: usize) {
    use std::arch::x86_64::*;
    // SAFETY: the caller guarantees the 16 rows of 16 floats at both ends.
    unsafe {
        let mut r = [_mm512_setzero_ps(); 16];
        for (k, v) in r.iter_mut().enumerate() {
            *v = _mm512_loadu_ps(src.add(k * ss));
        }
        for (k, v) in transpose_regs(&r).iter().enumerate() {
            _mm512_storeu_ps(dst.add(k * ds), *v);
        }
    }
}

/// The transpose of 16 vectors of 16 lanes: lane `j` of result `k` is lane `k` of
/// vector `j`.
#[target_feature(enable = "avx512f")]
#[inline]
fn transpose_regs(r: &[std::arch::x86_64::__m512; 16]) -> [std::arch::x86_64::__m512; 16] {
    use std::arch::x86_64::*;
    // Pairs of rows interleaved by floats, then by float pairs: each 128-bit lane L of
    // q[4 g + m] holds column 4 L + m of rows 4 g..4 g + 4.
    let mut t = [_mm512_setzero_ps(); 16];
    for k in 0..8 {
        t[2 * k] = _mm512_unpacklo_ps(r[2 * k], r[2 * k + 1]);
        t[2 * k + 1] = _mm512_unpackhi_ps(r[2 * k], r[2 * k + 1]);
    }
    let pd = _mm512_castps_pd;
    let mut q = [_mm512_setzero_ps(); 16];
    for g in 0..4 {
        let (a, b, c, d) = (t[4 * g], t[4 * g + 1], t[4 * g + 2], t[4 * g + 3]);
        q[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(pd(a), pd(c)));
        q[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(pd(a), pd(c)));
        q[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(pd(b), pd(d)));
        q[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(pd(b), pd(d)));
    }
    // 128-bit lanes gathered: first across row groups 0/1 and 2/3, then across the
    // pairs of those.
    let mut out = [_mm512_setzero_ps(); 16];
    for m in 0..4 {
        let (a0, a1) = (
            _mm512_shuffle_f32x4::<0x88>(q[m], q[4 + m]),
            _mm512_shuffle_f32x4::<0xdd>(q[m], q[4 + m]),
        );
        let (b0, b1) = (
            _mm512_shuffle_f32x4::<0x88>(q[8 + m], q[12 + m]),
            _mm512_shuffle_f32x4::<0xdd>(q[8 + m], q[12 + m]),
        );
        out[m] = _mm512_shuffle_f32x4::<0x88>(a0, b0);
        out[m + 8] = _mm512_shuffle_f32x4::<0xdd>(a0, b0);
        out[m + 4] = _mm512_shuffle_f32x4::<0x88>(a1, b1);
        out[m + 12] = _mm512_shuffle_f32x4::<0xdd>(a1, b1);
    }
    out
}

/// Positions per call of [`pack_block`].
pub const PACK_POSITIONS: usize = 16;

/// One block of position-major planes: `dst[j * ld + q] = pair(rows[2 q][j * stride],
/// rows[2 q + 1][j * stride])` rounded to bf16 (as [`super::to_bf16`]) for `j < n` (at
/// most [`PACK_POSITIONS`]) and `q < 16`, a `None` row read as zeros. Panics unless
/// every present row holds `(n - 1) * stride + 1` floats and `dst` the `n` lines, or
/// when AVX512_BF16 is not available.
pub fn pack_block(
    rows: &[Option<&[f32]>; 32],
    stride: usize,
    n: usize,
    dst: &mut [u32],
    ld: usize,
) {
    assert!(n <= PACK_POSITIONS, "amx pack: more than 16 positions");
    if n == 0 {
        return;
    }
    let need = (n - 1) * stride + 1;
    assert!(
        rows.iter().flatten().all(|r| r.len() >= need),
        "amx pack: short row"
    );
    assert!(
        dst.len() >= (n - 1) * ld + 16,
        "amx pack: short destination"
    );
    assert!(
        is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512bf16"),
        "amx pack: AVX512_BF16 is not available"
    );
    // SAFETY: the features are detected above; every present row holds `need` floats
    // and `dst` the `n` lines of 16 dwords at stride `ld` (asserted).
    unsafe { pack_block_512(rows, stride, n, dst.as_mut_ptr(), ld) }
}

/// # Safety
/// As [`pack_block`] after its checks.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn pack_block_512(
    rows: &[Option<&[f32]>; 32],
    stride: usize,
    n: usize,
    dst: *mut u32,
    ld: usize,
) {
    use std::arch::x86_64::*;
    let consts = super::x86_64::pair_indices();
    let need = (n - 1) * stride + 1;
    // Rows read at a stride the pair loader does not take are gathered first.
    let mut staged = [[0.0f32; 16]; 32];
    let row = |q: usize, staged: &[[f32; 16]; 32]| match rows[q] {
        None => std::ptr::null(),
        Some(_) if stride > 2 => staged[q].as_ptr(),
        Some(r) => r.as_ptr(),
    };
    if stride > 2 {
        for (line, r) in staged.iter_mut().zip(rows) {
            if let Some(r) = r {
                for (j, v) in line.iter_mut().enumerate().take(n) {
                    *v = r[j * stride];
                }
            }
        }
    }
    let (s, nread) = if stride > 2 {
        (1, n)
    } else {
        (stride, (n * stride).min(need))
    };
    let mut pairs = [_mm512_setzero_ps(); 16];
    for (q, p) in pairs.iter_mut().enumerate() {
        let src = (row(2 * q, &staged), row(2 * q + 1, &staged));
        // SAFETY: each present row holds `need` floats (or is a staged 16), so the
        // `nread` floats the loader reads from 0 are inside it; the features are
        // enabled on this function.
        *p = _mm512_castsi512_ps(unsafe { super::x86_64::pairs16(src, (0, nread), s, consts) });
    }
    let t = transpose_regs(&pairs);
    for (j, v) in t.iter().enumerate().take(n) {
        // SAFETY: line j of 16 dwords at `dst + j * ld`, inside the caller's bound.
        unsafe { _mm512_storeu_ps(dst.add(j * ld).cast(), *v) };
    }
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
