"""Build ONNX graphs by hand, exporter-style, with seeded numpy weights.

Used by ``scripts/gen_models.py`` (benchmark and demo models) and by
``tests/conformance/gen_cases.py`` (conformance cases). Nothing here imports
onnxruntime except :func:`calibrate_batchnorm` and :func:`run_ort`.

Conventions (kept close to what ``torch.onnx.export`` writes, so the importer
sees realistic graphs):

* node names are ``/<scope>/<OpType>[_<n>]``, their outputs
  ``/<scope>/<OpType>[_<n>]_output_0``; weights are ``<scope>.weight`` etc.;
* every layer is a separate node (``Conv`` -> ``BatchNormalization`` ->
  ``Relu``), constants are initializers;
* weights use He (Kaiming normal, fan-in) initialisation and BatchNorm gets
  sane statistics; :func:`calibrate_batchnorm` can then set the running
  statistics from the activations a random input really produces, so that
  activations stay near unit scale through deep networks.

Every model is checked with ``onnx.checker`` (full check) and has its graph
output shapes filled in by ONNX shape inference.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

#: numpy dtype -> ONNX element type, for the types the project handles.
NP_TO_ONNX = {
    np.dtype(np.float32): TensorProto.FLOAT,
    np.dtype(np.float64): TensorProto.DOUBLE,
    np.dtype(np.int64): TensorProto.INT64,
    np.dtype(np.int32): TensorProto.INT32,
    np.dtype(np.int8): TensorProto.INT8,
    np.dtype(np.uint8): TensorProto.UINT8,
    np.dtype(np.bool_): TensorProto.BOOL,
}

#: numpy dtype -> the manifest's dtype tag.
NP_TO_TAG = {
    np.dtype(np.float32): "f32",
    np.dtype(np.int64): "i64",
    np.dtype(np.int32): "i32",
    np.dtype(np.uint8): "u8",
    np.dtype(np.bool_): "bool",
}


def onnx_type(dtype) -> int:
    """The ONNX element type of a numpy dtype (or dtype-like)."""
    return NP_TO_ONNX[np.dtype(dtype)]


class GraphBuilder:
    """Accumulates nodes, initializers, inputs and outputs of one ONNX graph.

    ``seed`` makes every weight reproducible; ``opset`` is the default-domain
    opset the model declares (op helpers below emit the form that opset
    expects, e.g. ``Clip`` bounds as inputs, ``Split`` sizes as an input from
    13, ``Reduce*`` axes as an input from 18).
    """

    def __init__(self, name: str, seed: int = 0, opset: int = 13):
        self.name = name
        self.opset = opset
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self._scope: list[str] = []
        self._used: set[str] = set()
        self._const_cache: dict[tuple, str] = {}

    # ------------------------------------------------------------------ names
    @contextlib.contextmanager
    def scope(self, name: str):
        """Nest node and weight names under ``name`` (like a PyTorch module)."""
        self._scope.append(name)
        try:
            yield
        finally:
            self._scope.pop()

    def _unique(self, base: str) -> str:
        name, n = base, 1
        while name in self._used:
            name = f"{base}_{n}"
            n += 1
        self._used.add(name)
        return name

    def _node_name(self, op_type: str) -> str:
        path = "/".join(self._scope)
        return self._unique(f"/{path}/{op_type}" if path else f"/{op_type}")

    def _weight_name(self, leaf: str) -> str:
        dotted = ".".join(self._scope)
        return self._unique(f"{dotted}.{leaf}" if dotted else leaf)

    # ------------------------------------------------------------- graph I/O
    def input(self, name: str, shape: Sequence[int | str], dtype=np.float32) -> str:
        """Declare a graph input; string dims become ``dim_param``."""
        self._used.add(name)
        self.inputs.append(helper.make_tensor_value_info(name, onnx_type(dtype), list(shape)))
        return name

    def output(self, value: str, dtype=np.float32, shape=None, name: str | None = None) -> str:
        """Declare ``value`` a graph output, renaming the producing node's output to
        ``name`` when given; ``dtype=None`` leaves the type to shape inference."""
        if name is not None and name != value:
            self._rename(value, name)
            value = name
        if dtype is None:
            vi = onnx.ValueInfoProto()
            vi.name = value  # type and shape left to shape inference
            self.outputs.append(vi)
        else:
            self.outputs.append(helper.make_tensor_value_info(value, onnx_type(dtype), shape))
        return value

    def _rename(self, old: str, new: str) -> None:
        self._used.add(new)
        for node in self.nodes:
            for i, o in enumerate(node.output):
                if o == old:
                    node.output[i] = new
            for i, x in enumerate(node.input):
                if x == old:
                    node.input[i] = new

    # ------------------------------------------------------------- constants
    def const(self, array, leaf: str = "const") -> str:
        """Add ``array`` as an initializer and return its name."""
        arr = np.asarray(array)
        name = self._weight_name(leaf)
        self.initializers.append(numpy_helper.from_array(arr, name))
        return name

    def shared_const(self, array, leaf: str) -> str:
        """Like :meth:`const`, but identical small constants share one initializer."""
        arr = np.asarray(array)
        key = (leaf, arr.dtype.str, arr.shape, arr.tobytes())
        if key not in self._const_cache:
            self._used.add(leaf)
            name = self._unique(leaf)
            self.initializers.append(numpy_helper.from_array(arr, name))
            self._const_cache[key] = name
        return self._const_cache[key]

    def i64(self, values: Iterable[int], leaf: str = "const") -> str:
        """An int64 1-D constant (shapes, axes, pads, starts ...)."""
        return self.shared_const(np.asarray(list(values), dtype=np.int64), f"onnx::{leaf}")

    def f32(self, value, leaf: str = "const") -> str:
        """A float32 constant (scalar or array)."""
        return self.shared_const(np.asarray(value, dtype=np.float32), f"onnx::{leaf}")

    # ------------------------------------------------------------------ nodes
    def op(self, op_type: str, inputs: Sequence[str | None], n_out: int = 1, domain: str = "", **attrs):
        """Append one node; returns its output name (or a list when ``n_out`` > 1)."""
        name = self._node_name(op_type)
        outs = [self._unique(f"{name}_output_{i}") for i in range(n_out)]
        ins = ["" if x is None else x for x in inputs]
        attrs = {k: v for k, v in attrs.items() if v is not None}
        self.nodes.append(helper.make_node(op_type, ins, outs, name=name, domain=domain or None, **attrs))
        return outs[0] if n_out == 1 else outs

    # ----------------------------------------------------------------- layers
    def conv(self, x: str, cin: int, cout: int, k, stride=1, pad=None, groups: int = 1,
             dilation=1, bias: bool = True, gain: float = 2.0, name: str = "conv") -> str:
        """A 2-D Conv with He-initialised weights (std = sqrt(gain / fan_in))."""
        kh, kw = (k, k) if isinstance(k, int) else k
        sh, sw = (stride, stride) if isinstance(stride, int) else stride
        dh, dw = (dilation, dilation) if isinstance(dilation, int) else dilation
        if pad is None:
            pad = [dh * (kh - 1) // 2, dw * (kw - 1) // 2] * 2
        elif isinstance(pad, int):
            pad = [pad] * 4
        fan_in = cin // groups * kh * kw
        with self.scope(name):
            w = self.rng.normal(0.0, np.sqrt(gain / fan_in), (cout, cin // groups, kh, kw)).astype(np.float32)
            ins = [x, self.const(w, "weight")]
            if bias:
                ins.append(self.const(self.rng.normal(0.0, 0.02, cout).astype(np.float32), "bias"))
            return self.op("Conv", ins, dilations=[dh, dw], group=groups, kernel_shape=[kh, kw],
                           pads=list(pad), strides=[sh, sw])

    def conv_transpose(self, x: str, cin: int, cout: int, k: int, stride: int, pad: int = 0,
                       output_padding: int = 0, name: str = "up") -> str:
        """A 2-D ConvTranspose (weights ``[cin, cout, k, k]``) with He init."""
        with self.scope(name):
            fan_in = cin * k * k / (stride * stride)
            w = self.rng.normal(0.0, np.sqrt(2.0 / fan_in), (cin, cout, k, k)).astype(np.float32)
            b = self.rng.normal(0.0, 0.02, cout).astype(np.float32)
            attrs = dict(kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4)
            if output_padding:
                attrs["output_padding"] = [output_padding] * 2
            return self.op("ConvTranspose", [x, self.const(w, "weight"), self.const(b, "bias")], **attrs)

    def batchnorm(self, x: str, c: int, name: str = "bn") -> str:
        """BatchNormalization with gamma ~ U(0.5, 1.5), small beta and unit-ish
        running statistics (refine them with :func:`calibrate_batchnorm`)."""
        with self.scope(name):
            gamma = self.rng.uniform(0.5, 1.5, c).astype(np.float32)
            beta = self.rng.normal(0.0, 0.1, c).astype(np.float32)
            mean = self.rng.normal(0.0, 0.1, c).astype(np.float32)
            var = self.rng.uniform(0.5, 1.5, c).astype(np.float32)
            return self.op("BatchNormalization",
                           [x, self.const(gamma, "weight"), self.const(beta, "bias"),
                            self.const(mean, "running_mean"), self.const(var, "running_var")],
                           epsilon=1e-5, momentum=0.9)

    def relu(self, x: str) -> str:
        return self.op("Relu", [x])

    def relu6(self, x: str) -> str:
        """ReLU6 as PyTorch exports it: Clip with min/max inputs (opset >= 11)."""
        return self.op("Clip", [x, self.f32(0.0, "clip_min"), self.f32(6.0, "clip_max")])

    def silu(self, x: str) -> str:
        """SiLU as exporters write it: Sigmoid then Mul."""
        return self.op("Mul", [x, self.op("Sigmoid", [x])])

    def hardswish(self, x: str) -> str:
        return self.op("HardSwish", [x])

    def activation(self, x: str, act: str | None) -> str:
        """Apply a named activation (``relu``, ``relu6``, ``silu``, ``hardswish``, ``None``)."""
        if act is None:
            return x
        return {"relu": self.relu, "relu6": self.relu6, "silu": self.silu,
                "hardswish": self.hardswish}[act](x)

    def conv_bn_act(self, x: str, cin: int, cout: int, k, stride=1, groups: int = 1,
                    act: str | None = "relu", name: str = "conv", pad=None) -> str:
        """Conv (no bias) -> BatchNormalization -> activation, as separate nodes."""
        with self.scope(name):
            y = self.conv(x, cin, cout, k, stride, pad=pad, groups=groups, bias=False, name="conv")
            y = self.batchnorm(y, cout, name="bn")
            return self.activation(y, act)

    def gemm(self, x: str, fin: int, fout: int, name: str = "fc") -> str:
        """Gemm with transB=1 (``[out, in]`` weight) like a PyTorch Linear."""
        with self.scope(name):
            w = self.rng.normal(0.0, np.sqrt(1.0 / fin), (fout, fin)).astype(np.float32)
            b = self.rng.normal(0.0, 0.02, fout).astype(np.float32)
            return self.op("Gemm", [x, self.const(w, "weight"), self.const(b, "bias")],
                           alpha=1.0, beta=1.0, transB=1)

    def linear(self, x: str, fin: int, fout: int, name: str = "linear", bias: bool = True) -> str:
        """MatMul + Add like a PyTorch Linear on a 3-D input (weight stored ``[in, out]``)."""
        with self.scope(name):
            w = self.rng.normal(0.0, np.sqrt(1.0 / fin), (fin, fout)).astype(np.float32)
            y = self.op("MatMul", [x, self.const(w, "weight")])
            if bias:
                y = self.op("Add", [self.const(self.rng.normal(0.0, 0.02, fout).astype(np.float32), "bias"), y])
            return y

    def reduce(self, op_type: str, x: str, axes: Sequence[int], keepdims: int = 1) -> str:
        """A Reduce* node with axes as attribute or input depending on the opset."""
        axes_as_input = self.opset >= 18 or (op_type == "ReduceSum" and self.opset >= 13)
        if axes_as_input:
            return self.op(op_type, [x, self.i64(axes, "axes")], keepdims=keepdims)
        return self.op(op_type, [x], axes=list(axes), keepdims=keepdims)

    def split(self, x: str, sizes: Sequence[int], axis: int) -> list[str]:
        """Split with sizes as input (opset >= 13) or attribute."""
        if self.opset >= 13:
            outs = self.op("Split", [x, self.i64(sizes, "split")], n_out=len(sizes), axis=axis)
        else:
            outs = self.op("Split", [x], n_out=len(sizes), axis=axis, split=list(sizes))
        return outs if isinstance(outs, list) else [outs]

    def squeeze(self, x: str, axes: Sequence[int]) -> str:
        if self.opset >= 13:
            return self.op("Squeeze", [x, self.i64(axes, "axes")])
        return self.op("Squeeze", [x], axes=list(axes))

    def unsqueeze(self, x: str, axes: Sequence[int]) -> str:
        if self.opset >= 13:
            return self.op("Unsqueeze", [x, self.i64(axes, "axes")])
        return self.op("Unsqueeze", [x], axes=list(axes))

    def reshape(self, x: str, shape: Sequence[int]) -> str:
        return self.op("Reshape", [x, self.i64(shape, "shape")])

    # ------------------------------------------------------------------ build
    def build(self, check: bool = True, doc: str = "") -> onnx.ModelProto:
        """Assemble, shape-infer (filling graph output shapes) and check the model."""
        graph = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs, self.initializers)
        opsets = [helper.make_opsetid("", self.opset)]
        model = helper.make_model(graph, opset_imports=opsets, producer_name="vnpu-gen",
                                  producer_version="1", doc_string=doc)
        model.ir_version = helper.find_min_ir_version_for(opsets)
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        del model.graph.output[:]
        model.graph.output.extend(inferred.graph.output)
        for out in model.graph.output:
            if not out.type.tensor_type.elem_type or not out.type.tensor_type.HasField("shape"):
                raise ValueError(f"{self.name}: shape inference gave no type/shape for output {out.name!r} "
                                 f"(an op unknown at opset {self.opset}?)")
        if check:
            onnx.checker.check_model(model, full_check=True)
        return model


# --------------------------------------------------------------------- ORT
def ort_session(model: onnx.ModelProto | bytes | str, reference: bool = True):
    """An onnxruntime CPU session: single thread; with ``reference`` all graph
    optimisations are disabled (the conformance reference setting)."""
    import onnxruntime as ort

    ort.set_default_logger_severity(3)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 3
    if reference:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    src = model.SerializeToString() if isinstance(model, onnx.ModelProto) else model
    return ort.InferenceSession(src, sess_options=opts, providers=["CPUExecutionProvider"])


def run_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Run ``model`` once on ``feeds`` with the reference session settings."""
    sess = ort_session(model)
    return sess.run(None, feeds)


def graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The graph inputs that are not initializers (the runtime inputs)."""
    inits = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def calibrate_batchnorm(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> onnx.ModelProto:
    """Set each BatchNormalization's running mean/var to the per-channel
    statistics of the activations that ``feeds`` produce at its input.

    Works in topological order (each BN sees its predecessors already
    calibrated), so every BN output is close to ``gamma * N(0, 1) + beta``:
    activations neither explode nor vanish however deep the network. The
    statistics are rounded to float16 precision so that regenerating on a
    machine whose float rounding differs slightly still gives the same bytes.
    """
    model = onnx.ModelProto.FromString(model.SerializeToString())
    inits = {t.name: t for t in model.graph.initializer}
    bns = [n for n in model.graph.node if n.op_type == "BatchNormalization"]
    if not bns:
        return model
    # Calibrate in waves: all BNs whose input does not depend on an
    # uncalibrated BN are measured in one run.
    producers = {o: n for n in model.graph.node for o in n.output}

    def upstream_bns(value: str, memo: dict) -> set:
        if value in memo:
            return memo[value]
        memo[value] = set()
        node = producers.get(value)
        found: set = set()
        if node is not None:
            for x in node.input:
                if x:
                    found |= upstream_bns(x, memo)
            if node.op_type == "BatchNormalization":
                found.add(node.name)
        memo[value] = found
        return found

    memo: dict = {}
    deps = {bn.name: upstream_bns(bn.input[0], memo) for bn in bns}
    done: set[str] = set()
    while len(done) < len(bns):
        wave = [bn for bn in bns if bn.name not in done and deps[bn.name] <= done]
        probe = onnx.ModelProto.FromString(model.SerializeToString())
        del probe.graph.output[:]
        for bn in wave:
            probe.graph.output.append(helper.make_tensor_value_info(bn.input[0], TensorProto.FLOAT, None))
        acts = ort_session(probe, reference=False).run(None, feeds)
        for bn, act in zip(wave, acts, strict=True):
            axes = tuple(i for i in range(act.ndim) if i != 1)
            mean = act.mean(axis=axes).astype(np.float16).astype(np.float32)
            var = (act.var(axis=axes) + 1e-3).astype(np.float16).astype(np.float32)
            for idx, arr in ((3, mean), (4, var)):
                t = inits[bn.input[idx]]
                t.CopyFrom(numpy_helper.from_array(arr, t.name))
            done.add(bn.name)
    return model


def activation_report(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, tuple[float, float]]:
    """Std and max-abs of every graph output for ``feeds`` (sanity checks)."""
    outs = ort_session(model, reference=False).run(None, feeds)
    return {o.name: (float(np.std(v.astype(np.float64))), float(np.max(np.abs(v))) if v.size else 0.0)
            for o, v in zip(model.graph.output, outs, strict=True)}
