#!/usr/bin/env python3
"""Generate the int8 (QDQ) conformance cases for ``tests/quant_conformance.rs``.

    /work/main/.venv/bin/python scripts/gen_quant_models.py build/quant
    scripts/venv.sh python3 scripts/gen_quant_models.py build/quant --only conv resnet18

Writes ``OUT/manifest.json`` plus one folder per case (``model.onnx``, inputs and
references as raw little-endian ``.bin`` files). Two kinds of case:

* ``op``: one quantised operator, either a float op wrapped by
  ``onnxruntime.quantization.quantize_static`` (QDQ format, random calibration data) —
  Conv (plain, depthwise, strided), Gemm, MatMul, Add, Concat, MaxPool, AveragePool,
  Resize, and the resampling / broadcast cases (GlobalAveragePool, AveragePool with
  padding, linear Resize in four coordinate modes, Add / Mul with a broadcast operand or
  a constant, an SE block) — or written directly with the integer operators QLinearConv, QLinearMatMul,
  ConvInteger, MatMulInteger.
* ``network``: ResNet-18, MobileNetV2 and the YOLO-style detector of
  ``scripts/gen_models.py``, BatchNorm folded by onnxruntime's pre-processing, then
  quantised by ``quantize_static`` (per-channel s8 weights, s8 activations) on random
  calibration data.

For every case the reference is the QDQ graph executed literally in float by
onnxruntime with all graph optimisations disabled (QLinearConv / QLinearMatMul first
rewritten as DequantizeLinear → float op → QuantizeLinear, since onnxruntime runs those
with its int8 kernels whatever the optimisation level). onnxruntime's own int8 execution
(optimisations on, so QDQ groups become its QLinear kernels) runs in the same script
and its metrics are stored beside the reference: per output, ``step`` (the scale of
the output's last quantisation: the DequantizeLinear that produces it, else the
closest one upstream, else range/255), ``ort_within_one_step`` (share of elements
with |ort - ref| <= step) and ``ort_worst_steps`` (max |ort - ref| / step). The Rust
test computes the same two numbers for vnpu and compares.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from onnx_builder import GraphBuilder, graph_inputs, ort_session  # noqa: E402

OPSET = 13
CALIBRATION_SAMPLES = 8


# ----------------------------------------------------------------- helpers
def _np_type(elem: int):
    return helper.tensor_dtype_to_np_dtype(elem)


def _input_arrays(model: onnx.ModelProto, rng: np.random.Generator, scale: float = 1.0) -> dict:
    feeds = {}
    for vi in graph_inputs(model):
        tt = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else 1 for d in tt.shape.dim]
        dt = _np_type(tt.elem_type)
        if dt == np.uint8:
            feeds[vi.name] = rng.integers(0, 256, shape, dtype=np.uint8)
        elif dt == np.int8:
            feeds[vi.name] = rng.integers(-128, 128, shape, dtype=np.int8)
        else:
            feeds[vi.name] = (rng.standard_normal(shape) * scale).astype(np.float32)
    return feeds


class _Reader:
    """Calibration data for ``quantize_static``: seeded random inputs."""

    def __init__(self, model: onnx.ModelProto, seed: int, scale: float):
        rng = np.random.default_rng(seed)
        self.items = [_input_arrays(model, rng, scale) for _ in range(CALIBRATION_SAMPLES)]

    def get_next(self):
        return self.items.pop() if self.items else None

    def rewind(self):  # older onnxruntime versions call it
        pass


def quantize(model: onnx.ModelProto, seed: int, *, per_channel: bool = True,
             activation: str = "s8", preprocess: bool = False, scale: float = 1.0,
             force: bool = False) -> onnx.ModelProto:
    """``quantize_static`` in QDQ format with random calibration data."""
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    tmp = tempfile.mkdtemp(prefix="vnpu-quant-")
    try:
        src = os.path.join(tmp, "f32.onnx")
        onnx.save(model, src)
        if preprocess:
            from onnxruntime.quantization.shape_inference import quant_pre_process

            pre = os.path.join(tmp, "pre.onnx")
            quant_pre_process(src, pre, skip_symbolic_shape=True)
            src = pre
        dst = os.path.join(tmp, "qdq.onnx")
        act = QuantType.QInt8 if activation == "s8" else QuantType.QUInt8
        extra = {"ForceQuantizeNoInputCheck": True} if force else {}
        quantize_static(src, dst, _Reader(onnx.load(src), seed, scale), quant_format=QuantFormat.QDQ,
                        per_channel=per_channel, activation_type=act, weight_type=QuantType.QInt8,
                        calibrate_method=CalibrationMethod.MinMax, extra_options=extra)
        return onnx.load(dst)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _steps(model: onnx.ModelProto, ref: list[np.ndarray]) -> list[float]:
    """The quantisation step of each graph output (see the module doc)."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value":
                    inits[n.output[0]] = numpy_helper.to_array(a.t)
    producer = {o: n for n in model.graph.node for o in n.output}

    def scale_of(n) -> float | None:
        if n.op_type in ("DequantizeLinear", "QuantizeLinear", "QLinearConv", "QLinearMatMul"):
            k = {"DequantizeLinear": 1, "QuantizeLinear": 1, "QLinearConv": 6, "QLinearMatMul": 6}[n.op_type]
            s = inits.get(n.input[k])
            if s is not None and s.size == 1:
                return float(s.reshape(-1)[0])
        if n.op_type in ("ConvInteger", "MatMulInteger"):
            return 1.0
        return None

    out = []
    for o, r in zip(model.graph.output, ref):
        step, seen, todo = None, set(), [o.name]
        while todo and step is None:
            v = todo.pop(0)
            n = producer.get(v)
            if n is None or id(n) in seen:
                continue
            seen.add(id(n))
            step = scale_of(n)
            todo.extend(i for i in n.input if i and i not in inits)
        if step is None:
            r = r.astype(np.float64)
            step = float(max(r.max() - r.min(), 1e-6) / 255.0)
        out.append(step)
    return out


