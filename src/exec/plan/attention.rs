//! Attention family: the fused `Attention` op (`softmax(q · kt + mask) · v` per batch),
//! planned as one [`AttentionPlan`] and run block by block so that the scores never
//! leave the cache.
//!
//! Per batch, kt and v are packed once as GEMM B operands; then per block of
//! [`AttentionPlan::rows`] query rows: the block's scores `q_rows · kt` go into a scratch
//! block, the table's `exp_row` (softmax's max and exponential passes, the row's mask row
//! added) into a second block, and that block times v is written straight to the output
//! rows, each then scaled by the reciprocal of its row's sum (softmax's normalisation on
//! D floats a row instead of N). Each block holds `rows x N` floats, sized to stay in L2
//! with both packed operands.
//!
//! Tiles are (batch, row block) pairs, batch-major, or row-block-major when one mask is
//! shared by every batch and all batches' packed kt and v fit [`SHARED_PACK_BYTES`]: then
//! each block of mask rows is read from memory once for all batches (heads) instead of
//! once per batch (SVTR's 960x960 local mask is 3.7 MB). A tile packs kt and v of each
//! batch it touches. Blocks start at fixed multiples of `rows` (a multiple of `MR`)
//! whatever the order and the tiling, so any tiling gives the same bits as the whole
//! node. Against the unfused `MatMul`, `Softmax` / `MaskedSoftmax`, `MatMul` (same
//! packing, micro-kernels and K blocks) only the normalisation's rounding differs
//! (`(sum_j e_j v_j) / s` for `sum_j (e_j / s) v_j`).
//!
//! Sparse masks ([`Sparse`]): a constant mask that leaves most keys of each block of
//! query rows at -1e4 or -inf (SVTR's local mixer: 93 % of its 960x960 mask) lists per
//! block the keys some row of the block may attend to (and its mask rows over them,
//! gathered when planned). Such a block gathers those columns of kt and rows of v,
//! packs them, and runs both GEMMs and the exponentials over them only. Skipping a key
//! is exact when its exponential is 0, i.e. its score plus mask lies more than ~88
//! below the row's max (found by the exponential pass): each row checks the bound
//! `|q_i| max_j |k_j| + (largest skipped mask value) < max - 90` (Cauchy-Schwarz on the
//! skipped scores) and a block where some row fails it (or has no listed key, or a sum
//! of exponentials that is not finite: a NaN score) runs dense.

use super::ctx::Ctx;
use super::errors::shape_err;
use super::{FamilyKernel, Planned, Run};
use crate::error::Result;
use crate::ir::DType;
use crate::kernels::copy::copy_run;
use crate::kernels::gemm::{self, ASource, BSource, Epilogue, MR};

/// Bytes of one block of scores (and again of its probabilities): both blocks with kt and
/// v packed (2 x `K x N` floats, 240 KB for SVTR's 960 tokens of head dim 32) stay inside
/// a 1 MiB L2. Larger blocks amortise the per-block GEMM set-up (fewer, taller calls).
const SCORE_BLOCK_BYTES: usize = 256 * 1024;
/// Most query rows per block (a multiple of `MR`).
const MAX_ROWS: usize = 96;
/// Most bytes of packed kt and v of all batches for the row-block-major order.
const SHARED_PACK_BYTES: usize = 512 * 1024;
/// Most batches for the row-block-major order (one packing slot each).
const SHARED_PACK_MAX_BATCH: usize = 64;

/// Mask entries at or below this may be skipped (see the module doc).
const DEAD: f32 = -1e3;
/// How far below the row's max a skipped score plus mask must lie, at least: past the
/// exponential's flush to 0 (`e^x` is 0 below -87.33 in every kernel table).
const SKIP_MARGIN: f32 = 90.0;
/// Relative slack on the bound of the skipped scores (their rounding in the GEMM).
const BOUND_SLACK: f32 = 1e-3;
/// Rough cost, in multiply-adds, of gathering and packing one float of kt or v.
const PACK_MACS: usize = 8;
/// Rough cost, in multiply-adds, of one block's set-up (two GEMM calls, the row passes).
const BLOCK_MACS: usize = 4096;
/// A sparse plan is taken when its estimated cost is at most this share of the dense one.
const SPARSE_GAIN: f64 = 0.75;

/// The keys each block of query rows attends to under a constant sparse mask.
#[derive(Debug)]
struct Sparse {
    /// The live keys of block `key` ([`AttentionPlan::key_of`]) in order, as runs of
    /// consecutive keys `(first, len)`: `runs[run_starts[key]..run_starts[key + 1]]`.
    runs: Vec<(u32, u32)>,
    run_starts: Vec<usize>,
    /// Live keys per block.
    lens: Vec<usize>,
    /// Per block, an upper bound of the mask over the keys it skips (-inf: none skipped).
    dead_max: Vec<f32>,
    /// Most live keys of a block.
    max_live: usize,
    /// Multiply-adds of all tiles run sparse (for the cost model).
    macs: usize,
    /// Per block, its mask rows over its live keys (`rows x lens[key]`, row-major) from
    /// `mask_starts[key]`: gathered once when planned, so that a block reads its mask
    /// compact instead of gathering it out of whole mask rows for every batch (SVTR's
    /// 960x960 local mask, 3.7 MB, is 0.5 MB so).
    masks: Vec<f32>,
    mask_starts: Vec<usize>,
}

impl Sparse {
    fn runs(&self, key: usize) -> &[(u32, u32)] {
        &self.runs[self.run_starts[key]..self.run_starts[key + 1]]
    }

