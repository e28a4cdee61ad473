//! Shape rules of the norm family (BatchNorm, InstanceNorm, LayerNorm, Softmax, LogSoftmax).

use crate::ir::Op;
use crate::Result;

use super::{one, Cx, TypedShape};

impl Cx<'_> {
    /// BatchNorm / InstanceNorm: per-channel parameters of shape `[C]`.
    pub(super) fn channel_norm(&self) -> Result<Vec<TypedShape>> {
        let (dt, x) = self.req(0)?;
        if x.len() < 2 {
            return Err(self.err(format!("input {x:?} needs a channel dim")));
        }
        let last = if matches!(self.op, Op::BatchNorm { .. }) {
            4
        } else {
            2
        };
        for i in 1..=last {
            let p = self.shape(i)?;
            if p != [x[1]] {
                return Err(self.err(format!(
                    "parameter #{i} has shape {p:?}, expected [{}]",
                    x[1]
                )));
            }
        }
        one(dt, x.to_vec())
    }

    /// LayerNorm: scale/bias broadcast over the normalised tail.
    pub(super) fn layer_norm(&self, axis: &i64) -> Result<Vec<TypedShape>> {
        let (dt, x) = self.req(0)?;
        let ax = self.axis(*axis, x.len())?;
        for i in 1..=2 {
            if let Some((_, p)) = self.opt(i)? {
                if self.bcast(&x[ax..], p)? != x[ax..] {
                    return Err(
                        self.err(format!("parameter #{i} {p:?} does not fit {:?}", &x[ax..]))
                    );
                }
            }
        }
        one(dt, x.to_vec())
    }

    /// Softmax / LogSoftmax: same shape, axis checked.
    /// `x` and a mask of its trailing dims (leading dims 1), softmax over the last axis.
    pub(super) fn masked_softmax(&self) -> Result<Vec<TypedShape>> {
        let (dt, x) = self.req(0)?;
        let m = self.shape(1)?;
        if !crate::ir::shape::is_trailing_mask(m, x) {
            return Err(self.err(format!(
                "mask {m:?} is not the trailing dims of {x:?} (leading dims 1)"
            )));
        }
        one(dt, x.to_vec())
    }

    pub(super) fn softmax(&self, axis: &i64) -> Result<Vec<TypedShape>> {
        let (dt, x) = self.req(0)?;
        self.axis(*axis, x.len())?;
        one(dt, x.to_vec())
    }
}
