#!/usr/bin/env python3
"""The peer runtimes of the vnpu benchmarks: onnxruntime, OpenVINO and MNN behind one
interface, and a line-oriented server that `cargo bench --bench vnpu -- latency` drives
so that the rounds of every runtime interleave with vnpu's in one run (DESIGN §6).

Settings (issue 12 item 1), 1 inference thread each:

* ``onnxruntime``: ``intra_op_num_threads=1``, sequential, graph optimisation ``all``.
* ``openvino``: CPU plugin, ``PERFORMANCE_HINT=LATENCY``, ``INFERENCE_NUM_THREADS=1``,
  ``INFERENCE_PRECISION_HINT=f32`` (Zen 4 would otherwise run bf16).
* ``mnn``: the ONNX file converted once by the wheel's converter (``mnnconvert``'s
  ``_tools.mnnconvert``, cached by file hash under ``--cache-dir``), run through ``MNN.nn`` modules with ``thread_num=1`` and
  the normal precision mode (fp32 on x86; ``low`` would allow bf16/fp16).

Server (``python3 bench/peers.py --serve``): one JSON request per stdin line, one JSON
reply per stdout line. The first reply, unasked, lists the runtimes that imported::

    {"ok": true, "runtimes": {"onnxruntime": "1.31.1", "openvino": "2026.4.1", "mnn": "3.6.1"},
     "missing": {}}
    > {"op": "time", "runtime": "mnn", "model": "/abs/resnet18.onnx", "runs": 50, "warmup": 3}
    {"ok": true, "median_ms": 38.1, "min_ms": 37.5, "p90_ms": 39.0, "runs": 50, "times_ms": [...]}
    > {"op": "time", "runtime": "mnn", "model": "/abs/odd.onnx", "runs": 50}
    {"ok": false, "error": "convert: ..."}

A model is loaded on its first ``time`` request and kept; a load error is remembered and
returned again without retrying. Library chatter on stdout is redirected to stderr so
stdout carries only replies. Inputs are seeded N(0, 1) (f32) or zeros, dim_params -> 1.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time

import numpy as np

RUNTIMES = ("onnxruntime", "openvino", "mnn")


def percentile(values_ms: list[float], q: float) -> float:
    """``q``-th percentile (nearest-rank on the sorted samples, q in [0, 100])."""
    if not values_ms:
        return float("nan")
    s = sorted(values_ms)
    k = max(0, min(len(s) - 1, int(np.ceil(q / 100.0 * len(s))) - 1))
    return s[k]


def versions() -> tuple[dict[str, str], dict[str, str]]:
    """(runtime -> version for the importable runtimes, runtime -> import error)."""
    ok, missing = {}, {}
    for rt in RUNTIMES:
        try:
            if rt == "onnxruntime":
                import onnxruntime as m
                ok[rt] = m.__version__
            elif rt == "openvino":
                import openvino as m
                ok[rt] = m.get_version().split("-")[0]
            else:
                import MNN as m
                ok[rt] = m.version()
        except Exception as e:  # noqa: BLE001 - any import failure just leaves the peer out
            missing[rt] = f"{type(e).__name__}: {e}"
    return ok, missing


def _onnx_inputs(path: str) -> list[tuple[str, list[int], np.dtype]]:
    """(name, shape with dim_params -> 1, numpy dtype) of the model's runtime inputs."""
    import onnx
    from onnx import helper

    m = onnx.load(path, load_external_data=False)
    inits = {t.name for t in m.graph.initializer}
    out = []
    for vi in m.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1 for d in tt.shape.dim]
        out.append((vi.name, shape, np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))))
    return out


def _onnx_outputs(path: str) -> list[str]:
    import onnx

    return [o.name for o in onnx.load(path, load_external_data=False).graph.output]


