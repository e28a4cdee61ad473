//! Shape and type rules of the quant family: QuantizeLinear (f32 → u8/i8/i32, same
//! shape) and DequantizeLinear (u8/i8/i32 → f32, same shape). Scale and zero point must
//! be one element (per-tensor) or one per entry of the quantised axis; the zero point,
//! when given, has the quantised type.

use crate::ir::DType;
use crate::Result;

use super::{one, Cx, TypedShape};

impl Cx<'_> {
    /// Checks the scale (input 1) and zero point (input 2) of a Q/DQ node on input 0 of
    /// shape `x`, quantised as `q` along `axis`.
    fn quant_params(&self, x: &[usize], axis: Option<usize>, q: DType) -> Result<()> {
        let want = match axis {
            None => 1,
            Some(a) => *x.get(a).ok_or_else(|| {
                self.err(format!("axis {a} is out of range for rank {}", x.len()))
            })?,
        };
        let (st, s) = self.req(1)?;
        if st != DType::F32 {
            return Err(self.err(format!("the scale must be f32, is {}", st.name())));
        }
        let count = |s: &[usize]| s.iter().product::<usize>();
        let fits = |s: &[usize]| {
            count(s) == want && (s.len() <= 1 || axis.is_none() && s.iter().all(|&d| d == 1))
        };
        if !fits(s) {
            return Err(self.err(format!(
                "the scale has shape {s:?}; expected {want} value(s) for input {x:?}"
            )));
        }
        if let Some((zt, z)) = self.opt(2)? {
            if zt != q {
                return Err(self.err(format!(
                    "the zero point is {}, the quantised tensor {}",
                    zt.name(),
                    q.name()
                )));
            }
            if !fits(z) {
                return Err(self.err(format!(
                    "the zero point has shape {z:?}; expected {want} value(s)"
                )));
            }
        }
        Ok(())
    }

    /// QuantizeLinear: f32 input, output of `dtype`.
    pub(super) fn quantize_linear(
        &self,
        axis: Option<usize>,
        dtype: DType,
    ) -> Result<Vec<TypedShape>> {
        let (xt, x) = self.req(0)?;
        if xt != DType::F32 {
            return Err(self.err(format!("the input must be f32, is {}", xt.name())));
        }
        if !matches!(dtype, DType::U8 | DType::I8 | DType::I32) {
            return Err(self.err(format!("cannot quantise to {}", dtype.name())));
        }
        self.quant_params(x, axis, dtype)?;
        one(dtype, x.to_vec())
    }

    /// DequantizeLinear: u8/i8/i32 input, f32 output.
    pub(super) fn dequantize_linear(&self, axis: Option<usize>) -> Result<Vec<TypedShape>> {
        let (xt, x) = self.req(0)?;
        if !matches!(xt, DType::U8 | DType::I8 | DType::I32) {
            return Err(self.err(format!("cannot dequantise {}", xt.name())));
        }
        self.quant_params(x, axis, xt)?;
        one(DType::F32, x.to_vec())
    }
}
