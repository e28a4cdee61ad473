//! Shape rules of the conv family (Conv, ConvTranspose), with the window arithmetic pooling shares and the `auto_pad` / ConvTranspose pad resolution the compiler applies.

use crate::ir::{ConvGeom, DType, PostOp};
use crate::{Error, Result};

use super::{one, Cx, TypedShape};

impl Cx<'_> {
    /// Conv: `[N, M] + window` with fused epilogues checked.
    pub(super) fn conv_node(
        &self,
        geom: &ConvGeom,
        group: &usize,
        post: &[PostOp],
    ) -> Result<Vec<TypedShape>> {
        let s = self.conv(geom, *group)?;
        let ch = s[1];
        self.check_post(post, &s, ch)?;
        one(DType::F32, s)
    }

    /// A channels-last conv: X `[N, H, W, Cin]`, W `[Cout, Cin / group, KH, KW]`.
    pub(super) fn conv_nhwc_node(
        &self,
        geom: &ConvGeom,
        group: usize,
        post: &[PostOp],
    ) -> Result<Vec<TypedShape>> {
        let x = self.shape(0)?;
        let w = self.shape(1)?;
        if x.len() != 4 || geom.kernel.len() != 2 {
            return Err(self.err(format!("input {x:?} is not [N, H, W, C] with a 2-D kernel")));
        }
        let ci = x[3];
        if w.len() != 4 || w[2..] != geom.kernel[..] {
            return Err(self.err(format!(
                "weights {w:?} do not match kernel {:?}",
                geom.kernel
            )));
        }
        if group == 0 || w[0] % group != 0 || Some(ci) != w[1].checked_mul(group) {
            return Err(self.err(format!(
                "input channels {ci} do not match weights {w:?} with group {group}"
            )));
        }
        let co = w[0];
        if let Some((_, b)) = self.opt(2)? {
            if b != [co] {
                return Err(self.err(format!("bias {b:?} does not match {co} channels")));
            }
        }
        let sp = self.window(geom, false, &[x[0], ci, x[1], x[2]])?;
        let out = vec![x[0], sp[0], sp[1], co];
        self.check_post(post, &out, co)?;
        one(DType::F32, out)
    }

    /// `ExpandConvNhwc`: X `[N, H, W, Cin]` times W1 `[Cin, Ce]` (its epilogue without
    /// residuals), then the depthwise conv of `ConvNhwc` with W at input 2, B at 3.
    pub(super) fn expand_conv_nhwc_node(
        &self,
        expand: &[PostOp],
        geom: &ConvGeom,
        group: usize,
        post: &[PostOp],
    ) -> Result<Vec<TypedShape>> {
        let x = self.shape(0)?;
        let w1 = self.shape(1)?;
        let w = self.shape(2)?;
        if x.len() != 4 || geom.kernel.len() != 2 {
            return Err(self.err(format!("input {x:?} is not [N, H, W, C] with a 2-D kernel")));
        }
        if w1.len() != 2 || w1[0] != x[3] {
            return Err(self.err(format!("expansion {w1:?} does not take {} channels", x[3])));
        }
        let ce = w1[1];
        if expand.iter().any(|p| matches!(p, PostOp::AddInput { .. })) {
            return Err(self.err("the expansion's epilogue adds no residual".to_string()));
        }
        let e = [x[0], x[1], x[2], ce];
        self.check_post(expand, &e, ce)?;
        if w.len() != 4 || w[2..] != geom.kernel[..] || w[1] != 1 || w[0] != ce || group != ce {
            return Err(self.err(format!(
                "weights {w:?} (group {group}) are not a depthwise {:?} kernel over {ce} channels",
                geom.kernel
            )));
        }
        if let Some((_, b)) = self.opt(3)? {
            if b != [ce] {
                return Err(self.err(format!("bias {b:?} does not match {ce} channels")));
            }
        }
        let sp = self.window(geom, false, &[x[0], ce, x[1], x[2]])?;
        let out = vec![x[0], sp[0], sp[1], ce];
        self.check_post(post, &out, ce)?;
        one(DType::F32, out)
    }

    /// `DwProjectNhwc`: the depthwise conv of `ConvNhwc` (or `ExpandConvNhwc`'s pair, with
    /// `expand`) on its own inputs, its epilogue without residuals, then the 1x1
    /// projection by W2 `[C, Cout]` right after them with the epilogue `project`.
    pub(super) fn dw_project_nhwc_node(
        &self,
        expand: Option<&[PostOp]>,
        geom: &ConvGeom,
        group: usize,
        (post, project): (&[PostOp], &[PostOp]),
    ) -> Result<Vec<TypedShape>> {
        if post.iter().any(|p| matches!(p, PostOp::AddInput { .. })) {
            return Err(self.err("the depthwise conv's epilogue adds no residual".to_string()));
        }
        let (inner, at) = match expand {
            Some(e) => (self.expand_conv_nhwc_node(e, geom, group, post)?, 4),
            None => (self.conv_nhwc_node(geom, group, post)?, 3),
        };
        let d = &inner[0].1;
        let c = d[3];
        if group != c {
            return Err(self.err(format!(
                "a projection after a conv of {group} groups of {c} channels"
            )));
        }
        let w2 = self.shape(at)?;
        let &[wc, co] = w2 else {
            return Err(self.err(format!("projection {w2:?} is not [C, Cout]")));
        };
        if wc != c {
            return Err(self.err(format!("projection {w2:?} does not take {c} channels")));
        }
        let out = vec![d[0], d[1], d[2], co];
        self.check_post(project, &out, co)?;
        one(DType::F32, out)
    }

    pub(super) fn spatial_check(&self, geom: &ConvGeom, x: &[usize]) -> Result<usize> {
        let ns = geom.kernel.len();
        if x.len() != ns + 2 {
            return Err(self.err(format!("input {x:?} is not [N, C] + {ns} spatial dims")));
        }
        if geom.strides.len() != ns || geom.dilations.len() != ns || geom.pads.len() != 2 * ns {
            return Err(self.err("strides/dilations/pads do not match the kernel rank"));
        }
        if geom.strides.contains(&0) || geom.dilations.contains(&0) || geom.kernel.contains(&0) {
            return Err(self.err("kernel, strides and dilations must be positive"));
        }
        Ok(ns)
    }

    /// Spatial output sizes of a Conv/pool window.
    pub(super) fn window(
        &self,
        geom: &ConvGeom,
        ceil_mode: bool,
        x: &[usize],
    ) -> Result<Vec<usize>> {
        let ns = self.spatial_check(geom, x)?;
        let mut g = geom.clone();
        resolve_auto_pad(&mut g, &x[2..]);
        let mut out = Vec::with_capacity(ns);
        for i in 0..ns {
            let (k, s, d) = (
                g.kernel[i] as u128,
                g.strides[i] as u128,
                g.dilations[i] as u128,
            );
            let (pb, pe, xi) = (g.pads[i] as u128, g.pads[i + ns] as u128, x[i + 2] as u128);
            let eff = d * (k - 1) + 1;
            let total = xi + pb + pe;
            if total < eff {
                return Err(self.err(format!(
                    "spatial dim {i}: padded input {total} is smaller than the kernel extent {eff}"
                )));
            }
            let num = total - eff;
            let mut o = if ceil_mode {
                num.div_ceil(s) + 1
            } else {
                num / s + 1
            };
            if ceil_mode && (o - 1) * s >= xi + pb {
                o -= 1;
            }
            out.push(usize::try_from(o).map_err(|_| self.err("output too large"))?);
        }
        Ok(out)
    }

    pub(super) fn conv(&self, geom: &ConvGeom, group: usize) -> Result<Vec<usize>> {
        let x = self.shape(0)?;
        let w = self.shape(1)?;
        let ns = self.spatial_check(geom, x)?;
        if w.len() != ns + 2 || w[2..] != geom.kernel[..] {
            return Err(self.err(format!(
                "weights {w:?} do not match kernel {:?}",
                geom.kernel
            )));
        }
        if group == 0 || w[0] % group != 0 || Some(x[1]) != w[1].checked_mul(group) {
            return Err(self.err(format!(
                "input channels {} do not match weights {w:?} with group {group}",
                x[1]
            )));
        }
        if let Some((_, b)) = self.opt(2)? {
            if b != [w[0]] {
                return Err(self.err(format!(
                    "bias {b:?} does not match {} output channels",
                    w[0]
                )));
            }
        }
        let mut out = vec![x[0], w[0]];
        out.extend(self.window(geom, false, x)?);
        Ok(out)
    }

    pub(super) fn conv_transpose(
        &self,
        geom: &ConvGeom,
        group: usize,
        output_padding: &[usize],
        output_shape: &[usize],
    ) -> Result<Vec<TypedShape>> {
        let x = self.shape(0)?;
        let w = self.shape(1)?;
        let ns = self.spatial_check(geom, x)?;
        if w.len() != ns + 2 || w[2..] != geom.kernel[..] {
            return Err(self.err(format!(
                "weights {w:?} do not match kernel {:?}",
                geom.kernel
            )));
        }
        if group == 0 || w[0] != x[1] || x[1] % group != 0 {
            return Err(self.err(format!(
                "input channels {} do not match weights {w:?} with group {group}",
                x[1]
            )));
        }
        let m = w[1]
            .checked_mul(group)
            .ok_or_else(|| self.err("output channels overflow"))?;
        if let Some((_, b)) = self.opt(2)? {
            if b != [m] {
                return Err(self.err(format!("bias {b:?} does not match {m} output channels")));
            }
        }
        let mut g = geom.clone();
        let mut op = output_padding.to_vec();
        let sp = resolve_conv_transpose_pads(self.node, &mut g, &mut op, output_shape, &x[2..])?;
        let mut out = vec![x[0], m];
        out.extend(sp);
        Ok(vec![(DType::F32, out)])
    }
}

