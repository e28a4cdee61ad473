//! Small graph-editing helpers shared by the passes: rewiring uses, removing nodes.

use crate::ir::{Graph, ValueId};

/// Replaces every use of `from` (node inputs and graph outputs) by `to`.
pub fn replace_uses(g: &mut Graph, from: ValueId, to: ValueId) {
    for n in &mut g.nodes {
        for v in n.inputs.iter_mut().flatten() {
            if *v == from {
                *v = to;
            }
        }
    }
    for o in &mut g.outputs {
        if *o == from {
            *o = to;
        }
    }
}

/// Removes the nodes whose indices are in `dead` (sorted or not), keeping order.
pub fn remove_nodes(g: &mut Graph, dead: &[usize]) {
    if dead.is_empty() {
        return;
    }
    let mut kill = vec![false; g.nodes.len()];
    for &d in dead {
        kill[d] = true;
    }
    let mut i = 0;
    g.nodes.retain(|_| {
        let keep = !kill[i];
        i += 1;
        keep
    });
}

/// The single node that reads `v`, if exactly one node input reads it and it is not a
/// graph output. Returns `(node index, input position)`.
pub fn sole_consumer(g: &Graph, v: ValueId) -> Option<(usize, usize)> {
    if g.outputs.contains(&v) {
        return None;
    }
    let mut found = None;
    for (ni, n) in g.nodes.iter().enumerate() {
        for (pi, inp) in n.inputs.iter().enumerate() {
            if *inp == Some(v) {
                if found.is_some() {
                    return None;
                }
                found = Some((ni, pi));
            }
        }
    }
    found
}

/// True when the constant `t` holds one value per channel `c` of an output of shape
/// `out_shape` along `axis` (or a single scalar), broadcasting without changing the
/// output shape. Returns the per-channel values expanded to `channels`.
pub fn per_channel_values(
    t: &crate::ir::Tensor,
    out_shape: &[usize],
    axis: usize,
) -> Option<Vec<f32>> {
    let vals = t.as_f32()?;
    let channels = *out_shape.get(axis)?;
    if vals.len() == 1 && t.shape.len() <= out_shape.len() {
        return Some(vec![vals[0]; channels]);
    }
    if t.shape.len() > out_shape.len() {
        return None;
    }
    // Align trailing dims (numpy broadcasting); every dim but `axis` must be 1.
    let off = out_shape.len() - t.shape.len();
    for (i, &d) in t.shape.iter().enumerate() {
        let od = i + off;
        if od == axis {
            if d != channels {
                return None;
            }
        } else if d != 1 {
            return None;
        }
    }
    if axis < off {
        return None;
    }
    Some(vals.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Tensor;

    #[test]
    fn per_channel_accepts_c11_and_scalar_rejects_spatial() {
        let out = [1, 3, 4, 4];
        let t = Tensor::from_f32(vec![3, 1, 1], vec![1.0, 2.0, 3.0]);
        assert_eq!(per_channel_values(&t, &out, 1), Some(vec![1.0, 2.0, 3.0]));
        let s = Tensor::from_f32(vec![], vec![5.0]);
        assert_eq!(per_channel_values(&s, &out, 1), Some(vec![5.0; 3]));
        let sp = Tensor::from_f32(vec![1, 1, 4, 4], vec![0.0; 16]);
        assert_eq!(per_channel_values(&sp, &out, 1), None);
        let wrong = Tensor::from_f32(vec![4], vec![0.0; 4]);
        assert_eq!(per_channel_values(&wrong, &out, 1), None);
        // Gemm style: last axis.
        let g = Tensor::from_f32(vec![4], vec![1.0; 4]);
        assert_eq!(per_channel_values(&g, &[2, 4], 1), Some(vec![1.0; 4]));
    }
}
