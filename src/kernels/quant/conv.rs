//! Int8 convolution on NCHW u8 activations with s8 weights: any stride, padding,
//! dilation and group count.
//!
//! * Dense / grouped conv: per group, `Y_g[Cout_g, OH*OW] = W_g · im2col(X_g)` by the int8
//!   GEMM (`super::gemm`): the weights are the A side (packed once by
//!   [`QConvWeights::pack`]), the im2col matrix is generated [`QNC`] columns at a time
//!   straight into B panels in scratch (a 1x1, stride-1, unpadded conv reads the input
//!   planes directly). Padding reads the input zero point, so that the zero point
//!   correction `- x_zp * sum_k w` (folded into the bias, [`QConvWeights::fold_bias`]) is
//!   exact at the borders too.
//! * Depthwise conv (one input and one output channel per group): direct, each channel
//!   plane padded once with the zero point, each tap accumulated over output rows
//!   (`QuantTable::dw_plane`).
//!
//! A call computes output channels `chans` (any range) of every image.

use super::gemm::{fold, gemm_block, pack_a, packed_a_len, pairs, scatter_b_pair, scatter_b_row};
use super::gemm::{QMC, QNC};
use super::table::{QMR, QNR};
use super::{QScratch, Requant};
use crate::kernels::body::conv::ConvShape;
use crate::kernels::body::pool::valid_range;
use crate::kernels::isa::Isa;

/// Conv weights (`[Cout, Cin/group, KH, KW]` s8, or wider values with their zero point
/// removed) packed for the int8 conv, with per output channel sums.
#[derive(Debug, Clone)]
pub struct QConvWeights {
    cout: usize,
    cin_g: usize,
    kh: usize,
    kw: usize,
    group: usize,
    /// Packed A panels per group (dense), or `[Cout, KH*KW]` i16 (depthwise).
    groups: Vec<Vec<i16>>,
    col_sums: Vec<i32>,
}

impl QConvWeights {
    /// Packs s8 weights `w` (`[cout, cin_per_group, kh, kw]`).
    pub fn pack(
        w: &[i8],
        cout: usize,
        cin_per_group: usize,
        kh: usize,
        kw: usize,
        group: usize,
    ) -> QConvWeights {
        let wide: Vec<i16> = w.iter().map(|&v| v as i16).collect();
        Self::pack_wide(&wide, cout, cin_per_group, kh, kw, group)
    }

    /// Packs weights of values in `[-255, 255]` (`w - w_zp` of weights with a zero point).
    pub fn pack_wide(
        w: &[i16],
        cout: usize,
        cin_per_group: usize,
        kh: usize,
        kw: usize,
        group: usize,
    ) -> QConvWeights {
        let k = cin_per_group * kh * kw;
        assert!(
            group > 0 && cout % group == 0,
            "QConvWeights: cout must divide into groups"
        );
        assert_eq!(
            w.len(),
            cout * k,
            "QConvWeights: w holds cout * cin_g * kh * kw values"
        );
        assert!(
            w.iter().all(|v| (-255..=255).contains(v)),
            "weight out of [-255, 255]"
        );
        let col_sums = w
            .chunks(k.max(1))
            .take(cout)
            .map(|r| r.iter().map(|&v| v as i32).sum())
            .collect();
        let mg = cout / group;
        let depthwise = group > 1 && cin_per_group == 1 && mg == 1;
        let groups = if depthwise {
            vec![w.to_vec()]
        } else {
            (0..group)
                .map(|g| {
                    let wg = &w[g * mg * k..(g + 1) * mg * k];
                    let mut pa = vec![0i16; packed_a_len(mg, k)];
                    pack_a(mg, k, &mut pa, |i, p| wg[i * k + p]);
                    pa
                })
                .collect()
        };
        let col_sums = if k == 0 { vec![0; cout] } else { col_sums };
        QConvWeights {
            cout,
            cin_g: cin_per_group,
            kh,
            kw,
            group,
            groups,
            col_sums,
        }
    }