    /// Block `key`'s mask rows over its live keys.
    fn mask_block(&self, key: usize) -> &[f32] {
        &self.masks[self.mask_starts[key]..self.mask_starts[key + 1]]
    }

    /// Fills [`Sparse::masks`] from the constant mask (`[masks x m, n]`) for blocks of
    /// `rows` query rows.
    fn gather_masks(&mut self, mask: &[f32], (m, n): (usize, usize), rows: usize) {
        let blocks = self.lens.len() / (mask.len() / (m * n).max(1)).max(1);
        let mut starts = vec![0];
        let mut out = Vec::new();
        for key in 0..self.lens.len() {
            let (mb, blk) = (key / blocks.max(1), key % blocks.max(1));
            let first = mb * m + blk * rows;
            let last = (first + rows).min((mb + 1) * m);
            for r in first..last {
                let at = out.len();
                out.resize(at + self.lens[key], 0.0);
                gather_runs(&mask[r * n..(r + 1) * n], self.runs(key), &mut out[at..]);
            }
            starts.push(out.len());
        }
        self.masks = out;
        self.mask_starts = starts;
    }
}

/// Each mask row's keys above [`DEAD`] and the largest mask value at or below it.
fn mask_rows_live(mask: &[f32], n: usize) -> (Vec<Vec<u32>>, Vec<f32>) {
    mask.chunks_exact(n.max(1))
        .map(|row| {
            let live = (0..n as u32)
                // A NaN entry is live (never skipped).
                .filter(|&j| row[j as usize] > DEAD || row[j as usize].is_nan())
                .collect();
            let dead = row
                .iter()
                .filter(|&&v| v <= DEAD)
                .fold(f32::NEG_INFINITY, |a, &v| a.max(v));
            (live, dead)
        })
        .unzip()
}

/// The sparse lists for blocks of `rows` query rows: every block of every `m`-row mask
/// (`row_live.len()` rows, a multiple of `m`), with its estimated cost over `batch`
/// batches of key depth `k` and value width `d`.
fn sparse_for(
    (row_live, row_dead): (&[Vec<u32>], &[f32]),
    (batch, m, n, k, d): (usize, usize, usize, usize, usize),
    rows: usize,
) -> Sparse {
    let blocks = m.div_ceil(rows);
    let masks = row_live.len() / m.max(1);
    let mut stamp = vec![usize::MAX; n];
    let (mut cols, mut starts, mut dead_max) = (Vec::new(), vec![0], Vec::new());
    let mut max_live = 0;
    for key in 0..masks * blocks {
        let (mb, blk) = (key / blocks, key % blocks);
        let first = mb * m + blk * rows;
        let last = (first + rows).min((mb + 1) * m);
        let at = cols.len();
        let mut dead = f32::NEG_INFINITY;
        for r in first..last {
            for &j in &row_live[r] {
                if stamp[j as usize] != key {
                    stamp[j as usize] = key;
                    cols.push(j);
                }
            }
            dead = dead.max(row_dead[r]);
        }
        cols[at..].sort_unstable();
        max_live = max_live.max(cols.len() - at);
        starts.push(cols.len());
        dead_max.push(dead);
    }
    let (mut runs, mut run_starts) = (Vec::new(), vec![0]);
    for w in starts.windows(2) {
        let first = runs.len();
        for &j in &cols[w[0]..w[1]] {
            match runs[first..].last_mut() {
                Some((f, l)) if *f + *l == j => *l += 1,
                _ => runs.push((j, 1)),
            }
        }
        run_starts.push(runs.len());
    }
    let lens = starts.windows(2).map(|w| w[1] - w[0]).collect();
    let mut sp = Sparse {
        runs,
        lens,
        run_starts,
        dead_max,
        max_live,
        macs: 0,
        masks: Vec::new(),
        mask_starts: Vec::new(),
    };
    sp.macs = (0..batch)
        .flat_map(|b| (0..blocks).map(move |blk| (b, blk)))
        .map(|(b, blk)| {
            let nl = sp.lens[(b % masks.max(1)) * blocks + blk];
            let r = rows.min(m - blk * rows);
            // A block with no live key runs dense.
            let nl = if nl == 0 { n } else { nl };
            r * nl * (k + d) + PACK_MACS * nl * (k + d) + BLOCK_MACS
        })
        .sum();
    sp
}

/// Attention resolved: `batch` products of q `[M, K]`, kt `[K, N]`, v `[N, D]`.
#[derive(Debug)]
pub(crate) struct AttentionPlan {
    batch: usize,
    m: usize,
    k: usize,
    n: usize,
    d: usize,
    /// Query rows per block (a multiple of `MR`).
    rows: usize,
    /// Rows of `n` of the mask (input 2): score row `r` (over all batches) adds mask row
    /// `r % mask_rows`; `None` without a mask.
    mask_rows: Option<usize>,
    /// Tiles run row-block-major (batch inner), every batch's kt and v packed side by side.
    block_major: bool,
    /// Live keys per block under a constant sparse mask (module doc).
    sparse: Option<Sparse>,
}

/// Query rows per block for `n` keys: as many whole `MR` panels as fit
/// [`SCORE_BLOCK_BYTES`], at least one, at most [`MAX_ROWS`].
pub(crate) fn block_rows(n: usize) -> usize {
    let fit = SCORE_BLOCK_BYTES / (4 * n.max(1)) / MR * MR;
    fit.clamp(MR, MAX_ROWS)
}

impl AttentionPlan {
    fn blocks(&self) -> usize {
        self.m.div_ceil(self.rows)
    }

