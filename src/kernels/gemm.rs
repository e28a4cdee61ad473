//! Packed single-precision GEMM: `C[M,N] = A[M,K] · B[K,N]` with a fused epilogue.
//!
//! Both operands are packed before the product: A into panels of [`MR`] rows, B into
//! panels of [`NR`] columns, each split into blocks of at most [`KC`] along K. Weights are
//! packed once when a plan is built; activations are packed per run into scratch memory.
//! A 6x16 micro-kernel (from the kernel table) accumulates one tile of C; after
//! the last K block the [`Epilogue`] runs on each finished MC x NC block of C while it is
//! still in cache.
//!
//! Invariants: packed buffers are zero-padded to whole panels, so the micro-kernel never
//! reads out of bounds; a call computes only the rows `m_range` and columns `n_range` of
//! C, which lets the executor split a node into disjoint tiles.

pub use super::body::epilogue::Epilogue;
use super::body::prefetch::prefetch_line;
use super::isa::{Isa, RowBlock, TileEpi, TileWalk, WalkA, WalkEpi, WalkSteps, COLS_MAX, HALF};
pub use super::isa::{KC, MR, NR};

/// Rows of C computed per A block (a multiple of [`MR`]).
const MC: usize = 72;
/// Columns of C computed per B block (a multiple of [`NR`]).
pub(crate) const NC: usize = 512;

/// Size in floats of a packed A of `m` rows and depth `k`.
pub fn packed_a_len(m: usize, k: usize) -> usize {
    m.div_ceil(MR) * MR * k
}

/// Size in floats of a packed B of depth `k` and `n` columns.
pub fn packed_b_len(k: usize, n: usize) -> usize {
    n.div_ceil(NR) * NR * k
}

/// Floats of B that the strips a walk along a row does together (a group of
/// `GROUP_STRIPS`, fewer in a narrow product) may hold in one K block: 32 KiB, which a
/// 48 KiB L1 keeps beside the A panel while the walk goes down the A panels. Deeper
/// blocks read each B line from L2 on every A panel (Xeon, AVX-512, operands out of L2,
/// best of 30, K blocks of 128 against 256: 49x960x320 237 -> 210 us, 49x320x1280 312
/// -> 277, 196x576x96 165 -> 152, 80x512x6625 4080 -> 3890).
const GROUP_B_FLOATS: usize = 8192;

/// Depth of the K blocks of a product of depth `k` and `n` columns: the layout of its
/// packed A and B ([`pack_a`]'s `kd`, [`pack_b`]) and the GEMM's loop over K. One block
/// where the B of a group of strips fits [`GROUP_B_FLOATS`] (and `k` <= [`KC`]); else
/// blocks of equal depth (the last one shorter by less than a block count) of at most
/// that, so that no short last block is left (K = 144 at 24 columns: one block of 144;
/// K = 576 at 96 columns: five of 116).
pub fn k_depth(k: usize, n: usize) -> usize {
    let cols = GROUP_STRIPS.min(n.div_ceil(NR).max(1)) * NR;
    let most = (GROUP_B_FLOATS / cols).clamp(MR, KC);
    if k <= most {
        return k.max(1);
    }
    k.div_ceil(k.div_ceil(most))
}

/// Offset of the panel holding row `i` of A (a multiple of MR) within K block `k0` of
/// depth `kd` blocks.
#[inline]
fn a_panel(m_pad: usize, (k, kd): (usize, usize), k0: usize, i: usize) -> usize {
    let kc = kd.min(k - k0);
    k0 * m_pad + i * kc
}

/// Offset of the panel holding column `j` of B (a multiple of NR) within K block `k0` of
/// depth `kd` blocks.
#[inline]
fn b_panel(n_pad: usize, (k, kd): (usize, usize), k0: usize, j: usize) -> usize {
    let kc = kd.min(k - k0);
    k0 * n_pad + j * kc
}

/// Packs A (`m` x `k`, element `(i, p)` at `a[i * rs + p * cs]`, times `scale`) into `out`
/// (`packed_a_len(m, k)` floats) in K blocks of depth `kd` (`k_depth(k, n)` for the
/// product of `n` columns it is packed for).
pub fn pack_a(
    a: &[f32],
    rs: usize,
    cs: usize,
    m: usize,
    (k, kd): (usize, usize),
    scale: f32,
    out: &mut [f32],
) {
    let m_pad = m.div_ceil(MR) * MR;
    let mut k0 = 0;
    while k0 < k {
        let kc = kd.min(k - k0);
        for i0 in (0..m_pad).step_by(MR) {
            let base = a_panel(m_pad, (k, kd), k0, i0);
            let panel = &mut out[base..base + kc * MR];
            if cs == 1 && i0 + MR <= m {
                // Row-major A, a full panel: six row slices, the panel written in order.
                let rows: [&[f32]; MR] =
                    std::array::from_fn(|r| &a[(i0 + r) * rs + k0..(i0 + r) * rs + k0 + kc]);
                for (p, d) in panel.chunks_exact_mut(MR).enumerate() {
                    for (x, row) in d.iter_mut().zip(&rows) {
                        *x = row[p] * scale;
                    }
                }
                continue;
            }
            for r in 0..MR {
                let i = i0 + r;
                if i < m {
                    for p in 0..kc {
                        panel[p * MR + r] = a[i * rs + (k0 + p) * cs] * scale;
                    }
                } else {
                    for p in 0..kc {
                        panel[p * MR + r] = 0.0;
                    }
                }
            }
        }
        k0 += kc;
    }
}

/// Packs B (`k` x `n`, element `(p, j)` at `b[p * rs + j * cs]`, times `scale`) into `out`
/// (`packed_b_len(k, n)` floats). `row` is scratch of at least `n` floats.
#[allow(clippy::too_many_arguments)]
pub fn pack_b(
    b: &[f32],
    rs: usize,
    cs: usize,
    k: usize,
    n: usize,
    scale: f32,
    out: &mut [f32],
    row: &mut [f32],
) {
    if cs == 1 && scale == 1.0 {
        pack_b_rows(k, n, out, row, |p, _| Some(&b[p * rs..p * rs + n]));
        return;
    }
    pack_b_rows(k, n, out, row, |p, row| {
        for (j, d) in row.iter_mut().enumerate() {
            *d = b[p * rs + j * cs] * scale;
        }
        None
    });
}

/// Packs B row by row, rows in order `0..k`: `fill(p, row)` either returns row `p` of B
/// (length `n`) directly or writes it into the scratch `row` and returns `None`. The row
/// is then scattered into the panels. `row` is scratch of at least `n` floats.
pub fn pack_b_rows<'b>(
    k: usize,
    n: usize,
    out: &mut [f32],
    row: &mut [f32],
    mut fill: impl FnMut(usize, &mut [f32]) -> Option<&'b [f32]>,
) {
    let n_pad = n.div_ceil(NR) * NR;
    let full = n / NR * NR;
    let row = &mut row[..n];
    let kd = k_depth(k, n);
    let mut k0 = 0;
    while k0 < k {
        let kc = kd.min(k - k0);
        let block = &mut out[k0 * n_pad..(k0 + kc) * n_pad];
        for p in 0..kc {
            let src: &[f32] = match fill(k0 + p, row) {
                Some(s) => s,
                None => row,
            };
            // A row of B lands as consecutive NR-chunks, one per panel, `kc * NR` apart.
            for j0 in (0..full).step_by(NR) {
                let dst = j0 * kc + p * NR;
                block[dst..dst + NR].copy_from_slice(&src[j0..j0 + NR]);
            }
            if full < n {
                let dst = full * kc + p * NR;
                let d = &mut block[dst..dst + NR];
                d[..n - full].copy_from_slice(&src[full..n]);
                d[n - full..].fill(0.0);
            }
        }
        k0 += kc;
    }
}

impl Epilogue<'_> {
    /// Applies the epilogue through `isa`'s table to rows `i0..i0+mr`, columns
    /// `j0..j0+nr` of C.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(crate) fn apply(
        &self,
        isa: Isa,
        c: &mut [f32],
        ldc: usize,
        i0: usize,
        mr: usize,
        j0: usize,
        nr: usize,
    ) {
        (isa.table().epilogue)(self, c, ldc, i0, mr, j0, nr)
    }
}

/// Produces `B[p, j0..j0 + len]` for [`BSource::Rows`]: `fill(p, j0, len, row)`.
pub type RowFill<'a> = dyn Fn(usize, usize, usize, &mut [f32]) -> Option<&'a [f32]> + 'a;

/// Where the B operand of [`gemm_packed`] comes from.
#[derive(Clone, Copy)]
pub enum BSource<'a> {
    /// B fully packed by [`pack_b`] (constant weights).
    Packed(&'a [f32]),
    /// B generated on the fly, one `KC x NC` block at a time, into scratch:
    /// `fill(p, j0, len, row)` returns `B[p, j0..j0 + len]`, either as a slice of its
    /// source or by writing it into `row` (then returning `None`).
    Rows(&'a RowFill<'a>),
    /// Like [`BSource::Rows`], but each block is always packed into panels before the
    /// micro-kernels read it, however few rows C has: for sources whose rows, read in
    /// place, would fall into a few cache sets (conv input planes a multiple of 4 KiB
    /// apart), where packing beats copying them into row slots.
    RowsPacked(&'a RowFill<'a>),
    /// B generated on the fly straight into packed panels, one `KC x NC` block at a
    /// time, into scratch: `fill(k0, kc, jc, nc, buf)` writes rows `k0..k0 + kc`,
    /// columns `jc..jc + nc` of B as `nc.div_ceil(NR)` panels of `kc x NR` floats
    /// (panel `q` at `q * kc * NR`, row `p` at `+ p * NR`).
    Panels(&'a PanelFill<'a>),
}

