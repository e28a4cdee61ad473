//! Shape rules of the index family (Gather, GatherElements, GatherND, TopK,
//! NonMaxSuppression).

use crate::ir::DType;
use crate::Result;

use super::{one, Cx, TypedShape};

impl Cx<'_> {
    /// TopK: values and int64 indices of `k` (constant) along `axis`.
    pub(super) fn topk(&self, axis: &i64) -> Result<Vec<TypedShape>> {
        let (dt, x) = self.req(0)?;
        let ax = self.axis(*axis, x.len())?;
        let k = self.ints(self.req_const(1, "k")?, "k")?;
        let [k] = k[..] else {
            return Err(self.err("k must hold one value"));
        };
        let k = self.dim(k, "k")?;
        if k > x[ax] {
            return Err(self.err(format!("k = {k} exceeds dim {ax} of size {}", x[ax])));
        }
        let mut s = x.to_vec();
        s[ax] = k;
        Ok(vec![(dt, s.clone()), (DType::I64, s)])
    }

    /// Gather: indices shape replaces `axis`; constant indices are range-checked.
    pub(super) fn gather(&self, axis: &i64) -> Result<Vec<TypedShape>> {
        let (dt, x) = self.req(0)?;
        let (it, idx) = self.req(1)?;
        if !matches!(it, DType::I32 | DType::I64) {
            return Err(self.err("indices must be int32 or int64"));
        }
        let ax = self.axis(*axis, x.len())?;
        // Constant indices are checked now: one out of [-d, d) makes the model invalid.
        if let Some(k) = self.input(1).and_then(|i| i.konst) {
            let d = i64::try_from(x[ax]).unwrap_or(i64::MAX);
            if let Some(bad) = k
                .to_i64_vec()
                .and_then(|v| v.into_iter().find(|&i| i < -d || i >= d))
            {
                return Err(self.err(format!(
                    "constant index {bad} is out of range for axis {ax} of size {d}"
                )));
            }
        }
        let mut s = x[..ax].to_vec();
        s.extend_from_slice(idx);
        s.extend_from_slice(&x[ax + 1..]);
        one(dt, s)
    }

    /// GatherElements: output has the indices shape.
    pub(super) fn gather_elements(&self, axis: &i64) -> Result<Vec<TypedShape>> {
        let (dt, x) = self.req(0)?;
        let idx = self.shape(1)?;
        self.axis(*axis, x.len())?;
        if idx.len() != x.len() {
            return Err(self.err(format!(
                "indices rank {} differs from data rank {}",
                idx.len(),
                x.len()
            )));
        }
        one(dt, idx.to_vec())
    }

    /// GatherND: `indices[..-1]` then the data dims the last index dim leaves,
    /// `data[b + last..]`, where the first `b = batch_dims` dims are shared.
    pub(super) fn gather_nd(&self, batch_dims: i64) -> Result<Vec<TypedShape>> {
        let (dt, x) = self.req(0)?;
        let (it, idx) = self.req(1)?;
        if it != DType::I64 {
            return Err(self.err("indices must be int64"));
        }
        let b = usize::try_from(batch_dims)
            .ok()
            .filter(|&b| b < x.len().min(idx.len()))
            .ok_or_else(|| {
                self.err(format!(
                    "batch_dims {batch_dims} must be in [0, min(data rank {}, indices rank {}))",
                    x.len(),
                    idx.len()
                ))
            })?;
        if x[..b] != idx[..b] {
            return Err(self.err(format!(
                "the first {b} dims of data {x:?} and indices {idx:?} differ"
            )));
        }
        let last = idx[idx.len() - 1];
        if last < 1 || b + last > x.len() {
            return Err(self.err(format!(
                "indices' last dim {last} must be in [1, data rank {} - batch_dims {b}]",
                x.len()
            )));
        }
        let mut s = idx[..idx.len() - 1].to_vec();
        s.extend_from_slice(&x[b + last..]);
        one(dt, s)
    }

    /// NonMaxSuppression: static upper bound of selected boxes.
    pub(super) fn nms(&self) -> Result<Vec<TypedShape>> {
        let b = self.shape(0)?;
        let s = self.shape(1)?;
        let (&[nb, ns, 4], &[sb, nc, ss]) = (b, s) else {
            return Err(self.err(format!(
                "boxes {b:?} / scores {s:?} are not [B,N,4] / [B,C,N]"
            )));
        };
        if nb != sb || ns != ss {
            return Err(self.err(format!("boxes {b:?} and scores {s:?} disagree")));
        }
        let max_out = match self.opt_ints(2, "max_output_boxes_per_class")? {
            None => 0,
            Some(v) => v.first().copied().unwrap_or(0).max(0),
        };
        let per = usize::try_from(max_out).unwrap_or(usize::MAX).min(ns);
        let rows = nb
            .checked_mul(nc)
            .and_then(|x| x.checked_mul(per))
            .ok_or_else(|| self.err("output bound overflows"))?;
        one(DType::I64, vec![rows, 3])
    }
}
