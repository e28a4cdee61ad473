//! The fused epilogue (bias, addend, post-ops, residuals) on a tile of C: its parameters
//! and the body every kernel table builds.

use super::unary::{apply_unary, PostOpRt};
use crate::ir::UnaryOp;

/// A simple conv epilogue ([`Epilogue::simple_form`]): the residual's slot, the clamp's
/// `(lo, hi)`.
pub type SimpleForm = (Option<usize>, Option<(f32, f32)>);

/// Most residuals a conv kernel slices per image or group ([`residual_slices`]).
pub const MAX_SLICED_RESIDUALS: usize = 4;

/// Elements `range` of each residual (one image's, or one group's, part of the output),
/// for the epilogue over that part: `&out[..residuals.len()]` are the slices. Panics
/// with more than [`MAX_SLICED_RESIDUALS`] residuals.
pub fn residual_slices<'a>(
    residuals: &[&'a [f32]],
    range: std::ops::Range<usize>,
) -> [&'a [f32]; MAX_SLICED_RESIDUALS] {
    assert!(
        residuals.len() <= MAX_SLICED_RESIDUALS,
        "epilogue: more than {MAX_SLICED_RESIDUALS} residuals"
    );
    let mut out: [&[f32]; MAX_SLICED_RESIDUALS] = [&[]; MAX_SLICED_RESIDUALS];
    for (d, r) in out.iter_mut().zip(residuals) {
        *d = &r[range.clone()];
    }
    out
}

/// What happens to each tile of C after its last K block.
pub struct Epilogue<'a> {
    /// Per-channel bias.
    pub bias: Option<&'a [f32]>,
    /// True when the channel is the row of C (Conv), false when it is the column (Gemm).
    pub channel_is_row: bool,
    /// Offset added to row/column indices to get the channel index.
    pub channel_offset: usize,
    /// A matrix added element-wise before the post-ops (Gemm's `beta * C`), same layout as C.
    pub addend: Option<&'a [f32]>,
    /// Fused post-ops, in order.
    pub post: &'a [PostOpRt],
    /// Residual tensors referenced by `PostOpRt::AddInput` (index into this list), laid
    /// out like C.
    pub residuals: &'a [&'a [f32]],
}