    /// True when the scores GEMM reads q in place rather than packing it (as a MatMul
    /// with `N` columns would).
    fn q_in_place(&self) -> bool {
        self.n <= gemm::A_IN_PLACE_MAX_N
    }

    /// True when the output GEMM reads the probabilities in place.
    fn p_in_place(&self) -> bool {
        self.d <= gemm::A_IN_PLACE_MAX_N
    }

    /// Floats of one batch's packed kt and v.
    fn packed_kv(&self) -> usize {
        gemm::packed_b_len(self.k, self.n) + gemm::packed_b_len(self.n, self.d)
    }

    /// Batches whose packed kt and v the scratch holds at once.
    fn packed_batches(&self) -> usize {
        if self.block_major {
            self.batch
        } else {
            1
        }
    }

    /// Scratch floats: packed kt and v, a packed A block, the scores block and a row;
    /// sparse: also each packed batch's largest key norm, a block's packed live kt and
    /// v and a row of live mask values.
    fn scratch(&self) -> usize {
        let sparse = self.sparse.as_ref().map_or(0, |sp| {
            self.packed_batches()
                + gemm::packed_b_len(self.k, sp.max_live)
                + gemm::packed_b_len(sp.max_live, self.d)
        });
        self.packed_batches() * self.packed_kv()
            + self.packed_a()
            + 2 * self.rows * self.n
            + self.n.max(self.d)
            + sparse
    }

    /// The block of mask rows tile (`b`, `blk`) reads (sparse plans).
    fn key_of(&self, b: usize, blk: usize) -> usize {
        let masks = self.mask_rows.unwrap_or(self.m) / self.m.max(1);
        (b % masks.max(1)) * self.blocks() + blk
    }

    /// (batch, row block) of tile `u`.
    fn tile_at(&self, u: usize) -> (usize, usize) {
        if self.block_major {
            (u % self.batch, u / self.batch)
        } else {
            (u / self.blocks(), u % self.blocks())
        }
    }

    /// Floats of the packed A block (0 when both GEMMs read A in place).
    fn packed_a(&self) -> usize {
        let q = if self.q_in_place() {
            0
        } else {
            gemm::packed_a_len(self.rows, self.k)
        };
        let p = if self.p_in_place() {
            0
        } else {
            gemm::packed_a_len(self.rows, self.n)
        };
        q.max(p)
    }
}

/// True when `batch` products with one mask for all of them (`mask_rows == Some(m)`)
/// run row-block-major: every batch's kt and v (`packed_kv` floats each) stay packed,
/// and each block of mask rows is read once for all batches.
fn block_major(batch: usize, m: usize, mask_rows: Option<usize>, packed_kv: usize) -> bool {
    batch > 1
        && batch <= SHARED_PACK_MAX_BATCH
        && mask_rows == Some(m)
        && batch * packed_kv * 4 <= SHARED_PACK_BYTES
}

/// Plans an Attention node: q `[..., M, K]`, kt `[..., K, N]`, [mask], v `[..., N, D]`,
/// all f32 with equal batch dims.
pub(crate) fn plan_attention(c: &Ctx<'_>) -> Result<Planned> {
    let node = c.n;
    c.outputs_typed(DType::F32)?;
    for i in [0, 1, 3] {
        c.require_f32(i)?;
    }
    let (q, kt, v) = (c.ishape(0)?, c.ishape(1)?, c.ishape(3)?);
    let r = q.len();
    if r < 2 || kt.len() != r || v.len() != r {
        return Err(shape_err(
            node,
            format!("q {q:?}, kt {kt:?}, v {v:?} must have one rank of at least 2"),
        ));
    }
    let (m, k, n, d) = (q[r - 2], q[r - 1], kt[r - 1], v[r - 1]);
    let lead = &q[..r - 2];
    if kt[r - 2] != k || v[r - 2] != n || &kt[..r - 2] != lead || &v[..r - 2] != lead {
        return Err(shape_err(
            node,
            format!("q {q:?}, kt {kt:?}, v {v:?} are not [..., M, K], [..., K, N], [..., N, D]"),
        ));
    }
    let mut out = lead.to_vec();
    out.extend([m, d]);
    if c.oshape(0)? != out {
        return Err(shape_err(
            node,
            format!("output {:?} is not {out:?}", c.oshape(0)?),
        ));
    }
    let batch: usize = lead.iter().product();
    let mask_rows = if c.has(2) {
        c.require_f32(2)?;
        let mask = c.ishape(2)?;
        let mut scores = lead.to_vec();
        scores.extend([m, n]);
        if !crate::ir::shape::is_trailing_mask(mask, &scores) {
            return Err(shape_err(
                node,
                format!("mask {mask:?} is not the trailing dims of the scores {scores:?}"),
            ));
        }
        Some((mask.iter().product::<usize>() / n.max(1)).max(1))
    } else {
        None
    };
    let mut p = AttentionPlan {
        batch,
        m,
        k,
        n,
        d,
        rows: block_rows(n),
        mask_rows,
        block_major: false,
        sparse: None,
    };
    p.block_major = block_major(batch, m, mask_rows, p.packed_kv());
    if let (Some(rows), Some(t)) = (mask_rows, c.konst(2)) {
        if m > 0 && n > 0 && rows % m == 0 && t.dtype() == DType::F32 {
            let mask = t.to_f32_vec();
            let (live, dead) = mask_rows_live(&mask, n);
            let dense = p.macs() + batch * p.blocks() * BLOCK_MACS;
            let best = (1..=p.rows / MR)
                .map(|i| {
                    (
                        i * MR,
                        sparse_for((&live, &dead), (batch, m, n, k, d), i * MR),
                    )
                })
                .min_by_key(|(_, sp)| sp.macs);
            if let Some((rows, mut sp)) =
                best.filter(|(_, sp)| sp.macs as f64 <= SPARSE_GAIN * dense as f64)
            {
                p.rows = rows;
                sp.gather_masks(&mask, (m, n), rows);
                p.sparse = Some(sp);
            }
        }
    }
    let s = p.scratch();
    Ok(Planned::new(p).scratch(s))
}

