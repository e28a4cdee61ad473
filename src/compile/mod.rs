//! The compiler: ONNX graph → passes → placement → FC partition → [`CompiledModel`].
//!
//! Pipeline (each step a small tested function): import, insert input preprocessing for
//! image inputs, infer shapes + fold constants, canonicalise, remove identities, fold
//! BatchNorm, fuse epilogues, drop dead nodes, place nodes (BPU/CPU), measure node times
//! on this host, cut BPU segments into FCs.

pub mod band;
pub mod budget;
pub mod config;
pub mod cost;
pub mod cost_cache;
pub mod fold;
pub mod fuse;
pub mod gelu;
pub mod layout;
pub mod partition;
pub mod place;
pub mod quantize;
mod resident;
pub mod rewrite;
pub mod simplify;
#[cfg(test)]
pub mod testutil;

use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use budget::MemoryBudget;
pub use config::{CompileOptions, InputParams, InputType};
pub use partition::{Fc, OverLimit, Step};

use crate::error::{Error, Result};
use crate::exec::{ModelPlan, PlanOptions, Precision};
use crate::ir::{DType, Graph, ImageFormat, Node, Op, Placement, Value, ValueId};

/// What the caller hands over for one model input or output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum IoKind {
    /// A plain tensor of `IoSpec::dtype`.
    Tensor,
    /// An image in this format (u8), converted by the model.
    Image(ImageFormat),
}

/// Layout of a boundary tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum IoLayout {
    Nchw,
    Nhwc,
    /// Not a 4-D image-like tensor.
    None,
}

/// A model input or output at the API boundary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IoSpec {
    /// Name (the ONNX name).
    pub name: String,
    /// The graph value that holds it.
    pub value: ValueId,
    /// Tensor or image.
    pub kind: IoKind,
    /// Element type of the buffer (u8 for images).
    pub dtype: DType,
    /// Layout.
    pub layout: IoLayout,
    /// Logical shape as reported to users (`[N,3,H,W]` or `[N,H,W,3]` for images).
    pub shape: Vec<usize>,
    /// Bytes of the buffer (of the graph value; see `quant` for a quantised output).
    pub byte_size: usize,
    /// A quantised output: the caller's buffer holds S8/S16/S32 converted from the f32
    /// graph value ([`crate::quant::io`]).
    #[serde(default)]
    pub quant: Option<crate::quant::io::OutputQuant>,
}

/// One segment of a compiled model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Segment {
    /// BPU (runs on a core as FCs) or CPU (runs on the CPU pool).
    pub kind: Placement,
    /// First node index.
    pub start: usize,
    /// One past the last node index.
    pub end: usize,
    /// The FCs (a CPU segment has exactly one, holding all its nodes).
    pub fcs: Vec<Fc>,
}

impl Segment {
    /// Estimated time of the whole segment in µs.
    pub fn est_us(&self) -> f64 {
        self.fcs.iter().map(|f| f.est_us).sum()
    }
}

/// A compiled model: the final graph plus its segments and boundary description.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CompiledModel {
    /// Model name.
    pub name: String,
    /// The compiled graph (fused, placed; nodes in execution order).
    pub graph: Graph,
    /// Segments in execution order.
    pub segments: Vec<Segment>,
    /// Inputs in model order.
    pub inputs: Vec<IoSpec>,
    /// Outputs in model order.
    pub outputs: Vec<IoSpec>,
    /// The `max_time_per_fc` it was compiled with.
    pub max_time_per_fc: u64,
    /// Measured whole-node times (µs), by node index.
    pub node_est_us: Vec<f64>,
    /// Steps over the limit that could not be tiled.
    pub over_limit: Vec<OverLimit>,
    /// The precision the node and FC times were measured in
    /// ([`CompileOptions::precision`]): the plan's precision when `VNPU_PRECISION` is
    /// unset and this CPU has it.
    #[serde(default)]
    pub precision: Precision,
    /// Conv / GEMM weights packed when the compiled file was written, borrowed from it
    /// by the plan (empty when compiled now: the plan packs them).
    #[serde(skip)]
    pub packed: crate::exec::PackedWeights,
}

