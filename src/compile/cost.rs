//! Cost model: node times measured by running our own kernels on the compiling host.
//!
//! Every node is run a few times on deterministic inputs and its best time kept; a node
//! the partitioner tiles is measured tile by tile. Measuring beats a formula: it
//! captures the real kernel (SIMD path, cache behaviour) the cores will execute.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use crate::exec::{ExecState, ModelPlan, Tile};
#[cfg(feature = "test-ops")]
use crate::ir::Op;
use crate::ir::{DType, Graph};

/// Fallback estimate (µs) for a node that cannot be measured (e.g. the test `Fail` op).
const UNMEASURED_US: f64 = 1.0;

/// Measures node times on the compiling host.
pub struct CostModel<'a> {
    plan: &'a ModelPlan,
    graph: &'a Graph,
    state: ExecState,
    repeats: usize,
}

impl<'a> CostModel<'a> {
    /// Prepares a state with deterministic inputs; `repeats` ≥ 1 runs per measurement.
    pub fn new(graph: &'a Graph, plan: &'a ModelPlan, repeats: usize) -> CostModel<'a> {
        let mut state = plan.new_state();
        for (i, &v) in graph.inputs.iter().enumerate() {
            let len = plan.input_len(i);
            let bytes: Vec<u8> = match graph.values[v].dtype {
                DType::F32 => {
                    let n = len / 4;
                    let vals: Vec<f32> = (0..n)
                        .map(|k| ((k * 7919) % 1000) as f32 / 1000.0)
                        .collect();
                    bytemuck::cast_slice(&vals).to_vec()
                }
                DType::U8 => (0..len).map(|k| (k % 251) as u8).collect(),
                _ => vec![0u8; len],
            };
            // Inputs of the wrong size cannot happen here: lengths come from the plan.
            let _ = plan.set_input(&mut state, i, &bytes);
        }
        CostModel {
            plan,
            graph,
            state,
            repeats: repeats.max(1),
        }
    }

    /// Best time in µs of running `tile` of `node` (the previous nodes must have run once
    /// so its inputs hold data; `measure_all` does that in order).
    pub fn measure(&mut self, node: usize, tile: Tile) -> f64 {
        #[cfg(feature = "test-ops")]
        if let Op::Spin { micros } = self.graph.nodes[node].op {
            return micros as f64 / tile.count as f64;
        }
        let mut best = f64::INFINITY;
        for _ in 0..self.repeats {
            let t0 = Instant::now();
            let plan = self.plan;
            let state = &mut self.state;
            let ok = catch_unwind(AssertUnwindSafe(|| {
                plan.run_node(state, node, tile).is_ok()
            }))
            .unwrap_or(false);
            let dt = t0.elapsed().as_secs_f64() * 1e6;
            if !ok {
                return UNMEASURED_US;
            }
            best = best.min(dt);
        }
        best
    }

    /// Whole-node times of every node, in order.
    pub fn measure_all(&mut self) -> Vec<f64> {
        (0..self.graph.nodes.len())
            .map(|i| self.measure(i, Tile::WHOLE))
            .collect()
    }
}