    /// `sum` of each output channel's weights.
    pub fn col_sums(&self) -> &[i32] {
        &self.col_sums
    }

    /// The bias a kernel call takes: `bias[c] - x_zp * col_sums[c]` (`bias` absent: 0).
    pub fn fold_bias(&self, bias: Option<&[i32]>, x_zp: u8) -> Vec<i32> {
        fold(bias, x_zp, &self.col_sums)
    }

    fn check(&self, s: &ConvShape) {
        assert!(
            s.c_out == self.cout
                && s.group == self.group
                && s.c_in == self.cin_g * self.group
                && s.kh == self.kh
                && s.kw == self.kw,
            "QConvWeights packed for another conv shape"
        );
    }
}

/// Where a conv's finished i32 rows go.
enum ConvOut<'o> {
    U8(&'o Requant<'o>, &'o mut [u8]),
    I32(&'o [i32], &'o mut [i32]),
}

impl ConvOut<'_> {
    fn len(&self) -> usize {
        match self {
            ConvOut::U8(_, o) => o.len(),
            ConvOut::I32(_, o) => o.len(),
        }
    }

    /// Writes the sums `acc` of channel `c` at `out[at..]`.
    #[inline]
    fn put(&mut self, t: &super::table::QuantTable, c: usize, acc: &[i32], at: usize) {
        match self {
            ConvOut::U8(rq, o) => (t.requant_scalar)(
                acc,
                rq.bias[c],
                rq.mult[c],
                rq.y_zp,
                rq.lo,
                rq.hi,
                &mut o[at..at + acc.len()],
            ),
            ConvOut::I32(bias, o) => {
                for (d, &s) in o[at..at + acc.len()].iter_mut().zip(acc) {
                    *d = s.wrapping_add(bias[c]);
                }
            }
        }
    }
}

/// Int8 conv of output channels `chans` (`[lo, hi)`) of every image: `x` is `[N, Cin, H,
/// W]` u8 with zero point `x_zp`, `out` `[N, Cout, OH, OW]` u8, requantised by `rq`
/// (one multiplier and bias per output channel; the bias includes the zero point
/// correction, [`QConvWeights::fold_bias`]).
#[allow(clippy::too_many_arguments)]
pub fn qconv_u8(
    isa: Isa,
    s: &ConvShape,
    x: &[u8],
    x_zp: u8,
    w: &QConvWeights,
    rq: &Requant<'_>,
    out: &mut [u8],
    chans: (usize, usize),
    scratch: &mut QScratch,
) {
    rq.check(s.c_out);
    qconv(isa, s, x, x_zp, w, ConvOut::U8(rq, out), chans, scratch)
}

/// Like [`qconv_u8`], writing the raw i32 sums plus `bias` (one per output channel,
/// zero point correction included): the S32 output form.
#[allow(clippy::too_many_arguments)]
pub fn qconv_i32(
    isa: Isa,
    s: &ConvShape,
    x: &[u8],
    x_zp: u8,
    w: &QConvWeights,
    bias: &[i32],
    out: &mut [i32],
    chans: (usize, usize),
    scratch: &mut QScratch,
) {
    assert_eq!(
        bias.len(),
        s.c_out,
        "qconv_i32: one bias per output channel"
    );
    qconv(isa, s, x, x_zp, w, ConvOut::I32(bias, out), chans, scratch)
}

