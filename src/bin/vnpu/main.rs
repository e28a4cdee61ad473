//! The `vnpu` command line: compile, info, model_info, infer, perf, trace, demo.

mod args;
mod compile_cmd;

const USAGE: &str = "usage: vnpu <command> [options]

commands:
  compile MODEL.onnx [MORE.onnx ...] -o OUT.bin   compile (several models = one packed file)
      [--config cfg.yaml] [--max-time-per-fc US] [--input-shape NAME=1x3x224x224]
      [--input-name NAME] [--input-type-rt nv12|yuv444|rgb|bgr|gray|featuremap]
      [--input-layout-rt NCHW|NHWC] [--mean 123.7,116.3,103.5] [--scale 0.017,...]
      [--name NAME] [--run-on-cpu a,b] [--run-on-bpu c] [--O0]
  info FILE [--json] [--model-name M]         describe a compiled (or ONNX) model
  model_info --model_file FILE [--model_name M]  same, hrt_model_exec style
";

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = argv.first() else {
        eprint!("{USAGE}");
        std::process::exit(2);
    };
    let rest = &argv[1..];
    let result = std::panic::catch_unwind(|| match cmd.as_str() {
        "compile" => compile_cmd::run_compile(rest),
        "info" | "model_info" => compile_cmd::run_info(rest),
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
            eprintln!("vnpu: error: internal error (see above)");
            std::process::exit(101);
        }
    }
}
