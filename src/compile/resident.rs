//! The memory the cost model measures in: a model's constants and packed weights in one
//! buffer on huge pages, as a compiled file loads them (`crate::format`, and
//! `crate::runtime::model` for a model compiled in the loading process) when
//! `VNPU_HUGE_PAGES` is on.
//!
//! Why: the node times of the cost model are the FC estimates. Measured on weights in
//! plain 4 KiB pages they were those of another memory: CRNN's FCs (LSTM steps reading
//! 1 MiB of recurrent weights each, 1.2 MB convs) were estimated at a median +15.6 % of
//! their time in the loaded model, 22 of 35 within 25 %; with `VNPU_HUGE_PAGES=0` on both
//! sides, +1.7 % and 34 of 37 (`cargo bench --bench vnpu -- split --models crnn_bilstm`).

use std::sync::Arc;

use crate::error::Result;
use crate::exec::{ModelPlan, PackedWeights, PlanOptions};
use crate::huge_pages::HugeBytes;
use crate::ir::{Graph, SharedBytes, Tensor};
use crate::kernels::packed::WeightBuf;

/// Moves every constant of `g` held in memory of its own into one buffer on huge pages
/// (same values; the constants then borrow that buffer). Nothing changes when huge pages
/// are off for weights (`crate::huge_pages::for_weights`).
pub(super) fn constants_on_huge_pages(g: &mut Graph) -> Result<()> {
    if !crate::huge_pages::for_weights()? {
        return Ok(());
    }
    let ids: Vec<usize> = (0..g.values.len())
        .filter(|&i| {
            g.values[i]
                .konst
                .as_ref()
                .is_some_and(|t| !t.data.is_mapped())
        })
        .collect();
    if ids.is_empty() {
        return Ok(());
    }
    let parts: Vec<&[u8]> = ids
        .iter()
        .filter_map(|&i| g.values[i].konst.as_ref().map(|t| t.bytes()))
        .collect();
    let (huge, ranges) = HugeBytes::gather(&parts);
    let owner: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(huge);
    for (&i, range) in ids.iter().zip(ranges) {
        let Some(old) = &g.values[i].konst else {
            continue;
        };
        let moved = SharedBytes::new(owner.clone(), range)
            .and_then(|b| Tensor::mapped(old.shape.clone(), old.dtype(), b));
        // A view that cannot be made (a big-endian host) keeps the constant where it is.
        if let Some(t) = moved {
            g.values[i].konst = Some(Arc::new(t));
        }
    }
    Ok(())
}

/// `plan` again with its packed weights in one buffer on huge pages (borrowed, as a plan
/// of a loaded file borrows them), when huge pages are on for weights and the plan packs
/// any; else `plan` itself. Same bits: the packing is the plan's own.
pub(super) fn packed_on_huge_pages(plan: ModelPlan, opts: &PlanOptions) -> Result<ModelPlan> {
    if !crate::huge_pages::for_weights()? {
        return Ok(plan);
    }
    let packed = plan.packed_weights();
    if packed.is_empty() {
        return Ok(plan);
    }
    let parts: Vec<&[u8]> = packed
        .nodes
        .iter()
        .map(|(_, w)| bytemuck::cast_slice(w.as_slice()))
        .collect();
    let (huge, ranges) = HugeBytes::gather(&parts);
    let owner: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(huge);
    let mut nodes = Vec::with_capacity(packed.nodes.len());
    for ((node, _), range) in packed.nodes.iter().zip(ranges) {
        match SharedBytes::new(owner.clone(), range).and_then(WeightBuf::shared) {
            Some(w) => nodes.push((*node, w)),
            None => return Ok(plan),
        }
    }
    let on_huge = PackedWeights {
        geometry: packed.geometry,
        nodes,
    };
    let graph = plan.graph().clone();
    drop(plan);
    ModelPlan::with_packed(graph, opts, &on_huge)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::testutil::{rand_vec, run_graph, GraphBuilder};
    use crate::ir::Op;

    /// A 3x3 conv then a MatMul, both with constant weights (both pack them).
    fn conv_matmul() -> Graph {
        let mut b = GraphBuilder::new();
        let x = b.input("x", &[1, 8, 12, 12]);
        let w = b.konst("w", &[16, 8, 3, 3], rand_vec(16 * 72, 1));
        let op = Op::Conv {
            geom: crate::exec::tests::geom(&[3, 3], &[1, 1], &[1; 4]),
            group: 1,
            post: vec![],
        };
        let y = b.node("conv", op, &[x, w], &[1, 16, 12, 12]);
        let m = b.konst("m", &[12, 40], rand_vec(12 * 40, 2));
        let z = b.node("mm", Op::MatMul { post: vec![] }, &[y, m], &[1, 16, 12, 40]);
        b.finish(&[z])
    }

    #[test]
    fn constants_and_packed_weights_move_without_changing_a_bit() {
        let g = conv_matmul();
        let x = rand_vec(8 * 144, 3);
        let want = run_graph(&g, std::slice::from_ref(&x));
        let mut moved = g.clone();
        constants_on_huge_pages(&mut moved).unwrap();
        let on = crate::huge_pages::for_weights().unwrap();
        for (a, b) in g.values.iter().zip(&moved.values) {
            assert_eq!(a.konst, b.konst);
            if let Some(t) = &b.konst {
                assert_eq!(
                    t.data.is_mapped(),
                    on,
                    "{} moved when huge pages are on",
                    a.name
                );
            }
        }
        let opts = PlanOptions::default();
        let plan = ModelPlan::new(Arc::new(moved), &opts).unwrap();
        let plan = packed_on_huge_pages(plan, &opts).unwrap();
        let packed = plan.packed_weights();
        assert_eq!(
            packed.nodes.len(),
            2,
            "the conv and the MatMul pack weights"
        );
        let mut st = plan.new_state();
        plan.set_input(&mut st, 0, bytemuck::cast_slice(&x))
            .unwrap();
        plan.run_all(&mut st).unwrap();
        let mut out = vec![0f32; plan.output_len(0) / 4];
        plan.read_output(&st, 0, bytemuck::cast_slice_mut(&mut out))
            .unwrap();
        let same = out
            .iter()
            .zip(&want[0])
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "outputs changed");
    }
}
