//! Shape rule of the image family (Preprocess: raw u8 image to NCHW f32).

use crate::ir::{DType, ImageFormat};
use crate::Result;

use super::{one, Cx, TypedShape};

impl Cx<'_> {
    /// Preprocess: raw u8 image to NCHW f32.
    pub(super) fn preprocess(&self, format: &ImageFormat, nhwc: &bool) -> Result<Vec<TypedShape>> {
        let (dt, x) = self.req(0)?;
        if dt != DType::U8 {
            return Err(self.err(format!("raw image input must be u8, is {}", dt.name())));
        }
        let out = match (format, x) {
            (ImageFormat::Nv12, &[n, rows, w]) => {
                if rows % 3 != 0 || w % 2 != 0 {
                    return Err(self.err(format!(
                        "NV12 input {x:?} needs [N, H*3/2, W] with even H and W"
                    )));
                }
                vec![n, 3, rows / 3 * 2, w]
            }
            (ImageFormat::Nv12, _) => {
                return Err(self.err(format!("NV12 input {x:?} must be [N, H*3/2, W]")))
            }
            (f, &[n, a, b, c]) => {
                let want = if *f == ImageFormat::Gray { 1 } else { 3 };
                let (ch, h, w) = if *nhwc { (c, a, b) } else { (a, b, c) };
                if ch != want {
                    return Err(self.err(format!("{f:?} input {x:?} needs {want} channels")));
                }
                vec![n, ch, h, w]
            }
            (f, _) => return Err(self.err(format!("{f:?} input {x:?} must be 4-D"))),
        };
        one(DType::F32, out)
    }
}
