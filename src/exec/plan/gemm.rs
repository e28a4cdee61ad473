//! Gemm family (Gemm, MatMul): both planned as one [`GemmPlan`] (per batch
//! `C[m,n] = alpha * A · B (+ bias / addend)`, constant B packed once) and run by the
//! packed GEMM kernel. Tiles split rows of C when there are more rows than columns, else
//! columns; a row tile packs only its own rows of A.
//!
//! Intra-op chunks (a node run whole on several threads, `exec::pool`), for one batch and
//! a constant B: row ranges of C aligned to the A panel (sharing the packed B), or for a
//! one-row C (a classifier's Gemm) column ranges aligned to the B panel, each with its own
//! packed columns of B; a product in bf16 (constant B in K pairs) takes row ranges only.
//! Each chunk is the same kernel on disjoint outputs: bit-identical to one thread.

use super::ctx::Ctx;
use super::errors::{shape_err, unsup};
use super::post::{leading_bias, post_ops, MAX_RESIDUALS};
use super::{FamilyKernel, Inputs, Planned, Run};
use crate::error::Result;
use crate::exec::pool;
use crate::ir::{DType, Elems, PostOp};
use crate::kernels::bf16::{self, Bf16Table};
use crate::kernels::eltwise::{self, Bcast};
use crate::kernels::gemm::{self, Epilogue, NR};
use crate::kernels::packed::WeightBuf;
use crate::kernels::simd::Isa;
use crate::kernels::unary::PostOpRt;

/// Columns of C up to which a MatMul / Gemm reads a row-major A in place (the strided
/// micro-tile) rather than packing it per run: packing costs a pass over A that only
/// `n / NR` strips reuse. SVTR-tiny's token GEMMs (A 1024 x 64..256, Zen 3, one
/// thread, `vnpu perf` alternating): fc2 (n = 64..256) 10.0 -> 9.5 ms in all, qkv / proj
/// / fc1 1-3 % each, the model 68.0 -> 67.5 ms; past 256 columns (CRNN's 1024-wide
/// LSTM projections, its classifier) packing is as fast or faster.
const A_IN_PLACE_MAX_N: usize = 16 * gemm::NR;
/// Gemm / MatMul resolved: per batch `C[m,n] = alpha * A · B (+ bias / addend)`.
#[derive(Debug)]
pub(crate) struct GemmPlan {
    m: usize,
    n: usize,
    k: usize,
    /// Element offsets of A and B per batch.
    batches: Vec<(usize, usize)>,
    a_rs: usize,
    a_cs: usize,
    b_rs: usize,
    b_cs: usize,
    alpha: f32,
    b_packed: Option<WeightBuf>,
    bias: Option<Vec<f32>>,
    addend: Option<Vec<f32>>,
    addend_input: Option<usize>,
    post: Vec<PostOpRt>,
    res: Vec<usize>,
    /// Intra-op chunks when the node runs whole; empty = one thread.
    par: Vec<GemmChunk>,
    /// The bf16 kernels and the constant B in K pairs (scale included) when the product
    /// runs in bf16 (`PlanOptions::precision`; then `b_packed` is `None`; intra-op chunks
    /// by rows only).
    bf16: Option<(&'static Bf16Table, bf16::Dwords)>,
}

/// Rows `[lo, hi)` of C (`b: None`, the plan's packed B), or columns `[lo, hi)` of a
/// one-row C with those columns of B packed on their own (`b`, or `b16` in a bf16 plan),
/// for one intra-op thread.
#[derive(Debug)]
struct GemmChunk {
    lo: usize,
    hi: usize,
    b: Option<WeightBuf>,
    b16: Option<bf16::Dwords>,
}

impl GemmChunk {
    /// Columns of a one-row C rather than rows.
    fn cols(&self) -> bool {
        self.b.is_some() || self.b16.is_some()
    }
}

/// The constant B as planned: elements, row and column strides, and the scale packed in.
type RawB<'a> = (&'a [f32], usize, usize, f32);

/// Fewest depth of a product a bf16 plan runs on the wide (AMX) GEMM; shallower ones
/// stay f32 (padding K to a whole tile step, converting A and the epilogue pass cost
/// more than the products save: MobileNetV2's 16->96 1x1 at 112x112 took 738 us on AMX
/// against 484 in f32, its 96->24 at 56x56 124 against 184).
const WIDE_GEMM_MIN_K: usize = 64;

