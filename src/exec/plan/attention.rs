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

use super::ctx::Ctx;
use super::errors::shape_err;
use super::{FamilyKernel, Planned, Run};
use crate::error::Result;
use crate::ir::DType;
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

    /// Scratch floats: packed kt and v, a packed A block, the scores block and a row.
    fn scratch(&self) -> usize {
        self.packed_batches() * self.packed_kv()
            + self.packed_a()
            + 2 * self.rows * self.n
            + self.n.max(self.d)
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
    };
    p.block_major = block_major(batch, m, mask_rows, p.packed_kv());
    let s = p.scratch();
    Ok(Planned::new(p).scratch(s))
}

impl FamilyKernel for AttentionPlan {
    fn tiles(&self) -> usize {
        self.batch * self.blocks()
    }

    fn macs(&self) -> usize {
        self.batch * self.m * self.n * (self.k + self.d)
    }

    fn run(&self, r: Run<'_>) -> Result<()> {
        let p = self;
        let (m, k, n, d) = (p.m, p.k, p.n, p.d);
        let (lo, hi) = r.tile.range(p.batch * p.blocks(), 1);
        let (q, kt, v) = (r.io.f32(0), r.io.f32(1), r.io.f32(3));
        let mask = p.mask_rows.map(|rows| (r.io.f32(2), rows));
        let y = super::out_f32(r.out, r.outs, 0);
        let exp_row = r.isa.table().exp_row;
        let (packs, rest) = r.scratch.split_at_mut(p.packed_batches() * p.packed_kv());
        let (pa, rest) = rest.split_at_mut(p.packed_a());
        let (s, rest) = rest.split_at_mut(p.rows * n);
        let (probs, rest) = rest.split_at_mut(p.rows * n);
        let tmp = &mut rest[..n.max(d)];
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
                gemm::pack_b(&kt[b * k * n..], n, 1, k, n, 1.0, pk, tmp);
                gemm::pack_b(&v[b * n * d..], d, 1, n, d, 1.0, pv, tmp);
                held[slot] = b;
            }
            let (pk, pv) = (&*pk, &*pv);
            let i0 = b * m + blk * p.rows;
            let rows = p.rows.min(m - blk * p.rows);
            let s = &mut s[..rows * n];
            let qa = &q[i0 * k..];
            let a = if p.q_in_place() {
                ASource::InPlace { a: qa, lda: k }
            } else {
                gemm::pack_a(qa, k, 1, rows, k, 1.0, pa);
                ASource::Packed(pa)
            };
            let none = &Epilogue::NONE;
            let b_k = BSource::Packed(pk);
            gemm::gemm_with(
                r.isa,
                rows,
                n,
                k,
                a,
                b_k,
                &mut [],
                s,
                n,
                (0, rows),
                (0, n),
                none,
            );
            let probs = &mut probs[..rows * n];
            let rows_io = s.chunks_exact(n).zip(probs.chunks_exact_mut(n));
            // Unnormalised probabilities; each output row is scaled by 1 / sum after
            // the product with v (d floats a row instead of n).
            let mut inv = [0.0f32; MAX_ROWS];
            for (i, (row, out)) in rows_io.enumerate() {
                let add = match mask {
                    Some((mk, mrows)) => {
                        let mo = (i0 + i) % mrows * n;
                        &mk[mo..mo + n]
                    }
                    None => &[],
                };
                let sum = exp_row(row, add, out);
                // No keys: the product is 0 and stays 0.
                inv[i] = if n == 0 { 1.0 } else { 1.0 / sum };
            }
            let a = if p.p_in_place() {
                ASource::InPlace { a: probs, lda: n }
            } else {
                gemm::pack_a(probs, n, 1, rows, n, 1.0, pa);
                ASource::Packed(pa)
            };
            let out = &mut y[i0 * d..(i0 + rows) * d];
            let b_v = BSource::Packed(pv);
            gemm::gemm_with(
                r.isa,
                rows,
                d,
                n,
                a,
                b_v,
                &mut [],
                out,
                d,
                (0, rows),
                (0, d),
                none,
            );
            for (o, &s) in out.chunks_exact_mut(d.max(1)).zip(&inv[..rows]) {
                for v in o {
                    *v *= s;
                }
            }
        }
        Ok(())
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
                        let mut st = plan.new_state();
                        for (i, x) in inputs.iter().enumerate() {
                            plan.set_input(&mut st, i, bytemuck::cast_slice(x))
                                .expect("in");
                        }
                        for index in 0..count {
                            plan.run_node(&mut st, 0, Tile { index, count })
                                .expect("tile");
                        }
                        let got: &[f32] =
                            bytemuck::cast_slice(plan.output_bytes(&st, 0).expect("out"));
                        assert!(
                            got.iter()
                                .zip(&whole[0])
                                .all(|(a, b)| a.to_bits() == b.to_bits()),
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
