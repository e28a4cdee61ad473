//! The ONNX importer: `ModelProto` bytes → [`ir::Graph`].
//!
//! Steps: decode the protobuf; check the default-domain opset (11..=28); decode the
//! initializers (constants, also when listed as graph inputs); give every real graph
//! input a static shape (dynamic dims — a `dim_param`, no value, or Paddle's
//! `dim_value: -1` — fixed by [`ImportOptions::input_shapes`], a dynamic first dim
//! defaults to 1); turn `Constant` nodes into constant values; sort the other nodes
//! topologically; convert each through the import function [`super::ops`] registers for
//! its `(domain, op_type)` into one typed [`ir::Node`] (a few ONNX forms expand to a
//! short chain: variadic Sum/Max/Min/Mean, and opset < 13 Softmax, which coerces to
//! 2-D). Each node's output dtypes and shapes are inferred as it is added,
//! as far as that goes without constant folding; conversions that need a shape (legacy
//! Softmax, Resize `axes`) use what is known at that point.
//!
//! Invariants: every attribute of every node is either interpreted, checked to have its
//! one supported value, or explicitly marked as a documented no-op; anything else is an
//! `Error::BadAttribute`. Outputs the IR has no place for (BatchNormalization running
//! statistics, Dropout's mask, MaxPool's indices, LayerNormalization's statistics) are
//! dropped when nothing reads them and rejected otherwise.

use std::cell::Cell;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use prost::Message;

use super::attrs::Attrs;
use super::file::{read_model_file, MAX_ONNX_FILE_BYTES};
use super::ops::{self, NodeCx};
use super::proto::{self, GraphProto, ModelProto, NodeProto, TensorProto, ValueInfoProto};
use super::tensor::{decode_tensor, TensorCtx};
use crate::ir::{self, DType, Graph, Node, Op, Tensor, Value, ValueId};
use crate::{Error, Result};

/// Oldest default-domain opset accepted.
pub const MIN_OPSET: i64 = 11;
/// Newest default-domain opset accepted (22..=28: the ONNX node-test conformance run
/// shows no divergence on the ops we import; unknown attributes still fail loudly).
pub const MAX_OPSET: i64 = 28;
/// Domain of vnpu's test-only operators (`Spin`, `Fail`).
#[cfg(feature = "test-ops")]
pub const TEST_DOMAIN: &str = "ai.vnpu.test";

/// How to import a model.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// Directory that external-data paths are relative to (the model's directory);
    /// `None` rejects models with external data.
    pub base_dir: Option<PathBuf>,
    /// Static shapes for graph inputs by name; fixes dynamic dims (static dims given by
    /// the model must agree).
    pub input_shapes: HashMap<String, Vec<usize>>,
    /// Name of the imported graph; defaults to the ONNX graph name, then `"model"`.
    pub model_name: Option<String>,
    /// Most bytes of external data the model may load, summed over its tensors; a
    /// tensor over what is left is refused before it is read. Default: the model memory
    /// budget ([`crate::compile::MemoryBudget::from_env_or_default`], set by
    /// `VNPU_MEMORY_BUDGET_MB`), which also bounds the model's constants at compile, so
    /// one setting bounds both.
    pub max_external_bytes: u64,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            base_dir: None,
            input_shapes: HashMap::new(),
            model_name: None,
            max_external_bytes: crate::compile::MemoryBudget::from_env_or_default().bytes,
        }
    }
}

/// Reads and imports an ONNX file. External data is looked up beside the file unless
/// `opts.base_dir` says otherwise; the model name defaults to the file stem.
///
/// The file must be a regular file of at most [`MAX_ONNX_FILE_BYTES`], checked before
/// it is read (see [`read_model_file`]).
pub fn import_file(path: &Path, opts: &ImportOptions) -> Result<Graph> {
    let bytes = read_model_file(path, MAX_ONNX_FILE_BYTES)?;
    let mut o = opts.clone();
    if o.base_dir.is_none() {
        o.base_dir = Some(
            path.parent()
                .filter(|p| !p.as_os_str().is_empty())
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
        external_left: Rc::new(Cell::new(opts.max_external_bytes)),
    };
    imp.run(gp)?;
    Ok(imp.g)
}

/// The state of one import: the graph built so far and the name tables. The op import
/// functions (`super::ops`) add their nodes through its `pub(super)` methods.
pub(super) struct Importer<'a> {
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
    /// External-data bytes the model may still load.
    external_left: Rc<Cell<u64>>,
}

/// Whether `d` names the default ONNX operator domain.
fn is_default_domain(d: &str) -> bool {
    d.is_empty() || d == "ai.onnx"
}

/// Whether `d` is the domain of the test-only operators.
#[cfg(feature = "test-ops")]
fn is_test_domain(d: &str) -> bool {
    d == TEST_DOMAIN
}

