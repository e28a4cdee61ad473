//! Pooling and resize on u8 planes (NCHW, `planes = N * C`): max pool and nearest resize
//! move values and need no scales; average pool and bilinear resize compute on the
//! dequantised values with the float reference's formula, then quantise to the output
//! scale.

use super::body::{dequantize_one, quantize_one};
use crate::kernels::body::pool::PoolShape;
use crate::kernels::isa::Isa;

/// Max pool of planes `[lo, hi)` (a window wholly in padding gives 0).
pub fn maxpool_u8(isa: Isa, s: &PoolShape, x: &[u8], y: &mut [u8], lo: usize, hi: usize) {
    let f = isa.table().quant.max_pool_plane;
    let (hw, ohw) = (s.h * s.w, s.oh * s.ow);
    for p in lo..hi {
        f(s, &x[p * hw..(p + 1) * hw], &mut y[p * ohw..(p + 1) * ohw]);
    }
}

/// Average pool of planes `[lo, hi)` as the float QDQ graph (DQ, f32 AveragePool, Q)
/// computes it: the window's dequantised values summed in f32 (row by row, like
/// `kernels::pool::avg_pool`), divided by the count
/// (with `count_include_pad`, the declared padding counts, not the cells `ceil_mode`
/// adds), quantised to `(y_s, y_zp)`.
#[allow(clippy::too_many_arguments)]
pub fn avgpool_u8(
    s: &PoolShape,
    count_include_pad: bool,
    x: &[u8],
    (x_s, x_zp): (f32, u8),
    (y_s, y_zp): (f32, u8),
    y: &mut [u8],
    lo: usize,
    hi: usize,
) {
    let (h, w) = (s.h as isize, s.w as isize);
    for p in lo..hi {
        let xp = &x[p * s.h * s.w..(p + 1) * s.h * s.w];
        let yp = &mut y[p * s.oh * s.ow..(p + 1) * s.oh * s.ow];
        for oy in 0..s.oh {
            let y0 = (oy * s.sh) as isize - s.pads[0] as isize;
            let y1 = (y0 + s.kh as isize).min(h + s.pads[2] as isize);
            let (cy0, cy1) = (y0.max(0), y1.min(h));
            for ox in 0..s.ow {
                let x0 = (ox * s.sw) as isize - s.pads[1] as isize;
                let x1 = (x0 + s.kw as isize).min(w + s.pads[3] as isize);
                let (cx0, cx1) = (x0.max(0), x1.min(w));
                let mut sum = 0.0f32;
                for iy in cy0..cy1 {
                    let row = &xp[iy as usize * s.w..];
                    for ix in cx0..cx1 {
                        sum += dequantize_one(row[ix as usize], x_s, x_zp);
                    }
                }
                let n = if count_include_pad {
                    (y1 - y0) * (x1 - x0)
                } else {
                    (cy1 - cy0).max(0) * (cx1 - cx0).max(0)
                };
                let v = if n > 0 { sum / n as f32 } else { 0.0 };
                yp[oy * s.ow + ox] = quantize_one(v, y_s, y_zp);
            }
        }
    }
}

/// Global average pool of planes `[lo, hi)` of `len` values each: the exact integer
/// sum `s` of a plane, then `Q(((s - len * x_zp) * x_s) / len)` with one f32 product and
/// one f32 division (the float reference sums the dequantised values in f32, which
/// differs from the exact sum only by f32 rounding; onnxruntime's
/// QLinearGlobalAveragePool folds the division into one multiplier, also within one
/// step).
pub fn global_avgpool_u8(
    len: usize,
    x: &[u8],
    (x_s, x_zp): (f32, u8),
    (y_s, y_zp): (f32, u8),
    y: &mut [u8],
    lo: usize,
    hi: usize,
) {
    for p in lo..hi {
        let plane = &x[p * len..(p + 1) * len];
        // u32 chunks of at most 2^24 values cannot overflow; the total goes in i64.
        let s: i64 = plane
            .chunks(1 << 24)
            .map(|c| i64::from(c.iter().map(|&v| u32::from(v)).sum::<u32>()))
            .sum();
        let centred = s - len as i64 * i64::from(x_zp);
        let v = if len > 0 {
            (centred as f32 * x_s) / len as f32
        } else {
            0.0
        };
        y[p] = quantize_one(v, y_s, y_zp);
    }
}

/// Nearest resize of planes `[lo, hi)` of `h x w` to `iy.len() x ix.len()`: output
/// `(oy, ox)` takes input `(iy[oy], ix[ox])` (indices from `resize::nearest_index`).
#[allow(clippy::too_many_arguments)]
pub fn resize_nearest_u8(
    h: usize,
    w: usize,
    iy: &[usize],
    ix: &[usize],
    x: &[u8],
    y: &mut [u8],
    lo: usize,
    hi: usize,
) {
    let (oh, ow) = (iy.len(), ix.len());
    for p in lo..hi {
        let xp = &x[p * h * w..(p + 1) * h * w];
        let yp = &mut y[p * oh * ow..(p + 1) * oh * ow];
        for (yr, &sy) in yp.chunks_exact_mut(ow).zip(iy) {
            let src = &xp[sy * w..(sy + 1) * w];
            for (d, &sx) in yr.iter_mut().zip(ix) {
                *d = src[sx];
            }
        }
    }
}

/// Bilinear resize of planes `[lo, hi)` (taps `(i0, i1, w1)` per output row / column
/// from `resize::linear_taps`) on the dequantised values, with onnxruntime's formula
/// `dy0 * (dx0 * x00 + dx1 * x01) + dy1 * (dx0 * x10 + dx1 * x11)`, quantised to
/// `(y_s, y_zp)`.
#[allow(clippy::too_many_arguments)]
pub fn resize_bilinear_u8(
    ty: &[(usize, usize, f32)],
    tx: &[(usize, usize, f32)],
    h: usize,
    w: usize,
    x: &[u8],
    (x_s, x_zp): (f32, u8),
    (y_s, y_zp): (f32, u8),
    y: &mut [u8],
    lo: usize,
    hi: usize,
) {
    let (oh, ow) = (ty.len(), tx.len());
    let dq = |v: u8| dequantize_one(v, x_s, x_zp);
    for p in lo..hi {
        let xp = &x[p * h * w..(p + 1) * h * w];
        let yp = &mut y[p * oh * ow..(p + 1) * oh * ow];
        for (yr, &(y0, y1, wy)) in yp.chunks_exact_mut(ow).zip(ty) {
            let (r0, r1) = (&xp[y0 * w..(y0 + 1) * w], &xp[y1 * w..(y1 + 1) * w]);
            let (dy1, dy0) = (wy, 1.0 - wy);
            for (d, &(x0, x1, wx)) in yr.iter_mut().zip(tx) {
                let (dx1, dx0) = (wx, 1.0 - wx);
                let v = dy0 * (dx0 * dq(r0[x0]) + dx1 * dq(r0[x1]))
                    + dy1 * (dx0 * dq(r1[x0]) + dx1 * dq(r1[x1]));
                *d = quantize_one(v, y_s, y_zp);
            }
        }
    }
}
