#!/usr/bin/env python3
"""onnxruntime (and OpenVINO) side of the vnpu benchmarks: the numbers vnpu's ratios are
taken against. The latency table of `cargo bench --bench vnpu` drives ``bench/peers.py``
(all three peers, interleaved rounds); this script is the command-line form and the
priority scenario.

Latency (one JSON line per model on stdout)::

    scripts/venv.sh python3 bench/ort_bench.py build/models/resnet18.onnx build/models/mobilenetv2.onnx
    {"mode": "latency", "model": "resnet18", "path": "...", "runtime": "onnxruntime", "version": "1.31.1",
     "threads": 1, "graph_opt": "all", "runs": 50, "median_ms": 41.2, "p90_ms": 42.0, "min_ms": 40.8,
     "mean_ms": 41.4, "max_ms": 44.0}

Priority under load (one JSON line)::

    scripts/venv.sh python3 bench/ort_bench.py --priority-scenario mobilenetv2.onnx resnet18.onnx --fps 33 --seconds 10
    {"mode": "priority", "small": "mobilenetv2", "big": "resnet18", "fps": 33.0, "seconds": 10.0,
     "small_runs": 330, "small_p50_ms": 9.8, "small_p99_ms": 27.0, "small_max_ms": 31.2,
     "small_late": 12, "big_runs": 190, "big_per_s": 19.0, ...}

In the scenario the small model runs *open loop*: request k is scheduled at
``t0 + k / fps`` and its latency is counted from that scheduled time to the end
of its run, so a request that had to wait for the previous one is charged the
wait (``small_late`` counts requests that started more than 1 ms late). The big
model runs flat out in a second thread; ``big_per_s`` is its completed runs per
second over the same window. Both sessions use ``intra_op_num_threads=1``.
``--big-nice 19`` lowers the big thread's scheduling priority and
``--no-spin`` disables onnxruntime's thread spinning: together they are the
best tuning onnxruntime offers for this scenario. ``--threads 0`` gives both
sessions the runtime's default thread pool (onnxruntime: one thread per CPU the process
may run on, see ``default_threads``). ``--runtime openvino`` runs the
scenario on OpenVINO (``--threads 0``: the plugin's defaults, nothing set;
``--threads N``: LATENCY hint, N threads, f32; see ``bench/peers.py``). Each
session is created inside its own thread after that thread's nice value is set,
so pool threads the runtime starts for it inherit the nice value.

Inputs are seeded N(0, 1) (f32) or zeros (integer/bool) with every
``dim_param`` set to 1. Diagnostics go to stderr; stdout carries only JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

#: onnxruntime input type strings -> numpy dtypes.
ORT_TO_NP = {"tensor(float)": np.float32, "tensor(uint8)": np.uint8, "tensor(int8)": np.int8,
             "tensor(int32)": np.int32, "tensor(int64)": np.int64, "tensor(bool)": np.bool_,
             "tensor(float16)": np.float16, "tensor(double)": np.float64}


def make_session(path: str, threads: int = 1, graph_opt: str = "all", spin: bool = True):
    """An onnxruntime CPU session with ``threads`` intra-op threads."""
    import onnxruntime as ort

    ort.set_default_logger_severity(3)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads if threads > 0 else default_threads()
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
    return ort.InferenceSession(path, sess_options=opts, providers=["CPUExecutionProvider"])


def default_threads() -> int:
    """onnxruntime's default pool size for this process: 0 (the runtime's choice) unless
    the process may run on fewer CPUs than the machine has (``taskset``, a cpuset), then
    that many. onnxruntime's default counts the machine's cores and pins one thread to
    each, which would escape the CPUs the bench was given."""
    try:
        allowed = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return 0
    return allowed if allowed < (os.cpu_count() or allowed) else 0


def make_feeds(sess, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs for every session input (symbolic dims -> 1)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) and d > 0 else 1 for d in i.shape]
        if i.type not in ORT_TO_NP:
            raise SystemExit(f"ort_bench: input {i.name} has unsupported type {i.type}")
        elem = ORT_TO_NP[i.type]
        if np.issubdtype(elem, np.floating):
            feeds[i.name] = rng.standard_normal(shape).astype(elem)
        else:
            feeds[i.name] = np.zeros(shape, dtype=elem)
    return feeds


def percentile(values_ms: list[float], q: float) -> float:
    """``q``-th percentile (nearest-rank on the sorted samples, q in [0, 100])."""
    if not values_ms:
        return float("nan")
    s = sorted(values_ms)
    k = max(0, min(len(s) - 1, int(np.ceil(q / 100.0 * len(s))) - 1))
    return s[k]


def model_name(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0]


def bench_latency(path: str, runs: int, warmup: int, threads: int, graph_opt: str) -> dict:
    """Median/p90 latency of ``runs`` back-to-back inferences after ``warmup`` ones."""
    import onnxruntime as ort

    sess = make_session(path, threads, graph_opt)
    feeds = make_feeds(sess)
    for _ in range(warmup):
        sess.run(None, feeds)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter_ns()
        sess.run(None, feeds)
        times.append((time.perf_counter_ns() - t0) / 1e6)
    return {
        "mode": "latency", "model": model_name(path), "path": path, "runtime": "onnxruntime",
        "version": ort.__version__, "threads": threads, "graph_opt": graph_opt, "runs": runs,
        "median_ms": round(percentile(times, 50), 4), "p90_ms": round(percentile(times, 90), 4),
        "min_ms": round(min(times), 4), "mean_ms": round(float(np.mean(times)), 4),
        "max_ms": round(max(times), 4),
    }


def _set_thread_nice(nice: int) -> bool:
    """Set the calling thread's nice value (Linux: per-thread via its TID)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
        return True
    except (OSError, AttributeError) as e:
        print(f"ort_bench: cannot set nice {nice}: {e}", file=sys.stderr)
        return False


