//! Layout family (Concat, Split, Slice, Reshape, Flatten, Squeeze, Unsqueeze, Transpose,
//! Pad, Expand, Tile, DepthToSpace, SpaceToDepth): data movement planned as strided
//! copies ([`StridedCopy`]) or per-dim index maps ([`IndexMapCopy`]). A single copy's
//! tiles split its outermost dim.

use super::ctx::{norm_axis, Ctx};
use super::errors::{bad_attr, shape_err, unsup};
use super::{FamilyKernel, Planned, Run};
use crate::error::Result;
use crate::ir;
use crate::kernels::eltwise::Bcast;
use crate::kernels::nd::{contiguous_strides, IndexMapCopy, StridedCopy, FILL, MAX_RANK};

/// A planned data movement.
#[derive(Debug)]
pub(crate) enum LayoutKernel {
    /// (input index, output index, copy)
    Copies(Vec<(usize, usize, StridedCopy)>),
    /// Copies of which those flagged `true` are skipped: a zero-copy Concat whose
    /// producers wrote those inputs in place. Tiles still cover every copy's units, so the
    /// node keeps its tile count.
    PartlyInPlace(Vec<(usize, usize, StridedCopy)>, Vec<bool>),
    MapCopy(IndexMapCopy),
}

impl LayoutKernel {
    /// Skips the copies of `inputs` (already in place in the output block); false when
    /// the kernel is not a list of copies.
    pub(crate) fn skip_inputs(&mut self, inputs: &[usize]) -> bool {
        let LayoutKernel::Copies(v) = self else {
            return false;
        };
        let skip = v.iter().map(|c| inputs.contains(&c.0)).collect();
        *self = LayoutKernel::PartlyInPlace(std::mem::take(v), skip);
        true
    }

    /// How many copies are skipped (inputs in place).
    pub(crate) fn inputs_in_place(&self) -> usize {
        match self {
            LayoutKernel::PartlyInPlace(_, skip) => skip.iter().filter(|&&s| s).count(),
            _ => 0,
        }
    }
}

/// One strided copy of input 0 (`dims` read at `src_strides` from `src_off`) into the
/// whole of output 0.
fn copy1(c: &Ctx<'_>, dims: &[usize], src_strides: &[isize], src_off: isize) -> Result<Planned> {
    let numel: usize = dims.iter().product();
    if numel != c.oshape(0)?.iter().product::<usize>() {
        return Err(shape_err(
            c.n,
            "output size does not match the input layout",
        ));
    }
    let e = c.itype(0)?.size();
    let sc = StridedCopy::new(e, dims, src_strides, src_off, &contiguous_strides(dims), 0);
    if !sc.rank_ok() {
        return Err(unsup(c.n, "layout of rank > 8 after coalescing"));
    }
    Ok(Planned::new(LayoutKernel::Copies(vec![(0, 0, sc)])))
}

/// Output 0 (shape `o`) gathered from input 0 through one index map per output dim
/// (element offsets into the input, [`FILL`] for `fill`).
pub(crate) fn index_map(
    c: &Ctx<'_>,
    o: &[usize],
    mut maps: Vec<Vec<isize>>,
    fill: Vec<u8>,
) -> Result<Planned> {
    let mut dims = o.to_vec();
    // A leading unit dim (the batch of one) folds into the next map, so that tiles
    // split the next dim (channels) instead of running as one.
    while dims.len() > 2 && dims[0] == 1 && maps[0][0] != FILL {
        let off = maps[0][0];
        dims.remove(0);
        maps.remove(0);
        for m in maps[0].iter_mut().filter(|m| **m != FILL) {
            *m += off;
        }
    }
    while dims.len() < 2 {
        dims.insert(0, 1);
        maps.insert(0, vec![0]);
    }
    if dims.len() > MAX_RANK {
        return Err(unsup(c.n, "rank > 8"));
    }
    Ok(Planned::new(LayoutKernel::MapCopy(IndexMapCopy {
        elem: c.itype(0)?.size(),
        dims,
        maps,
        fill,
    })))
}

/// Plans a Reshape, Flatten, Squeeze or Unsqueeze: a flat copy.
pub(crate) fn plan_reshape(c: &Ctx<'_>) -> Result<Planned> {
    c.outputs_typed(c.itype(0)?)?;
    let numel = c.same_numel(0, 0)?;
    let e = c.itype(0)?.size();
    Ok(Planned::new(LayoutKernel::Copies(vec![(
        0,
        0,
        StridedCopy::new(e, &[numel], &[1], 0, &[1], 0),
    )])))
}

