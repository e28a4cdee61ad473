//! Times the depthwise convs of MobileNetV2 / DBNet-MV3 and the nearest-upsample Resize
//! maps of the FPN necks with each kernel table (best of N in thread CPU time, so that
//! other processes on a busy machine count less; compare within one run).
//!
//! `cargo run --release --example dw_bench [reps] [name]` (`name`: only the depthwise
//! layers whose label holds it, e.g. `3x3/2 192@28`, and no resize maps)

use vnpu::compile::cost::thread_cpu_us;
use vnpu::ir::UnaryOp;
use vnpu::kernels::conv::{conv2d, ConvShape, ConvWeights};
use vnpu::kernels::gemm::Epilogue;
use vnpu::kernels::isa;
use vnpu::kernels::nd::IndexMapCopy;
use vnpu::kernels::unary::PostOpRt;

fn rand(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        })
        .collect()
}

/// Best of `reps` runs of `f`, in thread CPU microseconds.
fn best(reps: usize, mut f: impl FnMut()) -> f64 {
    (0..reps)
        .map(|_| {
            let t = thread_cpu_us();
            f();
            thread_cpu_us() - t
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let reps: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20);
    let only = std::env::args().nth(2);
    // (channels, input size, kernel, stride)
    let layers = [
        (32, 112, 3, 1),
        (144, 56, 3, 1),
        (192, 28, 3, 1),
        (384, 14, 3, 1),
        (960, 7, 3, 1),
        (96, 112, 3, 2),
        (144, 56, 3, 2),
        (192, 28, 3, 2),
        (576, 14, 3, 1),
        (576, 14, 3, 2),
        (32, 320, 3, 2),
        (40, 160, 3, 1),
        (40, 160, 5, 2),
        (64, 80, 5, 1),
        (336, 40, 5, 2),
        (480, 20, 5, 1),
    ];
    let tables = isa::tables();
    print!("{:<22} {:>9}", "depthwise", "Mout");
    for t in &tables {
        print!(" {:>14}", format!("us {}", t.name));
    }
    println!(" {:>12} {:>12}", "us +bias+relu", "us nhwc");
    let mut total = vec![0.0; tables.len() + 2];
    for (c, hw, k, st) in layers {
        if only
            .as_ref()
            .is_some_and(|o| !format!("dw{k}x{k}/{st} {c}@{hw}").contains(o.as_str()))
        {
            continue;
        }
        let s = ConvShape::square(c, hw, c, k, st, c);
        let o = s.oh;
        let w = ConvWeights::pack(&s, &rand(c * k * k, 3));
        let x = rand(c * hw * hw, 4);
        let mut y = vec![0.0; c * o * o];
        let mut scratch = vec![0.0; s.scratch_len()];
        print!(
            "{:<22} {:>9.3}",
            format!("dw{k}x{k}/{st} {c}@{hw}"),
            (c * o * o) as f64 / 1e6
        );
        for (i, t) in tables.iter().enumerate() {
            let us = best(reps, || {
                conv2d(
                    t.isa,
                    &s,
                    &w,
                    &x,
                    &mut y,
                    0,
                    c,
                    (0, o * o),
                    None,
                    &Epilogue::NONE,
                    &mut scratch,
                )
            });
            total[i] += us;
            print!(" {us:>14.1}");
        }
        let bias = rand(c, 5);
        let post = [PostOpRt::Unary(UnaryOp::Relu)];
        let epi = Epilogue {
            bias: Some(&bias),
            post: &post,
            ..Epilogue::NONE
        };
        let isa = isa::best_isa();
        let us = best(reps, || {
            conv2d(
                isa,
                &s,
                &w,
                &x,
                &mut y,
                0,
                c,
                (0, o * o),
                None,
                &epi,
                &mut scratch,
            )
        });
        total[tables.len()] += us;
        // The channels-last kernel on the same conv (input and output [H][W][C]).
        let taps = vnpu::kernels::body::dw_nhwc::pack_taps(&rand(c * k * k, 3), c, k * k);
        let epi_cols = Epilogue {
            post: &post,
            channel_is_row: false,
            ..Epilogue::NONE
        };
        let us_cl = best(reps, || {
            vnpu::kernels::conv::depthwise_nhwc(
                isa,
                &s,
                &taps,
                &bias,
                &x,
                &mut y,
                (0, o),
                &epi_cols,
            )
        });
        total[tables.len() + 1] += us_cl;
        println!(" {us:>12.1} {us_cl:>12.1}");
    }
    print!("{:<22} {:>9}", "total", "");
    for t in &total {
        print!(" {t:>14.1}");
    }
    println!();
    if only.is_some() {
        return;
    }
    // Nearest x2 / x4 upsampling of [C, H, W] as the Resize plan builds it.
    println!("{:<22} {:>9} {:>14}", "resize nearest", "Mout", "us");
    for (c, hw, f) in [(256, 20, 2), (256, 80, 2), (64, 40, 4), (64, 20, 8)] {
        let o = hw * f;
        let m = IndexMapCopy {
            elem: 4,
            dims: vec![c, o, o],
            maps: vec![
                (0..c).map(|i| (i * hw * hw) as isize).collect(),
                (0..o).map(|i| (i / f * hw) as isize).collect(),
                (0..o).map(|i| (i / f) as isize).collect(),
            ],
            fill: vec![0; 4],
        };
        let src = vec![1u8; c * hw * hw * 4];
        let mut dst = vec![0u8; c * o * o * 4];
        let us = best(reps, || m.run(&src, &mut dst, 0, c));
        println!(
            "{:<22} {:>9.3} {us:>14.1}",
            format!("x{f} {c}@{hw}"),
            (c * o * o) as f64 / 1e6
        );
    }
}
