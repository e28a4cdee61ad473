//! Fused post-op planning shared by the conv and gemm families: the IR's [`PostOp`]s
//! resolved to their runtime form, per-channel parameters expanded and residual inputs
//! checked against the output shape.

use super::ctx::{expand_channel, Ctx};
use super::errors::{shape_err, unsup};
use crate::error::Result;
use crate::ir::PostOp;
use crate::kernels::unary::PostOpRt;

/// Most residual inputs one fused epilogue may reference.
pub(crate) const MAX_RESIDUALS: usize = 4;

/// The residual tensors of a fused epilogue: node inputs `res`, read from `io` (the first
/// `res.len()` entries are set, the rest empty).
pub(crate) fn residual_inputs<'a>(
    io: &crate::exec::Inputs<'a>,
    res: &[usize],
) -> [&'a [f32]; MAX_RESIDUALS] {
    let mut resid: [&[f32]; MAX_RESIDUALS] = [&[]; MAX_RESIDUALS];
    for (d, &i) in resid.iter_mut().zip(res) {
        *d = io.f32(i);
    }
    resid
}

/// A conv's fused epilogue: per-channel `bias`, then `post` reading `resid` (the first
/// entries of [`residual_inputs`], one per residual input).
pub(crate) fn conv_epilogue<'a>(
    bias: Option<&'a [f32]>,
    post: &'a [PostOpRt],
    resid: &'a [&'a [f32]],
) -> crate::kernels::gemm::Epilogue<'a> {
    crate::kernels::gemm::Epilogue {
        bias,
        post,
        residuals: resid,
        ..crate::kernels::gemm::Epilogue::NONE
    }
}

/// A leading `ChannelAffine` of unit scale (a MatMul's folded bias) as a plain bias of
/// `channels` entries, and the post-ops after it; else no bias and all of `post`. The
/// epilogue adds a bias before its post-ops, and `y * 1 + b` rounds as `y + b`, so the
/// results keep their bits while the tiles can fuse the bias.
pub(crate) fn leading_bias<'p>(
    c: &Ctx<'_>,
    post: &'p [PostOp],
    channels: usize,
) -> Result<(Option<Vec<f32>>, &'p [PostOp])> {
    match post.split_first() {
        Some((PostOp::ChannelAffine { scale, shift }, rest)) if scale.iter().all(|&s| s == 1.0) => {
            let b = expand_channel(c.n, shift, channels, "ChannelAffine shift")?;
            Ok((Some(b), rest))
        }
        _ => Ok((None, post)),
    }
}

/// Converts fused post-ops; returns the runtime list and the node inputs of residuals.
pub(crate) fn post_ops(
    c: &Ctx<'_>,
    post: &[PostOp],
    channels: usize,
) -> Result<(Vec<PostOpRt>, Vec<usize>)> {
    let mut out = Vec::new();
    let mut res = Vec::new();
    let oshape = c.oshape(0)?;
    for p in post {
        out.push(match p {
            PostOp::Unary(u) => PostOpRt::Unary(*u),
            PostOp::ChannelAffine { scale, shift } => PostOpRt::Affine {
                scale: expand_channel(c.n, scale, channels, "ChannelAffine scale")?,
                shift: expand_channel(c.n, shift, channels, "ChannelAffine shift")?,
            },
            PostOp::ChannelPRelu { slope } => PostOpRt::PRelu {
                slope: expand_channel(c.n, slope, channels, "ChannelPRelu slope")?,
            },
            PostOp::AddInput { input } => {
                if res.len() == MAX_RESIDUALS {
                    return Err(unsup(
                        c.n,
                        format!("more than {MAX_RESIDUALS} fused residual inputs"),
                    ));
                }
                c.require_f32(*input)?;
                if c.ishape(*input)? != oshape {
                    return Err(shape_err(
                        c.n,
                        format!("fused residual input {input} does not have the output shape"),
                    ));
                }
                res.push(*input);
                PostOpRt::AddInput {
                    slot: res.len() - 1,
                }
            }
        });
    }
    Ok((out, res))
}
