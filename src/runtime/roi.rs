//! ROI preprocessing for `hbDNNRoiInfer`: crop a region of interest from an NV12 frame
//! and resize it bilinearly to a model's input size.
//!
//! Pure functions over byte slices; nothing here allocates except [`crop_resize`]'s
//! caller-visible output. Conventions (those of `hbDNNRoi`):
//! - ROI bounds are *inclusive*: the crop is `[left, right] × [top, bottom]`;
//! - NV12 chroma is subsampled 2×2, so `left`/`top` must be even and `right`/`bottom`
//!   odd (the crop covers whole chroma samples), and frame and output sizes are even;
//! - an ROI side is 2..=[`MAX_ROI_SIDE`] pixels and lies inside the frame;
//! - resizing samples at pixel centres (`src = (dst + 0.5) * scale - 0.5`, clamped at
//!   the borders), rounding to nearest; Y and the interleaved U/V pairs are resized
//!   independently.

use crate::error::{Error, Result};
use crate::ir::CoordMode;
use crate::kernels::resize;
use crate::runtime::Roi;

/// Largest accepted ROI side in pixels (the larger hardware generation's limit).
pub const MAX_ROI_SIDE: usize = 4096;

/// A borrowed NV12 frame: a Y plane and an interleaved UV plane, each with a row stride.
#[derive(Debug, Clone, Copy)]
pub struct Nv12Frame<'a> {
    y: &'a [u8],
    uv: &'a [u8],
    width: usize,
    height: usize,
    y_stride: usize,
    uv_stride: usize,
}

impl<'a> Nv12Frame<'a> {
    /// A frame of `width × height` pixels whose planes have row strides `y_stride` and
    /// `uv_stride` bytes. Checks that sizes are even, strides cover a row and the planes
    /// hold `height` (Y) and `height / 2` (UV) rows.
    pub fn new(
        y: &'a [u8],
        uv: &'a [u8],
        width: usize,
        height: usize,
        y_stride: usize,
        uv_stride: usize,
    ) -> Result<Self> {
        let bad = |reason: String| Error::InvalidArgument {
            name: "NV12 frame".into(),
            reason,
        };
        if width == 0 || height == 0 || !width.is_multiple_of(2) || !height.is_multiple_of(2) {
            return Err(bad(format!(
                "size {width}x{height} must be non-empty and even"
            )));
        }
        if y_stride < width || uv_stride < width {
            return Err(bad(format!(
                "strides {y_stride}/{uv_stride} are smaller than the width {width}"
            )));
        }
        let y_need = y_stride * (height - 1) + width;
        let uv_need = uv_stride * (height / 2 - 1) + width;
        if y.len() < y_need {
            return Err(bad(format!(
                "Y plane has {} bytes, needs {y_need}",
                y.len()
            )));
        }
        if uv.len() < uv_need {
            return Err(bad(format!(
                "UV plane has {} bytes, needs {uv_need}",
                uv.len()
            )));
        }
        Ok(Nv12Frame {
            y,
            uv,
            width,
            height,
            y_stride,
            uv_stride,
        })
    }

    /// A frame stored as one contiguous NV12 buffer (Y rows then UV rows, same stride).
    pub fn contiguous(data: &'a [u8], width: usize, height: usize, stride: usize) -> Result<Self> {
        let split = stride.saturating_mul(height).min(data.len());
        let (y, uv) = data.split_at(split);
        Nv12Frame::new(y, uv, width, height, stride, stride)
    }

    /// Frame width in pixels.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Frame height in pixels.
    pub fn height(&self) -> usize {
        self.height
    }
}

/// Checks an ROI against a `frame_w × frame_h` frame (see the module rules).
pub fn validate_roi(roi: &Roi, frame_w: usize, frame_h: usize) -> Result<()> {
    let bad = |reason: String| Error::InvalidArgument {
        name: format!(
            "roi [{}, {}, {}, {}]",
            roi.left, roi.top, roi.right, roi.bottom
        ),
        reason,
    };
    if roi.left < 0 || roi.top < 0 {
        return Err(bad("left and top must be >= 0".into()));
    }
    if roi.right < roi.left || roi.bottom < roi.top {
        return Err(bad(
            "empty region (right < left or bottom < top; bounds are inclusive)".into(),
        ));
    }
    if roi.right as usize >= frame_w || roi.bottom as usize >= frame_h {
        return Err(bad(format!(
            "outside the {frame_w}x{frame_h} frame (right must be < width, bottom < height)"
        )));
    }
    if roi.left % 2 != 0 || roi.top % 2 != 0 {
        return Err(bad(
            "left and top must be even (NV12 chroma alignment)".into()
        ));
    }
    if roi.right % 2 != 1 || roi.bottom % 2 != 1 {
        return Err(bad(
            "right and bottom must be odd (NV12 chroma alignment)".into()
        ));
    }
    let (w, h) = roi_size(roi);
    if w > MAX_ROI_SIDE || h > MAX_ROI_SIDE {
        return Err(bad(format!(
            "size {w}x{h} exceeds {MAX_ROI_SIDE} pixels per side"
        )));
    }
    Ok(())
}

