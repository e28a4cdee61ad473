//! Int8 GEMM: `C[M,N] = A[M,K] · B[K,N]` with A u8 (activations, row stride `lda`) and
//! B s8 (weights, packed once by [`QGemmB::pack`]), i32 accumulation, then either the
//! fused requantisation to u8 ([`qgemm_u8`]) or the raw sum plus bias ([`qgemm_i32`]).
//!
//! Two packed layouts ([`QLayout`]), chosen when B is packed:
//! * K *pairs*: both operands widened to i16, two consecutive K values side by side,
//!   so that one `pmaddwd` multiplies and adds a pair exactly: no product saturates
//!   (unlike `pmaddubsw`), and any weight in `[-255, 255]` works (a u8 weight minus its
//!   zero point, see [`QGemmB::pack_wide`], which always packs pairs). A panels hold
//!   [`QMR`] rows, B panels [`QNR`] columns.
//! * K *quads*: bytes, four consecutive K values side by side, so that one `vpdpbusd`
//!   multiplies u8 by s8 and adds the four products exactly into an i32. A panels hold
//!   [`Q4MR`] rows, B panels [`Q4NR`] columns.
//!
//! Padding (rows, columns, the last K group) is zero. Both layouts give the same bits:
//! every product is exact and the sums wrap alike.
//!
//! The A zero point is not subtracted by the kernel: `sum_k (a - a_zp) * b = sum_k a * b
//! - a_zp * col_sum`, and the second term is folded into the bias once
//! ([`QGemmB::fold_bias`]).

use super::table::{QLayout, QuantTable, Q4MR, Q4NR, QMR, QNR};
use super::{QScratch, Requant};
use crate::kernels::isa::Isa;

/// Rows of C per block (a multiple of [`QMR`]).
pub(crate) const QMC: usize = 96;
/// Columns of C per block (a multiple of [`QNR`]).
pub(crate) const QNC: usize = 256;

/// K pairs of depth `k`.
#[inline]
pub(crate) fn pairs(k: usize) -> usize {
    k.div_ceil(2)
}

/// i16 elements of `m` rows of depth `k` packed into A panels.
pub fn packed_a_len(m: usize, k: usize) -> usize {
    m.div_ceil(QMR) * QMR * pairs(k) * 2
}

/// i16 elements of `n` columns of depth `k` packed into B panels.
pub fn packed_b_len(k: usize, n: usize) -> usize {
    n.div_ceil(QNR) * QNR * pairs(k) * 2
}

/// Packs `m` rows of depth `k` (element `(i, p)` is `get(i, p)`) into A panels in `out`
/// (`packed_a_len(m, k)` elements).
pub(crate) fn pack_a(m: usize, k: usize, out: &mut [i16], get: impl Fn(usize, usize) -> i16) {
    let kp = pairs(k);
    let panel = kp * QMR * 2;
    if panel == 0 {
        return;
    }
    for (ip, pan) in out[..packed_a_len(m, k)]
        .chunks_exact_mut(panel)
        .enumerate()
    {
        for (q, dst) in pan.chunks_exact_mut(QMR * 2).enumerate() {
            for r in 0..QMR {
                let i = ip * QMR + r;
                let (p0, p1) = (2 * q, 2 * q + 1);
                dst[2 * r] = if i < m && p0 < k { get(i, p0) } else { 0 };
                dst[2 * r + 1] = if i < m && p1 < k { get(i, p1) } else { 0 };
            }
        }
    }
}

/// Scatters row `p` of B (`src[j]` for the block's columns `j < src.len()`) into B
/// panels of depth `k` in `out`. Columns past `src.len()` and the odd last K row are
/// left as they are (the caller zeroes them once).
#[inline]
pub(crate) fn scatter_b_row<T: Copy + Into<i16>>(k: usize, p: usize, src: &[T], out: &mut [i16]) {
    let panel = pairs(k) * QNR * 2;
    let off = (p / 2) * QNR * 2;
    for (jp, chunk) in src.chunks(QNR).enumerate() {
        let dst = &mut out[jp * panel + off..jp * panel + off + QNR * 2];
        for (d, &v) in dst.iter_mut().skip(p & 1).step_by(2).zip(chunk) {
            *d = v.into();
        }
    }
}

