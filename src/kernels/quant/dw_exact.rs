//! Int8 depthwise conv block kernels (kernel table entry `qdepthwise_block`, where a
//! table has one): geometries and the exactness condition of f32 sums, shared by every ISA.
//!
//! The block sums `w * x` over the taps (padding reads `x_zp`, as the integer path) from
//! the folded i32 bias `b` ([`super::QConvWeights::fold_bias`]) in f32. Each product of a
//! u8 activation and a weight in `[-255, 255]` is an integer of at most `255 * 255`, and
//! while `255 * sum_t |w[t]| + |b| < 2^24` every partial sum is an integer below 2^24 in
//! magnitude: f32 holds each exactly, so FMAs in any order give the exact sum `acc + b`,
//! and the requantisation `clamp(rne((acc + b) as f32 * mult) + zp, lo, hi)` then gives
//! the bits of the integer path (`body::requant_scalar`).
//!
//! Three layouts. Shapes that [`BytePlaneGeom`] takes with s8 taps run on the plane of
//! bytes with VNNI (exact i32 sums, so no exactness condition; AVX-512 table). Else
//! planes up to [`PLANE_MIN_W`] wide ([`DwGeom`], as `body::dw_block`, made
//! for any plane width, stride, dilation): a block of [`LANES`] channels, one per lane;
//! the input rows channel-innermost in a ring of `slots` padded rows (`[slots][WP][LANES]`,
//! zero point border), each input row converted and transposed in once; the output
//! computed a *band* of `band` output rows at a time into `[band * OW][LANES]` and
//! transposed back into the channel planes (a small plane is one band). Wider planes of
//! 3x3 convs with stride 1 or 2 ([`PlaneGeom`]): a channel at a time, `LANES` output
//! columns per vector, the padded rows in a ring of f32 rows (even and odd columns apart
//! for stride 2), so that nothing is transposed.

use crate::kernels::body::conv::ConvShape;

/// Near-ties one block call records at most before it gives up
/// ([`NearTies::list`]); about `2 * conv::TIE_EPS` of the outputs are near-ties.
pub const TIES_MAX: usize = 4096;

/// The outputs of a block call whose requantised value lies within `conv::TIE_EPS` of a
/// rounding boundary, as indices into the block's output planes (`c * OH*OW + pixel`),
/// for the caller to settle like the float reference. Holds at most its buffer's length;
/// past that it only notes that it overflowed.
pub struct NearTies<'a> {
    at: &'a mut [u32],
    n: usize,
    overflow: bool,
}

impl<'a> NearTies<'a> {
    /// An empty list over `at` (an empty `at` records nothing: every push overflows).
    pub fn new(at: &'a mut [u32]) -> Self {
        NearTies {
            at,
            n: 0,
            overflow: false,
        }
    }

    /// Records output `base + l * step` for every lane `l` set in `mask`.
    #[cold]
    #[inline(never)]
    pub fn push_lanes(&mut self, base: usize, step: usize, mask: u16) {
        for l in 0..16 {
            if mask & (1 << l) == 0 {
                continue;
            }
            match (self.at.get_mut(self.n), u32::try_from(base + l * step)) {
                (Some(d), Ok(i)) => {
                    *d = i;
                    self.n += 1;
                }
                _ => self.overflow = true,
            }
        }
    }

    /// The recorded outputs, or `None` when some could not be recorded.
    pub fn list(&self) -> Option<&[u32]> {
        (!self.overflow).then_some(&self.at[..self.n])
    }
}

/// Channels of one block (lanes of one AVX-512 vector).
pub const LANES: usize = 16;

/// Largest kernel height the block kernel takes (its per-row tap pointers live on the
/// stack); taller kernels run on the integer path.
pub const KH_MAX: usize = 32;

/// Scratch floats under which the whole plane is one band.
const WHOLE_MAX: usize = 16 * 1024;

/// Output pixels a band of a wide plane covers at least.
const BAND_PIXELS: usize = 32;

/// Geometry of one block call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DwGeom {
    /// Padded row length (columns, the leading pads included).
    pub wp: usize,
    /// Output rows per band.
    pub band: usize,
    /// Padded rows the ring holds (every row one band's taps reach).
    pub slots: usize,
}