/// Writes one packed B block for [`BSource::Panels`]: `fill(k0, kc, jc, nc, buf)`.
pub type PanelFill<'a> = dyn Fn(usize, usize, usize, usize, &mut [f32]) + 'a;

/// Scratch floats [`gemm_packed`] needs for a [`BSource::Rows`] or
/// [`BSource::Panels`] operand of depth `k`
/// and `n` columns: one row slot per K row of a block, plus one packed edge panel (or
/// one row, when the block is packed).
pub fn block_scratch_len(k: usize, n: usize) -> usize {
    let nc = NC.min(n.div_ceil(NR) * NR);
    KC.min(k) * row_slot(nc) + (KC.min(k) * NR).max(nc)
}

/// Stride of the row slots a [`BSource::Rows`] block is written into: one panel more
/// than the block width, so that the slots do not all map to the same cache sets.
fn row_slot(nc: usize) -> usize {
    nc + NR
}

/// Rows of B that [`pack_block`] copies panel by panel when they are read in place.
const PACK_ROWS: usize = 16;

/// Packs rows `k0..k0+kc`, columns `jc..jc+nc` of B into NR-column panels in `buf`.
/// Rows read in place go [`PACK_ROWS`] at a time, panel by panel, so that the stores of
/// each panel are consecutive lines (row by row, each row's stores would touch every
/// panel of the block).
fn pack_block<'b>(
    fill: &RowFill<'b>,
    k0: usize,
    kc: usize,
    jc: usize,
    nc: usize,
    buf: &mut [f32],
    row: &mut [f32],
) {
    let row = &mut row[..nc];
    let mut p = 0;
    while p < kc {
        let mut srcs: [&[f32]; PACK_ROWS] = [&[]; PACK_ROWS];
        let mut cnt = 0;
        let mut generated = false;
        while cnt < PACK_ROWS && p + cnt < kc {
            match fill(k0 + p + cnt, jc, nc, row) {
                Some(s) => srcs[cnt] = s,
                None => {
                    // Row p + cnt was generated into `row`.
                    generated = true;
                    break;
                }
            }
            cnt += 1;
        }
        rows_to_panels(&srcs[..cnt], (p, kc), nc, buf);
        p += cnt;
        if generated {
            rows_to_panels(&[row], (p, kc), nc, buf);
            p += 1;
        }
    }
}

/// Floats ahead of each piece it copies that [`rows_to_panels`] asks the cache for (8
/// lines): a block's rows are short runs in many streams, which the hardware prefetcher
/// does not follow, and a conv's input planes come from memory (1x1 convs with inputs
/// not in cache, Zen 3: 192->48 at 52x52 880 -> 750 us, 48->48 at 104x104 1040 -> 905).
const PREFETCH_AHEAD: usize = 128;

/// Rows `p..p + srcs.len()` of a `kc`-row block of B (`nc` columns each) into their
/// places in the block's NR-column panels `buf`, panel by panel (the last panel's
/// columns past `nc` zeroed).
fn rows_to_panels(srcs: &[&[f32]], (p, kc): (usize, usize), nc: usize, buf: &mut [f32]) {
    for j0 in (0..nc).step_by(NR) {
        let w = NR.min(nc - j0);
        for (i, src) in srcs.iter().enumerate() {
            prefetch_line(src.as_ptr().wrapping_add(j0 + PREFETCH_AHEAD));
            let dst = &mut buf[j0 * kc + (p + i) * NR..][..NR];
            if w == NR {
                // (A fixed-size copy: inline vector moves.)
                dst.copy_from_slice(&src[j0..j0 + NR]);
            } else {
                dst[..w].copy_from_slice(&src[j0..j0 + w]);
                dst[w..].fill(0.0);
            }
        }
    }
}

/// Shortest C row stride at which a GEMM of one K block walks each MC x NC block panel
/// by panel (every panel's C rows as runs of up to NC columns) rather than strip by
/// strip (one 64-byte line per C row and strip across the block's rows). Long rows
/// (conv planes from 28x28 up) have strides with large power-of-two factors, whose
/// strip-order lines fall into a few cache sets; Zen 3, min of 3x150 reps: 96x12544x16
/// 1424 -> 665 us, 64x12544x144 4650 -> 4069, 256x3136x144 3471 -> 3002, 128x784x256
/// 679 -> 668, 192x784x32 even; with short rows the strip order keeps B's strip in L1
/// and wins (576x196x160 436 against 501).
const C_ROWS_MIN_LDC: usize = 512;

/// Strips of C a panel's tiles do together, strips outer, where the table pairs tiles:
/// B of four strips at small depths stays in L1 while the A panel goes over them in
/// one walk (AVX-512 table on a Xeon, A in place, best of 200: 784x192x32 87 -> 74 us,
/// other MobileNetV2 1x1 shapes even).
const GROUP_STRIPS: usize = 4;

/// Floats of a block's B up to which the tiles go panels outer whatever C's stride
/// (see `gemm_with`): two thirds of the L1 data cache (21 KiB of 32, 32 KiB of 48). On a
/// 48 KiB L1 (Xeon, AVX-512, operands out of L2, best of 30) MobileNetV2's 784x32x192
/// expansion went 104-106 -> 75-77 us at 32 KiB (from 16: one call per A panel across
/// its 12 strips instead of one per panel and group of four); 128 KiB gained nothing.
fn b_in_l1_floats() -> usize {
    static FLOATS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *FLOATS.get_or_init(|| super::cache::l1_data_bytes() * 2 / 3 / std::mem::size_of::<f32>())
}

/// Rows of C up to which a [`BSource::Rows`] operand is read in place by the row-table
/// micro-kernel; above, each block is packed into panels first (the packing pays off
/// when many A panels reuse it).
pub(crate) const ROWS_IN_PLACE_MAX_M: usize = 40;

/// Where the B panel of one micro-tile column comes from.
#[derive(Clone, Copy)]
enum Panel<'p> {
    /// A packed `kc x NR` panel.
    Packed(&'p [f32]),
    /// Columns `off..off + NR` of the block's rows.
    Rows(usize),
}

/// Computes rows `m_range` x columns `n_range` of `C = A · B` (A packed by [`pack_a`]
/// in K blocks of depth `kd`, `k` its depth; B from `b`, packed in blocks of the same
/// depth when [`BSource::Packed`]), then applies `epi`. Ranges must start at multiples of MR / NR (ends may
/// be ragged only at `m` / `n`). `c` holds C with row stride `ldc`; `scratch` holds
/// [`block_scratch_len`] floats when `b` is [`BSource::Rows`]. Rows of B are read in
/// place (from their source, or from the slot the fill wrote them into) by the
/// row-table micro-kernel; only a ragged last panel is packed.
#[allow(clippy::too_many_arguments)]
pub fn gemm_packed(
    isa: Isa,
    m: usize,
    n: usize,
    (k, kd): (usize, usize),
    pa: &[f32],
    b: BSource<'_>,
    scratch: &mut [f32],
    c: &mut [f32],
    ldc: usize,
    m_range: (usize, usize),
    n_range: (usize, usize),
    epi: &Epilogue<'_>,
) {
    let a = ASource::Packed(pa);
    gemm_blocks(
        isa,
        m,
        n,
        (k, kd),
        a,
        b,
        scratch,
        c,
        ldc,
        m_range,
        n_range,
        epi,
    )
}