/// Scatters rows `p` and `p + 1` of B (same length) into B panels, two at a time: the
/// pair is written contiguously.
#[inline]
pub(crate) fn scatter_b_pair(k: usize, p: usize, r0: &[u8], r1: &[u8], out: &mut [i16]) {
    debug_assert!(p.is_multiple_of(2) && r0.len() == r1.len());
    let panel = pairs(k) * QNR * 2;
    let off = (p / 2) * QNR * 2;
    let full = r0.len() / QNR;
    for jp in 0..full {
        // Fixed sizes: the interleave compiles to byte shuffles.
        let c0: &[u8; QNR] = r0[jp * QNR..(jp + 1) * QNR].try_into().expect("QNR bytes");
        let c1: &[u8; QNR] = r1[jp * QNR..(jp + 1) * QNR].try_into().expect("QNR bytes");
        let at = jp * panel + off;
        let dst: &mut [i16; 2 * QNR] = (&mut out[at..at + 2 * QNR]).try_into().expect("2 QNR i16");
        for j in 0..QNR {
            dst[2 * j] = c0[j] as i16;
            dst[2 * j + 1] = c1[j] as i16;
        }
    }
    let (c0, c1) = (&r0[full * QNR..], &r1[full * QNR..]);
    let at = full * panel + off;
    for (j, (&a, &b)) in c0.iter().zip(c1).enumerate() {
        out[at + 2 * j] = a as i16;
        out[at + 2 * j + 1] = b as i16;
    }
}

/// Packs `m` rows of depth `k` (element `(i, p)` is `get(i, p)`) into quad A panels in
/// `out` (`QLayout::Quads.a_len(m, k)` elements).
pub(crate) fn pack_a4<T: Copy + Default>(
    m: usize,
    k: usize,
    out: &mut [T],
    get: impl Fn(usize, usize) -> T,
) {
    let panel = QLayout::Quads.groups(k) * Q4MR * 4;
    if panel == 0 {
        return;
    }
    for (ip, pan) in out[..QLayout::Quads.a_len(m, k)]
        .chunks_exact_mut(panel)
        .enumerate()
    {
        for (q, dst) in pan.chunks_exact_mut(Q4MR * 4).enumerate() {
            for (r, d4) in dst.chunks_exact_mut(4).enumerate() {
                let i = ip * Q4MR + r;
                for (e, d) in d4.iter_mut().enumerate() {
                    let p = 4 * q + e;
                    *d = if i < m && p < k {
                        get(i, p)
                    } else {
                        T::default()
                    };
                }
            }
        }
    }
}

/// Computes `C = A · B` for `a_panels` packed A panels (`pa`) times `b_panels` packed B
/// panels (`pb`) of `kp` pairs into `c` (`a_panels * QMR` rows of stride `ldc >=
/// b_panels * QNR`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_block(
    t: &QuantTable,
    kp: usize,
    pa: &[i16],
    a_panels: usize,
    pb: &[i16],
    b_panels: usize,
    c: &mut [i32],
    ldc: usize,
) {
    let (asz, bsz) = (kp * QMR * 2, kp * QNR * 2);
    for jp in 0..b_panels {
        let bp = &pb[jp * bsz..(jp + 1) * bsz];
        for ip in 0..a_panels {
            let ap = &pa[ip * asz..(ip + 1) * asz];
            (t.tile)(kp, ap, bp, &mut c[ip * QMR * ldc + jp * QNR..], ldc);
        }
    }
}

/// [`gemm_block`] over quad panels of `kq` quads with the quad tile `tile`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_block4<A, B>(
    tile: fn(usize, &[A], &[B], &mut [i32], usize),
    kq: usize,
    pa: &[A],
    a_panels: usize,
    pb: &[B],
    b_panels: usize,
    c: &mut [i32],
    ldc: usize,
) {
    let (asz, bsz) = (kq * Q4MR * 4, kq * Q4NR * 4);
    for jp in 0..b_panels {
        let bp = &pb[jp * bsz..(jp + 1) * bsz];
        for ip in 0..a_panels {
            let ap = &pa[ip * asz..(ip + 1) * asz];
            tile(kq, ap, bp, &mut c[ip * Q4MR * ldc + jp * Q4NR..], ldc);
        }
    }
}

/// Packed B panels in one of the two layouts.
#[derive(Debug, Clone)]
enum BPanels {
    Pairs(Vec<i16>),
    Quads(Vec<i8>),
}