impl DwGeom {
    /// The geometry of a depthwise conv of shape `s`, or `None` when the block kernel
    /// does not take it (empty output, kernel taller than [`KH_MAX`]).
    pub fn new(s: &ConvShape) -> Option<DwGeom> {
        if s.oh == 0 || s.ow == 0 || s.kh == 0 || s.kw == 0 || s.kh > KH_MAX {
            return None;
        }
        let wp = (s.w + s.pw).max((s.ow - 1) * s.sw + (s.kw - 1) * s.dw + 1);
        let span = |band: usize| (band - 1) * s.sh + (s.kh - 1) * s.dh + 1;
        let whole = (span(s.oh) * wp + s.oh * s.ow) * LANES;
        let band = if whole <= WHOLE_MAX {
            s.oh
        } else {
            BAND_PIXELS.div_ceil(s.ow).min(s.oh)
        };
        Some(DwGeom {
            wp,
            band,
            slots: span(band),
        })
    }

    /// Scratch floats of a block call: the ring and the band.
    pub fn scratch_len(&self, s: &ConvShape) -> usize {
        (self.slots * self.wp + self.band * s.ow) * LANES
    }
}

/// Planes wider than this run a channel at a time ([`PlaneGeom`]), narrower ones across
/// channels ([`DwGeom`]).
pub const PLANE_MIN_W: usize = 29;

/// Output rows one pass of the per-plane kernel computes at most.
pub const PLANE_ROWS: usize = 4;

/// Geometry of the per-plane kernel (wide planes, 3x3, stride 1 or 2 on both axes,
/// dilation 1, left pad 0 or 1): the plane's padded rows as f32 (the zero point in the borders) in a ring
/// of `slots` rows, each one padded row (stride 1) or its even and odd columns in two
/// halves of `half` floats (stride 2); `LANES` output columns per vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlaneGeom {
    /// Output vectors per row.
    pub nv: usize,
    /// Floats of one half of a stride-2 row (0 for stride 1).
    pub half: usize,
    /// Floats of one ring row.
    pub row_len: usize,
    /// Ring rows.
    pub slots: usize,
}

impl PlaneGeom {
    /// The geometry when the per-plane kernel takes shape `s`.
    pub fn new(s: &ConvShape) -> Option<PlaneGeom> {
        let st = s.sh;
        let taken = s.w >= PLANE_MIN_W
            && s.pw <= 1
            && s.oh > 0
            && s.ow > 0
            && (s.kh, s.kw, s.dh, s.dw) == (3, 3, 1, 1)
            && s.sw == st
            && (st == 1 || st == 2);
        if !taken {
            return None;
        }
        let nv = s.ow.div_ceil(LANES);
        // Whole vectors read up to column `nv * LANES + 1` (stride 1) or index `nv * LANES`
        // of a half (stride 2); the data ends at `pw + w <= (ow - 1) * st + 3`.
        let span = nv * LANES + 2 * LANES;
        let (half, row_len) = if st == 1 { (0, span) } else { (span, 2 * span) };
        Some(PlaneGeom {
            nv,
            half,
            row_len,
            slots: (PLANE_ROWS - 1) * st + 3,
        })
    }

    /// Scratch floats: the ring and a row of the zero point.
    pub fn scratch_len(&self) -> usize {
        (self.slots + 1) * self.row_len
    }
}

/// Scratch floats the block kernel needs for shape `s` (0 when it does not take it):
/// enough for whichever of its kernels takes the shape.
pub fn scratch_len(s: &ConvShape) -> usize {
    let f32_len = match PlaneGeom::new(s) {
        Some(p) => p.scratch_len(),
        None => DwGeom::new(s).map_or(0, |g| g.scratch_len(s)),
    };
    let byte_len = BytePlaneGeom::new(s).map_or(0, |g| g.scratch_bytes().div_ceil(4));
    f32_len.max(byte_len)
}

/// Kernel heights the byte-plane kernel takes ([`BytePlaneGeom`]).
pub const BYTE_KH: [usize; 2] = [3, 5];

