//! Load time of a compiled model file, split by stage: map + header + manifest decode +
//! validation (`format::load_file`), then the execution plan (`Model::new`).
//!
//! `cargo run --profile test --example load_time -- FILE.bin [RUNS]`: prints the best of
//! RUNS (default 20) per stage, after one warm-up load (so the page cache is warm).
//! Indicative only: a shared machine's load shows in the numbers.

use std::path::PathBuf;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let path = PathBuf::from(args.next().expect("usage: load_time FILE.bin [RUNS]"));
    let runs: usize = args.next().map_or(20, |s| s.parse().expect("RUNS"));
    let mut best = [f64::INFINITY; 3];
    for i in 0..=runs {
        let t0 = Instant::now();
        let compiled = vnpu::format::load_file(&path).expect("load");
        let t1 = Instant::now();
        let pack = vnpu::runtime::PackedModel::from_compiled(compiled, vec![]).expect("plan");
        let t2 = Instant::now();
        drop(pack);
        if i == 0 {
            continue;
        }
        let ms = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e3;
        for (b, v) in best.iter_mut().zip([ms(t0, t1), ms(t1, t2), ms(t0, t2)]) {
            *b = b.min(v);
        }
    }
    println!(
        "{}: best of {runs}: file (map, checks, manifest, validation) {:.2} ms, plan {:.2} ms, total {:.2} ms",
        path.display(),
        best[0],
        best[1],
        best[2]
    );
}
