//! `--input_file photo.jpg|png` for `vnpu infer`: decode, resize bilinearly to the model
//! input's H×W, and lay the pixels out as the input wants: NV12 / YUV444 (BT.601
//! full-range, the inverse of the conversion the compiled model does), RGB / BGR / gray
//! bytes in NHWC or NCHW, or f32 NCHW/NHWC holding pixel values 0..255 (normalisation is
//! the model's job: compile with `--mean/--scale` or bake it into the ONNX model).

use vnpu::runtime::{ElemType, TensorDesc, TensorLayout};

/// True when the path names an image file this module decodes.
pub fn is_image(path: &str) -> bool {
    let p = path.to_ascii_lowercase();
    p.ends_with(".jpg") || p.ends_with(".jpeg") || p.ends_with(".png")
}

/// Decoded RGB pixels.
struct Rgb {
    w: usize,
    h: usize,
    px: Vec<u8>,
}

fn decode(path: &str, bytes: &[u8]) -> Result<Rgb, String> {
    let lower = path.to_ascii_lowercase();
    if lower.ends_with(".png") {
        let mut dec = png::Decoder::new(std::io::Cursor::new(bytes));
        dec.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
        let mut reader = dec
            .read_info()
            .map_err(|e| format!("{path}: not a readable PNG: {e}"))?;
        let mut buf = vec![0u8; reader.output_buffer_size()];
        let info = reader
            .next_frame(&mut buf)
            .map_err(|e| format!("{path}: PNG decode failed: {e}"))?;
        let (w, h) = (info.width as usize, info.height as usize);
        let data = &buf[..info.buffer_size()];
        let ch = match info.color_type {
            png::ColorType::Grayscale => 1,
            png::ColorType::GrayscaleAlpha => 2,
            png::ColorType::Rgb => 3,
            png::ColorType::Rgba => 4,
            png::ColorType::Indexed => return Err(format!("{path}: indexed PNG was not expanded")),
        };
        let px = data
            .chunks_exact(ch)
            .flat_map(|p| {
                if ch < 3 {
                    [p[0], p[0], p[0]]
                } else {
                    [p[0], p[1], p[2]]
                }
            })
            .collect();
        Ok(Rgb { w, h, px })
    } else {
        let opts = zune_jpeg::zune_core::options::DecoderOptions::default()
            .jpeg_set_out_colorspace(zune_jpeg::zune_core::colorspace::ColorSpace::RGB);
        let mut dec = zune_jpeg::JpegDecoder::new_with_options(bytes, opts);
        let px = dec
            .decode()
            .map_err(|e| format!("{path}: JPEG decode failed: {e:?}"))?;
        let info = dec
            .info()
            .ok_or_else(|| format!("{path}: JPEG without header"))?;
        Ok(Rgb {
            w: info.width as usize,
            h: info.height as usize,
            px,
        })
    }
}

/// Bilinear resize (pixel centres aligned, as image libraries do).
fn resize(img: &Rgb, w: usize, h: usize) -> Vec<[f32; 3]> {
    let mut out = Vec::with_capacity(w * h);
    let sx = img.w as f32 / w as f32;
    let sy = img.h as f32 / h as f32;
    for y in 0..h {
        let fy = ((y as f32 + 0.5) * sy - 0.5).clamp(0.0, (img.h - 1) as f32);
        let (y0, ty) = (fy.floor() as usize, fy - fy.floor());
        let y1 = (y0 + 1).min(img.h - 1);
        for x in 0..w {
            let fx = ((x as f32 + 0.5) * sx - 0.5).clamp(0.0, (img.w - 1) as f32);
            let (x0, tx) = (fx.floor() as usize, fx - fx.floor());
            let x1 = (x0 + 1).min(img.w - 1);
            let p = |yy: usize, xx: usize, c: usize| img.px[(yy * img.w + xx) * 3 + c] as f32;
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

fn yuv(p: [f32; 3]) -> [f32; 3] {
    let [r, g, b] = p;
    [
        0.299 * r + 0.587 * g + 0.114 * b,
        -0.168736 * r - 0.331264 * g + 0.5 * b + 128.0,
        0.5 * r - 0.418688 * g - 0.081312 * b + 128.0,
    ]
}

fn u8c(v: f32) -> u8 {
    v.round().clamp(0.0, 255.0) as u8
}

/// Reads an image file and returns the bytes for a model input described by `d`.
pub fn image_input(path: &str, d: &TensorDesc) -> Result<Vec<u8>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot open {path}: {e}"))?;
    let img = decode(path, &bytes)?;
    if img.w == 0 || img.h == 0 {
        return Err(format!("{path}: empty image"));
    }
    let s = &d.valid_shape;
    if s.len() != 4 || s[0] != 1 {
        return Err(format!(
            "input '{}' has shape {s:?}; an image file needs a 1xCxHxW or 1xHxWxC input",
            d.name
        ));
    }
    let nhwc = d.layout == TensorLayout::Nhwc;
    let (c, h, w) = if nhwc {
        (s[3], s[1], s[2])
    } else {
        (s[1], s[2], s[3])
    };
    let (c, h, w) = (c as usize, h as usize, w as usize);
    let px = resize(&img, w, h);
    let planar = |vals: &dyn Fn([f32; 3]) -> [f32; 3], ch: usize| -> Vec<f32> {
        let mut out = vec![0f32; ch * h * w];
        for (i, &p) in px.iter().enumerate() {
            let v = vals(p);
            for k in 0..ch {
                if nhwc {
                    out[i * ch + k] = v[k];
                } else {
                    out[k * h * w + i] = v[k];
                }
            }
        }
        out
    };
    let gray = |p: [f32; 3]| {
        let y = yuv(p)[0];
        [y, y, y]
    };
    Ok(match d.elem {
        ElemType::ImgNv12 | ElemType::ImgNv12Separate => {
            let mut out = vec![0u8; h * w * 3 / 2];
            for (i, &p) in px.iter().enumerate() {
                out[i] = u8c(yuv(p)[0]);
            }
            for y in 0..h / 2 {
                for x in 0..w / 2 {
                    let mut acc = [0f32; 3];
                    for (dy, dx) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
                        let q = yuv(px[(2 * y + dy) * w + 2 * x + dx]);
                        acc[1] += q[1] / 4.0;
                        acc[2] += q[2] / 4.0;
                    }
                    out[h * w + y * w + 2 * x] = u8c(acc[1]);
                    out[h * w + y * w + 2 * x + 1] = u8c(acc[2]);
                }
            }
            out
        }
        ElemType::ImgYuv444 => planar(&yuv, 3).into_iter().map(u8c).collect(),
        ElemType::ImgRgb => planar(&|p| p, 3).into_iter().map(u8c).collect(),
        ElemType::ImgBgr => planar(&|p| [p[2], p[1], p[0]], 3)
            .into_iter()
            .map(u8c)
            .collect(),
        ElemType::ImgY => planar(&gray, 1).into_iter().map(u8c).collect(),
        ElemType::F32 if c == 3 => bytemuck::cast_slice(&planar(&|p| p, 3)).to_vec(),
        ElemType::F32 if c == 1 => bytemuck::cast_slice(&planar(&gray, 1)).to_vec(),
        other => {
            return Err(format!(
                "input '{}' ({other:?}, {c} channels) cannot take an image file",
                d.name
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resize_of_a_constant_image_is_constant_and_nv12_of_gray_is_neutral() {
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
        assert!(
            (q[0] - 100.0).abs() < 1e-3
                && (q[1] - 128.0).abs() < 1e-3
                && (q[2] - 128.0).abs() < 1e-3
        );
    }
}
