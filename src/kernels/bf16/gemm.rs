//! The bf16 GEMM drivers: `C[m_range, n_range] = A · B` with A and B in K pairs, blocked
//! like the f32 GEMM (column blocks of `gemm::NC`, K blocks of [`KC`]) and swept in
//! MR x 2NR tiles, then the f32 epilogue on each finished column block.
//!
//! Invariant: every column of C is computed by the same lane arithmetic whatever the
//! requested ranges (a ragged tile goes through a local tile that holds C when
//! accumulating), so disjoint ranges together equal one whole call bit for bit.

use super::wide::{KB as WKB, PANEL as WPANEL, ROWS as WROWS};
use super::{a_panel, pair, Bf16Table, WideGemm, KC, MR, NR};
use crate::kernels::gemm::{Epilogue, NC};
use crate::kernels::isa::Isa;

pub use crate::kernels::gemm::PanelFill;

/// Rows `[m_lo, m_hi)` (`m_lo` a multiple of MR) x columns `[j0, j0 + len)` of C, one K
/// block of `kp` pairs: A panel of row `i` from `a(i)`, B as consecutive panels of
/// `kp * NR` dwords from column `j0`; `acc` adds to C.
#[allow(clippy::too_many_arguments)]
fn run_block<'a>(
    tab: &Bf16Table,
    kp: usize,
    a: &dyn Fn(usize) -> &'a [u32],
    b: &[u32],
    c: &mut [f32],
    ldc: usize,
    (m_lo, m_hi): (usize, usize),
    (j0, len): (usize, usize),
    acc: bool,
) {
    let pw = kp * NR;
    let np = len.div_ceil(NR);
    const TL: usize = 2 * NR;
    let mut tile = [0.0f32; MR * TL];
    let mut q = 0;
    while q < np {
        let two = q + 1 < np;
        let cols = if two { 2 * NR } else { NR };
        let j = j0 + q * NR;
        let nr = cols.min(j0 + len - j);
        let b0 = &b[q * pw..][..pw];
        let b1 = if two { &b[(q + 1) * pw..][..pw] } else { b0 };
        let mut i = m_lo;
        while i < m_hi {
            let mr = MR.min(m_hi - i);
            let ap = a(i);
            if mr == MR && nr == cols {
                let cs = &mut c[i * ldc + j..];
                if two {
                    (tab.tile2)(kp, ap, b0, b1, cs, ldc, acc)
                } else {
                    (tab.tile1)(kp, ap, b0, cs, ldc, acc)
                }
            } else {
                // A ragged tile: through `tile`, which holds C's values when accumulating
                // (so that each lane adds to C exactly as a full tile would).
                tile.fill(0.0);
                if acc {
                    for r in 0..mr {
                        tile[r * TL..r * TL + nr].copy_from_slice(&c[(i + r) * ldc + j..][..nr]);
                    }
                }
                if two {
                    (tab.tile2)(kp, ap, b0, b1, &mut tile, TL, acc)
                } else {
                    (tab.tile1)(kp, ap, b0, &mut tile, TL, acc)
                }
                for r in 0..mr {
                    c[(i + r) * ldc + j..][..nr].copy_from_slice(&tile[r * TL..r * TL + nr]);
                }
            }
            i += mr;
        }
        q += if two { 2 } else { 1 };
    }
}

/// Floats of scratch [`gemm_panels`] needs for depth `k` and `n` columns: one f32 block
/// of panels and its K-pair form.
pub fn panels_scratch_len(k: usize, n: usize) -> usize {
    let nc = NC.min(n.div_ceil(NR) * NR);
    let kc = KC.min(k);
    kc * nc + kc.div_ceil(2) * nc
}

/// Writes zeros into rows `[m_lo, m_hi)`, columns `[n_lo, n_hi)` of C, then the
/// epilogue (a product of depth 0).
fn zero_depth(
    isa: Isa,
    c: &mut [f32],
    ldc: usize,
    (m_lo, m_hi): (usize, usize),
    (n_lo, n_hi): (usize, usize),
    epi: &Epilogue<'_>,
) {
    for i in m_lo..m_hi {
        c[i * ldc + n_lo..i * ldc + n_hi].fill(0.0);
    }
    if !epi.is_empty() {
        epi.apply(isa, c, ldc, m_lo, m_hi - m_lo, n_lo, n_hi - n_lo);
    }
}

