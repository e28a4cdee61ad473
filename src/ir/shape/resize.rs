//! Shape rule of Resize (scales or sizes, constant).

use crate::Result;

use super::{Cx, TypedShape};

impl Cx<'_> {
    pub(super) fn resize(&self) -> Result<Vec<TypedShape>> {
        let (dt, x) = self.req(0)?;
        let scales = self.opt_const(2, "scales")?.filter(|t| t.numel() > 0);
        let sizes = self.opt_const(3, "sizes")?.filter(|t| t.numel() > 0);
        let out = match (scales, sizes) {
            (Some(_), Some(_)) => return Err(self.err("give scales or sizes, not both")),
            (Some(s), None) => {
                let s = s.as_f32().ok_or_else(|| self.err("scales must be float"))?;
                if s.len() != x.len() {
                    return Err(self.err(format!("{} scales for rank {}", s.len(), x.len())));
                }
                x.iter()
                    .zip(s)
                    .map(|(&d, &f)| {
                        let v = (d as f32 * f).floor();
                        if f > 0.0 && v.is_finite() && v < 1e15 {
                            Ok(v as usize)
                        } else {
                            Err(self.err(format!("scale {f} is not a positive finite factor")))
                        }
                    })
                    .collect::<Result<Vec<_>>>()?
            }
            (None, Some(s)) => {
                let s = self.ints(s, "sizes")?;
                if s.len() != x.len() {
                    return Err(self.err(format!("{} sizes for rank {}", s.len(), x.len())));
                }
                s.iter()
                    .map(|&v| self.dim(v, "size"))
                    .collect::<Result<_>>()?
            }
            (None, None) => return Err(self.err("needs scales or sizes")),
        };
        Ok(vec![(dt, out)])
    }
}
