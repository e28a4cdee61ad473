//! Quant family: QuantizeLinear and DequantizeLinear, run in float exactly as ONNX
//! defines them (and as onnxruntime computes them):
//! `q = saturate(round_half_even(x / scale) + zp)`, `x = (q - zp) * scale` (the
//! subtraction in integers, the product in f32), per-tensor or per-axis; and the
//! lowered int8 ops (QConv, QGemm, QAdd, QMul, QRequant, QMaxPool, and in [`resample`]
//! QAvgPool, QGlobalAvgPool, QResize) on the kernels of `kernels::quant`. Weights are
//! packed and the input zero-point correction folded into the bias at plan time.
//!
//! Tiles: element ranges (Q, DQ, QAdd, QMul, QRequant), output channels (QConv, whole
//! groups of a grouped conv), rows (QGemm), planes (QMaxPool and the resampling ops).

mod resample;

pub(crate) use resample::{plan_qavgpool, plan_qglobal_avgpool, plan_qresize};

use super::ctx::{geom2, nchw, Ctx};
use super::errors::{shape_err, unsup};
use super::{FamilyKernel, Planned, Run, ELEMS_PER_TILE};
use crate::error::Result;
use crate::ir::{ConvGeom, DType, Elems, QParam};
use crate::kernels::body::conv::ConvShape;
use crate::kernels::body::pool::PoolShape;
use crate::kernels::quant::body::{dequantize_one, qmul_one, quantize_to, SoftmaxParams};
use crate::kernels::quant::{
    lut_u8, maxpool_u8, qadd, qconv_i32, qconv_u8, qconv_u8_ties, qgemm_i32, qgemm_u8, requant_u8,
    AddParams, FloatTies, QBcast, QConvWeights, QGemmB, QLayout, QScratch, Requant,
};

/// Per-tensor or per-axis quantisation parameters resolved for a flat loop: element
/// `i` uses entry `(i / inner) % scale.len()`.
#[derive(Debug)]
pub(crate) struct QParams {
    scale: Vec<f32>,
    zp: Vec<i32>,
    inner: usize,
}

impl QParams {
    /// The entry element `i` uses.
    #[inline]
    fn at(&self, i: usize) -> usize {
        if self.scale.len() == 1 {
            0
        } else {
            (i / self.inner) % self.scale.len()
        }
    }
}

/// A planned QuantizeLinear or DequantizeLinear over `n` elements.
#[derive(Debug)]
pub(crate) enum QuantKernel {
    /// f32 → `to` (u8, i8 or i32).
    Quantize { p: QParams, to: DType, n: usize },
    /// `from` (u8, i8 or i32) → f32.
    Dequantize { p: QParams, from: DType, n: usize },
    /// A lowered int8 op.
    Int8(Box<QKernel>),
}

/// Reads the constant scale (input 1) and zero point (input 2) of a Q/DQ node on input 0,
/// quantised along `axis`.
fn qparams(c: &Ctx<'_>, axis: Option<usize>) -> Result<QParams> {
    let s = c.ishape(0)?;
    let scale = c.const_f32(1, "scale")?;
    let zp: Vec<i32> = if c.has(2) {
        c.const_ints(2, "zero point")?
            .into_iter()
            .map(|z| i32::try_from(z).unwrap_or(0))
            .collect()
    } else {
        vec![0; scale.len()]
    };
    let (dim, inner) = match axis {
        None => (1, s.iter().product::<usize>().max(1)),
        Some(a) if a < s.len() => (s[a], s[a + 1..].iter().product::<usize>().max(1)),
        Some(a) => return Err(shape_err(c.n, format!("axis {a} out of range"))),
    };
    if scale.len() != dim || zp.len() != dim {
        return Err(shape_err(
            c.n,
            format!(
                "{} scales and {} zero points for {dim} channel(s)",
                scale.len(),
                zp.len()
            ),
        ));
    }
    if scale.iter().any(|s| !s.is_finite() || *s == 0.0) {
        return Err(unsup(c.n, "scales must be finite and non-zero"));
    }
    Ok(QParams { scale, zp, inner })
}

