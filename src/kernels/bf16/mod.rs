//! bf16 compute (`VNPU_PRECISION=bf16`): GEMM products of bf16 operands accumulated in
//! f32, as AVX512_BF16's `vdpbf16ps` computes them, for dense convs and Gemm / MatMul
//! with constant weights.
//!
//! Layout (K pairs, like the int8 path's K quads): a packed operand holds, for each pair
//! of K rows `(2q, 2q + 1)`, one dword per element whose low half is the bf16 of row `2q`
//! and whose high half that of row `2q + 1` (a zero when K is odd). A ([`pack_a`]):
//! K blocks of [`KC`] rows, each a run of [`MR`]-row panels of `kp * MR` dwords (`kp`
//! pairs of the block). B: [`NR`]-column panels of `kp * NR` dwords, per K block.
//!
//! Invariants: every tile entry of a [`Bf16Table`] gives the same bits as the portable
//! table (the instruction emulated exactly: per pair, the odd product is added before
//! the even one, each as a fused multiply-add rounded to nearest even, denormal inputs
//! read as zero and denormal results flushed to zero); f32 → bf16 conversion rounds to
//! nearest even, flushes denormals to zero and quiets NaNs ([`to_bf16`]). Accumulation,
//! bias, post-ops and residuals stay f32; so do the tensors between nodes.

#[cfg(target_arch = "x86_64")]
pub mod amx;
mod conv;
mod direct;
mod gemm;
mod portable;
#[cfg(target_arch = "x86_64")]
mod x86_64;

#[cfg(test)]
mod direct_tests;
#[cfg(test)]
mod tests;

pub use super::isa::{KC, MR, NR};
pub use conv::{conv2d_bf16, conv_scratch_len, Bf16ConvWeights};
pub use direct::{applies as direct_applies, runs_wide};
pub use direct::{conv_nhwc, nhwc_wide_applies, pack_nhwc_weights};
pub use gemm::{
    gemm_a_rows, gemm_a_rows_scratch_len, gemm_panels, pack_b, pack_b_for, packed_b_len,
    panels_scratch_len, PanelFill,
};

/// The bf16 kernels of one instruction set. Every entry is safe to call with any
/// arguments: it checks the lengths it relies on.
// The entries are plain kernel signatures, as in `KernelTable`.
#[allow(clippy::type_complexity)]
pub struct Bf16Table {
    /// Name for diagnostics (`avx512-bf16`, `portable`).
    pub name: &'static str,
    /// Two MR x NR tiles side by side: `C[.., 0..NR] = A · B0`, `C[.., NR..2NR] = A · B1`
    /// (or `C +=` when `acc`), over `kp` K pairs; `a` holds `kp * MR` dwords, `b0` and
    /// `b1` `kp * NR`, `c` MR rows of stride `ldc` and `2 * NR` columns.
    pub tile2:
        fn(kp: usize, a: &[u32], b0: &[u32], b1: &[u32], c: &mut [f32], ldc: usize, acc: bool),
    /// One MR x NR tile, as `tile2` with one panel.
    pub tile1: fn(kp: usize, a: &[u32], b: &[u32], c: &mut [f32], ldc: usize, acc: bool),
    /// A packed f32 B panel (`kc` rows of NR floats, as `gemm::pack_b` and the im2col
    /// kernels write them) into its K-pair form (`kc.div_ceil(2) * NR` dwords).
    pub pack_panel: fn(src: &[f32], kc: usize, dst: &mut [u32]),
    /// The tiles of a direct conv, sums over channel pairs and taps in that order (pair
    /// by pair, as `tile2` over a K of `offs.len() * cp` pairs): the row tile, MR rows x
    /// `2 * NR` positions (`C[r][j] = Σ_p Σ_t A[(p * taps + t) * MR + r] · B[offs[t] +
    /// p * cps + j]`, rows at stride `ldc`), and the channel tile, up to 8 positions x
    /// `2 * NR` channels (`kernels::conv::direct::ChanTile`).
    pub conv_tiles: crate::kernels::conv::direct::Tiles<u32>,
    /// K pairs from two f32 rows read at `stride`: `dst[j] = pair(lo[j * stride],
    /// hi[j * stride])` for `j < dst.len()`, a zero high half when `hi` is `None`.
    pub pack_pairs: fn(lo: &[f32], hi: Option<&[f32]>, stride: usize, dst: &mut [u32]),
    /// One contiguous f32 row into K pairs: `dst[q] = pair(src[2q], src[2q + 1])`, a
    /// zero high half past the end (`dst` at least `src.len().div_ceil(2)` dwords).
    pub to_pairs: ToPairs,
    /// The matrix-engine run of a direct conv (AMX-BF16) and its plane packer, where the
    /// CPU has one: dense convs it takes run in `direct::Tiling::Wide` (its own sums,
    /// not the tiles' bits).
    pub wide: Option<crate::kernels::conv::direct::Wide<u32>>,
    /// The matrix-engine GEMM (AMX-BF16), where the CPU has one: products with a
    /// constant B run on it (B packed by [`pack_b_for`] in its layout; its own sums).
    pub wide_gemm: Option<WideGemm>,
}

/// The matrix-engine GEMM of a bf16 table: one row block (A's rows converted by the
/// table's `to_pairs`).
#[derive(Clone, Copy)]
pub struct WideGemm {
    /// `(kp, (a, lda), b, (rows, n), c, ldc)`: `C[r][j] = Σ_q A[r][q] · B[q][j]` for up
    /// to [`wide::ROWS`] rows and `n` columns; A rows of `lda` pairs (`kp`, a multiple
    /// of [`wide::KB`], used); B in [`pack_b_for`]'s wide panels.
    #[allow(clippy::type_complexity)]
    pub block: fn(usize, (&[u32], usize), &[u32], (usize, usize), &mut [f32], usize),
}

