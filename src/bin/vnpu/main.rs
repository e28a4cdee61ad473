//! The `vnpu` command line: compile, info, model_info, infer, perf, trace, demo.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod args;
mod compile_cmd;
mod image_input;
mod perf;
mod run_cmd;
mod serve_cmd;
mod timeline;

const USAGE: &str = "usage: vnpu <command> [options]   (vnpu <command> --help for details)

commands:
  compile MODEL.onnx [MORE.onnx ...] -o OUT.bin   compile (several models = one packed file)
  info FILE [--json] [--model-name M]             describe a compiled (or ONNX) model
  model_info --model_file FILE [--model_name M]   same, hrt_model_exec style
  infer --model_file F [--input_file a.bin,...]   run one model once (or --frame_count times)
  perf --model_file a.bin[,b.bin] ...             measure latency and FPS under load
  trace TRACE.json -o timeline.svg                draw a scheduler trace
  demo [--seconds S] [--fps F] [--out DIR]        priority scenario on the bundled models
  serve [--socket PATH] [--cores N] ...           run the service daemon (one virtual NPU per machine)
  status [--socket PATH] [--json]                 clients, queue and cores of a running daemon

environment: VNPU_CORES, VNPU_CPU_THREADS, BPLAT_CORELIMIT, VNPU_TRACE, VNPU_CACHE_DIR,
  HB_DNN_BPU_SCHEDULE_THRESHOLD, HB_DNN_SCHEDULE_INSERT_FC_MAX_TIME,
  HB_DNN_SCHEDULE_WAIT_DISPATCH_TIME, HB_MAX_TASK_NUM (see README)
";

const HELP_COMPILE: &str = "usage: vnpu compile MODEL.onnx [MORE.onnx ...] -o OUT.bin [options]

Compiles ONNX models into one (packed) model file.

options:
  -o, --output OUT.bin          output file
  --config cfg.yaml             toolchain-style YAML (model_parameters, input_parameters,
                                output_parameters, calibration_parameters,
                                compiler_parameters); flags given too override it
  --max-time-per-fc US          split core work into FCs of at most US µs (0 = no limit,
                                else 1000..=4294967295)
  --precision f32|bf16          measure node times (and so cut FCs) in this precision;
                                the model then loads in it unless VNPU_PRECISION says
                                otherwise (bf16: needs AVX512_BF16 here and where it runs,
                                else it loads in f32)
  --input-shape NAME=1x3x224x224  fix the shape of an input with dynamic dims (repeatable)
  --input-name NAME             the input the next options refer to
  --input-type-rt T             nv12|yuv444|rgb|bgr|gray|featuremap
  --input-layout-rt L           NCHW|NHWC
  --input-type-train rgb|bgr    channel order the model was trained on
  --mean 123.7,116.3,103.5      per-channel mean (alias --mean-value)
  --scale 0.017,...             per-channel scale (alias --scale-value)
  --input-data-type [NAME=]s8   the input takes signed bytes (byte = pixel - 128; not nv12)
  --output-type NAME=s32        output NAME as s8|s16|s32 with per-channel scales
                                (quantiType SCALE) instead of f32; all=TYPE for every
                                float output (repeatable, later ones win)
  --calibration-data DIR        samples (NNN.npy, INPUT/NNN.npy or images) giving quantised
                                outputs their scales when the graph has none
  --name NAME                   model name in the file (one model only)
  --run-on-cpu a,b / --run-on-bpu c   force nodes onto the CPU pool / the cores
  --optimize-level O0..O3, --O0 optimisation level (O0 = no fusion passes)
  --quantize int8               post-training quantisation (YAML calibration_parameters)
  --calibration-data DIR        samples: NNN.npy (one input), INPUT/NNN.npy (several), or
                                .png/.jpg for an image input (--input-type-rt ...)
  --calibration-type T          max (default) | percentile (--percentile 99.99) | kl
  --per-channel true|false      weight scales per output channel (default true)
  --quiet                       no progress lines
";

const HELP_INFO: &str = "usage: vnpu info FILE [--json] [--model-name M]
       vnpu model_info --model_file FILE [--model_name M]

Describes a compiled model file (or an ONNX file, compiled on the fly): inputs, outputs,
segments, FCs and their estimated times. A compiled file is checked whole, the weights'
checksum included (loading a model checks its header and manifest and bounds-checks the
weights, but does not hash them), so `info` is also the file's integrity check.

options:
  --json              machine-readable output
  --model-name M      only the model named M of a packed file
";

const HELP_INFER: &str = "usage: vnpu infer --model_file F[,G] [--model_name M] [--input_file a.bin,b.npy,c.jpg] [options]

Runs one model and prints its latency and the first output values.

options:
  --model_file F[,G]      model file(s); several files or a packed file hold several models
  --model_name M          which model to run (required when the files hold more than one)
  --input_file LIST       one file per input: raw .bin, .npy, or an image (.jpg/.png/.ppm);
                          without it a deterministic pattern input is used (and said so)
  --core_id MASK          0 = any core, 1 = core 0, 2 = core 1, ... (0..=4294967295)
  --priority P            task priority 0..=255 (255 = preempting)
  --custom_id ID          customId (i64)
  --frame_count N         run N times (latency p50 is printed)
  --enable_dump           write the outputs to --dump_path (default .)
  --dump_format bin|txt