/// Where the A operand of [`gemm_with`] comes from.
#[derive(Clone, Copy)]
pub enum ASource<'a> {
    /// A packed by [`pack_a`].
    Packed(&'a [f32]),
    /// A read in place, row-major: row `i`, column `p` at `a[i * lda + p]`. Saves the
    /// packing pass where few column panels reuse each row (narrow B, e.g. attention
    /// probabilities times V).
    InPlace { a: &'a [f32], lda: usize },
}

/// Columns of C up to which [`ASource::InPlace`] beats packing A (each A row is read
/// once per NR columns).
pub const A_IN_PLACE_MAX_N: usize = 2 * NR;

/// [`gemm_packed`] with A from `a` (packed in K blocks of `k_depth(k, n)`, as B when
/// packed): with [`ASource::InPlace`] a [`BSource::Rows`] operand is always packed
/// block by block, and a ragged last row panel is packed on the stack.
#[allow(clippy::too_many_arguments)]
pub fn gemm_with(
    isa: Isa,
    m: usize,
    n: usize,
    k: usize,
    a: ASource<'_>,
    b: BSource<'_>,
    scratch: &mut [f32],
    c: &mut [f32],
    ldc: usize,
    m_range: (usize, usize),
    n_range: (usize, usize),
    epi: &Epilogue<'_>,
) {
    let kd = k_depth(k, n);
    gemm_blocks(
        isa,
        m,
        n,
        (k, kd),
        a,
        b,
        scratch,
        c,
        ldc,
        m_range,
        n_range,
        epi,
    )
}

/// [`gemm_with`] in K blocks of depth `kd`.
#[allow(clippy::too_many_arguments)]
fn gemm_blocks(
    isa: Isa,
    m: usize,
    n: usize,
    (k, kd): (usize, usize),
    a: ASource<'_>,
    b: BSource<'_>,
    scratch: &mut [f32],
    c: &mut [f32],
    ldc: usize,
    m_range: (usize, usize),
    n_range: (usize, usize),
    epi: &Epilogue<'_>,
) {
    debug_assert!(
        !matches!(b, BSource::Packed(_)) || kd == k_depth(k, n),
        "packed B is laid out in blocks of k_depth(k, n)"
    );
    let t = isa.table();
    let m_pad = m.div_ceil(MR) * MR;
    let n_pad = n.div_ceil(NR) * NR;
    let (m_lo, m_hi) = m_range;
    let (n_lo, n_hi) = n_range;
    debug_assert!(m_lo % MR == 0 && n_lo % NR == 0);
    if k == 0 {
        for i in m_lo..m_hi {
            c[i * ldc + n_lo..i * ldc + n_hi].fill(0.0);
        }
        if !epi.is_empty() {
            epi.apply(isa, c, ldc, m_lo, m_hi - m_lo, n_lo, n_hi - n_lo);
        }
        return;
    }
    let slot = row_slot(NC.min(n_pad));
    let (buf, edge) = match b {
        BSource::Rows(_) | BSource::RowsPacked(_) | BSource::Panels(_) => {
            scratch.split_at_mut(kd.min(k) * slot)
        }
        BSource::Packed(_) => (&mut [][..], &mut [][..]),
    };
    let a_in_place = matches!(a, ASource::InPlace { .. });
    let pack_rows =
        m_hi - m_lo > ROWS_IN_PLACE_MAX_M || a_in_place || matches!(b, BSource::RowsPacked(_));
    let mut edge_a = [0.0f32; KC * MR];
    let in_place = matches!(b, BSource::Rows(_)) && !pack_rows;
    let mut tile = [0.0f32; MR * NR];
    // A simple conv epilogue runs in the full tiles' registers (where the table has the
    // fused tiles) and on each other tile right after it: no pass over the block.
    let fused = simple_epilogue(epi).filter(|_| {
        t.mm_tile_epi.is_some()
            && t.mm_tile_rows_epi.is_some()
            && (!a_in_place || t.mm_tile_strided_epi.is_some())
    });
    // A last strip exactly half a tile wide with A in place (`n` an odd multiple of
    // HALF: 24-channel projections) goes straight into C, its epilogue fused where the
    // other tiles' is (then not applied again below).
    let half_fused = a_in_place
        && n_hi == n
        && n % NR == HALF
        && t.mm_half_strided_epi.is_some()
        && (epi.is_empty() || fused.is_some());
    // The same strip with A in place on a table that does the last full strip and the
    // half one in one tile (`mm_tile24_strided_epi`: twice the independent sums), in
    // the last column block where it holds both.
    let wide24 = a_in_place
        && n_hi == n
        && n % NR == HALF
        && n > NR
        && t.mm_tile24_strided_epi.is_some()
        && (epi.is_empty() || fused.is_some());
    let mut srcs: [Option<&[f32]>; KC] = [None; KC];
    let mut jc = n_lo;
    while jc < n_hi {
        let jc_end = (jc + NC).min(n_hi);
        let len = jc_end - jc;
        let mut k0 = 0;
        while k0 < k {
            let kc = kd.min(k - k0);
            let first = k0 == 0;
            let last = k0 + kc == k;
            // Rows source: each row either borrowed from its source or written into its
            // slot; the table then points at whichever holds it.
            let mut rows: [&[f32]; KC] = [&[]; KC];
            let mut edge_panel: &[f32] = &[];
            let full = len / NR * NR;
            // A ragged last strip of at most COLS_MAX columns goes to `mm_cols` (down
            // the block's panels), not to a tile per panel.
            let cols_tail =
                (1..=COLS_MAX).contains(&(len - full)) && matches!(a, ASource::Packed(_));
            if let BSource::Panels(fill) = b {
                fill(k0, kc, jc, len, &mut buf[..kc * len.div_ceil(NR) * NR]);
            } else if let (BSource::Rows(fill) | BSource::RowsPacked(fill), true) = (b, pack_rows) {
                pack_block(fill, k0, kc, jc, len, buf, edge);
            } else if let (BSource::Rows(fill), true) = (b, in_place) {
                for (p, src) in srcs[..kc].iter_mut().enumerate() {
                    *src = fill(k0 + p, jc, len, &mut buf[p * slot..p * slot + len]);
                }
                for (p, row) in rows[..kc].iter_mut().enumerate() {
                    *row = srcs[p].unwrap_or(&buf[p * slot..p * slot + len]);
                }
                if full < len {
                    for (p, row) in rows[..kc].iter().enumerate() {
                        let d = &mut edge[p * NR..(p + 1) * NR];
                        d[..len - full].copy_from_slice(&row[full..len]);
                        d[len - full..].fill(0.0);
                    }
                    edge_panel = &edge[..kc * NR];
                }
            }
            let block = RowBlock::new(&rows[..kc], if in_place { len } else { 0 });
            // The 6x24 tile where this block holds both strips it takes.
            let wide24 = wide24 && jc_end == n && len >= NR + HALF;
            let mut ic = m_lo;
            while ic < m_hi {
                crate::kernels::yield_point::yield_point();
                let ic_end = (ic + MC).min(m_hi);
                // The B panel of the strip at column j.
                let panel_at = |j: usize| -> Panel<'_> {
                    let nr = NR.min(jc_end - j);
                    match b {
                        BSource::Packed(pb) => {
                            Panel::Packed(&pb[b_panel(n_pad, (k, kd), k0, j)..][..kc * NR])
                        }
                        BSource::Panels(_) | BSource::RowsPacked(_) => {
                            Panel::Packed(&buf[(j - jc) * kc..][..kc * NR])
                        }
                        BSource::Rows(_) if pack_rows => {
                            Panel::Packed(&buf[(j - jc) * kc..][..kc * NR])
                        }
                        BSource::Rows(_) if nr == NR => Panel::Rows(j - jc),
                        BSource::Rows(_) => Panel::Packed(edge_panel),
                    }
                };
                // The packed B panels from column j on (a full strip's `Panel::Packed`
                // and those to its right, consecutive in every packed source).
                let packed_from = |j: usize| -> &[f32] {
                    match b {
                        BSource::Packed(pb) => &pb[b_panel(n_pad, (k, kd), k0, j)..],
                        _ => &buf[(j - jc) * kc..],
                    }
                };
                // The tile of C at row i, column j, and where one call does them, up to
                // `most - 1` more strips to its right (the next full packed panels: a
                // walk of full tiles, a ragged last A panel; the one at j + NR where the
                // table pairs tiles) or `down - 1` more full tiles below (a walk).
                // Returns the strips and A panels done. A walk along the row brings
                // `ahead` into L2 as it goes.
                let mut tile_at = |i: usize,
                                   j: usize,
                                   most: usize,
                                   down: usize,
                                   below: usize,
                                   ahead: &[f32]| {
                    let (mr, nr) = (MR.min(ic_end - i), NR.min(jc_end - j));
                    let panel = panel_at(j);
                    if let (Panel::Rows(off), true) = (panel, i == ic) {
                        // Rows read in place: the block's first tiles of a strip ask for
                        // the strips ahead of it.
                        for r in &rows[..kc] {
                            prefetch_line(r.as_ptr().wrapping_add(off + PREFETCH_AHEAD));
                        }
                    }
                    if let (Some(w), Panel::Packed(_), true) =
                        (t.mm_tiles, panel, mr == MR && nr == NR)
                    {
                        let (walk, count) = if down >= 2 && !(wide24 && j + NR + HALF == n) {
                            (TileWalk::Down, down)
                        } else {
                            let count = if wide24 {
                                // Up to the last full strip, which goes with the half one.
                                let before = (n - HALF - NR).saturating_sub(j) / NR;
                                most.min(before)
                            } else {
                                most.min((jc_end - j) / NR)
                            };
                            // The rows below too where the walk takes all the strips.
                            let rows = if count == most { below } else { 1 };
                            (TileWalk::Right { rows }, count)
                        };
                        if count >= 2 {
                            let bp = packed_from(j);
                            let fuse = fused.as_ref().filter(|_| last);
                            let e = fuse.map(|f| f.walk(i, j, ldc));
                            let wa = match a {
                                ASource::Packed(pa) => {
                                    WalkA::Packed(&pa[a_panel(m_pad, (k, kd), k0, i)..])
                                }
                                ASource::InPlace { a, lda } => WalkA::Rows {
                                    a: &a[i * lda + k0..],
                                    lda,
                                },
                            };
                            let cs = &mut c[i * ldc + j..];
                            w(kc, wa, bp, ahead, cs, ldc, !first, e.as_ref(), walk, count);
                            return match walk {
                                TileWalk::Down => (1, count),
                                TileWalk::Right { rows } => (count, rows),
                            };
                        }
                    }
                    if let (true, Some(k2), ASource::Packed(pa), Panel::Packed(b0)) = (
                        most >= 2 && mr == MR && j + 2 * NR <= jc_end,
                        t.mm_tile_pair,
                        a,
                        panel,
                    ) {
                        if let Panel::Packed(b1) = panel_at(j + NR) {
                            let ap = &pa[a_panel(m_pad, (k, kd), k0, i)..][..kc * MR];
                            let fuse = fused.as_ref().filter(|_| last);
                            let e = fuse.map(|f| (f.tile(i, j, ldc), f.tile(i, j + NR, ldc)));
                            let cs = &mut c[i * ldc + j..];
                            k2(
                                kc,
                                ap,
                                [b0, b1],
                                cs,
                                ldc,
                                !first,
                                e.as_ref().map(|(e0, e1)| [e0, e1]),
                            );
                            return (2, 1);
                        }
                    }
                    let ap: &[f32] = match a {
                        ASource::Packed(pa) => &pa[a_panel(m_pad, (k, kd), k0, i)..][..kc * MR],
                        ASource::InPlace { a, lda } => {
                            let last_two = j + NR + HALF == n;
                            if let (true, Panel::Packed(b0), Some(k)) = (
                                wide24 && mr == MR && nr == NR && last_two,
                                panel,
                                t.mm_tile24_strided_epi,
                            ) {
                                if let Panel::Packed(b1) = panel_at(j + NR) {
                                    // The last full strip and the half one at once.
                                    let e =
                                        fused.as_ref().filter(|_| last).map(|f| f.tile(i, j, ldc));
                                    let (ar, cs) = (&a[i * lda + k0..], &mut c[i * ldc + j..]);
                                    k(kc, ar, lda, [b0, b1], cs, ldc, !first, e.as_ref());
                                    return (2, 1);
                                }
                            }
                            if let (true, Panel::Packed(bp)) = (mr == MR && nr == NR, panel) {
                                let cs = &mut c[i * ldc + j..];
                                let ar = &a[i * lda + k0..];
                                let fuse = fused.as_ref().filter(|_| last);
                                match (fuse, t.mm_tile_strided_epi) {
                                    (Some(f), Some(k)) => {
                                        let e = f.tile(i, j, ldc);
                                        k(kc, ar, lda, bp, cs, ldc, !first, &e);
                                    }
                                    _ => (t.mm_tile_strided)(kc, ar, lda, bp, cs, ldc, !first),
                                }
                                return (1, 1);
                            }
                            if let (true, Panel::Packed(bp)) = (half_fused && mr == MR, panel) {
                                // A half-width last strip: straight into C, its epilogue
                                // fused on the last K block.
                                let k = t.mm_half_strided_epi.expect("checked in half_fused");
                                let e = fused.as_ref().filter(|_| last).map(|f| f.tile(i, j, ldc));
                                let (ar, cs) = (&a[i * lda + k0..], &mut c[i * ldc + j..]);
                                k(kc, ar, lda, bp, cs, ldc, !first, e.as_ref());
                                return (1, 1);
                            }
                            if let (true, Panel::Packed(bp)) = (mr == MR && nr <= HALF, panel) {
                                // A narrow last strip: its half tile from A in place.
                                (t.mm_half_strided)(kc, &a[i * lda + k0..], lda, bp, &mut tile);
                                put_tile_block(&tile, (mr, nr), &mut c[i * ldc + j..], ldc, first);
                                return (1, 1);
                            }
                            let rows = &a[i * lda..];
                            let (panel_a, _) = edge_a.split_at_mut(kc * MR);
                            pack_a(&rows[k0..], lda, 1, mr, (kc, kc), 1.0, panel_a);
                            panel_a
                        }
                    };
                    let fuse = fused.as_ref().filter(|_| last);
                    if let (Some(f), true) = (fuse, mr == MR && nr == NR) {
                        let e = f.tile(i, j, ldc);
                        let cs = &mut c[i * ldc + j..];
                        match (panel, t.mm_tile_epi, t.mm_tile_rows_epi) {
                            (Panel::Packed(bp), Some(k), _) => k(kc, ap, bp, cs, ldc, !first, &e),
                            (Panel::Rows(off), _, Some(k)) => {
                                k(ap, &block, off, cs, ldc, !first, &e)
                            }
                            _ => unreachable!("fused tiles checked above"),
                        }
                        return (1, 1);
                    }
                    if mr < MR && nr == NR {
                        // A ragged last panel: only its rows, straight into C; the full
                        // packed panels to the right in the same call (consecutive in
                        // every packed source).
                        let cs = &mut c[i * ldc + j..];
                        match panel {
                            Panel::Packed(_) => {
                                let np = most.min((jc_end - j) / NR).max(1);
                                let bp = &packed_from(j)[..np * kc * NR];
                                (t.mm_part)(kc, ap, bp, np, cs, ldc, mr, !first);
                                return (np, 1);
                            }
                            Panel::Rows(off) => {
                                (t.mm_part_rows)(ap, &block, off, cs, ldc, mr, !first)
                            }
                        }
                        return (1, 1);
                    }
                    if mr == MR && nr == NR {
                        let cs = &mut c[i * ldc + j..];
                        match panel {
                            Panel::Packed(bp) => (t.mm_tile)(kc, ap, bp, cs, ldc, !first),
                            Panel::Rows(off) => (t.mm_tile_rows)(ap, &block, off, cs, ldc, !first),
                        }
                    } else {
                        match panel {
                            Panel::Packed(bp) if mr == 1 => (t.mm_row)(kc, ap, bp, &mut tile),
                            Panel::Packed(bp) if nr <= HALF => (t.mm_half)(kc, ap, bp, &mut tile),
                            Panel::Packed(bp) => (t.mm_tile)(kc, ap, bp, &mut tile, NR, false),
                            // Rows panels are full width, and a full-width tile is
                            // whole or went to `mm_part_rows` above.
                            Panel::Rows(_) => unreachable!("ragged tile on a rows panel"),
                        }
                        put_tile_block(&tile, (mr, nr), &mut c[i * ldc + j..], ldc, first);
                    }
                    (1, 1)
                };
                // Long C rows: each panel's rows written as runs (panels outer); else
                // strips outer. One call site, so that the tile's body is inlined into
                // the loop rather than called per tile.
                let (panels, strips) = (
                    (ic_end - ic).div_ceil(MR),
                    len.div_ceil(NR) - usize::from(cols_tail),
                );
                // Panels outer also when the block's whole B fits in half of L1 (the
                // narrow GEMMs of channels-last 1x1 convs: B is the weights), so that
                // each panel's C rows are written whole, once. A single strip goes strips
                // outer whatever: one call then walks all the block's panels down, where
                // panels outer would call once per tile (Zen 3, A in place, min of 20:
                // 12544x32x16 179 -> 159 us, 784x32x16 12 -> 11; MobileNetV2's 32->16
                // projection in the network 177 -> 156).
                let b_in_l1 = len * kc <= b_in_l1_floats();
                let one_strip = strips == 1;
                let panels_outer = k <= kd && (ldc >= C_ROWS_MIN_LDC || b_in_l1) && !one_strip;
                // Where the table pairs tiles, strips go together: along a panel's row
                // (panels outer), or as groups of `GROUP_STRIPS` (strips outer; a table
                // that walks does them in one call, two at a time otherwise).
                let pairs = t.mm_tile_pair.is_some();
                let group = if pairs && !panels_outer && !one_strip {
                    GROUP_STRIPS
                } else {
                    1
                };
                // Strips outer, a ragged last A panel runs after the others along its
                // row, so that its calls can take several strips (`mm_part`).
                let ragged = !panels_outer && (ic_end - ic) % MR != 0;
                let (outer, inner) = if panels_outer {
                    (panels, strips)
                } else {
                    (strips.div_ceil(group), panels - usize::from(ragged))
                };
                // Packed weights, strips outer in groups: the group's walk, on its rows
                // after the first (which read the group's B from memory), brings the next
                // group's panels (or the next K block's first) into L2 in equal shares,
                // so that its first panel finds them there. The hardware prefetcher
                // does not see that far: a group's B is 64 KiB of four streams. Xeon
                // (AVX-512), operands out of L2, best of 30: 49x320x1280 342 -> 300-319
                // us, 49x960x320 260 -> 230-245, 196x576x96 171 -> 158-173.
                let next_group = |o: usize| -> &[f32] {
                    let BSource::Packed(pb) = b else {
                        return &[];
                    };
                    let (ns, nk0) = if (o + 1) * group < strips {
                        ((o + 1) * group, k0)
                    } else {
                        (0, k0 + kc)
                    };
                    if panels_outer || group == 1 || nk0 >= k {
                        return &[];
                    }
                    let nkc = kd.min(k - nk0);
                    let g = group.min(strips - ns);
                    let start = b_panel(n_pad, (k, kd), nk0, jc + ns * NR);
                    &pb[start..start + g * nkc * NR]
                };
                // Full A panels of the block (panels outer: a walk along a whole row of
                // strips goes on down the full panels below it).
                let full_panels = (ic_end - ic) / MR;
                let mut o = 0;
                while o < outer {
                    let (mut q, mut sub) = (0, 0);
                    // Panels the row's walk did (panels outer).
                    let mut walked = 1;
                    while q < inner {
                        let (p, s) = if panels_outer {
                            (o, q)
                        } else {
                            (q, o * group + sub)
                        };
                        // Strips the call may do: the rest of the panel's row (panels
                        // outer), the rest of the group (strips outer).
                        let most = if panels_outer {
                            inner - q
                        } else {
                            (group - sub).min(strips - s)
                        };
                        // Full A panels below the tile a call may do (strips outer,
                        // one strip at a time).
                        let down = if !panels_outer && group == 1 {
                            inner - q
                        } else {
                            1
                        };
                        // A walk along the group's strips from its first may go down
                        // every panel left; the group's first call gets the next
                        // group's B, which the walk shares out over its rows. Panels
                        // outer, a walk along a panel's whole row goes on down the full
                        // panels below (one call for them: with a call per panel, the
                        // calls cost ~15 % of a shallow product, Emerald Rapids,
                        // 448x16x96).
                        let rows = if !panels_outer && group > 1 && sub == 0 {
                            inner - q
                        } else if panels_outer && q == 0 {
                            full_panels.saturating_sub(o).max(1)
                        } else {
                            1
                        };
                        let ahead = if sub == 0 && q == 0 {
                            next_group(o)
                        } else {
                            &[][..]
                        };
                        let (i, j) = (ic + p * MR, jc + s * NR);
                        let (done, below) = tile_at(i, j, most, down, rows, ahead);
                        if panels_outer && below > 1 {
                            (q, walked) = (inner, below);
                        } else if panels_outer {
                            q += done;
                        } else if below > 1 {
                            q += below;
                        } else {
                            sub += done;
                            if sub >= group || o * group + sub >= strips {
                                (q, sub) = (q + 1, 0);
                            }
                        }
                    }
                    // Strips outer in groups, the ragged last panel right after the
                    // group's walk down the full ones, while the group's B is in L1
                    // (after all the groups, its rows read the whole B again from L2 or
                    // further: MobileNetV2's 7x7 products have 49 rows, B up to 1.2 MB).
                    if ragged && group > 1 {
                        let end = ((o + 1) * group).min(strips);
                        let mut s = o * group;
                        while s < end {
                            s += tile_at(ic + (panels - 1) * MR, jc + s * NR, end - s, 1, 1, &[]).0;
                        }
                    }
                    o += if panels_outer { walked } else { 1 };
                }
                if ragged && group == 1 {
                    let mut s = 0;
                    while s < strips {
                        s += tile_at(ic + (panels - 1) * MR, jc + s * NR, strips - s, 1, 1, &[]).0;
                    }
                }
                let tail_panel = cols_tail.then(|| panel_at(jc + full));
                if let (ASource::Packed(pa), Some(Panel::Packed(bp))) = (a, tail_panel) {
                    let ap = &pa[a_panel(m_pad, (k, kd), k0, ic)..];
                    let cs = &mut c[ic * ldc + jc + full..];
                    let rows = ic_end - ic;
                    (t.mm_cols)(kc, ap, panels, bp, len - full, cs, ldc, rows, !first);
                }
                // The epilogue runs once per finished MC x NC block, row segments of up
                // to NC contiguous elements, while the block is still in cache; with the
                // fused tiles, only over the block's edge tiles (a ragged last panel, a
                // ragged last strip), two calls rather than one per edge tile.
                if last && !epi.is_empty() {
                    if fused.is_none() {
                        epi.apply(isa, c, ldc, ic, ic_end - ic, jc, jc_end - jc);
                    } else {
                        let (rows, cols) = ((ic_end - ic) / MR * MR, full);
                        if rows < ic_end - ic {
                            epi.apply(isa, c, ldc, ic + rows, ic_end - ic - rows, jc, len);
                        }
                        if cols < len && rows > 0 && !((half_fused || wide24) && jc_end == n) {
                            epi.apply(isa, c, ldc, ic, rows, jc + cols, len - cols);
                        }
                    }
                }
                ic = ic_end;
            }
            k0 += kc;
        }
        jc = jc_end;
    }
}