impl GemmPlan {
    /// Tiles split rows of C (else columns).
    fn by_rows(&self) -> bool {
        self.m > self.n
    }

    fn scratch(&self) -> usize {
        if self.bf16.is_some() {
            // Dwords of A's rows in K pairs, held in the f32 scratch.
            let tab = self.bf16.as_ref().map(|b| b.0).expect("bf16 table");
            return bf16::gemm_a_rows_scratch_len(tab, self.m, self.k);
        }
        gemm::packed_a_len(self.m, self.k)
            + if self.b_packed.is_some() {
                0
            } else {
                gemm::block_scratch_len(self.k, self.n)
            }
    }

    /// The plan with its intra-op chunks for `c.threads` threads (`b`: the constant B),
    /// or in bf16 when `c` asks for it, B is constant and C has at least a row panel
    /// (a one-row product would fill one lane of six) or the GEMM is wide (AMX), whose
    /// depth must be at least [`WIDE_GEMM_MIN_K`]. On AMX a one-row product streams half
    /// the weight bytes: MobileNetV2's 1280 -> 1000 classifier 286 -> 156 us (per-node
    /// medians of interleaved rounds, one thread).
    fn planned(mut self, c: &Ctx<'_>, b: Option<RawB<'_>>) -> Planned {
        if let (Some(tab), Some((bv, rs, cs, scale))) = (c.bf16, b) {
            let deep = tab.wide_gemm.is_none() || self.k >= WIDE_GEMM_MIN_K;
            // Fewer rows than a panel: on the wide GEMM too, where the weights' bytes
            // (halved in bf16) bound the product, not its lanes.
            let rows = self.m >= gemm::MR || tab.wide_gemm.is_some();
            if self.batches.len() == 1 && rows && deep {
                let pb = bf16::pack_b_for(tab, (bv, rs, cs), (self.k, self.n), scale);
                self.bf16 = Some((tab, pb.into()));
                self.b_packed = None;
                self.alpha = 1.0;
                self.par = self.chunks(c.threads, b);
                let s = self.scratch();
                let helper = self
                    .par
                    .iter()
                    .map(|ch| {
                        let rows = if ch.cols() { 1 } else { ch.hi - ch.lo };
                        bf16::gemm_a_rows_scratch_len(tab, rows, self.k)
                    })
                    .max()
                    .unwrap_or(0);
                return Planned::new(Box::new(self))
                    .scratch(s)
                    .helper_scratch(helper);
            }
        }
        let threads = c.threads;
        self.par = self.chunks(threads, b);
        let s = self.scratch();
        let helper = self
            .par
            .iter()
            .map(|ch| {
                let rows = if ch.cols() { 1 } else { ch.hi - ch.lo };
                gemm::packed_a_len(rows, self.k)
            })
            .max()
            .unwrap_or(0);
        Planned::new(Box::new(self))
            .scratch(s)
            .helper_scratch(helper)
    }

