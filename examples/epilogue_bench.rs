//! Times the table's conv epilogue (bias, then SiLU / Sigmoid / HardSwish + residual) on
//! a 64 x 3136 block, as the GEMM runs it per 64 x 512 block when it is not fused into
//! the tiles (best of 300 in thread CPU time; compare builds within one moment).
//!
//! `cargo run --release --example epilogue_bench`

use vnpu::compile::cost::thread_cpu_us;
use vnpu::ir::UnaryOp;
use vnpu::kernels::body::{epilogue::Epilogue, unary::PostOpRt};
fn main() {
    let t = vnpu::kernels::table();
    let (m, n) = (64usize, 3136usize);
    let bias: Vec<f32> = (0..m).map(|i| i as f32 * 0.01).collect();
    let mut c: Vec<f32> = (0..m * n).map(|i| ((i % 97) as f32 - 48.0) * 0.1).collect();
    for (name, post) in [
        ("silu", vec![PostOpRt::Unary(UnaryOp::Silu)]),
        (
            "gelu",
            vec![PostOpRt::Unary(UnaryOp::Gelu { tanh_approx: false })],
        ),
        ("sigmoid", vec![PostOpRt::Unary(UnaryOp::Sigmoid)]),
        (
            "hswish+add",
            vec![
                PostOpRt::Unary(UnaryOp::HardSwish),
                PostOpRt::AddInput { slot: 0 },
            ],
        ),
    ] {
        let res = c.clone();
        let residuals: [&[f32]; 1] = [&res];
        let e = Epilogue {
            bias: Some(&bias),
            post: &post,
            residuals: &residuals,
            ..Epilogue::NONE
        };
        let mut best = f64::MAX;
        for _ in 0..300 {
            let t0 = thread_cpu_us();
            // Blocks of 64 rows x 512 columns, as the GEMM calls it per MC x NC block.
            let mut j = 0;
            while j < n {
                (t.epilogue)(&e, &mut c, n, 0, m, j, 512.min(n - j));
                j += 512;
            }
            best = best.min(thread_cpu_us() - t0);
            c.iter_mut().for_each(|v| *v = v.clamp(-5.0, 5.0));
        }
        println!("{name}: {best:.1} us");
    }
}