/// Rows `0..mr`, columns `0..nr` of an MR x NR `tile` into `c` (stride `ldc`): copied
/// on the first K block, added on the others.
#[inline]
fn put_tile_block(tile: &[f32], (mr, nr): (usize, usize), c: &mut [f32], ldc: usize, first: bool) {
    for r in 0..mr {
        let dst = &mut c[r * ldc..r * ldc + nr];
        let src = &tile[r * NR..r * NR + nr];
        if first {
            dst.copy_from_slice(src);
        } else {
            for (d, s) in dst.iter_mut().zip(src) {
                *d += *s;
            }
        }
    }
}

/// An epilogue of the form a tile can fuse ([`TileEpi`]): per-channel bias (channel =
/// row for a conv, column for Gemm / MatMul), then a residual, then ReLU / Clip.
struct SimpleEpi<'e> {
    bias: Option<&'e [f32]>,
    channel_offset: usize,
    /// The channel is the column.
    cols: bool,
    residual: Option<&'e [f32]>,
    clamp: Option<(f32, f32)>,
}

impl SimpleEpi<'_> {
    /// The fused epilogue of the full tile at row `i`, column `j` of C.
    fn tile(&self, i: usize, j: usize, ldc: usize) -> TileEpi<'_> {
        self.walk(i, j, ldc).tile(0, &WalkSteps::default())
    }

    /// The fused epilogue of a walk of full tiles from row `i`, column `j` of C.
    fn walk(&self, i: usize, j: usize, ldc: usize) -> WalkEpi<'_> {
        let (mut row_bias, mut col_bias) = (None, None);
        if let Some(b) = self.bias {
            if self.cols {
                col_bias = Some(&b[self.channel_offset + j..]);
            } else {
                row_bias = Some(&b[self.channel_offset + i..]);
            }
        }
        WalkEpi {
            row_bias,
            col_bias,
            residual: self.residual.map(|r| &r[i * ldc + j..]),
            clamp: self.clamp,
        }
    }
}

