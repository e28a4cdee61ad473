//! Gemm family (Gemm, MatMul): both planned as one [`GemmPlan`] (per batch
//! `C[m,n] = alpha * A · B (+ bias / addend)`, constant B packed once) and run by the
//! packed GEMM kernel. Tiles split rows of C when there are more rows than columns, else
//! columns; a row tile packs only its own rows of A.

use super::ctx::Ctx;
use super::errors::{shape_err, unsup};
use super::post::{post_ops, MAX_RESIDUALS};
use super::{FamilyKernel, Planned, Run};
use crate::error::Result;
use crate::ir::{DType, Elems, PostOp};
use crate::kernels::eltwise::{self, Bcast};
use crate::kernels::gemm::{self, Epilogue, NR};
use crate::kernels::packed::WeightBuf;
use crate::kernels::unary::PostOpRt;

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
}

impl GemmPlan {
    /// Tiles split rows of C (else columns).
    fn by_rows(&self) -> bool {
        self.m > self.n
    }

    fn scratch(&self) -> usize {
        gemm::packed_a_len(self.m, self.k)
            + if self.b_packed.is_some() {
                0
            } else {
                gemm::block_scratch_len(self.k, self.n)
            }
    }

    fn planned(self) -> Planned {
        let s = self.scratch();
        Planned::new(Box::new(self)).scratch(s)
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
    }
    .planned())
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
            bias: None,
            addend: None,
            addend_input: None,
            post,
            res,
        }
        .planned());
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
        bias: None,
        addend: None,
        addend_input: None,
        post,
        res,
    }
    .planned())
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
        // `GemmPlan::by_rows`); a row tile packs only its own rows of A.
        let ((r0, r1), (lo, hi)) = if g.by_rows() {
            (r.tile.range(g.m, gemm::MR), (0, g.n))
        } else {
            ((0, g.m), r.tile.range(g.n, NR))
        };
        let rows = r1 - r0;
        let a = io.f32(0);
        let b = io.f32(1);
        let (pa, rest) = r.scratch.split_at_mut(gemm::packed_a_len(g.m, g.k));
        let mn = g.m * g.n;
        let sub = r0 * g.n..r1 * g.n;
        // Narrow products read a row-major A in place instead of packing it.
        let a_in_place = g.a_cs == 1 && g.alpha == 1.0 && g.n <= gemm::A_IN_PLACE_MAX_N;
        for (bi, &(ao, bo)) in g.batches.iter().enumerate() {
            let a_rows = &a[ao + r0 * g.a_rs..];
            let asrc = if a_in_place {
                gemm::ASource::InPlace {
                    a: a_rows,
                    lda: g.a_rs,
                }
            } else {
                gemm::pack_a(a_rows, g.a_rs, g.a_cs, rows, g.k, g.alpha, pa);
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
            let cb = &mut c[bi * mn..(bi + 1) * mn][sub.clone()];
            gemm::gemm_with(
                r.isa,
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
        Ok(())
    }
}
