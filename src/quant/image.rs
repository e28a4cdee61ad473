//! Calibration images: decode PNG / JPEG (the decoders the crate already depends on),
//! resize bilinearly to the input's H×W and lay the pixels out as the compiled model's
//! runtime image input wants them (NV12, YUV444 BT.601 full range, RGB / BGR / gray
//! bytes in NCHW or NHWC). The model's own preprocessing node then turns them into the
//! ONNX input, exactly as at inference time.

use std::path::Path;

use crate::error::{Error, Result};
use crate::ir::ImageFormat;

/// True when the file name has an image extension this module decodes.
pub fn is_image(path: &Path) -> bool {
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    matches!(ext.as_str(), "png" | "jpg" | "jpeg")
}

fn bad(path: &Path, reason: impl Into<String>) -> Error {
    Error::CompileOption {
        option: "calibration_data".into(),
        reason: format!("{}: {}", path.display(), reason.into()),
    }
}

/// Decoded RGB pixels, row-major, 3 bytes a pixel.
#[derive(Debug, Clone)]
pub struct Rgb {
    /// Width in pixels.
    pub w: usize,
    /// Height in pixels.
    pub h: usize,
    /// `w * h * 3` bytes, RGB.
    pub px: Vec<u8>,
}

impl Rgb {
    /// The `w x h` window at `(x, y)` (clipped to the image).
    pub fn crop(&self, x: usize, y: usize, w: usize, h: usize) -> Rgb {
        let (x, y) = (x.min(self.w), y.min(self.h));
        let (w, h) = (w.min(self.w - x), h.min(self.h - y));
        let mut px = Vec::with_capacity(w * h * 3);
        for row in y..y + h {
            px.extend_from_slice(&self.px[(row * self.w + x) * 3..(row * self.w + x + w) * 3]);
        }
        Rgb { w, h, px }
    }
}

/// Decodes a PNG or JPEG file to RGB.
pub fn decode_file(path: &Path) -> Result<Rgb> {
    let bytes = std::fs::read(path).map_err(|e| bad(path, e.to_string()))?;
    let img = decode_bytes(path, &bytes).map_err(|e| bad(path, e))?;
    if img.w == 0 || img.h == 0 || img.px.len() < img.w * img.h * 3 {
        return Err(bad(path, "empty or truncated image"));
    }
    Ok(img)
}

/// Decodes the bytes of a PNG or JPEG file (`path` picks the decoder by its extension)
/// to RGB; the error says what is wrong with the bytes.
pub fn decode_bytes(path: &Path, bytes: &[u8]) -> std::result::Result<Rgb, String> {
    let png = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("png"));
    if png {
        let mut dec = png::Decoder::new(std::io::Cursor::new(bytes));
        dec.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
        let mut reader = dec
            .read_info()
            .map_err(|e| format!("not a readable PNG: {e}"))?;
        let mut buf = vec![0u8; reader.output_buffer_size()];
        let info = reader
            .next_frame(&mut buf)
            .map_err(|e| format!("PNG decode failed: {e}"))?;
        let ch = match info.color_type {
            png::ColorType::Grayscale => 1,
            png::ColorType::GrayscaleAlpha => 2,
            png::ColorType::Rgb => 3,
            png::ColorType::Rgba => 4,
            png::ColorType::Indexed => return Err("indexed PNG was not expanded".into()),
        };
        let px = buf[..info.buffer_size()]
            .chunks_exact(ch)
            .flat_map(|p| {
                if ch < 3 {
                    [p[0]; 3]
                } else {
                    [p[0], p[1], p[2]]
                }
            })
            .collect();
        Ok(Rgb {
            w: info.width as usize,
            h: info.height as usize,
            px,
        })
    } else {
        let opts = zune_jpeg::zune_core::options::DecoderOptions::default()
            .jpeg_set_out_colorspace(zune_jpeg::zune_core::colorspace::ColorSpace::RGB);
        let mut dec = zune_jpeg::JpegDecoder::new_with_options(bytes, opts);
        let px = dec
            .decode()
            .map_err(|e| format!("JPEG decode failed: {e:?}"))?;
        let info = dec.info().ok_or("JPEG without header")?;
        Ok(Rgb {
            w: info.width as usize,
            h: info.height as usize,
            px,
        })
    }
}

/// Bilinear resize with pixel centres aligned; pixels as f32 RGB triples, row-major.
pub fn resize(img: &Rgb, w: usize, h: usize) -> Vec<[f32; 3]> {
    let mut out = Vec::with_capacity(w * h);
    let sx = img.w as f32 / w as f32;
    let sy = img.h as f32 / h as f32;
    let p = |y: usize, x: usize, c: usize| f32::from(img.px[(y * img.w + x) * 3 + c]);
    for y in 0..h {
        let fy = ((y as f32 + 0.5) * sy - 0.5).clamp(0.0, (img.h - 1) as f32);
        let (y0, ty) = (fy.floor() as usize, fy - fy.floor());
        let y1 = (y0 + 1).min(img.h - 1);
        for x in 0..w {
            let fx = ((x as f32 + 0.5) * sx - 0.5).clamp(0.0, (img.w - 1) as f32);
            let (x0, tx) = (fx.floor() as usize, fx - fx.floor());
            let x1 = (x0 + 1).min(img.w - 1);
            let mut v = [0f32; 3];
            for (c, vc) in v.iter_mut().enumerate() {
                let top = p(y0, x0, c) * (1.0 - tx) + p(y0, x1, c) * tx;
                let bot = p(y1, x0, c) * (1.0 - tx) + p(y1, x1, c) * tx;
                *vc = top * (1.0 - ty) + bot * ty;
            }
            out.push(v);
        }
    }
    out
}