/// Plans a Transpose by `perm` (default: reversed dims).
pub(crate) fn plan_transpose(c: &Ctx<'_>, perm: Option<&[usize]>) -> Result<Planned> {
    c.outputs_typed(c.itype(0)?)?;
    let s = c.ishape(0)?;
    let perm: Vec<usize> = perm.map_or_else(|| (0..s.len()).rev().collect(), <[_]>::to_vec);
    let mut seen = vec![false; s.len()];
    if perm.len() != s.len()
        || perm
            .iter()
            .any(|&p| p >= s.len() || std::mem::replace(&mut seen[p], true))
    {
        return Err(bad_attr(
            c.n,
            "perm",
            format!("{perm:?} is not a permutation of rank {}", s.len()),
        ));
    }
    let st = contiguous_strides(s);
    let dims: Vec<usize> = perm.iter().map(|&p| s[p]).collect();
    let ss: Vec<isize> = perm.iter().map(|&p| st[p]).collect();
    copy1(c, &dims, &ss, 0)
}

/// Plans an Expand (the target shape is the output shape).
pub(crate) fn plan_expand(c: &Ctx<'_>) -> Result<Planned> {
    c.outputs_typed(c.itype(0)?)?;
    let (s, o) = (c.ishape(0)?, c.oshape(0)?);
    let bc = Bcast::new(&[s], o)
        .ok_or_else(|| shape_err(c.n, "input does not broadcast to the output"))?;
    copy1(c, &bc.dims, &bc.strides[0], 0)
}

/// Plans a Tile by the constant repeats input 1.
pub(crate) fn plan_tile(c: &Ctx<'_>) -> Result<Planned> {
    c.outputs_typed(c.itype(0)?)?;
    let s = c.ishape(0)?;
    let reps = c.const_ints(1, "repeats")?;
    if reps.len() != s.len() || reps.iter().any(|&r| r < 0) {
        return Err(shape_err(
            c.n,
            "repeats must have one non-negative entry per dim",
        ));
    }
    let st = contiguous_strides(s);
    let mut dims = Vec::new();
    let mut ss = Vec::new();
    for d in 0..s.len() {
        let r = usize::try_from(reps[d]).map_err(|_| shape_err(c.n, "repeats too large"))?;
        dims.extend([r, s[d]]);
        ss.extend([0, st[d]]);
    }
    copy1(c, &dims, &ss, 0)
}

/// Plans a DepthToSpace (DCR, or CRD with `crd_mode`) of an NCHW input.
pub(crate) fn plan_depth_to_space(
    c: &Ctx<'_>,
    blocksize: usize,
    crd_mode: bool,
) -> Result<Planned> {
    c.outputs_typed(c.itype(0)?)?;
    let s = c.ishape(0)?;
    let b = blocksize;
    if s.len() != 4 || b == 0 || s[1] % (b * b) != 0 {
        return Err(shape_err(c.n, "channels must be a multiple of blocksize^2"));
    }
    let [nb, ch, h, w] = [s[0], s[1], s[2], s[3]];
    let cp = ch / (b * b);
    let hw = (h * w) as isize;
    let (sc, sb1, sb2) = if crd_mode {
        (b as isize * b as isize * hw, b as isize * hw, hw)
    } else {
        (hw, b as isize * cp as isize * hw, cp as isize * hw)
    };
    let dims = [nb, cp, h, b, w, b];
    let ss = [ch as isize * hw, sc, w as isize, sb1, 1, sb2];
    copy1(c, &dims, &ss, 0)
}

/// Plans a SpaceToDepth of an NCHW input.
pub(crate) fn plan_space_to_depth(c: &Ctx<'_>, blocksize: usize) -> Result<Planned> {
    c.outputs_typed(c.itype(0)?)?;
    let s = c.ishape(0)?;
    let b = blocksize;
    if s.len() != 4 || b == 0 || s[2] % b != 0 || s[3] % b != 0 {
        return Err(shape_err(
            c.n,
            "height and width must be multiples of blocksize",
        ));
    }
    let [nb, ch, h, w] = [s[0], s[1], s[2], s[3]];
    let dims = [nb, b, b, ch, h / b, w / b];
    let ss = [
        (ch * h * w) as isize,
        w as isize,
        1,
        (h * w) as isize,
        (b * w) as isize,
        b as isize,
    ];
    copy1(c, &dims, &ss, 0)
}