#[allow(clippy::too_many_arguments)]
fn qconv(
    isa: Isa,
    s: &ConvShape,
    x: &[u8],
    x_zp: u8,
    w: &QConvWeights,
    mut dst: ConvOut<'_>,
    (c_lo, c_hi): (usize, usize),
    scratch: &mut QScratch,
) {
    w.check(s);
    let (hw, ohw) = (s.h * s.w, s.oh * s.ow);
    assert!(x.len() >= s.n * s.c_in * hw, "qconv: x too short");
    assert!(dst.len() >= s.n * s.c_out * ohw, "qconv: out too short");
    assert!(c_lo <= c_hi && c_hi <= s.c_out, "qconv: channel range");
    if ohw == 0 || c_lo == c_hi {
        return;
    }
    let t = isa.table().quant;
    for b in 0..s.n {
        let xb = &x[b * s.c_in * hw..(b + 1) * s.c_in * hw];
        let ob = b * s.c_out * ohw;
        if s.is_depthwise() {
            depthwise(
                t,
                s,
                xb,
                x_zp,
                &w.groups[0],
                &mut dst,
                ob,
                (c_lo, c_hi),
                scratch,
            );
            continue;
        }
        let (mg, k, cig) = (s.cout_g(), s.k(), s.cin_g());
        let kp = pairs(k);
        for g in c_lo / mg..c_hi.div_ceil(mg) {
            let m_lo = c_lo.max(g * mg) - g * mg;
            let m_hi = c_hi.min((g + 1) * mg) - g * mg;
            let xg = &xb[g * cig * hw..(g + 1) * cig * hw];
            let (ip_lo, ip_hi) = (m_lo / QMR, m_hi.div_ceil(QMR));
            let nc_max = QNC.min(ohw.div_ceil(QNR) * QNR);
            let mc_max = QMC.min((ip_hi - ip_lo) * QMR);
            let (pb, cblk, rows) = scratch.conv_bufs(nc_max * kp * 2, mc_max * nc_max, 2 * nc_max);
            let mut jc = 0;
            while jc < ohw {
                let nc = QNC.min(ohw - jc);
                let b_panels = nc.div_ceil(QNR);
                let ldb = b_panels * QNR;
                pack_im2col(s, xg, x_zp, jc, nc, &mut pb[..ldb * kp * 2], rows);
                let mut ip = ip_lo;
                while ip < ip_hi {
                    let ip_end = ip_hi.min(ip + QMC / QMR);
                    let pa = &w.groups[g][ip * kp * QMR * 2..ip_end * kp * QMR * 2];
                    gemm_block(t, kp, pa, ip_end - ip, pb, b_panels, cblk, ldb);
                    for i in m_lo.max(ip * QMR)..m_hi.min(ip_end * QMR) {
                        let r = i - ip * QMR;
                        let c = g * mg + i;
                        dst.put(t, c, &cblk[r * ldb..r * ldb + nc], ob + c * ohw + jc);
                    }
                    ip = ip_end;
                }
                jc += nc;
            }
        }
    }
}

/// Packs columns `jc..jc + nc` of the im2col matrix of one group into B panels `pb`
/// (`rows`: scratch of `2 * nc` bytes).
fn pack_im2col(
    s: &ConvShape,
    xg: &[u8],
    zp: u8,
    jc: usize,
    nc: usize,
    pb: &mut [i16],
    rows: &mut [u8],
) {
    let k = s.k();
    if k % 2 == 1 || nc % QNR != 0 {
        pb.fill(0);
    }
    let (r0buf, r1buf) = rows[..2 * nc].split_at_mut(nc);
    let mut p = 0;
    while p + 1 < k {
        let r0 = im2col_row(s, xg, zp, p, jc, r0buf);
        let r1 = im2col_row(s, xg, zp, p + 1, jc, r1buf);
        scatter_b_pair(k, p, r0, r1, pb);
        p += 2;
    }
    if p < k {
        let r0 = im2col_row(s, xg, zp, p, jc, r0buf);
        scatter_b_row(k, p, r0, pb);
    }
}

