//! Quant family: `QuantizeLinear`, `DequantizeLinear`, and the integer operators
//! `QLinearConv`, `QLinearMatMul`, `ConvInteger`, `MatMulInteger`, which are rewritten
//! here into DequantizeLinear → float op → QuantizeLinear chains so that the compiler's
//! int8 lowering (`compile::quantize`) sees one pattern language.
//!
//! The integer-output ops (`ConvInteger`, `MatMulInteger`) end in a QuantizeLinear to
//! i32 with scale 1 and zero point 0: run in float it is exact while the sums stay below
//! 2^24, and the lowering turns it into an exact i32 accumulation.
//!
//! Invariants: a scale with one element is per-tensor (`axis: None`, as onnxruntime
//! treats it); a 1-D scale of more elements is per-axis and needs the input's rank to be
//! known here (to normalise a negative axis); blocked quantisation (`block_size`) is
//! rejected.

use super::conv::conv_geom;
use super::NodeCx;
use crate::ir::shape::norm_axis;
use crate::ir::{DType, Op, Tensor, ValueId};
use crate::onnx::attrs::Attrs;
use crate::onnx::import::Importer;
use crate::Result;

/// The `axis` of a Q/DQ node whose scale is `scale` and data input `x`: `None` when the
/// scale has one element, else the attribute normalised against `x`'s rank.
fn quant_axis(
    imp: &Importer<'_>,
    a: &Attrs<'_>,
    x: Option<ValueId>,
    scale: Option<ValueId>,
    axis: i64,
) -> Result<Option<usize>> {
    let g = imp.graph();
    let Some(s) = scale.and_then(|s| g.values[s].shape.as_ref()) else {
        return Err(a.err("axis", "the scale's shape must be known at import"));
    };
    if s.iter().product::<usize>() == 1 && s.len() <= 1 {
        return Ok(None);
    }
    if s.len() != 1 {
        return Err(a.err(
            "axis",
            format!("the scale must be a scalar or 1-D, it has shape {s:?}"),
        ));
    }
    let Some(xs) = x.and_then(|x| g.values[x].shape.as_ref()) else {
        return Err(a.err(
            "axis",
            "per-axis quantisation needs the input's shape at import",
        ));
    };
    let ax = norm_axis(axis, xs.len()).ok_or_else(|| {
        a.err(
            "axis",
            format!("{axis} is out of range for rank {}", xs.len()),
        )
    })?;
    if xs[ax] != s[0] {
        return Err(a.err(
            "axis",
            format!(
                "the scale has {} entries, input dim {ax} is {}",
                s[0], xs[ax]
            ),
        ));
    }
    Ok(Some(ax))
}

/// Rejects blocked quantisation (opset 21 `block_size`).
fn no_blocks(a: &Attrs<'_>) -> Result<()> {
    match a.int_or("block_size", 0)? {
        0 => Ok(()),
        b => Err(a.err(
            "block_size",
            format!("blocked quantisation ({b}) is not supported"),
        )),
    }
}

/// The integer type of a quantised tensor: what vnpu supports of ONNX's element types.
fn quant_dtype(a: &Attrs<'_>, attr: &str, d: DType) -> Result<DType> {
    match d {
        DType::U8 | DType::I8 => Ok(d),
        other => Err(a.err(
            attr,
            format!("quantised type {} is not supported (u8, i8)", other.name()),
        )),
    }
}

/// `QuantizeLinear` (opset 10-21).
pub(super) fn quantize_linear(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let a = &cx.a;
    no_blocks(a)?;
    // `saturate` only concerns float8 outputs, which are not supported anyway.
    a.ignore(&["saturate"]);
    let axis_attr = a.int_or("axis", 1)?;
    let dtype = match (cx.input(2), a.int("output_dtype")?) {
        (Some(zp), _) => imp.graph().values[zp].dtype,
        (None, Some(code)) => i32::try_from(code)
            .ok()
            .and_then(DType::from_onnx_code)
            .ok_or_else(|| a.err("output_dtype", format!("type code {code} is not supported")))?,
        (None, None) => DType::U8,
    };
    let dtype = quant_dtype(a, "y_zero_point", dtype)?;
    imp.check(&cx, 2, 3)?;
    let axis = quant_axis(imp, &cx.a, cx.input(0), cx.input(1), axis_attr)?;
    imp.add(cx, Op::QuantizeLinear { axis, dtype }, 1)
}