/// `C = A · B` on rows `m_range` (start a multiple of MR) and columns `n_range` of C
/// (stride `ldc`), then `epi` (through `isa`'s table): A packed by [`super::pack_a`]
/// (`m` rows, depth `k`), B made block by block in f32 panels by `fill` (as
/// `gemm::BSource::Panels`) and converted to K pairs. `scratch`: [`panels_scratch_len`]
/// floats.
#[allow(clippy::too_many_arguments)]
pub fn gemm_panels(
    tab: &Bf16Table,
    isa: Isa,
    (m, k): (usize, usize),
    pa: &[u32],
    fill: &PanelFill<'_>,
    scratch: &mut [f32],
    c: &mut [f32],
    ldc: usize,
    m_range: (usize, usize),
    n_range: (usize, usize),
    epi: &Epilogue<'_>,
) {
    if k == 0 {
        return zero_depth(isa, c, ldc, m_range, n_range, epi);
    }
    let m_pad = m.div_ceil(MR) * MR;
    let kcm = KC.min(k);
    let nc_max = NC.min((n_range.1 - n_range.0).div_ceil(NR) * NR);
    let (fbuf, rest) = scratch.split_at_mut(kcm * nc_max);
    let bbuf: &mut [u32] = bytemuck::cast_slice_mut(&mut rest[..kcm.div_ceil(2) * nc_max]);
    let mut jc = n_range.0;
    while jc < n_range.1 {
        let len = NC.min(n_range.1 - jc);
        let np = len.div_ceil(NR);
        let mut k0 = 0;
        while k0 < k {
            crate::kernels::yield_point::yield_point();
            let kc = KC.min(k - k0);
            let kp = kc.div_ceil(2);
            fill(k0, kc, jc, len, &mut fbuf[..kc * np * NR]);
            for q in 0..np {
                let src = &fbuf[q * kc * NR..][..kc * NR];
                (tab.pack_panel)(src, kc, &mut bbuf[q * kp * NR..][..kp * NR]);
            }
            let a = |i: usize| &pa[a_panel(m_pad, k0, kc, i)..][..kp * MR];
            let b = &bbuf[..np * kp * NR];
            run_block(tab, kp, &a, b, c, ldc, m_range, (jc, len), k0 > 0);
            k0 += kc;
        }
        if !epi.is_empty() {
            epi.apply(isa, c, ldc, m_range.0, m_range.1 - m_range.0, jc, len);
        }
        jc += len;
    }
}

/// Dwords of a packed B of depth `k` and `n` columns ([`pack_b`]).
pub fn packed_b_len(k: usize, n: usize) -> usize {
    n.div_ceil(NR) * NR * k.div_ceil(2)
}

/// Packs B (`k` x `n`, element `(p, j)` at `b[p * rs + j * cs]`, times `scale`) into K
/// pairs: per K block of [`KC`] rows, NR-column panels of `kp * NR` dwords
/// ([`packed_b_len`], zero-padded).
pub fn pack_b(b: &[f32], rs: usize, cs: usize, k: usize, n: usize, scale: f32) -> Vec<u32> {
    let n_pad = n.div_ceil(NR) * NR;
    let mut out = vec![0u32; packed_b_len(k, n)];
    let at = |p: usize, j: usize| {
        if p < k && j < n {
            b[p * rs + j * cs] * scale
        } else {
            0.0
        }
    };
    let mut k0 = 0;
    while k0 < k {
        let kc = KC.min(k - k0);
        let kp = kc.div_ceil(2);
        for j0 in (0..n_pad).step_by(NR) {
            let base = k0 / 2 * n_pad + j0 * kp;
            for q in 0..kp {
                for j in 0..NR {
                    let p = k0 + 2 * q;
                    let hi = if 2 * q + 1 < kc {
                        at(p + 1, j0 + j)
                    } else {
                        0.0
                    };
                    out[base + q * NR + j] = pair(at(p, j0 + j), hi);
                }
            }
        }
        k0 += kc;
    }
    out
}