/// Turns `SAME_UPPER`/`SAME_LOWER`/`VALID` into explicit pads for an input of spatial
/// size `input_spatial` (Conv and pooling), and clears `auto_pad`. A geometry without
/// `auto_pad` is left as it is; so is one whose rank differs from `input_spatial`
/// (`infer_node` reports that mismatch as a shape error).
pub fn resolve_auto_pad(geom: &mut ConvGeom, input_spatial: &[usize]) {
    let Some(mode) = geom.auto_pad.clone() else {
        return;
    };
    let ns = input_spatial.len();
    if geom.kernel.len() != ns || geom.strides.len() != ns || geom.dilations.len() != ns {
        return;
    }
    let mut pads = vec![0usize; 2 * ns];
    if mode != "VALID" {
        for i in 0..ns {
            let (k, s, d, x) = (
                geom.kernel[i],
                geom.strides[i].max(1),
                geom.dilations[i],
                input_spatial[i],
            );
            let eff = d.saturating_mul(k.saturating_sub(1)).saturating_add(1);
            let out = x.div_ceil(s);
            let total = out
                .saturating_sub(1)
                .saturating_mul(s)
                .saturating_add(eff)
                .saturating_sub(x);
            let (small, big) = (total / 2, total - total / 2);
            if mode == "SAME_LOWER" {
                pads[i] = big;
                pads[i + ns] = small;
            } else {
                pads[i] = small;
                pads[i + ns] = big;
            }
        }
    }
    geom.pads = pads;
    geom.auto_pad = None;
}

