//! Index family (Gather, GatherElements, GatherND, TopK, NonMaxSuppression): reads addressed by
//! index tensors, and selections that produce indices. Runs whole (one tile); an index
//! outside its axis is a run-time data error, never an out-of-bounds access.

use super::ctx::{norm_axis, Ctx};
use super::errors::{run_err, shape_err, unsup};
use super::{FamilyKernel, Planned, Run};
use crate::error::Result;
use crate::ir::DType;
use crate::kernels::nd::{contiguous_strides, MAX_RANK};
use crate::kernels::reduce::{self, AxisView};

/// A planned index op.
#[derive(Debug)]
pub(crate) enum IndexKernel {
    Gather {
        outer: usize,
        axis_len: usize,
        inner: usize,
        n_idx: usize,
        elem: usize,
        idx_t: DType,
    },
    GatherElements {
        dims: Vec<usize>,
        in_dims: Vec<usize>,
        axis: usize,
        elem: usize,
        idx_t: DType,
    },
    /// Per batch `b < batches`, per index tuple `t < tuples`: copies the slice of
    /// `slice` elements of batch `b` of data addressed by the `depth` indices of tuple
    /// `t`.
    GatherND {
        batches: usize,
        tuples: usize,
        /// Sizes of the data dims the indices address.
        dims: Vec<usize>,
        slice: usize,
        elem: usize,
    },
    TopK {
        v: AxisView,
        k: usize,
        largest: bool,
    },
}

/// Checks that output `k` holds `numel` elements.
fn out_numel(c: &Ctx<'_>, k: usize, numel: usize) -> Result<()> {
    let got: usize = c.oshape(k)?.iter().product();
    if got != numel {
        return Err(shape_err(
            c.n,
            format!("output {k} has {got} elements, the op produces {numel}"),
        ));
    }
    Ok(())
}

/// Plans a Gather along `axis` (i64 or i32 indices of any shape).
pub(crate) fn plan_gather(c: &Ctx<'_>, axis: i64) -> Result<Planned> {
    let n = c.n;
    c.outputs_typed(c.itype(0)?)?;
    let s = c.ishape(0)?;
    let a = norm_axis(n, axis, s.len())?;
    let idx_t = c.itype(1)?;
    if !matches!(idx_t, DType::I64 | DType::I32) {
        return Err(unsup(n, "indices must be i64 or i32"));
    }
    let (outer, inner): (usize, usize) = (s[..a].iter().product(), s[a + 1..].iter().product());
    let n_idx: usize = c.ishape(1)?.iter().product();
    out_numel(c, 0, outer * n_idx * inner)?;
    Ok(Planned::new(IndexKernel::Gather {
        outer,
        axis_len: s[a],
        inner,
        n_idx,
        elem: c.itype(0)?.size(),
        idx_t,
    }))
}

/// Plans a GatherElements along `axis` (indices of the data rank, no larger than the
/// data off the axis; the output has the indices' shape).
pub(crate) fn plan_gather_elements(c: &Ctx<'_>, axis: i64) -> Result<Planned> {
    let n = c.n;
    c.outputs_typed(c.itype(0)?)?;
    let s = c.ishape(0)?;
    let a = norm_axis(n, axis, s.len())?;
    let idx_t = c.itype(1)?;
    let is = c.ishape(1)?;
    if !matches!(idx_t, DType::I64 | DType::I32) || is.len() != s.len() || is.len() > MAX_RANK {
        return Err(unsup(n, "indices must be i64/i32 of the data rank"));
    }
    if (0..s.len()).any(|d| d != a && is[d] > s[d]) {
        return Err(shape_err(
            n,
            format!("indices {is:?} exceed the data {s:?} off the axis"),
        ));
    }
    out_numel(c, 0, is.iter().product())?;
    Ok(Planned::new(IndexKernel::GatherElements {
        dims: is.to_vec(),
        in_dims: s.to_vec(),
        axis: a,
        elem: c.itype(0)?.size(),
        idx_t,
    }))
}

/// Plans a GatherND (int64 indices; the first `batch_dims` dims shared by data and
/// indices).
pub(crate) fn plan_gather_nd(c: &Ctx<'_>, batch_dims: i64) -> Result<Planned> {
    let n = c.n;
    c.outputs_typed(c.itype(0)?)?;
    let (s, is) = (c.ishape(0)?, c.ishape(1)?);
    if c.itype(1)? != DType::I64 {
        return Err(unsup(n, "indices must be i64"));
    }
    let b = usize::try_from(batch_dims)
        .ok()
        .filter(|&b| b < s.len().min(is.len()) && s[..b] == is[..b])
        .ok_or_else(|| {
            shape_err(
                n,
                format!("batch_dims {batch_dims} does not fit {s:?} / {is:?}"),
            )
        })?;
    let depth = is[is.len() - 1];
    if depth < 1 || b + depth > s.len() {
        return Err(shape_err(
            n,
            format!("indices {is:?} do not address data {s:?}"),
        ));
    }
    let batches: usize = s[..b].iter().product();
    let tuples: usize = is[b..is.len() - 1].iter().product();
    let slice: usize = s[b + depth..].iter().product();
    out_numel(c, 0, batches * tuples * slice)?;
    Ok(Planned::new(IndexKernel::GatherND {
        batches,
        tuples,
        dims: s[b..b + depth].to_vec(),
        slice,
        elem: c.itype(0)?.size(),
    }))
}

