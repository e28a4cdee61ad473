//! `--input_file photo.jpg|png` for `vnpu infer`: decode, resize bilinearly to the model
//! input's H×W, and lay the pixels out as the input wants: NV12 / YUV444 (BT.601
//! full-range, the inverse of the conversion the compiled model does), RGB / BGR / gray
//! bytes in NHWC or NCHW (the library's calibration-image code, `vnpu::quant::image`), or
//! f32 NCHW/NHWC holding pixel values 0..255 (normalisation is the model's job: compile
//! with `--mean/--scale` or bake it into the ONNX model).

use std::path::Path;

use vnpu::ir::ImageFormat;
use vnpu::quant::image;
use vnpu::runtime::{ElemType, TensorDesc, TensorLayout};

/// True when the path names an image file this module decodes.
pub fn is_image(path: &str) -> bool {
    image::is_image(Path::new(path))
}

/// Reads an image file and returns the bytes for a model input described by `d`.
pub fn image_input(path: &str, d: &TensorDesc) -> Result<Vec<u8>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot open {path}: {e}"))?;
    let img = image::decode_bytes(Path::new(path), &bytes).map_err(|e| format!("{path}: {e}"))?;
    if img.w == 0 || img.h == 0 || img.px.len() < img.w * img.h * 3 {
        return Err(format!("{path}: empty or truncated image"));
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
    let px = image::resize(&img, w, h);
    let format = match d.elem {
        ElemType::ImgNv12 | ElemType::ImgNv12Separate => Some(ImageFormat::Nv12),
        ElemType::ImgYuv444 => Some(ImageFormat::Yuv444),
        ElemType::ImgRgb => Some(ImageFormat::Rgb),
        ElemType::ImgBgr => Some(ImageFormat::Bgr),
        ElemType::ImgY => Some(ImageFormat::Gray),
        _ => None,
    };
    if let Some(f) = format {
        return Ok(image::pixels_to_bytes(&px, f, nhwc, h, w));
    }
    // f32 pixel values: RGB, or luma for one channel.
    let value = |p: [f32; 3], k: usize| if c == 1 { image::yuv(p)[0] } else { p[k] };
    match d.elem {
        ElemType::F32 if c == 3 || c == 1 => {
            let mut out = vec![0f32; c * h * w];
            for (i, &p) in px.iter().enumerate() {
                for k in 0..c {
                    let at = if nhwc { i * c + k } else { k * h * w + i };
                    out[at] = value(p, k);
                }
            }
            Ok(bytemuck::cast_slice(&out).to_vec())
        }
        other => Err(format!(
            "input '{}' ({other:?}, {c} channels) cannot take an image file",
            d.name
        )),
    }
}