/// `DequantizeLinear` (opset 10-21).
pub(super) fn dequantize_linear(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let a = &cx.a;
    no_blocks(a)?;
    let axis_attr = a.int_or("axis", 1)?;
    if let Some(code) = a.int("output_dtype")? {
        if code != i64::from(DType::F32.onnx_code()) {
            return Err(a.err("output_dtype", "only float outputs are supported"));
        }
    }
    imp.check(&cx, 2, 3)?;
    let axis = quant_axis(imp, &cx.a, cx.input(0), cx.input(1), axis_attr)?;
    imp.add(cx, Op::DequantizeLinear { axis }, 1)
}

/// Builds the DQ → op → Q chains of the integer operators.
struct Chain<'i, 'a, 'c> {
    imp: &'i mut Importer<'a>,
    cx: &'i NodeCx<'c>,
}

impl Chain<'_, '_, '_> {
    /// A DequantizeLinear of `x` (scale `s`, zero point `zp`; axis as the ONNX attribute
    /// would say) into a fresh f32 value.
    fn dq(
        &mut self,
        what: &str,
        x: Option<ValueId>,
        s: Option<ValueId>,
        zp: Option<ValueId>,
        axis: i64,
    ) -> Result<ValueId> {
        let name = self.cx.name;
        let axis = quant_axis(self.imp, &self.cx.a, x, s, axis)?;
        let out = self.imp.temp(name, &format!("dq_{what}"), DType::F32);
        self.imp.push(
            format!("{name}/dq_{what}"),
            Op::DequantizeLinear { axis },
            vec![x, s, zp],
            vec![out],
            name,
        );
        Ok(out)
    }

    /// A constant f32 scale of 1.
    fn unit_scale(&mut self) -> ValueId {
        let base = format!("{}/unit_scale", self.cx.name);
        self.imp
            .add_const(&base, Tensor::from_f32(vec![], vec![1.0]))
    }

    /// The float op on the dequantised operands into a fresh f32 value.
    fn op(&mut self, op: Op, ins: Vec<Option<ValueId>>) -> ValueId {
        let name = self.cx.name;
        let what = op.name().to_ascii_lowercase();
        let out = self.imp.temp(name, &what, DType::F32);
        self.imp
            .push(format!("{name}/{what}"), op, ins, vec![out], name);
        out
    }

    /// The final QuantizeLinear writing the node's own output.
    fn q(self, x: ValueId, s: Option<ValueId>, zp: Option<ValueId>, dtype: DType) -> Result<()> {
        let name = self.cx.name;
        let axis = quant_axis(self.imp, &self.cx.a, Some(x), s, 1)?;
        let outs = self.imp.outputs(self.cx.n, name, 1)?;
        self.imp.push(
            name.to_string(),
            Op::QuantizeLinear { axis, dtype },
            vec![Some(x), s, zp],
            outs,
            name,
        );
        Ok(())
    }

    /// The dtype of optional value `v`, `default` when absent.
    fn dtype_of(&self, v: Option<ValueId>, default: DType) -> DType {
        v.map_or(default, |v| self.imp.graph().values[v].dtype)
    }

    /// A constant `x_scale * w_scale` (per output channel when `w_scale` is), the scale
    /// of an int32 bias.
    fn bias_scale(&mut self, xs: Option<ValueId>, ws: Option<ValueId>) -> Result<ValueId> {
        let a = &self.cx.a;
        let g = self.imp.graph();
        let get = |v: Option<ValueId>, what: &str| {
            v.and_then(|v| g.values[v].konst.clone())
                .ok_or_else(|| a.err("B", format!("a bias needs a constant {what}")))
        };
        let (x, w) = (get(xs, "x_scale")?, get(ws, "w_scale")?);
        let (x, w) = (x.to_f32_vec(), w.to_f32_vec());
        if x.len() != 1 {
            return Err(a.err("x_scale", "must be per-tensor"));
        }
        let v: Vec<f32> = w.iter().map(|&w| x[0] * w).collect();
        let shape = if v.len() == 1 { vec![] } else { vec![v.len()] };
        let base = format!("{}/bias_scale", self.cx.name);
        Ok(self.imp.add_const(&base, Tensor::from_f32(shape, v)))
    }
}

