//! The `vnpu` command line: compile, info, model_info, infer, perf, trace, demo.

mod args;
mod compile_cmd;
mod image_input;
mod perf;
mod run_cmd;
mod timeline;

const USAGE: &str = "usage: vnpu <command> [options]

commands:
  compile MODEL.onnx [MORE.onnx ...] -o OUT.bin   compile (several models = one packed file)
      [--config cfg.yaml] [--max-time-per-fc US] [--input-shape NAME=1x3x224x224]
      [--input-name NAME] [--input-type-rt nv12|yuv444|rgb|bgr|gray|featuremap]
      [--input-layout-rt NCHW|NHWC] [--mean 123.7,116.3,103.5] [--scale 0.017,...]
      [--name NAME] [--run-on-cpu a,b] [--run-on-bpu c] [--O0]
  info FILE [--json] [--verify] [--model-name M]  describe a compiled (or ONNX) model
  model_info --model_file FILE [--model_name M]  same, hrt_model_exec style
  infer --model_file F[,G] [--model_name M] [--input_file a.bin,b.npy,c.jpg] [--core_id MASK]
      [--priority P] [--custom_id ID] [--frame_count N] [--enable_dump] [--dump_format bin|txt]
  perf --model_file a.bin[,b.bin] [--model_name m1,m2] [--priority 0,255] [--perf_fps 0,30]
      [--thread_num 1,1] [--core_id 0,0] [--frame_count N] [--perf_time S] [--profile_path DIR]
  trace TRACE.json -o timeline.svg [--from-ms A --to-ms B]   draw a scheduler trace
  demo [--seconds S] [--fps F] [--out DIR]    priority scenario on the bundled models

environment: VNPU_CORES, VNPU_CPU_THREADS, BPLAT_CORELIMIT, VNPU_TRACE, VNPU_CACHE_DIR,
  HB_DNN_BPU_SCHEDULE_THRESHOLD, HB_DNN_SCHEDULE_INSERT_FC_MAX_TIME,
  HB_DNN_SCHEDULE_WAIT_DISPATCH_TIME, HB_MAX_TASK_NUM (see README)
";

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = argv.first() else {
        eprint!("{USAGE}");
        std::process::exit(2);
    };
    let rest = &argv[1..];
    // One clear line instead of a backtrace if anything panics.
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown".into());
        eprintln!("vnpu: internal error: {msg}");
    }));
    let result = std::panic::catch_unwind(|| match cmd.as_str() {
        "compile" => compile_cmd::run_compile(rest),
        "info" | "model_info" => compile_cmd::run_info(rest),
        "infer" => run_cmd::run_infer(rest),
        "perf" => run_cmd::run_perf(rest),
        "demo" => run_cmd::run_demo(rest),
        "trace" => timeline::run_trace(rest),
        "-h" | "--help" | "help" => {
            print!("{USAGE}");
            Ok(())
        }
        other => Err(format!("unknown command '{other}'\n{USAGE}")),
    });
    match result {
        Ok(Ok(())) => {}
        Ok(Err(msg)) => {
            eprintln!("vnpu: error: {msg}");
            std::process::exit(1);
        }
        Err(_) => {
            std::process::exit(101);
        }
    }
}
