//! Records of the image family: Preprocess (and the image format names that model
//! inputs use too).

use super::{AttrsIn, AttrsOut};
use crate::ir::{ImageFormat, Op};

const FORMATS: &[(ImageFormat, &str)] = &[
    (ImageFormat::Nv12, "nv12"),
    (ImageFormat::Yuv444, "yuv444"),
    (ImageFormat::Rgb, "rgb"),
    (ImageFormat::Bgr, "bgr"),
    (ImageFormat::Gray, "gray"),
];

/// The file name of an image format.
pub(crate) fn image_format_name(f: ImageFormat) -> &'static str {
    FORMATS
        .iter()
        .find(|(x, _)| *x == f)
        .map_or("nv12", |(_, n)| n)
}

/// The image format of a file name.
pub(crate) fn image_format_from_name(s: &str) -> Option<ImageFormat> {
    FORMATS.iter().find(|(_, n)| *n == s).map(|(f, _)| *f)
}

pub(super) fn encode(op: &Op, a: &mut AttrsOut) -> Option<&'static str> {
    let Op::Preprocess {
        format,
        nhwc,
        mean,
        scale,
        to_bgr,
    } = op
    else {
        return None;
    };
    a.string("format", image_format_name(*format));
    a.bool("nhwc", *nhwc);
    a.floats("mean", mean);
    a.floats("scale", scale);
    a.bool("to_bgr", *to_bgr);
    Some("Preprocess")
}

pub(super) fn decode(name: &str, a: &AttrsIn) -> Option<Result<Op, String>> {
    let f = || -> Result<Op, String> {
        let s = a.string("format")?;
        Ok(Op::Preprocess {
            format: image_format_from_name(s)
                .ok_or_else(|| format!("Preprocess: unknown image format '{s}'"))?,
            nhwc: a.bool("nhwc")?,
            mean: a.floats("mean")?,
            scale: a.floats("scale")?,
            to_bgr: a.bool("to_bgr")?,
        })
    };
    (name == "Preprocess").then(f)
}