def _scenario_runner(runtime: str, path: str, threads: int, graph_opt: str, spin: bool, seed: int):
    """One inference callable for the priority scenario (see the module doc)."""
    if runtime == "onnxruntime":
        sess = make_session(path, threads, graph_opt, spin)
        feeds = make_feeds(sess, seed)
        return lambda: sess.run(None, feeds)
    import peers

    runner = peers.openvino_runner(path, peers.make_feeds(path, seed), max(threads, 1), default=threads == 0)
    return runner.run


def _runtime_version(runtime: str) -> str:
    if runtime == "onnxruntime":
        import onnxruntime as ort
        return ort.__version__
    import openvino as ov
    return ov.get_version().split("-")[0]


def priority_scenario(small: str, big: str, fps: float, seconds: float, graph_opt: str,
                      big_nice: int, spin: bool, warmup: int, runtime: str = "onnxruntime",
                      threads: int = 1) -> dict:
    """Small model open-loop at ``fps`` in one thread, big model flat out in another."""
    run_small = _scenario_runner(runtime, small, threads, graph_opt, spin, 1)
    for _ in range(warmup):
        run_small()
    small_alone = []
    for _ in range(10):
        t0 = time.perf_counter_ns()
        run_small()
        small_alone.append((time.perf_counter_ns() - t0) / 1e6)

    period_ns = int(1e9 / fps)
    # The small model alone at the scenario's pace (no background): what resting
    # between requests costs by itself on this host (caches and TLBs lose its data).
    small_paced = []
    for _ in range(max(20, int(2 * fps))):
        time.sleep(period_ns / 1e9)
        t0 = time.perf_counter_ns()
        run_small()
        small_paced.append((time.perf_counter_ns() - t0) / 1e6)
    duration_ns = int(seconds * 1e9)
    start = threading.Barrier(2)
    stop = threading.Event()
    big_done: list[int] = []  # completion times (ns) of big runs
    latencies: list[float] = []
    late = 0
    window: dict[str, int] = {}
    errors: list[Exception] = []

    def big_loop():
        if big_nice:
            _set_thread_nice(big_nice)
        try:
            run_big = _scenario_runner(runtime, big, threads, graph_opt, spin, 2)
            for _ in range(warmup):
                run_big()
        except Exception as e:  # noqa: BLE001 - re-raised by the main thread
            errors.append(e)
            stop.set()
        finally:
            start.wait()
        while not stop.is_set():
            run_big()
            big_done.append(time.perf_counter_ns())

    worker = threading.Thread(target=big_loop, name="big", daemon=True)
    worker.start()
    start.wait()
    t0 = time.perf_counter_ns()
    window["t0"] = t0
    k = 0
    while True:
        scheduled = t0 + k * period_ns
        if scheduled - t0 >= duration_ns:
            break
        now = time.perf_counter_ns()
        if now < scheduled:
            time.sleep((scheduled - now) / 1e9)
        begin = time.perf_counter_ns()
        if begin - scheduled > 1_000_000:
            late += 1
        run_small()
        latencies.append((time.perf_counter_ns() - scheduled) / 1e6)
        k += 1
    t_end = time.perf_counter_ns()
    stop.set()
    worker.join()
    if errors:
        raise errors[0]
    elapsed = (t_end - t0) / 1e9
    big_runs = sum(1 for t in big_done if t0 <= t <= t_end)
    return {
        "mode": "priority", "runtime": runtime, "version": _runtime_version(runtime),
        "threads": threads, "small": model_name(small), "big": model_name(big), "fps": fps,
        "seconds": seconds, "graph_opt": graph_opt, "big_nice": big_nice, "spinning": spin,
        "small_alone_median_ms": round(percentile(small_alone, 50), 4),
        "small_paced_alone_median_ms": round(percentile(small_paced, 50), 4),
        "small_runs": len(latencies), "small_late": late,
        "small_p50_ms": round(percentile(latencies, 50), 4),
        "small_p99_ms": round(percentile(latencies, 99), 4),
        "small_max_ms": round(max(latencies), 4) if latencies else float("nan"),
        "big_runs": big_runs, "big_per_s": round(big_runs / elapsed, 3) if elapsed > 0 else 0.0,
        "elapsed_s": round(elapsed, 3),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", help="ONNX models to time (latency mode)")
    ap.add_argument("--runs", type=int, default=50, help="timed runs per model (at least 50)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1,
                    help="intra-op threads per session (0: the runtime's default)")
    ap.add_argument("--runtime", choices=["onnxruntime", "openvino"], default="onnxruntime",
                    help="runtime of the priority scenario")
    ap.add_argument("--graph-opt", choices=["all", "extended", "basic", "disable"], default="all",
                    help="onnxruntime graph optimisation level (default: all, its best)")
    ap.add_argument("--priority-scenario", nargs=2, metavar=("SMALL", "BIG"),
                    help="small model open loop at --fps while the big one runs flat out")
    ap.add_argument("--fps", type=float, default=33.0)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--big-nice", type=int, default=0, help="nice value of the big model's thread (e.g. 19)")
    ap.add_argument("--no-spin", action="store_true", help="disable onnxruntime intra-op spinning")
    args = ap.parse_args(argv)

    if args.priority_scenario:
        small, big = args.priority_scenario
        res = priority_scenario(small, big, args.fps, args.seconds, args.graph_opt, args.big_nice,
                                not args.no_spin, args.warmup, args.runtime, args.threads)
        print(json.dumps(res), flush=True)
        return 0
    if not args.models:
        ap.error("give ONNX model paths, or --priority-scenario SMALL BIG")
    if args.runs < 50:
        ap.error("--runs must be at least 50")
    for path in args.models:
        print(json.dumps(bench_latency(path, args.runs, args.warmup, args.threads, args.graph_opt)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