";

const HELP_PERF: &str = "usage: vnpu perf --model_file a.bin[,b.bin] [--model_name m1,m2] [options]

Runs every named model under load at the same time and prints latency percentiles and FPS.
Per-model lists take one value (used for all) or one per model.

latency: closed loop (--perf_fps 0): from submit to done. Open loop (--perf_fps > 0): from
  the time the request was scheduled to be sent, so a late submitter counts against it.
  It is split into pending (submit to first FC started) and running (first FC to done).

options:
  --model_file F[,G]      model file(s)
  --model_name m1,m2      which models (required when the files hold more than one)
  --priority 0,255        task priority per model, 0..=255
  --perf_fps 0,30         requests per second per model (0 = closed loop, as fast as possible)
  --thread_num 1,1        submitting threads per model
  --core_id 0,0           core mask per model (0 = any)
  --custom_id 0,0         customId per model
  --frame_count N         stop after N frames per thread
  --perf_time S           run for S seconds (default 5 unless --frame_count is given)
  --profile_path DIR      write DIR/profiler.log with per-node times
";

const HELP_TRACE: &str = "usage: vnpu trace TRACE.json -o timeline.svg [--from-ms A --to-ms B]

Draws a scheduler trace (VNPU_TRACE=file.json, or `vnpu demo`) as an SVG timeline, one
row per core. Without --from-ms/--to-ms it picks a window centred on a moment where a
high-priority FC starts while lower-priority FCs are queued (annotated), else the start.

options:
  -o, --output FILE       the SVG to write
  --from-ms A --to-ms B   the window, in ms from the first event
";

const HELP_DEMO: &str = "usage: vnpu demo [--seconds S] [--fps F] [--out DIR]

Runs the bundled classifier at priority 255 (F requests/s, open loop) against the bundled
detector at priority 0 (flat out; FCs of at most 1000 µs, 8 frames per task), once with
BPLAT_CORELIMIT=0 and once with 1, and prints the classifier's latency for each. Writes
the trace of the BPLAT_CORELIMIT=1 run and its timeline (SVG, centred on a priority-255 FC
overtaking queued background tasks) into DIR.

options:
  --seconds S     seconds per run (default 5)
  --fps F         classifier requests per second (default 33)
  --out DIR       output directory (default vnpu-demo)
";

const HELP_SERVE: &str =
    "usage: vnpu serve [--socket PATH] [--cores N] [--trace PATH] [--group NAME]

Runs the virtual NPU as a daemon in the foreground (service mode): it owns the cores, the
CPU pool, the library queue and the loaded models, and serves every process that sets
VNPU_SERVICE=PATH. Scheduling settings (BPLAT_CORELIMIT, HB_DNN_SCHEDULE_*, VNPU_CORES, ...)
are read from the daemon's environment. SIGTERM or SIGINT stops it; pending tasks fail.

options:
  --socket PATH   socket to listen on (default $XDG_RUNTIME_DIR/vnpu.sock, else
                  /tmp/vnpu-<uid>.sock); mode 0600
  --cores N       virtual cores (1..=64; default VNPU_CORES or 2)
  --trace PATH    write the scheduling trace, with each task's client pid, on exit
  --group NAME    let members of this group connect too (socket mode 0660)
";

const HELP_STATUS: &str = "usage: vnpu status [--socket PATH] [--json]

Shows a running daemon's clients (pid, models, live tasks, shared memory), its queue by
priority and each core's FC count and utilisation over the last seconds of its trace.

options:
  --socket PATH   the daemon's socket (default VNPU_SERVICE, else the serve default)
  --json          print the status as JSON
";

/// The help text of a subcommand.
fn help_for(cmd: &str) -> Option<&'static str> {
    Some(match cmd {
        "compile" => HELP_COMPILE,
        "info" | "model_info" => HELP_INFO,
        "infer" => HELP_INFER,
        "perf" => HELP_PERF,
        "trace" => HELP_TRACE,
        "demo" => HELP_DEMO,
        "serve" => HELP_SERVE,
        "status" => HELP_STATUS,
        _ => return None,
    })
}

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = argv.first() else {
        eprint!("{USAGE}");
        std::process::exit(2);
    };
    let rest = &argv[1..];
    if let Some(h) = help_for(cmd) {
        if rest.iter().any(|a| a == "-h" || a == "--help") {
            print!("{h}");
            return;
        }
    }
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
        "serve" => serve_cmd::run_serve(rest),
        "status" => serve_cmd::run_status(rest),
        "-h" | "--help" | "help" => {
            match rest.first() {
                Some(c) => match help_for(c) {
                    Some(h) => print!("{h}"),
                    None => return Err(format!("unknown command '{c}'\n{USAGE}")),
                },
                None => print!("{USAGE}"),
            }
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
