//! Shape and type rules of the quant family: QuantizeLinear (f32 → u8/i8/i32, same
//! shape) and DequantizeLinear (u8/i8/i32 → f32, same shape), where scale and zero
//! point must be one element (per-tensor) or one per entry of the quantised axis and
//! the zero point, when given, has the quantised type; and the lowered int8 ops
//! (QConv, QGemm: u8 activations, i8 weights, i32 bias, u8 or i32 output; QAdd / QMul
//! with a broadcast second input, QRequant, QMaxPool, QAvgPool, QGlobalAvgPool, QResize:
//! u8 to u8).

use crate::ir::{ConvGeom, DType, QParam};
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

    /// Checks that input `i` has type `want`.
    fn typed(&self, i: usize, want: DType) -> Result<&[usize]> {
        let (t, s) = self.req(i)?;
        if t != want {
            return Err(self.err(format!(
                "input #{i} must be {}, is {}",
                want.name(),
                t.name()
            )));
        }
        Ok(s)
    }

    /// The weights (input 1, i8) and optional bias (input 2, i32 of `n`) of QConv/QGemm,
    /// with `n` per-channel scales; the output type follows `y`.
    fn int8_operands(&self, n: usize, w_scale: &[f32], y: &Option<QParam>) -> Result<DType> {
        self.typed(0, DType::U8)?;
        self.typed(1, DType::I8)?;
        if w_scale.len() != n {
            return Err(self.err(format!("{} weight scales for {n} channels", w_scale.len())));
        }
        if self.input(2).is_some() {
            let b = self.typed(2, DType::I32)?;
            if b != [n] {
                return Err(self.err(format!("bias has shape {b:?}, expected [{n}]")));
            }
        }
        Ok(if y.is_some() { DType::U8 } else { DType::I32 })
    }

    /// QConv: the Conv output shape.
    pub(super) fn qconv(
        &self,
        geom: &ConvGeom,
        group: usize,
        w_scale: &[f32],
        y: &Option<QParam>,
    ) -> Result<Vec<TypedShape>> {
        let s = self.conv(geom, group)?;
        let dt = self.int8_operands(s[1], w_scale, y)?;
        one(dt, s)
    }

    /// QGemm: `[.., m, k] x [k, n]`.
    pub(super) fn qgemm(&self, w_scale: &[f32], y: &Option<QParam>) -> Result<Vec<TypedShape>> {
        let (a, b) = (self.shape(0)?, self.shape(1)?);
        if a.len() < 2 || b.len() != 2 {
            return Err(self.err(format!(
                "QGemm needs [.., m, k] x [k, n], got {a:?} x {b:?}"
            )));
        }
        let out = self.matmul(a, b)?;
        let dt = self.int8_operands(b[1], w_scale, y)?;
        one(dt, out)
    }

    /// QAdd / QMul: two u8 tensors; the second has the first's shape or broadcasts to
    /// it as one block of its dims (see `kernels::quant::QBcast::of`).
    pub(super) fn qadd(&self) -> Result<Vec<TypedShape>> {
        let a = self.typed(0, DType::U8)?;
        let b = self.typed(1, DType::U8)?;
        if crate::kernels::quant::QBcast::of(a, b).is_none() {
            return Err(self.err(format!(
                "the second input {b:?} does not broadcast to the first {a:?} as one block \
                 of its dims"
            )));
        }
        one(DType::U8, a.to_vec())
    }

    /// QGlobalAvgPool: u8 `[N, C, spatial..]` to `[N, C, 1..]`.
    pub(super) fn qglobal_avgpool(&self) -> Result<Vec<TypedShape>> {
        self.typed(0, DType::U8)?;
        self.global_pool()
    }

    /// QResize: the Resize output shape of a u8 tensor, only the two innermost dims
    /// resized.
    pub(super) fn qresize(&self) -> Result<Vec<TypedShape>> {
        let x = self.typed(0, DType::U8)?.to_vec();
        let out = self.resize()?;
        let o = &out[0].1;
        let r = x.len();
        if r < 2 || o.len() != r || o[..r - 2] != x[..r - 2] || x.contains(&0) {
            return Err(self.err(format!(
                "only the two innermost dims of a non-empty input resize, got {x:?} -> {o:?}"
            )));
        }
        Ok(out)
    }

    /// QRequant: u8 to u8, same shape.
    pub(super) fn qrequant(&self) -> Result<Vec<TypedShape>> {
        one(DType::U8, self.typed(0, DType::U8)?.to_vec())
    }

    /// QLut: u8 to u8 through a table of 256 entries.
    pub(super) fn qlut(&self, table: &[u8]) -> Result<Vec<TypedShape>> {
        if table.len() != 256 {
            return Err(self.err(format!("the table has {} entries, not 256", table.len())));
        }
        self.qrequant()
    }

    /// QSoftmax: u8 to u8 along an axis of the input.
    pub(super) fn qsoftmax(&self, axis: usize) -> Result<Vec<TypedShape>> {
        let out = self.qrequant()?;
        if axis >= out[0].1.len() {
            return Err(self.err(format!("axis {axis} is out of range")));
        }
        Ok(out)
    }

    /// QMaxPool: the pool window on a u8 tensor.
    pub(super) fn qmaxpool(&self, geom: &ConvGeom, ceil_mode: bool) -> Result<Vec<TypedShape>> {
        let x = self.typed(0, DType::U8)?;
        one(DType::U8, self.pool(geom, ceil_mode, x)?)
    }
}
