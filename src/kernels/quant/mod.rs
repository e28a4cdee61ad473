//! Int8 kernels on the u8 domain (issue 16): activations are u8 with a per-tensor scale
//! and zero point, weights s8 symmetric per output channel, sums i32.
//!
//! * [`gemm`]: u8 x s8 GEMM with fused requantisation ([`qgemm_u8`]) or i32 output
//!   ([`qgemm_i32`]); [`conv`]: NCHW conv, any geometry, depthwise fast path
//!   ([`qconv_u8`], [`qconv_i32`]).
//! * [`eltwise`]: QuantizeLinear / DequantizeLinear, requantisation, the u8 add.
//! * [`pool`]: max / average pooling and nearest / bilinear resize on u8.
//!
//! Every ISA-specific routine is reached through the int8 sub-table `KernelTable::quant`
//! ([`QuantTable`]); every table gives the same bits as the portable one. Rounding
//! mirrors onnxruntime: scale in f32, clamp, round half to even, add the zero point, so
//! that single ops match the float QDQ reference.
//!
//! Requantisation of a GEMM / conv output: `y = clamp(rne((acc + bias[c]) * mult[c]) +
//! y_zp, lo, hi)` with `mult[c] = x_scale * w_scale[c] / y_scale`. The kernels never
//! subtract the input zero point: `bias` carries `- x_zp * sum_k w[c][k]`
//! ([`QConvWeights::fold_bias`], [`QGemmB::fold_bias`]).

pub mod body;
pub mod conv;
pub mod dw_exact;
pub mod eltwise;
pub mod gemm;
pub mod pool;
pub mod table;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_64_avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_64_vnni;

pub use body::AddParams;
pub use conv::{qconv_i32, qconv_u8, qconv_u8_ties, FloatTies, QConvWeights};
pub use eltwise::{dequantize_u8, lut_u8, qadd, qadd_bcast, quantize_f32, requant_u8, QBcast};
pub use gemm::{qgemm_i32, qgemm_u8, QGemmB};
pub use pool::{avgpool_u8, global_avgpool_u8, maxpool_u8, resize_bilinear_u8, resize_nearest_u8};
pub use table::{QLayout, QuantTable};

/// Requantisation of one GEMM / conv output: one multiplier and one bias (zero point
/// correction included) per output channel, the output zero point and clamp.
#[derive(Debug, Clone, Copy)]
pub struct Requant<'a> {
    /// `x_scale * w_scale[c] / y_scale` per output channel.
    pub mult: &'a [f32],
    /// i32 bias per output channel (`round(b / (x_scale * w_scale[c])) - x_zp *
    /// sum_k w[c][k]`).
    pub bias: &'a [i32],
    /// Output zero point.
    pub y_zp: i32,
    /// Output clamp (a fused ReLU / Clip): `0, 255` when nothing is fused.
    pub lo: u8,
    pub hi: u8,
}

impl Requant<'_> {
    /// Panics unless there is one multiplier and one bias per channel.
    fn check(&self, channels: usize) {
        assert!(
            self.mult.len() == channels && self.bias.len() == channels,
            "Requant: {} multipliers and {} biases for {channels} channels",
            self.mult.len(),
            self.bias.len()
        );
        assert!(self.lo <= self.hi, "Requant: lo > hi");
    }
}

/// Per-worker scratch of the int8 kernels: it grows to what a call needs and keeps its
/// size, so that after the first run (or [`QScratch::reserve_conv`] /
/// [`QScratch::reserve_gemm`]) nothing allocates.
#[derive(Debug, Default)]
pub struct QScratch {
    a: Vec<i16>,
    q: Vec<u8>,
    c: Vec<i32>,
    row: Vec<u8>,
    f: Vec<f32>,
    ties: Vec<u32>,
    offs: Vec<u32>,
}

/// The scratch of one GEMM or dense conv call: packed panels (pairs in `p16` or quads
/// in `p8`, the other empty), the i32 block and byte rows (im2col rows, or the padded
/// planes of a conv on the wide grid).
pub(crate) struct Bufs<'s> {
    pub p16: &'s mut [i16],
    pub p8: &'s mut [u8],
    pub c: &'s mut [i32],
    pub row: &'s mut [u8],
    /// B quad offsets of a conv tile (`table::QuadOffsets`).
    pub offs: &'s mut [u32],
}

