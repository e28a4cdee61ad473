//! Resize: source-coordinate transforms (every ONNX `coordinate_transformation_mode`
//! except `tf_crop_and_resize`), nearest rounding modes, and the bilinear kernel over
//! the two innermost dims. Nearest resize runs as an `nd::IndexMapCopy` built from
//! [`nearest_index`].

use crate::ir::{CoordMode, NearestMode};

/// Source coordinate of output coordinate `x` along a dim of `in_len` → `out_len`
/// with scale `scale`.
pub fn source_coord(mode: CoordMode, x: usize, scale: f32, in_len: usize, out_len: usize) -> f32 {
    let x = x as f32;
    match mode {
        CoordMode::HalfPixel | CoordMode::TfCropAndResize => (x + 0.5) / scale - 0.5,
        CoordMode::PytorchHalfPixel => {
            if out_len > 1 {
                (x + 0.5) / scale - 0.5
            } else {
                0.0
            }
        }
        CoordMode::AlignCorners => {
            if out_len == 1 {
                0.0
            } else {
                x * (in_len as f32 - 1.0) / (out_len as f32 - 1.0)
            }
        }
        CoordMode::Asymmetric => x / scale,
        CoordMode::HalfPixelSymmetric => {
            let adj = out_len as f32 / (scale * in_len as f32);
            let center = in_len as f32 / 2.0;
            center * (1.0 - adj) + (x + 0.5) / scale - 0.5
        }
    }
}

/// Nearest source index for source coordinate `c`, clamped to the input.
pub fn nearest_index(mode: NearestMode, c: f32, in_len: usize) -> usize {
    let i = match mode {
        NearestMode::RoundPreferFloor => {
            if c.fract().abs() == 0.5 || (c - c.floor()) == 0.5 {
                c.floor()
            } else {
                c.round()
            }
        }
        NearestMode::RoundPreferCeil => {
            if (c - c.floor()) == 0.5 {
                c.ceil()
            } else {
                c.round()
            }
        }
        NearestMode::Floor => c.floor(),
        NearestMode::Ceil => c.ceil(),
    };
    (i.max(0.0) as usize).min(in_len.saturating_sub(1))
}

/// Interpolation taps of one output coordinate: `(i0, i1, w1)` with `v = (1-w1)*x[i0] + w1*x[i1]`.
pub fn linear_taps(
    mode: CoordMode,
    scale: f32,
    in_len: usize,
    out_len: usize,
) -> Vec<(usize, usize, f32)> {
    (0..out_len)
        .map(|o| {
            let c = source_coord(mode, o, scale, in_len, out_len).clamp(0.0, in_len as f32 - 1.0);
            let i0 = c.floor() as usize;
            let i1 = (i0 + 1).min(in_len - 1);
            (i0, i1, c - i0 as f32)
        })
        .collect()
}

/// Bilinear resize of `planes` planes `h x w` → `oh x ow` (taps from [`linear_taps`]),
/// planes `[lo, hi)`.
#[allow(clippy::too_many_arguments)]
pub fn bilinear(
    ty: &[(usize, usize, f32)],
    tx: &[(usize, usize, f32)],
    h: usize,
    w: usize,
    x: &[f32],
    y: &mut [f32],
    lo: usize,
    hi: usize,
) {
    let (oh, ow) = (ty.len(), tx.len());
    for p in lo..hi {
        let xp = &x[p * h * w..(p + 1) * h * w];
        let yp = &mut y[p * oh * ow..(p + 1) * oh * ow];
        for (oy, &(y0, y1, wy)) in ty.iter().enumerate() {
            let (r0, r1) = (&xp[y0 * w..(y0 + 1) * w], &xp[y1 * w..(y1 + 1) * w]);
            for (ox, &(x0, x1, wx)) in tx.iter().enumerate() {
                let top = r0[x0] + (r0[x1] - r0[x0]) * wx;
                let bot = r1[x0] + (r1[x1] - r1[x0]) * wx;
                yp[oy * ow + ox] = top + (bot - top) * wy;
            }
        }
    }
}

/// Four cubic taps of one output coordinate: source indices (edge-clamped) and weights.
pub type CubicTaps = ([usize; 4], [f32; 4]);