impl FamilyKernel for AttentionPlan {
    fn tiles(&self) -> usize {
        self.batch * self.blocks()
    }

    fn macs(&self) -> usize {
        match &self.sparse {
            Some(sp) => sp.macs,
            None => self.batch * self.m * self.n * (self.k + self.d),
        }
    }

    fn run(&self, r: Run<'_>) -> Result<()> {
        let p = self;
        let (k, n, d) = (p.k, p.n, p.d);
        let (lo, hi) = r.tile.range(p.batch * p.blocks(), 1);
        let io = Io {
            q: r.io.f32(0),
            kt: r.io.f32(1),
            v: r.io.f32(3),
            mask: p.mask_rows.map(|rows| (r.io.f32(2), rows)),
        };
        let y = super::out_f32(r.out, r.outs, 0);
        let (packs, rest) = r.scratch.split_at_mut(p.packed_batches() * p.packed_kv());
        let (pa, rest) = rest.split_at_mut(p.packed_a());
        let (s, rest) = rest.split_at_mut(p.rows * n);
        let (probs, rest) = rest.split_at_mut(p.rows * n);
        let (tmp, rest) = rest.split_at_mut(n.max(d));
        let mut blk_scratch = Block { pa, s, probs, tmp };
        let (kmax, rest) = rest.split_at_mut(if p.sparse.is_some() {
            p.packed_batches()
        } else {
            0
        });
        let live_max = p.sparse.as_ref().map_or(0, |sp| sp.max_live);
        let (pkl, rest) = rest.split_at_mut(gemm::packed_b_len(k, live_max));
        let (pvl, _) = rest.split_at_mut(gemm::packed_b_len(live_max, d));
        // The batch whose kt and v each packing slot holds (none yet: usize::MAX).
        // Row-block-major: batch b in slot b (at most SHARED_PACK_MAX_BATCH slots).
        // Batch-major: every batch in slot 0, packed again when the batch changes.
        let mut held = [usize::MAX; SHARED_PACK_MAX_BATCH];
        for u in lo..hi {
            let (b, blk) = p.tile_at(u);
            let slot = if p.block_major { b } else { 0 };
            let (pk, pv) = packs[slot * p.packed_kv()..(slot + 1) * p.packed_kv()]
                .split_at_mut(gemm::packed_b_len(k, n));
            if held[slot] != b {
                let ktb = &io.kt[b * k * n..(b + 1) * k * n];
                gemm::pack_b(ktb, n, 1, k, n, 1.0, pk, blk_scratch.tmp);
                gemm::pack_b(&io.v[b * n * d..], d, 1, n, d, 1.0, pv, blk_scratch.tmp);
                if let Some(km) = kmax.get_mut(slot) {
                    *km = key_norm_max(ktb, k, n, blk_scratch.tmp);
                }
                held[slot] = b;
            }
            let i0 = b * p.m + blk * p.rows;
            let rows = p.rows.min(p.m - blk * p.rows);
            let out = &mut y[i0 * d..(i0 + rows) * d];
            let sparse = p.sparse.as_ref().map(|sp| {
                let key = p.key_of(b, blk);
                (
                    sp.lens[key],
                    sp.runs(key),
                    sp.dead_max[key],
                    sp.mask_block(key),
                )
            });
            let done = match sparse {
                Some((nl, runs, dead, masks)) if nl > 0 => p.sparse_block(
                    r.isa,
                    &io,
                    (b, i0, rows),
                    (nl, runs, dead, kmax[slot]),
                    (&mut *pkl, &mut *pvl, masks),
                    &mut blk_scratch,
                    out,
                ),
                _ => false,
            };
            if !done {
                p.dense_block(r.isa, &io, (i0, rows), (pk, pv), &mut blk_scratch, out);
            }
        }
        Ok(())
    }
}

/// The node's inputs: q, kt, v and the mask with its row count.
struct Io<'a> {
    q: &'a [f32],
    kt: &'a [f32],
    v: &'a [f32],
    mask: Option<(&'a [f32], usize)>,
}

/// A block's scratch: packed A, the scores and probabilities, a row for packing.
struct Block<'a> {
    pa: &'a mut [f32],
    s: &'a mut [f32],
    probs: &'a mut [f32],
    tmp: &'a mut [f32],
}

/// The largest Euclidean norm of the `n` keys, the columns of `kt` (`[k, n]`); `acc`
/// scratch of `n` floats. NaN when a key holds one.
fn key_norm_max(kt: &[f32], k: usize, n: usize, acc: &mut [f32]) -> f32 {
    let acc = &mut acc[..n];
    acc.fill(0.0);
    for row in kt.chunks_exact(n.max(1)).take(k) {
        for (a, &x) in acc.iter_mut().zip(row) {
            *a += x * x;
        }
    }
    acc.iter()
        .fold(0.0f32, |m, &v| if v.is_nan() { f32::NAN } else { m.max(v) })
        .sqrt()
}