/// Dwords of scratch [`gemm_a_rows`] through `tab` needs for `rows` rows of C (a range)
/// and depth `k`: one K block of A's rows in pairs (with a wide GEMM: one row block of
/// the whole depth).
pub fn gemm_a_rows_scratch_len(tab: &Bf16Table, rows: usize, k: usize) -> usize {
    if tab.wide_gemm.is_some() {
        return WROWS * wide_lda(k);
    }
    rows.div_ceil(MR) * MR * KC.min(k).div_ceil(2)
}

/// Pairs of depth `k` in the wide layout: whole K steps.
fn wide_kp(k: usize) -> usize {
    k.div_ceil(2).div_ceil(WKB) * WKB
}

/// Row stride (dwords) of A's pairs for the wide GEMM: [`wide_kp`] made an odd number
/// of 64-byte lines, so that a tile's 16 rows do not share cache sets.
fn wide_lda(k: usize) -> usize {
    let kp = wide_kp(k);
    if (kp / 16).is_multiple_of(2) {
        kp + 16
    } else {
        kp
    }
}

/// Panels of a wide B of `n` columns: whole pairs of panels, plus one (a range may
/// start on an odd panel).
fn wide_panels(n: usize) -> usize {
    n.div_ceil(2 * WPANEL) * 2 + 1
}

/// Packs B (as [`pack_b`]'s operands) in the layout `tab` multiplies: [`pack_b`]'s, or
/// for a wide GEMM, 16-column panels of the whole depth in K pairs (`wide_kp(k) * 16`
/// dwords each, pair `q`'s columns at `q * 16`), zero-padded.
pub fn pack_b_for(
    tab: &Bf16Table,
    (b, rs, cs): (&[f32], usize, usize),
    (k, n): (usize, usize),
    scale: f32,
) -> Vec<u32> {
    if tab.wide_gemm.is_none() {
        return pack_b(b, rs, cs, k, n, scale);
    }
    let kp = wide_kp(k);
    let mut out = vec![0u32; wide_panels(n) * kp * WPANEL];
    let at = |p: usize, j: usize| {
        if p < k {
            b[p * rs + j * cs] * scale
        } else {
            0.0
        }
    };
    for j in 0..n {
        let panel = &mut out[j / WPANEL * kp * WPANEL..][..kp * WPANEL];
        for q in 0..k.div_ceil(2) {
            panel[q * WPANEL + j % WPANEL] = pair(at(2 * q, j), at(2 * q + 1, j));
        }
    }
    out
}

/// [`gemm_a_rows`] on a wide GEMM: per block of [`WROWS`] rows, A's rows in K pairs of
/// the whole depth (zero rows past the range), then the block over the columns, then
/// the epilogue.
#[allow(clippy::too_many_arguments)]
fn gemm_a_rows_wide(
    (w, to_pairs): (WideGemm, super::ToPairs),
    isa: Isa,
    (k, n): (usize, usize),
    (a, rs, cs): (&[f32], usize, usize),
    pb: &[u32],
    scratch: &mut [u32],
    c: &mut [f32],
    ldc: usize,
    (m_lo, m_hi): (usize, usize),
    (n_lo, n_hi): (usize, usize),
    epi: &Epilogue<'_>,
) {
    let (kp, lda) = (wide_kp(k), wide_lda(k));
    assert!(
        n_lo.is_multiple_of(WPANEL),
        "bf16 wide gemm: unaligned columns"
    );
    assert!(
        pb.len() >= wide_panels(n) * kp * WPANEL,
        "bf16 wide gemm: short B"
    );
    let abuf = &mut scratch[..WROWS * lda];
    let b = &pb[n_lo / WPANEL * kp * WPANEL..];
    let mut i = m_lo;
    while i < m_hi {
        crate::kernels::yield_point::yield_point();
        let rows = WROWS.min(m_hi - i);
        for (r, dst) in abuf.chunks_exact_mut(lda).enumerate() {
            dst.fill(0);
            if r >= rows {
                continue;
            }
            let row = i + r;
            if cs == 1 {
                to_pairs(&a[row * rs..][..k], dst);
            } else {
                for (q, d) in dst[..k.div_ceil(2)].iter_mut().enumerate() {
                    let v = |p: usize| if p < k { a[row * rs + p * cs] } else { 0.0 };
                    *d = pair(v(2 * q), v(2 * q + 1));
                }
            }
        }
        (w.block)(
            kp,
            (abuf, lda),
            b,
            (rows, n_hi - n_lo),
            &mut c[i * ldc + n_lo..],
            ldc,
        );
        if !epi.is_empty() {
            epi.apply(isa, c, ldc, i, rows, n_lo, n_hi - n_lo);
        }
        i += rows;
    }
}