/// `QLinearConv`: DQ(x), DQ(w) [, DQ(B, x_scale·w_scale)] → Conv → Q(y).
pub(super) fn qlinear_conv(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let a = &cx.a;
    let geom = conv_geom(imp, a, cx.input(3))?;
    let group = a.positive("group", a.int_or("group", 1)?)?;
    imp.check(&cx, 8, 9)?;
    let i = |k| cx.input(k);
    let mut ch = Chain { imp, cx: &cx };
    let dtype = quant_dtype(&cx.a, "y_zero_point", ch.dtype_of(i(7), DType::U8))?;
    let x = ch.dq("x", i(0), i(1), i(2), 1)?;
    let w = ch.dq("w", i(3), i(4), i(5), 0)?;
    let b = match i(8) {
        Some(b) => {
            let s = ch.bias_scale(i(1), i(4))?;
            Some(ch.dq("b", Some(b), Some(s), None, 0)?)
        }
        None => None,
    };
    let conv = Op::Conv {
        geom,
        group,
        post: vec![],
    };
    let y = ch.op(conv, vec![Some(x), Some(w), b]);
    ch.q(y, i(6), i(7), dtype)
}

/// `QLinearMatMul`: DQ(a), DQ(b) → MatMul → Q(y).
pub(super) fn qlinear_matmul(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    imp.check(&cx, 8, 8)?;
    let i = |k| cx.input(k);
    let mut ch = Chain { imp, cx: &cx };
    let dtype = quant_dtype(&cx.a, "y_zero_point", ch.dtype_of(i(7), DType::U8))?;
    let rank_b = i(3)
        .and_then(|b| ch.imp.graph().values[b].shape.as_ref().map(Vec::len))
        .unwrap_or(2) as i64;
    let x = ch.dq("a", i(0), i(1), i(2), -2)?;
    // A per-column b_scale runs along B's last axis.
    let w = ch.dq("b", i(3), i(4), i(5), rank_b - 1)?;
    let y = ch.op(Op::MatMul { post: vec![] }, vec![Some(x), Some(w)]);
    ch.q(y, i(6), i(7), dtype)
}

/// `ConvInteger`: DQ(x, 1, x_zp), DQ(w, 1, w_zp) → Conv → Q(i32, 1).
pub(super) fn conv_integer(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    let a = &cx.a;
    let geom = conv_geom(imp, a, cx.input(1))?;
    let group = a.positive("group", a.int_or("group", 1)?)?;
    imp.check(&cx, 2, 4)?;
    let i = |k| cx.input(k);
    let mut ch = Chain { imp, cx: &cx };
    let one = ch.unit_scale();
    let x = ch.dq("x", i(0), Some(one), i(2), 1)?;
    let w_one = per_axis_unit(&mut ch, i(3))?.unwrap_or(one);
    let w = ch.dq("w", i(1), Some(w_one), i(3), 0)?;
    let conv = Op::Conv {
        geom,
        group,
        post: vec![],
    };
    let y = ch.op(conv, vec![Some(x), Some(w)]);
    ch.q(y, Some(one), None, DType::I32)
}

/// `MatMulInteger`: DQ(a, 1, a_zp), DQ(b, 1, b_zp) → MatMul → Q(i32, 1).
pub(super) fn matmul_integer(imp: &mut Importer<'_>, cx: NodeCx<'_>) -> Result<()> {
    imp.check(&cx, 2, 4)?;
    let i = |k| cx.input(k);
    let mut ch = Chain { imp, cx: &cx };
    let one = ch.unit_scale();
    let rank = |v: Option<ValueId>, ch: &Chain<'_, '_, '_>| {
        v.and_then(|v| ch.imp.graph().values[v].shape.as_ref().map(Vec::len))
            .unwrap_or(2) as i64
    };
    let (ra, rb) = (rank(i(0), &ch), rank(i(1), &ch));
    let a_one = per_axis_unit(&mut ch, i(2))?.unwrap_or(one);
    let x = ch.dq("a", i(0), Some(a_one), i(2), ra - 2)?;
    let b_one = per_axis_unit(&mut ch, i(3))?.unwrap_or(one);
    let w = ch.dq("b", i(1), Some(b_one), i(3), rb - 1)?;
    let y = ch.op(Op::MatMul { post: vec![] }, vec![Some(x), Some(w)]);
    ch.q(y, Some(one), None, DType::I32)
}

/// For a zero point with more than one element (per-axis), a matching 1-D scale of ones.
fn per_axis_unit(ch: &mut Chain<'_, '_, '_>, zp: Option<ValueId>) -> Result<Option<ValueId>> {
    let Some(zp) = zp else { return Ok(None) };
    let Some(s) = ch.imp.graph().values[zp].shape.clone() else {
        return Err(ch
            .cx
            .a
            .err("zero_point", "its shape must be known at import"));
    };
    let n: usize = s.iter().product();
    if n <= 1 {
        return Ok(None);
    }
    let base = format!("{}/unit_scales", ch.cx.name);
    Ok(Some(
        ch.imp
            .add_const(&base, Tensor::from_f32(vec![n], vec![1.0; n])),
    ))
}
