"""vnpu: numpy-first Python API of the vnpu runtime (ctypes over libvnpu.so).

    import numpy as np, vnpu
    vnpu.compile("model.onnx", "model.bin", max_time_per_fc=1000)
    pack = vnpu.load("model.bin")             # or the .onnx itself (compiled on load)
    m = pack[0]                               # or pack["model_name"]
    y = m.infer(np.zeros(m.inputs[0].shape, np.float32), priority=255)
    t = m.submit(x); ...; outputs = t.wait()  # async

Tracing: `vnpu.trace_to("trace.json")` before the first `load` records the scheduler's
events and writes them when the process exits; `vnpu.render_trace` draws them (SVG).
See python/README.md for how the library is found.
"""

from __future__ import annotations

import os
import shutil
import subprocess

from . import _lib
from ._lib import VnpuError
from ._model import LAYOUTS, TENSOR_TYPES, Model, PackedModel, Task, TensorInfo

__all__ = [
    "load", "compile", "version", "library_path", "trace_to", "render_trace", "cli",
    "Model", "PackedModel", "Task", "TensorInfo", "VnpuError", "TENSOR_TYPES", "LAYOUTS",
]


def load(paths) -> PackedModel:
    """Loads compiled model files (or `.onnx`, compiled on load): one path or a list."""
    return PackedModel(paths)


def version() -> str:
    """The library's version string (`vnpuGetVersion`)."""
    return _lib.lib().vnpuGetVersion().decode()


def library_path() -> str:
    """The libvnpu.so that was loaded."""
    return _lib.lib()._vnpu_path


def cli() -> str:
    """Path of the `vnpu` command-line tool used by `compile` and `render_trace`."""
    env = os.environ.get("VNPU_CLI")
    if env:
        return env
    lib_dir = os.path.dirname(os.path.abspath(library_path())) if os.sep in library_path() else ""
    cands = []
    if lib_dir:
        cands += [os.path.join(lib_dir, "..", "bin", "vnpu"), os.path.join(lib_dir, "vnpu")]
    found = shutil.which("vnpu")
    if found:
        cands.append(found)
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    cands += [os.path.join(repo, "target", p, "vnpu") for p in ("release", "debug")]
    for c in cands:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return os.path.normpath(c)
    raise FileNotFoundError("the vnpu CLI was not found: set VNPU_CLI or put vnpu on PATH")


def _run_cli(args):
    r = subprocess.run([cli(), *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip() or r.stdout.strip())
    return r


def compile(onnx, output, max_time_per_fc: int = 0, input_shapes=None, name=None,
            input_type_rt=None, input_layout_rt=None, mean=None, scale=None, extra=()):
    """Compiles ONNX model(s) into `output` with the `vnpu compile` CLI; returns `output`.

    `onnx`: a path or a list (several = one packed file). `input_shapes`: {name: shape}.
    `max_time_per_fc`: µs per FC (0 = no limit, else 1000..=4294967295)."""
    srcs = [onnx] if isinstance(onnx, (str, os.PathLike)) else list(onnx)
    args = ["compile", *[os.fspath(s) for s in srcs], "-o", os.fspath(output), "--quiet",
            "--max-time-per-fc", str(int(max_time_per_fc))]
    for k, v in (input_shapes or {}).items():
        args += ["--input-shape", f"{k}=" + "x".join(str(int(d)) for d in v)]
    if name:
        args += ["--name", name]
    if input_type_rt:
        args += ["--input-type-rt", input_type_rt]
    if input_layout_rt:
        args += ["--input-layout-rt", input_layout_rt]
    if mean is not None:
        args += ["--mean", ",".join(str(float(x)) for x in mean)]
    if scale is not None:
        args += ["--scale", ",".join(str(float(x)) for x in scale)]
    _run_cli([*args, *extra])
    return os.fspath(output)


def trace_to(path) -> None:
    """Records the scheduler trace into `path` (Chrome trace JSON, written at process exit).
    Must be called before the library is loaded (the first `load`)."""
    if _lib._lib is not None:
        raise RuntimeError("vnpu.trace_to must be called before the first vnpu.load")
    os.environ["VNPU_TRACE"] = os.fspath(path)


def render_trace(trace_json, svg, from_ms=None, to_ms=None) -> str:
    """Draws a trace as an SVG timeline (`vnpu trace`); returns the SVG path."""
    args = ["trace", os.fspath(trace_json), "-o", os.fspath(svg)]
    if from_ms is not None and to_ms is not None:
        args += ["--from-ms", str(from_ms), "--to-ms", str(to_ms)]
    _run_cli(args)
    return os.fspath(svg)