/// Columns `j0..j0 + buf.len()` of im2col row `p = (ci, ky, kx)` (columns are output
/// positions `oy * OW + ox`), padding read as `zp`: a slice of the input plane for a
/// pointwise conv, else written into `buf`.
fn im2col_row<'a>(
    s: &ConvShape,
    xg: &'a [u8],
    zp: u8,
    p: usize,
    j0: usize,
    buf: &'a mut [u8],
) -> &'a [u8] {
    let (hw, khw) = (s.h * s.w, s.kh * s.kw);
    let (ci, ky, kx) = (p / khw, (p % khw) / s.kw, p % s.kw);
    let plane = &xg[ci * hw..(ci + 1) * hw];
    let pointwise = s.kh == 1 && s.kw == 1 && s.sh == 1 && s.sw == 1 && s.ph == 0 && s.pw == 0;
    if pointwise && s.oh * s.ow == hw {
        return &plane[j0..j0 + buf.len()];
    }
    let (vlo, vhi) = valid_range(s.ow, s.sw, s.pw, kx * s.dw, s.w);
    let mut j = j0;
    let end = j0 + buf.len();
    while j < end {
        let (oy, ox0) = (j / s.ow, j % s.ow);
        let ox1 = s.ow.min(ox0 + (end - j));
        let seg = &mut buf[j - j0..j - j0 + (ox1 - ox0)];
        j += ox1 - ox0;
        let iy = (oy * s.sh + ky * s.dh) as isize - s.ph as isize;
        let (lo, hi) = (vlo.clamp(ox0, ox1), vhi.clamp(ox0, ox1));
        if iy < 0 || iy >= s.h as isize || lo >= hi {
            seg.fill(zp);
            continue;
        }
        let src = &plane[iy as usize * s.w..(iy as usize + 1) * s.w];
        seg[..lo - ox0].fill(zp);
        seg[hi - ox0..].fill(zp);
        let ix0 = lo * s.sw + kx * s.dw - s.pw;
        let d = &mut seg[lo - ox0..hi - ox0];
        if s.sw == 1 {
            d.copy_from_slice(&src[ix0..ix0 + d.len()]);
        } else {
            for (o, v) in d.iter_mut().zip(src[ix0..].iter().step_by(s.sw)) {
                *o = *v;
            }
        }
    }
    buf
}

/// Padded plane geometry of a depthwise conv: `(hp, wp)`, exactly what the taps read.
fn dw_padded(s: &ConvShape) -> (usize, usize) {
    (
        (s.oh - 1) * s.sh + (s.kh - 1) * s.dh + 1,
        (s.ow - 1) * s.sw + (s.kw - 1) * s.dw + 1,
    )
}

/// Depthwise conv of channels `[c_lo, c_hi)` of one image.
#[allow(clippy::too_many_arguments)]
fn depthwise(
    t: &super::table::QuantTable,
    s: &ConvShape,
    xb: &[u8],
    zp: u8,
    w: &[i16],
    dst: &mut ConvOut<'_>,
    ob: usize,
    (c_lo, c_hi): (usize, usize),
    scratch: &mut QScratch,
) {
    let (hw, ohw, khw) = (s.h * s.w, s.oh * s.ow, s.kh * s.kw);
    let (hp, wp) = dw_padded(s);
    let (xpad, acc, _) = scratch.conv_bufs(hp * wp, ohw, 0);
    for c in c_lo..c_hi {
        let plane = &xb[c * hw..(c + 1) * hw];
        xpad.fill(zp as i16);
        for py in 0..hp {
            let iy = py as isize - s.ph as isize;
            if iy < 0 || iy >= s.h as isize {
                continue;
            }
            let src = &plane[iy as usize * s.w..(iy as usize + 1) * s.w];
            // Padded columns px with 0 <= px - pw < w.
            let x1 = (s.pw + s.w).min(wp);
            if s.pw < x1 {
                for (d, &v) in xpad[py * wp + s.pw..py * wp + x1].iter_mut().zip(src) {
                    *d = v as i16;
                }
            }
        }
        (t.dw_plane)(s, &w[c * khw..(c + 1) * khw], xpad, wp, acc);
        dst.put(t, c, acc, ob + c * ohw);
    }
}