impl AttentionPlan {
    /// The mask row of score row `r` over all `n` keys (empty without a mask).
    fn mask_row<'a>(&self, io: &Io<'a>, r: usize) -> &'a [f32] {
        match io.mask {
            Some((mk, mrows)) => {
                let mo = r % mrows * self.n;
                &mk[mo..mo + self.n]
            }
            None => &[],
        }
    }

    /// Rows `[i0, i0 + rows)` over every key, into `out` (`rows x d`).
    fn dense_block(
        &self,
        isa: crate::kernels::isa::Isa,
        io: &Io<'_>,
        (i0, rows): (usize, usize),
        (pk, pv): (&[f32], &[f32]),
        sc: &mut Block<'_>,
        out: &mut [f32],
    ) {
        let (k, n, d) = (self.k, self.n, self.d);
        let exp_row = isa.table().exp_row;
        let s = &mut sc.s[..rows * n];
        product(isa, &io.q[i0 * k..], (rows, k, n), pk, sc.pa, s);
        let probs = &mut sc.probs[..rows * n];
        let rows_io = s.chunks_exact(n).zip(probs.chunks_exact_mut(n));
        // Unnormalised probabilities; each output row is scaled by 1 / sum after
        // the product with v (d floats a row instead of n).
        let mut inv = [0.0f32; MAX_ROWS];
        for (i, (row, o)) in rows_io.enumerate() {
            let (_, sum) = exp_row(row, self.mask_row(io, i0 + i), o);
            // No keys: the product is 0 and stays 0.
            inv[i] = if n == 0 { 1.0 } else { 1.0 / sum };
        }
        product(isa, probs, (rows, n, d), pv, sc.pa, out);
        scale_rows(out, d, &inv[..rows]);
    }

    /// Rows `[i0, i0 + rows)` of batch `b` over its `nl` live keys (`runs`) only (module doc), into
    /// `out`; false (nothing written) when some row fails the bound that makes skipping
    /// the other keys exact: the caller then runs the block dense.
    #[allow(clippy::too_many_arguments)]
    fn sparse_block(
        &self,
        isa: crate::kernels::isa::Isa,
        io: &Io<'_>,
        (b, i0, rows): (usize, usize, usize),
        (nl, runs, dead, kmax): (usize, &[(u32, u32)], f32, f32),
        (pkl, pvl, masks): (&mut [f32], &mut [f32], &[f32]),
        sc: &mut Block<'_>,
        out: &mut [f32],
    ) -> bool {
        let (k, n, d) = (self.k, self.n, self.d);
        let exp_row = isa.table().exp_row;
        let ktb = &io.kt[b * k * n..(b + 1) * k * n];
        let vb = &io.v[b * n * d..(b + 1) * n * d];
        let pkl = &mut pkl[..gemm::packed_b_len(k, nl)];
        gemm::pack_b_rows(k, nl, pkl, sc.tmp, |p, row| {
            gather_runs(&ktb[p * n..(p + 1) * n], runs, row);
            None
        });
        let pvl = &mut pvl[..gemm::packed_b_len(nl, d)];
        // Rows are asked for in order: walk the runs.
        let mut keys = runs.iter().flat_map(|&(f, l)| f as usize..(f + l) as usize);
        gemm::pack_b_rows(nl, d, pvl, sc.tmp, |_, _| {
            let j = keys.next().expect("one live key per row");
            Some(&vb[j * d..(j + 1) * d])
        });
        let s = &mut sc.s[..rows * nl];
        product(isa, &io.q[i0 * k..], (rows, k, nl), pkl, sc.pa, s);
        let probs = &mut sc.probs[..rows * nl];
        let mut inv = [0.0f32; MAX_ROWS];
        for (i, (row, o)) in s
            .chunks_exact(nl)
            .zip(probs.chunks_exact_mut(nl))
            .enumerate()
        {
            // The exponentials first: their pass finds the row's max (NaN ignored; a
            // NaN or infinite sum anywhere makes the sum NaN or infinite).
            let (top, sum) = exp_row(row, &masks[i * nl..(i + 1) * nl], o);
            let qn = norm(&io.q[(i0 + i) * k..(i0 + i + 1) * k]);
            // Every skipped score is at most |q_i| |k_j| <= qn * kmax (NaN fails).
            let bound = qn * kmax * (1.0 + BOUND_SLACK) + dead;
            // Not below, or a sum that is not finite (a NaN or infinity among the live
            // scores): run the block dense.
            if bound.partial_cmp(&(top - SKIP_MARGIN)) != Some(std::cmp::Ordering::Less)
                || !sum.is_finite()
            {
                return false;
            }
            inv[i] = 1.0 / sum;
        }
        product(isa, probs, (rows, nl, d), pvl, sc.pa, out);
        scale_rows(out, d, &inv[..rows]);
        true
    }
}

/// Copies the runs `(first, len)` of `src` one after another into `dst` (inline: the
/// runs are tens of floats, SVTR's local windows ~21, where a `memcpy` call each cost
/// more than the copy).
fn gather_runs(src: &[f32], runs: &[(u32, u32)], dst: &mut [f32]) {
    let mut t = 0;
    for &(f, l) in runs {
        let (f, l) = (f as usize, l as usize);
        copy_run(&mut dst[t..t + l], &src[f..f + l]);
        t += l;
    }
}

/// Lanes of the reductions below (independent partial results the compiler vectorises).
const LANES: usize = 8;