/// Width and height of an ROI (inclusive bounds); the ROI must be valid.
pub fn roi_size(roi: &Roi) -> (usize, usize) {
    (
        (roi.right - roi.left + 1) as usize,
        (roi.bottom - roi.top + 1) as usize,
    )
}

/// What [`crop_resize`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoiOutput {
    /// NV12: `w*h` Y bytes followed by `w*h/2` interleaved UV bytes.
    Nv12,
    /// Y plane only (`w*h` bytes), for gray models.
    Y,
}

impl RoiOutput {
    /// Bytes written for an `out_w × out_h` output.
    pub fn byte_size(self, out_w: usize, out_h: usize) -> usize {
        match self {
            RoiOutput::Nv12 => out_w * out_h * 3 / 2,
            RoiOutput::Y => out_w * out_h,
        }
    }
}

/// Crops `roi` from `frame` and resizes it to `out_w × out_h` into `out`, which must hold
/// exactly [`RoiOutput::byte_size`] bytes.
pub fn crop_resize(
    frame: &Nv12Frame<'_>,
    roi: &Roi,
    kind: RoiOutput,
    out_w: usize,
    out_h: usize,
    out: &mut [u8],
) -> Result<()> {
    validate_roi(roi, frame.width, frame.height)?;
    if out_w == 0 || out_h == 0 || !out_w.is_multiple_of(2) || !out_h.is_multiple_of(2) {
        return Err(Error::InvalidArgument {
            name: "ROI output size".into(),
            reason: format!("{out_w}x{out_h} must be non-empty and even"),
        });
    }
    let need = kind.byte_size(out_w, out_h);
    if out.len() != need {
        return Err(Error::InvalidArgument {
            name: "ROI output buffer".into(),
            reason: format!("has {} bytes, expected {need}", out.len()),
        });
    }
    let (w, h) = roi_size(roi);
    let (x0, y0) = (roi.left as usize, roi.top as usize);
    let (y_out, uv_out) = out.split_at_mut(out_w * out_h);
    resize_plane(
        Plane {
            data: frame.y,
            stride: frame.y_stride,
            x0,
            y0,
            w,
            h,
            channels: 1,
        },
        y_out,
        out_w,
        out_h,
    );
    if kind == RoiOutput::Nv12 {
        resize_plane(
            Plane {
                data: frame.uv,
                stride: frame.uv_stride,
                x0: x0 / 2,
                y0: y0 / 2,
                w: w / 2,
                h: h / 2,
                channels: 2,
            },
            uv_out,
            out_w / 2,
            out_h / 2,
        );
    }
    Ok(())
}

/// A window of an interleaved 8-bit plane (in samples, not bytes, for x/w).
struct Plane<'a> {
    data: &'a [u8],
    stride: usize,
    x0: usize,
    y0: usize,
    w: usize,
    h: usize,
    channels: usize,
}

/// One axis of a bilinear resize: for each output position, the two source indices
/// (relative to the window) and the weight of the second; the same taps as an ONNX
/// `Resize` with half-pixel coordinates ([`resize::linear_taps`]).
fn axis_taps(src: usize, dst: usize) -> Vec<(usize, usize, f32)> {
    resize::linear_taps(CoordMode::HalfPixel, dst as f32 / src as f32, src, dst)
}