    /// Cuts the product into intra-op chunks (see the module doc); empty = one thread.
    fn chunks(&self, threads: usize, b: Option<RawB<'_>>) -> Vec<GemmChunk> {
        let constant_b = self.b_packed.is_some() || self.bf16.is_some();
        if threads < 2 || self.batches.len() != 1 || !constant_b {
            return Vec::new();
        }
        let compute = self.m * self.n * self.k / pool::DENSE_MACS_PER_US;
        // Rows also for wide products of a few panels a thread (channels-last 1x1 convs
        // on 7x7 / 14x14 planes: 49 or 196 rows, 160-1280 columns): each chunk reads the
        // whole packed B, and C's rows are contiguous blocks.
        if self.by_rows() || self.m >= 2 * gemm::MR * threads {
            return pool::chunk_ranges(self.m, gemm::MR, compute, threads)
                .into_iter()
                .map(|(lo, hi)| GemmChunk {
                    lo,
                    hi,
                    b: None,
                    b16: None,
                })
                .collect();
        }
        let Some((bv, rs, cs, scale)) = b.filter(|_| self.m == 1) else {
            return Vec::new();
        };
        if let Some((tab, _)) = &self.bf16 {
            // A one-row bf16 product (on AMX): columns, each chunk's bf16 pairs packed on
            // their own, half the f32 bytes to stream.
            let stream = self.k * self.n * 2 / pool::STREAM_BYTES_PER_US;
            return pool::chunk_ranges(self.n, NR, compute.max(stream), threads)
                .into_iter()
                .map(|(lo, hi)| {
                    let src = (&bv[lo * cs..], rs, cs);
                    let pb = bf16::pack_b_for(tab, src, (self.k, hi - lo), scale);
                    GemmChunk {
                        lo,
                        hi,
                        b: None,
                        b16: Some(pb.into()),
                    }
                })
                .collect();
        }
        let stream = self.k * self.n * 4 / pool::STREAM_BYTES_PER_US;
        let k = self.k;
        let mut row = vec![0.0; self.n];
        pool::chunk_ranges(self.n, NR, compute.max(stream), threads)
            .into_iter()
            .map(|(lo, hi)| {
                let mut pb = vec![0.0; gemm::packed_b_len(k, hi - lo)];
                gemm::pack_b(&bv[lo * cs..], rs, cs, k, hi - lo, scale, &mut pb, &mut row);
                GemmChunk {
                    lo,
                    hi,
                    b: Some(WeightBuf::owned(pb)),
                    b16: None,
                }
            })
            .collect()
    }

    /// True when A is read in place rather than packed (products up to
    /// [`A_IN_PLACE_MAX_N`] columns wide).
    fn a_in_place(&self) -> bool {
        self.a_cs == 1 && self.alpha == 1.0 && self.n <= A_IN_PLACE_MAX_N
    }

    /// True when the column tiles of this product share one packed A in the scratch
    /// (the first tile packs it; see [`FamilyKernel::run`]).
    fn tiles_share_a(&self) -> bool {
        !self.by_rows() && self.batches.len() == 1 && self.bf16.is_none() && !self.a_in_place()
    }

    /// Rows `[r0, r1)`, columns `[lo, hi)` of batch `bi` into `cb` (those rows of C);
    /// `a_packed`: the scratch holds those rows of A packed already.
    #[allow(clippy::too_many_arguments)]
    fn run_rows(
        &self,
        isa: Isa,
        io: &Inputs<'_>,
        bi: usize,
        (r0, r1): (usize, usize),
        (lo, hi): (usize, usize),
        cb: &mut [f32],
        (scratch, a_packed): (&mut [f32], bool),
    ) {
        let g = self;
        let rows = r1 - r0;
        let (ao, bo) = g.batches[bi];
        let (a, b) = (io.f32(0), io.f32(1));
        let mn = g.m * g.n;
        let sub = r0 * g.n..r1 * g.n;
        let a_rows = &a[ao + r0 * g.a_rs..];
        let mut resid: [&[f32]; MAX_RESIDUALS] = [&[]; MAX_RESIDUALS];
        for (d, &i) in resid.iter_mut().zip(&g.res) {
            *d = &io.f32(i)[bi * mn..(bi + 1) * mn][sub.clone()];
        }
        let addend = match (&g.addend, g.addend_input) {
            (Some(v), _) => Some(&v[sub.clone()]),
            (None, Some(i)) => Some(&io.f32(i)[sub.clone()]),
            _ => None,
        };
        let epi = Epilogue {
            bias: g.bias.as_deref(),
            channel_is_row: false,
            channel_offset: 0,
            addend,
            post: &g.post,
            residuals: &resid[..g.res.len()],
        };
        if let Some((tab, pb)) = &g.bf16 {
            let ascratch: &mut [u32] = bytemuck::cast_slice_mut(scratch);
            let (k, n) = (g.k, g.n);
            let asrc = (a_rows, g.a_rs, g.a_cs);
            bf16::gemm_a_rows(
                tab,
                isa,
                (k, n),
                asrc,
                pb,
                ascratch,
                cb,
                n,
                (0, rows),
                (lo, hi),
                &epi,
            );
            return;
        }
        let (pa, rest) = scratch.split_at_mut(gemm::packed_a_len(rows, g.k));
        let asrc = if g.a_in_place() {
            gemm::ASource::InPlace {
                a: a_rows,
                lda: g.a_rs,
            }
        } else {
            if !a_packed {
                let kd = gemm::k_depth(g.k, g.n);
                gemm::pack_a(a_rows, g.a_rs, g.a_cs, rows, (g.k, kd), g.alpha, pa);
            }
            gemm::ASource::Packed(pa)
        };
        let bm = &b[bo..];
        let (rs, cs) = (g.b_rs, g.b_cs);
        let fill = |p: usize, j0: usize, len: usize, row: &mut [f32]| {
            if cs == 1 {
                return Some(&bm[p * rs + j0..p * rs + j0 + len]);
            }
            for (j, d) in row[..len].iter_mut().enumerate() {
                *d = bm[p * rs + (j0 + j) * cs];
            }
            None
        };
        let bsrc = match &g.b_packed {
            Some(p) => gemm::BSource::Packed(p),
            None => gemm::BSource::Rows(&fill),
        };
        gemm::gemm_with(
            isa,
            rows,
            g.n,
            g.k,
            asrc,
            bsrc,
            rest,
            cb,
            g.n,
            (0, rows),
            (lo, hi),
            &epi,
        );
    }