/// The Euclidean norm of `x` (NaN propagates).
fn norm(x: &[f32]) -> f32 {
    let mut acc = [0.0f32; LANES];
    let c = x.chunks_exact(LANES);
    let r = c.remainder();
    for u in c {
        for l in 0..LANES {
            acc[l] += u[l] * u[l];
        }
    }
    for &u in r {
        acc[0] += u * u;
    }
    acc.iter().sum::<f32>().sqrt()
}

/// `c = a · b` for `rows` rows of `a` (`inner` floats each, row stride `inner`) and `b`
/// (`inner x width`) packed in `pb`: `a` read in place when the product is narrow (as a
/// MatMul does), else packed into `pa`. The scores (`q · kt`) and the values
/// (`probs · v`) of a block.
fn product(
    isa: crate::kernels::isa::Isa,
    a: &[f32],
    (rows, inner, width): (usize, usize, usize),
    pb: &[f32],
    pa: &mut [f32],
    c: &mut [f32],
) {
    let a = if width <= gemm::A_IN_PLACE_MAX_N {
        ASource::InPlace { a, lda: inner }
    } else {
        gemm::pack_a(
            a,
            inner,
            1,
            rows,
            (inner, gemm::k_depth(inner, width)),
            1.0,
            pa,
        );
        ASource::Packed(pa)
    };
    let (b, none) = (BSource::Packed(pb), &Epilogue::NONE);
    gemm::gemm_with(
        isa,
        rows,
        width,
        inner,
        a,
        b,
        &mut [],
        c,
        width,
        (0, rows),
        (0, width),
        none,
    );
}