/// Bilinear resize of a plane window into a dense `dst_w × dst_h` interleaved output.
/// The window must lie inside `data` (guaranteed by [`Nv12Frame::new`] + ROI checks).
fn resize_plane(src: Plane<'_>, dst: &mut [u8], dst_w: usize, dst_h: usize) {
    let xs = axis_taps(src.w, dst_w);
    let ys = axis_taps(src.h, dst_h);
    let c = src.channels;
    for (dy, &(r0, r1, ty)) in ys.iter().enumerate() {
        let row0 = (src.y0 + r0) * src.stride + src.x0 * c;
        let row1 = (src.y0 + r1) * src.stride + src.x0 * c;
        let out_row = &mut dst[dy * dst_w * c..(dy + 1) * dst_w * c];
        for (dx, &(c0, c1, tx)) in xs.iter().enumerate() {
            for ch in 0..c {
                let p = |row: usize, col: usize| src.data[row + col * c + ch] as f32;
                let top = p(row0, c0) * (1.0 - tx) + p(row0, c1) * tx;
                let bottom = p(row1, c0) * (1.0 - tx) + p(row1, c1) * tx;
                let v = top * (1.0 - ty) + bottom * ty;
                out_row[dx * c + ch] = v.round().clamp(0.0, 255.0) as u8;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roi(left: i32, top: i32, right: i32, bottom: i32) -> Roi {
        Roi {
            left,
            top,
            right,
            bottom,
        }
    }

    /// A `w×h` NV12 frame whose Y value is `x + 2y` and whose U/V are constant.
    fn gradient_frame(w: usize, h: usize) -> Vec<u8> {
        let mut data = vec![0u8; w * h * 3 / 2];
        for y in 0..h {
            for x in 0..w {
                data[y * w + x] = (x + 2 * y) as u8;
            }
        }
        for i in 0..w * h / 4 {
            data[w * h + 2 * i] = 100;
            data[w * h + 2 * i + 1] = 200;
        }
        data
    }

    #[test]
    fn roi_rules() {
        assert!(validate_roi(&roi(0, 0, 15, 15), 16, 16).is_ok());
        let err = |r: Roi| validate_roi(&r, 16, 16).unwrap_err().to_string();
        assert!(err(roi(1, 0, 15, 15)).contains("even"));
        assert!(err(roi(0, 0, 14, 15)).contains("odd"));
        assert!(err(roi(0, 0, 17, 15)).contains("outside"));
        assert!(err(roi(4, 0, 1, 15)).contains("empty"));
        assert!(err(roi(-2, 0, 1, 15)).contains(">= 0"));
        assert!(validate_roi(&roi(0, 0, 8191, 1), 9000, 9000)
            .unwrap_err()
            .to_string()
            .contains("exceeds"));
    }

    #[test]
    fn identity_resize_copies_the_crop() {
        let (w, h) = (16, 12);
        let data = gradient_frame(w, h);
        let frame = Nv12Frame::contiguous(&data, w, h, w).expect("frame");
        let r = roi(2, 4, 9, 11);
        let mut out = vec![0u8; RoiOutput::Nv12.byte_size(8, 8)];
        crop_resize(&frame, &r, RoiOutput::Nv12, 8, 8, &mut out).expect("resize");
        for y in 0..8 {
            for x in 0..8 {
                assert_eq!(out[y * 8 + x] as usize, (x + 2) + 2 * (y + 4));
            }
        }
        assert!(out[64..].chunks(2).all(|uv| uv == [100, 200]));
    }

    #[test]
    fn downscale_by_two_averages_pairs() {
        let (w, h) = (8, 8);
        let data = gradient_frame(w, h);
        let frame = Nv12Frame::contiguous(&data, w, h, w).expect("frame");
        let mut out = vec![0u8; 4 * 4];
        crop_resize(&frame, &roi(0, 0, 7, 7), RoiOutput::Y, 4, 4, &mut out).expect("resize");
        // Sample centres fall between source pixels 2x and 2x+1 in both axes.
        for y in 0..4 {
            for x in 0..4 {
                let expected = (2 * x) as f32 + 0.5 + 2.0 * ((2 * y) as f32 + 0.5);
                assert_eq!(out[y * 4 + x], expected.round() as u8, "at {x},{y}");
            }
        }
    }

    #[test]
    fn upscale_stays_within_source_range_and_uses_strides() {
        let (w, h, stride) = (4, 4, 16);
        let mut y = vec![0u8; stride * h];
        let mut uv = vec![0u8; stride * h / 2];
        for row in 0..h {
            for col in 0..w {
                y[row * stride + col] = 10 * (col as u8) + 50;
            }
        }
        for row in 0..h / 2 {
            for col in 0..w {
                uv[row * stride + col] = 7;
            }
        }
        let frame = Nv12Frame::new(&y, &uv, w, h, stride, stride).expect("frame");
        let mut out = vec![0u8; RoiOutput::Nv12.byte_size(16, 8)];
        crop_resize(&frame, &roi(0, 0, 3, 3), RoiOutput::Nv12, 16, 8, &mut out).expect("resize");
        assert!(out[..128].iter().all(|&v| (50..=80).contains(&v)));
        // Monotonic along each row.
        for row in out[..128].chunks(16) {
            assert!(row.windows(2).all(|p| p[0] <= p[1]));
        }
        assert!(out[128..].iter().all(|&v| v == 7));
    }

    #[test]
    fn frame_and_output_checks() {
        let data = vec![0u8; 10];
        assert!(Nv12Frame::contiguous(&data, 4, 4, 4).is_err());
        assert!(Nv12Frame::contiguous(&data, 3, 2, 3).is_err());
        let data = gradient_frame(8, 8);
        let frame = Nv12Frame::contiguous(&data, 8, 8, 8).expect("frame");
        let mut out = vec![0u8; 5];
        assert!(crop_resize(&frame, &roi(0, 0, 7, 7), RoiOutput::Y, 2, 2, &mut out).is_err());
        assert!(crop_resize(&frame, &roi(0, 0, 7, 7), RoiOutput::Y, 3, 2, &mut out).is_err());
    }
}
