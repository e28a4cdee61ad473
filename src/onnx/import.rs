//! The ONNX importer: `ModelProto` bytes → [`ir::Graph`].
//!
//! Steps: decode the protobuf; check the default-domain opset (11..=28); decode the
//! initializers (constants, also when listed as graph inputs); give every real graph
//! input a static shape (dynamic dims fixed by [`ImportOptions::input_shapes`], a dynamic
//! first dim defaults to 1); turn `Constant` nodes into constant values; sort the other
//! nodes topologically; convert each into one typed [`ir::Node`] (a few ONNX forms
//! expand to a short chain: variadic Sum/Max/Min/Mean, and opset < 13 Softmax, which
//! coerces to 2-D). Each node's output dtypes and shapes are inferred as it is added,
//! as far as that goes without constant folding; conversions that need a shape (legacy
//! Softmax, Resize `axes`) use what is known at that point.
//!
//! Invariants: every attribute of every node is either interpreted, checked to have its
//! one supported value, or explicitly marked as a documented no-op; anything else is an
//! `Error::BadAttribute`. Outputs the IR has no place for (BatchNormalization running
//! statistics, Dropout's mask, MaxPool's indices, LayerNormalization's statistics) are
//! dropped when nothing reads them and rejected otherwise.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};

use prost::Message;

use super::attrs::Attrs;
use super::proto::{self, GraphProto, ModelProto, NodeProto, ValueInfoProto};
use super::tensor::{decode_tensor, TensorCtx};
use crate::ir::{
    self, BinaryOp, ConvGeom, CoordMode, DType, Graph, NearestMode, Node, Op, PadMode, ReduceOp,
    ResizeMode, RnnDirection, Tensor, UnaryOp, Value, ValueId,
};
use crate::{Error, Result};

/// Oldest default-domain opset accepted.
pub const MIN_OPSET: i64 = 11;
/// Newest default-domain opset accepted (22..=28: the ONNX node-test conformance run
/// shows no divergence on the ops we import; unknown attributes still fail loudly).
pub const MAX_OPSET: i64 = 28;
/// Domain of vnpu's test-only operators (`Spin`, `Fail`).
pub const TEST_DOMAIN: &str = "ai.vnpu.test";

/// How to import a model.
#[derive(Debug, Clone, Default)]
pub struct ImportOptions {
    /// Directory that external-data paths are relative to (the model's directory);
    /// `None` rejects models with external data.
    pub base_dir: Option<PathBuf>,
    /// Static shapes for graph inputs by name; fixes dynamic dims (static dims given by
    /// the model must agree).
    pub input_shapes: HashMap<String, Vec<usize>>,
    /// Name of the imported graph; defaults to the ONNX graph name, then `"model"`.
    pub model_name: Option<String>,
}