/// Plans a QuantizeLinear to `dtype`.
pub(crate) fn plan_quantize(c: &Ctx<'_>, axis: Option<usize>, dtype: DType) -> Result<Planned> {
    c.require_f32(0)?;
    c.outputs_typed(dtype)?;
    if !matches!(dtype, DType::U8 | DType::I8 | DType::I32) {
        return Err(unsup(c.n, format!("quantising to {}", dtype.name())));
    }
    let p = qparams(c, axis)?;
    let n = c.same_numel(0, 0)?;
    Ok(Planned::new(QuantKernel::Quantize { p, to: dtype, n }))
}

/// Plans a DequantizeLinear.
pub(crate) fn plan_dequantize(c: &Ctx<'_>, axis: Option<usize>) -> Result<Planned> {
    c.outputs_typed(DType::F32)?;
    let from = c.itype(0)?;
    if !matches!(from, DType::U8 | DType::I8 | DType::I32) {
        return Err(unsup(c.n, format!("dequantising {}", from.name())));
    }
    let p = qparams(c, axis)?;
    let n = c.same_numel(0, 0)?;
    Ok(Planned::new(QuantKernel::Dequantize { p, from, n }))
}

/// [`quantize_to`] into u8 with one scale and zero point, through the kernel table's
/// vector quantisation (which gives a NaN its lower bound; NaN lanes are then set to
/// the zero point).
fn quantize_u8(isa: crate::kernels::isa::Isa, x: &[f32], scale: f32, zp: u8, out: &mut [u8]) {
    (isa.table().quant.quantize)(x, scale, zp, out);
    if x.iter().any(|v| v.is_nan()) {
        for (o, v) in out.iter_mut().zip(x) {
            if v.is_nan() {
                *o = zp;
            }
        }
    }
}

impl FamilyKernel for QuantKernel {
    fn tiles(&self) -> usize {
        match self {
            QuantKernel::Quantize { n, .. } | QuantKernel::Dequantize { n, .. } => {
                n.div_ceil(ELEMS_PER_TILE)
            }
            QuantKernel::Int8(k) => k.tiles(),
        }
    }

    fn macs(&self) -> usize {
        match self {
            QuantKernel::Int8(k) => k.macs(),
            _ => 0,
        }
    }

