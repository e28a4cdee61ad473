//! Pooling over NCHW planes (1-D pools use height 1): Max / Average with pads, strides,
//! dilations, `ceil_mode` (carried by the output size) and `count_include_pad`, plus
//! the global variants. Tiles split the `N*C` planes.

pub use super::body::pool::PoolShape;
use super::isa::Isa;

/// Max pool of planes `[lo, hi)`. Windows entirely in padding yield `-inf`.
pub fn max_pool(isa: Isa, s: &PoolShape, x: &[f32], y: &mut [f32], lo: usize, hi: usize) {
    let t = isa.table();
    for p in lo..hi {
        let xp = &x[p * s.h * s.w..(p + 1) * s.h * s.w];
        let yp = &mut y[p * s.oh * s.ow..(p + 1) * s.oh * s.ow];
        (t.max_pool_plane)(s, xp, yp);
    }
}
/// Max pool over channels-last images through `isa`'s table (the body is
/// `body::pool::max_pool_nhwc`): output rows `r0..r1` of `N * OH` (`s.planes` = N) of
/// `c` channels into `y` (those rows).
pub fn max_pool_nhwc(
    isa: Isa,
    s: &PoolShape,
    c: usize,
    x: &[f32],
    y: &mut [f32],
    rows: (usize, usize),
) {
    (isa.table().max_pool_nhwc)(s, c, x, y, rows)
}

/// Average pool of planes `[lo, hi)` through the best kernel table (see [`avg_pool_on`]).
pub fn avg_pool(
    s: &PoolShape,
    count_include_pad: bool,
    x: &[f32],
    y: &mut [f32],
    lo: usize,
    hi: usize,
) {
    avg_pool_on(super::isa::best_isa(), s, count_include_pad, x, y, lo, hi)
}

/// Average pool of planes `[lo, hi)` through `isa`'s table. With `count_include_pad`
/// the divisor counts the declared padding (not the extra cells `ceil_mode` adds past
/// it), as onnxruntime does. Each output sums its window row by row, left to right.
pub fn avg_pool_on(
    isa: Isa,
    s: &PoolShape,
    count_include_pad: bool,
    x: &[f32],
    y: &mut [f32],
    lo: usize,
    hi: usize,
) {
    let t = isa.table();
    for p in lo..hi {
        let xp = &x[p * s.h * s.w..(p + 1) * s.h * s.w];
        let yp = &mut y[p * s.oh * s.ow..(p + 1) * s.oh * s.ow];
        (t.avg_pool_plane)(s, count_include_pad, xp, yp);
    }
}

