//! Pooling geometry and the max-pool plane body every kernel table builds.

/// Geometry of a 2-D pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolShape {
    /// Number of planes (`N * C`).
    pub planes: usize,
    /// Input height, width.
    pub h: usize,
    pub w: usize,
    /// Output height, width.
    pub oh: usize,
    pub ow: usize,
    /// Kernel.
    pub kh: usize,
    pub kw: usize,
    /// Strides.
    pub sh: usize,
    pub sw: usize,
    /// Dilations.
    pub dh: usize,
    pub dw: usize,
    /// Pads: top, left, bottom, right.
    pub pads: [usize; 4],
}

/// Output positions `[lo, hi)` whose input index `o*stride + off - pad` lies in `[0, len)`.
pub fn valid_range(
    out_len: usize,
    stride: usize,
    pad: usize,
    off: usize,
    len: usize,
) -> (usize, usize) {
    // o*stride + off >= pad  <=>  o >= ceil((pad - off) / stride)
    let lo = if off >= pad {
        0
    } else {
        (pad - off).div_ceil(stride)
    };
    // o*stride + off - pad <= len - 1  <=>  o <= (len - 1 + pad - off) / stride
    let hi = if len + pad > off {
        ((len - 1 + pad - off) / stride + 1).min(out_len)
    } else {
        0
    };
    (lo.min(out_len), hi.max(lo.min(out_len)))
}

/// Max pool of one plane, shared body of the AVX2 and portable builds: each output row
/// takes the running maximum one kernel tap at a time over its valid column range.
#[inline(always)]
pub fn max_pool_plane(s: &PoolShape, xp: &[f32], yp: &mut [f32]) {
    for oy in 0..s.oh {
        let row = &mut yp[oy * s.ow..(oy + 1) * s.ow];
        row.fill(f32::NEG_INFINITY);
        for ky in 0..s.kh {
            let iy = (oy * s.sh + ky * s.dh) as isize - s.pads[0] as isize;
            if iy < 0 || iy >= s.h as isize {
                continue;
            }
            let src = &xp[iy as usize * s.w..(iy as usize + 1) * s.w];
            for kx in 0..s.kw {
                let (lo, hi) = valid_range(s.ow, s.sw, s.pads[1], kx * s.dw, s.w);
                if lo >= hi {
                    continue;
                }
                let ix0 = lo * s.sw + kx * s.dw - s.pads[1];
                for (d, v) in row[lo..hi].iter_mut().zip(src[ix0..].iter().step_by(s.sw)) {
                    *d = if *v > *d { *v } else { *d };
                }
            }
        }
    }
}