/// Plans a TopK along `axis` with the constant K input 1 (f32 values, i64 indices).
pub(crate) fn plan_top_k(c: &Ctx<'_>, axis: i64, largest: bool) -> Result<Planned> {
    let n = c.n;
    c.require_f32(0)?;
    let s = c.ishape(0)?;
    let a = norm_axis(n, axis, s.len())?;
    let kk = c.const_ints(1, "K")?;
    let k = *kk.first().ok_or_else(|| shape_err(n, "K is empty"))?;
    if k < 0 || k as usize > s[a] {
        return Err(shape_err(
            n,
            format!("K = {k} out of range for axis length {}", s[a]),
        ));
    }
    if n.outputs.len() != 2 || c.otype(0)? != DType::F32 || c.otype(1)? != DType::I64 {
        return Err(unsup(n, "TopK needs f32 values and i64 indices outputs"));
    }
    let v = AxisView::new(s, a);
    let k = k as usize;
    out_numel(c, 0, v.outer * k * v.inner)?;
    out_numel(c, 1, v.outer * k * v.inner)?;
    Ok(Planned::new(IndexKernel::TopK { v, k, largest }).iscratch(v.len))
}

/// NonMaxSuppression is refused: its output shape depends on the data.
pub(crate) fn plan_nms(c: &Ctx<'_>) -> Result<Planned> {
    Err(unsup(
        c.n,
        "NonMaxSuppression has a data-dependent output shape",
    ))
}

/// Element `i` of an i32 or i64 index tensor.
pub(crate) fn read_index(t: DType, b: &[u8], i: usize) -> i64 {
    match t {
        DType::I32 => {
            i32::from_ne_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]]) as i64
        }
        _ => {
            let s = &b[8 * i..8 * i + 8];
            i64::from_ne_bytes([s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]])
        }
    }
}

impl FamilyKernel for IndexKernel {
    fn tiles(&self) -> usize {
        1
    }

    fn run(&self, r: Run<'_>) -> Result<()> {
        let (io, node, out, outs) = (r.io, r.node, r.out, r.outs);
        match self {
            IndexKernel::Gather {
                outer,
                axis_len,
                inner,
                n_idx,
                elem,
                idx_t,
            } => {
                let (data, ib) = (io.bytes(0), io.bytes(1));
                let o = super::out_bytes(out, outs, 0);
                let row = inner * elem;
                for j in 0..*n_idx {
                    let mut ix = read_index(*idx_t, ib, j);
                    if ix < 0 {
                        ix += *axis_len as i64;
                    }
                    if ix < 0 || ix >= *axis_len as i64 {
                        return Err(run_err(
                            node,
                            format!(
                                "index {} out of range for axis length {axis_len}",
                                read_index(*idx_t, ib, j)
                            ),
                        ));
                    }
                    for p in 0..*outer {
                        let s = (p * axis_len + ix as usize) * row;
                        let d = (p * n_idx + j) * row;
                        o[d..d + row].copy_from_slice(&data[s..s + row]);
                    }
                }
            }
            IndexKernel::GatherElements {
                dims,
                in_dims,
                axis,
                elem,
                idx_t,
            } => {
                let (data, ib) = (io.bytes(0), io.bytes(1));
                let o = super::out_bytes(out, outs, 0);
                let ist = contiguous_strides(in_dims.as_slice());
                let total: usize = dims.iter().product();
                let r = dims.len();
                let mut coord = [0usize; MAX_RANK];
                for flat in 0..total {
                    let mut ix = read_index(*idx_t, ib, flat);
                    if ix < 0 {
                        ix += in_dims[*axis] as i64;
                    }
                    if ix < 0 || ix >= in_dims[*axis] as i64 {
                        return Err(run_err(
                            node,
                            format!("index out of range for axis length {}", in_dims[*axis]),
                        ));
                    }
                    let mut src = 0isize;
                    for d in 0..r {
                        let cd = if d == *axis { ix as usize } else { coord[d] };
                        src += cd as isize * ist[d];
                    }
                    let (s, d) = (src as usize * elem, flat * elem);
                    o[d..d + elem].copy_from_slice(&data[s..s + elem]);
                    for d in (0..r).rev() {
                        coord[d] += 1;
                        if coord[d] < dims[d] {
                            break;
                        }
                        coord[d] = 0;
                    }
                }
            }
            IndexKernel::GatherND {
                batches,
                tuples,
                dims,
                slice,
                elem,
            } => {
                let (data, ib) = (io.bytes(0), io.bytes(1));
                let o = super::out_bytes(out, outs, 0);
                let row = slice * elem;
                let per_batch = dims.iter().product::<usize>() * row;
                let depth = dims.len();
                for bt in 0..batches * tuples {
                    let mut at = 0usize;
                    for (d, &len) in dims.iter().enumerate() {
                        let raw = read_index(DType::I64, ib, bt * depth + d);
                        let ix = if raw < 0 { raw + len as i64 } else { raw };
                        if ix < 0 || ix >= len as i64 {
                            return Err(run_err(
                                node,
                                format!("index {raw} out of range for a dim of size {len}"),
                            ));
                        }
                        at = at * len + ix as usize;
                    }
                    let src = (bt / tuples) * per_batch + at * row;
                    o[bt * row..(bt + 1) * row].copy_from_slice(&data[src..src + row]);
                }
            }
            IndexKernel::TopK { v, k, largest } => {
                let (ob, ib) = (outs[0], outs[1]);
                let (first, second) = out.split_at_mut(ib.0);
                let vals: &mut [f32] = bytemuck::cast_slice_mut(&mut first[ob.0..ob.0 + ob.1]);
                let idx: &mut [i64] = bytemuck::cast_slice_mut(&mut second[..ib.1]);
                reduce::top_k(*v, *k, *largest, io.f32(0), vals, idx, r.iscratch);
            }
        }
        Ok(())
    }
}