/// Int8 GEMM weights: B (`[K, N]` s8, row-major) packed into K-pair or K-quad panels
/// ([`QLayout`]), with the column sums the A zero point correction needs.
#[derive(Debug, Clone)]
pub struct QGemmB {
    k: usize,
    n: usize,
    packed: BPanels,
    col_sums: Vec<i32>,
}

impl QGemmB {
    /// Packs `b` (`[k, n]`, row-major s8) in `layout` (the kernel table's,
    /// `QuantTable::layout`; any layout runs with any table).
    pub fn pack(layout: QLayout, b: &[i8], k: usize, n: usize) -> QGemmB {
        assert_eq!(b.len(), k * n, "QGemmB::pack: b holds k * n values");
        if layout == QLayout::Pairs {
            return Self::pack_with(k, n, |p, j| b[p * n + j] as i16);
        }
        let mut packed = vec![0i8; QLayout::Quads.b_len(k, n)];
        let panel = QLayout::Quads.groups(k) * Q4NR * 4;
        for p in 0..k {
            for j in 0..n {
                packed[(j / Q4NR) * panel + (p / 4) * Q4NR * 4 + (j % Q4NR) * 4 + p % 4] =
                    b[p * n + j];
            }
        }
        let col_sums = (0..n)
            .map(|j| (0..k).map(|p| b[p * n + j] as i32).sum())
            .collect();
        QGemmB {
            k,
            n,
            packed: BPanels::Quads(packed),
            col_sums,
        }
    }

    /// Packs `b` (`[k, n]`, row-major) of values in `[-255, 255]`: weights with a zero
    /// point, already shifted (`w - w_zp`). Always K pairs (quads hold s8 only).
    pub fn pack_wide(b: &[i16], k: usize, n: usize) -> QGemmB {
        assert_eq!(b.len(), k * n, "QGemmB::pack_wide: b holds k * n values");
        assert!(
            b.iter().all(|v| (-255..=255).contains(v)),
            "weight out of [-255, 255]"
        );
        Self::pack_with(k, n, |p, j| b[p * n + j])
    }

    fn pack_with(k: usize, n: usize, get: impl Fn(usize, usize) -> i16) -> QGemmB {
        let mut packed = vec![0i16; packed_b_len(k, n)];
        let mut row = vec![0i16; n];
        let mut col_sums = vec![0i32; n];
        for p in 0..k {
            for (j, (r, s)) in row.iter_mut().zip(&mut col_sums).enumerate() {
                *r = get(p, j);
                *s += *r as i32;
            }
            scatter_b_row(k, p, &row, &mut packed);
        }
        QGemmB {
            k,
            n,
            packed: BPanels::Pairs(packed),
            col_sums,
        }
    }

    /// The layout the panels are packed in.
    pub fn layout(&self) -> QLayout {
        match self.packed {
            BPanels::Pairs(_) => QLayout::Pairs,
            BPanels::Quads(_) => QLayout::Quads,
        }
    }

    /// Depth K.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Columns N (output channels).
    pub fn n(&self) -> usize {
        self.n
    }

    /// `sum_k B[k, j]` per column `j`.
    pub fn col_sums(&self) -> &[i32] {
        &self.col_sums
    }

    /// The bias a kernel call takes: `bias[j] - a_zp * col_sums[j]` (`bias` absent: 0).
    pub fn fold_bias(&self, bias: Option<&[i32]>, a_zp: u8) -> Vec<i32> {
        fold(bias, a_zp, &self.col_sums)
    }
}

/// `bias[c] - zp * sums[c]` for every channel.
pub(crate) fn fold(bias: Option<&[i32]>, zp: u8, sums: &[i32]) -> Vec<i32> {
    if let Some(b) = bias {
        assert_eq!(b.len(), sums.len(), "bias length");
    }
    sums.iter()
        .enumerate()
        .map(|(c, s)| bias.map_or(0, |b| b[c]).wrapping_sub(zp as i32 * s))
        .collect()
}

/// Where a GEMM's finished i32 block goes.
enum GemmOut<'o> {
    U8(&'o Requant<'o>, &'o mut [u8]),
    I32(&'o [i32], &'o mut [i32]),
}