impl Epilogue<'_> {
    /// An epilogue that does nothing.
    pub const NONE: Epilogue<'static> = Epilogue {
        bias: None,
        channel_is_row: true,
        channel_offset: 0,
        addend: None,
        post: &[],
        residuals: &[],
    };

    /// True when the epilogue changes nothing.
    pub fn is_empty(&self) -> bool {
        self.bias.is_none() && self.addend.is_none() && self.post.is_empty()
    }

    /// Panics unless every slice the epilogue reads for rows `i0..i0+mr`, columns
    /// `j0..j0+nr` of C (row stride `ldc`) is long enough: the bias and every per-channel
    /// parameter hold those rows' (or columns') channels, the addend and every residual
    /// the block's elements. Kernels that index without bounds checks call it first.
    pub fn assert_fits(&self, ldc: usize, i0: usize, mr: usize, j0: usize, nr: usize) {
        if mr == 0 || nr == 0 {
            return;
        }
        let channels = if self.channel_is_row {
            self.channel_offset + i0 + mr
        } else {
            self.channel_offset + j0 + nr
        };
        let params = self.post.iter().flat_map(|p| match p {
            PostOpRt::Affine { scale, shift } => [Some(&scale[..]), Some(&shift[..])],
            PostOpRt::PRelu { slope } => [Some(&slope[..]), None],
            PostOpRt::AddInput { .. } | PostOpRt::Unary(_) => [None, None],
        });
        for p in params.flatten().chain(self.bias) {
            assert!(p.len() >= channels, "{} channels for {channels}", p.len());
        }
        // The block's last element, in C's layout.
        let end = (i0 + mr - 1) * ldc + j0 + nr;
        let slots = self.post.iter().filter_map(|p| match p {
            PostOpRt::AddInput { slot } => Some(self.residuals[*slot]),
            _ => None,
        });
        for m in slots.chain(self.addend) {
            assert!(m.len() >= end, "{} elements for {end}", m.len());
        }
    }

    /// The commonest conv epilogues as `(residual slot, clamp)`: per-row bias, then
    /// optionally the residual `AddInput`, then optionally ReLU (`(0, inf)`) or Clip
    /// (`(min, max)`, applied as `min(max(v, lo), hi)`, which is ReLU's `max(v, 0)` too);
    /// `None` for any other form (channels along columns, an addend, other post-ops).
    pub fn simple_form(&self) -> Option<SimpleForm> {
        if !self.channel_is_row || self.addend.is_some() {
            return None;
        }
        let clamp = |p: &PostOpRt| match p {
            PostOpRt::Unary(UnaryOp::Relu) => Some((0.0, f32::INFINITY)),
            PostOpRt::Unary(UnaryOp::Clip { min, max }) => Some((*min, *max)),
            _ => None,
        };
        match self.post {
            [] => Some((None, None)),
            [PostOpRt::AddInput { slot }] => Some((Some(*slot), None)),
            [u] => Some((None, Some(clamp(u)?))),
            [PostOpRt::AddInput { slot }, u] => Some((Some(*slot), Some(clamp(u)?))),
            _ => None,
        }
    }

    /// Applies the epilogue to rows `i0..i0+mr`, columns `j0..j0+nr` of C (the body of
    /// the tables' `epilogue` entry).
    #[inline(always)]
    pub fn apply_body(
        &self,
        c: &mut [f32],
        ldc: usize,
        i0: usize,
        mr: usize,
        j0: usize,
        nr: usize,
    ) {
        // The commonest epilogue, a conv's bias then ReLU / Clip, as one sweep.
        let fused = match (self.addend, self.bias, self.post) {
            (None, Some(b), [PostOpRt::Unary(u)]) if self.channel_is_row => match *u {
                UnaryOp::Relu => Some((b, 0.0, f32::INFINITY)),
                UnaryOp::Clip { min, max } => Some((b, min, max)),
                _ => None,
            },
            _ => None,
        };
        for i in i0..i0 + mr {
            let off = i * ldc + j0;
            let row = &mut c[off..off + nr];
            if let Some((bias, lo, hi)) = fused {
                let b = bias[self.channel_offset + i];
                for y in row.iter_mut() {
                    let v = *y + b;
                    let v = if v > lo { v } else { lo };
                    *y = if v < hi { v } else { hi };
                }
                continue;
            }
            if let Some(add) = self.addend {
                for (y, a) in row.iter_mut().zip(&add[off..off + nr]) {
                    *y += *a;
                }
            }
            if let Some(bias) = self.bias {
                if self.channel_is_row {
                    let b = bias[self.channel_offset + i];
                    for y in row.iter_mut() {
                        *y += b;
                    }
                } else {
                    let bs = &bias[self.channel_offset + j0..self.channel_offset + j0 + nr];
                    for (y, b) in row.iter_mut().zip(bs) {
                        *y += *b;
                    }
                }
            }
            for p in self.post {
                match p {
                    PostOpRt::Unary(u) => apply_unary(*u, row),
                    PostOpRt::Affine { scale, shift } => {
                        if self.channel_is_row {
                            let ch = self.channel_offset + i;
                            let (s, t) = (scale[ch], shift[ch]);
                            for y in row.iter_mut() {
                                *y = *y * s + t;
                            }
                        } else {
                            let ch = self.channel_offset + j0;
                            for ((y, s), t) in row
                                .iter_mut()
                                .zip(&scale[ch..ch + nr])
                                .zip(&shift[ch..ch + nr])
                            {
                                *y = *y * s + t;
                            }
                        }
                    }
                    PostOpRt::PRelu { slope } => {
                        if self.channel_is_row {
                            let s = slope[self.channel_offset + i];
                            for y in row.iter_mut() {
                                if *y < 0.0 {
                                    *y *= s;
                                }
                            }
                        } else {
                            let ch = self.channel_offset + j0;
                            for (y, s) in row.iter_mut().zip(&slope[ch..ch + nr]) {
                                if *y < 0.0 {
                                    *y *= s;
                                }
                            }
                        }
                    }
                    PostOpRt::AddInput { slot } => {
                        let r = &self.residuals[*slot][off..off + nr];
                        for (y, a) in row.iter_mut().zip(r) {
                            *y += *a;
                        }
                    }
                }
            }
        }
    }
}