impl CompiledModel {
    /// Estimated time of one inference in µs.
    pub fn est_us(&self) -> f64 {
        self.segments.iter().map(|s| s.est_us()).sum()
    }
}

/// Compiles an ONNX file (a regular file of at most 2 GiB, checked before it is read).
pub fn compile_onnx_file(path: &Path, opts: &CompileOptions) -> Result<CompiledModel> {
    let bytes = crate::onnx::read_model_file(path, crate::onnx::MAX_ONNX_FILE_BYTES)?;
    let name = opts.name.clone().unwrap_or_else(|| {
        path.file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".into())
    });
    compile_onnx_bytes(&bytes, path.parent(), &name, opts)
}

/// Compiles ONNX bytes; `base_dir` is where external data files live.
pub fn compile_onnx_bytes(
    bytes: &[u8],
    base_dir: Option<&Path>,
    name: &str,
    opts: &CompileOptions,
) -> Result<CompiledModel> {
    config::check_max_time_per_fc(opts.max_time_per_fc)?;
    let mut shapes = opts.input_shapes.clone();
    for ip in &opts.inputs {
        if let Some(s) = &ip.shape {
            shapes.insert(ip.name.clone(), s.clone());
        }
    }
    let import = crate::onnx::ImportOptions {
        base_dir: base_dir.map(|p| p.to_path_buf()),
        input_shapes: shapes.into_iter().collect(),
        model_name: Some(name.to_string()),
        ..Default::default()
    };
    let mut graph = crate::onnx::import_model(bytes, &import)?;
    graph.name = opts.name.clone().unwrap_or_else(|| name.to_string());
    compile_graph(graph, opts)
}

/// Runs the passes, placement and partition on an imported graph, within the
/// process-wide memory budget ([`MemoryBudget::from_env`]).
pub fn compile_graph(g: Graph, opts: &CompileOptions) -> Result<CompiledModel> {
    compile_graph_within(g, opts, &MemoryBudget::from_env()?)
}

