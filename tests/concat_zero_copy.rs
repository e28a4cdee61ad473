//! Zero-copy Concat end to end: compiled models give the same bytes, bit for bit, with
//! Concat inputs produced in place (`PlanOptions::concat_zero_copy`, the default) as with
//! every input copied, run the same way: whole nodes, every node at its most tiles, the
//! compiled FC steps, each on one and on two intra-op threads.

mod data_support;

use data_support::rand_f32;
use std::path::Path;
use std::sync::Arc;
use vnpu::compile::{compile_onnx_bytes, compile_onnx_file, CompileOptions, CompiledModel};
use vnpu::exec::{ModelPlan, PlanOptions, Tile};
use vnpu::ir::{DType, Graph, Tensor};
use vnpu::onnx::builder::{attr, ModelBuilder};

/// Deterministic input bytes of every graph input (floats in [-1, 1), else small bytes).
fn inputs(g: &Graph, plan: &ModelPlan) -> Vec<Vec<u8>> {
    (0..g.inputs.len())
        .map(|i| {
            let len = plan.input_len(i);
            match g.values[g.inputs[i]].dtype {
                DType::F32 => bytemuck::cast_slice(&rand_f32(len / 4, i as u32 + 3)).to_vec(),
                _ => (0..len).map(|k| (k * 7 % 5) as u8).collect(),
            }
        })
        .collect()
}

/// How the nodes run.
#[derive(Clone, Copy, Debug)]
enum Steps {
    Whole,
    MostTiles,
    /// The compiled model's FC steps.
    Fcs,
}

/// Every node output right after its node ran, then every graph output (named).
fn run(m: &CompiledModel, opts: &PlanOptions, steps: Steps) -> Vec<(String, Vec<u8>)> {
    let g = Arc::new(m.graph.clone());
    let plan = ModelPlan::new(g.clone(), opts).expect("plan");
    let mut st = plan.new_state();
    for (i, b) in inputs(&g, &plan).iter().enumerate() {
        plan.set_input(&mut st, i, b).expect("input");
    }
    let order: Vec<(usize, Tile)> = match steps {
        Steps::Whole => (0..g.nodes.len()).map(|n| (n, Tile::WHOLE)).collect(),
        Steps::MostTiles => (0..g.nodes.len())
            .flat_map(|n| {
                let count = plan.tiles_for(n);
                (0..count).map(move |index| (n, Tile { index, count }))
            })
            .collect(),
        Steps::Fcs => m
            .segments
            .iter()
            .flat_map(|s| &s.fcs)
            .flat_map(|f| &f.steps)
            .map(|s| {
                let tile = s.exec_tile();
                (s.node, tile)
            })
            .collect(),
    };
    let mut seen = Vec::new();
    for (k, &(n, tile)) in order.iter().enumerate() {
        plan.run_node(&mut st, n, tile).expect("run");
        if order.get(k + 1).is_none_or(|next| next.0 != n) {
            for o in 0..g.nodes[n].outputs.len() {
                let b = plan.node_output(&st, n, o).expect("output").to_vec();
                seen.push((g.nodes[n].name.clone(), b));
            }
        }
    }
    for k in 0..g.outputs.len() {
        let b = plan.output_bytes(&st, k).expect("output").to_vec();
        seen.push((format!("output {k}"), b));
    }
    seen
}

/// Checks `m` both ways; returns how many Concat inputs the zero-copy plan has in place.
fn same_both_ways(m: &CompiledModel) -> usize {
    for threads in [1, 2] {
        let opts = PlanOptions {
            intra_op_threads: threads,
            ..Default::default()
        };
        let copying = PlanOptions {
            concat_zero_copy: false,
            ..opts.clone()
        };
        // The same steps both ways (some kernels' tiles round differently from the
        // whole node, e.g. a ConvTranspose's scatter).
        for steps in [Steps::Whole, Steps::MostTiles, Steps::Fcs] {
            let want = run(m, &copying, steps);
            let got = run(m, &opts, steps);
            assert_eq!(got.len(), want.len());
            for ((name, a), (_, b)) in got.iter().zip(&want) {
                assert!(
                    a == b,
                    "{}: {name} differs ({threads} threads, {steps:?})",
                    m.name
                );
            }
        }
    }
    let plan = ModelPlan::new(Arc::new(m.graph.clone()), &PlanOptions::default()).unwrap();
    (0..m.graph.nodes.len())
        .map(|n| plan.inputs_in_place(n))
        .sum()
}

fn w(shape: &[usize], seed: u32) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_f32(shape.to_vec(), rand_f32(n, seed))
}