/// `epi` as a [`SimpleEpi`] ([`Epilogue::simple_form`]), or `None` (empty, or another
/// form).
fn simple_epilogue<'e>(epi: &Epilogue<'e>) -> Option<SimpleEpi<'e>> {
    if epi.is_empty() {
        return None;
    }
    // The form whichever way the channel runs (a column channel takes `col_bias`).
    let (slot, clamp) = Epilogue {
        channel_is_row: true,
        ..*epi
    }
    .simple_form()?;
    Some(SimpleEpi {
        bias: epi.bias,
        channel_offset: epi.channel_offset,
        cols: !epi.channel_is_row,
        residual: slot.map(|k| epi.residuals[k]),
        clamp,
    })
}

/// Reference product used by tests: `C = A · B` with plain loops.
#[cfg(test)]
pub fn gemm_naive(m: usize, n: usize, k: usize, a: &[f32], b: &[f32]) -> Vec<f32> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut s = 0.0f64;
            for p in 0..k {
                s += a[i * k + p] as f64 * b[p * n + j] as f64;
            }
            c[i * n + j] = s as f32;
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::UnaryOp;
    use crate::kernels::isa::twin_test;
    use crate::kernels::testutil::{assert_close, rand_vec};
    use crate::kernels::unary::PostOpRt;

    twin_test!(gemm_tables_match_portable, 1e-5, |t| {
        use crate::kernels::isa::{RowBlock, HALF};
        let mut out = Vec::new();
        for kc in [0usize, 1, 2, 7, 64, 257] {
            let a = rand_vec(kc * MR, 1);
            let b = rand_vec(kc * NR, 2);
            for acc in [false, true] {
                let mut c = rand_vec(MR * 20, 3);
                (t.mm_tile)(kc, &a, &b, &mut c, 20, acc);
                out.extend_from_slice(&c);
                let rows: Vec<&[f32]> = (0..kc).map(|p| &b[p * NR..]).collect();
                let block = RowBlock::new(&rows, NR.min(b.len()));
                if kc > 0 {
                    (t.mm_tile_rows)(&a, &block, 0, &mut c, 20, acc);
                    out.extend_from_slice(&c);
                }
            }
            // The same A in place, rows 3 * kc + 1 apart.
            let lda = 3 * kc + 1;
            let mut a_rows = rand_vec((MR - 1) * lda + kc, 7);
            for (r, p) in (0..MR).flat_map(|r| (0..kc).map(move |p| (r, p))) {
                a_rows[r * lda + p] = a[p * MR + r];
            }
            for acc in [false, true] {
                let mut c = rand_vec(MR * 20, 3);
                (t.mm_tile_strided)(kc, &a_rows, lda, &b, &mut c, 20, acc);
                out.extend_from_slice(&c);
            }
            let mut r = [0.0f32; NR];
            (t.mm_row)(kc, &a, &b, &mut r);
            out.extend_from_slice(&r);
            let mut h = vec![7.0f32; MR * NR];
            (t.mm_half)(kc, &a, &b, &mut h);
            out.extend_from_slice(&h);
            assert!(h[HALF..NR].iter().all(|&v| v == 7.0), "right half kept");
            let mut hs = vec![7.0f32; MR * NR];
            (t.mm_half_strided)(kc, &a_rows, lda, &b, &mut hs);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&hs),
                bits(&h),
                "{}: A in place, the packed half's bits",
                t.name
            );
        }
        let (bias, scale, shift, res) = (
            rand_vec(12, 9),
            rand_vec(12, 10),
            rand_vec(12, 11),
            rand_vec(12 * 20, 12),
        );
        let post = [
            PostOpRt::Affine { scale, shift },
            PostOpRt::AddInput { slot: 0 },
            PostOpRt::PRelu {
                slope: bias.clone(),
            },
            PostOpRt::Unary(UnaryOp::Clip {
                min: -0.5,
                max: 0.5,
            }),
        ];
        let relu = [PostOpRt::Unary(UnaryOp::Relu)];
        let clip = PostOpRt::Unary(UnaryOp::Clip {
            min: -0.25,
            max: 0.75,
        });
        let (add, add_relu) = (
            [PostOpRt::AddInput { slot: 0 }],
            [PostOpRt::AddInput { slot: 0 }, relu[0].clone()],
        );
        let (clip1, add_clip) = ([clip.clone()], [add[0].clone(), clip]);
        // The simple forms (no addend; bias, residual, ReLU / Clip) and the general one.
        let forms: [&[PostOpRt]; 7] = [&post, &relu, &[], &clip1, &add, &add_relu, &add_clip];
        let residuals: [&[f32]; 1] = [&res];
        for row in [true, false] {
            for post in forms {
                let e = Epilogue {
                    bias: Some(&bias),
                    channel_is_row: row,
                    channel_offset: usize::from(row),
                    addend: (post.len() > 1).then_some(&res[..]),
                    post,
                    residuals: &residuals,
                };
                let mut c = rand_vec(12 * 20, 13);
                (t.epilogue)(&e, &mut c, 20, 2, 5, 1, 11);
                out.extend_from_slice(&c);
            }
        }
        // Whole products over edge sizes, through the table's ISA.
        for &(m, n, k) in &[(1, 1, 1), (7, 17, 3), (13, 33, 300), (41, 20, 9), (6, 9, 0)] {
            let (a, b) = (rand_vec(m * k, 4), rand_vec(k * n, 5));
            let mut pa = vec![0.0; packed_a_len(m, k)];
            let mut pb = vec![0.0; packed_b_len(k, n)];
            pack_a(&a, k, 1, m, (k, k_depth(k, n)), 1.0, &mut pa);
            pack_b(&b, n, 1, k, n, 1.0, &mut pb, &mut vec![0.0; n]);
            let mut c = vec![0.0; m * n];
            let e = Epilogue {
                bias: Some(&bias[..]),
                channel_is_row: false,
                ..Epilogue::NONE
            };
            let bias = rand_vec(n, 6);
            let e = Epilogue {
                bias: Some(&bias),
                ..e
            };
            gemm_packed(
                t.isa,
                m,
                n,
                (k, k_depth(k, n)),
                &pa,
                BSource::Packed(&pb),
                &mut [],
                &mut c,
                n,
                (0, m),
                (0, n),
                &e,
            );
            out.extend_from_slice(&c);
            // A in place, B packed per block from rows (both ragged edges).
            let fill = |p: usize, j0: usize, len: usize, _: &mut [f32]| {
                Some(&b[p * n + j0..p * n + j0 + len])
            };
            let mut scratch = vec![0.0; block_scratch_len(k, n)];
            gemm_with(
                t.isa,
                m,
                n,
                k,
                ASource::InPlace { a: &a, lda: k },
                BSource::Rows(&fill),
                &mut scratch,
                &mut c,
                n,
                (0, m),
                (0, n),
                &e,
            );
            out.extend_from_slice(&c);
        }
        out
    });

    fn run(m: usize, n: usize, k: usize, isa: Isa) {
        let a = rand_vec(m * k, 1);
        let b = rand_vec(k * n, 2);
        let mut pa = vec![0.0; packed_a_len(m, k)];
        let mut pb = vec![0.0; packed_b_len(k, n)];
        pack_a(&a, k, 1, m, (k, k_depth(k, n)), 1.0, &mut pa);
        pack_b(&b, n, 1, k, n, 1.0, &mut pb, &mut vec![0.0; n]);
        let mut c = vec![f32::NAN; m * n];
        gemm_packed(
            isa,
            m,
            n,
            (k, k_depth(k, n)),
            &pa,
            BSource::Packed(&pb),
            &mut [],
            &mut c,
            n,
            (0, m),
            (0, n),
            &Epilogue::NONE,
        );
        let want = gemm_naive(m, n, k, &a, &b);
        assert_close(&c, &want, 1e-4);
        // The same product with B generated block by block: even rows borrowed from
        // their source, odd rows written into the slot the GEMM provides.
        let fill = |p: usize, j0: usize, len: usize, row: &mut [f32]| {
            let src = &b[p * n + j0..p * n + j0 + len];
            if p.is_multiple_of(2) {
                Some(src)
            } else {
                row.copy_from_slice(src);
                None
            }
        };
        let mut scratch = vec![0.0; block_scratch_len(k, n)];
        let mut c2 = vec![f32::NAN; m * n];
        gemm_packed(
            isa,
            m,
            n,
            (k, k_depth(k, n)),
            &pa,
            BSource::Rows(&fill),
            &mut scratch,
            &mut c2,
            n,
            (0, m),
            (0, n),
            &Epilogue::NONE,
        );
        assert_close(&c2, &want, 1e-4);
        // B written straight into packed panels, block by block.
        let panels = |k0: usize, kc: usize, jc: usize, nc: usize, buf: &mut [f32]| {
            let mut row = vec![0.0; nc];
            pack_block(&fill, k0, kc, jc, nc, buf, &mut row);
        };
        let mut c4 = vec![f32::NAN; m * n];
        gemm_packed(
            isa,
            m,
            n,
            (k, k_depth(k, n)),
            &pa,
            BSource::Panels(&panels),
            &mut scratch,
            &mut c4,
            n,
            (0, m),
            (0, n),
            &Epilogue::NONE,
        );
        assert_close(&c4, &want, 1e-4);
        // A read in place (B packed, then B from rows), whole and as row tiles.
        for tiles in [1, 3] {
            let mut c3 = vec![f32::NAN; m * n];
            for tix in 0..tiles {
                let blocks = m.div_ceil(MR);
                let r0 = (blocks * tix / tiles * MR).min(m);
                let r1 = (blocks * (tix + 1) / tiles * MR).min(m);
                let a_rows = ASource::InPlace {
                    a: &a[r0 * k..],
                    lda: k,
                };
                let cs = &mut c3[r0 * n..r1 * n];
                let bs = if tix % 2 == 0 {
                    BSource::Packed(&pb)
                } else {
                    BSource::Rows(&fill)
                };
                let (rows, e) = (r1 - r0, &Epilogue::NONE);
                gemm_with(
                    isa,
                    rows,
                    n,
                    k,
                    a_rows,
                    bs,
                    &mut scratch,
                    cs,
                    n,
                    (0, rows),
                    (0, n),
                    e,
                );
            }
            assert_close(&c3, &want, 1e-4);
        }
    }

    /// The simple conv epilogues (bias, residual, ReLU / Clip) a tile fuses.
    fn simple_forms() -> Vec<Vec<PostOpRt>> {
        let (relu, clip) = (
            PostOpRt::Unary(UnaryOp::Relu),
            PostOpRt::Unary(UnaryOp::Clip {
                min: -0.3,
                max: 0.4,
            }),
        );
        let add = PostOpRt::AddInput { slot: 0 };
        vec![
            vec![],
            vec![relu.clone()],
            vec![clip.clone()],
            vec![add.clone()],
            vec![add.clone(), relu],
            vec![add, clip],
        ]
    }

    #[test]
    fn fused_tile_epilogue_matches_tile_then_epilogue() {
        for isa in crate::kernels::isa::available_isas() {
            let t = isa.table();
            let (Some(fused), Some(fused_rows)) = (t.mm_tile_epi, t.mm_tile_rows_epi) else {
                continue;
            };
            let (kc, ldc, lda) = (37, 20, 41);
            let (a, b) = (rand_vec(kc * MR, 1), rand_vec(kc * NR, 2));
            // The same A as rows read in place (`mm_tile_strided`).
            let mut a_rows = vec![0.0; MR * lda];
            for p in 0..kc {
                for r in 0..MR {
                    a_rows[r * lda + p] = a[p * MR + r];
                }
            }
            let bias = rand_vec(NR + 3, 3);
            let mut res = rand_vec(MR * ldc, 4);
            res[7] = f32::NAN;
            let residuals: [&[f32]; 1] = [&res];
            let rows: Vec<&[f32]> = b.chunks_exact(NR).collect();
            let block = RowBlock::new(&rows, NR);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            for post in simple_forms() {
                for acc in [false, true] {
                    for (with_bias, cols) in [(false, false), (true, false), (true, true)] {
                        let e = Epilogue {
                            bias: with_bias.then_some(&bias[..]),
                            channel_is_row: !cols,
                            channel_offset: 2,
                            post: &post,
                            residuals: &residuals,
                            ..Epilogue::NONE
                        };
                        let mut want = rand_vec(MR * ldc, 5);
                        (t.mm_tile)(kc, &a, &b, &mut want, ldc, acc);
                        if !e.is_empty() {
                            (t.epilogue)(&e, &mut want, ldc, 0, MR, 0, NR);
                        }
                        let Some(se) = simple_epilogue(&e) else {
                            assert!(e.is_empty(), "{post:?} is a simple form");
                            continue;
                        };
                        let te = se.tile(0, 0, ldc);
                        let (mut got, mut got_rows) =
                            (rand_vec(MR * ldc, 5), rand_vec(MR * ldc, 5));
                        fused(kc, &a, &b, &mut got, ldc, acc, &te);
                        fused_rows(&a, &block, 0, &mut got_rows, ldc, acc, &te);
                        let what = format!("{isa:?} {post:?} acc {acc} cols {cols}");
                        assert_eq!(bits(&got), bits(&want), "{what}");
                        assert_eq!(bits(&got_rows), bits(&want), "rows {what}");
                        if let Some(strided) = t.mm_tile_strided_epi {
                            let mut got = rand_vec(MR * ldc, 5);
                            strided(kc, &a_rows, lda, &b, &mut got, ldc, acc, &te);
                            assert_eq!(bits(&got), bits(&want), "strided {what}");
                        }
                    }
                }
            }
        }
    }

    /// Rows `0..rows`, columns `0..cols` of an MR x NR `tile` into `c` (stride `ldc`),
    /// added when `acc`: what a tile kernel stores.
    fn put_tile(tile: &[f32], dims: (usize, usize), c: &mut [f32], ldc: usize, acc: bool) {
        put_tile_block(tile, dims, c, ldc, !acc)
    }

    /// `mm_part` of every table gives the bits `mm_tile` gives those rows, with and
    /// without accumulation, at every depth and row count, for 1 to 7 panels a call
    /// (every group a table forms and its remainders).
    #[test]
    fn part_tiles_give_the_tiles_bits() {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for isa in crate::kernels::isa::available_isas() {
            let t = isa.table();
            for kc in [0usize, 1, 2, 7, 37, 256] {
                for panels in 1..=7 {
                    let (a, b) = (rand_vec(kc * MR, 1), rand_vec(panels * kc * NR, 2));
                    let ldc = panels * NR + 3;
                    for rows in 1..MR {
                        for acc in [false, true] {
                            let start = rand_vec((rows - 1) * ldc + panels * NR, 5);
                            let mut want = start.clone();
                            for q in 0..panels {
                                let mut tile = [0.0f32; MR * NR];
                                let bq = &b[q * kc * NR..(q + 1) * kc * NR];
                                (t.mm_tile)(kc, &a, bq, &mut tile, NR, false);
                                put_tile(&tile, (rows, NR), &mut want[q * NR..], ldc, acc);
                            }
                            let mut got = start.clone();
                            (t.mm_part)(kc, &a, &b, panels, &mut got, ldc, rows, acc);
                            let what = format!("{isa:?} kc {kc} rows {rows} panels {panels}");
                            assert_eq!(bits(&got), bits(&want), "{what}");
                            if panels > 1 {
                                continue;
                            }
                            // The same B as rows read in place, 5 floats into each.
                            let wide: Vec<Vec<f32>> = (0..kc)
                                .map(|p| [&[9.0; 5][..], &b[p * NR..p * NR + NR]].concat())
                                .collect();
                            let refs: Vec<&[f32]> = wide.iter().map(Vec::as_slice).collect();
                            let block = RowBlock::new(&refs, 5 + NR);
                            let mut got = start.clone();
                            (t.mm_part_rows)(&a, &block, 5, &mut got, ldc, rows, acc);
                            assert_eq!(bits(&got), bits(&want), "rows {what}");
                        }
                    }
                }
            }
        }
    }

    /// `mm_cols` of every table gives the bits `mm_tile` gives those columns, for any
    /// number of panels (each group size and its remainders), ragged last panels, every
    /// width, with and without accumulation.
    #[test]
    fn column_strips_give_the_tiles_bits() {
        use crate::kernels::isa::COLS_MAX;
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for isa in crate::kernels::isa::available_isas() {
            let t = isa.table();
            for kc in [1usize, 2, 7, 37, 256] {
                let b = rand_vec(kc * NR, 2);
                // Past the largest group (16 panels: eight pairs of one column).
                for panels in 1..=18 {
                    // Exactly the panels' floats: the last step must not read past them.
                    let a = rand_vec(panels * kc * MR, 1);
                    for rows in [panels * MR, panels * MR - 5] {
                        for w in 1..=COLS_MAX {
                            let ldc = w + 3;
                            for acc in [false, true] {
                                let start = rand_vec(rows * ldc, 5);
                                let mut want = start.clone();
                                for q in 0..panels {
                                    let mut tile = [0.0f32; MR * NR];
                                    (t.mm_tile)(kc, &a[q * kc * MR..], &b, &mut tile, NR, false);
                                    let dst = &mut want[q * MR * ldc..];
                                    put_tile(&tile, (MR.min(rows - q * MR), w), dst, ldc, acc);
                                }
                                let mut got = start.clone();
                                (t.mm_cols)(kc, &a, panels, &b, w, &mut got, ldc, rows, acc);
                                let ctx =
                                    format!("{isa:?} kc {kc} panels {panels} rows {rows} w {w}");
                                assert_eq!(bits(&got), bits(&want), "{ctx} acc {acc}");
                            }
                        }
                    }
                }
            }
        }
    }

    /// Every table that pairs tiles (AVX-512 on CPUs that have it) gives the bits of two
    /// single tiles, with and without accumulation and a fused epilogue.
    #[test]
    fn paired_tiles_give_the_single_tiles_bits() {
        use crate::kernels::isa::TileEpi;
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for isa in crate::kernels::isa::available_isas() {
            let t = isa.table();
            let (Some(pair), Some(fused)) = (t.mm_tile_pair, t.mm_tile_epi) else {
                continue;
            };
            let ldc = 2 * NR + 5;
            let res = rand_vec(MR * ldc, 4);
            let bias: [f32; MR] = std::array::from_fn(|r| r as f32 * 0.25 - 0.5);
            for kc in [0usize, 1, 2, 7, 37, 257] {
                let a = rand_vec(kc * MR, 1);
                let (b0, b1) = (rand_vec(kc * NR, 2), rand_vec(kc * NR, 3));
                for acc in [false, true] {
                    for with_epi in [false, true] {
                        let e = |q: usize| TileEpi {
                            bias,
                            col_bias: None,
                            residual: Some(&res[q * NR..]),
                            clamp: Some((-0.5, 0.75)),
                        };
                        let (e0, e1) = (e(0), e(1));
                        let mut want = rand_vec(MR * ldc, 5);
                        let mut got = want.clone();
                        if with_epi {
                            fused(kc, &a, &b0, &mut want, ldc, acc, &e0);
                            fused(kc, &a, &b1, &mut want[NR..], ldc, acc, &e1);
                        } else {
                            (t.mm_tile)(kc, &a, &b0, &mut want, ldc, acc);
                            (t.mm_tile)(kc, &a, &b1, &mut want[NR..], ldc, acc);
                        }
                        let es = with_epi.then_some([&e0, &e1]);
                        pair(kc, &a, [&b0, &b1], &mut got, ldc, acc, es);
                        assert_eq!(bits(&got), bits(&want), "{isa:?} kc {kc} acc {acc}");
                    }
                }
            }
        }
    }

    /// K blocks: one where a group of strips' B fits the L1 budget, else equal depths
    /// within it (never a short last block), never past KC.
    #[test]
    fn k_depth_blocks_fit_the_group_budget() {
        assert_eq!(k_depth(144, 24), 144);
        assert_eq!(k_depth(192, 32), 192);
        assert_eq!(k_depth(96, 576), 96);
        assert_eq!(k_depth(576, 96), 116);
        assert_eq!(k_depth(960, 320), 120);
        assert_eq!(k_depth(0, 10), 1);
        for k in 1..1200 {
            for n in [1, 16, 24, 40, 64, 96, 1000] {
                let d = k_depth(k, n);
                let cols = GROUP_STRIPS.min(n.div_ceil(NR)) * NR;
                assert!((1..=KC).contains(&d) && d <= k, "{k}x{n}: {d}");
                if d < k {
                    assert!(d * cols <= GROUP_B_FLOATS, "{k}x{n}: {d} overflows");
                    let blocks = k.div_ceil(d);
                    assert!(
                        k - (blocks - 1) * d + blocks > d,
                        "{k}x{n}: short last block"
                    );
                }
            }
        }
    }

    /// Row-major A (`m x k`) and B (`k x n`) packed for the GEMM.
    /// A packed and A read in place give the bits of the product summed in the tiles'
    /// order (a plain loop of FMAs per K block) followed by the epilogue, whichever way
    /// the block is walked: panels outer (long C rows, B in L1: walks along rows),
    /// strips outer (walks down columns), two K blocks (the fused epilogue on the last
    /// only), ragged rows and columns (half-width last strips: 24 and 40 columns), row
    /// tiles; with and without a fused epilogue (column bias, residual, clamp).
    #[test]
    fn tile_walks_give_the_plain_products_bits() {
        // The first element whose bits differ, if any.
        let differ = |got: &[f32], want: &[f32]| {
            let i = got
                .iter()
                .zip(want)
                .position(|(g, w)| g.to_bits() != w.to_bits());
            i.map(|i| (i, got[i], want[i]))
        };
        for isa in crate::kernels::isa::available_isas() {
            // The walks' tables sum in the plain FMA order; others in their own.
            let plain = isa.table().mm_tiles.is_some();
            for &(m, n, k) in &[
                (49, 160, 96),
                (37, 600, 40),
                (50, 40, KC + 44),
                (13, 64, 20),
                // Past one NC column block: the half strip alone in the last block, and
                // with the last full strip.
                (13, NC + HALF, 20),
                (13, NC + NR + HALF, 20),
                (6 * MC + 5, 48, 24),
                (31, 24, 96),
            ] {
                let (a, b) = (rand_vec(m * k, 11), rand_vec(k * n, 12));
                let (bias, res) = (rand_vec(n, 13), rand_vec(m * n, 14));
                let residuals: [&[f32]; 1] = [&res];
                let (pa, pb) = packed_operands(&a, &b, (m, n, k));
                for post in simple_forms() {
                    let e = Epilogue {
                        bias: Some(&bias),
                        channel_is_row: false,
                        post: &post,
                        residuals: &residuals,
                        ..Epilogue::NONE
                    };
                    let mut scratch = vec![0.0; block_scratch_len(k, n)];
                    let mut want = vec![0.0; m * n];
                    for (i, row) in want.chunks_mut(n).enumerate() {
                        for (j, w) in row.iter_mut().enumerate() {
                            let mut total = None;
                            for k0 in (0..k).step_by(k_depth(k, n)) {
                                let s = (k0..k.min(k0 + k_depth(k, n)))
                                    .fold(0.0f32, |s, p| a[i * k + p].mul_add(b[p * n + j], s));
                                total = Some(total.map_or(s, |t: f32| s + t));
                            }
                            *w = total.unwrap_or(0.0);
                        }
                    }
                    e.apply(isa, &mut want, n, 0, m, 0, n);
                    let mut packed = vec![f32::NAN; m * n];
                    let src = ASource::Packed(&pa);
                    let (full, bp) = ((0, m), BSource::Packed(&pb));
                    gemm_with(
                        isa,
                        m,
                        n,
                        k,
                        src,
                        bp,
                        &mut scratch,
                        &mut packed,
                        n,
                        full,
                        (0, n),
                        &e,
                    );
                    let what = format!("{isa:?} {m}x{n}x{k} {post:?}");
                    if plain {
                        let d = differ(&packed, &want);
                        assert!(d.is_none(), "{what} A packed: (index, got, want) {d:?}");
                    } else {
                        want = packed;
                    }
                    // Whole, and as two row tiles (the second starting at an MR multiple).
                    for cut in [m, (m / 2).div_ceil(MR) * MR] {
                        let mut got = vec![f32::NAN; m * n];
                        for (r0, r1) in [(0, cut), (cut, m)] {
                            if r0 == r1 {
                                continue;
                            }
                            let res_t: [&[f32]; 1] = [&res[r0 * n..r1 * n]];
                            let e = Epilogue {
                                residuals: &res_t,
                                ..e
                            };
                            let src = ASource::InPlace {
                                a: &a[r0 * k..],
                                lda: k,
                            };
                            let rows = r1 - r0;
                            let cs = &mut got[r0 * n..r1 * n];
                            let (bp, all) = (BSource::Packed(&pb), (0, rows));
                            gemm_with(
                                isa,
                                rows,
                                n,
                                k,
                                src,
                                bp,
                                &mut scratch,
                                cs,
                                n,
                                all,
                                (0, n),
                                &e,
                            );
                        }
                        let d = differ(&got, &want);
                        assert!(d.is_none(), "{what} A in place, cut {cut}: {d:?}");
                    }
                }
            }
        }
    }

    fn packed_operands(
        a: &[f32],
        b: &[f32],
        (m, n, k): (usize, usize, usize),
    ) -> (Vec<f32>, Vec<f32>) {
        let mut pa = vec![0.0; packed_a_len(m, k)];
        let mut pb = vec![0.0; packed_b_len(k, n)];
        pack_a(a, k, 1, m, (k, k_depth(k, n)), 1.0, &mut pa);
        pack_b(b, n, 1, k, n, 1.0, &mut pb, &mut vec![0.0; n]);
        (pa, pb)
    }

    /// B rows packed block by block (`RowsPacked`, for few rows of C too) and packed
    /// whole give the same bits (same K blocks, same micro-kernels; ragged panels and a
    /// K over one block included), as do rows read in place on the SIMD tables.
    #[test]
    fn rows_packed_blocks_match_packed_b() {
        for isa in crate::kernels::isa::available_isas() {
            for &(m, n, k) in &[(1, 37, 5), (7, 600, 40), (24, 100, 300), (40, 16, 1)] {
                let (a, b) = (rand_vec(m * k, 16), rand_vec(k * n, 17));
                let (pa, pb) = packed_operands(&a, &b, (m, n, k));
                let fill = |p: usize, j0: usize, len: usize, _: &mut [f32]| {
                    Some(&b[p * n + j0..p * n + j0 + len])
                };
                let run = |src: BSource<'_>| {
                    let mut c = vec![f32::NAN; m * n];
                    let mut scratch = vec![0.0; block_scratch_len(k, n)];
                    let pa = ASource::Packed(&pa);
                    let none = &Epilogue::NONE;
                    gemm_with(
                        isa,
                        m,
                        n,
                        k,
                        pa,
                        src,
                        &mut scratch,
                        &mut c,
                        n,
                        (0, m),
                        (0, n),
                        none,
                    );
                    c.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
                };
                let want = run(BSource::Packed(&pb));
                assert_eq!(run(BSource::RowsPacked(&fill)), want, "{isa:?} {m}x{n}x{k}");
                // (The portable row-table micro-kernel sums in another order.)
                if isa != crate::kernels::isa::Isa::Portable {
                    assert_eq!(run(BSource::Rows(&fill)), want, "{isa:?} {m}x{n}x{k} rows");
                }
            }
        }
    }

    /// Whole GEMMs with a simple epilogue (fused into the tiles where the table can)
    /// against the same GEMM followed by the epilogue over all of C.
    #[test]
    fn gemm_with_simple_epilogue_matches_epilogue_after() {
        for isa in crate::kernels::isa::available_isas() {
            for &(m, n, k) in &[
                (13, 33, 300),
                (12, 48, 20),
                (ROWS_IN_PLACE_MAX_M + 1, 20, 9),
            ] {
                let (a, b) = (rand_vec(m * k, 6), rand_vec(k * n, 7));
                let (bias, res) = (rand_vec(m, 8), rand_vec(m * n, 9));
                let residuals: [&[f32]; 1] = [&res];
                let (pa, pb) = packed_operands(&a, &b, (m, n, k));
                let fill = |p: usize, j0: usize, len: usize, _: &mut [f32]| {
                    Some(&b[p * n + j0..p * n + j0 + len])
                };
                for post in simple_forms() {
                    let e = Epilogue {
                        bias: Some(&bias),
                        post: &post,
                        residuals: &residuals,
                        ..Epilogue::NONE
                    };
                    for rows in [false, true] {
                        let src = if rows {
                            BSource::Rows(&fill)
                        } else {
                            BSource::Packed(&pb)
                        };
                        let mut scratch = vec![0.0; block_scratch_len(k, n)];
                        let run = |c: &mut [f32], e: &Epilogue<'_>, scratch: &mut [f32]| {
                            let pa = ASource::Packed(&pa);
                            gemm_with(isa, m, n, k, pa, src, scratch, c, n, (0, m), (0, n), e)
                        };
                        let (mut got, mut want) = (vec![0.0; m * n], vec![0.0; m * n]);
                        run(&mut got, &e, &mut scratch);
                        run(&mut want, &Epilogue::NONE, &mut scratch);
                        e.apply(isa, &mut want, n, 0, m, 0, n);
                        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                        assert_eq!(
                            bits(&got),
                            bits(&want),
                            "{isa:?} {m}x{n}x{k} {post:?} rows {rows}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn gemm_matches_naive_over_edge_sizes() {
        for isa in crate::kernels::isa::available_isas() {
            for &(m, n, k) in &[
                (1, 1, 1),
                (6, 16, 1),
                (7, 17, 3),
                (5, 15, 257),
                (13, 33, 300),
                (64, 50, 513),
                (7, 1100, 20),
                (3, 100, 0),
                // Either side of the row-table / packed-block threshold.
                (ROWS_IN_PLACE_MAX_M, 40, 70),
                (ROWS_IN_PLACE_MAX_M + 1, 20, 9),
                // Past one MC x NC block with edges, walked panel by panel (one K
                // block, long rows) or strip by strip.
                (MC + 8, C_ROWS_MIN_LDC + 18, KC),
                (MC + 8, C_ROWS_MIN_LDC + 18, KC + 1),
                (MC + 8, NC + 18, 24),
            ] {
                run(m, n, k, isa);
            }
        }
    }

    #[test]
    fn gemm_tiles_cover_whole() {
        let (m, n, k) = (20, 40, 30);
        let a = rand_vec(m * k, 3);
        let b = rand_vec(k * n, 4);
        let mut pa = vec![0.0; packed_a_len(m, k)];
        let mut pb = vec![0.0; packed_b_len(k, n)];
        pack_a(&a, k, 1, m, (k, k_depth(k, n)), 1.0, &mut pa);
        pack_b(&b, n, 1, k, n, 1.0, &mut pb, &mut vec![0.0; n]);
        let mut c = vec![0.0; m * n];
        let isa = crate::kernels::isa::best_isa();
        gemm_packed(
            isa,
            m,
            n,
            (k, k_depth(k, n)),
            &pa,
            BSource::Packed(&pb),
            &mut [],
            &mut c,
            n,
            (0, 12),
            (0, n),
            &Epilogue::NONE,
        );
        gemm_packed(
            isa,
            m,
            n,
            (k, k_depth(k, n)),
            &pa,
            BSource::Packed(&pb),
            &mut [],
            &mut c,
            n,
            (12, m),
            (0, 16),
            &Epilogue::NONE,
        );
        gemm_packed(
            isa,
            m,
            n,
            (k, k_depth(k, n)),
            &pa,
            BSource::Packed(&pb),
            &mut [],
            &mut c,
            n,
            (12, m),
            (16, n),
            &Epilogue::NONE,
        );
        assert_close(&c, &gemm_naive(m, n, k, &a, &b), 1e-4);
    }

    #[test]
    fn epilogue_bias_then_clip_or_relu_in_one_sweep() {
        // Special values included: NaN and infinities go where the separate ops send them.
        let row = [
            -3.0,
            -0.5,
            0.0,
            0.25,
            2.0,
            9.0,
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
        ];
        let bias = [0.5f32, -1.0];
        for (op, f) in [
            (
                UnaryOp::Relu,
                (|v: f32| if v > 0.0 { v } else { 0.0 }) as fn(f32) -> f32,
            ),
            (UnaryOp::Clip { min: 0.0, max: 6.0 }, |v: f32| {
                let a = if v > 0.0 { v } else { 0.0 };
                if a < 6.0 {
                    a
                } else {
                    6.0
                }
            }),
        ] {
            let post = [PostOpRt::Unary(op)];
            let epi = Epilogue {
                bias: Some(&bias),
                channel_is_row: true,
                channel_offset: 0,
                addend: None,
                post: &post,
                residuals: &[],
            };
            for isa in crate::kernels::isa::available_isas() {
                let mut c: Vec<f32> = row.iter().chain(&row).copied().collect();
                epi.apply(isa, &mut c, row.len(), 0, 2, 0, row.len());
                for (i, (got, x)) in c.iter().zip(row.iter().chain(&row)).enumerate() {
                    let want = f(x + bias[i / row.len()]);
                    assert_eq!(got.to_bits(), want.to_bits(), "{op:?} {x} at {i}");
                }
            }
        }
    }

    #[test]
    fn epilogue_bias_relu_residual() {
        let (m, n, k) = (8, 20, 9);
        let a = rand_vec(m * k, 5);
        let b = rand_vec(k * n, 6);
        let bias = rand_vec(m, 7);
        let res = rand_vec(m * n, 8);
        let mut pa = vec![0.0; packed_a_len(m, k)];
        let mut pb = vec![0.0; packed_b_len(k, n)];
        pack_a(&a, k, 1, m, (k, k_depth(k, n)), 1.0, &mut pa);
        pack_b(&b, n, 1, k, n, 1.0, &mut pb, &mut vec![0.0; n]);
        let post = [
            PostOpRt::AddInput { slot: 0 },
            PostOpRt::Unary(crate::ir::UnaryOp::Relu),
        ];
        let residuals: [&[f32]; 1] = [&res];
        let epi = Epilogue {
            bias: Some(&bias),
            channel_is_row: true,
            channel_offset: 0,
            addend: None,
            post: &post,
            residuals: &residuals,
        };
        let mut c = vec![0.0; m * n];
        gemm_packed(
            crate::kernels::isa::best_isa(),
            m,
            n,
            (k, k_depth(k, n)),
            &pa,
            BSource::Packed(&pb),
            &mut [],
            &mut c,
            n,
            (0, m),
            (0, n),
            &epi,
        );
        let mut want = gemm_naive(m, n, k, &a, &b);
        for i in 0..m {
            for j in 0..n {
                let v = want[i * n + j] + bias[i] + res[i * n + j];
                want[i * n + j] = v.max(0.0);
            }
        }
        assert_close(&c, &want, 1e-4);
    }
}