/// Plans a Concat along `axis` (absent inputs skipped).
pub(crate) fn plan_concat(c: &Ctx<'_>, axis: i64) -> Result<Planned> {
    let n = c.n;
    let o = c.oshape(0)?;
    let a = norm_axis(n, axis, o.len())?;
    let ost = contiguous_strides(o);
    let t = c.otype(0)?;
    let mut copies = Vec::new();
    let mut pos = 0usize;
    for i in 0..n.inputs.len() {
        if !c.has(i) {
            continue;
        }
        let s = c.ishape(i)?;
        if c.itype(i)? != t || s.len() != o.len() || (0..o.len()).any(|d| d != a && s[d] != o[d]) {
            return Err(shape_err(
                n,
                format!("input {i} {s:?} does not fit output {o:?}"),
            ));
        }
        if s.iter().product::<usize>() > 0 {
            let sc = StridedCopy::new(
                t.size(),
                s,
                &contiguous_strides(s),
                0,
                &ost,
                (pos as isize) * ost[a],
            );
            if !sc.rank_ok() {
                return Err(unsup(n, "rank > 8"));
            }
            copies.push((i, 0, sc));
        }
        pos += s[a];
    }
    if pos != o[a] {
        return Err(shape_err(n, "input extents do not add up to the output"));
    }
    Ok(Planned::new(LayoutKernel::Copies(copies)))
}

/// Plans a Split along `axis` (the sizes are the output shapes).
pub(crate) fn plan_split(c: &Ctx<'_>, axis: i64) -> Result<Planned> {
    let n = c.n;
    c.outputs_typed(c.itype(0)?)?;
    let s = c.ishape(0)?;
    let a = norm_axis(n, axis, s.len())?;
    let ist = contiguous_strides(s);
    let t = c.itype(0)?;
    let mut copies = Vec::new();
    let mut pos = 0usize;
    for k in 0..n.outputs.len() {
        let o = c.oshape(k)?;
        if o.len() != s.len() || (0..s.len()).any(|d| d != a && s[d] != o[d]) {
            return Err(shape_err(
                n,
                format!("output {k} {o:?} does not fit input {s:?}"),
            ));
        }
        if o.iter().product::<usize>() > 0 {
            let sc = StridedCopy::new(
                t.size(),
                o,
                &ist,
                (pos as isize) * ist[a],
                &contiguous_strides(o),
                0,
            );
            if !sc.rank_ok() {
                return Err(unsup(n, "rank > 8"));
            }
            copies.push((0, k, sc));
        }
        pos += o[a];
    }
    if pos != s[a] {
        return Err(shape_err(n, "output extents do not add up to the input"));
    }
    Ok(Planned::new(LayoutKernel::Copies(copies)))
}

/// Plans a Slice by the constant starts, ends, axes and steps inputs.
pub(crate) fn plan_slice(c: &Ctx<'_>) -> Result<Planned> {
    let n = c.n;
    c.outputs_typed(c.itype(0)?)?;
    let s = c.ishape(0)?;
    let starts = c.const_ints(1, "starts")?;
    let ends = c.const_ints(2, "ends")?;
    let axes: Vec<i64> = if c.has(3) {
        c.const_ints(3, "axes")?
    } else {
        (0..starts.len() as i64).collect()
    };
    let steps: Vec<i64> = if c.has(4) {
        c.const_ints(4, "steps")?
    } else {
        vec![1; starts.len()]
    };
    if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return Err(shape_err(n, "starts/ends/axes/steps lengths differ"));
    }
    let st = contiguous_strides(s);
    let mut dims = s.to_vec();
    let mut ss = st.clone();
    let mut off = 0isize;
    for j in 0..starts.len() {
        let a = norm_axis(n, axes[j], s.len())?;
        let d = s[a] as i64;
        let step = steps[j];
        if step == 0 {
            return Err(bad_attr(n, "steps", "must not be 0"));
        }
        if d == 0 {
            dims[a] = 0;
            continue;
        }
        // In i128: starts, ends and steps are arbitrary i64 values.
        let (d, step) = (d as i128, step as i128);
        let fix = |x: i64| if x < 0 { x as i128 + d } else { x as i128 };
        let (b, e) = (fix(starts[j]), fix(ends[j]));
        let (b, e) = if step > 0 {
            (b.clamp(0, d), e.clamp(0, d))
        } else {
            (b.clamp(0, d - 1), e.clamp(-1, d - 1))
        };
        let len = if step > 0 {
            (e - b + step - 1).div_euclid(step)
        } else {
            (b - e + (-step) - 1).div_euclid(-step)
        };
        dims[a] = len.max(0) as usize;
        off += b.max(0) as isize * st[a];
        // A step beyond the dim takes one element: any stride that fits will do.
        ss[a] = st[a] * step.clamp(-d, d) as isize;
    }
    if dims != c.oshape(0)? {
        return Err(shape_err(
            n,
            format!("slice gives {dims:?}, output is {:?}", c.oshape(0)?),
        ));
    }
    if dims.iter().product::<usize>() == 0 {
        return Ok(Planned::new(LayoutKernel::Copies(Vec::new())));
    }
    copy1(c, &dims, &ss, off)
}

