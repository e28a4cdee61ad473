//! Element-wise int8 kernels: QuantizeLinear (f32 → u8), DequantizeLinear (u8 → f32),
//! requantisation between two u8 quantisations, and the u8 add with broadcasting.
//! Each computes exactly what the float QDQ graph computes (DQ, the f32 op, Q), so the
//! results are bit-exact with onnxruntime running that graph.

use super::body::{self, AddParams};
use crate::kernels::isa::Isa;

/// `out[i] = clamp(rne(x[i] / scale) + zp, 0, 255)`: QuantizeLinear to u8 (an s8 target
/// is this with `zp + 128`, then `- 128`).
pub fn quantize_f32(isa: Isa, x: &[f32], scale: f32, zp: u8, out: &mut [u8]) {
    assert_eq!(x.len(), out.len(), "quantize_f32: lengths");
    (isa.table().quant.quantize)(x, scale, zp, out)
}

/// `out[i] = (x[i] - zp) * scale`: DequantizeLinear from u8.
pub fn dequantize_u8(isa: Isa, x: &[u8], scale: f32, zp: u8, out: &mut [f32]) {
    assert_eq!(x.len(), out.len(), "dequantize_u8: lengths");
    (isa.table().quant.dequantize)(x, scale, zp, out)
}

/// `out[i] = Q(DQ(x[i]))`: a u8 tensor moved to another scale / zero point, through a
/// 256-entry table computed with the float formula.
pub fn requant_u8(
    isa: Isa,
    x: &[u8],
    (s_in, zp_in): (f32, u8),
    (s_out, zp_out): (f32, u8),
    out: &mut [u8],
) {
    assert_eq!(x.len(), out.len(), "requant_u8: lengths");
    let lut: [u8; 256] = std::array::from_fn(|v| {
        body::quantize_one(body::dequantize_one(v as u8, s_in, zp_in), s_out, zp_out)
    });
    lut_u8(isa, &lut, x, out)
}

/// `out[i] = table[x[i]]` (`x` and `out` of one length).
pub fn lut_u8(isa: Isa, table: &[u8; 256], x: &[u8], out: &mut [u8]) {
    assert_eq!(x.len(), out.len(), "lut_u8: lengths");
    (isa.table().quant.lut)(table, x, out)
}

/// `out[i] = clamp(Q(DQ(a[i]) + DQ(b[i])), lo, hi)` with `a`, `b`, `out` of one length,
/// or `b` of one element (broadcast).
pub fn qadd(isa: Isa, p: &AddParams, a: &[u8], b: &[u8], out: &mut [u8]) {
    assert!(
        a.len() == out.len() && (b.len() == out.len() || b.len() == 1),
        "qadd: lengths"
    );
    (isa.table().quant.qadd)(p, a, b, out)
}

/// How `b` is broadcast against `a` in [`qadd_bcast`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QBcast {
    /// Same shape.
    Same,
    /// `b` is one element.
    Scalar,
    /// `b` is the last dims of `a`: it repeats every `b.len()` elements (`[N, C] + [C]`).
    Rows,
    /// `b` holds one value per run of `inner` elements, cycling (`[N, C, H, W] + [C, 1,
    /// 1]` with `inner = H * W`).
    Channels {
        /// Elements per run.
        inner: usize,
    },
}

impl QBcast {
    /// The form in which `b` broadcasts to `a` (ONNX multidirectional broadcasting,
    /// the result being `a`'s shape): `b`'s dims other than 1, right-aligned, must
    /// form one block equal to `a`'s dims there. `None` for any other pair (e.g. `[1, C,
    /// 1, W]` against `[N, C, H, W]`, or a `b` larger than `a`).
    pub fn of(a: &[usize], b: &[usize]) -> Option<QBcast> {
        if b.len() > a.len() {
            if b[..b.len() - a.len()].iter().any(|&d| d != 1) {
                return None;
            }
            return QBcast::of(a, &b[b.len() - a.len()..]);
        }
        let pad = a.len() - b.len();
        let dim = |d: usize| if d < pad { 1 } else { b[d - pad] };
        let active: Vec<usize> = (0..a.len()).filter(|&d| dim(d) != 1).collect();
        let (Some(&p), Some(&q)) = (active.first(), active.last()) else {
            return Some(if a.iter().product::<usize>() == 1 {
                QBcast::Same
            } else {
                QBcast::Scalar
            });
        };
        if (p..=q).any(|d| dim(d) != a[d]) {
            return None;
        }
        let len: usize = a[p..=q].iter().product();
        let inner: usize = a[q + 1..].iter().product();
        Some(if len == a.iter().product::<usize>() {
            QBcast::Same
        } else if inner == 1 {
            QBcast::Rows
        } else {
            QBcast::Channels { inner }
        })
    }

    /// Splits output elements `[lo, hi)` into runs that read `b` contiguously: calls
    /// `f(i0, i1, b0, b1)` for each run `[i0, i1)` of the output reading `b[b0..b1]`
    /// (`b1 - b0` is `i1 - i0`, or 1 for a value repeated over the run). `b_len` is the
    /// element count of `b`.
    pub fn for_each_run(
        self,
        b_len: usize,
        lo: usize,
        hi: usize,
        mut f: impl FnMut(usize, usize, usize, usize),
    ) {
        match self {
            QBcast::Same => f(lo, hi, lo, hi),
            QBcast::Scalar => f(lo, hi, 0, 1),
            QBcast::Rows => {
                let mut i = lo;
                while i < hi {
                    let end = hi.min((i / b_len + 1) * b_len);
                    let b0 = i % b_len;
                    f(i, end, b0, b0 + (end - i));
                    i = end;
                }
            }
            QBcast::Channels { inner } => {
                let mut i = lo;
                while i < hi {
                    let end = hi.min((i / inner + 1) * inner);
                    let c = (i / inner) % b_len;
                    f(i, end, c, c + 1);
                    i = end;
                }
            }
        }
    }
}

/// [`qadd`] with `b` broadcast as `bc` says.
pub fn qadd_bcast(isa: Isa, p: &AddParams, bc: QBcast, a: &[u8], b: &[u8], out: &mut [u8]) {
    assert_eq!(a.len(), out.len(), "qadd_bcast: lengths");
    let f = isa.table().quant.qadd;
    match bc {
        QBcast::Same | QBcast::Scalar => qadd(isa, p, a, b, out),
        QBcast::Rows => {
            assert!(
                !b.is_empty() && a.len().is_multiple_of(b.len()),
                "qadd_bcast: row length"
            );
            for (o, x) in out.chunks_exact_mut(b.len()).zip(a.chunks_exact(b.len())) {
                f(p, x, b, o);
            }
        }
        QBcast::Channels { inner } => {
            assert!(
                inner > 0 && !b.is_empty() && a.len().is_multiple_of(inner * b.len()),
                "qadd_bcast: channel runs"
            );
            for (i, (o, x)) in out
                .chunks_exact_mut(inner)
                .zip(a.chunks_exact(inner))
                .enumerate()
            {
                let c = i % b.len();
                f(p, x, &b[c..c + 1], o);
            }
        }
    }
}