/// Reads and imports an ONNX file. External data is looked up beside the file unless
/// `opts.base_dir` says otherwise; the model name defaults to the file stem.
pub fn import_file(path: &Path, opts: &ImportOptions) -> Result<Graph> {
    let bytes = std::fs::read(path).map_err(|e| Error::Io {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let mut o = opts.clone();
    if o.base_dir.is_none() {
        o.base_dir = Some(
            path.parent()
                .map(Path::to_path_buf)
                .unwrap_or_else(|| PathBuf::from(".")),
        );
    }
    if o.model_name.is_none() {
        o.model_name = path.file_stem().map(|s| s.to_string_lossy().into_owned());
    }
    import_model(&bytes, &o)
}

/// Imports an ONNX model from its protobuf bytes.
///
/// Never panics on any input: corrupt, truncated or random bytes give
/// `Error::OnnxFormat` (this is the importer's fuzz entry point).
pub fn import_model(bytes: &[u8], opts: &ImportOptions) -> Result<Graph> {
    let fallback = opts.model_name.clone().unwrap_or_else(|| "model".into());
    let model = ModelProto::decode(bytes).map_err(|e| Error::OnnxFormat {
        model: fallback.clone(),
        reason: format!("not an ONNX protobuf: {e}"),
    })?;
    let Some(gp) = model.graph.as_ref() else {
        return Err(Error::OnnxFormat {
            model: fallback,
            reason: "the model has no graph".into(),
        });
    };
    let name = opts
        .model_name
        .clone()
        .or_else(|| (!gp.name.is_empty()).then(|| gp.name.clone()))
        .unwrap_or_else(|| "model".into());
    let fmt = |reason: String| Error::OnnxFormat {
        model: name.clone(),
        reason,
    };
    let mut opset = None;
    for o in &model.opset_import {
        if o.domain.is_empty() || o.domain == "ai.onnx" {
            if opset.is_some() {
                return Err(fmt("the default opset is imported twice".into()));
            }
            opset = Some(o.version);
        }
    }
    let opset = match opset {
        // IR version 3+ files must import an opset; older tooling omitted it (opset 1).
        None => return Err(fmt("the model imports no default-domain opset".into())),
        Some(v) if !(MIN_OPSET..=MAX_OPSET).contains(&v) => {
            return Err(fmt(format!(
                "opset {v} is not supported (vnpu imports opsets {MIN_OPSET} to {MAX_OPSET}); \
                 convert the model with onnx.version_converter"
            )))
        }
        Some(v) => v,
    };
    let mut imp = Importer {
        model: name.clone(),
        opset,
        opts,
        g: Graph {
            name,
            ..Graph::default()
        },
        by_name: HashMap::new(),
        node_names: HashSet::new(),
        used: HashSet::new(),
        declared: HashMap::new(),
        reserved: HashSet::new(),
    };
    imp.run(gp)?;
    Ok(imp.g)
}

struct Importer<'a> {
    model: String,
    opset: i64,
    opts: &'a ImportOptions,
    g: Graph,
    by_name: HashMap<String, ValueId>,
    node_names: HashSet<String>,
    /// Value names read by some node or listed as graph outputs.
    used: HashSet<&'a str>,
    /// Element types declared in `value_info` / graph outputs.
    declared: HashMap<&'a str, DType>,
    /// Every value name the file uses, so generated names never collide with one.
    reserved: HashSet<&'a str>,
}

/// What one ONNX node converts to in the common case: an op, its input arity and how
/// many outputs the IR node has.
struct Plain {
    op: Op,
    min_in: usize,
    max_in: usize,
    nout: usize,
}

fn plain(op: Op, min_in: usize, max_in: usize) -> Plain {
    Plain {
        op,
        min_in,
        max_in,
        nout: 1,
    }
}

fn is_default_domain(d: &str) -> bool {
    d.is_empty() || d == "ai.onnx"
}

fn simple_unary(op: &str) -> Option<UnaryOp> {
    Some(match op {
        "Relu" => UnaryOp::Relu,
        "Sigmoid" => UnaryOp::Sigmoid,
        "HardSwish" => UnaryOp::HardSwish,
        "Tanh" => UnaryOp::Tanh,
        "Erf" => UnaryOp::Erf,
        "Softplus" => UnaryOp::Softplus,
        "Exp" => UnaryOp::Exp,
        "Log" => UnaryOp::Log,
        "Abs" => UnaryOp::Abs,
        "Neg" => UnaryOp::Neg,
        "Sqrt" => UnaryOp::Sqrt,
        "Reciprocal" => UnaryOp::Reciprocal,
        "Floor" => UnaryOp::Floor,
        "Ceil" => UnaryOp::Ceil,
        "Round" => UnaryOp::Round,
        "Sign" => UnaryOp::Sign,
        "Not" => UnaryOp::Not,
        "Sin" => UnaryOp::Sin,
        "Cos" => UnaryOp::Cos,
        "Identity" => UnaryOp::Identity,
        _ => return None,
    })
}

fn simple_binary(op: &str) -> Option<BinaryOp> {
    Some(match op {
        "Add" => BinaryOp::Add,
        "Sub" => BinaryOp::Sub,
        "Mul" => BinaryOp::Mul,
        "Div" => BinaryOp::Div,
        "Pow" => BinaryOp::Pow,
        "Equal" => BinaryOp::Equal,
        "Less" => BinaryOp::Less,
        "LessOrEqual" => BinaryOp::LessOrEqual,
        "Greater" => BinaryOp::Greater,
        "GreaterOrEqual" => BinaryOp::GreaterOrEqual,
        "And" => BinaryOp::And,
        "Or" => BinaryOp::Or,
        "Xor" => BinaryOp::Xor,
        "PRelu" => BinaryOp::PRelu,
        _ => return None,
    })
}

fn reduce_op(op: &str) -> Option<ReduceOp> {
    Some(match op {
        "ReduceMean" => ReduceOp::Mean,
        "ReduceSum" => ReduceOp::Sum,
        "ReduceMax" => ReduceOp::Max,
        "ReduceMin" => ReduceOp::Min,
        "ReduceProd" => ReduceOp::Prod,
        "ReduceL1" => ReduceOp::L1,
        "ReduceL2" => ReduceOp::L2,
        "ReduceSumSquare" => ReduceOp::SumSquare,
        "ReduceLogSumExp" => ReduceOp::LogSumExp,
        _ => return None,
    })
}

impl<'a> Importer<'a> {
    fn fmt(&self, reason: impl Into<String>) -> Error {
        Error::OnnxFormat {
            model: self.model.clone(),
            reason: reason.into(),
        }
    }

    fn run(&mut self, gp: &'a GraphProto) -> Result<()> {
        let base_dir = self.opts.base_dir.clone();
        let model = self.model.clone();
        let tcx = TensorCtx {
            model: &model,
            base_dir: base_dir.as_deref(),
        };
        for vi in gp.value_info.iter().chain(&gp.output) {
            if let Some(d) = vi
                .r#type
                .as_ref()
                .and_then(|t| t.tensor_type.as_ref())
                .and_then(|t| DType::from_onnx_code(t.elem_type))
            {
                self.declared.insert(vi.name.as_str(), d);
            }
        }
        for t in &gp.initializer {
            if t.name.is_empty() {
                return Err(self.fmt("an initializer has no name"));
            }
            if self.by_name.contains_key(&t.name) {
                return Err(self.fmt(format!("initializer '{}' is defined twice", t.name)));
            }
            let tensor = decode_tensor(t, &tcx)?;
            let id = self.g.add_const(t.name.clone(), tensor);
            self.by_name.insert(t.name.clone(), id);
        }
        for name in self.opts.input_shapes.keys() {
            let is_input = gp
                .input
                .iter()
                .any(|vi| vi.name == *name && !self.by_name.contains_key(name));
            if !is_input {
                return Err(Error::CompileOption {
                    option: "input_shapes".into(),
                    reason: format!("the model has no (non-constant) input named '{name}'"),
                });
            }
        }
        for vi in &gp.input {
            if self.by_name.contains_key(&vi.name) {
                // An initializer also listed as an input (IR < 4 style): a constant.
                continue;
            }
            let id = self.graph_input(vi)?;
            self.g.inputs.push(id);
        }
        for n in &gp.node {
            for i in &n.input {
                self.used.insert(i.as_str());
            }
            self.reserved.extend(n.output.iter().map(String::as_str));
        }
        for o in &gp.output {
            self.used.insert(o.name.as_str());
        }
        // Constant nodes have no inputs: make them constants first, so the rest can
        // refer to them whatever their position in the file.
        let mut rest = Vec::with_capacity(gp.node.len());
        for n in &gp.node {
            if is_default_domain(&n.domain) && n.op_type == "Constant" {
                self.constant_node(n, &tcx)?;
            } else {
                rest.push(n);
            }
        }
        for n in self.topo_sort(&rest)? {
            let name = self.node_name(n);
            self.convert(n, name)?;
        }
        for o in &gp.output {
            let id = *self.by_name.get(&o.name).ok_or_else(|| {
                self.fmt(format!(
                    "graph output '{}' is not produced by anything",
                    o.name
                ))
            })?;
            self.g.outputs.push(id);
        }
        if self.g.outputs.is_empty() {
            return Err(self.fmt("the graph has no outputs"));
        }
        Ok(())
    }

    /// A graph input value with its static shape.
    fn graph_input(&mut self, vi: &ValueInfoProto) -> Result<ValueId> {
        let name = &vi.name;
        if name.is_empty() {
            return Err(self.fmt("a graph input has no name"));
        }
        let tt = vi
            .r#type
            .as_ref()
            .and_then(|t| t.tensor_type.as_ref())
            .ok_or_else(|| self.fmt(format!("graph input '{name}' is not a tensor")))?;
        let dtype = DType::from_onnx_code(tt.elem_type).ok_or_else(|| {
            self.fmt(format!(
                "graph input '{name}' has element type {}, which vnpu does not support",
                proto::data_type::name(tt.elem_type)
            ))
        })?;
        let declared: Option<Vec<Option<usize>>> = match &tt.shape {
            None => None,
            Some(s) => Some(
                s.dim
                    .iter()
                    .map(|d| match d.dim_value {
                        Some(v) if v >= 0 => usize::try_from(v).map(Some).map_err(|_| ()),
                        Some(_) => Err(()),
                        None => Ok(None),
                    })
                    .collect::<std::result::Result<_, ()>>()
                    .map_err(|_| {
                        self.fmt(format!("graph input '{name}' has a negative dimension"))
                    })?,
            ),
        };
        let shape = match (self.opts.input_shapes.get(name), &declared) {
            (Some(fixed), Some(decl)) => {
                if fixed.len() != decl.len() {
                    return Err(Error::CompileOption {
                        option: "input_shapes".into(),
                        reason: format!(
                            "input '{name}' has rank {}, the given shape {fixed:?} has rank {}",
                            decl.len(),
                            fixed.len()
                        ),
                    });
                }
                for (i, (f, d)) in fixed.iter().zip(decl).enumerate() {
                    if let Some(d) = d {
                        if d != f {
                            return Err(Error::CompileOption {
                                option: "input_shapes".into(),
                                reason: format!(
                                    "input '{name}' dim {i} is {d} in the model, the given shape {fixed:?} says {f}"
                                ),
                            });
                        }
                    }
                }
                fixed.clone()
            }
            (Some(fixed), None) => fixed.clone(),
            (None, None) => {
                return Err(self.fmt(format!(
                    "graph input '{name}' has no shape; give one in input_shapes"
                )))
            }
            (None, Some(decl)) => {
                let mut s = Vec::with_capacity(decl.len());
                for (i, d) in decl.iter().enumerate() {
                    match d {
                        Some(v) => s.push(*v),
                        None if i == 0 => s.push(1),
                        None => {
                            let sym = tt
                                .shape
                                .as_ref()
                                .and_then(|sh| sh.dim.get(i))
                                .and_then(|d| d.dim_param.clone())
                                .unwrap_or_else(|| "?".into());
                            return Err(self.fmt(format!(
                                "graph input '{name}' dim {i} ('{sym}') is dynamic; fix it in input_shapes"
                            )));
                        }
                    }
                }
                s
            }
        };
        if shape
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
            .is_none()
        {
            return Err(self.fmt(format!("graph input '{name}' shape {shape:?} is too large")));
        }
        if self.by_name.contains_key(name) {
            return Err(self.fmt(format!("graph input '{name}' is listed twice")));
        }
        let id = self.g.add_value(Value {
            name: name.clone(),
            dtype,
            shape: Some(shape),
            declared,
            konst: None,
        });
        self.by_name.insert(name.clone(), id);
        Ok(id)
    }

    fn constant_node(&mut self, n: &NodeProto, tcx: &TensorCtx<'_>) -> Result<()> {
        let name = self.node_name(n);
        let a = Attrs::new(&name, "Constant", &n.attribute)?;
        if !n.input.is_empty() || n.output.len() != 1 || n.output[0].is_empty() {
            return Err(self.fmt(format!(
                "Constant node '{name}' must have no inputs and one named output"
            )));
        }
        let t = if let Some(t) = a.tensor("value")? {
            decode_tensor(t, tcx)?
        } else if let Some(f) = a.float("value_float")? {
            Tensor::from_f32(vec![], vec![f])
        } else if let Some(v) = a.floats("value_floats")? {
            Tensor::from_f32(vec![v.len()], v)
        } else if let Some(i) = a.int("value_int")? {
            Tensor::from_i64(vec![], vec![i])
        } else if let Some(v) = a.ints("value_ints")? {
            Tensor::from_i64(vec![v.len()], v)
        } else if a.has("sparse_value") || a.has("value_string") || a.has("value_strings") {
            return Err(Error::UnsupportedOp {
                node: name,
                op: "Constant".into(),
                detail: "sparse and string constants are not supported".into(),
            });
        } else {
            return Err(a.err("value", "Constant node without a value"));
        };
        a.finish()?;
        let out = &n.output[0];
        if self.by_name.contains_key(out) {
            return Err(self.fmt(format!("value '{out}' is defined twice")));
        }
        let id = self.g.add_const(out.clone(), t);
        self.by_name.insert(out.clone(), id);
        Ok(())
    }

    /// The node's name, or a generated unique one; duplicates get a suffix.
    fn node_name(&mut self, n: &NodeProto) -> String {
        let base = if n.name.is_empty() {
            format!("{}_{}", n.op_type, self.node_names.len())
        } else {
            n.name.clone()
        };
        let mut cand = base.clone();
        let mut k = 1;
        while self.node_names.contains(&cand) {
            cand = format!("{base}_{k}");
            k += 1;
        }
        self.node_names.insert(cand.clone());
        cand
    }

    /// Kahn's algorithm; ties keep file order.
    fn topo_sort<'n>(&self, nodes: &[&'n NodeProto]) -> Result<Vec<&'n NodeProto>> {
        let mut producer: HashMap<&str, usize> = HashMap::new();
        for (i, n) in nodes.iter().enumerate() {
            for o in n.output.iter().filter(|o| !o.is_empty()) {
                if producer.insert(o.as_str(), i).is_some() || self.by_name.contains_key(o) {
                    return Err(self.fmt(format!("value '{o}' is produced more than once")));
                }
            }
        }
        let mut indeg = vec![0usize; nodes.len()];
        let mut users: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
        for (i, n) in nodes.iter().enumerate() {
            let mut deps = BTreeSet::new();
            for inp in n.input.iter().filter(|s| !s.is_empty()) {
                match producer.get(inp.as_str()) {
                    Some(&p) => {
                        deps.insert(p);
                    }
                    None if self.by_name.contains_key(inp) => {}
                    None => {
                        return Err(self.fmt(format!(
                            "node '{}' ({}) reads '{inp}', which no node, input or initializer provides",
                            n.name, n.op_type
                        )))
                    }
                }
            }
            indeg[i] = deps.len();
            for p in deps {
                users[p].push(i);
            }
        }
        let mut ready: BTreeSet<usize> = (0..nodes.len()).filter(|&i| indeg[i] == 0).collect();
        let mut order = Vec::with_capacity(nodes.len());
        while let Some(i) = ready.pop_first() {
            order.push(nodes[i]);
            for &u in &users[i] {
                indeg[u] -= 1;
                if indeg[u] == 0 {
                    ready.insert(u);
                }
            }
        }
        if order.len() != nodes.len() {
            return Err(self.fmt("the graph has a cycle"));
        }
        Ok(order)
    }

    fn new_value(&mut self, name: String, dtype: DType) -> ValueId {
        let id = self.g.add_value(Value {
            name: name.clone(),
            dtype,
            shape: None,
            declared: None,
            konst: None,
        });
        self.by_name.insert(name, id);
        id
    }

    /// Exactly `keep` output values for node `n`: named ones are created, omitted ones
    /// get fresh unused values. Outputs past `keep` must be unused.
    fn outputs(&mut self, n: &'a NodeProto, node: &str, keep: usize) -> Result<Vec<ValueId>> {
        if n.output.iter().all(String::is_empty) {
            return Err(self.fmt(format!("node '{node}' ({}) has no output", n.op_type)));
        }
        for (i, o) in n.output.iter().enumerate().skip(keep) {
            if !o.is_empty() && self.used.contains(o.as_str()) {
                return Err(Error::UnsupportedOp {
                    node: node.into(),
                    op: n.op_type.clone(),
                    detail: format!("output #{i} ('{o}') is not supported"),
                });
            }
        }
        let mut ids = Vec::with_capacity(keep);
        for i in 0..keep {
            let name = n.output.get(i).filter(|o| !o.is_empty()).cloned();
            let id = match name {
                Some(o) => {
                    let dt = self.declared.get(o.as_str()).copied().unwrap_or(DType::F32);
                    self.new_value(o, dt)
                }
                None => {
                    let fresh = self.fresh(&format!("{node}_unused_out{i}"));
                    self.new_value(fresh, DType::F32)
                }
            };
            ids.push(id);
        }
        Ok(ids)
    }

    fn push(
        &mut self,
        name: String,
        op: Op,
        inputs: Vec<Option<ValueId>>,
        outputs: Vec<ValueId>,
        orig: &str,
    ) {
        self.g.nodes.push(Node {
            name,
            op,
            inputs,
            outputs,
            absorbed: vec![orig.to_string()],
            placement: None,
        });
        infer_last(&mut self.g);
    }

    /// A value name based on `base` that no value of the graph or the file uses.
    fn fresh(&self, base: &str) -> String {
        let taken = |n: &str| self.by_name.contains_key(n) || self.reserved.contains(n);
        if !taken(base) {
            return base.to_string();
        }
        (1..)
            .map(|k| format!("{base}__{k}"))
            .find(|c| !taken(c))
            .unwrap_or_else(|| base.to_string())
    }

    /// A value for an intermediate result of a multi-node expansion.
    fn temp(&mut self, node: &str, what: &str, dtype: DType) -> ValueId {
        let name = self.fresh(&format!("{node}/{what}"));
        self.new_value(name, dtype)
    }

    fn check_arity(
        &self,
        node: &str,
        op: &str,
        ins: &[Option<ValueId>],
        min: usize,
        max: usize,
    ) -> Result<()> {
        if ins.len() < min || ins.len() > max {
            let want = if min == max {
                format!("{min}")
            } else if max == usize::MAX {
                format!("at least {min}")
            } else {
                format!("{min} to {max}")
            };
            return Err(self.fmt(format!(
                "node '{node}' ({op}) has {} inputs, expects {want}",
                ins.len()
            )));
        }
        if let Some(i) = ins.iter().take(min).position(Option::is_none) {
            return Err(self.fmt(format!(
                "node '{node}' ({op}): required input #{i} is empty"
            )));
        }
        Ok(())
    }

    fn convert(&mut self, n: &'a NodeProto, name: String) -> Result<()> {
        let op_type = n.op_type.as_str();
        let ins: Vec<Option<ValueId>> =
            n.input
                .iter()
                .map(|s| {
                    if s.is_empty() {
                        Ok(None)
                    } else {
                        self.by_name.get(s).copied().map(Some).ok_or_else(|| {
                            self.fmt(format!("node '{name}' reads unknown value '{s}'"))
                        })
                    }
                })
                .collect::<Result<_>>()?;
        let a = Attrs::new(&name, op_type, &n.attribute)?;
        if n.domain == TEST_DOMAIN {
            let op = match op_type {
                "Spin" => {
                    let m = a.int_req("micros")?;
                    let micros = u64::try_from(m)
                        .map_err(|_| a.err("micros", format!("must be >= 0, got {m}")))?;
                    Op::Spin { micros }
                }
                "Fail" => Op::Fail {
                    panic: a.bool_or("panic", false)?,
                },
                _ => {
                    return Err(Error::UnsupportedOp {
                        node: name,
                        op: format!("{}::{op_type}", n.domain),
                        detail: "unknown test operator".into(),
                    })
                }
            };
            a.finish()?;
            self.check_arity(&name, op_type, &ins, 1, 1)?;
            let outs = self.outputs(n, &name, 1)?;
            self.push(name.clone(), op, ins, outs, &name);
            return Ok(());
        }
        if !is_default_domain(&n.domain) {
            return Err(Error::UnsupportedOp {
                node: name,
                op: format!("{}::{op_type}", n.domain),
                detail: format!("operator domain '{}' is not supported", n.domain),
            });
        }
        let p = match op_type {
            "Softmax" | "LogSoftmax" => return self.softmax(n, name.clone(), &a, ins),
            "Sum" | "Mean" | "Max" | "Min" => return self.variadic(n, name.clone(), &a, ins),
            "Upsample" => return self.upsample(n, name.clone(), &a, ins),
            _ => self.plain(n, &name, &a, &ins)?,
        };
        let resize_axes = if op_type == "Resize" {
            a.ints("axes")?
        } else {
            None
        };
        a.finish()?;
        let mut ins = ins;
        self.check_arity(&name, op_type, &ins, p.min_in, p.max_in)?;
        if op_type == "Dropout" {
            // Dropout in training mode drops values at random: not an inference op.
            let training = ins.get(2).copied().flatten().map(|v| {
                self.g.values[v]
                    .konst
                    .as_ref()
                    .map(|k| k.to_f32_vec().first().copied().unwrap_or(0.0) != 0.0)
            });
            if matches!(training, Some(Some(true)) | Some(None)) {
                return Err(Error::BadAttribute {
                    node: name.clone(),
                    op: op_type.to_string(),
                    attr: "training_mode".into(),
                    reason: "training mode (random dropping) is not supported; vnpu runs inference"
                        .into(),
                });
            }
        }
        if matches!(p.op, Op::Unary(UnaryOp::Identity) | Op::Cast { .. }) {
            // Dropout's ratio / training_mode inputs mean nothing at inference;
            // CastLike's second input only carried its type.
            ins.truncate(1);
        }
        if matches!(p.op, Op::Resize { .. }) {
            // Opset 11-12 Resize passes unused roi/scales as empty tensors.
            for slot in ins.iter_mut().skip(1) {
                if slot.is_some_and(|v| {
                    self.g.values[v]
                        .konst
                        .as_ref()
                        .is_some_and(|k| k.numel() == 0)
                }) {
                    *slot = None;
                }
            }
            if let Some(axes) = resize_axes {
                self.expand_resize_axes(&a, &mut ins, &axes)?;
            }
        }
        let outs = self.outputs(n, &name, p.nout)?;
        self.push(name.clone(), p.op, ins, outs, &name);
        Ok(())
    }

    /// Every single-node operator.
    fn plain(
        &self,
        n: &NodeProto,
        name: &str,
        a: &Attrs<'_>,
        ins: &[Option<ValueId>],
    ) -> Result<Plain> {
        let op_type = n.op_type.as_str();
        if let Some(u) = simple_unary(op_type) {
            return Ok(plain(Op::Unary(u), 1, 1));
        }
        if let Some(b) = simple_binary(op_type) {
            return Ok(plain(Op::Binary(b), 2, 2));
        }
        if let Some(r) = reduce_op(op_type) {
            return Ok(plain(
                Op::Reduce {
                    op: r,
                    axes: a.ints("axes")?,
                    keepdims: a.bool_or("keepdims", true)?,
                    noop_with_empty_axes: a.bool_or("noop_with_empty_axes", false)?,
                },
                1,
                2,
            ));
        }
        let p = match op_type {
            "Dropout" => {
                a.ignore(&["seed", "ratio"]);
                plain(Op::Unary(UnaryOp::Identity), 1, 3)
            }
            "LeakyRelu" => plain(
                Op::Unary(UnaryOp::LeakyRelu {
                    alpha: a.float_or("alpha", 0.01)?,
                }),
                1,
                1,
            ),
            "Elu" => plain(
                Op::Unary(UnaryOp::Elu {
                    alpha: a.float_or("alpha", 1.0)?,
                }),
                1,
                1,
            ),
            "Selu" => plain(
                Op::Unary(UnaryOp::Selu {
                    alpha: a.float_or("alpha", 1.673_263_2)?,
                    gamma: a.float_or("gamma", 1.050_701)?,
                }),
                1,
                1,
            ),
            "HardSigmoid" => plain(
                Op::Unary(UnaryOp::HardSigmoid {
                    alpha: a.float_or("alpha", 0.2)?,
                    beta: a.float_or("beta", 0.5)?,
                }),
                1,
                1,
            ),
            "Gelu" => {
                let tanh_approx = match a.string_or("approximate", "none")?.as_str() {
                    "none" => false,
                    "tanh" => true,
                    other => return Err(a.err("approximate", format!("unknown value '{other}'"))),
                };
                plain(Op::Unary(UnaryOp::Gelu { tanh_approx }), 1, 1)
            }
            "Clip" => {
                if a.has("min") || a.has("max") {
                    // Opset < 11 form: bounds as attributes.
                    let min = a.float_or("min", f32::NEG_INFINITY)?;
                    let max = a.float_or("max", f32::INFINITY)?;
                    plain(Op::Unary(UnaryOp::Clip { min, max }), 1, 1)
                } else {
                    plain(Op::ClipDynamic, 1, 3)
                }
            }
            "Mod" => plain(
                Op::Binary(BinaryOp::Mod {
                    fmod: a.bool_or("fmod", false)?,
                }),
                2,
                2,
            ),
            "Where" => plain(Op::Where, 3, 3),
            "MatMul" => plain(Op::MatMul { post: vec![] }, 2, 2),
            "Gemm" => plain(
                Op::Gemm {
                    alpha: a.float_or("alpha", 1.0)?,
                    beta: a.float_or("beta", 1.0)?,
                    trans_a: a.bool_or("transA", false)?,
                    trans_b: a.bool_or("transB", false)?,
                    post: vec![],
                },
                2,
                3,
            ),
            "Conv" => {
                let geom = self.conv_geom(a, ins.get(1).copied().flatten())?;
                plain(
                    Op::Conv {
                        geom,
                        group: a.positive("group", a.int_or("group", 1)?)?,
                        post: vec![],
                    },
                    2,
                    3,
                )
            }
            "ConvTranspose" => {
                let geom = self.conv_geom(a, ins.get(1).copied().flatten())?;
                let ns = geom.kernel.len();
                let output_padding = match a.ints("output_padding")? {
                    None => vec![0; ns],
                    Some(v) => {
                        if v.len() != ns {
                            return Err(a.err(
                                "output_padding",
                                format!("needs {ns} values, has {}", v.len()),
                            ));
                        }
                        let mut out = Vec::with_capacity(ns);
                        for (i, &p) in v.iter().enumerate() {
                            let limit = geom.strides[i].max(geom.dilations[i]);
                            match usize::try_from(p) {
                                Ok(p) if p < limit => out.push(p),
                                _ => {
                                    return Err(a.err(
                                        "output_padding",
                                        format!("value {p} must be in 0..{limit} (max of stride and dilation)"),
                                    ))
                                }
                            }
                        }
                        out
                    }
                };
                let output_shape = match a.ints("output_shape")? {
                    None => vec![],
                    Some(v) => {
                        let spatial = if v.len() == ns + 2 { &v[2..] } else { &v[..] };
                        if spatial.len() != ns {
                            return Err(a.err(
                                "output_shape",
                                format!("needs {ns} spatial values, has {}", v.len()),
                            ));
                        }
                        spatial
                            .iter()
                            .map(|&d| {
                                usize::try_from(d).ok().filter(|&d| d > 0).ok_or_else(|| {
                                    a.err("output_shape", format!("value {d} must be positive"))
                                })
                            })
                            .collect::<Result<_>>()?
                    }
                };
                plain(
                    Op::ConvTranspose {
                        geom,
                        group: a.positive("group", a.int_or("group", 1)?)?,
                        output_padding,
                        output_shape,
                    },
                    2,
                    3,
                )
            }
            "MaxPool" => {
                let geom = self.conv_geom(a, None)?;
                if a.int_or("storage_order", 0)? != 0
                    && n.output.get(1).is_some_and(|o| !o.is_empty())
                {
                    return Err(a.err("storage_order", "only row-major (0) indices are supported"));
                }
                plain(
                    Op::MaxPool {
                        geom,
                        ceil_mode: a.bool_or("ceil_mode", false)?,
                    },
                    1,
                    1,
                )
            }
            "AveragePool" => {
                let geom = self.conv_geom(a, None)?;
                plain(
                    Op::AveragePool {
                        geom,
                        ceil_mode: a.bool_or("ceil_mode", false)?,
                        count_include_pad: a.bool_or("count_include_pad", false)?,
                    },
                    1,
                    1,
                )
            }
            "GlobalAveragePool" => plain(Op::GlobalAveragePool, 1, 1),
            "GlobalMaxPool" => plain(Op::GlobalMaxPool, 1, 1),
            "BatchNormalization" => {
                if a.bool_or("training_mode", false)? {
                    return Err(a.err(
                        "training_mode",
                        "training mode is not supported (inference only)",
                    ));
                }
                if a.int_or("spatial", 1)? != 1 {
                    return Err(a.err("spatial", "only spatial=1 is supported"));
                }
                a.ignore(&["momentum"]);
                plain(
                    Op::BatchNorm {
                        epsilon: a.float_or("epsilon", 1e-5)?,
                    },
                    5,
                    5,
                )
            }
            "InstanceNormalization" => plain(
                Op::InstanceNorm {
                    epsilon: a.float_or("epsilon", 1e-5)?,
                },
                3,
                3,
            ),
            "LayerNormalization" => {
                // stash_type only sets the precision of the statistics; we compute in f32.
                a.ignore(&["stash_type"]);
                plain(
                    Op::LayerNorm {
                        axis: a.int_or("axis", -1)?,
                        epsilon: a.float_or("epsilon", 1e-5)?,
                    },
                    2,
                    3,
                )
            }
            "Concat" => plain(
                Op::Concat {
                    axis: a.int_req("axis")?,
                },
                1,
                usize::MAX,
            ),
            "Split" => {
                let nout = n.output.len().max(1);
                if let Some(k) = a.int("num_outputs")? {
                    if usize::try_from(k).ok() != Some(nout) {
                        return Err(a.err(
                            "num_outputs",
                            format!("is {k} but the node has {nout} outputs"),
                        ));
                    }
                }
                let split = a.ints("split")?;
                if let Some(s) = &split {
                    if s.len() != nout || s.iter().any(|&x| x < 0) {
                        return Err(a.err(
                            "split",
                            format!("{s:?} does not give {nout} non-negative sizes"),
                        ));
                    }
                }
                Plain {
                    op: Op::Split {
                        axis: a.int_or("axis", 0)?,
                        split,
                        num_outputs: nout,
                    },
                    min_in: 1,
                    max_in: 2,
                    nout,
                }
            }
            "Slice" => plain(Op::Slice, 3, 5),
            "Reshape" => plain(
                Op::Reshape {
                    allowzero: a.bool_or("allowzero", false)?,
                },
                2,
                2,
            ),
            "Flatten" => plain(
                Op::Flatten {
                    axis: a.int_or("axis", 1)?,
                },
                1,
                1,
            ),
            "Squeeze" => plain(
                Op::Squeeze {
                    axes: a.ints("axes")?,
                },
                1,
                2,
            ),
            "Unsqueeze" => {
                let axes = a.ints("axes")?;
                if axes.is_none() && ins.get(1).copied().flatten().is_none() {
                    return Err(a.err("axes", "Unsqueeze needs axes (attribute or input)"));
                }
                plain(Op::Unsqueeze { axes }, 1, 2)
            }
            "Transpose" => {
                let perm = match a.ints("perm")? {
                    None => None,
                    Some(p) => {
                        let mut seen = vec![false; p.len()];
                        let mut out = Vec::with_capacity(p.len());
                        for &x in &p {
                            match usize::try_from(x).ok().filter(|&x| x < p.len()) {
                                Some(x) if !seen[x] => {
                                    seen[x] = true;
                                    out.push(x);
                                }
                                _ => {
                                    return Err(a.err("perm", format!("{p:?} is not a permutation")))
                                }
                            }
                        }
                        Some(out)
                    }
                };
                plain(Op::Transpose { perm }, 1, 1)
            }
            "Pad" => {
                let mode = match a.string_or("mode", "constant")?.as_str() {
                    "constant" => PadMode::Constant,
                    "reflect" => PadMode::Reflect,
                    "edge" => PadMode::Edge,
                    "wrap" => PadMode::Wrap,
                    other => return Err(a.err("mode", format!("unknown pad mode '{other}'"))),
                };
                plain(Op::Pad { mode }, 2, 4)
            }
            "Resize" => plain(self.resize_op(a)?, 1, 4),
            "ArgMax" | "ArgMin" => {
                let axis = a.int_or("axis", 0)?;
                let keepdims = a.bool_or("keepdims", true)?;
                let select_last_index = a.bool_or("select_last_index", false)?;
                let op = if op_type == "ArgMax" {
                    Op::ArgMax {
                        axis,
                        keepdims,
                        select_last_index,
                    }
                } else {
                    Op::ArgMin {
                        axis,
                        keepdims,
                        select_last_index,
                    }
                };
                plain(op, 1, 1)
            }
            "TopK" => Plain {
                op: Op::TopK {
                    axis: a.int_or("axis", -1)?,
                    largest: a.bool_or("largest", true)?,
                    sorted: a.bool_or("sorted", true)?,
                },
                min_in: 2,
                max_in: 2,
                nout: 2,
            },
            "Gather" => plain(
                Op::Gather {
                    axis: a.int_or("axis", 0)?,
                },
                2,
                2,
            ),
            "GatherElements" => plain(
                Op::GatherElements {
                    axis: a.int_or("axis", 0)?,
                },
                2,
                2,
            ),
            "Expand" => plain(Op::Expand, 2, 2),
            "Cast" => {
                let code = a.int_req("to")?;
                let code = i32::try_from(code).unwrap_or(0);
                let to = match code {
                    // The IR computes floats in f32: casts to other float widths keep
                    // the value in f32 (more precise than the model asked for).
                    proto::data_type::FLOAT16
                    | proto::data_type::BFLOAT16
                    | proto::data_type::DOUBLE => Some(DType::F32),
                    c => DType::from_onnx_code(c),
                };
                let to = to.ok_or_else(|| {
                    a.err(
                        "to",
                        format!("cast to {} is not supported", proto::data_type::name(code)),
                    )
                })?;
                // saturate only concerns float8 targets, which we reject above.
                a.ignore(&["saturate"]);
                plain(Op::Cast { to }, 1, 1)
            }
            "CastLike" => {
                // The target type must be known here (input, constant or inferred).
                let target = ins.get(1).copied().flatten();
                let to = target
                    .map(|t| &self.g.values[t])
                    .filter(|v| v.shape.is_some())
                    .map(|v| v.dtype)
                    .ok_or_else(|| Error::UnsupportedOp {
                        node: name.into(),
                        op: op_type.into(),
                        detail: "the type of target_type is not known at import".into(),
                    })?;
                a.ignore(&["saturate"]);
                plain(Op::Cast { to }, 2, 2)
            }
            "LSTM" | "GRU" => return self.rnn(op_type, a),
            "DepthToSpace" => {
                let blocksize = a.positive("blocksize", a.int_req("blocksize")?)?;
                let crd_mode = match a.string_or("mode", "DCR")?.as_str() {
                    "DCR" => false,
                    "CRD" => true,
                    other => return Err(a.err("mode", format!("unknown mode '{other}'"))),
                };
                plain(
                    Op::DepthToSpace {
                        blocksize,
                        crd_mode,
                    },
                    1,
                    1,
                )
            }
            "SpaceToDepth" => plain(
                Op::SpaceToDepth {
                    blocksize: a.positive("blocksize", a.int_req("blocksize")?)?,
                },
                1,
                1,
            ),
            "Shape" => plain(
                Op::Shape {
                    start: a.int_or("start", 0)?,
                    end: a.int("end")?,
                },
                1,
                1,
            ),
            "ConstantOfShape" => {
                let value = match a.tensor("value")? {
                    None => Tensor::from_f32(vec![1], vec![0.0]),
                    Some(t) => {
                        let tcx = TensorCtx {
                            model: &self.model,
                            base_dir: self.opts.base_dir.as_deref(),
                        };
                        let v = decode_tensor(t, &tcx)?;
                        if v.numel() != 1 {
                            return Err(a.err(
                                "value",
                                format!("must hold one element, holds {}", v.numel()),
                            ));
                        }
                        v
                    }
                };
                plain(Op::ConstantOfShape { value }, 1, 1)
            }
            "Range" => plain(Op::Range, 3, 3),
            "Tile" => plain(Op::Tile, 2, 2),
            "CumSum" => plain(
                Op::CumSum {
                    exclusive: a.bool_or("exclusive", false)?,
                    reverse: a.bool_or("reverse", false)?,
                },
                2,
                2,
            ),
            "NonMaxSuppression" => plain(
                Op::NonMaxSuppression {
                    center_point_box: a.bool_or("center_point_box", false)?,
                },
                2,
                5,
            ),
            _ => {
                return Err(Error::UnsupportedOp {
                    node: name.into(),
                    op: op_type.into(),
                    detail: format!("not supported by vnpu (opset {})", self.opset),
                })
            }
        };
        Ok(p)
    }

    /// Kernel, strides, dilations and pads of Conv/ConvTranspose/pooling.
    fn conv_geom(&self, a: &Attrs<'_>, weight: Option<ValueId>) -> Result<ConvGeom> {
        let kernel: Vec<usize> = match a.ints("kernel_shape")? {
            Some(k) => k
                .iter()
                .map(|&d| a.positive("kernel_shape", d))
                .collect::<Result<_>>()?,
            // Absent: the spatial dims of the weights, when their shape is known
            // (an initializer or a graph input).
            None => match weight.and_then(|w| self.g.values[w].shape.as_ref()) {
                Some(s) if s.len() >= 3 => s[2..].to_vec(),
                _ => {
                    return Err(a.err(
                        "kernel_shape",
                        "missing, and the weights have no known shape to take it from",
                    ))
                }
            },
        };
        let ns = kernel.len();
        if ns == 0 {
            return Err(a.err("kernel_shape", "must have at least one spatial dimension"));
        }
        let per_dim = |attr: &str| -> Result<Vec<usize>> {
            match a.ints(attr)? {
                None => Ok(vec![1; ns]),
                Some(v) if v.len() == ns => v.iter().map(|&x| a.positive(attr, x)).collect(),
                Some(v) => Err(a.err(attr, format!("needs {ns} values, has {}", v.len()))),
            }
        };
        let strides = per_dim("strides")?;
        let dilations = per_dim("dilations")?;
        let explicit = match a.ints("pads")? {
            None => vec![0; 2 * ns],
            Some(v) if v.len() == 2 * ns => v
                .iter()
                .map(|&p| {
                    usize::try_from(p).map_err(|_| a.err("pads", format!("negative pad {p}")))
                })
                .collect::<Result<_>>()?,
            Some(v) => {
                return Err(a.err("pads", format!("needs {} values, has {}", 2 * ns, v.len())))
            }
        };
        let (pads, auto_pad) = match a.string_or("auto_pad", "NOTSET")?.as_str() {
            "NOTSET" => (explicit, None),
            "VALID" => (vec![0; 2 * ns], None),
            s @ ("SAME_UPPER" | "SAME_LOWER") => (vec![0; 2 * ns], Some(s.to_string())),
            other => return Err(a.err("auto_pad", format!("unknown value '{other}'"))),
        };
        Ok(ConvGeom {
            kernel,
            strides,
            dilations,
            pads,
            auto_pad,
        })
    }

    fn resize_op(&self, a: &Attrs<'_>) -> Result<Op> {
        let mode = match a.string_or("mode", "nearest")?.as_str() {
            "nearest" => ResizeMode::Nearest,
            "linear" => ResizeMode::Linear,
            "cubic" => ResizeMode::Cubic,
            other => return Err(a.err("mode", format!("unknown mode '{other}'"))),
        };
        let coord = match a
            .string_or("coordinate_transformation_mode", "half_pixel")?
            .as_str()
        {
            "half_pixel" => CoordMode::HalfPixel,
            "pytorch_half_pixel" => CoordMode::PytorchHalfPixel,
            "align_corners" => CoordMode::AlignCorners,
            "asymmetric" => CoordMode::Asymmetric,
            "tf_crop_and_resize" => CoordMode::TfCropAndResize,
            "half_pixel_symmetric" => CoordMode::HalfPixelSymmetric,
            other => {
                return Err(a.err(
                    "coordinate_transformation_mode",
                    format!("'{other}' is not supported"),
                ))
            }
        };
        let nearest = match a.string_or("nearest_mode", "round_prefer_floor")?.as_str() {
            "round_prefer_floor" => NearestMode::RoundPreferFloor,
            "round_prefer_ceil" => NearestMode::RoundPreferCeil,
            "floor" => NearestMode::Floor,
            "ceil" => NearestMode::Ceil,
            other => return Err(a.err("nearest_mode", format!("unknown value '{other}'"))),
        };
        if a.bool_or("antialias", false)? {
            return Err(a.err("antialias", "antialiased resize is not supported"));
        }
        let policy = a.string_or("keep_aspect_ratio_policy", "stretch")?;
        if policy != "stretch" {
            return Err(a.err(
                "keep_aspect_ratio_policy",
                format!("'{policy}' is not supported"),
            ));
        }
        Ok(Op::Resize {
            mode,
            coord,
            nearest,
            cubic_coeff_a: a.float_or("cubic_coeff_a", -0.75)?,
            exclude_outside: a.bool_or("exclude_outside", false)?,
            extrapolation_value: a.float_or("extrapolation_value", 0.0)?,
        })
    }

    /// Resize with an `axes` attribute (opset 18+): rewrites its constant roi / scales /
    /// sizes to cover every axis (identity on the axes not listed), so the IR op always
    /// works on all axes. Needs the input shape and those arguments to be known here.
    fn expand_resize_axes(
        &mut self,
        a: &Attrs<'_>,
        ins: &mut [Option<ValueId>],
        axes: &[i64],
    ) -> Result<()> {
        let x = ins.first().copied().flatten();
        let Some(shape) = x.and_then(|x| self.g.values[x].shape.clone()) else {
            return Err(a.err("axes", "needs the input shape to be known at import"));
        };
        let rank = shape.len();
        let mut pos = vec![None; rank];
        for (k, &ax) in axes.iter().enumerate() {
            match ir::shape::norm_axis(ax, rank) {
                Some(i) if pos[i].is_none() => pos[i] = Some(k),
                _ => {
                    return Err(a.err(
                        "axes",
                        format!("{axes:?} is not a set of axes of rank {rank}"),
                    ))
                }
            }
        }
        for slot in 1..ins.len().min(4) {
            let Some(v) = ins[slot] else { continue };
            let Some(t) = self.g.values[v].konst.clone() else {
                return Err(a.err("axes", "roi, scales and sizes must be constants"));
            };
            let k = axes.len();
            let full = match slot {
                // roi: starts of the listed axes then their ends.
                1 => {
                    let r = t.to_f32_vec();
                    if r.len() != 2 * k {
                        return Err(
                            a.err("axes", format!("roi has {} values for {k} axes", r.len()))
                        );
                    }
                    let mut v: Vec<f32> = pos.iter().map(|p| p.map_or(0.0, |j| r[j])).collect();
                    v.extend(pos.iter().map(|p| p.map_or(1.0, |j| r[k + j])));
                    Tensor::from_f32(vec![2 * rank], v)
                }
                2 => {
                    let sc = t.to_f32_vec();
                    if sc.len() != k {
                        return Err(a.err("axes", format!("{} scales for {k} axes", sc.len())));
                    }
                    let v = pos.iter().map(|p| p.map_or(1.0, |j| sc[j])).collect();
                    Tensor::from_f32(vec![rank], v)
                }
                _ => {
                    let sz = t
                        .to_i64_vec()
                        .ok_or_else(|| a.err("axes", "sizes must be integers"))?;
                    if sz.len() != k {
                        return Err(a.err("axes", format!("{} sizes for {k} axes", sz.len())));
                    }
                    let v = pos
                        .iter()
                        .zip(&shape)
                        .map(|(p, &d)| p.map_or(d as i64, |j| sz[j]))
                        .collect();
                    Tensor::from_i64(vec![rank], v)
                }
            };
            let name = self.fresh(&format!("{}/all_axes", self.g.values[v].name));
            let id = self.g.add_const(name.clone(), full);
            self.by_name.insert(name, id);
            ins[slot] = Some(id);
        }
        Ok(())
    }

    fn rnn(&self, op_type: &str, a: &Attrs<'_>) -> Result<Plain> {
        let hidden_size = a.positive("hidden_size", a.int_req("hidden_size")?)?;
        let direction = match a.string_or("direction", "forward")?.as_str() {
            "forward" => RnnDirection::Forward,
            "reverse" => RnnDirection::Reverse,
            "bidirectional" => RnnDirection::Bidirectional,
            other => return Err(a.err("direction", format!("unknown direction '{other}'"))),
        };
        let layout = a.int_or("layout", 0)?;
        if layout != 0 && layout != 1 {
            return Err(a.err("layout", format!("must be 0 or 1, got {layout}")));
        }
        if a.float("clip")?.is_some() {
            return Err(a.err("clip", "cell clipping is not supported"));
        }
        for attr in ["activation_alpha", "activation_beta"] {
            if a.floats(attr)?.is_some_and(|v| !v.is_empty()) {
                return Err(a.err(attr, "custom activation parameters are not supported"));
            }
        }
        let is_lstm = op_type == "LSTM";
        let defaults: &[&str] = if is_lstm {
            &["sigmoid", "tanh", "tanh"]
        } else {
            &["sigmoid", "tanh"]
        };
        if let Some(acts) = a.strings("activations")? {
            let dirs = if direction == RnnDirection::Bidirectional {
                2
            } else {
                1
            };
            let expected: Vec<&str> = (0..dirs).flat_map(|_| defaults.iter().copied()).collect();
            let ok = acts.len() == expected.len()
                && acts
                    .iter()
                    .zip(&expected)
                    .all(|(x, e)| x.eq_ignore_ascii_case(e));
            if !ok {
                return Err(a.err(
                    "activations",
                    format!("{acts:?} is not supported (only the defaults)"),
                ));
            }
        }
        if is_lstm {
            if a.bool_or("input_forget", false)? {
                return Err(a.err(
                    "input_forget",
                    "coupled input-forget gates are not supported",
                ));
            }
            Ok(Plain {
                op: Op::Lstm {
                    hidden_size,
                    direction,
                    layout,
                },
                min_in: 3,
                max_in: 8,
                nout: 3,
            })
        } else {
            Ok(Plain {
                op: Op::Gru {
                    hidden_size,
                    direction,
                    linear_before_reset: a.bool_or("linear_before_reset", false)?,
                    layout,
                },
                min_in: 3,
                max_in: 6,
                nout: 2,
            })
        }
    }

    /// Softmax / LogSoftmax. From opset 13 the op works on one axis; before, it
    /// coerces the input to 2-D at `axis` (default 1), which we express as
    /// Flatten → Softmax(axis 1) → Reshape back to the input's shape.
    fn softmax(
        &mut self,
        n: &'a NodeProto,
        name: String,
        a: &Attrs<'_>,
        ins: Vec<Option<ValueId>>,
    ) -> Result<()> {
        let log = n.op_type == "LogSoftmax";
        let make = |axis| {
            if log {
                Op::LogSoftmax { axis }
            } else {
                Op::Softmax { axis }
            }
        };
        let legacy = self.opset < 13;
        let axis = a.int_or("axis", if legacy { 1 } else { -1 })?;
        a.finish()?;
        self.check_arity(&name, &n.op_type, &ins, 1, 1)?;
        let x = ins[0].ok_or_else(|| self.fmt(format!("node '{name}' has an empty input")))?;
        let rank = self.g.values[x].shape.as_ref().map(Vec::len);
        let last_axis =
            axis == -1 || rank.is_some_and(|r| i64::try_from(r).is_ok_and(|r| axis == r - 1));
        let outs = self.outputs(n, &name, 1)?;
        if !legacy || last_axis {
            self.push(name.clone(), make(axis), ins, outs, &name);
            return Ok(());
        }
        let dt = self.g.values[outs[0]].dtype;
        // The original shape: a constant when already known, else computed.
        let shape = match self.g.values[x].shape.clone() {
            Some(s) => {
                let dims = s.iter().map(|&d| d as i64).collect();
                let c = self.fresh(&format!("{name}/shape"));
                let id = self
                    .g
                    .add_const(c.clone(), Tensor::from_i64(vec![s.len()], dims));
                self.by_name.insert(c, id);
                id
            }
            None => {
                let id = self.temp(&name, "shape", DType::I64);
                let op = Op::Shape {
                    start: 0,
                    end: None,
                };
                self.push(format!("{name}/shape"), op, vec![Some(x)], vec![id], &name);
                id
            }
        };
        let flat = self.temp(&name, "flat", dt);
        let soft = self.temp(&name, "soft2d", dt);
        self.push(
            format!("{name}/flatten"),
            Op::Flatten { axis },
            vec![Some(x)],
            vec![flat],
            &name,
        );
        self.push(name.clone(), make(1), vec![Some(flat)], vec![soft], &name);
        self.push(
            format!("{name}/reshape"),
            Op::Reshape { allowzero: false },
            vec![Some(soft), Some(shape)],
            outs,
            &name,
        );
        Ok(())
    }

    /// Variadic Sum/Mean/Max/Min as a left-to-right chain of binary nodes.
    fn variadic(
        &mut self,
        n: &'a NodeProto,
        name: String,
        a: &Attrs<'_>,
        ins: Vec<Option<ValueId>>,
    ) -> Result<()> {
        a.finish()?;
        self.check_arity(&name, &n.op_type, &ins, 1, usize::MAX)?;
        if ins.iter().any(Option::is_none) {
            return Err(self.fmt(format!("node '{name}' ({}) has an empty input", n.op_type)));
        }
        let bin = match n.op_type.as_str() {
            "Max" => BinaryOp::Max,
            "Min" => BinaryOp::Min,
            _ => BinaryOp::Add,
        };
        let is_mean = n.op_type == "Mean";
        let outs = self.outputs(n, &name, 1)?;
        let out = outs[0];
        let dt = self.g.values[out].dtype;
        if ins.len() == 1 {
            self.push(name.clone(), Op::Unary(UnaryOp::Identity), ins, outs, &name);
            return Ok(());
        }
        let steps = ins.len() - 1;
        let mut acc = ins[0];
        for (k, rhs) in ins.iter().enumerate().skip(1) {
            let last = k == steps && !is_mean;
            let dst = if last {
                out
            } else {
                self.temp(&name, &format!("acc{k}"), dt)
            };
            let node_name = if last {
                name.clone()
            } else {
                format!("{name}/{k}")
            };
            self.push(
                node_name,
                Op::Binary(bin),
                vec![acc, *rhs],
                vec![dst],
                &name,
            );
            acc = Some(dst);
        }
        if is_mean {
            let count = ins.len() as f32;
            let c = self.fresh(&format!("{name}/count"));
            let cid = self
                .g
                .add_const(c.clone(), Tensor::from_f32(vec![], vec![count]));
            self.by_name.insert(c, cid);
            self.push(
                name.clone(),
                Op::Binary(BinaryOp::Div),
                vec![acc, Some(cid)],
                vec![out],
                &name,
            );
        }
        Ok(())
    }

    /// Upsample (deprecated since opset 10, still emitted by older exporters): a Resize
    /// with `asymmetric` coordinates (and `floor` rounding for nearest).
    fn upsample(
        &mut self,
        n: &'a NodeProto,
        name: String,
        a: &Attrs<'_>,
        ins: Vec<Option<ValueId>>,
    ) -> Result<()> {
        let mode = match a.string_or("mode", "nearest")?.as_str() {
            "nearest" => ResizeMode::Nearest,
            "linear" | "bilinear" => ResizeMode::Linear,
            other => return Err(a.err("mode", format!("unknown mode '{other}'"))),
        };
        a.finish()?;
        self.check_arity(&name, "Upsample", &ins, 2, 2)?;
        let outs = self.outputs(n, &name, 1)?;
        let op = Op::Resize {
            mode,
            coord: CoordMode::Asymmetric,
            nearest: NearestMode::Floor,
            cubic_coeff_a: -0.75,
            exclude_outside: false,
            extrapolation_value: 0.0,
        };
        self.push(
            name.clone(),
            op,
            vec![ins[0], None, ins[1], None],
            outs,
            &name,
        );
        Ok(())
    }
}

