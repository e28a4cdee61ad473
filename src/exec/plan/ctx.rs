//! What every family's planning reads: [`Ctx`] (a node with its graph, typed access to
//! its inputs, outputs and constant operands) and small shared checks (axis, per-channel
//! parameters, NCHW geometry).

use super::errors::{bad_attr, shape_err, unsup};
use crate::error::Result;
use crate::ir::{self, DType, Graph, Node};

/// The node being planned, in its graph.
pub(crate) struct Ctx<'a> {
    pub g: &'a Graph,
    pub n: &'a Node,
    /// Intra-op threads of the plan.
    pub threads: usize,
    /// The bf16 kernels when the plan computes in bf16 (`PlanOptions::precision`).
    pub bf16: Option<&'static crate::kernels::bf16::Bf16Table>,
}

impl<'a> Ctx<'a> {
    pub(crate) fn has(&self, i: usize) -> bool {
        matches!(self.n.inputs.get(i), Some(Some(_)))
    }
    pub(crate) fn vin(&self, i: usize) -> Result<&'a ir::Value> {
        match self.n.inputs.get(i) {
            Some(Some(v)) => Ok(&self.g.values[*v]),
            _ => Err(shape_err(self.n, format!("missing input {i}"))),
        }
    }
    pub(crate) fn ishape(&self, i: usize) -> Result<&'a [usize]> {
        let v = self.vin(i)?;
        v.shape
            .as_deref()
            .ok_or_else(|| shape_err(self.n, format!("input '{}' has no static shape", v.name)))
    }
    pub(crate) fn itype(&self, i: usize) -> Result<DType> {
        Ok(self.vin(i)?.dtype)
    }
    pub(crate) fn oshape(&self, k: usize) -> Result<&'a [usize]> {
        let v = self
            .n
            .outputs
            .get(k)
            .ok_or_else(|| shape_err(self.n, format!("missing output {k}")))?;
        self.g.values[*v]
            .shape
            .as_deref()
            .ok_or_else(|| shape_err(self.n, "output has no static shape"))
    }
    pub(crate) fn otype(&self, k: usize) -> Result<DType> {
        let v = self
            .n
            .outputs
            .get(k)
            .ok_or_else(|| shape_err(self.n, format!("missing output {k}")))?;
        Ok(self.g.values[*v].dtype)
    }
    pub(crate) fn konst(&self, i: usize) -> Option<&'a ir::Tensor> {
        self.g.const_input(self.n, i).map(|t| &**t)
    }
    pub(crate) fn const_f32(&self, i: usize, what: &str) -> Result<Vec<f32>> {
        match self.konst(i) {
            Some(t) if t.dtype() == DType::F32 => Ok(t.to_f32_vec()),
            Some(_) => Err(unsup(self.n, format!("{what} must be f32"))),
            None => Err(unsup(self.n, format!("{what} must be a constant"))),
        }
    }
    pub(crate) fn const_ints(&self, i: usize, what: &str) -> Result<Vec<i64>> {
        self.konst(i)
            .and_then(|t| t.to_i64_vec())
            .ok_or_else(|| unsup(self.n, format!("{what} must be a constant integer tensor")))
    }
    pub(crate) fn require_f32(&self, i: usize) -> Result<()> {
        let t = self.itype(i)?;
        if t != DType::F32 {
            return Err(unsup(
                self.n,
                format!("input {i} has dtype {}; only f32 is supported", t.name()),
            ));
        }
        Ok(())
    }
    pub(crate) fn same_numel(&self, i: usize, k: usize) -> Result<usize> {
        let a: usize = self.ishape(i)?.iter().product();
        let b: usize = self.oshape(k)?.iter().product();
        if a != b {
            return Err(shape_err(
                self.n,
                format!("input has {a} elements, output {b}"),
            ));
        }
        Ok(a)
    }
}