/// Global average (`avg`) or max pool: one value per plane of `len` elements.
pub fn global_pool(avg: bool, len: usize, x: &[f32], y: &mut [f32], lo: usize, hi: usize) {
    for p in lo..hi {
        let xp = &x[p * len..(p + 1) * len];
        y[p] = if avg {
            xp.iter().sum::<f32>() / len as f32
        } else {
            xp.iter().copied().fold(f32::NEG_INFINITY, f32::max)
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::isa::twin_test;

    twin_test!(pool_tables_match_portable, 0.0, |t| {
        let mut out = Vec::new();
        for (hw, k, st, d, p) in [
            (1, 1, 1, 1, 0),
            (7, 3, 1, 1, 1),
            (9, 3, 2, 1, 1),
            (8, 5, 2, 2, 4),
            (17, 3, 1, 2, 0),
            (13, 13, 1, 1, 6),
            (21, 9, 2, 1, 4),
        ] {
            let oh = (hw + 2 * p - d * (k - 1) - 1) / st + 1;
            let s = PoolShape {
                planes: 1,
                h: hw,
                w: hw,
                oh,
                ow: oh,
                kh: k,
                kw: k,
                sh: st,
                sw: st,
                dh: d,
                dw: d,
                pads: [p, p, p, p],
            };
            let x = crate::kernels::testutil::rand_vec(hw * hw, 6);
            let mut y = vec![0.0; oh * oh];
            (t.max_pool_plane)(&s, &x, &mut y);
            out.extend_from_slice(&y);
            // Channels-last: the same window over 2 images of 37 channels (two blocks
            // of 16 and a tail), rows cut in two.
            let c = 37;
            let sn = PoolShape { planes: 2, ..s };
            let xn = crate::kernels::testutil::rand_vec(2 * hw * hw * c, 7);
            let (rows, row) = (2 * oh, oh * c);
            let mut yn = vec![0.0; rows * row];
            let (a, b) = yn.split_at_mut(rows / 2 * row);
            (t.max_pool_nhwc)(&sn, c, &xn, a, (0, rows / 2));
            (t.max_pool_nhwc)(&sn, c, &xn, b, (rows / 2, rows));
            out.extend_from_slice(&yn);
            if d == 1 {
                for inc in [false, true] {
                    (t.avg_pool_plane)(&s, inc, &x, &mut y);
                    out.extend_from_slice(&y);
                }
            }
        }
        out
    });
    use crate::kernels::testutil::{assert_close, rand_vec};

    /// Max (bit pattern) and average of one plane by the definition: windows visited
    /// row by row, left to right, sums from 0 (the order the kernels keep).
    fn naive(s: &PoolShape, inc: bool, xp: &[f32]) -> (Vec<f32>, Vec<f32>) {
        let (mut mx, mut av) = (vec![], vec![]);
        let (h, w) = (s.h as isize, s.w as isize);
        for oy in 0..s.oh as isize {
            for ox in 0..s.ow as isize {
                let (y0, x0) = (
                    oy * s.sh as isize - s.pads[0] as isize,
                    ox * s.sw as isize - s.pads[1] as isize,
                );
                let (mut m, mut sum, mut cnt) = (f32::NEG_INFINITY, 0.0f32, 0isize);
                for ky in 0..s.kh as isize {
                    for kx in 0..s.kw as isize {
                        let (iy, ix) = (y0 + ky * s.dh as isize, x0 + kx * s.dw as isize);
                        if (0..h).contains(&iy) && (0..w).contains(&ix) {
                            let v = xp[(iy * w + ix) as usize];
                            m = if v > m { v } else { m };
                            sum += v;
                            cnt += 1;
                        }
                    }
                }
                let n = if inc {
                    let y1 = (y0 + s.kh as isize).min(h + s.pads[2] as isize);
                    let x1 = (x0 + s.kw as isize).min(w + s.pads[3] as isize);
                    (y1 - y0) * (x1 - x0)
                } else {
                    cnt
                };
                mx.push(m);
                av.push(if n > 0 { sum / n as f32 } else { 0.0 });
            }
        }
        (mx, av)
    }

    /// Pool geometries over edge cases: strides 1/2/3, even and odd widths, pads on one
    /// side only, dilation (max only), ceil mode (one more output than floor), windows
    /// wholly in padding, rows wider than the stride-2 split buffer, kernels and strides
    /// that differ between rows and columns.
    fn edge_shapes() -> Vec<(PoolShape, bool)> {
        let mut v = vec![];
        for (h, w, k, st, d, pads, ceil) in [
            (1, 1, 1, 1, 1, [0, 0, 0, 0], false),
            (7, 7, 3, 1, 1, [1, 1, 1, 1], false),
            (112, 112, 3, 2, 1, [1, 1, 1, 1], false),
            (9, 13, 3, 2, 1, [1, 1, 1, 1], true),
            (8, 11, 2, 2, 1, [0, 0, 0, 0], true),
            (10, 10, 5, 1, 1, [2, 2, 2, 2], false),
            (8, 8, 5, 2, 2, [4, 4, 4, 4], false),
            (17, 17, 3, 1, 2, [0, 0, 0, 0], false),
            (6, 15, 3, 3, 1, [0, 1, 2, 1], true),
            (5, 9, 3, 2, 1, [2, 0, 0, 2], false),
            (3, 4, 3, 2, 1, [2, 2, 2, 2], true),
            (2, 2100, 3, 2, 1, [1, 1, 1, 1], false),
            (13, 13, 13, 1, 1, [6, 6, 6, 6], false),
            (20, 37, 9, 1, 1, [4, 4, 4, 4], false),
            (11, 11, 7, 3, 1, [3, 3, 3, 3], true),
        ] {
            let span = |n: usize, p0: usize, p1: usize| {
                let e = n + p0 + p1 - d * (k - 1) - 1;
                if ceil {
                    e.div_ceil(st) + 1
                } else {
                    e / st + 1
                }
            };
            let s = PoolShape {
                planes: 2,
                h,
                w,
                oh: span(h, pads[0], pads[2]),
                ow: span(w, pads[1], pads[3]),
                kh: k,
                kw: k,
                sh: st,
                sw: st,
                dh: d,
                dw: d,
                pads,
            };
            v.push((s, d == 1));
        }
        // Kernels and strides that differ between rows and columns: a CRNN's 2x1 pool of
        // stride (2, 1), a row stride of 3 with a column stride of 2, a 1x3 of (1, 2).
        for (h, w, (kh, kw), (sh, sw), pads, oh, ow) in [
            (8, 80, (2, 1), (2, 1), [0, 0, 0, 0], 4, 80),
            (10, 11, (3, 2), (3, 2), [1, 0, 0, 1], 4, 6),
            (7, 12, (1, 3), (1, 2), [0, 1, 0, 1], 7, 6),
        ] {
            let s = PoolShape {
                planes: 2,
                h,
                w,
                oh,
                ow,
                kh,
                kw,
                sh,
                sw,
                dh: 1,
                dw: 1,
                pads,
            };
            v.push((s, true));
        }
        v
    }

    #[test]
    fn pools_match_definition_bit_for_bit() {
        for (s, avg_ok) in edge_shapes() {
            let mut x = rand_vec(s.planes * s.h * s.w, 21);
            // NaNs in the first row and mid-plane: a window's later rows as well as its
            // first may hold one (a max that lets NaN replace the accumulator differs).
            let nan_at = 3 % x.len();
            x[nan_at] = f32::NAN;
            let nan_mid = (s.h / 2 * s.w + s.w / 2) % x.len();
            x[nan_mid] = f32::NAN;
            let n_out = s.planes * s.oh * s.ow;
            for isa in crate::kernels::isa::available_isas() {
                let mut ymax = vec![0.0; n_out];
                max_pool(isa, &s, &x, &mut ymax, 0, s.planes);
                for inc in [false, true] {
                    let mut yavg = vec![0.0; n_out];
                    if avg_ok {
                        avg_pool_on(isa, &s, inc, &x, &mut yavg, 0, s.planes);
                    }
                    for p in 0..s.planes {
                        let (wm, wa) = naive(&s, inc, &x[p * s.h * s.w..][..s.h * s.w]);
                        let at = p * s.oh * s.ow;
                        for (i, (g, w)) in ymax[at..].iter().zip(&wm).enumerate() {
                            assert_eq!(g.to_bits(), w.to_bits(), "{s:?} {isa:?} max {p}/{i}");
                        }
                        if avg_ok {
                            for (i, (g, w)) in yavg[at..].iter().zip(&wa).enumerate() {
                                let same = g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan());
                                assert!(same, "{s:?} {isa:?} avg inc={inc} {p}/{i}: {g} vs {w}");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn pools_match_naive() {
        // 5x5 input, kernel 3, stride 2, pads 1 each side, ceil mode gives 3x3 output.
        let s = PoolShape {
            planes: 2,
            h: 5,
            w: 5,
            oh: 3,
            ow: 3,
            kh: 3,
            kw: 3,
            sh: 2,
            sw: 2,
            dh: 1,
            dw: 1,
            pads: [1, 1, 1, 1],
        };
        let x = rand_vec(50, 9);
        let mut ymax = vec![0.0; 18];
        let mut yavg = vec![0.0; 18];
        let mut yinc = vec![0.0; 18];
        max_pool(crate::kernels::isa::best_isa(), &s, &x, &mut ymax, 0, 1);
        max_pool(crate::kernels::isa::Isa::Portable, &s, &x, &mut ymax, 1, 2);
        avg_pool(&s, false, &x, &mut yavg, 0, 2);
        avg_pool(&s, true, &x, &mut yinc, 0, 2);
        let (mut wmax, mut wavg, mut winc) = (vec![], vec![], vec![]);
        for p in 0..2 {
            for oy in 0..3 {
                for ox in 0..3 {
                    let (mut m, mut sum, mut cnt) = (f32::NEG_INFINITY, 0.0, 0);
                    for ky in 0..3 {
                        for kx in 0..3 {
                            let (iy, ix) = (oy * 2 + ky, ox * 2 + kx);
                            if (1..6).contains(&iy) && (1..6).contains(&ix) {
                                let v = x[p * 25 + (iy - 1) * 5 + ix - 1];
                                m = m.max(v);
                                sum += v;
                                cnt += 1;
                            }
                        }
                    }
                    wmax.push(m);
                    wavg.push(sum / cnt as f32);
                    winc.push(sum / 9.0);
                }
            }
        }
        assert_close(&ymax, &wmax, 0.0);
        assert_close(&yavg, &wavg, 1e-6);
        assert_close(&yinc, &winc, 1e-6);
        let mut g = vec![0.0; 2];
        global_pool(true, 25, &x, &mut g, 0, 2);
        assert_close(
            &g,
            &[
                x[..25].iter().sum::<f32>() / 25.0,
                x[25..].iter().sum::<f32>() / 25.0,
            ],
            1e-6,
        );
    }
}