/// Scales each `d`-float row of `out` by its entry of `inv`.
fn scale_rows(out: &mut [f32], d: usize, inv: &[f32]) {
    for (o, &s) in out.chunks_exact_mut(d.max(1)).zip(inv) {
        for v in o {
            *v *= s;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::compile::fuse::{fuse_attention, fuse_softmax_mask};
    use crate::compile::testutil::{assert_close, rand_vec, run_graph, GraphBuilder};
    use crate::exec::{ModelPlan, PlanOptions, Tile};
    use crate::ir::{BinaryOp, Graph, Op};
    use crate::kernels::gemm;

    /// How the scores are normalised in the unfused graph.
    #[derive(Clone, Copy, Debug)]
    enum Form {
        Softmax,
        /// `Softmax(Add(s, mask))`, the mask a constant of the given shape.
        AddMask(&'static [usize]),
        /// `MaskedSoftmax(s, mask)`, the mask a graph input of the given shape.
        MaskedInput(&'static [usize]),
    }

    /// `MatMul(q, kt) -> softmax -> MatMul(p, v)` over batch dims `lead`, with
    /// deterministic inputs (q, kt, v, then a mask input).
    fn unfused(
        lead: &[usize],
        (m, k, n, d): (usize, usize, usize, usize),
        form: Form,
    ) -> (Graph, Vec<Vec<f32>>) {
        let dims = |a: usize, b: usize| [lead, &[a, b]].concat();
        let numel = |s: &[usize]| s.iter().product::<usize>();
        let mut b = GraphBuilder::new();
        let q = b.input("q", &dims(m, k));
        let kt = b.input("kt", &dims(k, n));
        let v = b.input("v", &dims(n, d));
        let mut inputs = vec![
            rand_vec(numel(&dims(m, k)), 1),
            rand_vec(numel(&dims(k, n)), 2)
                .iter()
                .map(|x| 3.0 * x)
                .collect(),
            rand_vec(numel(&dims(n, d)), 3),
        ];
        let s = b.node("qk", Op::MatMul { post: vec![] }, &[q, kt], &dims(m, n));
        // A mask with some -1e4 entries (a local-attention window) and small values.
        let mask_vals = |shape: &[usize]| -> Vec<f32> {
            rand_vec(numel(shape), 4)
                .iter()
                .map(|&x| if x > 0.6 { -1e4 } else { x })
                .collect()
        };
        let p = match form {
            Form::Softmax => b.node("softmax", Op::Softmax { axis: -1 }, &[s], &dims(m, n)),
            Form::AddMask(ms) => {
                let mask = b.konst("mask", ms, mask_vals(ms));
                let a = b.node("add", Op::Binary(BinaryOp::Add), &[s, mask], &dims(m, n));
                b.node("softmax", Op::Softmax { axis: -1 }, &[a], &dims(m, n))
            }
            Form::MaskedInput(ms) => {
                let mask = b.input("mask", ms);
                inputs.push(mask_vals(ms));
                b.node("softmax", Op::MaskedSoftmax, &[s, mask], &dims(m, n))
            }
        };
        let y = b.node("pv", Op::MatMul { post: vec![] }, &[p, v], &dims(m, d));
        (b.finish(&[y]), inputs)
    }

    /// Ragged and SVTR-like sizes (M, K, N, D): q read in place (N <= 32) or packed, the
    /// probabilities in place (D <= 32) or packed, K and N over a K block, N over a
    /// column block, several row blocks with a ragged last one (M = 301 over blocks of
    /// 96 rows, M = 200 over 66 rows for N = 960).
    const SIZES: [(usize, usize, usize, usize); 8] = [
        (37, 8, 50, 24),
        (13, 5, 20, 40),
        (64, 32, 300, 32),
        (10, 300, 40, 7),
        (50, 16, 700, 48),
        (1, 3, 1, 1),
        (301, 8, 50, 24),
        (200, 32, 960, 16),
    ];

    /// The node's output when run as `count` tiles, one after another.
    fn run_tiles(plan: &ModelPlan, inputs: &[Vec<f32>], count: usize) -> Vec<f32> {
        let mut st = plan.new_state();
        for (i, x) in inputs.iter().enumerate() {
            plan.set_input(&mut st, i, bytemuck::cast_slice(x))
                .expect("in");
        }
        for index in 0..count {
            plan.run_node(&mut st, 0, Tile { index, count })
                .expect("tile");
        }
        bytemuck::cast_slice(plan.output_bytes(&st, 0).expect("out")).to_vec()
    }

    /// Bit equality of two outputs.
    fn same_bits(a: &[f32], b: &[f32]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
    }

    fn forms(lead: &[usize], m: usize, n: usize) -> Vec<Form> {
        let leak = |v: Vec<usize>| -> &'static [usize] { Vec::leak(v) };
        let ones = leak([vec![1; lead.len()], vec![m, n]].concat());
        let full = leak([lead, &[m, n]].concat());
        vec![
            Form::Softmax,
            Form::AddMask(ones),
            Form::AddMask(leak(vec![n])),
            Form::MaskedInput(full),
            Form::MaskedInput(leak(vec![m, n])),
        ]
    }

    /// The fused node against the unfused MatMul, softmax, MatMul, with and without a
    /// mask, batch 1, 3 and 1x2, ragged sizes: within 1e-5 (ten times tighter than the
    /// conformance tolerance; the fused node normalises after the product with v).
    #[test]
    fn attention_matches_the_unfused_ops() {
        for lead in [&[1][..], &[3], &[1, 2]] {
            for &(m, k, n, d) in &SIZES {
                for form in forms(lead, m, n) {
                    let (mut g, inputs) = unfused(lead, (m, k, n, d), form);
                    let before = run_graph(&g, &inputs);
                    fuse_softmax_mask(&mut g);
                    assert_eq!(fuse_attention(&mut g), 1, "{lead:?} {form:?}");
                    assert_eq!(g.nodes.len(), 1);
                    assert_eq!(g.nodes[0].op, Op::Attention);
                    let after = run_graph(&g, &inputs);
                    assert_close(&before, &after, 1e-5);
                }
            }
        }
    }

    /// Any split of the node into tiles ((batch, row block) ranges, batch-major with a
    /// mask per batch, row-block-major with one mask for all batches) writes the same
    /// bits as the whole node, each tile only its own rows.
    #[test]
    fn tiles_give_the_whole_node() {
        let mut block_major = 0;
        for lead in [&[1][..], &[3]] {
            for &(m, k, n, d) in [&SIZES[..3], &SIZES[6..]].concat().iter() {
                for form in [3, 4] {
                    let form = forms(lead, m, n)[form];
                    let (mut g, inputs) = unfused(lead, (m, k, n, d), form);
                    assert_eq!(fuse_attention(&mut g), 1);
                    let whole = run_graph(&g, &inputs);
                    let plan = ModelPlan::new(Arc::new(g), &PlanOptions::default()).expect("plan");
                    let kv = gemm::packed_b_len(k, n) + gemm::packed_b_len(n, d);
                    let shared = matches!(form, Form::MaskedInput(s) if s.len() == 2);
                    if super::block_major(lead[0], m, shared.then_some(m), kv) {
                        block_major += 1;
                    }
                    let tiles = plan.tiles_for(0);
                    assert_eq!(tiles, lead[0] * m.div_ceil(super::block_rows(n)));
                    for count in 1..=tiles {
                        assert!(
                            same_bits(&run_tiles(&plan, &inputs, count), &whole[0]),
                            "{lead:?} {:?} {form:?}: {count} tiles",
                            (m, k, n, d)
                        );
                    }
                }
            }
        }
        // Batch 3 with one [M, N] mask, except the 960-key size (its packs are too big).
        assert_eq!(block_major, 4);
    }

    /// A constant `[m, n]` local-window mask: query i attends to keys within `w` of
    /// `i * n / m`, the rest get `neg`; rows `dead_rows` attend to nothing.
    fn window_mask(
        m: usize,
        n: usize,
        w: usize,
        neg: f32,
        dead_rows: std::ops::Range<usize>,
    ) -> Vec<f32> {
        let mut mask = vec![neg; m * n];
        for i in (0..m).filter(|i| !dead_rows.contains(i)) {
            let c = i * n / m;
            for j in c.saturating_sub(w)..(c + w + 1).min(n) {
                mask[i * n + j] = 0.0;
            }
        }
        mask
    }

    /// `MatMul(q, kt) -> Add(mask) -> Softmax -> MatMul(p, v)` with a constant mask,
    /// batch `batch`, q scaled by `q_scale`.
    fn windowed(
        batch: usize,
        (m, k, n, d): (usize, usize, usize, usize),
        mask: Vec<f32>,
        q_scale: f32,
    ) -> (Graph, Vec<Vec<f32>>) {
        let dims = |a: usize, b: usize| vec![batch, a, b];
        let mut b = GraphBuilder::new();
        let q = b.input("q", &dims(m, k));
        let kt = b.input("kt", &dims(k, n));
        let v = b.input("v", &dims(n, d));
        let inputs = vec![
            rand_vec(batch * m * k, 1)
                .iter()
                .map(|x| q_scale * x)
                .collect(),
            rand_vec(batch * k * n, 2).iter().map(|x| 3.0 * x).collect(),
            rand_vec(batch * n * d, 3),
        ];
        let s = b.node("qk", Op::MatMul { post: vec![] }, &[q, kt], &dims(m, n));
        let mk = b.konst("mask", &[m, n], mask);
        let a = b.node("add", Op::Binary(BinaryOp::Add), &[s, mk], &dims(m, n));
        let p = b.node("softmax", Op::Softmax { axis: -1 }, &[a], &dims(m, n));
        let y = b.node("pv", Op::MatMul { post: vec![] }, &[p, v], &dims(m, d));
        (b.finish(&[y]), inputs)
    }

    /// Multiply-adds of the planned Attention node (sparse plans count fewer).
    fn planned_macs(g: &Graph) -> usize {
        let plan = ModelPlan::new(Arc::new(g.clone()), &PlanOptions::default()).expect("plan");
        plan.node_macs(0)
    }

    /// Local-window masks (-1e4 and -inf, SVTR-like and ragged sizes, batch 1 and 2,
    /// rows with no key at all, queries large enough that the skip bound fails and
    /// blocks fall back to dense): the fused node skips keys only where exact, within
    /// 1e-5 of the unfused ops, and any tiling gives the whole node's bits.
    #[test]
    fn sparse_masks_skip_keys_exactly() {
        let cases = [
            (1, (960, 32, 960, 32), 40, -1e4, 0..0, 1.0),
            (2, (300, 8, 250, 24), 10, f32::NEG_INFINITY, 0..0, 1.0),
            (1, (200, 16, 400, 40), 12, -1e4, 30..50, 1.0),
            (1, (240, 32, 240, 16), 8, -1e4, 0..0, 1e5),
        ];
        for (batch, (m, k, n, d), w, neg, dead, q_scale) in cases {
            let mask = window_mask(m, n, w, neg, dead.clone());
            let (mut g, inputs) = windowed(batch, (m, k, n, d), mask, q_scale);
            let before = run_graph(&g, &inputs);
            fuse_softmax_mask(&mut g);
            assert_eq!(fuse_attention(&mut g), 1);
            let dense = batch * m * n * (k + d);
            let macs = planned_macs(&g);
            assert!(
                macs * 2 < dense,
                "{m}x{n}: sparse plan expected ({macs} of {dense})"
            );
            let after = run_graph(&g, &inputs);
            assert!(after[0].iter().all(|x| x.is_finite()));
            assert_close(&before, &after, 1e-5);
            let plan = ModelPlan::new(Arc::new(g), &PlanOptions::default()).expect("plan");
            let tiles = plan.tiles_for(0);
            for count in [2, 3, tiles] {
                assert!(
                    same_bits(&run_tiles(&plan, &inputs, count), &after[0]),
                    "{m}x{n}: {count} tiles"
                );
            }
        }
    }

    /// A NaN score in a sparse plan, from the query (the row's bound is NaN) or from a
    /// live mask entry (the row's sum of exponentials is NaN; both send the block
    /// dense): that row is NaN as in the unfused ops, every other row within 1e-5 of
    /// them.
    #[test]
    fn sparse_block_with_a_nan_score_runs_dense() {
        let (m, k, n, d) = (240, 16, 240, 16);
        let bad = 100;
        for nan_in_mask in [false, true] {
            let mut mask = window_mask(m, n, 8, -1e4, 0..0);
            if nan_in_mask {
                // Inside the row's window: a live key.
                mask[bad * n + bad * n / m] = f32::NAN;
            }
            let (mut g, mut inputs) = windowed(1, (m, k, n, d), mask, 1.0);
            if !nan_in_mask {
                inputs[0][bad * k + 3] = f32::NAN;
            }
            let before = run_graph(&g, &inputs);
            fuse_softmax_mask(&mut g);
            assert_eq!(fuse_attention(&mut g), 1);
            assert!(
                planned_macs(&g) * 2 < m * n * (k + d),
                "sparse plan expected"
            );
            let after = run_graph(&g, &inputs);
            for (i, (x, y)) in after[0].iter().zip(&before[0]).enumerate() {
                if i / d == bad {
                    assert!(
                        x.is_nan() && y.is_nan(),
                        "{nan_in_mask}: {i}: {x} against {y}"
                    );
                } else {
                    let close = (x - y).abs() <= 1e-5 * (1.0 + y.abs());
                    assert!(close, "{nan_in_mask}: {i}: {x} against {y}");
                }
            }
        }
    }

    /// A mask whose skippable entries are scattered (no block can skip much) keeps the
    /// dense plan.
    #[test]
    fn scattered_masks_stay_dense() {
        let (m, k, n, d) = (96, 16, 200, 16);
        let mask: Vec<f32> = rand_vec(m * n, 4)
            .iter()
            .map(|&x| if x > 0.2 { -1e4 } else { 0.0 })
            .collect();
        let (mut g, _) = windowed(1, (m, k, n, d), mask, 1.0);
        fuse_softmax_mask(&mut g);
        assert_eq!(fuse_attention(&mut g), 1);
        assert_eq!(planned_macs(&g), m * n * (k + d));
    }

    /// Query rows per block: whole MR panels, the scores block within its budget.
    #[test]
    fn block_rows_fit_the_budget() {
        use crate::kernels::gemm::MR;
        for n in [1, 7, 50, 240, 480, 960, 2048, 100_000] {
            let r = super::block_rows(n);
            assert!(
                r.is_multiple_of(MR) && (MR..=super::MAX_ROWS).contains(&r),
                "{n}: {r}"
            );
            assert!(r == MR || r * n * 4 <= super::SCORE_BLOCK_BYTES, "{n}: {r}");
        }
        assert_eq!(super::block_rows(960), 66);
        assert_eq!(super::block_rows(240), super::MAX_ROWS);
    }
}