    /// Columns `[ch.lo, ch.hi)` of a one-row C into `part` with the chunk's own packed B.
    fn run_cols(
        &self,
        isa: Isa,
        io: &Inputs<'_>,
        ch: &GemmChunk,
        pb: &[f32],
        part: &mut [f32],
        scratch: &mut [f32],
    ) {
        let g = self;
        let (lo, hi) = (ch.lo, ch.hi);
        let a = io.f32(0);
        let w = hi - lo;
        let (pa, rest) = scratch.split_at_mut(gemm::packed_a_len(1, g.k));
        let asrc = if g.a_in_place() {
            gemm::ASource::InPlace { a, lda: g.a_rs }
        } else {
            let kd = gemm::k_depth(g.k, w);
            gemm::pack_a(a, g.a_rs, g.a_cs, 1, (g.k, kd), g.alpha, pa);
            gemm::ASource::Packed(pa)
        };
        let mut resid: [&[f32]; MAX_RESIDUALS] = [&[]; MAX_RESIDUALS];
        let epi = g.cols_epilogue(io, (lo, hi), &mut resid);
        gemm::gemm_with(
            isa,
            1,
            w,
            g.k,
            asrc,
            gemm::BSource::Packed(pb),
            rest,
            part,
            w,
            (0, 1),
            (0, w),
            &epi,
        );
    }