/// Widest kernel the byte-plane kernel takes: two K quads per kernel row.
pub const BYTE_KW_MAX: usize = 8;

/// Geometry of the byte-plane kernel (AVX-512 VNNI, s8 taps; kernel heights
/// [`BYTE_KH`], widths up to [`BYTE_KW_MAX`], stride 1 or 2 on each axis, dilation 1, any
/// pads): a channel's plane padded with the zero point, as bytes, `row_len` per padded
/// row, `rows` padded rows (every row an output row reads); [`LANES`] output columns per
/// vector, each lane's kernel row read as one or two quads of bytes from one 64-byte load
/// at the vector's first input column, so rows are long enough for that load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BytePlaneGeom {
    /// Output vectors per row.
    pub nv: usize,
    /// Bytes of one padded row (a multiple of 64).
    pub row_len: usize,
    /// Padded rows.
    pub rows: usize,
}

impl BytePlaneGeom {
    /// The geometry when the byte-plane kernel takes shape `s`.
    pub fn new(s: &ConvShape) -> Option<BytePlaneGeom> {
        // Output rows of half a vector or less leave most lanes empty: the f32 block
        // kernel (across channels) is faster there (7 columns: 1.85x the time).
        let taken = s.oh > 0
            && s.ow > LANES / 2
            && BYTE_KH.contains(&s.kh)
            && (1..=BYTE_KW_MAX).contains(&s.kw)
            && (s.dh, s.dw) == (1, 1)
            && (1..=2).contains(&s.sh)
            && (1..=2).contains(&s.sw);
        if !taken {
            return None;
        }
        let nv = s.ow.div_ceil(LANES);
        let row_len = (s.pw + s.w)
            .max((nv - 1) * LANES * s.sw + 64)
            .next_multiple_of(64);
        Some(BytePlaneGeom {
            nv,
            row_len,
            rows: (s.oh - 1) * s.sh + s.kh,
        })
    }

    /// Scratch bytes: the padded plane.
    pub fn scratch_bytes(&self) -> usize {
        self.rows * self.row_len
    }
}

/// A depthwise conv's taps for the block kernel, packed with the weights: f32, tap-major
/// with one lane per channel, so that the taps of any block of channels are one vector
/// load each; and each channel's `sum_t |w[t]|` for [`DwTaps::exact`].
#[derive(Debug, Clone)]
pub struct DwTaps {
    /// Tap `t` of channel `c` at `t * stride + c`; zero past the last channel.
    taps: Vec<f32>,
    stride: usize,
    abs: Vec<i64>,
}

impl DwTaps {
    /// The taps of `w` (`[channels, khw]`, values in `[-255, 255]`).
    pub fn new(w: &[i16], channels: usize, khw: usize) -> DwTaps {
        assert_eq!(w.len(), channels * khw, "DwTaps: channels * khw taps");
        let stride = channels + LANES;
        let mut taps = vec![0.0; khw * stride];
        for (c, wc) in w.chunks_exact(khw.max(1)).enumerate().take(channels) {
            for (t, &v) in wc.iter().enumerate() {
                taps[t * stride + c] = f32::from(v);
            }
        }
        let abs = (0..channels)
            .map(|c| {
                w[c * khw..(c + 1) * khw]
                    .iter()
                    .map(|&v| i64::from(v).abs())
                    .sum()
            })
            .collect();
        DwTaps { taps, stride, abs }
    }

    /// Channels.
    pub fn channels(&self) -> usize {
        self.abs.len()
    }

    /// Taps per channel.
    pub fn khw(&self) -> usize {
        self.taps.len() / self.stride
    }

    /// The packed taps and their stride: the taps `t` of channels `c0..c0 + LANES` are the
    /// `LANES` floats from `t * stride + c0` (inside the slice for any `c0 < channels`).
    pub fn taps(&self) -> (&[f32], usize) {
        (&self.taps, self.stride)
    }

    /// True when every partial sum of channel `c` from the folded bias `b` is exact in
    /// f32 (see the module doc).
    pub fn exact(&self, c: usize, b: i32) -> bool {
        255 * self.abs[c] + i64::from(b).abs() < 1 << 24
    }
}
