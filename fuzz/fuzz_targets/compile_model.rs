//! Fuzzes the whole compile path on small models: ONNX bytes → import → constant folding
//! and passes → placement → execution plan → cost model (which runs every kernel) →
//! partition → file image → load back. Everything runs under a 16 MiB memory budget, so
//! huge declared shapes must be refused with an error, never allocated. Any input must
//! give `Ok` or a clean error, and a model that compiles must load back from its file.
//!
//! A structure-aware mutator gets past the protobuf layer: most mutations decode the
//! model, change one thing a model author could (an op type, an attribute value, a
//! declared dim, an initializer's dims or bytes, a node's input wiring, the opset) and
//! encode it again; the rest are libFuzzer's byte-level mutations.
#![no_main]
use libfuzzer_sys::{fuzz_mutator, fuzz_target, fuzzer_mutate};
use prost::Message;
use vnpu::compile::{compile_graph_within, CompileOptions, MemoryBudget};
use vnpu::onnx::proto::{tensor_shape_proto::Dimension, AttributeProto, ModelProto};
use vnpu::onnx::{import_model, ImportOptions};

/// The budget every fuzzed model compiles within.
const BUDGET_BYTES: u64 = 16 << 20;

fuzz_target!(|data: &[u8]| {
    let opts = ImportOptions {
        max_external_bytes: 0,
        ..ImportOptions::default()
    };
    let Ok(graph) = import_model(data, &opts) else {
        return;
    };
    let budget = MemoryBudget::new(BUDGET_BYTES);
    let Ok(model) = compile_graph_within(graph, &CompileOptions::default(), &budget) else {
        return;
    };
    let bytes = vnpu::format::write_models(std::slice::from_ref(&model))
        .expect("a compiled model can be written");
    if let Err(e) = vnpu::format::read_models(&bytes, "fuzz") {
        panic!("a compiled model does not load back: {e}");
    }
});

/// Operator types the importer knows (and a few it does not).
const OPS: &[&str] = &[
    "Conv",
    "ConvTranspose",
    "Gemm",
    "MatMul",
    "Relu",
    "Sigmoid",
    "HardSwish",
    "Tanh",
    "Erf",
    "Softplus",
    "Exp",
    "Log",
    "Abs",
    "Neg",
    "Sqrt",
    "Reciprocal",
    "Floor",
    "Ceil",
    "Round",
    "Sign",
    "Not",
    "Sin",
    "Cos",
    "Identity",
    "LeakyRelu",
    "Elu",
    "Selu",
    "HardSigmoid",
    "Gelu",
    "Clip",
    "Dropout",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Equal",
    "Less",
    "LessOrEqual",
    "Greater",
    "GreaterOrEqual",
    "And",
    "Or",
    "Xor",
    "PRelu",
    "Mod",
    "Sum",
    "Mean",
    "Max",
    "Min",
    "Where",
    "Cast",
    "CastLike",
    "BatchNormalization",
    "InstanceNormalization",
    "LayerNormalization",
    "Softmax",
    "LogSoftmax",
    "MaxPool",
    "AveragePool",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "ReduceMean",
    "ReduceSum",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceSumSquare",
    "ReduceLogSumExp",
    "ArgMax",
    "ArgMin",
    "CumSum",
    "Concat",
    "Split",
    "Slice",
    "Reshape",
    "Flatten",
    "Squeeze",
    "Unsqueeze",
    "Transpose",
    "Pad",
    "Expand",
    "Tile",
    "DepthToSpace",
    "SpaceToDepth",
    "Gather",
    "GatherElements",
    "TopK",
    "NonMaxSuppression",
    "Shape",
    "ConstantOfShape",
    "Range",
    "Resize",
    "Upsample",
    "LSTM",
    "GRU",
    "Constant",
    "Size",
    "Einsum",
];

