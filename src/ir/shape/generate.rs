//! Shape rules of the generate family (Shape, ConstantOfShape, Range).

use crate::ir::{DType, Tensor};
use crate::Result;

use super::{one, Cx, TypedShape};

impl Cx<'_> {
    /// Shape: the (sliced) rank as a 1-D int64.
    pub(super) fn shape_of(&self, start: &i64, end: &Option<i64>) -> Result<Vec<TypedShape>> {
        let x = self.shape(0)?;
        let r = x.len() as i64;
        let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r);
        let s = clamp(*start);
        let e = clamp(end.unwrap_or(r));
        one(DType::I64, vec![(e - s).max(0) as usize])
    }

    /// ConstantOfShape of a constant shape.
    pub(super) fn constant_of_shape(&self, value: &Tensor) -> Result<Vec<TypedShape>> {
        let s = self.ints(self.req_const(0, "shape")?, "shape")?;
        let s = s
            .iter()
            .map(|&d| self.dim(d, "shape value"))
            .collect::<Result<Vec<_>>>()?;
        one(value.dtype(), s)
    }

    pub(super) fn range(&self) -> Result<Vec<TypedShape>> {
        let s = self.req_const(0, "start")?;
        let l = self.req_const(1, "limit")?;
        let d = self.req_const(2, "delta")?;
        for t in [s, l, d] {
            if t.numel() != 1 {
                return Err(self.err("start, limit and delta must be scalars"));
            }
        }
        let n = match (s.to_i64_vec(), l.to_i64_vec(), d.to_i64_vec()) {
            (Some(s), Some(l), Some(d)) => {
                let (s, l, d) = (s[0] as i128, l[0] as i128, d[0] as i128);
                if d == 0 {
                    return Err(self.err("delta must not be 0"));
                }
                let span = l - s;
                let q = span / d + i128::from(span % d != 0 && (span < 0) == (d < 0));
                q.max(0)
            }
            _ => {
                let (s, l, d) = (
                    s.to_f32_vec()[0] as f64,
                    l.to_f32_vec()[0] as f64,
                    d.to_f32_vec()[0] as f64,
                );
                if d == 0.0 || !((l - s) / d).is_finite() {
                    return Err(self.err("delta must be non-zero and the range finite"));
                }
                ((l - s) / d).ceil().max(0.0) as i128
            }
        };
        let n = usize::try_from(n).map_err(|_| self.err("range too long"))?;
        Ok(vec![(s.dtype(), vec![n])])
    }
}
