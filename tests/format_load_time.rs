//! Load-time breakdown of a compiled model (not a pass/fail test: it prints numbers).
//!
//! `VNPU_LOAD_MODEL=build/resnet18.vnpu cargo test --release --features test-ops \
//!   --test format_load_time -- --ignored --nocapture`

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

fn best_ms(rounds: usize, mut f: impl FnMut()) -> f64 {
    (0..rounds)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e3
        })
        .fold(f64::INFINITY, f64::min)
}

#[test]
#[ignore = "measurement: needs VNPU_LOAD_MODEL (a compiled file); prints timings"]
fn load_time_breakdown() {
    let Some(path) = std::env::var_os("VNPU_LOAD_MODEL").map(PathBuf::from) else {
        eprintln!("VNPU_LOAD_MODEL not set: nothing to measure");
        return;
    };
    let bytes = std::fs::read(&path).expect("model file");
    let rounds = 20;
    let checksum = best_ms(rounds, || {
        std::hint::black_box(vnpu::format::checksum(&bytes));
    });
    let load = best_ms(rounds, || {
        std::hint::black_box(vnpu::format::load_file(&path).expect("load"));
    });
    let verified = best_ms(rounds, || {
        std::hint::black_box(vnpu::format::load_file_verified(&path).expect("load"));
    });
    let models = vnpu::format::load_file(&path).expect("load");
    for m in &models {
        let used = m.graph.use_counts();
        let (mut all, mut live) = (0usize, 0usize);
        for (v, val) in m.graph.values.iter().enumerate() {
            if let Some(k) = &val.konst {
                all += k.bytes().len();
                if used[v] > 0 {
                    live += k.bytes().len();
                }
            }
        }
        println!(
            "model {}: constants {all} bytes, {live} of them used by a node",
            m.name
        );
    }
    let opts = vnpu::exec::PlanOptions::default();
    let plan = best_ms(rounds, || {
        for m in &models {
            let g = Arc::new(m.graph.clone());
            std::hint::black_box(vnpu::exec::ModelPlan::new(g, &opts).expect("plan"));
        }
    });
    let packed = best_ms(rounds, || {
        std::hint::black_box(
            vnpu::runtime::PackedModel::load_files(std::slice::from_ref(&path)).expect("pack"),
        );
    });
    println!(
        "{}: {} bytes; best of {rounds}, warm page cache\n\
         checksum of the whole file     {checksum:8.3} ms\n\
         format::load_file              {load:8.3} ms  (map, header, manifest checksum, decode, validate)\n\
         format::load_file_verified     {verified:8.3} ms  (+ weights checksum, populated map)\n\
         exec::ModelPlan::new           {plan:8.3} ms  (plan building, weight packing)\n\
         PackedModel::load_files        {packed:8.3} ms  (load + plans: what hbDNNInitializeFromFiles does)",
        path.display(),
        bytes.len()
    );
}