    /// The epilogue of columns `[lo, hi)` of a one-row C (bias from channel `lo`, the
    /// addend's and residuals' columns), the residual slices held in `resid`.
    fn cols_epilogue<'a>(
        &'a self,
        io: &'a Inputs<'_>,
        (lo, hi): (usize, usize),
        resid: &'a mut [&'a [f32]; MAX_RESIDUALS],
    ) -> Epilogue<'a> {
        for (d, &i) in resid.iter_mut().zip(&self.res) {
            *d = &io.f32(i)[lo..hi];
        }
        let addend = match (&self.addend, self.addend_input) {
            (Some(v), _) => Some(&v[lo..hi]),
            (None, Some(i)) => Some(&io.f32(i)[lo..hi]),
            _ => None,
        };
        let resid: &'a [&'a [f32]; MAX_RESIDUALS] = resid;
        Epilogue {
            bias: self.bias.as_deref(),
            channel_is_row: false,
            channel_offset: lo,
            addend,
            post: &self.post,
            residuals: &resid[..self.res.len()],
        }
    }

    /// Columns `[ch.lo, ch.hi)` of a one-row C in bf16 into `part` with the chunk's own
    /// packed pairs `pb` (the same sums as the whole product's columns).
    fn run_cols_bf16(
        &self,
        isa: Isa,
        io: &Inputs<'_>,
        ch: &GemmChunk,
        pb: &[u32],
        part: &mut [f32],
        scratch: &mut [f32],
    ) {
        let g = self;
        let (lo, hi) = (ch.lo, ch.hi);
        let tab = g.bf16.as_ref().map(|b| b.0).expect("a bf16 plan");
        let mut resid: [&[f32]; MAX_RESIDUALS] = [&[]; MAX_RESIDUALS];
        let epi = g.cols_epilogue(io, (lo, hi), &mut resid);
        let w = hi - lo;
        let ascratch: &mut [u32] = bytemuck::cast_slice_mut(scratch);
        let asrc = (io.f32(0), g.a_rs, g.a_cs);
        bf16::gemm_a_rows(
            tab,
            isa,
            (g.k, w),
            asrc,
            pb,
            ascratch,
            part,
            w,
            (0, 1),
            (0, w),
            &epi,
        );
    }

    /// Runs the chunks on this thread and the intra-op helper pool, each writing its own
    /// block of C (rows, or columns of the one row) with its own scratch.
    fn run_chunks(
        &self,
        isa: Isa,
        io: &Inputs<'_>,
        c: &mut [f32],
        scratch: &mut [f32],
        helpers: &mut [crate::huge_pages::HugeVec<crate::exec::Line>],
    ) {
        let n = self.n;
        let len = |ch: &GemmChunk| {
            if ch.cols() {
                ch.hi - ch.lo
            } else {
                (ch.hi - ch.lo) * n
            }
        };
        let mut parts = pool::chunk_parts(self.par.iter().map(len), c, scratch, helpers);
        pool::global().run(&mut parts[..self.par.len()], &|i, slot| {
            let ch = &self.par[i];
            if let Some((part, s)) = slot.take() {
                match (&ch.b, &ch.b16) {
                    (Some(pb), _) => self.run_cols(isa, io, ch, pb, part, s),
                    (None, Some(pb)) => self.run_cols_bf16(isa, io, ch, pb, part, s),
                    (None, None) => {
                        self.run_rows(isa, io, 0, (ch.lo, ch.hi), (0, n), part, (s, false))
                    }
                }
            }
        });
    }
}

/// A constant B (`k x n`, element (p, j) at `p * rs + j * cs`) packed for the GEMM,
/// scaled by `scale`; or `pre`, the same packed when the compiled file was written,
/// after checking its length.
#[allow(clippy::too_many_arguments)]
fn pack_const_b(
    c: &Ctx<'_>,
    b: &[f32],
    rs: usize,
    cs: usize,
    k: usize,
    n: usize,
    scale: f32,
    pre: Option<&WeightBuf>,
) -> Result<WeightBuf> {
    let len = gemm::packed_b_len(k, n);
    if let Some(p) = pre {
        if p.len() != len {
            return Err(shape_err(
                c.n,
                format!("packed B holds {} floats, the product needs {len}", p.len()),
            ));
        }
        return Ok(p.clone());
    }
    let mut pb = vec![0.0; len];
    let mut row = vec![0.0; n];
    gemm::pack_b(b, rs, cs, k, n, scale, &mut pb, &mut row);
    Ok(WeightBuf::owned(pb))
}

/// The f32 elements of a constant, borrowed (the caller checked its type is f32).
fn f32_elems(t: &crate::ir::Tensor) -> &[f32] {
    match t.elems() {
        Elems::F32(v) => v,
        _ => &[],
    }
}

/// The packed B of a planned Gemm / MatMul as it would be stored in a compiled file.
pub(super) fn stored_weights(g: &GemmPlan) -> Option<Vec<&[f32]>> {
    g.b_packed.as_ref().map(|b| vec![&b[..]])
}