/// Cubic convolution taps (ONNX `cubic` mode with coefficient `a`): indices
/// `floor(c)-1 ..= floor(c)+2` clamped to the input; with `exclude_outside` the weights of
/// taps outside the input are zeroed and the rest renormalised.
pub fn cubic_taps(
    mode: CoordMode,
    scale: f32,
    in_len: usize,
    out_len: usize,
    a: f32,
    exclude_outside: bool,
) -> Vec<CubicTaps> {
    (0..out_len)
        .map(|o| {
            let c = source_coord(mode, o, scale, in_len, out_len);
            let base = c.floor();
            let t = c - base;
            let ws = [
                ((a * (t + 1.0) - 5.0 * a) * (t + 1.0) + 8.0 * a) * (t + 1.0) - 4.0 * a,
                ((a + 2.0) * t - (a + 3.0)) * t * t + 1.0,
                ((a + 2.0) * (1.0 - t) - (a + 3.0)) * (1.0 - t) * (1.0 - t) + 1.0,
                ((a * (2.0 - t) - 5.0 * a) * (2.0 - t) + 8.0 * a) * (2.0 - t) - 4.0 * a,
            ];
            let mut idx = [0usize; 4];
            let mut w = [0f32; 4];
            let mut sum = 0.0;
            for k in 0..4 {
                let i = base as i64 - 1 + k as i64;
                let inside = i >= 0 && i < in_len as i64;
                idx[k] = i.clamp(0, in_len as i64 - 1) as usize;
                w[k] = if exclude_outside && !inside {
                    0.0
                } else {
                    ws[k]
                };
                sum += w[k];
            }
            if exclude_outside && sum != 0.0 {
                for v in &mut w {
                    *v /= sum;
                }
            }
            (idx, w)
        })
        .collect()
}