/// [`compile_graph`] with an explicit memory budget for the model's values, constants
/// and planned arena.
pub fn compile_graph_within(
    mut g: Graph,
    opts: &CompileOptions,
    budget: &MemoryBudget,
) -> Result<CompiledModel> {
    config::check_max_time_per_fc(opts.max_time_per_fc)?;
    // Declared inputs and initializers first: every later size derives from them.
    budget.check_graph(&g)?;
    let imported = (!opts.outputs.is_empty()
        && (opts.calibration_data.is_some() || opts.quantize.is_some()))
    .then(|| g.clone());
    let mut boundary_in = insert_input_conversions(&mut g, opts)?;
    fold::infer_and_fold_within(&mut g, budget)?;
    simplify::canonicalize_clip(&mut g);
    if let Some(q) = &opts.quantize {
        crate::quant::quantize_graph(&mut g, opts, q)?;
    }
    // After PTQ, whose calibration feeds the preprocessing nodes' outputs directly.
    crate::quant::io::insert_signed_inputs(&mut g, &mut boundary_in, opts)?;
    let fuse_all = |g: &mut Graph| loop {
        let mut changed = simplify::remove_identities(g);
        changed += fuse::fold_batchnorm(g);
        changed += fuse::fuse_silu(g);
        changed += gelu::fuse_gelu(g);
        // Attention first: a residual Add that fuse_post_ops folds into the output MatMul
        // would keep the MatMul out of the pattern.
        changed += fuse::fuse_softmax_mask(g);
        changed += fuse::fuse_attention(g);
        changed += fuse::fuse_post_ops(g);
        if changed == 0 {
            break;
        }
    };
    if opts.optimize_level > 0 {
        fuse_all(&mut g);
    }
    let output_scales = crate::quant::io::graph_output_scales(&g, opts);
    // Int8 lowering of QDQ patterns, then the weights left in float are folded (and may
    // now fuse further).
    quantize::lower_int8(&mut g)?;
    if quantize::fold_constant_dequantize(&mut g)? > 0 && opts.optimize_level > 0 {
        fuse_all(&mut g);
    }
    if opts.optimize_level >= 2 {
        // Dense convs go channels-last only where the plan runs them on the matrix
        // engine: a bf16 compile on a CPU with AMX.
        let wide = opts.precision == Precision::Bf16
            && crate::kernels::bf16::native().is_some_and(|t| t.wide.is_some());
        let dense = if wide {
            layout::Dense::Wide
        } else {
            layout::Dense::StemsOnly
        };
        layout::channels_last_with(&mut g, dense);
        band::fuse_expand_depthwise(&mut g);
        band::fuse_projections(&mut g);
    }
    simplify::eliminate_dead_nodes(&mut g);
    ensure_outputs_computed(&mut g);
    place::place_nodes(&mut g, &opts.run_on_cpu, &opts.run_on_bpu)?;

    // The cost model measures with the weights where a loaded model keeps them.
    resident::constants_on_huge_pages(&mut g)?;
    let graph = Arc::new(g);
    let consts = budget.check_graph(&graph)?;
    let plan_opts = PlanOptions {
        precision: opts.precision,
        ..PlanOptions::default()
    };
    let plan = ModelPlan::new(graph.clone(), &plan_opts)
        .and_then(|p| resident::packed_on_huge_pages(p, &plan_opts))
        .map_err(|e| match e {
            Error::Config { reason, .. } if opts.precision != Precision::F32 => {
                Error::CompileOption {
                    option: "precision".into(),
                    reason,
                }
            }
            e => e,
        })?;
    check_arena(&graph, &plan, consts, budget)?;
    let mut cost_cache = cost_cache::CostCache::open(opts.precision);
    let mut cost = cost::CostModel::new(&graph, &plan, 3).with_cache(&mut cost_cache);
    let node_est_us = cost.measure_all();
    // Tile times of the nodes that get tiled, per (node, tile count): timed in order.
    let mut tile_us = std::collections::HashMap::new();
    let mut over_limit = Vec::new();
    let mut segments = Vec::new();
    for (kind, range) in place::segment_ranges(&graph) {
        let fcs = match kind {
            Placement::Cpu => partition::partition(
                range.clone(),
                0,
                |n, _, _| node_est_us[n],
                |_| 1,
                &mut over_limit,
            ),
            Placement::Bpu => partition::partition(
                range.clone(),
                opts.max_time_per_fc,
                |n, t, k| {
                    if k == 1 {
                        return node_est_us[n];
                    }
                    // The node's tiles timed in order, one after the other as an FC runs
                    // them; scaled by how much slower the whole node ran in the passes over
                    // the model (where the nodes before it leave the caches to it).
                    let tiles = tile_us
                        .entry((n, k))
                        .or_insert_with(|| cost.measure_tiles(n, k as usize));
                    let sum: f64 = tiles.iter().sum();
                    let scale = (node_est_us[n] / sum).clamp(1.0, 2.0);
                    tiles[t as usize] * scale
                },
                |n| plan.tiles_for(n),
                &mut over_limit,
            ),
        };
        segments.push(Segment {
            kind,
            start: range.start,
            end: range.end,
            fcs,
        });
    }
    drop(cost);
    cost_cache.save();
    let inputs = boundary_in;
    let outputs = graph
        .outputs
        .iter()
        .map(|&v| tensor_spec(&graph, v))
        .collect::<Result<Vec<_>>>()?;
    let graph = Arc::try_unwrap(graph).unwrap_or_else(|a| (*a).clone());
    let mut compiled = CompiledModel {
        name: graph.name.clone(),
        graph,
        segments,
        inputs,
        outputs,
        max_time_per_fc: opts.max_time_per_fc,
        node_est_us,
        over_limit,
        precision: opts.precision,
        packed: Default::default(),
    };
    let calibrate = |_: &CompiledModel, axes: &[Option<usize>]| match &imported {
        Some(g0) => crate::quant::io_calib::calibrate_outputs(g0, opts, budget, axes),
        None => Err(Error::CompileOption {
            option: "calibration_data".into(),
            reason: "no calibration directory given".into(),
        }),
    };
    let calibrate: Option<&crate::quant::io::Calibrate> = imported
        .as_ref()
        .map(|_| &calibrate as &crate::quant::io::Calibrate);
    crate::quant::io::assign_output_types(&mut compiled, opts, &output_scales, calibrate)?;
    Ok(compiled)
}

