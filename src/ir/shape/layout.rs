//! Shape rules of the layout family (Concat, Split, Slice, Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Pad, Expand, Tile, DepthToSpace, SpaceToDepth).

use crate::Result;

use super::{one, Cx, TypedShape};

impl Cx<'_> {
    /// Concat along `axis`.
    pub(super) fn concat(&self, axis: &i64) -> Result<Vec<TypedShape>> {
        let (dt, first) = self.req(0)?;
        let ax = self.axis(*axis, first.len())?;
        let mut out = first.to_vec();
        for i in 1..self.ins.len() {
            let s = self.shape(i)?;
            if s.len() != first.len()
                || s.iter()
                    .zip(first)
                    .enumerate()
                    .any(|(d, (a, b))| d != ax && a != b)
            {
                return Err(self.err(format!(
                    "input #{i} {s:?} does not concat with {first:?} on axis {ax}"
                )));
            }
            out[ax] = out[ax]
                .checked_add(s[ax])
                .ok_or_else(|| self.err("concatenated dim overflows"))?;
        }
        one(dt, out)
    }

    /// Reshape to a constant target shape.
    pub(super) fn reshape_node(&self, allowzero: &bool) -> Result<Vec<TypedShape>> {
        let (dt, x) = self.req(0)?;
        let target = self.ints(self.req_const(1, "shape")?, "shape")?;
        one(dt, self.reshape(x, &target, *allowzero)?)
    }

    /// Flatten to 2-D at `axis`.
    pub(super) fn flatten(&self, axis: &i64) -> Result<Vec<TypedShape>> {
        let (dt, x) = self.req(0)?;
        let r = i64::try_from(x.len()).map_err(|_| self.err("rank too large"))?;
        let a = if *axis < 0 { axis + r } else { *axis };
        if !(0..=r).contains(&a) {
            return Err(self.err(format!("axis {axis} out of range for rank {r}")));
        }
        let a = a as usize;
        one(dt, vec![x[..a].iter().product(), x[a..].iter().product()])
    }

    /// Squeeze size-1 dims (attribute or constant input axes).
    pub(super) fn squeeze(&self, axes: &Option<Vec<i64>>) -> Result<Vec<TypedShape>> {
        let (dt, x) = self.req(0)?;
        let axes = match axes {
            Some(a) => Some(a.clone()),
            None => self.opt_ints(1, "axes")?,
        };
        let out = match axes {
            None => x.iter().copied().filter(|&d| d != 1).collect(),
            Some(axes) => {
                let mut drop = vec![false; x.len()];
                for a in axes {
                    let ax = self.axis(a, x.len())?;
                    if x[ax] != 1 {
                        return Err(self.err(format!("cannot squeeze dim {ax} of size {}", x[ax])));
                    }
                    drop[ax] = true;
                }
                x.iter()
                    .zip(drop)
                    .filter(|(_, d)| !d)
                    .map(|(&v, _)| v)
                    .collect()
            }
        };
        one(dt, out)
    }

    /// Unsqueeze: insert size-1 dims.
    pub(super) fn unsqueeze(&self, axes: &Option<Vec<i64>>) -> Result<Vec<TypedShape>> {
        let (dt, x) = self.req(0)?;
        let axes = match axes {
            Some(a) => a.clone(),
            None => self.ints(self.req_const(1, "axes")?, "axes")?,
        };
        let r = x.len() + axes.len();
        let mut ones = vec![false; r];
        for a in axes {
            let ax = self.axis(a, r)?;
            if ones[ax] {
                return Err(self.err(format!("axis {a} given twice")));
            }
            ones[ax] = true;
        }
        let mut it = x.iter();
        let out = ones
            .iter()
            .map(|&o| {
                if o {
                    1
                } else {
                    it.next().copied().unwrap_or(1)
                }
            })
            .collect();
        one(dt, out)
    }

    /// Transpose by `perm` (reversed dims by default).
    pub(super) fn transpose(&self, perm: &Option<Vec<usize>>) -> Result<Vec<TypedShape>> {
        let (dt, x) = self.req(0)?;
        let p: Vec<usize> = match perm {
            Some(p) => p.clone(),
            None => (0..x.len()).rev().collect(),
        };
        let mut seen = vec![false; x.len()];
        if p.len() != x.len()
            || p.iter()
                .any(|&i| i >= x.len() || std::mem::replace(&mut seen[i], true))
        {
            return Err(self.err(format!(
                "perm {p:?} is not a permutation of rank {}",
                x.len()
            )));
        }
        one(dt, p.iter().map(|&i| x[i]).collect())
    }

    /// Expand: broadcast to a constant shape.
    pub(super) fn expand(&self) -> Result<Vec<TypedShape>> {
        let (dt, x) = self.req(0)?;
        let s = self.ints(self.req_const(1, "shape")?, "shape")?;
        let s = s
            .iter()
            .map(|&d| self.dim(d, "shape value"))
            .collect::<Result<Vec<_>>>()?;
        one(dt, self.bcast(x, &s)?)
    }

    /// Tile by constant repeats.
    pub(super) fn tile(&self) -> Result<Vec<TypedShape>> {
        let (dt, x) = self.req(0)?;
        let reps = self.ints(self.req_const(1, "repeats")?, "repeats")?;
        if reps.len() != x.len() {
            return Err(self.err(format!("{} repeats for rank {}", reps.len(), x.len())));
        }
        let s = x
            .iter()
            .zip(&reps)
            .map(|(&d, &r)| {
                let r = self.dim(r, "repeat")?;
                d.checked_mul(r)
                    .ok_or_else(|| self.err("tiled shape overflows"))
            })
            .collect::<Result<_>>()?;
        one(dt, s)
    }

    /// DepthToSpace on NCHW.
    pub(super) fn depth_to_space(&self, blocksize: &usize) -> Result<Vec<TypedShape>> {
        let (dt, x) = self.req(0)?;
        let b = *blocksize;
        match *x {
            [n, c, h, w] if b > 0 && c % b.saturating_mul(b) == 0 => one(
                dt,
                vec![n, c / (b * b), h.saturating_mul(b), w.saturating_mul(b)],
            ),
            _ => Err(self.err(format!(
                "input {x:?} is not 4-D with channels divisible by {b}²"
            ))),
        }
    }

    /// SpaceToDepth on NCHW.
    pub(super) fn space_to_depth(&self, blocksize: &usize) -> Result<Vec<TypedShape>> {
        let (dt, x) = self.req(0)?;
        let b = *blocksize;
        match *x {
            [n, c, h, w] if b > 0 && h % b == 0 && w % b == 0 => one(
                dt,
                vec![n, c.saturating_mul(b).saturating_mul(b), h / b, w / b],
            ),
            _ => Err(self.err(format!("input {x:?} is not 4-D with H, W divisible by {b}"))),
        }
    }

    pub(super) fn split(
        &self,
        axis: i64,
        split: Option<&[i64]>,
        n: usize,
    ) -> Result<Vec<TypedShape>> {
        let (dt, x) = self.req(0)?;
        let ax = self.axis(axis, x.len())?;
        let d = x[ax];
        let sizes: Vec<usize> = match split
            .map(<[i64]>::to_vec)
            .map(Some)
            .unwrap_or(self.opt_ints(1, "split")?)
        {
            Some(s) => s
                .iter()
                .map(|&v| self.dim(v, "split size"))
                .collect::<Result<_>>()?,
            None => {
                if n == 0 {
                    return Err(self.err("split into zero outputs"));
                }
                let chunk = d.div_ceil(n);
                (0..n)
                    .map(|i| chunk.min(d.saturating_sub(i.saturating_mul(chunk))))
                    .collect()
            }
        };
        if sizes.len() != n || sizes.iter().sum::<usize>() != d {
            return Err(self.err(format!(
                "split sizes {sizes:?} do not cover dim {ax} of size {d} in {n} parts"
            )));
        }
        Ok(sizes
            .into_iter()
            .map(|s| {
                let mut v = x.to_vec();
                v[ax] = s;
                (dt, v)
            })
            .collect())
    }

    pub(super) fn slice(&self) -> Result<Vec<TypedShape>> {
        let (dt, x) = self.req(0)?;
        let starts = self.ints(self.req_const(1, "starts")?, "starts")?;
        let ends = self.ints(self.req_const(2, "ends")?, "ends")?;
        let r = x.len();
        let axes = self
            .opt_ints(3, "axes")?
            .unwrap_or_else(|| (0..starts.len() as i64).collect());
        let steps = self
            .opt_ints(4, "steps")?
            .unwrap_or_else(|| vec![1; starts.len()]);
        if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
            return Err(self.err("starts, ends, axes and steps differ in length"));
        }
        let mut out = x.to_vec();
        let mut seen = vec![false; r];
        for i in 0..starts.len() {
            let ax = self.axis(axes[i], r)?;
            if std::mem::replace(&mut seen[ax], true) {
                return Err(self.err(format!("axis {ax} sliced twice")));
            }
            let step = steps[i];
            if step == 0 {
                return Err(self.err("slice step must not be 0"));
            }
            out[ax] = slice_len(x[ax] as i64, starts[i], ends[i], step);
        }
        Ok(vec![(dt, out)])
    }

    pub(super) fn reshape(
        &self,
        x: &[usize],
        target: &[i64],
        allowzero: bool,
    ) -> Result<Vec<usize>> {
        let total: usize = x.iter().product();
        let mut out = Vec::with_capacity(target.len());
        let mut infer = None;
        for (i, &t) in target.iter().enumerate() {
            match t {
                -1 => {
                    if infer.replace(i).is_some() {
                        return Err(self.err("shape has more than one -1"));
                    }
                    out.push(1);
                }
                0 if !allowzero => out.push(*x.get(i).ok_or_else(|| {
                    self.err(format!("shape copies dim {i} the input does not have"))
                })?),
                t => out.push(self.dim(t, "shape value")?),
            }
        }
        let known = out
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or_else(|| self.err("shape overflows"))?;
        if let Some(i) = infer {
            if known == 0 || !total.is_multiple_of(known) {
                return Err(self.err(format!("cannot reshape {x:?} into {target:?}")));
            }
            out[i] = total / known;
        } else if known != total {
            return Err(self.err(format!(
                "cannot reshape {x:?} ({total} elements) into {target:?}"
            )));
        }
        Ok(out)
    }

    pub(super) fn pad(&self) -> Result<Vec<TypedShape>> {
        let (dt, x) = self.req(0)?;
        let pads = self.ints(self.req_const(1, "pads")?, "pads")?;
        let r = x.len();
        let axes: Vec<usize> = match self.opt_ints(3, "axes")? {
            Some(a) => a.iter().map(|&v| self.axis(v, r)).collect::<Result<_>>()?,
            None => (0..r).collect(),
        };
        if pads.len() != 2 * axes.len() {
            return Err(self.err(format!("{} pads for {} axes", pads.len(), axes.len())));
        }
        if let Some((_, c)) = self.opt(2)? {
            if c.iter().product::<usize>() != 1 {
                return Err(self.err(format!("constant_value must be a scalar, has shape {c:?}")));
            }
        }
        let mut out = x.to_vec();
        let k = axes.len();
        for (i, &ax) in axes.iter().enumerate() {
            let v = out[ax] as i128 + pads[i] as i128 + pads[i + k] as i128;
            if v < 0 {
                return Err(self.err(format!("pads make dim {ax} negative")));
            }
            out[ax] = usize::try_from(v).map_err(|_| self.err("padded dim too large"))?;
        }
        Ok(vec![(dt, out)])
    }
}

/// Number of elements ONNX Slice takes from a dim of size `d` (clamping per the spec).
pub(super) fn slice_len(d: i64, start: i64, end: i64, step: i64) -> usize {
    let (d, step) = (d as i128, step as i128);
    let norm = |v: i64| {
        let v = v as i128;
        if v < 0 {
            v + d
        } else {
            v
        }
    };
    let (s, e) = (norm(start), norm(end));
    let n = if step > 0 {
        let (s, e) = (s.clamp(0, d), e.clamp(0, d));
        (e - s + step - 1).div_euclid(step)
    } else {
        let (s, e) = (s.clamp(-1, d - 1), e.clamp(-1, d - 1));
        (s - e - step - 1).div_euclid(-step)
    };
    usize::try_from(n.max(0)).unwrap_or(usize::MAX)
}