#[cfg(not(feature = "test-ops"))]
fn is_test_domain(_: &str) -> bool {
    false
}

impl<'a> Importer<'a> {
    /// An `OnnxFormat` error naming the model.
    pub(super) fn fmt(&self, reason: impl Into<String>) -> Error {
        Error::OnnxFormat {
            model: self.model.clone(),
            reason: reason.into(),
        }
    }

    fn run(&mut self, gp: &'a GraphProto) -> Result<()> {
        let base_dir = self.opts.base_dir.clone();
        let model = self.model.clone();
        let external_left = Rc::clone(&self.external_left);
        let tcx = TensorCtx {
            model: &model,
            base_dir: base_dir.as_deref(),
            external_left: &external_left,
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
                        // How Paddle (and some other exporters) write a dynamic dim.
                        Some(-1) => Ok(None),
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
                                .and_then(|d| match (&d.dim_param, d.dim_value) {
                                    (Some(p), _) if !p.is_empty() => Some(p.clone()),
                                    (_, Some(v)) => Some(v.to_string()),
                                    _ => None,
                                })
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
    pub(super) fn outputs(
        &mut self,
        n: &NodeProto,
        node: &str,
        keep: usize,
    ) -> Result<Vec<ValueId>> {
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

    pub(super) fn push(
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
    pub(super) fn fresh(&self, base: &str) -> String {
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
    pub(super) fn temp(&mut self, node: &str, what: &str, dtype: DType) -> ValueId {
        let name = self.fresh(&format!("{node}/{what}"));
        self.new_value(name, dtype)
    }

    pub(super) fn check_arity(
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

    fn convert(&mut self, n: &NodeProto, name: String) -> Result<()> {
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
        let Some(import) = ops::lookup(&n.domain, op_type) else {
            return Err(self.unsupported(n, &name));
        };
        import(
            self,
            NodeCx {
                n,
                name: &name,
                a,
                ins,
            },
        )
    }

    /// The error for a node no import function is registered for.
    fn unsupported(&self, n: &NodeProto, name: &str) -> Error {
        let op_type = &n.op_type;
        let (op, detail) = if is_default_domain(&n.domain) {
            (
                op_type.clone(),
                format!("not supported by vnpu (opset {})", self.opset),
            )
        } else if is_test_domain(&n.domain) {
            (
                format!("{}::{op_type}", n.domain),
                "unknown test operator".to_string(),
            )
        } else {
            (
                format!("{}::{op_type}", n.domain),
                format!("operator domain '{}' is not supported", n.domain),
            )
        };
        Error::UnsupportedOp {
            node: name.into(),
            op,
            detail,
        }
    }

    // ---- The node-building API of the op import functions (`super::ops`). ----

    /// The default-domain opset the model imports.
    pub(super) fn opset(&self) -> i64 {
        self.opset
    }

    /// The graph built so far (values with their known shapes and constants).
    pub(super) fn graph(&self) -> &Graph {
        &self.g
    }

    /// Decodes a tensor held by an attribute (external data resolved like initializers).
    pub(super) fn decode_tensor(&self, t: &TensorProto) -> Result<Tensor> {
        let tcx = TensorCtx {
            model: &self.model,
            base_dir: self.opts.base_dir.as_deref(),
            external_left: &self.external_left,
        };
        decode_tensor(t, &tcx)
    }

    /// Adds a constant under a fresh name based on `base`.
    pub(super) fn add_const(&mut self, base: &str, t: Tensor) -> ValueId {
        let name = self.fresh(base);
        let id = self.g.add_const(name.clone(), t);
        self.by_name.insert(name, id);
        id
    }

    /// Checks the node's attributes (all read) and input arity.
    pub(super) fn check(&self, cx: &NodeCx<'_>, min: usize, max: usize) -> Result<()> {
        cx.a.finish()?;
        self.check_arity(cx.name, &cx.n.op_type, &cx.ins, min, max)
    }

    /// Adds the node as one IR node of `nout` outputs (after [`Importer::check`]).
    pub(super) fn add(&mut self, cx: NodeCx<'_>, op: Op, nout: usize) -> Result<()> {
        let outs = self.outputs(cx.n, cx.name, nout)?;
        self.push(cx.name.to_string(), op, cx.ins, outs, cx.name);
        Ok(())
    }

    /// The common case: checks attributes and arity, then adds one IR node with
    /// `nout` outputs.
    pub(super) fn emit_n(
        &mut self,
        cx: NodeCx<'_>,
        op: Op,
        min: usize,
        max: usize,
        nout: usize,
    ) -> Result<()> {
        self.check(&cx, min, max)?;
        self.add(cx, op, nout)
    }

    /// [`Importer::emit_n`] with one output.
    pub(super) fn emit(&mut self, cx: NodeCx<'_>, op: Op, min: usize, max: usize) -> Result<()> {
        self.emit_n(cx, op, min, max, 1)
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
