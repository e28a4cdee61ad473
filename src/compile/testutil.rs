//! Test helpers: a tiny graph builder and a whole-graph runner used by pass tests to
//! compare outputs before and after a pass.

use std::sync::Arc;

use crate::exec::{ModelPlan, PlanOptions, Tile};
use crate::ir::{DType, Graph, Node, Op, Placement, Tensor, Value, ValueId};

/// Builds graphs by hand with shapes already known.
pub struct GraphBuilder {
    g: Graph,
}

impl GraphBuilder {
    /// An empty graph named "test".
    pub fn new() -> Self {
        GraphBuilder {
            g: Graph {
                name: "test".into(),
                ..Default::default()
            },
        }
    }

    /// Adds an f32 graph input.
    pub fn input(&mut self, name: &str, shape: &[usize]) -> ValueId {
        let id = self.value(name, DType::F32, shape);
        self.g.inputs.push(id);
        id
    }

    /// Adds an f32 constant.
    pub fn konst(&mut self, name: &str, shape: &[usize], v: Vec<f32>) -> ValueId {
        self.g.add_const(name, Tensor::from_f32(shape.to_vec(), v))
    }

    fn value(&mut self, name: &str, dtype: DType, shape: &[usize]) -> ValueId {
        self.g.add_value(Value {
            name: name.into(),
            dtype,
            shape: Some(shape.to_vec()),
            declared: None,
            konst: None,
        })
    }

    /// Adds a node with one f32 output of `shape`.
    pub fn node(&mut self, name: &str, op: Op, inputs: &[ValueId], shape: &[usize]) -> ValueId {
        let ins: Vec<Option<ValueId>> = inputs.iter().map(|&v| Some(v)).collect();
        self.node_opt(name, op, &ins, shape)
    }

    /// Adds a node with optional inputs and one f32 output of `shape`.
    pub fn node_opt(
        &mut self,
        name: &str,
        op: Op,
        inputs: &[Option<ValueId>],
        shape: &[usize],
    ) -> ValueId {
        let out = self.value(&format!("{name}_out"), DType::F32, shape);
        self.g.nodes.push(Node {
            name: name.into(),
            op,
            inputs: inputs.to_vec(),
            outputs: vec![out],
            absorbed: vec![name.into()],
            placement: Some(Placement::Bpu),
        });
        out
    }

    /// Finishes with these graph outputs.
    pub fn finish(mut self, outputs: &[ValueId]) -> Graph {
        self.g.outputs = outputs.to_vec();
        self.g
    }
}

impl Default for GraphBuilder {
    fn default() -> Self {
        Self::new()
    }
}

/// Runs every node of `g` once on f32 inputs and returns the f32 outputs.
pub fn run_graph(g: &Graph, inputs: &[Vec<f32>]) -> Vec<Vec<f32>> {
    run_graph_tiled(g, inputs, 1)
}

/// [`run_graph`] with every node cut into `tiles` tiles (or as many as it has).
pub fn run_graph_tiled(g: &Graph, inputs: &[Vec<f32>], tiles: usize) -> Vec<Vec<f32>> {
    let plan = ModelPlan::new(Arc::new(g.clone()), &PlanOptions::default()).expect("plan");
    let mut st = plan.new_state();
    for (i, x) in inputs.iter().enumerate() {
        plan.set_input(&mut st, i, bytemuck::cast_slice(x))
            .expect("input");
    }
    for n in 0..g.nodes.len() {
        let count = tiles.clamp(1, plan.tiles_for(n));
        for index in 0..count {
            plan.run_node(&mut st, n, Tile { index, count })
                .expect("run");
        }
    }
    (0..g.outputs.len())
        .map(|i| {
            let mut out = vec![0f32; plan.output_len(i) / 4];
            plan.read_output(&st, i, bytemuck::cast_slice_mut(&mut out))
                .expect("output");
            out
        })
        .collect()
}

/// Deterministic pseudo-random f32 values in [-1, 1).
pub fn rand_vec(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Asserts two output sets agree within a relative tolerance.
pub fn assert_close(a: &[Vec<f32>], b: &[Vec<f32>], rtol: f32) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert_eq!(x.len(), y.len());
        for (p, q) in x.iter().zip(y) {
            let tol = rtol * p.abs().max(q.abs()).max(1.0);
            assert!((p - q).abs() <= tol, "{p} vs {q}");
        }
    }
}