    fn run(&self, mut r: Run<'_>) -> Result<()> {
        let (tile, io, isa) = (r.tile, r.io, r.isa);
        match self {
            QuantKernel::Int8(k) => k.run(&mut r),
            QuantKernel::Quantize { p, to, n } => {
                let (lo, hi) = tile.range(*n, ELEMS_PER_TILE);
                let x = &io.f32(0)[lo..hi];
                let out = r.out_bytes(0);
                match to {
                    // One scale: the table's vector quantisation (NaN gives its lower
                    // bound there), then NaN lanes set to the zero point as here.
                    DType::U8 if p.scale.len() == 1 && (0..=255).contains(&p.zp[0]) => {
                        quantize_u8(isa, x, p.scale[0], p.zp[0] as u8, &mut out[lo..hi]);
                    }
                    DType::U8 => {
                        for (k, (o, &v)) in out[lo..hi].iter_mut().zip(x).enumerate() {
                            let c = p.at(lo + k);
                            *o = quantize_to(v, p.scale[c], p.zp[c], 0.0, 255.0) as u8;
                        }
                    }
                    DType::I8 => {
                        for (k, (o, &v)) in out[lo..hi].iter_mut().zip(x).enumerate() {
                            let c = p.at(lo + k);
                            *o = quantize_to(v, p.scale[c], p.zp[c], -128.0, 127.0) as i8 as u8;
                        }
                    }
                    _ => {
                        let out: &mut [i32] = bytemuck::cast_slice_mut(out);
                        for (k, (o, &v)) in out[lo..hi].iter_mut().zip(x).enumerate() {
                            let c = p.at(lo + k);
                            let q = (f64::from(v) / f64::from(p.scale[c])).round_ties_even()
                                + f64::from(p.zp[c]);
                            // `as` saturates (NaN → 0).
                            *o = q as i32;
                        }
                    }
                }
            }
            QuantKernel::Dequantize { p, from, n } => {
                let (lo, hi) = tile.range(*n, ELEMS_PER_TILE);
                let b = io.bytes(0);
                let out = &mut r.out_f32(0)[lo..hi];
                let deq = |k: usize, q: i64| {
                    let c = p.at(k);
                    (q - i64::from(p.zp[c])) as f32 * p.scale[c]
                };
                match from {
                    DType::U8 => {
                        for (k, o) in (lo..hi).zip(out) {
                            *o = deq(k, i64::from(b[k]));
                        }
                    }
                    DType::I8 => {
                        for (k, o) in (lo..hi).zip(out) {
                            *o = deq(k, i64::from(b[k] as i8));
                        }
                    }
                    _ => {
                        let x: &[i32] = bytemuck::cast_slice(b);
                        for (k, o) in (lo..hi).zip(out) {
                            *o = deq(k, i64::from(x[k]));
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

// ---- The lowered int8 ops (kernels in `kernels::quant`). ----

thread_local! {
    /// Per-thread scratch of the int8 kernels: it grows to the largest node a thread
    /// runs (on its first run) and is reused after, so steady-state runs do not allocate.
    static QSCRATCH: std::cell::RefCell<QScratch> = std::cell::RefCell::new(QScratch::new());
}

/// Runs `f` with this thread's int8 scratch.
fn with_scratch<R>(f: impl FnOnce(&mut QScratch) -> R) -> R {
    QSCRATCH.with(|s| f(&mut s.borrow_mut()))
}

/// The requantisation of a QConv / QGemm output: u8 with per-channel multipliers, or the
/// raw i32 sums.
#[derive(Debug)]
pub(crate) enum QOut {
    U8 {
        mult: Vec<f32>,
        y_zp: u8,
        lo: u8,
        hi: u8,
    },
    I32,
}

impl QOut {
    fn new(x: QParam, w_scale: &[f32], y: Option<QParam>, lo: u8, hi: u8) -> QOut {
        match y {
            Some(y) => QOut::U8 {
                mult: w_scale.iter().map(|&ws| x.scale * ws / y.scale).collect(),
                y_zp: y.zp,
                lo,
                hi,
            },
            None => QOut::I32,
        }
    }

    fn dtype(&self) -> DType {
        match self {
            QOut::U8 { .. } => DType::U8,
            QOut::I32 => DType::I32,
        }
    }
}

/// A planned int8 node.
#[derive(Debug)]
pub(crate) enum QKernel {
    /// Conv of `s`; tiles split output channels (aligned to `align`).
    Conv {
        s: ConvShape,
        x_zp: u8,
        w: QConvWeights,
        bias: Vec<i32>,
        out: QOut,
        align: usize,
        /// The float reference that settles near-ties (convs with a u8 output).
        ties: Option<Box<FloatTies>>,
    },
    /// `m` rows of depth `b.k()`; tiles split rows.
    Gemm {
        m: usize,
        b: QGemmB,
        bias: Vec<i32>,
        out: QOut,
    },
    /// `n` outputs; input 1 (`b_len` elements) broadcast as `bc` says.
    Add {
        p: AddParams,
        n: usize,
        bc: QBcast,
        b_len: usize,
    },
    Requant {
        x: QParam,
        y: QParam,
        n: usize,
    },
    MaxPool(PoolShape),
    Lut {
        table: Box<[u8; 256]>,
        n: usize,
    },
    Mul {
        /// `table[a * 256 + b] = Q(DQ(a) * DQ(b))`, the float formula for every pair
        /// (64 KiB, built at plan time).
        table: Box<[u8]>,
        n: usize,
        bc: QBcast,
        b_len: usize,
    },
    /// QAvgPool, QGlobalAvgPool, QResize.
    Resample(resample::ResampleKernel),
    /// Softmax over `len` elements `inner` apart, for `outer * inner` lanes.
    Softmax {
        x: QParam,
        /// [`softmax_exps`] of `x`, for inputs of at least [`SOFTMAX_TABLE_MIN`]
        /// elements.
        exps: Option<Box<[f32]>>,
        y: QParam,
        outer: usize,
        len: usize,
        inner: usize,
    },
}

/// The constant i8 weights (input 1) and optional i32 bias (input 2) of QConv / QGemm.
fn int8_weights(c: &Ctx<'_>, n: usize) -> Result<(Vec<i8>, Option<Vec<i32>>)> {
    let w = match c.konst(1).map(|t| t.elems()) {
        Some(Elems::I8(w)) => w.to_vec(),
        _ => return Err(unsup(c.n, "weights must be a constant i8 tensor")),
    };
    let bias = match c.konst(2).map(|t| t.elems()) {
        None if !c.has(2) => None,
        Some(Elems::I32(b)) if b.len() == n => Some(b.to_vec()),
        _ => {
            return Err(unsup(
                c.n,
                format!("bias must be a constant i32 tensor of {n}"),
            ))
        }
    };
    Ok((w, bias))
}

/// The layout QConv / QGemm weights are packed in: that of the int8 table the plan runs
/// with (`ModelPlan` runs with the best table).
fn weight_layout() -> QLayout {
    crate::kernels::simd::best_isa().table().quant.layout
}

/// Plans a QConv (2-D or 1-D, NCHW).
pub(crate) fn plan_qconv(
    c: &Ctx<'_>,
    geom: &ConvGeom,
    group: usize,
    (x, w_scale, y): (QParam, &[f32], Option<QParam>),
    (lo, hi): (u8, u8),
) -> Result<Planned> {
    let n = c.n;
    let out = QOut::new(x, w_scale, y, lo, hi);
    c.outputs_typed(out.dtype())?;
    let (xs, ws, os) = (c.ishape(0)?, c.ishape(1)?, c.oshape(0)?);
    if c.itype(0)? != DType::U8 {
        return Err(unsup(n, "QConv input must be u8"));
    }
    let [nb, cin, h, w] = nchw(n, xs)?;
    let [onb, cout, oh, ow] = nchw(n, os)?;
    if ws.len() != xs.len() || os.len() != xs.len() || onb != nb {
        return Err(shape_err(n, format!("shapes {xs:?} * {ws:?} -> {os:?}")));
    }
    let ge = geom2(n, geom, xs.len() - 2, &ws[2..])?;
    if group == 0 || cin % group != 0 || cout % group != 0 || ws[0] != cout || ws[1] * group != cin
    {
        return Err(shape_err(
            n,
            format!("weights {ws:?} do not fit input {xs:?} with group {group}"),
        ));
    }
    if w_scale.len() != cout {
        return Err(shape_err(
            n,
            format!("{} weight scales for {cout}", w_scale.len()),
        ));
    }
    let s = ge.conv_shape(nb, [cin, h, w], [cout, oh, ow], group);
    let full = |i: usize, k: usize, st: usize, d: usize, pb: usize, pe: usize| {
        (i + pb + pe)
            .checked_sub(d * (k - 1) + 1)
            .map(|v| v / st + 1)
    };
    if full(h, s.kh, s.sh, s.dh, ge.p[0], ge.p[2]) != Some(oh)
        || full(w, s.kw, s.sw, s.dw, ge.p[1], ge.p[3]) != Some(ow)
    {
        return Err(shape_err(n, "output size does not match the conv geometry"));
    }
    // The int8 kernels address a group's padded, quad-interleaved input planes with
    // u32 byte offsets.
    let group_bytes = [
        (cin / group).div_ceil(4) as u128 * 4,
        (h + ge.p[0] + ge.p[2] + s.sh) as u128,
        (w + ge.p[1] + ge.p[3] + s.sw) as u128,
    ];
    if group_bytes.iter().product::<u128>() > u128::from(u32::MAX) {
        return Err(shape_err(
            n,
            format!("input {xs:?} over the int8 conv's 4 GiB per group"),
        ));
    }
    let (wt, bias) = int8_weights(c, cout)?;
    if wt.len() != cout * ws[1] * s.kh * s.kw {
        return Err(shape_err(n, "weights size"));
    }
    let qw = QConvWeights::pack(weight_layout(), &wt, cout, ws[1], s.kh, s.kw, group);
    let ties = y.map(|y| {
        Box::new(FloatTies::new(
            &s,
            &wt,
            w_scale,
            bias.as_deref(),
            x.scale,
            y.scale,
        ))
    });
    let bias = qw.fold_bias(bias.as_deref(), x.zp);
    // Channel tiles stay whole groups of a grouped (non-depthwise) conv.
    let align = if group > 1 && cout != group {
        cout / group
    } else {
        8
    };
    Ok(Planned::new(QuantKernel::Int8(Box::new(QKernel::Conv {
        s,
        x_zp: x.zp,
        w: qw,
        bias,
        out,
        align,
        ties,
    }))))
}

/// Plans a QGemm: `a [.., m, k] x b [k, n]`.
pub(crate) fn plan_qgemm(
    c: &Ctx<'_>,
    (x, w_scale, y): (QParam, &[f32], Option<QParam>),
    (lo, hi): (u8, u8),
) -> Result<Planned> {
    let n = c.n;
    let out = QOut::new(x, w_scale, y, lo, hi);
    c.outputs_typed(out.dtype())?;
    if c.itype(0)? != DType::U8 {
        return Err(unsup(n, "QGemm input must be u8"));
    }
    let (a, b) = (c.ishape(0)?, c.ishape(1)?);
    if a.len() < 2 || b.len() != 2 || a[a.len() - 1] != b[0] || w_scale.len() != b[1] {
        return Err(shape_err(n, format!("QGemm of {a:?} x {b:?}")));
    }
    let (k, cols) = (b[0], b[1]);
    let m: usize = a[..a.len() - 1].iter().product();
    if c.oshape(0)?.iter().product::<usize>() != m * cols {
        return Err(shape_err(n, "output size"));
    }
    let (wt, bias) = int8_weights(c, cols)?;
    if wt.len() != k * cols {
        return Err(shape_err(n, "weights size"));
    }
    let qb = QGemmB::pack(weight_layout(), &wt, k, cols);
    let bias = qb.fold_bias(bias.as_deref(), x.zp);
    Ok(Planned::new(QuantKernel::Int8(Box::new(QKernel::Gemm {
        m,
        b: qb,
        bias,
        out,
    }))))
}

/// The broadcast of input 1 against input 0 of a QAdd / QMul: (form, element count of
/// input 1, element count of the output).
fn binary_bcast(c: &Ctx<'_>, what: &str) -> Result<(QBcast, usize, usize)> {
    c.outputs_typed(DType::U8)?;
    if c.itype(0)? != DType::U8 || c.itype(1)? != DType::U8 {
        return Err(unsup(c.n, format!("{what} needs two u8 inputs")));
    }
    let (a, b) = (c.ishape(0)?, c.ishape(1)?);
    let bc = QBcast::of(a, b).ok_or_else(|| {
        unsup(
            c.n,
            format!("{what}: {b:?} does not broadcast to {a:?} as one block of dims"),
        )
    })?;
    let n = c.same_numel(0, 0)?;
    Ok((bc, b.iter().product(), n))
}

/// Plans a QAdd of two u8 tensors (the second broadcast, see [`QBcast::of`]).
pub(crate) fn plan_qadd(
    c: &Ctx<'_>,
    a: QParam,
    b: QParam,
    y: QParam,
    lo: u8,
    hi: u8,
) -> Result<Planned> {
    let (bc, b_len, n) = binary_bcast(c, "QAdd")?;
    let p = AddParams {
        a_scale: a.scale,
        a_zp: a.zp,
        b_scale: b.scale,
        b_zp: b.zp,
        y_scale: y.scale,
        y_zp: y.zp,
        lo,
        hi,
    };
    Ok(Planned::new(QuantKernel::Int8(Box::new(QKernel::Add {
        p,
        n,
        bc,
        b_len,
    }))))
}

/// Plans a QRequant (u8 → u8).
pub(crate) fn plan_qrequant(c: &Ctx<'_>, x: QParam, y: QParam) -> Result<Planned> {
    c.outputs_typed(DType::U8)?;
    if c.itype(0)? != DType::U8 {
        return Err(unsup(c.n, "QRequant input must be u8"));
    }
    let n = c.same_numel(0, 0)?;
    Ok(Planned::new(QuantKernel::Int8(Box::new(
        QKernel::Requant { x, y, n },
    ))))
}

/// Plans a QLut (u8 → u8 through 256 entries).
pub(crate) fn plan_qlut(c: &Ctx<'_>, table: &[u8]) -> Result<Planned> {
    c.outputs_typed(DType::U8)?;
    if c.itype(0)? != DType::U8 {
        return Err(unsup(c.n, "QLut input must be u8"));
    }
    let table: Box<[u8; 256]> = table
        .to_vec()
        .into_boxed_slice()
        .try_into()
        .map_err(|_| shape_err(c.n, "the table must have 256 entries"))?;
    let n = c.same_numel(0, 0)?;
    Ok(Planned::new(QuantKernel::Int8(Box::new(QKernel::Lut {
        table,
        n,
    }))))
}

/// Plans a QMul of two u8 tensors (the second broadcast, see [`QBcast::of`]).
pub(crate) fn plan_qmul(c: &Ctx<'_>, a: QParam, b: QParam, y: QParam) -> Result<Planned> {
    let (bc, b_len, n) = binary_bcast(c, "QMul")?;
    let mut table = vec![0u8; 256 * 256].into_boxed_slice();
    for (i, t) in table.iter_mut().enumerate() {
        *t = qmul_one((i >> 8) as u8, (i & 255) as u8, a, b, y);
    }
    Ok(Planned::new(QuantKernel::Int8(Box::new(QKernel::Mul {
        table,
        n,
        bc,
        b_len,
    }))))
}

/// Plans a QSoftmax along `axis`.
pub(crate) fn plan_qsoftmax(c: &Ctx<'_>, axis: usize, x: QParam, y: QParam) -> Result<Planned> {
    c.outputs_typed(DType::U8)?;
    if c.itype(0)? != DType::U8 {
        return Err(unsup(c.n, "QSoftmax input must be u8"));
    }
    c.same_numel(0, 0)?;
    let s = c.ishape(0)?;
    if axis >= s.len() {
        return Err(shape_err(c.n, format!("axis {axis} out of range")));
    }
    let (outer, len, inner) = (
        s[..axis].iter().product(),
        s[axis],
        s[axis + 1..].iter().product(),
    );
    Ok(Planned::new(QuantKernel::Int8(Box::new(
        QKernel::Softmax {
            x,
            exps: (outer * len * inner >= SOFTMAX_TABLE_MIN).then(|| softmax_exps(x)),
            y,
            outer,
            len,
            inner,
        },
    ))))
}

/// Input elements from which a QSoftmax reads its terms from a table (256 KiB, at most
/// four bytes per input element) instead of computing two `exp` per element.
const SOFTMAX_TABLE_MIN: usize = 256 * 256;

/// The softmax terms of a u8 input with parameters `qx`: entry `m * 256 + q` is
/// `exp(v(q) - v(m))` (`v` dequantises in f32, the difference in f32, `exp` in f64
/// rounded to f32), for a lane whose largest dequantised value is `v(m)`.
fn softmax_exps(qx: QParam) -> Box<[f32]> {
    let v = |q: usize| dequantize_one(q as u8, qx.scale, qx.zp);
    (0..256 * 256)
        .map(|i| f64::from(v(i % 256) - v(i / 256)).exp() as f32)
        .collect()
}

/// Plans a QMaxPool (u8 NCHW).
pub(crate) fn plan_qmaxpool(c: &Ctx<'_>, geom: &ConvGeom) -> Result<Planned> {
    let n = c.n;
    c.outputs_typed(DType::U8)?;
    if c.itype(0)? != DType::U8 {
        return Err(unsup(n, "QMaxPool input must be u8"));
    }
    let (xs, os) = (c.ishape(0)?, c.oshape(0)?);
    let [nb, ch, h, w] = nchw(n, xs)?;
    let [onb, och, oh, ow] = nchw(n, os)?;
    if os.len() != xs.len() || (onb, och) != (nb, ch) {
        return Err(shape_err(
            n,
            format!("output {os:?} does not fit input {xs:?}"),
        ));
    }
    let ge = geom2(n, geom, xs.len() - 2, &[])?;
    Ok(Planned::new(QuantKernel::Int8(Box::new(QKernel::MaxPool(
        ge.pool_shape(nb * ch, [h, w], [oh, ow]),
    )))))
}

impl QKernel {
    fn tiles(&self) -> usize {
        match self {
            QKernel::Conv { s, align, .. } => s.c_out.div_ceil(*align),
            QKernel::Gemm { m, .. } => *m,
            QKernel::Add { n, .. }
            | QKernel::Requant { n, .. }
            | QKernel::Lut { n, .. }
            | QKernel::Mul { n, .. } => n.div_ceil(ELEMS_PER_TILE),
            QKernel::Softmax { outer, .. } => *outer,
            QKernel::MaxPool(s) => s.planes,
            QKernel::Resample(k) => k.tiles(),
        }
    }

    fn macs(&self) -> usize {
        match self {
            QKernel::Conv { s, .. } => {
                s.n * s.c_out * s.oh * s.ow * (s.c_in / s.group.max(1)) * s.kh * s.kw
            }
            QKernel::Gemm { m, b, .. } => m * b.k() * b.n(),
            _ => 0,
        }
    }

    fn run(&self, r: &mut Run<'_>) {
        let (tile, isa, io) = (r.tile, r.isa, r.io);
        let x = io.bytes(0);
        match self {
            QKernel::Conv {
                s,
                x_zp,
                w,
                bias,
                out,
                align,
                ties,
            } => {
                let chans = tile.range(s.c_out, *align);
                let o = r.out_bytes(0);
                with_scratch(|sc| match out {
                    QOut::U8 { mult, y_zp, lo, hi } => {
                        let rq = Requant {
                            mult,
                            bias,
                            y_zp: i32::from(*y_zp),
                            lo: *lo,
                            hi: *hi,
                        };
                        match ties {
                            Some(t) => qconv_u8_ties(isa, s, x, *x_zp, w, &rq, t, o, chans, sc),
                            None => qconv_u8(isa, s, x, *x_zp, w, &rq, o, chans, sc),
                        }
                    }
                    QOut::I32 => {
                        let o: &mut [i32] = bytemuck::cast_slice_mut(o);
                        qconv_i32(isa, s, x, *x_zp, w, bias, o, chans, sc);
                    }
                });
            }
            QKernel::Gemm { m, b, bias, out } => {
                let (lo, hi) = tile.range(*m, 1);
                let (k, cols) = (b.k(), b.n());
                let a = &x[lo * k..hi * k];
                let o = r.out_bytes(0);
                with_scratch(|sc| match out {
                    QOut::U8 {
                        mult,
                        y_zp,
                        lo: l,
                        hi: h,
                    } => {
                        let rq = Requant {
                            mult,
                            bias,
                            y_zp: i32::from(*y_zp),
                            lo: *l,
                            hi: *h,
                        };
                        let o = &mut o[lo * cols..hi * cols];
                        qgemm_u8(isa, a, k, hi - lo, b, &rq, o, cols, sc);
                    }
                    QOut::I32 => {
                        let o: &mut [i32] = bytemuck::cast_slice_mut(o);
                        let o = &mut o[lo * cols..hi * cols];
                        qgemm_i32(isa, a, k, hi - lo, b, bias, o, cols, sc);
                    }
                });
            }
            QKernel::Add { p, n, bc, b_len } => {
                let (lo, hi) = tile.range(*n, ELEMS_PER_TILE);
                let b = io.bytes(1);
                let o = r.out_bytes(0);
                bc.for_each_run(*b_len, lo, hi, |i0, i1, b0, b1| {
                    qadd(isa, p, &x[i0..i1], &b[b0..b1], &mut o[i0..i1]);
                });
            }
            QKernel::Resample(k) => k.run(r),
            QKernel::Requant { x: qx, y, n } => {
                let (lo, hi) = tile.range(*n, ELEMS_PER_TILE);
                let o = &mut r.out_bytes(0)[lo..hi];
                requant_u8(isa, &x[lo..hi], (qx.scale, qx.zp), (y.scale, y.zp), o);
            }
            QKernel::MaxPool(s) => {
                let (lo, hi) = tile.range(s.planes, 1);
                maxpool_u8(isa, s, x, r.out_bytes(0), lo, hi);
            }
            QKernel::Softmax {
                x: qx,
                exps,
                y,
                outer,
                len,
                inner,
            } => {
                let (lo, hi) = tile.range(*outer, 1);
                let o = r.out_bytes(0);
                let block = len * inner;
                let p = SoftmaxParams {
                    len: *len,
                    inner: *inner,
                    qx: *qx,
                    qy: *y,
                    exps: exps.as_deref(),
                };
                for b in lo..hi {
                    let (xb, ob) = (&x[b * block..][..block], &mut o[b * block..][..block]);
                    (isa.table().quant.softmax_block)(&p, xb, ob);
                }
            }
            QKernel::Lut { table, n } => {
                let (lo, hi) = tile.range(*n, ELEMS_PER_TILE);
                lut_u8(isa, table, &x[lo..hi], &mut r.out_bytes(0)[lo..hi]);
            }
            QKernel::Mul {
                table,
                n,
                bc,
                b_len,
            } => {
                let (lo, hi) = tile.range(*n, ELEMS_PER_TILE);
                let bx = io.bytes(1);
                let o = r.out_bytes(0);
                bc.for_each_run(*b_len, lo, hi, |i0, i1, b0, b1| {
                    let (o, a) = (&mut o[i0..i1], &x[i0..i1]);
                    if b1 - b0 == 1 && i1 - i0 != 1 {
                        let row = &table[usize::from(bx[b0])..];
                        for (o, &p) in o.iter_mut().zip(a) {
                            *o = row[usize::from(p) << 8];
                        }
                    } else {
                        for ((o, &p), &q) in o.iter_mut().zip(a).zip(&bx[b0..b1]) {
                            *o = table[usize::from(p) << 8 | usize::from(q)];
                        }
                    }
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::quant::body::softmax_block;

    #[test]
    fn vector_quantize_matches_quantize_to() {
        let scale = 0.037f32;
        let mut x: Vec<f32> = (-400..400).map(|i| i as f32 * scale * 0.5).collect();
        x.extend([
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            -0.0,
            1e30,
            -1e30,
            0.018_5,
        ]);
        x.extend((0..37).map(|i| (i as f32 - 18.0) * 1.37));
        for isa in crate::kernels::isa::available_isas() {
            for zp in [0u8, 3, 128, 255] {
                for len in [0, 1, 31, 33, x.len()] {
                    let mut got = vec![7u8; len];
                    quantize_u8(isa, &x[..len], scale, zp, &mut got);
                    let want: Vec<u8> = x[..len]
                        .iter()
                        .map(|&v| quantize_to(v, scale, i32::from(zp), 0.0, 255.0) as u8)
                        .collect();
                    assert_eq!(got, want, "{isa:?} zp {zp} len {len}");
                }
            }
        }
    }

    /// The softmax lane, on its table or not, gives the bits of the formula written out: f32
    /// dequantised values, the lane maximum subtracted in f32, `exp` in f64.
    #[test]
    fn softmax_lane_matches_the_formula() {
        let x: Vec<u8> = (0..16 * 5u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
            .collect();
        let qy = QParam {
            scale: 1.0 / 256.0,
            zp: 0,
        };
        for (scale, zp) in [(0.11f32, 128u8), (0.02, 0), (-0.05, 17), (0.0, 3)] {
            let qx = QParam { scale, zp };
            let exps = softmax_exps(qx);
            for (len, inner, table) in [
                (16, 5, true),
                (5, 16, true),
                (1, 80, true),
                (80, 1, true),
                (16, 5, false),
                (80, 1, false),
            ] {
                let mut got = vec![0u8; x.len()];
                let exps = table.then_some(&exps[..]);
                let p = SoftmaxParams {
                    len,
                    inner,
                    qx,
                    qy,
                    exps,
                };
                softmax_block(&p, &x, &mut got);
                let mut want = vec![0u8; x.len()];
                for j in 0..inner {
                    let v = |i: usize| dequantize_one(x[j + i * inner], scale, zp);
                    let m = (0..len).map(v).fold(f32::NEG_INFINITY, f32::max);
                    let e = |i: usize| f64::from(v(i) - m).exp() as f32;
                    let sum = (0..len).fold(0f32, |a, i| a + e(i));
                    for i in 0..len {
                        let q = quantize_to(e(i) * (1.0 / sum), qy.scale, 0, 0.0, 255.0);
                        want[j + i * inner] = q as u8;
                    }
                }
                let what = format!("scale {scale} zp {zp} len {len} inner {inner} table {table}");
                assert_eq!(got, want, "{what}");
            }
        }
    }
}
