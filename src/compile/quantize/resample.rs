//! The int8 resampling patterns: `DQ(x) → AveragePool → Q` → `QAvgPool`, `DQ(x) →
//! GlobalAveragePool → Q` → `QGlobalAvgPool`, `DQ(x) → Resize(linear) → Q` →
//! `QResize` (only the two innermost dims resized, not `tf_crop_and_resize`). Input and
//! output parameters may differ: the kernels compute on the dequantised values and
//! quantise once, as the float reference does.

use super::{dq_of, q_end, Index, Match};
use crate::ir::{CoordMode, Graph, Op, ResizeMode};

/// The int8 op replacing node `i`, if it is one of the module doc's patterns.
pub(super) fn match_resample(g: &Graph, ix: &Index, i: usize) -> Option<Match> {
    let n = &g.nodes[i];
    let dq = dq_of(g, ix, n.inputs.first().copied()??)?;
    let x = dq.u8_param(g)?;
    let xs = g.values[dq.x].shape.as_ref()?;
    let os = g.values[n.outputs[0]].shape.as_ref()?;
    let end = q_end(g, ix, n.outputs[0])?;
    let y = end.y?;
    if end.act.is_some() {
        return None;
    }
    let op = match &n.op {
        Op::AveragePool {
            geom,
            ceil_mode,
            count_include_pad,
        } if (3..=4).contains(&xs.len()) && geom.dilations.iter().all(|&d| d == 1) => {
            Op::QAvgPool {
                geom: geom.clone(),
                ceil_mode: *ceil_mode,
                count_include_pad: *count_include_pad,
                x,
                y,
            }
        }
        Op::GlobalAveragePool if xs.len() >= 3 => Op::QGlobalAvgPool { x, y },
        Op::Resize {
            mode: ResizeMode::Linear,
            coord,
            ..
        } if *coord != CoordMode::TfCropAndResize => {
            let r = xs.len();
            if r < 2 || os.len() != r || xs[..r - 2] != os[..r - 2] || xs.contains(&0) {
                return None;
            }
            // Scales, when given, must be known now (the plan reads them).
            if let Some(s) = n.inputs.get(2).copied().flatten() {
                g.values[s].konst.as_ref()?;
            }
            Op::QResize {
                coord: *coord,
                x,
                y,
            }
        }
        _ => return None,
    };
    let mut inputs = n.inputs.clone();
    inputs[0] = Some(dq.x);
    Some(Match {
        op,
        inputs,
        outs: vec![end.out],
        dead: vec![end.q],
        before: Vec::new(),
    })
}
