//! Depthwise conv over channels-last images (table entry `depthwise_nhwc`): input
//! `[N][H][W][C]`, taps `[KH*KW][C]` (tap-major, so one tap of consecutive channels is
//! one vector), output `[N][OH][OW][C]`. Channels are the vector lanes: every tap of
//! every output pixel is one multiply-add per lane whatever the plane's width or stride,
//! and no layout copy is needed. Each output is its channel's bias plus its in-bounds
//! taps in `(ky, kx)` order, then the register activation ([`Act`]).

use super::conv::ConvShape;
pub use super::dw_block::Act;

/// The taps of a depthwise conv's weights `w` (`[C][KH*KW]`) tap-major: `[KH*KW][C]`.
pub fn pack_taps(w: &[f32], c: usize, khw: usize) -> Vec<f32> {
    let mut t = vec![0.0; c * khw];
    for ch in 0..c {
        for k in 0..khw {
            t[k * c + ch] = w[ch * khw + k];
        }
    }
    t
}

/// Input rows `ky` of output row `oy` reaches inside the image: `[ky0, ky1)`.
#[inline]
pub fn row_taps(s: &ConvShape, oy: usize) -> (usize, usize) {
    let base = (oy * s.sh) as isize - s.ph as isize;
    let mut ky0 = 0;
    while ky0 < s.kh && base + ((ky0 * s.dh) as isize) < 0 {
        ky0 += 1;
    }
    let mut ky1 = s.kh;
    while ky1 > ky0 && base + (((ky1 - 1) * s.dh) as isize) >= s.h as isize {
        ky1 -= 1;
    }
    (ky0, ky1)
}

/// Output columns whose every tap lies inside the row: `[lo, hi)` (`lo <= hi <= ow`).
#[inline]
pub fn inner_columns(s: &ConvShape) -> (usize, usize) {
    let lo = s.pw.div_ceil(s.sw).min(s.ow);
    // ox * sw - pw + (kw - 1) * dw < w  <=>  ox * sw < w + pw - (kw - 1) * dw
    let reach = (s.kw - 1) * s.dw;
    let hi = if s.w + s.pw > reach {
        (s.w + s.pw - reach).div_ceil(s.sw).min(s.ow)
    } else {
        0
    };
    (lo, hi.max(lo))
}

/// Checks the slices of a `depthwise_nhwc` call (rows `r0..r1` of the `N * OH` output
/// rows, `y` holding those rows); panics on a mismatch, so that kernels may index
/// without checks afterwards.
pub fn assert_fits(
    s: &ConvShape,
    taps: &[f32],
    bias: &[f32],
    x: &[f32],
    y: &[f32],
    (r0, r1): (usize, usize),
) {
    let c = s.c_in;
    assert!(
        s.c_out == c && s.group == c && s.kh > 0 && s.kw > 0 && s.sh > 0 && s.sw > 0,
        "depthwise_nhwc: not a depthwise shape"
    );
    assert!(s.dh > 0 && s.dw > 0, "depthwise_nhwc: zero dilation");
    assert!(taps.len() >= s.kh * s.kw * c && bias.len() >= c);
    assert!(
        r0 <= r1 && r1 <= s.n * s.oh,
        "depthwise_nhwc: rows past the output"
    );
    assert!(x.len() >= s.n * s.h * s.w * c && y.len() >= (r1 - r0) * s.ow * c);
}

/// Channel `ch` of output pixel `(oy, ox)` of image `xb`: `init` plus the in-bounds
/// taps in `(ky, kx)` order, each a product then a sum (the portable arithmetic), or one
/// `mul_add` with `FUSED` (one rounding, as an FMA lane).
#[inline(always)]
fn taps_sum<const FUSED: bool>(
    s: &ConvShape,
    taps: &[f32],
    xb: &[f32],
    (oy, ox): (usize, usize),
    ch: usize,
    init: f32,
) -> f32 {
    let c = s.c_in;
    let (ky0, ky1) = row_taps(s, oy);
    let bx = (ox * s.sw) as isize - s.pw as isize;
    let mut acc = init;
    for ky in ky0..ky1 {
        let iy = oy * s.sh + ky * s.dh - s.ph;
        for kx in 0..s.kw {
            let ix = bx + (kx * s.dw) as isize;
            if ix < 0 || ix >= s.w as isize {
                continue;
            }
            let (w, v) = (
                taps[(ky * s.kw + kx) * c + ch],
                xb[(iy * s.w + ix as usize) * c + ch],
            );
            acc = if FUSED {
                w.mul_add(v, acc)
            } else {
                acc + w * v
            };
        }
    }
    acc
}

