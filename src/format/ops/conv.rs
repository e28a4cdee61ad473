//! Records of the conv family: Conv, ConvNhwc, ExpandConvNhwc, DwProjectNhwc, ConvTranspose.

use super::{AttrsIn, AttrsOut};
use crate::ir::Op;

pub(super) fn encode(op: &Op, a: &mut AttrsOut) -> Option<&'static str> {
    Some(match op {
        Op::Conv { geom, group, post } => {
            a.geom(geom);
            a.usize("group", *group);
            a.post("post", post);
            "Conv"
        }
        Op::ConvNhwc { geom, group, post } => {
            a.geom(geom);
            a.usize("group", *group);
            a.post("post", post);
            "ConvNhwc"
        }
        Op::ExpandConvNhwc {
            expand,
            geom,
            group,
            post,
        } => {
            a.post("expand", expand);
            a.geom(geom);
            a.usize("group", *group);
            a.post("post", post);
            "ExpandConvNhwc"
        }
        Op::DwProjectNhwc {
            expand,
            geom,
            group,
            post,
            project,
        } => {
            // No expansion: no `expand` attribute.
            if let Some(e) = expand {
                a.post("expand", e);
            }
            a.geom(geom);
            a.usize("group", *group);
            a.post("post", post);
            a.post("project", project);
            "DwProjectNhwc"
        }
        Op::ConvTranspose {
            geom,
            group,
            output_padding,
            output_shape,
            post,
        } => {
            a.geom(geom);
            a.usize("group", *group);
            a.usizes("output_padding", output_padding);
            a.usizes("output_shape", output_shape);
            // Written only when something is fused, so that files without a fused
            // epilogue stay byte-identical to those of earlier versions.
            if !post.is_empty() {
                a.post("post", post);
            }
            "ConvTranspose"
        }
        _ => return None,
    })
}

pub(super) fn decode(name: &str, a: &AttrsIn) -> Option<Result<Op, String>> {
    let f = || -> Result<Op, String> {
        Ok(match name {
            "Conv" => Op::Conv {
                geom: a.geom()?,
                group: a.usize("group")?,
                post: a.post("post")?,
            },
            "ConvNhwc" => Op::ConvNhwc {
                geom: a.geom()?,
                group: a.usize("group")?,
                post: a.post("post")?,
            },
            "ExpandConvNhwc" => Op::ExpandConvNhwc {
                expand: a.post("expand")?,
                geom: a.geom()?,
                group: a.usize("group")?,
                post: a.post("post")?,
            },
            "DwProjectNhwc" => Op::DwProjectNhwc {
                expand: match a.get("expand") {
                    Some(_) => Some(a.post("expand")?),
                    None => None,
                },
                geom: a.geom()?,
                group: a.usize("group")?,
                post: a.post("post")?,
                project: a.post("project")?,
            },
            _ => Op::ConvTranspose {
                geom: a.geom()?,
                group: a.usize("group")?,
                output_padding: a.usizes("output_padding")?,
                output_shape: a.usizes("output_shape")?,
                post: match a.get("post") {
                    Some(_) => a.post("post")?,
                    None => vec![],
                },
            },
        })
    };
    matches!(
        name,
        "Conv" | "ConvNhwc" | "ExpandConvNhwc" | "DwProjectNhwc" | "ConvTranspose"
    )
    .then(f)
}