/// Bicubic resize of planes `[lo, hi)` of `h x w` → `ty.len() x tx.len()`.
#[allow(clippy::too_many_arguments)]
pub fn bicubic(
    ty: &[CubicTaps],
    tx: &[CubicTaps],
    h: usize,
    w: usize,
    x: &[f32],
    y: &mut [f32],
    lo: usize,
    hi: usize,
) {
    let (oh, ow) = (ty.len(), tx.len());
    for p in lo..hi {
        let xp = &x[p * h * w..(p + 1) * h * w];
        let yp = &mut y[p * oh * ow..(p + 1) * oh * ow];
        for (oy, (yi, yw)) in ty.iter().enumerate() {
            for (ox, (xi, xw)) in tx.iter().enumerate() {
                let mut acc = 0.0;
                for a in 0..4 {
                    let row = &xp[yi[a] * w..(yi[a] + 1) * w];
                    let r = row[xi[0]] * xw[0]
                        + row[xi[1]] * xw[1]
                        + row[xi[2]] * xw[2]
                        + row[xi[3]] * xw[3];
                    acc += r * yw[a];
                }
                yp[oy * ow + ox] = acc;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::body::resize as body;

    #[test]
    fn coordinate_modes() {
        assert_eq!(source_coord(CoordMode::Asymmetric, 3, 2.0, 4, 8), 1.5);
        assert_eq!(source_coord(CoordMode::HalfPixel, 0, 2.0, 4, 8), -0.25);
        assert_eq!(source_coord(CoordMode::AlignCorners, 7, 2.0, 4, 8), 3.0);
        assert_eq!(
            source_coord(CoordMode::PytorchHalfPixel, 0, 0.25, 4, 1),
            0.0
        );
        assert_eq!(nearest_index(NearestMode::RoundPreferFloor, 1.5, 4), 1);
        assert_eq!(nearest_index(NearestMode::RoundPreferCeil, 1.5, 4), 2);
        assert_eq!(nearest_index(NearestMode::Ceil, 3.2, 4), 3);
        assert_eq!(nearest_index(NearestMode::Floor, -0.2, 4), 0);
    }

    #[test]
    fn cubic_taps_interpolate_exactly_at_samples_and_sum_to_one() {
        // At integer source coordinates the cubic kernel reproduces the sample.
        let t = cubic_taps(CoordMode::Asymmetric, 1.0, 6, 6, -0.75, false);
        for (o, (idx, w)) in t.iter().enumerate() {
            assert_eq!(idx[1], o);
            assert!((w[1] - 1.0).abs() < 1e-6 && w[0].abs() < 1e-6 && w[2].abs() < 1e-6);
        }
        for (_, w) in cubic_taps(CoordMode::HalfPixel, 2.0, 5, 10, -0.5, true) {
            assert!((w.iter().sum::<f32>() - 1.0).abs() < 1e-5);
        }
        let x: Vec<f32> = (0..8).map(|v| v as f32).collect();
        let tx = cubic_taps(CoordMode::AlignCorners, 1.0, 8, 15, -0.75, false);
        let ty = cubic_taps(CoordMode::AlignCorners, 1.0, 1, 1, -0.75, false);
        let mut y = vec![0.0; 15];
        bicubic(&ty, &tx, 1, 8, &x, &mut y, 0, 1);
        // Interior outputs (all four taps inside the input) reproduce the ramp exactly.
        for (i, v) in y.iter().enumerate().take(12).skip(2) {
            assert!((v - i as f32 * 0.5).abs() < 1e-4, "{i}: {v}");
        }
    }

    #[test]
    fn up2x_pattern_detected_for_half_pixel_only() {
        for w in [1, 2, 3, 8, 17] {
            for mode in [CoordMode::HalfPixel, CoordMode::PytorchHalfPixel] {
                assert!(
                    body::is_up2x(&linear_taps(mode, 2.0, w, 2 * w)),
                    "{mode:?} {w}"
                );
            }
            if w > 1 {
                for mode in [CoordMode::Asymmetric, CoordMode::AlignCorners] {
                    assert!(
                        !body::is_up2x(&linear_taps(mode, 2.0, w, 2 * w)),
                        "{mode:?}"
                    );
                }
                assert!(!body::is_up2x(&linear_taps(
                    CoordMode::HalfPixel,
                    3.0,
                    w,
                    3 * w
                )));
            }
        }
    }

    /// Every table's `bilinear_up2x` gives the general path's bits (odd sizes, one-row
    /// and one-column planes, any height scale, a cut of planes, an infinity).
    #[test]
    fn up2x_matches_general_path_bit_for_bit() {
        for t in crate::kernels::isa::tables() {
            for (h, w, oh) in [
                (1, 1, 2),
                (1, 3, 2),
                (3, 1, 6),
                (2, 2, 4),
                (5, 7, 10),
                (4, 17, 12),
                (6, 33, 3),
            ] {
                let planes = 3;
                let mut x = crate::kernels::testutil::rand_vec(planes * h * w, 7);
                x[planes * h * w / 2] = f32::INFINITY;
                let ty = linear_taps(CoordMode::HalfPixel, oh as f32 / h as f32, h, oh);
                let tx = linear_taps(CoordMode::HalfPixel, 2.0, w, 2 * w);
                assert!(body::is_up2x(&tx));
                let mut want = vec![0.0; planes * oh * 2 * w];
                bilinear(&ty, &tx, h, w, &x, &mut want, 1, planes);
                let mut got = vec![0.0; planes * oh * 2 * w];
                let mut scratch = vec![f32::NAN; 4 * w];
                (t.bilinear_up2x)(&ty, &tx, h, w, &x, &mut got, (1, planes), &mut scratch);
                for (i, (g, e)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        g.to_bits() == e.to_bits() || (g.is_nan() && e.is_nan()),
                        "table {}, {h}x{w} -> {oh}: element {i}: {g} vs {e}",
                        t.name
                    );
                }
            }
        }
    }

    #[test]
    fn bilinear_matches_naive_align_corners() {
        let x: Vec<f32> = (0..6).map(|v| v as f32).collect(); // 2x3
        let ty = linear_taps(CoordMode::AlignCorners, 2.0, 2, 3);
        let tx = linear_taps(CoordMode::AlignCorners, 5.0 / 3.0, 3, 5);
        let mut y = vec![0.0; 15];
        bilinear(&ty, &tx, 2, 3, &x, &mut y, 0, 1);
        // Row 1 (middle) averages rows 0 and 1: value = 1.5 + 0.5*col_coord.
        assert_eq!(&y[5..10], &[1.5, 2.0, 2.5, 3.0, 3.5]);
        assert_eq!(&y[0..5], &[0.0, 0.5, 1.0, 1.5, 2.0]);
    }
}