def make_feeds(path: str, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs for every runtime input of the ONNX file at ``path``."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, shape, dtype in _onnx_inputs(path):
        if np.issubdtype(dtype, np.floating):
            feeds[name] = rng.standard_normal(shape).astype(dtype)
        else:
            feeds[name] = np.zeros(shape, dtype=dtype)
    return feeds


class Runner:
    """One loaded model on one runtime: ``run()`` does one inference on fixed inputs."""

    def __init__(self, run, close=None):
        self.run = run
        self._close = close


def ort_runner(path: str, feeds: dict, threads: int = 1, spin: bool = True, graph_opt: str = "all") -> Runner:
    """onnxruntime CPU session; ``threads=0`` is onnxruntime's default pool size."""
    import onnxruntime as ort

    ort.set_default_logger_severity(3)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = {
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    }[graph_opt]
    if not spin:
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(path, sess_options=opts, providers=["CPUExecutionProvider"])
    return Runner(lambda: sess.run(None, feeds))


def openvino_runner(path: str, feeds: dict, threads: int = 1, default: bool = False) -> Runner:
    """OpenVINO CPU: LATENCY hint, ``threads`` inference threads, f32; ``default=True``
    compiles with no configuration at all (the plugin's own defaults)."""
    import openvino as ov

    core = ov.Core()
    cfg = {} if default else {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": threads,
                              "INFERENCE_PRECISION_HINT": "f32"}
    compiled = core.compile_model(path, "CPU", cfg)
    req = compiled.create_infer_request()
    return Runner(lambda: req.infer(feeds))


def _mnn_convert(path: str, cache_dir: str) -> str:
    """The ``.mnn`` file of ``path`` (converted by ``mnnconvert`` once, cached by content)."""
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    os.makedirs(cache_dir, exist_ok=True)
    out = os.path.join(cache_dir, f"{os.path.splitext(os.path.basename(path))[0]}-{digest}.mnn")
    if os.path.exists(out):
        return out
    tmp = out + f".{os.getpid()}.tmp"
    # The converter itself (the wheel's `mnnconvert` script minus its wrapper, which
    # sends usage telemetry over the network and pip-installs a logging SDK on the fly).
    r = subprocess.run([sys.executable, "-c", "import sys, MNN, _tools; _tools.mnnconvert(sys.argv)",
                        "-f", "ONNX", "--modelFile", path, "--MNNModel", tmp, "--bizCode", "vnpu"],
                       capture_output=True, text=True)
    if r.returncode != 0 or not os.path.exists(tmp):
        tail = (r.stdout + r.stderr).strip().splitlines()[-3:]
        raise RuntimeError("mnnconvert failed: " + " | ".join(tail))
    os.replace(tmp, out)
    return out


def mnn_runner(path: str, feeds: dict, cache_dir: str, threads: int = 1) -> Runner:
    """MNN module of the converted model, ``threads`` threads, normal (fp32) precision."""
    import MNN.expr as F
    import MNN.nn as nn

    mnn_path = _mnn_convert(path, cache_dir)
    # The thread count only holds through a runtime manager (the module's own
    # `thread_num` argument was not honoured: 10x slower than onnxruntime on 1 CPU).
    rt = nn.create_runtime_manager(({"backend": "CPU", "numThread": threads, "precision": "normal"},))
    module = nn.load_module_from_file(mnn_path, list(feeds), _onnx_outputs(path), runtime_manager=rt,
                                      shape_mutable=False)
    inputs = [F.const(a, list(a.shape), F.NCHW) for a in feeds.values()]

    def run():
        outs = module.forward(inputs)
        for o in outs if isinstance(outs, (list, tuple)) else [outs]:
            o.read()

    return Runner(run)


def make_runner(runtime: str, path: str, feeds: dict, cache_dir: str, threads: int = 1,
                spin: bool = True, default: bool = False) -> Runner:
    """A runner of ``path`` on ``runtime`` (one of :data:`RUNTIMES`)."""
    if runtime == "onnxruntime":
        return ort_runner(path, feeds, threads, spin)
    if runtime == "openvino":
        return openvino_runner(path, feeds, threads, default)
    if runtime == "mnn":
        return mnn_runner(path, feeds, cache_dir, threads)
    raise ValueError(f"unknown runtime {runtime!r}")


def time_runner(r: Runner, runs: int, warmup: int) -> dict:
    """Median/min/p90 (and every time) of ``runs`` back-to-back inferences after
    ``warmup`` ones."""
    for _ in range(warmup):
        r.run()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter_ns()
        r.run()
        times.append((time.perf_counter_ns() - t0) / 1e6)
    return {"median_ms": round(percentile(times, 50), 4), "min_ms": round(min(times), 4),
            "p90_ms": round(percentile(times, 90), 4), "runs": runs,
            "times_ms": [round(t, 4) for t in times]}


def serve(cache_dir: str) -> int:
    """The request loop described in the module doc."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything a library prints goes to stderr
    sys.stdout = sys.stderr

    def reply(obj: dict) -> None:
        out.write(json.dumps(obj) + "\n")
        out.flush()

    ok, missing = versions()
    reply({"ok": True, "runtimes": ok, "missing": missing})
    runners: dict[tuple[str, str], Runner | str] = {}
    for line in sys.stdin:
        try:
            req = json.loads(line)
            rt, path = req["runtime"], req["model"]
            if rt not in ok:
                reply({"ok": False, "error": f"not installed ({missing.get(rt, 'unknown runtime')})"})
                continue
            key = (rt, path)
            if key not in runners:
                try:
                    runners[key] = make_runner(rt, path, make_feeds(path), cache_dir)
                except Exception as e:  # noqa: BLE001 - reported per cell
                    runners[key] = f"load: {type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
            r = runners[key]
            if isinstance(r, str):
                reply({"ok": False, "error": r})
                continue
            try:
                reply({"ok": True, **time_runner(r, int(req.get("runs", 50)), int(req.get("warmup", 3)))})
            except Exception as e:  # noqa: BLE001
                msg = str(e).strip().splitlines()
                runners[key] = f"run: {type(e).__name__}: {msg[0] if msg else ''}"
                reply({"ok": False, "error": runners[key]})
        except Exception as e:  # noqa: BLE001 - a malformed request must not end the server
            reply({"ok": False, "error": f"bad request: {e}"})
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--serve", action="store_true", help="run the request loop (see the module doc)")
    ap.add_argument("--cache-dir", default=os.path.join("build", "bench-cache"),
                    help="where converted models (.mnn) are kept")
    ap.add_argument("--versions", action="store_true", help="print the importable runtimes and exit")
    args = ap.parse_args(argv)
    if args.versions:
        ok, missing = versions()
        print(json.dumps({"runtimes": ok, "missing": missing}))
        return 0
    if args.serve:
        return serve(args.cache_dir)
    ap.error("give --serve or --versions")
    return 2


if __name__ == "__main__":
    sys.exit(main())