/// Plans a Gemm (2-D A and B, optional C scaled by `beta`) with its fused post-ops.
pub(crate) fn plan_gemm(
    c: &Ctx<'_>,
    alpha: f32,
    beta: f32,
    ta: bool,
    tb: bool,
    post: &[PostOp],
    pre: Option<&WeightBuf>,
) -> Result<Planned> {
    let n = c.n;
    c.outputs_typed(DType::F32)?;
    c.require_f32(0)?;
    c.require_f32(1)?;
    let (asz, bsz) = (c.ishape(0)?, c.ishape(1)?);
    if asz.len() != 2 || bsz.len() != 2 {
        return Err(shape_err(n, "Gemm inputs must be 2-D"));
    }
    let (m, k) = if ta {
        (asz[1], asz[0])
    } else {
        (asz[0], asz[1])
    };
    let (k2, nn) = if tb {
        (bsz[1], bsz[0])
    } else {
        (bsz[0], bsz[1])
    };
    if k != k2 || c.oshape(0)? != [m, nn] {
        return Err(shape_err(
            n,
            format!(
                "A {asz:?} x B {bsz:?} does not give output {:?}",
                c.oshape(0)?
            ),
        ));
    }
    let (a_rs, a_cs) = if ta { (1, m) } else { (k, 1) };
    let (b_rs, b_cs) = if tb { (1, k) } else { (nn, 1) };
    let raw_b = c.konst(1).map(|t| (f32_elems(t), b_rs, b_cs, alpha));
    let b_packed = match c.konst(1) {
        Some(t) => Some(pack_const_b(
            c,
            f32_elems(t),
            b_rs,
            b_cs,
            k,
            nn,
            alpha,
            pre,
        )?),
        None => None,
    };
    let (mut bias, mut addend, mut addend_input) = (None, None, None);
    if c.has(2) && beta != 0.0 {
        c.require_f32(2)?;
        let cs = c.ishape(2)?;
        match c.konst(2) {
            Some(t) => {
                let v = t.to_f32_vec();
                if cs.iter().product::<usize>() == nn && cs.last() == Some(&nn) {
                    bias = Some(v.iter().map(|x| x * beta).collect());
                } else {
                    let bc = Bcast::new(&[cs, &[]], &[m, nn])
                        .ok_or_else(|| shape_err(n, "C does not broadcast to [M, N]"))?;
                    let mut full = vec![0.0f32; m * nn];
                    eltwise::map2(&bc, &v, &[0.0f32], &mut full, 0, bc.outer(), |x, _| {
                        x * beta
                    });
                    addend = Some(full);
                }
            }
            None => {
                if cs != [m, nn] || beta != 1.0 {
                    return Err(unsup(n, "a non-constant C must be [M, N] with beta = 1"));
                }
                addend_input = Some(2);
            }
        }
    }
    let (post, res) = post_ops(c, post, nn)?;
    Ok(GemmPlan {
        m,
        n: nn,
        k,
        batches: vec![(0, 0)],
        a_rs,
        a_cs,
        b_rs,
        b_cs,
        alpha: if b_packed.is_some() { 1.0 } else { alpha },
        b_packed,
        bias,
        addend,
        addend_input,
        post,
        res,
        par: Vec::new(),
        bf16: None,
    }
    .planned(c, raw_b))
}