/// Plans a Pad by the constant pads (and optional constant value and axes) inputs.
pub(crate) fn plan_pad(c: &Ctx<'_>, mode: ir::PadMode) -> Result<Planned> {
    let n = c.n;
    c.outputs_typed(c.itype(0)?)?;
    let s = c.ishape(0)?;
    let r = s.len();
    let pads = c.const_ints(1, "pads")?;
    let axes: Vec<usize> = if c.has(3) {
        c.const_ints(3, "axes")?
            .iter()
            .map(|&a| norm_axis(n, a, r))
            .collect::<Result<_>>()?
    } else {
        (0..r).collect()
    };
    if pads.len() != 2 * axes.len() || r > MAX_RANK || r == 0 {
        return Err(shape_err(
            n,
            "pads must hold begins and ends for every axis",
        ));
    }
    let mut pb = vec![0i64; r];
    let mut pe = vec![0i64; r];
    for (j, &a) in axes.iter().enumerate() {
        pb[a] = pads[j];
        pe[a] = pads[j + axes.len()];
    }
    let t = c.itype(0)?;
    let fill = match c.konst(2) {
        Some(v) if c.has(2) => {
            if v.dtype() != t || v.numel() != 1 {
                return Err(shape_err(
                    n,
                    "constant_value must be one element of the data dtype",
                ));
            }
            crate::exec::const_bytes(v).to_vec()
        }
        None if c.has(2) => return Err(unsup(n, "constant_value must be a constant")),
        _ => vec![0u8; t.size()],
    };
    let o = c.oshape(0)?;
    if o.len() != r {
        return Err(shape_err(n, "output rank differs from the input rank"));
    }
    if mode != ir::PadMode::Constant && s.contains(&0) {
        return Err(shape_err(n, "cannot reflect/edge/wrap-pad an empty dim"));
    }
    for d in 0..r {
        let (lo, hi) = (-(s[d] as i64), o[d] as i64);
        if !(lo..=hi).contains(&pb[d]) || !(lo..=hi).contains(&pe[d]) {
            return Err(shape_err(n, format!("pads of dim {d} out of range")));
        }
    }
    let st = contiguous_strides(s);
    let mut maps = Vec::new();
    for d in 0..r {
        let len = s[d] as i128 + pb[d] as i128 + pe[d] as i128;
        if len != o[d] as i128 {
            return Err(shape_err(n, "output shape does not match the pads"));
        }
        let nd = s[d] as i64;
        let len = o[d] as i64;
        let map: Vec<isize> = (0..len)
            .map(|oi| {
                let i = oi - pb[d];
                let src = if (0..nd).contains(&i) {
                    Some(i)
                } else {
                    match mode {
                        ir::PadMode::Constant => None,
                        ir::PadMode::Edge => Some(i.clamp(0, nd - 1)),
                        ir::PadMode::Wrap => Some(i.rem_euclid(nd)),
                        ir::PadMode::Reflect => {
                            if nd == 1 {
                                Some(0)
                            } else {
                                let p = 2 * (nd - 1);
                                let m = i.rem_euclid(p);
                                Some(if m >= nd { p - m } else { m })
                            }
                        }
                    }
                };
                src.map_or(FILL, |v| v as isize * st[d])
            })
            .collect();
        maps.push(map);
    }
    index_map(c, o, maps, fill)
}

impl FamilyKernel for LayoutKernel {
    fn tiles(&self) -> usize {
        match self {
            // The copies' outermost coordinates one after the other (a Concat's or a
            // Split's pieces): any cut of that sequence is a tile.
            LayoutKernel::Copies(v) | LayoutKernel::PartlyInPlace(v, _) => {
                v.iter().map(|c| c.2.outer()).sum::<usize>().max(1)
            }
            LayoutKernel::MapCopy(m) => m.dims[0],
        }
    }

    fn run(&self, r: Run<'_>) -> Result<()> {
        let (tile, io) = (r.tile, r.io);
        let (v, skip) = match self {
            LayoutKernel::Copies(v) => (v, &[][..]),
            LayoutKernel::PartlyInPlace(v, skip) => (v, &skip[..]),
            LayoutKernel::MapCopy(m) => {
                let (lo, hi) = tile.range(m.dims[0], 1);
                m.run(io.bytes(0), super::out_bytes(r.out, r.outs, 0), lo, hi);
                return Ok(());
            }
        };
        let total = v.iter().map(|c| c.2.outer()).sum::<usize>();
        let (u0, u1) = tile.range(total, 1);
        let mut base = 0;
        for (j, (i, k, sc)) in v.iter().enumerate() {
            let (lo, hi) = (u0.max(base), u1.min(base + sc.outer()));
            // An input in place lies inside the output block: it is never read.
            if lo < hi && !skip.get(j).copied().unwrap_or(false) {
                let out = super::out_bytes(r.out, r.outs, *k);
                sc.run(io.bytes(*i), out, lo - base, hi - base);
            }
            base += sc.outer();
        }
        Ok(())
    }
}