/// RGB to YUV, BT.601 full range (the inverse of the conversion a compiled model's
/// image input does).
pub fn yuv([r, g, b]: [f32; 3]) -> [f32; 3] {
    [
        0.299 * r + 0.587 * g + 0.114 * b,
        -0.168736 * r - 0.331264 * g + 0.5 * b + 128.0,
        0.5 * r - 0.418688 * g - 0.081312 * b + 128.0,
    ]
}

fn u8c(v: f32) -> u8 {
    v.round().clamp(0.0, 255.0) as u8
}

/// Reads an image file and returns the raw runtime bytes of a `format` input whose
/// ONNX tensor is `[1, c, h, w]`: NV12 `h*3/2 x w`, else `c*h*w` bytes in NHWC (`nhwc`)
/// or NCHW order.
pub fn image_bytes(
    path: &Path,
    format: ImageFormat,
    nhwc: bool,
    h: usize,
    w: usize,
) -> Result<Vec<u8>> {
    let img = decode_file(path)?;
    Ok(pixels_to_bytes(&resize(&img, w, h), format, nhwc, h, w))
}

/// Lays out `h x w` resized RGB pixels as the raw runtime bytes of a `format` input: NV12
/// `h*3/2 x w`, else `c*h*w` bytes in NHWC (`nhwc`) or NCHW order.
pub fn pixels_to_bytes(
    px: &[[f32; 3]],
    format: ImageFormat,
    nhwc: bool,
    h: usize,
    w: usize,
) -> Vec<u8> {
    let layout = |f: &dyn Fn([f32; 3]) -> [f32; 3], ch: usize| -> Vec<u8> {
        let mut out = vec![0u8; ch * h * w];
        for (i, &p) in px.iter().enumerate() {
            let v = f(p);
            for (k, &vk) in v.iter().enumerate().take(ch) {
                let at = if nhwc { i * ch + k } else { k * h * w + i };
                out[at] = u8c(vk);
            }
        }
        out
    };
    match format {
        ImageFormat::Nv12 => {
            let mut out = vec![0u8; h * w * 3 / 2];
            for (i, &p) in px.iter().enumerate() {
                out[i] = u8c(yuv(p)[0]);
            }
            for y in 0..h / 2 {
                for x in 0..w / 2 {
                    let mut acc = [0f32; 2];
                    for (dy, dx) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
                        let q = yuv(px[(2 * y + dy) * w + 2 * x + dx]);
                        acc[0] += q[1] / 4.0;
                        acc[1] += q[2] / 4.0;
                    }
                    out[h * w + y * w + 2 * x] = u8c(acc[0]);
                    out[h * w + y * w + 2 * x + 1] = u8c(acc[1]);
                }
            }
            out
        }
        ImageFormat::Yuv444 => layout(&yuv, 3),
        ImageFormat::Rgb => layout(&|p| p, 3),
        ImageFormat::Bgr => layout(&|p| [p[2], p[1], p[0]], 3),
        ImageFormat::Gray => layout(&|p| [yuv(p)[0]; 3], 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resize_of_a_constant_image_is_constant_and_yuv_of_gray_is_neutral() {
        let img = Rgb {
            w: 5,
            h: 3,
            px: vec![100; 45],
        };
        let r = resize(&img, 8, 6);
        assert!(r
            .iter()
            .all(|p| p.iter().all(|&v| (v - 100.0).abs() < 1e-4)));
        let q = yuv([100.0, 100.0, 100.0]);
        assert!((q[0] - 100.0).abs() < 1e-3);
        assert!((q[1] - 128.0).abs() < 1e-3 && (q[2] - 128.0).abs() < 1e-3);
        let nv12 = pixels_to_bytes(&r, ImageFormat::Nv12, false, 6, 8);
        assert_eq!(nv12.len(), 8 * 6 * 3 / 2);
        assert!(nv12[..48].iter().all(|&v| v == 100) && nv12[48..].iter().all(|&v| v == 128));
    }

    #[test]
    fn png_round_trip_to_rgb_nchw_and_nhwc() {
        let dir = std::env::temp_dir().join(format!("vnpu_qimg_{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.png");
        {
            let f = std::fs::File::create(&path).unwrap();
            let mut enc = png::Encoder::new(std::io::BufWriter::new(f), 2, 1);
            enc.set_color(png::ColorType::Rgb);
            enc.set_depth(png::BitDepth::Eight);
            let mut wr = enc.write_header().unwrap();
            wr.write_image_data(&[10, 20, 30, 40, 50, 60]).unwrap();
        }
        let nchw = image_bytes(&path, ImageFormat::Rgb, false, 1, 2).unwrap();
        assert_eq!(nchw, vec![10, 40, 20, 50, 30, 60]);
        let nhwc = image_bytes(&path, ImageFormat::Bgr, true, 1, 2).unwrap();
        assert_eq!(nhwc, vec![30, 20, 10, 60, 50, 40]);
        let nv12 = image_bytes(&path, ImageFormat::Nv12, false, 2, 2).unwrap();
        assert_eq!(nv12.len(), 6);
        std::fs::remove_dir_all(&dir).ok();
    }
}