/// For ConvTranspose: turns `output_shape` and/or `auto_pad` into explicit pads for an
/// input of spatial size `input_spatial`, clears `auto_pad`, and returns the spatial
/// output size. After this the output is `s*(x-1) + output_padding + eff - pads`, so a
/// kernel only needs explicit pads and output_padding; an `output_shape` larger than
/// the kernel can reach becomes extra `output_padding` (trailing rows that only get the
/// bias), so `output_padding` may then exceed the stride. `node` names the node in errors.
pub fn resolve_conv_transpose_pads(
    node: &str,
    geom: &mut ConvGeom,
    output_padding: &mut [usize],
    output_shape: &[usize],
    input_spatial: &[usize],
) -> Result<Vec<usize>> {
    let ns = input_spatial.len();
    let err = |r: String| Error::shape(node, "ConvTranspose", r);
    if geom.kernel.len() != ns
        || geom.strides.len() != ns
        || geom.dilations.len() != ns
        || geom.pads.len() != 2 * ns
        || output_padding.len() != ns
        || !(output_shape.is_empty() || output_shape.len() == ns)
    {
        return Err(err(format!(
            "geometry does not match the {ns} spatial dims of the input"
        )));
    }
    let mut out = Vec::with_capacity(ns);
    let mode = geom.auto_pad.take();
    for i in 0..ns {
        let s = geom.strides[i] as i128;
        let eff = (geom.dilations[i] as i128) * (geom.kernel[i] as i128 - 1) + 1;
        let x = input_spatial[i] as i128;
        let full = s * (x - 1) + output_padding[i] as i128 + eff;
        let target = if !output_shape.is_empty() {
            Some(output_shape[i] as i128)
        } else if mode.as_deref().is_some_and(|m| m != "VALID") {
            Some(x * s)
        } else {
            None
        };
        match target {
            Some(t) => {
                let total = full - t;
                if total < 0 {
                    // A larger requested output gets trailing rows (as onnxruntime
                    // does): no pads, the excess added to output_padding.
                    geom.pads[i] = 0;
                    geom.pads[i + ns] = 0;
                    output_padding[i] = output_padding[i].saturating_add((-total) as usize);
                    out.push(t as usize);
                    continue;
                }
                let (small, big) = ((total / 2) as usize, (total - total / 2) as usize);
                if mode.as_deref() == Some("SAME_UPPER") {
                    geom.pads[i] = small;
                    geom.pads[i + ns] = big;
                } else {
                    geom.pads[i] = big;
                    geom.pads[i + ns] = small;
                }
                out.push(t as usize);
            }
            None => {
                if mode.as_deref() == Some("VALID") {
                    geom.pads[i] = 0;
                    geom.pads[i + ns] = 0;
                }
                let o = full - geom.pads[i] as i128 - geom.pads[i + ns] as i128;
                if o <= 0 {
                    return Err(err(format!("pads leave no output in spatial dim {i}")));
                }
                out.push(usize::try_from(o).map_err(|_| err("output too large".into()))?);
            }
        }
    }
    Ok(out)
}