/// `out[i, j] = requant(sum_k a[i, k] * b[k, j] + rq.bias[j])` for `m` rows: `a` u8 rows
/// of stride `lda >= k`, `out` rows of stride `ldc >= n`. `rq.mult`, `rq.bias` hold one
/// value per column (`n`); the bias includes the A zero point correction
/// ([`QGemmB::fold_bias`]). A call on a subset of rows is a call on the sub-slices.
#[allow(clippy::too_many_arguments)]
pub fn qgemm_u8(
    isa: Isa,
    a: &[u8],
    lda: usize,
    m: usize,
    b: &QGemmB,
    rq: &Requant<'_>,
    out: &mut [u8],
    ldc: usize,
    scratch: &mut QScratch,
) {
    rq.check(b.n);
    qgemm(isa, a, lda, m, b, GemmOut::U8(rq, out), ldc, scratch)
}

/// `out[i, j] = sum_k a[i, k] * b[k, j] + bias[j]` in i32 (the S32 output form), same
/// layout rules as [`qgemm_u8`]; `bias` has `n` values.
#[allow(clippy::too_many_arguments)]
pub fn qgemm_i32(
    isa: Isa,
    a: &[u8],
    lda: usize,
    m: usize,
    b: &QGemmB,
    bias: &[i32],
    out: &mut [i32],
    ldc: usize,
    scratch: &mut QScratch,
) {
    assert_eq!(bias.len(), b.n, "qgemm_i32: one bias per column");
    qgemm(isa, a, lda, m, b, GemmOut::I32(bias, out), ldc, scratch)
}

#[allow(clippy::too_many_arguments)]
fn qgemm(
    isa: Isa,
    a: &[u8],
    lda: usize,
    m: usize,
    b: &QGemmB,
    mut dst: GemmOut<'_>,
    ldc: usize,
    scratch: &mut QScratch,
) {
    let (k, n) = (b.k, b.n);
    if m == 0 || n == 0 {
        return;
    }
    assert!(
        lda >= k && a.len() >= (m - 1) * lda + k,
        "qgemm: A too short"
    );
    let out_len = match &dst {
        GemmOut::U8(_, o) => o.len(),
        GemmOut::I32(_, o) => o.len(),
    };
    assert!(
        ldc >= n && out_len >= (m - 1) * ldc + n,
        "qgemm: out too short"
    );
    let t = isa.table().quant;
    let lay = b.layout();
    let (mr, nr, per_col) = (lay.mr(), lay.nr(), lay.groups(k) * lay.kg());
    let mc_max = QMC.min(m.div_ceil(mr) * mr);
    let nc_max = QNC.min(n.div_ceil(nr) * nr);
    let bufs = scratch.bufs(lay, lay.a_len(mc_max, k), mc_max * nc_max, 0, 0);
    let (pa16, pa8, cblk) = (bufs.p16, bufs.p8, bufs.c);
    let mut ic = 0;
    while ic < m {
        let mc = QMC.min(m - ic);
        let rows = &a[ic * lda..];
        match lay {
            QLayout::Pairs => pack_a(mc, k, pa16, |i, p| rows[i * lda + p] as i16),
            QLayout::Quads => pack_a4(mc, k, pa8, |i, p| rows[i * lda + p]),
        }
        let a_panels = mc.div_ceil(mr);
        let mut jc = 0;
        while jc < n {
            let nc = QNC.min(n - jc);
            let b_panels = nc.div_ceil(nr);
            let ldb = b_panels * nr;
            let cols = jc * per_col..(jc + ldb) * per_col;
            match &b.packed {
                BPanels::Pairs(pb) => {
                    let kp = lay.groups(k);
                    gemm_block(t, kp, pa16, a_panels, &pb[cols], b_panels, cblk, ldb)
                }
                BPanels::Quads(pb) => gemm_block4(
                    t.quad_tile_us,
                    lay.groups(k),
                    pa8,
                    a_panels,
                    &pb[cols],
                    b_panels,
                    cblk,
                    ldb,
                ),
            }
            for i in 0..mc {
                let row = &cblk[i * ldb..i * ldb + nc];
                let at = (ic + i) * ldc + jc;
                match &mut dst {
                    GemmOut::U8(rq, o) => (t.requant_cols)(
                        row,
                        &rq.bias[jc..jc + nc],
                        &rq.mult[jc..jc + nc],
                        rq.y_zp,
                        rq.lo,
                        rq.hi,
                        &mut o[at..at + nc],
                    ),
                    GemmOut::I32(bias, o) => {
                        for ((d, &s), &bb) in o[at..at + nc].iter_mut().zip(row).zip(&bias[jc..]) {
                            *d = s.wrapping_add(bb);
                        }
                    }
                }
            }
            jc += nc;
        }
        ic += mc;
    }
}