/// Plans a MatMul (numpy semantics: batch dims broadcast, 1-D operands promoted) with
/// its fused post-ops.
pub(crate) fn plan_matmul(
    c: &Ctx<'_>,
    post: &[PostOp],
    pre: Option<&WeightBuf>,
) -> Result<Planned> {
    let n = c.n;
    c.outputs_typed(DType::F32)?;
    c.require_f32(0)?;
    c.require_f32(1)?;
    let (a0, b0) = (c.ishape(0)?, c.ishape(1)?);
    if a0.is_empty() || b0.is_empty() {
        return Err(shape_err(n, "MatMul inputs must have rank >= 1"));
    }
    let a: Vec<usize> = if a0.len() == 1 {
        vec![1, a0[0]]
    } else {
        a0.to_vec()
    };
    let b: Vec<usize> = if b0.len() == 1 {
        vec![b0[0], 1]
    } else {
        b0.to_vec()
    };
    let (m, k) = (a[a.len() - 2], a[a.len() - 1]);
    let (k2, nn) = (b[b.len() - 2], b[b.len() - 1]);
    if k != k2 {
        return Err(shape_err(n, format!("inner dims differ: {a0:?} x {b0:?}")));
    }
    let (ab, bb) = (&a[..a.len() - 2], &b[..b.len() - 2]);
    let batch = crate::ir::shape::broadcast(ab, bb)
        .ok_or_else(|| shape_err(n, format!("batch dims do not broadcast: {a0:?} x {b0:?}")))?;
    let r = batch.len();
    let nbatch: usize = batch.iter().product();
    if c.oshape(0)?.iter().product::<usize>() != nbatch * m * nn {
        return Err(shape_err(n, "output size does not match the product"));
    }
    let b_const = c.konst(1);
    let fold = b_const.is_some() && bb.iter().product::<usize>() == 1;
    let (bias, post) = leading_bias(c, post, nn)?;
    let (post, res) = post_ops(c, post, nn)?;
    if fold {
        // B is one constant matrix: every batch of A is more rows of one GEMM.
        let mm = nbatch * m;
        let bv = b_const.map(f32_elems).unwrap_or_default();
        let pb = pack_const_b(c, bv, nn, 1, k, nn, 1.0, pre)?;
        return Ok(GemmPlan {
            m: mm,
            n: nn,
            k,
            batches: vec![(0, 0)],
            a_rs: k,
            a_cs: 1,
            b_rs: nn,
            b_cs: 1,
            alpha: 1.0,
            b_packed: Some(pb),
            bias,
            addend: None,
            addend_input: None,
            post,
            res,
            par: Vec::new(),
            bf16: None,
        }
        .planned(c, Some((bv, nn, 1, 1.0))));
    }
    let sa = broadcast_batch_strides(ab, &batch, m * k);
    let sb = broadcast_batch_strides(bb, &batch, k * nn);
    let mut batches = Vec::with_capacity(nbatch);
    let mut idx = vec![0usize; r];
    for _ in 0..nbatch {
        let (mut oa, mut ob) = (0, 0);
        for d in 0..r {
            oa += idx[d] * sa[d];
            ob += idx[d] * sb[d];
        }
        batches.push((oa, ob));
        for d in (0..r).rev() {
            idx[d] += 1;
            if idx[d] < batch[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    Ok(GemmPlan {
        m,
        n: nn,
        k,
        batches,
        a_rs: k,
        a_cs: 1,
        b_rs: nn,
        b_cs: 1,
        alpha: 1.0,
        b_packed: None,
        bias,
        addend: None,
        addend_input: None,
        post,
        res,
        par: Vec::new(),
        bf16: None,
    }
    .planned(c, None))
}

/// Element strides of each broadcast batch dim of an operand (0 where broadcast).
fn broadcast_batch_strides(dims: &[usize], batch: &[usize], mat: usize) -> Vec<usize> {
    let r = batch.len();
    let mut out = vec![0usize; r];
    let mut acc = mat;
    for i in (0..dims.len()).rev() {
        let o = r - dims.len() + i;
        out[o] = if dims[i] == 1 { 0 } else { acc };
        acc *= dims[i];
    }
    out
}

impl FamilyKernel for GemmPlan {
    fn tiles(&self) -> usize {
        if self.by_rows() {
            self.m.div_ceil(gemm::MR)
        } else {
            self.n.div_ceil(NR)
        }
    }

    fn macs(&self) -> usize {
        self.batches.len() * self.m * self.n * self.k
    }

    fn run(&self, r: Run<'_>) -> Result<()> {
        let g = self;
        let io = r.io;
        let c: &mut [f32] = super::out_f32(r.out, r.outs, 0);
        if r.tile.count == 1 && !g.par.is_empty() && r.helpers.len() + 1 >= g.par.len() {
            g.run_chunks(r.isa, io, c, r.scratch, r.helpers);
            return Ok(());
        }
        // Tiles split rows or columns (`GemmPlan::by_rows`); a row tile packs only its
        // own rows of A.
        let ((r0, r1), (lo, hi)) = if g.by_rows() {
            (r.tile.range(g.m, gemm::MR), (0, g.n))
        } else {
            ((0, g.m), r.tile.range(g.n, NR))
        };
        // Column tiles of one product share its packed A (the crnn classifier's 80 x 512
        // A was packed by each of its 5 tiles); a tag names the node whose A it is.
        let shared = r.tile.count > 1 && g.tiles_share_a();
        let a_packed = shared && r.tile.index > 0 && *r.bcache == Some(r.index);
        let mn = g.m * g.n;
        for bi in 0..g.batches.len() {
            let cb = &mut c[bi * mn..(bi + 1) * mn][r0 * g.n..r1 * g.n];
            g.run_rows(r.isa, io, bi, (r0, r1), (lo, hi), cb, (r.scratch, a_packed));
        }
        if shared {
            *r.bcache = Some(r.index);
        }
        Ok(())
    }
}