/// Checks that the plan's arena plus the constants fit in the budget before the cost
/// model allocates a state; the error names the largest activation.
fn check_arena(g: &Graph, plan: &ModelPlan, consts: u64, budget: &MemoryBudget) -> Result<()> {
    let arena = plan.arena_bytes() as u64;
    if arena.checked_add(consts).is_some_and(|t| t <= budget.bytes) {
        return Ok(());
    }
    let largest = g
        .values
        .iter()
        .filter(|v| v.konst.is_none())
        .filter_map(|v| {
            let s = v.shape.as_deref()?;
            Some((budget::tensor_bytes(s, v.dtype).unwrap_or(u64::MAX), v))
        })
        .max_by_key(|(b, _)| *b);
    let (name, shape) = largest.map_or((g.name.as_str(), &[][..]), |(_, v)| {
        (v.name.as_str(), v.shape.as_deref().unwrap_or_default())
    });
    Err(Error::shape(
        &g.name,
        "plan",
        format!(
            "the planned arena ({arena} bytes) plus constants ({consts} bytes) exceed the \
             memory budget of {} bytes; largest tensor '{name}' has shape {shape:?} (set {})",
            budget.bytes,
            budget::BUDGET_ENV
        ),
    ))
}

/// Makes every graph output the output of a node: an output that folded to a constant or
/// that is a graph input directly gets an explicit copy node, so the executor writes it.
fn ensure_outputs_computed(g: &mut Graph) {
    let producers = g.producers();
    for k in 0..g.outputs.len() {
        let o = g.outputs[k];
        if producers[o].is_some() {
            continue;
        }
        let name = g.values[o].name.clone();
        let (dtype, shape) = (g.values[o].dtype, g.values[o].shape.clone());
        let from = if g.inputs.contains(&o) {
            // A graph input keeps its id (it is listed in `inputs`); the copy reads it.
            let v = g.add_value(Value {
                name: name.clone(),
                dtype,
                shape,
                declared: None,
                konst: None,
            });
            g.outputs[k] = v;
            (o, v)
        } else {
            let konst = g.values[o].konst.take();
            let src = g.add_value(Value {
                name: format!("{name}__source"),
                dtype,
                shape,
                declared: None,
                konst,
            });
            (src, o)
        };
        g.nodes.push(Node {
            name: format!("{name}__output_copy"),
            op: Op::Unary(crate::ir::UnaryOp::Identity),
            inputs: vec![Some(from.0)],
            outputs: vec![from.1],
            absorbed: vec![],
            placement: None,
        });
    }
}

fn tensor_spec(g: &Graph, v: ValueId) -> Result<IoSpec> {
    let val = &g.values[v];
    let shape = val.shape.clone().ok_or_else(|| Error::Shape {
        node: val.name.clone(),
        op: "io".into(),
        reason: "shape is not static".into(),
    })?;
    let layout = if shape.len() == 4 {
        IoLayout::Nchw
    } else {
        IoLayout::None
    };
    Ok(IoSpec {
        name: val.name.clone(),
        value: v,
        kind: IoKind::Tensor,
        dtype: val.dtype,
        layout,
        byte_size: budget::tensor_bytes(&shape, val.dtype)
            .and_then(|b| usize::try_from(b).ok())
            .ok_or_else(|| {
                Error::shape(&val.name, "io", format!("shape {shape:?} is too large"))
            })?,
        shape,
        quant: None,
    })
}

