//! The graph: values (typed, shaped, optionally constant) and nodes in topological order.

use super::{ConstRef, DType, Op};

/// Index of a value in [`Graph::values`].
pub type ValueId = usize;

/// Where a node runs: on a virtual NPU core (as part of an FC) or on the CPU pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Placement {
    Bpu,
    Cpu,
}

/// A tensor flowing through the graph.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Value {
    /// Name in the source model (unique in the graph).
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Static shape; `None` until shape inference has run (or for a dynamic model input
    /// the compile config has not fixed yet). Scalars are `Some(vec![])`.
    pub shape: Option<Vec<usize>>,
    /// Symbolic / unknown dimensions of a graph input as declared by the model
    /// (`None` entries), kept for error messages.
    pub declared: Option<Vec<Option<usize>>>,
    /// The constant content, for initializers and folded values.
    pub konst: Option<ConstRef>,
}

/// One operator application.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Node {
    /// Name of the node (the ONNX node name, or a generated unique one).
    pub name: String,
    /// The operator and its attributes.
    pub op: Op,
    /// Positional inputs; `None` for an omitted optional input.
    pub inputs: Vec<Option<ValueId>>,
    /// Outputs (omitted optional outputs are given fresh unused values).
    pub outputs: Vec<ValueId>,
    /// Names of the original ONNX nodes this node stands for (itself first, then every
    /// node fused or folded into it).
    pub absorbed: Vec<String>,
    /// Placement decided by the compiler; `None` before placement.
    pub placement: Option<Placement>,
}

/// A model graph. Nodes are kept in a topological order.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Graph {
    /// Model name.
    pub name: String,
    /// Every value.
    pub values: Vec<Value>,
    /// Nodes in topological order.
    pub nodes: Vec<Node>,
    /// Graph inputs (non-constant), in model order.
    pub inputs: Vec<ValueId>,
    /// Graph outputs, in model order.
    pub outputs: Vec<ValueId>,
}

impl Graph {
    /// Adds a value and returns its id.
    pub fn add_value(&mut self, v: Value) -> ValueId {
        self.values.push(v);
        self.values.len() - 1
    }

    /// Adds a constant value.
    pub fn add_const(&mut self, name: impl Into<String>, t: super::Tensor) -> ValueId {
        let v = Value {
            name: name.into(),
            dtype: t.dtype(),
            shape: Some(t.shape.clone()),
            declared: None,
            konst: Some(std::sync::Arc::new(t)),
        };
        self.add_value(v)
    }

    /// The value with this id.
    pub fn value(&self, id: ValueId) -> &Value {
        &self.values[id]
    }

    /// The constant content of input `i` of `node`, if that input exists and is constant.
    pub fn const_input(&self, node: &Node, i: usize) -> Option<&ConstRef> {
        node.inputs
            .get(i)
            .copied()
            .flatten()
            .and_then(|v| self.values[v].konst.as_ref())
    }

    /// Shape of a value, if known.
    pub fn shape(&self, id: ValueId) -> Option<&[usize]> {
        self.values[id].shape.as_deref()
    }

    /// For each value, how many node inputs and graph outputs read it.
    pub fn use_counts(&self) -> Vec<usize> {
        let mut uses = vec![0usize; self.values.len()];
        for n in &self.nodes {
            for v in n.inputs.iter().flatten() {
                uses[*v] += 1;
            }
        }
        for &o in &self.outputs {
            uses[o] += 1;
        }
        uses
    }

    /// For each value, the index of the node that produces it (`None` for graph inputs
    /// and constants).
    pub fn producers(&self) -> Vec<Option<usize>> {
        let mut p = vec![None; self.values.len()];
        for (i, n) in self.nodes.iter().enumerate() {
            for &o in &n.outputs {
                p[o] = Some(i);
            }
        }
        p
    }

    /// A fresh value name that does not collide with existing names.
    pub fn fresh_name(&self, base: &str) -> String {
        let mut i = self.values.len();
        loop {
            let cand = format!("{base}__{i}");
            if !self.values.iter().any(|v| v.name == cand) {
                return cand;
            }
            i += 1;
        }
    }
}