/// The wide GEMM's geometry (the direct conv's wide run's: two 16 x 16 tiles a side).
pub mod wide {
    pub use crate::kernels::conv::direct::{WIDE_KB as KB, WIDE_ROWS as ROWS};
    /// Columns per B panel (a tile's).
    pub const PANEL: usize = 16;
}

impl std::fmt::Debug for Bf16Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Bf16Table({})", self.name)
    }
}

/// `(src, dst)`: one contiguous f32 row into K pairs, `dst[q] = pair(src[2q], src[2q +
/// 1])`, a zero high half past the end.
pub type ToPairs = fn(&[f32], &mut [u32]);

/// One 64-byte line of dwords, the unit of [`Dwords`].
#[repr(C, align(64))]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct DwordLine([u32; 16]);

/// Dwords starting a cache line (packed weights the wide run loads as matrix tiles,
/// whose rows must not cross lines: a `Vec<u32>` starts 16 bytes into one).
#[derive(Debug, Clone)]
pub struct Dwords {
    lines: crate::huge_pages::HugeVec<DwordLine>,
    len: usize,
}

impl From<Vec<u32>> for Dwords {
    fn from(v: Vec<u32>) -> Dwords {
        let mut lines =
            crate::huge_pages::HugeVec::filled(v.len().div_ceil(16), DwordLine([0; 16]));
        bytemuck::cast_slice_mut::<DwordLine, u32>(&mut lines)[..v.len()].copy_from_slice(&v);
        Dwords {
            lines,
            len: v.len(),
        }
    }
}

impl std::ops::Deref for Dwords {
    type Target = [u32];
    fn deref(&self) -> &[u32] {
        &bytemuck::cast_slice(&self.lines)[..self.len]
    }
}

/// The portable table (the exact emulation the SIMD table is tested against).
pub fn portable() -> &'static Bf16Table {
    &portable::TABLE
}

/// The best bf16 table this CPU has: `amx-bf16` (the AVX512_BF16 tiles plus the AMX
/// run of direct convs) where it has AMX-BF16 and the kernel permits it, else
/// `avx512-bf16` where it has AVX-512 F/BW/VL and AVX512_BF16, else none. The setting
/// `VNPU_BF16_KERNELS` names one of the two instead (`None` when this CPU lacks it).
pub fn native() -> Option<&'static Bf16Table> {
    #[cfg(target_arch = "x86_64")]
    {
        let wanted = crate::config::choice("VNPU_BF16_KERNELS").ok().flatten();
        let amx = x86_64::amx_table().filter(|_| wanted != Some("avx512-bf16"));
        match wanted {
            Some("amx-bf16") => amx,
            _ => amx.or_else(x86_64::table),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

/// `x` rounded to bf16 as `vcvtne2ps2bf16` does: to nearest even; zero and denormals
/// give a zero of the same sign; a NaN keeps its sign and top mantissa bits and becomes
/// quiet.
pub fn to_bf16(x: f32) -> u16 {
    let u = x.to_bits();
    if x.is_nan() {
        return ((u >> 16) as u16) | 0x40;
    }
    if u & 0x7f80_0000 == 0 {
        return ((u >> 16) & 0x8000) as u16;
    }
    let lsb = (u >> 16) & 1;
    (u.wrapping_add(0x7fff + lsb) >> 16) as u16
}

/// The f32 value of bf16 bits `h`.
pub fn from_bf16(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

/// One K-pair dword: `lo` (row `2q`) in the low half, `hi` (row `2q + 1`) in the high half.
pub fn pair(lo: f32, hi: f32) -> u32 {
    u32::from(to_bf16(lo)) | (u32::from(to_bf16(hi)) << 16)
}

/// Dwords of a packed A of `m` rows and depth `k`.
pub fn packed_a_len(m: usize, k: usize) -> usize {
    m.div_ceil(MR) * MR * k.div_ceil(2)
}

/// Offset of the panel holding row `i` (a multiple of MR) of a packed A with `m_pad`
/// rows, within the K block starting at row `k0` (a multiple of [`KC`]) of depth `kc`.
#[inline]
pub(crate) fn a_panel(m_pad: usize, k0: usize, kc: usize, i: usize) -> usize {
    k0 / 2 * m_pad + i * kc.div_ceil(2)
}

/// Packs A (`m` x `k`, row-major with row stride `lda`) into K pairs
/// ([`packed_a_len`] dwords, zero-padded to whole panels and pairs).
pub fn pack_a(a: &[f32], lda: usize, m: usize, k: usize) -> Vec<u32> {
    let m_pad = m.div_ceil(MR) * MR;
    let mut out = vec![0u32; packed_a_len(m, k)];
    let at = |i: usize, p: usize| if i < m && p < k { a[i * lda + p] } else { 0.0 };
    let mut k0 = 0;
    while k0 < k {
        let kc = KC.min(k - k0);
        for i0 in (0..m_pad).step_by(MR) {
            let base = a_panel(m_pad, k0, kc, i0);
            for q in 0..kc.div_ceil(2) {
                for r in 0..MR {
                    let p = k0 + 2 * q;
                    let hi = if 2 * q + 1 < kc {
                        at(i0 + r, p + 1)
                    } else {
                        0.0
                    };
                    out[base + q * MR + r] = pair(at(i0 + r, p), hi);
                }
            }
        }
        k0 += kc;
    }
    out
}