/// `C = A · B` on rows `m_range` (start a multiple of MR) and columns `n_range` (start a
/// multiple of NR) of C (stride `ldc`), then `epi`: A read in place (element `(i, p)` at
/// `a[i * rs + p * cs]`, `m` rows, depth `k`) and converted to K pairs block by block
/// into `scratch` ([`gemm_a_rows_scratch_len`] dwords for the range's rows), B packed by
/// [`pack_b_for`] for `tab` (`n` columns; a wide GEMM takes any row range and columns
/// from a 16-column panel).
#[allow(clippy::too_many_arguments)]
pub fn gemm_a_rows(
    tab: &Bf16Table,
    isa: Isa,
    (k, n): (usize, usize),
    (a, rs, cs): (&[f32], usize, usize),
    pb: &[u32],
    scratch: &mut [u32],
    c: &mut [f32],
    ldc: usize,
    m_range: (usize, usize),
    n_range: (usize, usize),
    epi: &Epilogue<'_>,
) {
    if k == 0 {
        return zero_depth(isa, c, ldc, m_range, n_range, epi);
    }
    if let Some(w) = tab.wide_gemm {
        let args = (pb, scratch, c, ldc);
        return gemm_a_rows_wide(
            (w, tab.to_pairs),
            isa,
            (k, n),
            (a, rs, cs),
            args.0,
            args.1,
            args.2,
            args.3,
            m_range,
            n_range,
            epi,
        );
    }
    let (m_lo, m_hi) = m_range;
    let n_pad = n.div_ceil(NR) * NR;
    let mut jc = n_range.0;
    while jc < n_range.1 {
        let len = NC.min(n_range.1 - jc);
        let mut k0 = 0;
        while k0 < k {
            crate::kernels::yield_point::yield_point();
            let kc = KC.min(k - k0);
            let kp = kc.div_ceil(2);
            // Rows m_lo.. of A, this K block, as MR-row pair panels from 0: each row
            // converted into `row` (vectorised where it is contiguous), then laid into
            // its panel's lane.
            let rows = m_hi - m_lo;
            let abuf = &mut scratch[..rows.div_ceil(MR) * MR * kp];
            let mut row = [0u32; KC / 2];
            let row = &mut row[..kp];
            for (pi, panel) in abuf.chunks_exact_mut(kp * MR).enumerate() {
                for r in 0..MR {
                    let i = m_lo + pi * MR + r;
                    if i >= m_hi {
                        row.fill(0);
                    } else if cs == 1 {
                        (tab.to_pairs)(&a[i * rs + k0..][..kc], row);
                    } else {
                        for (q, d) in row.iter_mut().enumerate() {
                            let p = k0 + 2 * q;
                            let hi = if p + 1 < k0 + kc {
                                a[i * rs + (p + 1) * cs]
                            } else {
                                0.0
                            };
                            *d = pair(a[i * rs + p * cs], hi);
                        }
                    }
                    for (d, &v) in panel[r..].iter_mut().step_by(MR).zip(row.iter()) {
                        *d = v;
                    }
                }
            }
            let abuf = &*abuf;
            let ap = |i: usize| &abuf[(i - m_lo) * kp..][..kp * MR];
            let b = &pb[k0 / 2 * n_pad + jc * kp..][..len.div_ceil(NR) * kp * NR];
            run_block(tab, kp, &ap, b, c, ldc, m_range, (jc, len), k0 > 0);
            k0 += kc;
        }
        if !epi.is_empty() {
            epi.apply(isa, c, ldc, m_lo, m_hi - m_lo, jc, len);
        }
        jc += len;
    }
}
