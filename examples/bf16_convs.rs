//! bf16 vs f32 conv kernels (im2col, Winograd, direct in both tilings and, with AMX, the wide run) on ResNet-18's
//! and MobileNetV2's conv shapes, one thread: the best of many
//! runs of each (`cargo run --release --example bf16_convs`). Needs AVX512_BF16.

use std::time::Instant;
use vnpu::kernels::bf16::{self, Bf16ConvWeights};
use vnpu::kernels::conv::direct::{self, Tiling};
use vnpu::kernels::conv::{self, ConvShape, ConvWeights, WinogradPlan};
use vnpu::kernels::gemm::Epilogue;
use vnpu::kernels::simd;

fn best(mut f: impl FnMut()) -> f64 {
    f();
    (0..15)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e6
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let Some(tab) = bf16::native() else {
        eprintln!("this CPU lacks AVX512_BF16");
        return;
    };
    let isa = simd::best_isa();
    let shapes = [
        (
            "stem 7x7/2 3->64 @224",
            ConvShape::square(3, 224, 64, 7, 2, 1),
        ),
        ("l1 3x3 64 @56", ConvShape::square(64, 56, 64, 3, 1, 1)),
        (
            "l2 3x3/2 64->128 @56",
            ConvShape::square(64, 56, 128, 3, 2, 1),
        ),
        ("l2 3x3 128 @28", ConvShape::square(128, 28, 128, 3, 1, 1)),
        ("l2 1x1/2 64->128", ConvShape::square(64, 56, 128, 1, 2, 1)),
        ("l3 3x3 256 @14", ConvShape::square(256, 14, 256, 3, 1, 1)),
        (
            "l4 3x3/2 256->512 @14",
            ConvShape::square(256, 14, 512, 3, 2, 1),
        ),
        ("l4 3x3 512 @7", ConvShape::square(512, 7, 512, 3, 1, 1)),
        (
            "mv2 1x1 16->96 @112",
            ConvShape::square(16, 112, 96, 1, 1, 1),
        ),
        (
            "mv2 1x1 144->24 @56",
            ConvShape::square(144, 56, 24, 1, 1, 1),
        ),
        (
            "mv2 1x1 24->144 @56",
            ConvShape::square(24, 56, 144, 1, 1, 1),
        ),
        (
            "mv2 1x1 192->32 @28",
            ConvShape::square(192, 28, 32, 1, 1, 1),
        ),
        (
            "mv2 1x1 384->64 @14",
            ConvShape::square(384, 14, 64, 1, 1, 1),
        ),
        (
            "mv2 1x1 960->160 @7",
            ConvShape::square(960, 7, 160, 1, 1, 1),
        ),
        (
            "mv2 1x1 320->1280 @7",
            ConvShape::square(320, 7, 1280, 1, 1, 1),
        ),
        (
            "yolox 3x3/2 192->384 @26",
            ConvShape::square(192, 26, 384, 3, 2, 1),
        ),
        (
            "yolox 3x3 192 @13",
            ConvShape::square(192, 13, 192, 3, 1, 1),
        ),
        (
            "mv2 3x3/2 3->32 @224",
            ConvShape::square(3, 224, 32, 3, 2, 1),
        ),
    ];
    println!(
        "{:28} {:>9} {:>9} {:>9} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8}",
        "conv",
        "f32 us",
        "wino us",
        "bf16 us",
        "ratio",
        "wb16 F4",
        "wb16 F2",
        "direct",
        "d chans",
        "wide",
        "f32 dir",
        "f32 dch",
        "d diff"
    );
    for (name, mut s) in shapes {
        if s.kh == 1 {
            (s.ph, s.pw) = (0, 0);
            s.oh = (s.h - 1) / s.sh + 1;
            s.ow = s.oh;
        }
        let w: Vec<f32> = (0..s.c_out * s.k())
            .map(|i| ((i * 7919) % 200) as f32 / 1000.0 - 0.1)
            .collect();
        let x: Vec<f32> = (0..s.c_in * s.h * s.w)
            .map(|i| ((i * 104729) % 300) as f32 / 300.0)
            .collect();
        let mut y = vec![0.0; s.c_out * s.oh * s.ow];
        let ohw = s.oh * s.ow;
        let fw = ConvWeights::pack(&s, &w);
        let mut scratch = vec![0.0; s.scratch_len()];
        let f32_us = best(|| {
            conv::conv2d(
                isa,
                &s,
                &fw,
                &x,
                &mut y,
                0,
                s.c_out,
                (0, ohw),
                None,
                &Epilogue::NONE,
                &mut scratch,
            )
        });
        // f32 Winograd with the tile the planner picks, then bf16 point GEMMs with
        // F(4x4) and F(2x2).
        let wino = |p: WinogradPlan, y: &mut [f32]| {
            let mut sc = vec![0.0; p.scratch_len()];
            best(|| {
                p.run(
                    isa,
                    &x,
                    y,
                    (0, s.c_out),
                    (0, p.tile_rows()),
                    None,
                    &Epilogue::NONE,
                    &mut sc,
                )
            })
        };
        let (wino_us, wb4, wb2) = if WinogradPlan::applies(&s) {
            (
                wino(WinogradPlan::new(&s, &w), &mut y),
                wino(WinogradPlan::with_tile(&s, &w, 4).into_bf16(tab), &mut y),
                wino(WinogradPlan::with_tile(&s, &w, 2).into_bf16(tab), &mut y),
            )
        } else {
            (f64::NAN, f64::NAN, f64::NAN)
        };
        let wide_len = direct::scratch_len(&s, 2, Tiling::Wide);
        let mut bs = vec![0.0; bf16::conv_scratch_len(tab, &s).max(wide_len)];
        let mut bf16_run = |direct: Option<Tiling>, y: &mut [f32]| {
            let bw = Bf16ConvWeights::with_layout(&s, &w, direct);
            best(|| {
                bf16::conv2d_bf16(
                    tab,
                    isa,
                    &s,
                    &bw,
                    &x,
                    y,
                    (0, s.c_out),
                    (0, ohw),
                    &Epilogue::NONE,
                    &mut bs,
                )
            })
        };
        let bf_us = bf16_run(None, &mut y);
        let mut yd = vec![0.0; y.len()];
        let direct_us = bf16_run(Some(Tiling::Rows), &mut yd);
        let chans_us = bf16_run(Some(Tiling::Chans), &mut yd);
        let wide_us = if tab.wide.is_some() && direct::wide_applies(&s) {
            let mut yw = vec![0.0; y.len()];
            bf16_run(Some(Tiling::Wide), &mut yw)
        } else {
            f64::NAN
        };
        // f32 direct in both tilings.
        let mut ds = vec![0.0; direct::scratch_len(&s, 1, Tiling::Rows)];
        let mut f32_direct = |t: Tiling, y: &mut [f32]| {
            let dw = direct::pack_weights(&s, &w, 1, |lo, _| lo, t);
            let none = &Epilogue::NONE;
            let all = ((0, s.c_out), (0, ohw));
            best(|| direct::conv2d_f32(isa, t, &s, &dw, &x, y, all.0, all.1, none, &mut ds))
        };
        let mut yf = vec![0.0; y.len()];
        let (fdr_us, fdc_us) = if direct::fits(&s) {
            (
                f32_direct(Tiling::Rows, &mut yf),
                f32_direct(Tiling::Chans, &mut yf),
            )
        } else {
            (f64::NAN, f64::NAN)
        };
        let scale = y.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-30);
        let diff = y
            .iter()
            .zip(&yd)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()))
            / scale;
        let f = if wino_us.is_nan() {
            f32_us
        } else {
            f32_us.min(wino_us)
        };
        println!(
            "{name:28} {f32_us:9.0} {wino_us:9.0} {bf_us:9.0} {:6.2} {wb4:9.0} {wb2:9.0} {direct_us:9.0} {chans_us:9.0} {wide_us:9.0} {fdr_us:9.0} {fdc_us:9.0} {diff:8.1e}",
            bf_us / f
        );
    }
}
