//! Shape rules of the test-only ops (Spin, Fail): the output is the input.

use crate::Result;

use super::{one, Cx, TypedShape};

impl Cx<'_> {
    /// Spin / Fail copy their input.
    pub(super) fn pass_through(&self) -> Result<Vec<TypedShape>> {
        let (dt, x) = self.req(0)?;
        one(dt, x.to_vec())
    }
}