/// Attribute names the importer reads.
const ATTRS: &[&str] = &[
    "axes",
    "axis",
    "mode",
    "alpha",
    "kernel_shape",
    "group",
    "blocksize",
    "pads",
    "output_shape",
    "output_padding",
    "epsilon",
    "value",
    "to",
    "split",
    "perm",
    "num_outputs",
    "min",
    "max",
    "keepdims",
    "hidden_size",
    "direction",
    "coordinate_transformation_mode",
    "ceil_mode",
    "beta",
    "auto_pad",
    "strides",
    "dilations",
    "largest",
    "sorted",
    "exclusive",
    "reverse",
    "select_last_index",
    "noop_with_empty_axes",
    "transA",
    "transB",
    "storage_order",
    "count_include_pad",
    "nearest_mode",
    "linear_before_reset",
    "layout",
    "stash_type",
];

/// Integers worth trying where a size, an axis or an index goes.
const INTS: &[i64] = &[
    0,
    1,
    2,
    3,
    4,
    -1,
    -2,
    -3,
    7,
    8,
    16,
    64,
    255,
    256,
    1 << 16,
    1 << 20,
    1 << 31,
    -(1 << 31),
    (1 << 31) - 1,
    i64::MAX,
    i64::MIN,
    1 << 40,
];

/// A small deterministic generator seeded by libFuzzer.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
    fn int(&mut self) -> i64 {
        if self.below(4) == 0 {
            self.next() as i64 % 100
        } else {
            INTS[self.below(INTS.len())]
        }
    }
}

fn mutate_attr(a: &mut AttributeProto, r: &mut Rng) {
    match r.below(6) {
        0 => a.i = r.int(),
        1 => a.f = [0.0, -1.0, 1e30, f32::NAN, f32::INFINITY, 0.5][r.below(6)],
        2 => {
            if a.ints.is_empty() || r.below(4) == 0 {
                a.ints.push(r.int());
            } else {
                let k = r.below(a.ints.len());
                a.ints[k] = r.int();
            }
        }
        3 => {
            if !a.ints.is_empty() {
                a.ints.remove(r.below(a.ints.len()));
            }
        }
        4 => a.name = ATTRS[r.below(ATTRS.len())].into(),
        _ => a.r#type = r.below(12) as i32,
    }
}