def metrics(got: np.ndarray, ref: np.ndarray, step: float) -> tuple[float, float]:
    """(share of elements within one step, worst error in steps)."""
    d = np.abs(got.astype(np.float64) - ref.astype(np.float64)) / step
    return float(np.mean(d <= 1.0 + 1e-6)), float(d.max()) if d.size else 0.0


_DTYPES = {np.dtype(np.float32): "f32", np.dtype(np.uint8): "u8", np.dtype(np.int8): "i8",
           np.dtype(np.int32): "i32", np.dtype(np.int64): "i64"}


def qdq_equivalent(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with QLinearConv / QLinearMatMul written as DequantizeLinear → float op
    → QuantizeLinear: what the reference executes in float (onnxruntime runs the QLinear
    operators with its int8 kernels even with optimisations off)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    nodes = []
    for n in m.graph.node:
        if n.op_type not in ("QLinearConv", "QLinearMatMul"):
            nodes.append(n)
            continue
        i, o = list(n.input), n.output[0]
        axis_w = 0 if n.op_type == "QLinearConv" else 1
        nodes.append(helper.make_node("DequantizeLinear", i[0:3], [o + "/x"]))
        nodes.append(helper.make_node("DequantizeLinear", i[3:6], [o + "/w"], axis=axis_w))
        ins = [o + "/x", o + "/w"]
        if n.op_type == "QLinearConv":
            if len(i) > 8 and i[8]:
                bs = (inits[i[1]].astype(np.float32) * inits[i[4]].astype(np.float32)).astype(np.float32)
                m.graph.initializer.append(numpy_helper.from_array(bs.reshape(-1), o + "/bs"))
                nodes.append(helper.make_node("DequantizeLinear", [i[8], o + "/bs"], [o + "/b"], axis=0))
                ins.append(o + "/b")
            attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
            nodes.append(helper.make_node("Conv", ins, [o + "/y"], **attrs))
        else:
            nodes.append(helper.make_node("MatMul", ins, [o + "/y"]))
        nodes.append(helper.make_node("QuantizeLinear", [o + "/y", i[6], i[7]], [o]))
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    return m


def write_case(out_dir: str, name: str, kind: str, model: onnx.ModelProto, seed: int,
               input_scale: float = 1.0) -> dict:
    """Runs the reference and onnxruntime's int8 execution and writes the case."""
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    onnx.save(model, os.path.join(d, "model.onnx"))
    feeds = _input_arrays(model, np.random.default_rng(seed + 7919), input_scale)
    ref = ort_session(qdq_equivalent(model), reference=True).run(None, feeds)
    opt = ort_session(model, reference=False).run(None, feeds)
    steps = _steps(model, ref)
    case = {"name": name, "kind": kind, "model": f"{name}/model.onnx", "inputs": [], "outputs": []}
    for k, (n, v) in enumerate(feeds.items()):
        f = f"{name}/input{k}.bin"
        np.ascontiguousarray(v).astype(v.dtype.newbyteorder("<")).tofile(os.path.join(out_dir, f))
        case["inputs"].append({"name": n, "dtype": _DTYPES[v.dtype], "file": f})
    for k, (o, r, q, s) in enumerate(zip(model.graph.output, ref, opt, steps)):
        f = f"{name}/ref{k}.bin"
        r = np.ascontiguousarray(r)
        r.astype(r.dtype.newbyteorder("<")).tofile(os.path.join(out_dir, f))
        share, worst = metrics(q, r, s)
        case["outputs"].append({"name": o.name, "dtype": _DTYPES[r.dtype], "file": f, "step": s,
                                "ort_within_one_step": share, "ort_worst_steps": worst})
    return case


# ------------------------------------------------------------- op cases
def _float_op(name: str, build) -> onnx.ModelProto:
    b = GraphBuilder(name, seed=abs(hash(name)) % 1000, opset=OPSET)
    build(b)
    return b.build()


def op_conv(b: GraphBuilder, groups=1, stride=1, cin=16, cout=24, size=12):
    x = b.input("x", [1, cin, size, size])
    y = b.conv(x, cin, cout, 3, stride, groups=groups, name="conv")
    b.output(y, name="y")


def op_conv_relu(b: GraphBuilder):
    x = b.input("x", [1, 8, 10, 10])
    b.output(b.relu(b.conv(x, 8, 16, 3, name="conv")), name="y")


def op_gemm(b: GraphBuilder):
    x = b.input("x", [4, 64])
    b.output(b.gemm(x, 64, 48, name="fc"), name="y")


def op_matmul(b: GraphBuilder):
    x = b.input("x", [2, 5, 32])
    w = b.const(b.rng.normal(0, 0.2, (32, 40)).astype(np.float32), "w")
    b.output(b.op("MatMul", [x, w]), name="y")


def op_add(b: GraphBuilder):
    x = b.input("x", [1, 8, 6, 6])
    z = b.input("z", [1, 8, 6, 6])
    b.output(b.op("Add", [x, z]), name="y")


def op_concat(b: GraphBuilder):
    x = b.input("x", [1, 4, 6, 6])
    z = b.input("z", [1, 6, 6, 6])
    b.output(b.op("Concat", [x, b.op("Mul", [z, b.f32(3.0, "three")])], axis=1), name="y")


def op_maxpool(b: GraphBuilder):
    x = b.input("x", [1, 8, 9, 9])
    y = b.conv(x, 8, 8, 1, name="conv")
    b.output(b.op("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), name="y")


def op_avgpool(b: GraphBuilder):
    x = b.input("x", [1, 8, 8, 8])
    y = b.conv(x, 8, 8, 1, name="conv")
    b.output(b.op("AveragePool", [y], kernel_shape=[2, 2], strides=[2, 2]), name="y")


def op_resize(b: GraphBuilder):
    x = b.input("x", [1, 8, 5, 5])
    y = b.conv(x, 8, 8, 1, name="conv")
    scales = b.f32([1.0, 1.0, 2.0, 2.0], "scales")
    b.output(b.op("Resize", [y, "", scales], mode="nearest", coordinate_transformation_mode="asymmetric",
                  nearest_mode="floor"), name="y")


def op_globalavgpool(b: GraphBuilder):
    x = b.input("x", [1, 16, 7, 7])
    y = b.conv(x, 16, 16, 1, name="conv")
    b.output(b.op("GlobalAveragePool", [y]), name="y")


def op_avgpool_pad(b: GraphBuilder, include_pad: int = 0):
    x = b.input("x", [1, 8, 9, 9])
    y = b.conv(x, 8, 8, 1, name="conv")
    b.output(b.op("AveragePool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                  count_include_pad=include_pad, ceil_mode=1), name="y")


def op_resize_linear(b: GraphBuilder, coord: str = "half_pixel", size: int = 6, scale: float = 2.0):
    x = b.input("x", [1, 8, size, size])
    y = b.conv(x, 8, 8, 1, name="conv")
    scales = b.f32([1.0, 1.0, scale, scale], "scales")
    b.output(b.op("Resize", [y, "", scales], mode="linear", coordinate_transformation_mode=coord),
             name="y")


def op_binary_bcast(b: GraphBuilder, op: str, zshape):
    x = b.input("x", [1, 8, 6, 6])
    z = b.input("z", zshape)
    b.output(b.op(op, [b.conv(x, 8, 8, 1, name="conv"), z]), name="y")


def op_mul_const(b: GraphBuilder):
    x = b.input("x", [1, 8, 6, 6])
    k = b.const(b.rng.uniform(0.5, 4.0, (1, 8, 1, 1)).astype(np.float32), "stride")
    b.output(b.op("Mul", [b.conv(x, 8, 8, 1, name="conv"), k]), name="y")


def op_se_block(b: GraphBuilder):
    """Squeeze-and-excitation: GlobalAveragePool, two 1x1 convs, Sigmoid, a channel
    broadcast Mul, then an Add of the input (int8 all along once lowered)."""
    x = b.input("x", [1, 16, 8, 8])
    y = b.relu(b.conv(x, 16, 16, 3, name="conv"))
    s = b.op("GlobalAveragePool", [y])
    s = b.op("Sigmoid", [b.conv(b.relu(b.conv(s, 16, 4, 1, name="fc1")), 4, 16, 1, name="fc2")])
    b.output(b.op("Add", [b.op("Mul", [y, s]), y]), name="y")


def op_silu(b: GraphBuilder):
    """A conv then SiLU as exporters write it, x * Sigmoid(x): quantised, the Sigmoid and
    the Mul of the same x fuse into one 256-entry table."""
    x = b.input("x", [1, 8, 6, 6])
    y = b.conv(x, 8, 8, 3, name="conv")
    b.output(b.op("Mul", [y, b.op("Sigmoid", [y])]), name="y")


def _qparams(rng, lo, hi, qtype):
    """Scale and zero point covering [lo, hi] for u8 or s8."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    if qtype == "u8":
        s = (hi - lo) / 255.0
        return np.float32(s), np.uint8(round(-lo / s))
    s = (hi - lo) / 255.0
    return np.float32(s), np.int8(round(-128 - lo / s))


def _int_model(name: str, nodes, inputs, outputs, inits) -> onnx.ModelProto:
    g = helper.make_graph(nodes, name, inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="vnpu-gen")
    m.ir_version = 7
    onnx.checker.check_model(m, full_check=True)
    return m


def qlinear_conv(seed: int) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    cin, cout = 8, 12
    w = rng.integers(-127, 128, (cout, cin, 3, 3), dtype=np.int8)
    ws = (rng.uniform(0.5, 1.5, cout) * 0.01).astype(np.float32)
    bias = rng.integers(-2000, 2000, cout, dtype=np.int32)
    xs, xz = np.float32(4.0 / 255), np.uint8(128)
    ys, yz = np.float32(0.25), np.uint8(120)
    inits = [numpy_helper.from_array(np.array(v), n) for v, n in
             [(xs, "xs"), (xz, "xz"), (w, "w"), (ws, "ws"), (np.zeros(cout, np.int8), "wz"),
              (ys, "ys"), (yz, "yz"), (bias, "b")]]
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"],
                            pads=[1, 1, 1, 1], strides=[2, 2])
    return _int_model("qlinear_conv", [node], [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, cin, 9, 9])],
                      [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, cout, 5, 5])], inits)


def qlinear_matmul(seed: int) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    k, n = 32, 20
    w = rng.integers(0, 256, (k, n), dtype=np.uint8)
    inits = [numpy_helper.from_array(np.array(v), nm) for v, nm in
             [(np.float32(0.02), "as"), (np.uint8(100), "az"), (w, "b"), (np.float32(0.01), "bs"),
              (np.uint8(128), "bz"), (np.float32(0.1), "ys"), (np.uint8(128), "yz")]]
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
    return _int_model("qlinear_matmul", [node], [helper.make_tensor_value_info("a", TensorProto.UINT8, [6, k])],
                      [helper.make_tensor_value_info("y", TensorProto.UINT8, [6, n])], inits)


def conv_integer(seed: int) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    w = rng.integers(-20, 21, (6, 4, 3, 3), dtype=np.int8)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(np.uint8(7)), "xz")]
    node = helper.make_node("ConvInteger", ["x", "w", "xz"], ["y"], pads=[1, 1, 1, 1])
    return _int_model("conv_integer", [node], [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 4, 7, 7])],
                      [helper.make_tensor_value_info("y", TensorProto.INT32, [1, 6, 7, 7])], inits)


def matmul_integer(seed: int) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    w = rng.integers(-50, 51, (24, 10), dtype=np.int8)
    inits = [numpy_helper.from_array(w, "b"), numpy_helper.from_array(np.array(np.uint8(3)), "az")]
    node = helper.make_node("MatMulInteger", ["a", "b", "az"], ["y"])
    return _int_model("matmul_integer", [node], [helper.make_tensor_value_info("a", TensorProto.UINT8, [5, 24])],
                      [helper.make_tensor_value_info("y", TensorProto.INT32, [5, 10])], inits)


def op_cases():
    """(name, builder of the QDQ model)."""
    def qs(build, **kw):
        return lambda seed, name: quantize(_float_op(name, build), seed, **kw)

    return [
        ("conv", qs(op_conv)),
        ("conv_u8", qs(op_conv, activation="u8")),
        ("conv_relu", qs(op_conv_relu)),
        ("conv_depthwise", qs(lambda b: op_conv(b, groups=16, cin=16, cout=16))),
        ("conv_strided", qs(lambda b: op_conv(b, stride=2, size=13))),
        ("gemm", qs(op_gemm)),
        ("matmul", qs(op_matmul, per_channel=False)),
        ("add", qs(op_add)),
        ("concat", qs(op_concat)),
        ("maxpool", qs(op_maxpool)),
        ("averagepool", qs(op_avgpool, force=True)),
        ("resize", qs(op_resize)),
        ("qlinear_conv", lambda seed, _: qlinear_conv(seed)),
        ("qlinear_matmul", lambda seed, _: qlinear_matmul(seed)),
        ("conv_integer", lambda seed, _: conv_integer(seed)),
        ("matmul_integer", lambda seed, _: matmul_integer(seed)),
    ]


def resample_cases():
    """The cases of the int8 AveragePool / GlobalAveragePool / linear Resize / broadcast
    Add and Mul lowerings (listed after the networks so that earlier seeds stay)."""
    def qs(build, **kw):
        return lambda seed, name: quantize(_float_op(name, build), seed, force=True, **kw)

    return [
        ("globalavgpool", qs(op_globalavgpool)),
        ("globalavgpool_u8", qs(op_globalavgpool, activation="u8")),
        ("averagepool_pad", qs(op_avgpool_pad)),
        ("averagepool_incl", qs(lambda b: op_avgpool_pad(b, 1))),
        ("resize_linear", qs(op_resize_linear)),
        ("resize_linear_ac", qs(lambda b: op_resize_linear(b, "align_corners", 5, 3.0))),
        ("resize_linear_down", qs(lambda b: op_resize_linear(b, "pytorch_half_pixel", 12, 0.5))),
        ("resize_linear_asym", qs(lambda b: op_resize_linear(b, "asymmetric", 5, 2.0))),
        ("add_bcast_channel", qs(lambda b: op_binary_bcast(b, "Add", [1, 8, 1, 1]))),
        ("add_bcast_rows", qs(lambda b: op_binary_bcast(b, "Add", [6]))),
        ("add_bcast_scalar", qs(lambda b: op_binary_bcast(b, "Add", [1]))),
        ("mul_bcast_channel", qs(lambda b: op_binary_bcast(b, "Mul", [1, 8, 1, 1]))),
        ("mul_bcast_scalar", qs(lambda b: op_binary_bcast(b, "Mul", [1]))),
        ("mul_const", qs(op_mul_const)),
        ("se_block", qs(op_se_block)),
        ("silu", qs(op_silu)),
    ]


def network_cases():
    import gen_models

    def net(build):
        return lambda seed, _: quantize(build(), seed, preprocess=True)

    return [
        ("resnet18", net(gen_models.resnet18)),
        ("mobilenetv2", net(gen_models.mobilenetv2)),
        ("detector", net(gen_models.detector)),
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="output folder (cleared first)")
    ap.add_argument("--only", nargs="*", help="case names to generate")
    ap.add_argument("--no-networks", action="store_true")
    a = ap.parse_args(argv)
    logging.getLogger().setLevel(logging.ERROR)
    if os.path.isdir(a.out) and not a.only:
        shutil.rmtree(a.out)
    os.makedirs(a.out, exist_ok=True)
    todo = [(n, f, "op") for n, f in op_cases()]
    if not a.no_networks:
        todo += [(n, f, "network") for n, f in network_cases()]
    # Seeds by position: these come last so that the cases above keep theirs, and
    # keep their own with --no-networks too.
    base = len(op_cases()) + len(network_cases())
    todo += [(n, f, "op") for n, f in resample_cases()]
    manifest_path = os.path.join(a.out, "manifest.json")
    cases = []
    if a.only and os.path.exists(manifest_path):
        with open(manifest_path) as fh:
            cases = [c for c in json.load(fh)["cases"] if c["name"] not in a.only]
    for pos, (name, build, kind) in enumerate(todo):
        seed = pos if pos < len(op_cases()) or not a.no_networks else pos + base - len(op_cases())
        if a.only and name not in a.only:
            continue
        model = build(1000 + seed, name)
        case = write_case(a.out, name, kind, model, 1000 + seed)
        cases.append(case)
        summary = ", ".join(f"{o['name']}: ort {o['ort_within_one_step'] * 100:.2f}% worst {o['ort_worst_steps']:.1f}"
                            for o in case["outputs"])
        print(f"{name:16s} {summary}")
    with open(manifest_path, "w") as fh:
        json.dump({"cases": cases}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