/// For inputs declared as images (or NHWC feature maps), adds a new raw graph input and a
/// conversion node in front of the original input value. Returns the boundary specs of
/// all inputs in model order.
fn insert_input_conversions(g: &mut Graph, opts: &CompileOptions) -> Result<Vec<IoSpec>> {
    for ip in &opts.inputs {
        if !g.inputs.iter().any(|&v| g.values[v].name == ip.name) {
            return Err(Error::CompileOption {
                option: "input_name".into(),
                reason: format!(
                    "model has no input '{}' (inputs: {})",
                    ip.name,
                    g.inputs
                        .iter()
                        .map(|&v| g.values[v].name.clone())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
    }
    let mut specs = Vec::new();
    let mut new_nodes = Vec::new();
    for k in 0..g.inputs.len() {
        let v = g.inputs[k];
        let spec_default = tensor_spec(g, v)?;
        let Some(ip) = opts.inputs.iter().find(|p| p.name == g.values[v].name) else {
            specs.push(spec_default);
            continue;
        };
        let shape = spec_default.shape.clone();
        let needs_image = matches!(ip.input_type, InputType::Image(_));
        if !needs_image && !ip.nhwc {
            specs.push(spec_default);
            continue;
        }
        if shape.len() != 4 || g.values[v].dtype != DType::F32 {
            return Err(Error::CompileOption {
                option: "input_type_rt".into(),
                reason: format!(
                    "input '{}' must be a 4-D f32 NCHW tensor to take images or NHWC, it is {:?}",
                    ip.name, shape
                ),
            });
        }
        let (n, c, h, w) = (shape[0], shape[1], shape[2], shape[3]);
        let name = g.values[v].name.clone();
        let (op, raw_dtype, raw_shape, spec_shape, kind, byte_size) = match ip.input_type {
            InputType::Image(fmt) => {
                let want_c = if fmt == ImageFormat::Gray { 1 } else { 3 };
                if c != want_c {
                    return Err(Error::CompileOption {
                        option: "input_type_rt".into(),
                        reason: format!("input '{name}' has {c} channels; {fmt:?} gives {want_c}"),
                    });
                }
                if fmt == ImageFormat::Nv12 && (h % 2 != 0 || w % 2 != 0) {
                    return Err(Error::CompileOption {
                        option: "input_type_rt".into(),
                        reason: format!(
                            "nv12 input '{name}' needs even height and width, got {h}x{w}"
                        ),
                    });
                }
                let (raw, bytes) = match fmt {
                    ImageFormat::Nv12 => (vec![n, h * 3 / 2, w], n * h * w * 3 / 2),
                    _ if ip.nhwc => (vec![n, h, w, c], n * h * w * c),
                    _ => (vec![n, c, h, w], n * h * w * c),
                };
                let spec_shape = if ip.nhwc && fmt != ImageFormat::Nv12 {
                    vec![n, h, w, c]
                } else {
                    vec![n, c, h, w]
                };
                let op = Op::Preprocess {
                    format: fmt,
                    nhwc: ip.nhwc,
                    mean: ip.mean.clone(),
                    scale: ip.scale.clone(),
                    to_bgr: ip.train_bgr,
                };
                (op, DType::U8, raw, spec_shape, IoKind::Image(fmt), bytes)
            }
            InputType::FeatureMap => {
                let raw = vec![n, h, w, c];
                (
                    Op::Transpose {
                        perm: Some(vec![0, 3, 1, 2]),
                    },
                    DType::F32,
                    raw.clone(),
                    raw,
                    IoKind::Tensor,
                    n * h * w * c * 4,
                )
            }
        };
        let raw = g.add_value(Value {
            name: name.clone(),
            dtype: raw_dtype,
            shape: Some(raw_shape),
            declared: None,
            konst: None,
        });
        g.values[v].name = format!("{name}__converted");
        g.inputs[k] = raw;
        new_nodes.push(Node {
            name: format!("{name}__preprocess"),
            op,
            inputs: vec![Some(raw)],
            outputs: vec![v],
            absorbed: vec![],
            placement: None,
        });
        let layout = if ip.nhwc && kind != IoKind::Image(ImageFormat::Nv12) {
            IoLayout::Nhwc
        } else {
            IoLayout::Nchw
        };
        specs.push(IoSpec {
            name,
            value: raw,
            kind,
            dtype: raw_dtype,
            layout,
            shape: spec_shape,
            byte_size,
            quant: None,
        });
    }
    new_nodes.append(&mut g.nodes);
    g.nodes = new_nodes;
    Ok(specs)
}

#[cfg(test)]
mod limits_tests;
#[cfg(test)]
mod precision_tests;
