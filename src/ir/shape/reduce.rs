//! Shape rules of the reduce family (Reduce, ArgMax, ArgMin, CumSum).

use crate::ir::DType;
use crate::Result;

use super::{one, Cx, TypedShape};

impl Cx<'_> {
    /// Reduce over attribute or constant-input axes.
    pub(super) fn reduce(
        &self,
        axes: &Option<Vec<i64>>,
        keepdims: &bool,
        noop_with_empty_axes: &bool,
    ) -> Result<Vec<TypedShape>> {
        let (dt, x) = self.req(0)?;
        let axes = match axes {
            Some(a) => a.clone(),
            None => self.opt_ints(1, "axes")?.unwrap_or_default(),
        };
        if axes.is_empty() && *noop_with_empty_axes {
            return one(dt, x.to_vec());
        }
        let mut red = vec![axes.is_empty(); x.len()];
        for a in axes {
            red[self.axis(a, x.len())?] = true;
        }
        one(dt, reduce_shape(x, &red, *keepdims))
    }

    /// ArgMax / ArgMin: int64 indices.
    pub(super) fn arg_reduce(&self, axis: &i64, keepdims: &bool) -> Result<Vec<TypedShape>> {
        let x = self.shape(0)?;
        let ax = self.axis(*axis, x.len())?;
        if x[ax] == 0 {
            // No element to pick an index from (the kernel would read one).
            return Err(self.err(format!("axis {axis} of input shape {x:?} is empty")));
        }
        let mut red = vec![false; x.len()];
        red[ax] = true;
        one(DType::I64, reduce_shape(x, &red, *keepdims))
    }

    /// CumSum: same shape, scalar axis input.
    pub(super) fn cumsum(&self) -> Result<Vec<TypedShape>> {
        let (dt, x) = self.req(0)?;
        let a = self.shape(1)?;
        if a.iter().product::<usize>() != 1 {
            return Err(self.err(format!("axis must be a scalar, has shape {a:?}")));
        }
        one(dt, x.to_vec())
    }
}

/// Output shape of a reduction over the flagged axes.
fn reduce_shape(x: &[usize], red: &[bool], keepdims: bool) -> Vec<usize> {
    x.iter()
        .zip(red)
        .filter_map(|(&d, &r)| match (r, keepdims) {
            (false, _) => Some(d),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect()
}