/// Convs feeding channel Concats: a Split's outputs, a graph input and a graph output
/// beside produced inputs, a Concat output that is a graph output, a Concat of one value
/// twice, one along a later axis (rows interleave: copied), a nested Concat; Reshapes
/// (views) feeding the later-axis one.
fn concat_model() -> Vec<u8> {
    let conv = |k: i64, s: i64, p: i64| {
        vec![
            attr::ints("kernel_shape", &[k, k]),
            attr::ints("strides", &[s, s]),
            attr::ints("pads", &[p, p, p, p]),
        ]
    };
    ModelBuilder::new("concats", 13)
        .input("x", DType::F32, &[1, 3, 16, 16])
        .initializer("w1", &w(&[8, 3, 3, 3], 1))
        .initializer("b1", &w(&[8], 2))
        .initializer("w2", &w(&[8, 3, 1, 1], 3))
        .initializer("w3", &w(&[16, 19, 3, 3], 4))
        .initializer("w4", &w(&[8, 16, 1, 1], 5))
        .initializer("w5", &w(&[16, 16, 1, 1], 6))
        .initializer("sp", &Tensor::from_i64(vec![2], vec![4, 4]))
        .initializer("s64", &Tensor::from_i64(vec![3], vec![1, 16, 64]))
        .node("Conv", "conv1", &["x", "w1", "b1"], &["a0"], conv(3, 1, 1))
        .node("Relu", "relu1", &["a0"], &["a"], vec![])
        .node("Conv", "conv2", &["x", "w2"], &["b0"], conv(1, 1, 0))
        .node("Sigmoid", "sig", &["b0"], &["b"], vec![])
        .node(
            "Split",
            "split",
            &["a", "sp"],
            &["s0", "s1"],
            vec![attr::int("axis", 1)],
        )
        .node(
            "Concat",
            "cat1",
            &["s0", "s1", "b", "x"],
            &["c1"],
            vec![attr::int("axis", 1)],
        )
        .node("Conv", "conv3", &["c1", "w3"], &["cc0"], conv(3, 2, 1))
        .node("Relu", "relu3", &["cc0"], &["cc"], vec![])
        .node("Conv", "conv4", &["cc", "w4"], &["d"], conv(1, 1, 0))
        .node("Conv", "conv5", &["cc", "w5"], &["e"], conv(1, 1, 0))
        .node(
            "Concat",
            "cat2",
            &["cc", "d"],
            &["c2"],
            vec![attr::int("axis", 1)],
        )
        .node(
            "Concat",
            "cat3",
            &["d", "d"],
            &["c3"],
            vec![attr::int("axis", 1)],
        )
        .node("Reshape", "r1", &["cc", "s64"], &["rc"], vec![])
        .node("Reshape", "r2", &["e", "s64"], &["re"], vec![])
        .node(
            "Concat",
            "cat4",
            &["rc", "re"],
            &["c4"],
            vec![attr::int("axis", 2)],
        )
        .node("Tanh", "tanh", &["c2"], &["t"], vec![])
        .node(
            "Concat",
            "cat5",
            &["t", "c3"],
            &["c5"],
            vec![attr::int("axis", 1)],
        )
        .output("c2")
        .output("c4")
        .output("c5")
        .output("b")
        .to_bytes()
}

#[test]
fn compiled_concats_match_the_copying_plan() {
    let m = compile_onnx_bytes(&concat_model(), None, "concats", &CompileOptions::default())
        .expect("compile");
    // cat1: s0, s1 (b is a graph output, x an input); cat2: cc, d; cat3 (d twice) and
    // cat4 (axis 2 behind 16 channels): none; cat5: t, c3 (a nested Concat); and the
    // views r1, r2 (Reshapes of cc and e, their copies skipped).
    assert_eq!(same_both_ways(&m), 8);
}

/// The generated models with Concats (`$VNPU_TEST_MODELS`, as `scripts/test.sh` sets
/// it), compiled with default options; models that do not compile so are skipped.
#[test]
#[ignore = "needs generated models: scripts/test.sh"]
fn generated_models_match_the_copying_plan() {
    let dir = std::env::var("VNPU_TEST_MODELS").expect("VNPU_TEST_MODELS");
    let mut files: Vec<_> = std::fs::read_dir(Path::new(&dir))
        .expect("models dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "onnx"))
        .collect();
    files.sort();
    let mut in_place = 0;
    for f in files {
        match compile_onnx_file(&f, &CompileOptions::default()) {
            Ok(m) => in_place += same_both_ways(&m),
            Err(e) => eprintln!("skipped {}: {e}", f.display()),
        }
    }
    assert!(
        in_place > 0,
        "no Concat input in place in the models of {dir}"
    );
}
