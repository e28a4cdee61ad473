//! Shape rules of the pool family (MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool).

use crate::ir::ConvGeom;
use crate::Result;

use super::{one, Cx, TypedShape};

impl Cx<'_> {
    /// MaxPool / AveragePool.
    pub(super) fn pool_node(&self, geom: &ConvGeom, ceil_mode: &bool) -> Result<Vec<TypedShape>> {
        let (dt, x) = self.req(0)?;
        one(dt, self.pool(geom, *ceil_mode, x)?)
    }

    /// MaxPoolNhwc: `[N, H, W, C]` -> `[N, OH, OW, C]`, the window as MaxPool's.
    pub(super) fn pool_nhwc(&self, geom: &ConvGeom, ceil_mode: bool) -> Result<Vec<TypedShape>> {
        let (dt, x) = self.req(0)?;
        if x.len() != 4 || geom.kernel.len() != 2 {
            return Err(self.err(format!("input {x:?} is not [N, H, W, C] with a 2-D window")));
        }
        let sp = self.window(geom, ceil_mode, &[x[0], x[3], x[1], x[2]])?;
        one(dt, vec![x[0], sp[0], sp[1], x[3]])
    }

    /// GlobalAveragePool / GlobalMaxPool: spatial dims become 1.
    pub(super) fn global_pool(&self) -> Result<Vec<TypedShape>> {
        let (dt, x) = self.req(0)?;
        if x.len() < 3 {
            return Err(self.err(format!("input {x:?} needs N, C and spatial dims")));
        }
        let mut s = x[..2].to_vec();
        s.extend(std::iter::repeat_n(1, x.len() - 2));
        one(dt, s)
    }

    pub(super) fn pool(&self, geom: &ConvGeom, ceil_mode: bool, x: &[usize]) -> Result<Vec<usize>> {
        let mut out = x[..2.min(x.len())].to_vec();
        out.extend(self.window(geom, ceil_mode, x)?);
        Ok(out)
    }
}