/// Best-effort shape inference of the node just added: records the dtypes and shapes of
/// its outputs when every input has a shape and nothing needs constant folding first
/// (e.g. a Reshape whose shape is computed). Values it cannot infer keep their
/// provisional type until the compiler re-runs inference after folding; inference
/// errors are left for the compiler to report at that point.
fn infer_last(g: &mut Graph) {
    let Some(node) = g.nodes.last() else {
        return;
    };
    let ready = node
        .inputs
        .iter()
        .flatten()
        .all(|&v| g.values[v].shape.is_some());
    if !ready {
        return;
    }
    if let Ok(outs) = ir::shape::infer_node(g, node) {
        let ids = node.outputs.clone();
        for (id, (dt, shape)) in ids.into_iter().zip(outs) {
            g.values[id].dtype = dt;
            g.values[id].shape = Some(shape);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::TensorData;
    use crate::onnx::builder::{attr, tensor_proto};
    use crate::onnx::proto::{
        attr_type, data_type, tensor_shape_proto::Dimension, type_proto, AttributeProto,
        OperatorSetIdProto, StringStringEntryProto, TensorProto, TensorShapeProto, TypeProto,
    };

    fn node(
        op: &str,
        name: &str,
        ins: &[&str],
        outs: &[&str],
        attrs: Vec<AttributeProto>,
    ) -> NodeProto {
        NodeProto {
            op_type: op.into(),
            name: name.into(),
            input: ins.iter().map(|s| s.to_string()).collect(),
            output: outs.iter().map(|s| s.to_string()).collect(),
            attribute: attrs,
            ..Default::default()
        }
    }
    /// A value info; `None` dims are symbolic (`dim_param`).
    fn vi(name: &str, elem: i32, dims: &[Option<i64>]) -> ValueInfoProto {
        ValueInfoProto {
            name: name.into(),
            r#type: Some(TypeProto {
                tensor_type: Some(type_proto::Tensor {
                    elem_type: elem,
                    shape: Some(TensorShapeProto {
                        dim: dims
                            .iter()
                            .enumerate()
                            .map(|(i, d)| Dimension {
                                dim_value: *d,
                                dim_param: d.is_none().then(|| format!("d{i}")),
                                ..Default::default()
                            })
                            .collect(),
                    }),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }
    fn f32_init(name: &str, dims: &[i64], v: &[f32]) -> TensorProto {
        let dims = dims.iter().map(|&d| d as usize).collect();
        tensor_proto(name, &Tensor::from_f32(dims, v.to_vec()))
    }
    fn i64_init(name: &str, v: &[i64]) -> TensorProto {
        TensorProto {
            name: name.into(),
            dims: vec![v.len() as i64],
            data_type: data_type::INT64,
            int64_data: v.to_vec(),
            ..Default::default()
        }
    }
    fn model(
        opset: i64,
        nodes: Vec<NodeProto>,
        inits: Vec<TensorProto>,
        inputs: Vec<ValueInfoProto>,
        outputs: &[&str],
    ) -> ModelProto {
        ModelProto {
            ir_version: 8,
            opset_import: vec![
                OperatorSetIdProto {
                    domain: String::new(),
                    version: opset,
                },
                OperatorSetIdProto {
                    domain: TEST_DOMAIN.into(),
                    version: 1,
                },
            ],
            graph: Some(GraphProto {
                name: "g".into(),
                node: nodes,
                initializer: inits,
                input: inputs,
                output: outputs
                    .iter()
                    .map(|o| vi(o, data_type::FLOAT, &[]))
                    .map(|mut v| {
                        v.r#type = None;
                        v
                    })
                    .collect(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }
    fn import(m: &ModelProto) -> Result<Graph> {
        import_model(&m.encode_to_vec(), &ImportOptions::default())
    }
    fn x_input(dims: &[Option<i64>]) -> Vec<ValueInfoProto> {
        vec![vi("x", data_type::FLOAT, dims)]
    }
    fn out_shape(g: &Graph, i: usize) -> Option<&[usize]> {
        g.shape(g.outputs[i])
    }

    fn conv_relu(opset: i64) -> ModelProto {
        let w: Vec<f32> = (0..4 * 3 * 9).map(|i| i as f32 * 0.01).collect();
        model(
            opset,
            vec![
                node(
                    "Conv",
                    "conv",
                    &["x", "w", "b"],
                    &["c"],
                    vec![attr::ints("pads", &[1, 1, 1, 1])],
                ),
                node("Relu", "", &["c"], &["y"], vec![]),
            ],
            vec![
                f32_init("w", &[4, 3, 3, 3], &w),
                f32_init("b", &[4], &[0.0; 4]),
            ],
            x_input(&[None, Some(3), Some(8), Some(8)]),
            &["y"],
        )
    }

    #[test]
    fn conv_relu_imports_with_typed_ops_and_shapes() {
        let g = import(&conv_relu(13)).expect("imports");
        assert_eq!(g.name, "g");
        assert_eq!(g.nodes.len(), 2);
        let Op::Conv { geom, group, post } = &g.nodes[0].op else {
            panic!("not a conv: {:?}", g.nodes[0].op)
        };
        assert_eq!(geom.kernel, vec![3, 3], "kernel taken from the weights");
        assert_eq!(
            (geom.strides.clone(), geom.dilations.clone()),
            (vec![1, 1], vec![1, 1])
        );
        assert_eq!(geom.pads, vec![1, 1, 1, 1]);
        assert_eq!((*group, post.len()), (1, 0));
        assert_eq!(g.nodes[0].absorbed, vec!["conv".to_string()]);
        assert_eq!(g.nodes[1].op, Op::Unary(UnaryOp::Relu));
        assert_eq!(
            g.nodes[1].name, "Relu_1",
            "unnamed nodes get a generated name"
        );
        assert_eq!(g.inputs.len(), 1);
        let x = g.value(g.inputs[0]);
        assert_eq!(
            x.shape.as_deref(),
            Some(&[1, 3, 8, 8][..]),
            "dynamic batch defaults to 1"
        );
        assert_eq!(x.declared, Some(vec![None, Some(3), Some(8), Some(8)]));
        assert_eq!(out_shape(&g, 0), Some(&[1, 4, 8, 8][..]));
        assert!(g.value(g.nodes[0].inputs[1].expect("w")).konst.is_some());
    }

    /// Files written by the official serializer (see testdata/README.md).
    #[test]
    fn real_onnx_files_import_with_expected_shapes() {
        let cases: [(&[u8], &[usize]); 4] = [
            (
                include_bytes!("testdata/conv_with_autopad_same.onnx"),
                &[1, 1, 3, 3],
            ),
            (
                include_bytes!("testdata/maxpool_2d_ceil.onnx"),
                &[1, 1, 2, 2],
            ),
            (include_bytes!("testdata/lstm_defaults.onnx"), &[1, 3, 3]),
            (
                include_bytes!("testdata/convtranspose_autopad_same.onnx"),
                &[1, 2, 6, 6],
            ),
        ];
        for (i, (bytes, want)) in cases.iter().enumerate() {
            let g = import_model(bytes, &ImportOptions::default())
                .unwrap_or_else(|e| panic!("case {i}: {e}"));
            assert_eq!(out_shape(&g, 0), Some(*want), "case {i}");
        }
        let g = import_model(
            include_bytes!("testdata/squeezenet_light_opset13.onnx"),
            &ImportOptions::default(),
        )
        .expect("squeezenet");
        let count = |name: &str| g.nodes.iter().filter(|n| n.op.name() == name).count();
        assert_eq!(
            (count("Conv"), count("Concat"), count("MaxPool")),
            (26, 8, 3)
        );
        assert!(g.nodes.iter().all(|n| n.absorbed.len() == 1));
        // The converter's Softmax ends in Reshape(x, Shape(input)): every shape up to it is
        // known at import; the last one once the compiler has folded the Shape node.
        let (last, before) = (&g.nodes[g.nodes.len() - 1], &g.nodes[g.nodes.len() - 2]);
        assert_eq!((before.op.name(), last.op.name()), ("Softmax", "Reshape"));
        assert_eq!(g.shape(before.outputs[0]), Some(&[1, 1000][..]));
        assert_eq!(out_shape(&g, 0), None);
    }

    #[test]
    fn opsets_outside_11_to_28_are_rejected() {
        for v in [1, 10, 29] {
            let e = import(&conv_relu(v)).expect_err("bad opset");
            assert!(matches!(e, Error::OnnxFormat { .. }), "{e}");
            assert!(e.to_string().contains(&format!("opset {v}")), "{e}");
        }
        for v in [11, 21, 22, 28] {
            assert!(import(&conv_relu(v)).is_ok(), "opset {v}");
        }
        let mut m = conv_relu(13);
        m.opset_import.clear();
        assert!(matches!(import(&m), Err(Error::OnnxFormat { .. })));
    }

    #[test]
    fn corrupt_and_truncated_bytes_are_format_errors() {
        let good = conv_relu(13).encode_to_vec();
        for cut in (0..good.len()).step_by(7) {
            if let Err(e) = import_model(&good[..cut], &ImportOptions::default()) {
                assert!(matches!(e, Error::OnnxFormat { .. }), "cut {cut}: {e}");
            }
        }
        // Deterministic pseudo-random corruption and pure noise: errors or valid graphs,
        // never a panic.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..300 {
            let mut b = good.clone();
            for _ in 0..4 {
                let i = (next() as usize) % b.len();
                b[i] = next() as u8;
            }
            let _ = import_model(&b, &ImportOptions::default());
            let noise: Vec<u8> = (0..(next() % 200)).map(|_| next() as u8).collect();
            let _ = import_model(&noise, &ImportOptions::default());
        }
        let e = import_model(b"\xff\xff\xff\xff", &ImportOptions::default()).expect_err("noise");
        assert!(matches!(e, Error::OnnxFormat { .. }), "{e}");
    }

    #[test]
    fn unsupported_op_and_attribute_name_the_node() {
        let m = model(
            13,
            vec![node("FancyOp", "my_node", &["x"], &["y"], vec![])],
            vec![],
            x_input(&[Some(1)]),
            &["y"],
        );
        let e = import(&m).expect_err("unsupported");
        assert!(matches!(e, Error::UnsupportedOp { .. }));
        let msg = e.to_string();
        assert!(msg.contains("my_node") && msg.contains("FancyOp"), "{msg}");

        let mut n = node("Relu", "r", &["x"], &["y"], vec![attr::int("bogus", 1)]);
        let m = model(13, vec![n.clone()], vec![], x_input(&[Some(1)]), &["y"]);
        let msg = import(&m).expect_err("unknown attr").to_string();
        assert!(msg.contains("'r'") && msg.contains("bogus"), "{msg}");

        n.attribute = vec![
            attr::string("auto_pad", "SAME_SIDEWAYS"),
            attr::ints("kernel_shape", &[2, 2]),
        ];
        n.op_type = "MaxPool".into();
        let m = model(
            13,
            vec![n],
            vec![],
            x_input(&[Some(1), Some(1), Some(4), Some(4)]),
            &["y"],
        );
        let e = import(&m).expect_err("bad value");
        assert!(
            matches!(&e, Error::BadAttribute { attr, .. } if attr == "auto_pad"),
            "{e}"
        );

        let mut n = node("FusedConv", "f", &["x"], &["y"], vec![]);
        n.domain = "com.microsoft".into();
        let m = model(13, vec![n], vec![], x_input(&[Some(1)]), &["y"]);
        let msg = import(&m).expect_err("foreign domain").to_string();
        assert!(msg.contains("com.microsoft::FusedConv"), "{msg}");
    }

    #[test]
    fn axes_as_attribute_or_input_per_opset() {
        let x = x_input(&[Some(2), Some(1), Some(3)]);
        // Opset 11: axes attributes.
        let m = model(
            11,
            vec![
                node(
                    "Squeeze",
                    "sq",
                    &["x"],
                    &["s"],
                    vec![attr::ints("axes", &[1])],
                ),
                node(
                    "ReduceMean",
                    "rm",
                    &["s"],
                    &["y"],
                    vec![attr::ints("axes", &[-1]), attr::int("keepdims", 0)],
                ),
            ],
            vec![],
            x.clone(),
            &["y"],
        );
        let g = import(&m).expect("opset 11");
        assert_eq!(
            g.nodes[0].op,
            Op::Squeeze {
                axes: Some(vec![1])
            }
        );
        assert_eq!(out_shape(&g, 0), Some(&[2][..]));
        // Opset 18: axes inputs.
        let m = model(
            18,
            vec![
                node("Squeeze", "sq", &["x", "a1"], &["s"], vec![]),
                node(
                    "ReduceMean",
                    "rm",
                    &["s", "a2"],
                    &["y"],
                    vec![attr::int("keepdims", 1)],
                ),
            ],
            vec![i64_init("a1", &[1]), i64_init("a2", &[-1])],
            x,
            &["y"],
        );
        let g = import(&m).expect("opset 18");
        assert_eq!(g.nodes[0].op, Op::Squeeze { axes: None });
        assert!(g.nodes[0].inputs[1].is_some());
        assert!(matches!(
            g.nodes[1].op,
            Op::Reduce {
                axes: None,
                keepdims: true,
                ..
            }
        ));
        assert_eq!(out_shape(&g, 0), Some(&[2, 1][..]));
    }

    #[test]
    fn split_forms() {
        let x = x_input(&[Some(1), Some(6)]);
        let m = model(
            11,
            vec![node(
                "Split",
                "s",
                &["x"],
                &["a", "b"],
                vec![attr::int("axis", 1), attr::ints("split", &[2, 4])],
            )],
            vec![],
            x.clone(),
            &["a", "b"],
        );
        let g = import(&m).expect("attr split");
        assert_eq!(
            (out_shape(&g, 0), out_shape(&g, 1)),
            (Some(&[1, 2][..]), Some(&[1, 4][..]))
        );
        let m = model(
            13,
            vec![node(
                "Split",
                "s",
                &["x", "sp"],
                &["a", "b"],
                vec![attr::int("axis", -1)],
            )],
            vec![i64_init("sp", &[5, 1])],
            x.clone(),
            &["a", "b"],
        );
        let g = import(&m).expect("input split");
        assert_eq!(out_shape(&g, 0), Some(&[1, 5][..]));
        let m = model(
            18,
            vec![node(
                "Split",
                "s",
                &["x"],
                &["a", "b", "c", "d"],
                vec![attr::int("axis", 1), attr::int("num_outputs", 4)],
            )],
            vec![],
            x,
            &["a", "d"],
        );
        let g = import(&m).expect("num_outputs");
        assert_eq!(g.nodes[0].outputs.len(), 4);
        assert_eq!(
            (out_shape(&g, 0), out_shape(&g, 1)),
            (Some(&[1, 2][..]), Some(&[1, 0][..]))
        );
    }

    #[test]
    fn legacy_softmax_coerces_to_2d() {
        let x = x_input(&[Some(1), Some(3), Some(2), Some(2)]);
        let m = model(
            11,
            vec![node("Softmax", "sm", &["x"], &["y"], vec![])],
            vec![],
            x.clone(),
            &["y"],
        );
        let g = import(&m).expect("opset 11");
        let ops: Vec<&str> = g.nodes.iter().map(|n| n.op.name()).collect();
        assert_eq!(ops, ["Flatten", "Softmax", "Reshape"]);
        assert!(g.nodes.iter().all(|n| n.absorbed == ["sm"]));
        assert_eq!(g.nodes[1].op, Op::Softmax { axis: 1 });
        assert_eq!(
            g.value(g.nodes[0].outputs[0]).shape.as_deref(),
            Some(&[1, 12][..])
        );
        assert_eq!(out_shape(&g, 0), Some(&[1, 3, 2, 2][..]));
        let m = model(
            13,
            vec![node(
                "Softmax",
                "sm",
                &["x"],
                &["y"],
                vec![attr::int("axis", 1)],
            )],
            vec![],
            x.clone(),
            &["y"],
        );
        let g = import(&m).expect("opset 13");
        assert_eq!(g.nodes.len(), 1);
        assert_eq!(g.nodes[0].op, Op::Softmax { axis: 1 });
        // Last axis in the legacy form needs no coercion.
        let m = model(
            11,
            vec![node(
                "LogSoftmax",
                "sm",
                &["x"],
                &["y"],
                vec![attr::int("axis", 3)],
            )],
            vec![],
            x,
            &["y"],
        );
        let g = import(&m).expect("opset 11 last axis");
        assert_eq!(g.nodes[0].op, Op::LogSoftmax { axis: 3 });
    }

    #[test]
    fn legacy_softmax_of_an_unknown_shape_computes_it() {
        // `r` has no shape until the compiler folds `s`: the expansion uses Shape.
        let m = model(
            12,
            vec![
                node("Shape", "s", &["x"], &["sh"], vec![]),
                node("Reshape", "r", &["x", "sh"], &["r"], vec![]),
                node("Softmax", "sm", &["r"], &["y"], vec![]),
            ],
            vec![],
            x_input(&[Some(2), Some(3), Some(4)]),
            &["y"],
        );
        let g = import(&m).expect("imports");
        let ops: Vec<&str> = g.nodes.iter().map(|n| n.op.name()).collect();
        assert_eq!(
            ops,
            ["Shape", "Reshape", "Shape", "Flatten", "Softmax", "Reshape"]
        );
        assert_eq!(g.nodes[2].inputs, g.nodes[3].inputs);
        assert_eq!(out_shape(&g, 0), None, "known only after folding");
    }

    #[test]
    fn generated_names_avoid_names_used_later_in_the_file() {
        let x = x_input(&[Some(1), Some(3), Some(2)]);
        let m = model(
            11,
            vec![
                node("Softmax", "sm", &["x"], &["y"], vec![]),
                node("Neg", "n", &["y"], &["sm/shape"], vec![]),
            ],
            vec![],
            x,
            &["sm/shape"],
        );
        let g = import(&m).expect("imports");
        let names: HashSet<&str> = g.values.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names.len(), g.values.len(), "value names are unique");
        let neg = g.nodes.last().expect("neg");
        assert_eq!(g.value(neg.outputs[0]).name, "sm/shape");
        assert_eq!(g.value(neg.inputs[0].expect("y")).name, "y");
        assert_eq!(out_shape(&g, 0), Some(&[1, 3, 2][..]));
    }

    #[test]
    fn resize_and_upsample() {
        let x = x_input(&[Some(1), Some(2), Some(4), Some(4)]);
        let scales = f32_init("sc", &[4], &[1.0, 1.0, 2.0, 2.0]);
        let empty_roi = f32_init("roi", &[0], &[]);
        let m = model(
            11,
            vec![node(
                "Resize",
                "rs",
                &["x", "roi", "sc"],
                &["y"],
                vec![
                    attr::string("mode", "linear"),
                    attr::string("coordinate_transformation_mode", "align_corners"),
                ],
            )],
            vec![scales.clone(), empty_roi],
            x.clone(),
            &["y"],
        );
        let g = import(&m).expect("resize");
        let n = &g.nodes[0];
        assert!(matches!(
            n.op,
            Op::Resize {
                mode: ResizeMode::Linear,
                coord: CoordMode::AlignCorners,
                nearest: NearestMode::RoundPreferFloor,
                ..
            }
        ));
        assert_eq!(n.inputs[1], None, "empty roi becomes an omitted input");
        assert_eq!(out_shape(&g, 0), Some(&[1, 2, 8, 8][..]));
        let m = model(
            11,
            vec![node("Upsample", "up", &["x", "sc"], &["y"], vec![])],
            vec![scales.clone()],
            x.clone(),
            &["y"],
        );
        let g = import(&m).expect("upsample");
        assert!(matches!(
            g.nodes[0].op,
            Op::Resize {
                mode: ResizeMode::Nearest,
                coord: CoordMode::Asymmetric,
                nearest: NearestMode::Floor,
                ..
            }
        ));
        assert_eq!(g.nodes[0].inputs.len(), 4);
        assert_eq!(out_shape(&g, 0), Some(&[1, 2, 8, 8][..]));
        let m = model(
            19,
            vec![node(
                "Resize",
                "rs",
                &["x", "", "sc"],
                &["y"],
                vec![attr::int("antialias", 1)],
            )],
            vec![scales],
            x.clone(),
            &["y"],
        );
        assert!(matches!(import(&m), Err(Error::BadAttribute { .. })));
        // Opset 18 axes: scales / sizes for a subset of axes cover all axes in the IR.
        let resize_axes = |inp: &str, axes: &[i64]| {
            node(
                "Resize",
                "rs",
                &[
                    "x",
                    "",
                    if inp == "s2" { "s2" } else { "" },
                    if inp == "z2" { "z2" } else { "" },
                ],
                &["y"],
                vec![attr::ints("axes", axes)],
            )
        };
        let s2 = f32_init("s2", &[2], &[3.0, 0.5]);
        let z2 = i64_init("z2", &[5, 6]);
        let m = model(
            18,
            vec![resize_axes("s2", &[3, -2])],
            vec![s2.clone(), z2.clone()],
            x.clone(),
            &["y"],
        );
        let g = import(&m).expect("scales with axes");
        let sc = g.value(g.nodes[0].inputs[2].expect("scales"));
        assert_eq!(
            sc.konst.as_ref().map(|k| k.to_f32_vec()),
            Some(vec![1.0, 1.0, 0.5, 3.0])
        );
        assert_eq!(out_shape(&g, 0), Some(&[1, 2, 2, 12][..]));
        let m = model(
            18,
            vec![resize_axes("z2", &[2, 3])],
            vec![s2.clone(), z2.clone()],
            x.clone(),
            &["y"],
        );
        let g = import(&m).expect("sizes with axes");
        assert_eq!(out_shape(&g, 0), Some(&[1, 2, 5, 6][..]));
        let m = model(
            18,
            vec![resize_axes("s2", &[2, 2])],
            vec![s2, z2],
            x,
            &["y"],
        );
        assert!(matches!(import(&m), Err(Error::BadAttribute { .. })));
    }

    #[test]
    fn constants_initializer_inputs_and_optional_inputs() {
        let mut inputs = x_input(&[Some(2)]);
        inputs.push(vi("w", data_type::FLOAT, &[Some(2)]));
        let m = model(
            13,
            vec![
                node(
                    "Constant",
                    "k",
                    &[],
                    &["lo"],
                    vec![attr::float("value_float", -1.0)],
                ),
                node(
                    "Constant",
                    "k2",
                    &[],
                    &["ints"],
                    vec![attr::ints("value_ints", &[2])],
                ),
                node("Add", "add", &["x", "w"], &["s"], vec![]),
                node("Clip", "clip", &["s", "lo", ""], &["c"], vec![]),
                node("Reshape", "rs", &["c", "ints"], &["y"], vec![]),
            ],
            vec![f32_init("w", &[2], &[1.0, 2.0])],
            inputs,
            &["y"],
        );
        let g = import(&m).expect("imports");
        assert_eq!(
            g.inputs.len(),
            1,
            "an initializer listed as input is a constant"
        );
        let clip = &g.nodes[1];
        assert_eq!(clip.op, Op::ClipDynamic);
        assert_eq!(clip.inputs.len(), 3);
        assert_eq!(clip.inputs[2], None);
        let lo = g.value(clip.inputs[1].expect("min"));
        assert_eq!(
            lo.konst.as_ref().map(|k| k.data.clone()),
            Some(TensorData::F32(vec![-1.0]))
        );
        assert_eq!(lo.shape.as_deref(), Some(&[][..]));
        assert_eq!(out_shape(&g, 0), Some(&[2][..]));
    }

    #[test]
    fn dynamic_dims_need_input_shapes() {
        let m = model(
            13,
            vec![node("Relu", "r", &["x"], &["y"], vec![])],
            vec![],
            x_input(&[None, Some(3), None]),
            &["y"],
        );
        let msg = import(&m).expect_err("dynamic").to_string();
        assert!(
            msg.contains("'x'") && msg.contains("dim 2") && msg.contains("d2"),
            "{msg}"
        );
        let bytes = m.encode_to_vec();
        let mut opts = ImportOptions::default();
        opts.input_shapes.insert("x".into(), vec![4, 3, 5]);
        let g = import_model(&bytes, &opts).expect("fixed");
        assert_eq!(out_shape(&g, 0), Some(&[4, 3, 5][..]));
        opts.input_shapes.insert("x".into(), vec![4, 2, 5]);
        assert!(matches!(
            import_model(&bytes, &opts),
            Err(Error::CompileOption { .. })
        ));
        opts.input_shapes.clear();
        opts.input_shapes.insert("nope".into(), vec![1]);
        assert!(matches!(
            import_model(&bytes, &opts),
            Err(Error::CompileOption { .. })
        ));
    }

    #[test]
    fn nodes_are_sorted_and_cycles_rejected() {
        let m = model(
            13,
            vec![
                node("Sigmoid", "c", &["b"], &["y"], vec![]),
                node("Relu", "b", &["a"], &["b"], vec![]),
                node("Neg", "a", &["x"], &["a"], vec![]),
            ],
            vec![],
            x_input(&[Some(3)]),
            &["y"],
        );
        let g = import(&m).expect("sorts");
        let names: Vec<&str> = g.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(out_shape(&g, 0), Some(&[3][..]));
        let m = model(
            13,
            vec![
                node("Relu", "p", &["q"], &["p"], vec![]),
                node("Relu", "q", &["p"], &["q"], vec![]),
            ],
            vec![],
            x_input(&[Some(3)]),
            &["p"],
        );
        assert!(import(&m).expect_err("cycle").to_string().contains("cycle"));
        let m = model(
            13,
            vec![node("Relu", "r", &["ghost"], &["y"], vec![])],
            vec![],
            x_input(&[Some(3)]),
            &["y"],
        );
        assert!(import(&m)
            .expect_err("dangling")
            .to_string()
            .contains("ghost"));
    }

    #[test]
    fn unused_extra_outputs_are_dropped_used_ones_rejected() {
        let c = |n: &str| f32_init(n, &[2], &[1.0, 1.0]);
        let inits = vec![c("s"), c("b"), c("m"), c("v")];
        let x = x_input(&[Some(1), Some(2), Some(2), Some(2)]);
        let bn = node(
            "BatchNormalization",
            "bn",
            &["x", "s", "b", "m", "v"],
            &["y", "rm", "rv"],
            vec![attr::float("epsilon", 1e-3), attr::float("momentum", 0.9)],
        );
        let g = import(&model(
            14,
            vec![bn.clone()],
            inits.clone(),
            x.clone(),
            &["y"],
        ))
        .expect("inference outputs");
        assert_eq!(g.nodes[0].op, Op::BatchNorm { epsilon: 1e-3 });
        assert_eq!(g.nodes[0].outputs.len(), 1);
        let e = import(&model(14, vec![bn], inits.clone(), x.clone(), &["y", "rm"]))
            .expect_err("stats used");
        assert!(matches!(e, Error::UnsupportedOp { .. }), "{e}");
        let dr = node("Dropout", "d", &["x", "ratio"], &["y", "mask"], vec![]);
        let mut inits2 = inits;
        inits2.push(f32_init("ratio", &[], &[0.5]));
        let g = import(&model(13, vec![dr], inits2, x, &["y"])).expect("dropout");
        assert_eq!(g.nodes[0].op, Op::Unary(UnaryOp::Identity));
        assert_eq!(g.nodes[0].inputs.len(), 1);
    }

    #[test]
    fn test_domain_and_variadic_ops() {
        let mut spin = node(
            "Spin",
            "spin",
            &["x"],
            &["s"],
            vec![attr::int("micros", 250)],
        );
        spin.domain = TEST_DOMAIN.into();
        let mut fail = node("Fail", "fail", &["s"], &["f"], vec![attr::int("panic", 1)]);
        fail.domain = TEST_DOMAIN.into();
        let sum = node("Sum", "sum", &["x", "f", "x"], &["y"], vec![]);
        let mean = node("Mean", "mean", &["x", "y"], &["z"], vec![]);
        let g = import(&model(
            13,
            vec![spin, fail, sum, mean],
            vec![],
            x_input(&[Some(4)]),
            &["z"],
        ))
        .expect("imports");
        assert_eq!(g.nodes[0].op, Op::Spin { micros: 250 });
        assert_eq!(g.nodes[1].op, Op::Fail { panic: true });
        let ops: Vec<&Op> = g.nodes[2..].iter().map(|n| &n.op).collect();
        let (add, div) = (Op::Binary(BinaryOp::Add), Op::Binary(BinaryOp::Div));
        assert_eq!(ops, [&add, &add, &add, &div]);
        assert_eq!(g.nodes[3].name, "sum");
        assert_eq!(out_shape(&g, 0), Some(&[4][..]));
    }

    #[test]
    fn attributes_of_every_family_parse_with_defaults() {
        let x = x_input(&[Some(1), Some(4), Some(6), Some(6)]);
        let m = model(
            13,
            vec![
                node(
                    "MaxPool",
                    "mp",
                    &["x"],
                    &["a"],
                    vec![
                        attr::ints("kernel_shape", &[3, 3]),
                        attr::ints("strides", &[2, 2]),
                        attr::int("ceil_mode", 1),
                    ],
                ),
                node(
                    "AveragePool",
                    "ap",
                    &["a"],
                    &["b"],
                    vec![
                        attr::ints("kernel_shape", &[2, 2]),
                        attr::string("auto_pad", "SAME_UPPER"),
                        attr::int("count_include_pad", 1),
                    ],
                ),
                node("LeakyRelu", "lr", &["b"], &["c"], vec![]),
                node(
                    "HardSigmoid",
                    "hs",
                    &["c"],
                    &["d"],
                    vec![attr::float("alpha", 0.3)],
                ),
                node(
                    "Gemm",
                    "gm",
                    &["e", "w"],
                    &["f"],
                    vec![attr::int("transB", 1), attr::float("alpha", 2.0)],
                ),
                node("Flatten", "fl", &["d"], &["e"], vec![]),
                node(
                    "Cast",
                    "ca",
                    &["f"],
                    &["g"],
                    vec![attr::int("to", data_type::INT64 as i64)],
                ),
                node(
                    "ArgMax",
                    "am",
                    &["g"],
                    &["y"],
                    vec![attr::int("axis", 1), attr::int("keepdims", 0)],
                ),
            ],
            vec![f32_init("w", &[5, 36], &[0.0; 180])],
            x,
            &["y"],
        );
        let g = import(&m).expect("imports");
        let op = |name: &str| &g.nodes.iter().find(|n| n.name == name).expect("node").op;
        assert!(
            matches!(op("mp"), Op::MaxPool { ceil_mode: true, geom } if geom.strides == [2, 2] && geom.auto_pad.is_none())
        );
        assert!(
            matches!(op("ap"), Op::AveragePool { count_include_pad: true, ceil_mode: false, geom } if geom.auto_pad.as_deref() == Some("SAME_UPPER"))
        );
        assert_eq!(op("lr"), &Op::Unary(UnaryOp::LeakyRelu { alpha: 0.01 }));
        assert_eq!(
            op("hs"),
            &Op::Unary(UnaryOp::HardSigmoid {
                alpha: 0.3,
                beta: 0.5
            })
        );
        assert!(
            matches!(op("gm"), Op::Gemm { alpha, beta, trans_a: false, trans_b: true, .. } if *alpha == 2.0 && *beta == 1.0)
        );
        assert_eq!(op("ca"), &Op::Cast { to: DType::I64 });
        assert_eq!(
            op("am"),
            &Op::ArgMax {
                axis: 1,
                keepdims: false,
                select_last_index: false
            }
        );
        // 6 -> ceil((6-3)/2)+1 = 3 -> SAME 3 -> flatten 4*9=36 -> gemm 5.
        assert_eq!(out_shape(&g, 0), Some(&[1][..]));
        assert_eq!(g.value(g.outputs[0]).dtype, DType::I64);
    }

    #[test]
    fn cast_widths_and_cast_like() {
        let x = x_input(&[Some(2)]);
        let m = model(
            15,
            vec![
                node(
                    "Cast",
                    "h",
                    &["x"],
                    &["h"],
                    vec![attr::int("to", data_type::FLOAT16 as i64)],
                ),
                node(
                    "Cast",
                    "i",
                    &["h"],
                    &["i"],
                    vec![attr::int("to", data_type::INT32 as i64)],
                ),
                node("CastLike", "l", &["i", "x"], &["y"], vec![]),
            ],
            vec![],
            x.clone(),
            &["y"],
        );
        let g = import(&m).expect("imports");
        assert_eq!(g.nodes[0].op, Op::Cast { to: DType::F32 });
        assert_eq!(g.nodes[2].op, Op::Cast { to: DType::F32 });
        assert_eq!(g.nodes[2].inputs.len(), 1);
        assert_eq!(g.value(g.nodes[1].outputs[0]).dtype, DType::I32);
        let m = model(
            13,
            vec![node(
                "Cast",
                "s",
                &["x"],
                &["y"],
                vec![attr::int("to", data_type::STRING as i64)],
            )],
            vec![],
            x,
            &["y"],
        );
        let e = import(&m).expect_err("string");
        assert!(
            matches!(&e, Error::BadAttribute { attr, .. } if attr == "to"),
            "{e}"
        );
    }

    #[test]
    fn rnn_attributes() {
        let x = x_input(&[Some(5), Some(1), Some(3)]);
        let w = f32_init("w", &[2, 16, 3], &[0.0; 96]);
        let r = f32_init("r", &[2, 16, 4], &[0.0; 128]);
        let lstm = node(
            "LSTM",
            "l",
            &["x", "w", "r"],
            &["y", "", "yc"],
            vec![
                attr::int("hidden_size", 4),
                attr::string("direction", "bidirectional"),
            ],
        );
        let g = import(&model(
            14,
            vec![lstm],
            vec![w.clone(), r.clone()],
            x.clone(),
            &["y", "yc"],
        ))
        .expect("lstm");
        assert_eq!(
            g.nodes[0].op,
            Op::Lstm {
                hidden_size: 4,
                direction: RnnDirection::Bidirectional,
                layout: 0
            }
        );
        assert_eq!(g.nodes[0].outputs.len(), 3);
        assert_eq!(out_shape(&g, 0), Some(&[5, 2, 1, 4][..]));
        assert_eq!(out_shape(&g, 1), Some(&[2, 1, 4][..]));
        let bad = node(
            "LSTM",
            "l",
            &["x", "w", "r"],
            &["y"],
            vec![
                attr::int("hidden_size", 4),
                AttributeProto {
                    name: "activations".into(),
                    r#type: attr_type::STRINGS,
                    strings: vec![b"Relu".to_vec(), b"Tanh".to_vec(), b"Tanh".to_vec()],
                    ..Default::default()
                },
            ],
        );
        let e =
            import(&model(14, vec![bad], vec![w, r], x, &["y"])).expect_err("custom activations");
        assert!(
            matches!(&e, Error::BadAttribute { attr, .. } if attr == "activations"),
            "{e}"
        );
    }

    #[test]
    fn external_data_beside_the_model_file() {
        let dir = std::env::temp_dir().join(format!("vnpu-onnx-import-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let vals = [0.5f32, -1.0, 2.0, 4.0];
        let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut blob = vec![0u8; 16];
        blob.extend_from_slice(&bytes);
        std::fs::write(dir.join("weights.bin"), &blob).expect("write weights");
        let ext = TensorProto {
            name: "w".into(),
            dims: vec![4],
            data_type: data_type::FLOAT,
            data_location: proto::DATA_LOCATION_EXTERNAL,
            external_data: vec![
                StringStringEntryProto {
                    key: "location".into(),
                    value: "weights.bin".into(),
                },
                StringStringEntryProto {
                    key: "offset".into(),
                    value: "16".into(),
                },
                StringStringEntryProto {
                    key: "length".into(),
                    value: "16".into(),
                },
            ],
            ..Default::default()
        };
        let m = model(
            13,
            vec![node("Mul", "mul", &["x", "w"], &["y"], vec![])],
            vec![ext],
            x_input(&[Some(4)]),
            &["y"],
        );
        let path = dir.join("ext.onnx");
        std::fs::write(&path, m.encode_to_vec()).expect("write model");
        let g = import_file(&path, &ImportOptions::default()).expect("imports");
        assert_eq!(g.name, "ext");
        let w = g.value(g.nodes[0].inputs[1].expect("w"));
        assert_eq!(
            w.konst.as_ref().map(|k| k.data.clone()),
            Some(TensorData::F32(vals.to_vec()))
        );
        // Without a base directory the same bytes are rejected with a clear message.
        let e = import(&m).expect_err("no base dir");
        assert!(e.to_string().contains("weights.bin"), "{e}");
        let missing =
            import_file(&dir.join("absent.onnx"), &ImportOptions::default()).expect_err("no file");
        assert!(matches!(missing, Error::Io { .. }));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