/// `v[..n]`, growing `v` first when it is shorter.
fn grow<T: Default + Clone>(v: &mut Vec<T>, n: usize) -> &mut [T] {
    if v.len() < n {
        v.resize(n, T::default());
    }
    &mut v[..n]
}

impl QScratch {
    /// An empty scratch.
    pub fn new() -> QScratch {
        QScratch::default()
    }

    /// Grows the scratch to what a conv of shape `s` with weights packed in `layout`
    /// needs (so that the call allocates nothing).
    pub fn reserve_conv(&mut self, s: &crate::kernels::body::conv::ConvShape, layout: QLayout) {
        let ohw = s.oh * s.ow;
        if s.is_depthwise() {
            let (_, wps, plen) = conv::dw_phases(s);
            self.conv_bufs(s.sh * s.sw * plen, s.oh * wps + ohw);
            self.dw_bufs(dw_exact::scratch_len(s));
        } else {
            let (mr, nr) = (layout.mr(), layout.nr());
            let wide = conv::wide_geom(s).filter(|_| layout == QLayout::Quads);
            let cols = wide.map_or(ohw, |(wp, _)| s.oh * wp);
            let nc = gemm::QNC.min(cols.div_ceil(nr) * nr);
            let mc = gemm::QMC.min(s.cout_g().div_ceil(mr) * mr);
            let (b_len, rows) = match wide {
                Some((_, cplen)) => (conv::wide_b_len(s, cplen, nc), s.cin_g() * cplen),
                None if layout == QLayout::Quads => (conv::pointwise_b_len(s), 0),
                None => (layout.b_len(s.k(), nc), layout.kg() * nc),
            };
            let kq = conv::conv_quads(s);
            self.bufs(layout, b_len, mc * nc, rows, kq);
        }
    }

    /// Grows the scratch to what a GEMM of `m` rows, depth `k`, `n` columns with B packed
    /// in `layout` needs.
    pub fn reserve_gemm(&mut self, m: usize, k: usize, n: usize, layout: QLayout) {
        let (mr, nr) = (layout.mr(), layout.nr());
        let mc = gemm::QMC.min(m.div_ceil(mr) * mr);
        let nc = gemm::QNC.min(n.div_ceil(nr) * nr);
        self.bufs(layout, layout.a_len(mc, k), mc * nc, 0, 0);
    }

    /// Packed panels of `packed` elements in `layout`, an i32 block of `c_len`,
    /// `row_len` bytes of rows and `offs_len` quad offsets.
    pub(crate) fn bufs(
        &mut self,
        layout: QLayout,
        packed: usize,
        c_len: usize,
        row_len: usize,
        offs_len: usize,
    ) -> Bufs<'_> {
        let (n16, n8) = match layout {
            QLayout::Pairs => (packed, 0),
            QLayout::Quads => (0, packed),
        };
        Bufs {
            p16: grow(&mut self.a, n16),
            p8: grow(&mut self.q, n8),
            c: grow(&mut self.c, c_len),
            row: grow(&mut self.row, row_len),
            offs: grow(&mut self.offs, offs_len),
        }
    }

    /// `n` floats (the f32 depthwise block, `dw_exact`) and the block's near-tie list
    /// (`dw_exact::TIES_MAX`).
    pub(crate) fn dw_bufs(&mut self, n: usize) -> (&mut [f32], &mut [u32]) {
        (
            grow(&mut self.f, n),
            grow(&mut self.ties, dw_exact::TIES_MAX),
        )
    }

    /// Padded plane (i16) and sums of a depthwise conv.
    fn conv_bufs(&mut self, plane_len: usize, c_len: usize) -> (&mut [i16], &mut [i32]) {
        (grow(&mut self.a, plane_len), grow(&mut self.c, c_len))
    }
}

#[cfg(test)]
mod dw_tests;
#[cfg(test)]
mod tests;