/// Applies one model-level mutation; false when the model offered nothing to mutate.
fn mutate_model(m: &mut ModelProto, r: &mut Rng) -> bool {
    if r.below(16) == 0 {
        if let Some(o) = m.opset_import.first_mut() {
            o.version = 10 + r.below(20) as i64;
            return true;
        }
    }
    let Some(g) = m.graph.as_mut() else {
        return false;
    };
    // Every value name, for rewiring.
    let mut names: Vec<String> = g.input.iter().map(|v| v.name.clone()).collect();
    names.extend(g.initializer.iter().map(|t| t.name.clone()));
    names.extend(g.node.iter().flat_map(|n| n.output.iter().cloned()));
    match r.below(8) {
        0 | 1 => {
            let Some(n) = pick(&mut g.node, r) else {
                return false;
            };
            n.op_type = OPS[r.below(OPS.len())].into();
        }
        2 | 3 => {
            let Some(n) = pick(&mut g.node, r) else {
                return false;
            };
            if n.attribute.is_empty() || r.below(5) == 0 {
                n.attribute.push(AttributeProto {
                    name: ATTRS[r.below(ATTRS.len())].into(),
                    r#type: [1, 2, 7, 6][r.below(4)],
                    i: r.int(),
                    ints: vec![r.int(), r.int()],
                    ..Default::default()
                });
            } else if r.below(6) == 0 {
                let k = r.below(n.attribute.len());
                n.attribute.remove(k);
            } else {
                let k = r.below(n.attribute.len());
                mutate_attr(&mut n.attribute[k], r);
            }
        }
        4 => {
            // A declared dim of an input, output or value_info.
            let k = r.below(3);
            let vs = match k {
                0 => &mut g.input,
                1 => &mut g.output,
                _ => &mut g.value_info,
            };
            let Some(v) = pick(vs, r) else { return false };
            let Some(shape) = v
                .r#type
                .as_mut()
                .and_then(|t| t.tensor_type.as_mut())
                .and_then(|t| t.shape.as_mut())
            else {
                return false;
            };
            match r.below(4) {
                0 => shape.dim.push(Dimension {
                    dim_value: Some(r.int()),
                    dim_param: None,
                    ..Default::default()
                }),
                1 if !shape.dim.is_empty() => {
                    let k = r.below(shape.dim.len());
                    shape.dim.remove(k);
                }
                _ => {
                    let Some(d) = pick(&mut shape.dim, r) else {
                        return false;
                    };
                    *d = if r.below(5) == 0 {
                        Dimension {
                            dim_value: None,
                            dim_param: Some("N".into()),
                            ..Default::default()
                        }
                    } else {
                        Dimension {
                            dim_value: Some(r.int()),
                            dim_param: None,
                            ..Default::default()
                        }
                    };
                }
            }
        }
        5 => {
            let Some(t) = pick(&mut g.initializer, r) else {
                return false;
            };
            match r.below(4) {
                0 if !t.dims.is_empty() => {
                    let k = r.below(t.dims.len());
                    t.dims[k] = r.int();
                }
                1 => t.data_type = [1, 2, 3, 6, 7, 9, 10, 11, 16][r.below(9)],
                2 if !t.raw_data.is_empty() => {
                    let k = r.below(t.raw_data.len());
                    t.raw_data[k] = r.next() as u8;
                }
                _ => {
                    if !t.int64_data.is_empty() {
                        let k = r.below(t.int64_data.len());
                        t.int64_data[k] = r.int();
                    } else if t.raw_data.len() % 8 == 0
                        && !t.raw_data.is_empty()
                        && t.data_type == 7
                    {
                        let k = r.below(t.raw_data.len() / 8) * 8;
                        t.raw_data[k..k + 8].copy_from_slice(&r.int().to_le_bytes());
                    } else {
                        t.dims.push(1);
                    }
                }
            }
        }
        6 => {
            let Some(n) = pick(&mut g.node, r) else {
                return false;
            };
            match r.below(4) {
                0 => n.input.push(String::new()),
                1 if !n.input.is_empty() => {
                    let k = r.below(n.input.len());
                    n.input.remove(k);
                }
                _ => {
                    let Some(i) = pick(&mut n.input, r) else {
                        return false;
                    };
                    if let Some(name) = names.get(r.below(names.len())) {
                        i.clone_from(name);
                    }
                }
            }
        }
        _ => {
            // Duplicate or drop a node.
            if g.node.is_empty() {
                return false;
            }
            let k = r.below(g.node.len());
            if r.below(2) == 0 {
                g.node.remove(k);
            } else {
                let mut n = g.node[k].clone();
                n.name.push('_');
                g.node.insert(k + 1, n);
            }
        }
    }
    true
}

fn pick<'a, T>(v: &'a mut [T], r: &mut Rng) -> Option<&'a mut T> {
    let k = r.below(v.len());
    v.get_mut(k)
}

fuzz_mutator!(|data: &mut [u8], size: usize, max_size: usize, seed: u32| {
    let mut r = Rng(u64::from(seed).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    if r.below(4) != 0 {
        if let Ok(mut m) = ModelProto::decode(&data[..size]) {
            let rounds = 1 + r.below(3);
            let mut changed = false;
            for _ in 0..rounds {
                changed |= mutate_model(&mut m, &mut r);
            }
            let out = m.encode_to_vec();
            if changed && out.len() <= max_size {
                data[..out.len()].copy_from_slice(&out);
                return out.len();
            }
        }
    }
    fuzzer_mutate(data, size, max_size)
});
