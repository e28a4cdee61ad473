//! Shape rules of the gemm family (Gemm, MatMul, Attention).

use crate::ir::PostOp;
use crate::Result;

use super::{one, Cx, TypedShape};

impl Cx<'_> {
    /// Gemm: 2-D `A·B (+C)`.
    pub(super) fn gemm(
        &self,
        trans_a: &bool,
        trans_b: &bool,
        post: &[PostOp],
    ) -> Result<Vec<TypedShape>> {
        let a = self.shape(0)?;
        let b = self.shape(1)?;
        if a.len() != 2 || b.len() != 2 {
            return Err(self.err(format!("Gemm needs 2-D inputs, got {a:?} and {b:?}")));
        }
        let (m, ka) = if *trans_a { (a[1], a[0]) } else { (a[0], a[1]) };
        let (kb, nn) = if *trans_b { (b[1], b[0]) } else { (b[0], b[1]) };
        if ka != kb {
            return Err(self.err(format!("inner dims differ: A {a:?}, B {b:?}")));
        }
        let out = vec![m, nn];
        if let Some((_, c)) = self.opt(2)? {
            if self.bcast(&out, c)? != out {
                return Err(self.err(format!("C {c:?} does not broadcast to {out:?}")));
            }
        }
        self.check_post(post, &out, nn)?;
        one(self.req(0)?.0, out)
    }

    /// MatMul with numpy batch broadcasting.
    pub(super) fn matmul_node(&self, post: &[PostOp]) -> Result<Vec<TypedShape>> {
        let (dt, a) = self.req(0)?;
        let b = self.shape(1)?;
        let out = self.matmul(a, b)?;
        let ch = out.last().copied().unwrap_or(1);
        self.check_post(post, &out, ch)?;
        one(dt, out)
    }

    /// Attention: q `[..., M, K]`, kt `[..., K, N]`, [mask] (trailing dims of the
    /// `[..., M, N]` scores, leading dims 1), v `[..., N, D]`, batch dims equal; output
    /// `[..., M, D]`.
    pub(super) fn attention(&self) -> Result<Vec<TypedShape>> {
        let (dt, q) = self.req(0)?;
        let (kt, v) = (self.shape(1)?, self.shape(3)?);
        let r = q.len();
        if r < 2 || kt.len() != r || v.len() != r {
            return Err(self.err(format!(
                "q {q:?}, kt {kt:?} and v {v:?} must have one rank of at least 2"
            )));
        }
        let (m, k, n, d) = (q[r - 2], q[r - 1], kt[r - 1], v[r - 1]);
        if kt[r - 2] != k || v[r - 2] != n || kt[..r - 2] != q[..r - 2] || v[..r - 2] != q[..r - 2]
        {
            return Err(self.err(format!(
                "q {q:?}, kt {kt:?}, v {v:?} are not [..., M, K], [..., K, N], [..., N, D]"
            )));
        }
        if let Some((_, mask)) = self.opt(2)? {
            let mut scores = q[..r - 2].to_vec();
            scores.extend([m, n]);
            if !super::is_trailing_mask(mask, &scores) {
                return Err(self.err(format!(
                    "mask {mask:?} is not the trailing dims of the scores {scores:?}"
                )));
            }
        }
        let mut out = q[..r - 2].to_vec();
        out.extend([m, d]);
        one(dt, out)
    }

    pub(super) fn matmul(&self, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
        if a.is_empty() || b.is_empty() {
            return Err(self.err("MatMul inputs must be at least 1-D"));
        }
        let a2: Vec<usize> = if a.len() == 1 {
            vec![1, a[0]]
        } else {
            a.to_vec()
        };
        let b2: Vec<usize> = if b.len() == 1 {
            vec![b[0], 1]
        } else {
            b.to_vec()
        };
        let (ra, rb) = (a2.len(), b2.len());
        if a2[ra - 1] != b2[rb - 2] {
            return Err(self.err(format!("inner dims differ: {a:?} x {b:?}")));
        }
        let mut out = self.bcast(&a2[..ra - 2], &b2[..rb - 2])?;
        if a.len() > 1 {
            out.push(a2[ra - 2]);
        }
        if b.len() > 1 {
            out.push(b2[rb - 1]);
        }
        Ok(out)
    }
}
