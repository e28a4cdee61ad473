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
/// Average pool of planes `[lo, hi)`. With `count_include_pad` the divisor counts the
/// declared padding (not the extra cells `ceil_mode` adds past it), as onnxruntime does.
pub fn avg_pool(
    s: &PoolShape,
    count_include_pad: bool,
    x: &[f32],
    y: &mut [f32],
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
                        sum += row[ix as usize];
                    }
                }
                let n = if count_include_pad {
                    (y1 - y0) * (x1 - x0)
                } else {
                    (cy1 - cy0).max(0) * (cx1 - cx0).max(0)
                };
                yp[oy * s.ow + ox] = if n > 0 { sum / n as f32 } else { 0.0 };
            }
        }
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
        }
        out
    });
    use crate::kernels::testutil::{assert_close, rand_vec};

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