impl Ctx<'_> {
    /// Checks that every output is declared `t` (what the kernel writes), so a graph whose
    /// outputs are typed differently fails at plan time instead of being misread later.
    pub(crate) fn outputs_typed(&self, t: DType) -> Result<()> {
        for k in 0..self.n.outputs.len() {
            let got = self.otype(k)?;
            if got != t {
                return Err(unsup(
                    self.n,
                    format!(
                        "output {k} declared {}, the kernel produces {}",
                        got.name(),
                        t.name()
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// Normalises attribute `axis` against `rank` (negative counts from the end).
pub(crate) fn norm_axis(n: &Node, axis: i64, rank: usize) -> Result<usize> {
    ir::shape::norm_axis(axis, rank)
        .ok_or_else(|| bad_attr(n, "axis", format!("{axis} out of range for rank {rank}")))
}

/// A per-channel parameter of one value (broadcast) or `c` values.
pub(crate) fn expand_channel(n: &Node, v: &[f32], c: usize, what: &str) -> Result<Vec<f32>> {
    match v.len() {
        1 => Ok(vec![v[0]; c]),
        l if l == c => Ok(v.to_vec()),
        l => Err(shape_err(
            n,
            format!("{what} has {l} values for {c} channels"),
        )),
    }
}

fn geom_vals(v: &[usize], rank: usize, default: usize) -> Vec<usize> {
    if v.is_empty() {
        vec![default; rank]
    } else {
        v.to_vec()
    }
}

/// Spatial geometry (kernel, strides, dilations, pads) normalised to 2-D.
pub(crate) struct Geom2 {
    pub k: [usize; 2],
    pub s: [usize; 2],
    pub d: [usize; 2],
    /// top, left, bottom, right
    pub p: [usize; 4],
}

impl Geom2 {
    /// The kernel-level conv shape of batch `nb`, input `[cin, h, w]`, output
    /// `[cout, oh, ow]` (one source for the f32 and int8 conv plans).
    pub(crate) fn conv_shape(
        &self,
        nb: usize,
        [c_in, h, w]: [usize; 3],
        [c_out, oh, ow]: [usize; 3],
        group: usize,
    ) -> crate::kernels::conv::ConvShape {
        crate::kernels::conv::ConvShape {
            n: nb,
            c_in,
            h,
            w,
            c_out,
            oh,
            ow,
            kh: self.k[0],
            kw: self.k[1],
            sh: self.s[0],
            sw: self.s[1],
            dh: self.d[0],
            dw: self.d[1],
            ph: self.p[0],
            pw: self.p[1],
            group,
        }
    }

    /// The kernel-level pool shape of `planes` planes (or images, channels-last),
    /// input `[h, w]`, output `[oh, ow]` (one source for the f32, channels-last and
    /// int8 pool plans).
    pub(crate) fn pool_shape(
        &self,
        planes: usize,
        [h, w]: [usize; 2],
        [oh, ow]: [usize; 2],
    ) -> crate::kernels::pool::PoolShape {
        crate::kernels::pool::PoolShape {
            planes,
            h,
            w,
            oh,
            ow,
            kh: self.k[0],
            kw: self.k[1],
            sh: self.s[0],
            sw: self.s[1],
            dh: self.d[0],
            dw: self.d[1],
            pads: self.p,
        }
    }
}

pub(crate) fn geom2(
    n: &Node,
    geom: &ir::ConvGeom,
    spatial: usize,
    kernel: &[usize],
) -> Result<Geom2> {
    if let Some(ap) = &geom.auto_pad {
        if ap != "NOTSET" && ap != "VALID" {
            return Err(bad_attr(
                n,
                "auto_pad",
                format!("'{ap}' must be resolved into pads by the compiler"),
            ));
        }
    }
    if !(1..=2).contains(&spatial) {
        return Err(unsup(
            n,
            format!("{spatial}-D spatial input (only 1-D and 2-D)"),
        ));
    }
    let k = if geom.kernel.is_empty() {
        kernel.to_vec()
    } else {
        geom.kernel.clone()
    };
    let s = geom_vals(&geom.strides, spatial, 1);
    let d = geom_vals(&geom.dilations, spatial, 1);
    let p = geom_vals(&geom.pads, 2 * spatial, 0);
    if k.len() != spatial || s.len() != spatial || d.len() != spatial || p.len() != 2 * spatial {
        return Err(bad_attr(
            n,
            "kernel/strides/dilations/pads",
            "length does not match the spatial rank",
        ));
    }
    if s.iter().chain(&d).chain(&k).any(|&x| x == 0) {
        return Err(bad_attr(n, "kernel/strides/dilations", "must be positive"));
    }
    Ok(if spatial == 1 {
        Geom2 {
            k: [1, k[0]],
            s: [1, s[0]],
            d: [1, d[0]],
            p: [0, p[0], 0, p[1]],
        }
    } else {
        Geom2 {
            k: [k[0], k[1]],
            s: [s[0], s[1]],
            d: [d[0], d[1]],
            p: [p[0], p[1], p[2], p[3]],
        }
    })
}

/// `(N, C, H, W)` of an NCHW or NCL shape.
pub(crate) fn nchw(n: &Node, s: &[usize]) -> Result<[usize; 4]> {
    match s.len() {
        3 => Ok([s[0], s[1], 1, s[2]]),
        4 => Ok([s[0], s[1], s[2], s[3]]),
        r => Err(unsup(n, format!("rank-{r} input (expects NCHW or NCL)"))),
    }
}