/// Portable `depthwise_nhwc`: output rows `r0..r1` (of `N * OH`) of the conv `s` into
/// `y` (those rows), with per-channel `bias` (`C` floats) and the activation `act`.
#[allow(clippy::too_many_arguments)]
pub fn depthwise_nhwc(
    s: &ConvShape,
    taps: &[f32],
    bias: &[f32],
    act: Act,
    x: &[f32],
    y: &mut [f32],
    r0: usize,
    r1: usize,
) {
    assert_fits(s, taps, bias, x, y, (r0, r1));
    let c = s.c_in;
    for r in r0..r1 {
        let (b, oy) = (r / s.oh, r % s.oh);
        let xb = &x[b * s.h * s.w * c..(b + 1) * s.h * s.w * c];
        for ox in 0..s.ow {
            let at = ((r - r0) * s.ow + ox) * c;
            for ch in 0..c {
                let v = taps_sum::<false>(s, taps, xb, (oy, ox), ch, bias[ch]);
                y[at + ch] = act.apply(v);
            }
        }
    }
}

/// The pixels a SIMD `depthwise_nhwc` leaves to scalar code, the portable way except for
/// fused multiply-adds: channels `c0..c1` of output pixel `(r, ox)` (row `r` of `N *
/// OH`, `y` holding rows `r0..`). For the channels past the last full vector, bit for bit what the vector lanes
/// compute (`mul_add` is one rounding, as an FMA lane).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub fn pixel_fused(
    s: &ConvShape,
    taps: &[f32],
    bias: &[f32],
    act: Act,
    x: &[f32],
    (y, r0): (&mut [f32], usize),
    (r, ox): (usize, usize),
    (c0, c1): (usize, usize),
) {
    let c = s.c_in;
    let (b, oy) = (r / s.oh, r % s.oh);
    let xb = &x[b * s.h * s.w * c..(b + 1) * s.h * s.w * c];
    let at = ((r - r0) * s.ow + ox) * c;
    for ch in c0..c1 {
        let v = taps_sum::<true>(s, taps, xb, (oy, ox), ch, bias[ch]);
        y[at + ch] = act.apply(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(c: usize, h: usize, w: usize, k: usize, s: usize, p: usize) -> ConvShape {
        let oh = (h + 2 * p - k) / s + 1;
        let ow = (w + 2 * p - k) / s + 1;
        ConvShape {
            n: 1,
            c_in: c,
            h,
            w,
            c_out: c,
            oh,
            ow,
            kh: k,
            kw: k,
            sh: s,
            sw: s,
            dh: 1,
            dw: 1,
            ph: p,
            pw: p,
            group: c,
        }
    }

    #[test]
    fn inner_columns_keep_every_tap_inside() {
        for (w, k, s, p) in [
            (7, 3, 1, 1),
            (8, 3, 2, 1),
            (5, 5, 1, 2),
            (3, 5, 1, 2),
            (1, 3, 2, 1),
        ] {
            let sh = shape(1, 4, w, k, s, p);
            let (lo, hi) = inner_columns(&sh);
            for ox in 0..sh.ow {
                let first = (ox * s) as isize - p as isize;
                let inside = first >= 0 && first + (k as isize - 1) < w as isize;
                assert_eq!(inside, (lo..hi).contains(&ox), "w {w} k {k} s {s} ox {ox}");
            }
        }
    }

    #[test]
    fn matches_the_planar_definition() {
        // NHWC depthwise against a direct NCHW evaluation of the same conv.
        let (c, h, w) = (5, 6, 7);
        for (k, st, p) in [(3, 1, 1), (3, 2, 1), (5, 1, 2), (1, 1, 0)] {
            let s = shape(c, h, w, k, st, p);
            let x: Vec<f32> = (0..c * h * w)
                .map(|i| ((i * 7) % 13) as f32 - 6.0)
                .collect();
            let wt: Vec<f32> = (0..c * k * k)
                .map(|i| ((i * 5) % 11) as f32 - 5.0)
                .collect();
            let bias: Vec<f32> = (0..c).map(|i| i as f32).collect();
            let taps = pack_taps(&wt, c, k * k);
            let mut y = vec![0.0; s.oh * s.ow * c];
            depthwise_nhwc(&s, &taps, &bias, Act::None, &x, &mut y, 0, s.oh);
            for ch in 0..c {
                for oy in 0..s.oh {
                    for ox in 0..s.ow {
                        let mut want = bias[ch];
                        for ky in 0..k {
                            for kx in 0..k {
                                let iy = (oy * st + ky) as isize - p as isize;
                                let ix = (ox * st + kx) as isize - p as isize;
                                if iy >= 0 && ix >= 0 && (iy as usize) < h && (ix as usize) < w {
                                    let v = x[((iy as usize) * w + ix as usize) * c + ch];
                                    want += wt[ch * k * k + ky * k + kx] * v;
                                }
                            }
                        }
                        assert_eq!(y[(oy * s.ow + ox) * c + ch], want, "k {k} s {st}");
                    }
                }
            }
        }
    }
}
