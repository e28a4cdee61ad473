//! Preprocessing of a raw u8 image into a normalised NCHW f32 tensor.
//!
//! Colour conversion of YUV inputs (NV12: Y plane then interleaved U,V at half
//! resolution; YUV444: three full-resolution channels) uses BT.601 full-range
//! coefficients: `R = Y + 1.402 (V-128)`, `G = Y - 0.344136 (U-128) - 0.714136 (V-128)`,
//! `B = Y + 1.772 (U-128)`, clamped to `[0, 255]`. Each output channel `c` is then
//! `(v - mean[c]) * scale[c]` (a single mean/scale applies to every channel; empty
//! means 0 / 1). Output channels are RGB, or BGR when `to_bgr`; gray input gives one
//! channel (replicated when the model wants three).

use crate::ir::ImageFormat;

/// A resolved preprocessing step.
#[derive(Debug, Clone, PartialEq)]
pub struct Preprocess {
    /// Input colour format.
    pub format: ImageFormat,
    /// Input layout is NHWC (else NCHW); ignored for NV12.
    pub nhwc: bool,
    /// Batch, height, width of the image.
    pub n: usize,
    pub h: usize,
    pub w: usize,
    /// Output channels (1 or 3).
    pub c_out: usize,
    /// Per output channel mean and scale.
    pub mean: [f32; 3],
    pub scale: [f32; 3],
    /// Emit BGR instead of RGB.
    pub to_bgr: bool,
}

impl Preprocess {
    /// Bytes of the raw input image.
    pub fn input_len(&self) -> usize {
        let px = self.n * self.h * self.w;
        match self.format {
            ImageFormat::Nv12 => {
                self.n * (self.h * self.w + 2 * self.h.div_ceil(2) * self.w.div_ceil(2))
            }
            ImageFormat::Gray => px,
            _ => px * 3,
        }
    }

    /// Converts rows `[lo, hi)` of every image (tile = rows of the whole batch: `n * h`).
    pub fn run(&self, src: &[u8], dst: &mut [f32], lo: usize, hi: usize) {
        let (h, w) = (self.h, self.w);
        let per_img = self.input_len() / self.n.max(1);
        for r in lo..hi {
            let (b, y) = (r / h, r % h);
            let img = &src[b * per_img..(b + 1) * per_img];
            for x in 0..w {
                let rgb = self.pixel(img, y, x);
                for c in 0..self.c_out {
                    let v = if self.c_out == 1 {
                        rgb[0]
                    } else if self.to_bgr {
                        rgb[2 - c]
                    } else {
                        rgb[c]
                    };
                    dst[((b * self.c_out + c) * h + y) * w + x] =
                        (v - self.mean[c]) * self.scale[c];
                }
            }
        }
    }

    /// The pixel as RGB (gray: `[g, g, g]`).
    fn pixel(&self, img: &[u8], y: usize, x: usize) -> [f32; 3] {
        let (h, w) = (self.h, self.w);
        let at = |c: usize| -> f32 {
            if self.nhwc {
                img[(y * w + x) * 3 + c] as f32
            } else {
                img[(c * h + y) * w + x] as f32
            }
        };
        match self.format {
            ImageFormat::Gray => {
                let g = img[y * w + x] as f32;
                [g, g, g]
            }
            ImageFormat::Rgb => [at(0), at(1), at(2)],
            ImageFormat::Bgr => [at(2), at(1), at(0)],
            ImageFormat::Yuv444 => yuv_to_rgb(at(0), at(1), at(2)),
            ImageFormat::Nv12 => {
                let yv = img[y * w + x] as f32;
                let uv = h * w + ((y / 2) * w.div_ceil(2) + x / 2) * 2;
                yuv_to_rgb(yv, img[uv] as f32, img[uv + 1] as f32)
            }
        }
    }
}

/// BT.601 full-range YUV → RGB, clamped to `[0, 255]`.
pub fn yuv_to_rgb(y: f32, u: f32, v: f32) -> [f32; 3] {
    let (u, v) = (u - 128.0, v - 128.0);
    [
        (y + 1.402 * v).clamp(0.0, 255.0),
        (y - 0.344_136 * u - 0.714_136 * v).clamp(0.0, 255.0),
        (y + 1.772 * u).clamp(0.0, 255.0),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nv12_gray_pixel_and_normalisation() {
        // 2x2 NV12 image: Y = 100 everywhere, U = V = 128 -> neutral gray 100.
        let src = [100u8, 100, 100, 100, 128, 128];
        let p = Preprocess {
            format: ImageFormat::Nv12,
            nhwc: true,
            n: 1,
            h: 2,
            w: 2,
            c_out: 3,
            mean: [100.0, 0.0, 50.0],
            scale: [1.0, 0.5, 2.0],
            to_bgr: false,
        };
        assert_eq!(p.input_len(), 6);
        let mut out = vec![0.0; 12];
        p.run(&src, &mut out, 0, 2);
        assert_eq!(&out[0..4], &[0.0; 4]);
        assert_eq!(&out[4..8], &[50.0; 4]);
        assert_eq!(&out[8..12], &[100.0; 4]);
    }

    #[test]
    fn bgr_nchw_to_rgb() {
        let src = [1u8, 2, 3]; // 1x1 BGR NCHW: B=1, G=2, R=3
        let p = Preprocess {
            format: ImageFormat::Bgr,
            nhwc: false,
            n: 1,
            h: 1,
            w: 1,
            c_out: 3,
            mean: [0.0; 3],
            scale: [1.0; 3],
            to_bgr: false,
        };
        let mut out = vec![0.0; 3];
        p.run(&src, &mut out, 0, 1);
        assert_eq!(out, vec![3.0, 2.0, 1.0]);
        assert_eq!(yuv_to_rgb(255.0, 128.0, 128.0), [255.0, 255.0, 255.0]);
    }
}
