#!/usr/bin/env python3
"""Generate the project's test and benchmark ONNX models (seeded, reproducible).

    scripts/venv.sh python3 scripts/gen_models.py OUT_DIR          # standard set
    scripts/venv.sh python3 scripts/gen_models.py --small models/  # committed demo models
    scripts/venv.sh python3 scripts/gen_models.py OUT_DIR --only resnet18 mobilenetv2

Standard set (1x3x224x224 unless noted), written as ``OUT_DIR/<name>.onnx``:

* ``resnet18``      true ResNet-18 topology, PyTorch-export style (opset 13)
* ``mobilenetv2``   true MobileNetV2 1.0 (ReLU6 as Clip with min/max inputs)
* ``cpu_middle``    conv block -> Softmax over 3136 + TopK (CPU ops) -> conv block
* ``cpu_ends``      LogSoftmax over the image (CPU) first, Softmax(1000) + TopK last
* ``detector``      YOLOv8-style: C2f (Split/Concat), FPN with Resize, DFL Softmax head
* ``unet_fpn``      U-Net with ConvTranspose, Resize (linear and nearest) and Concat skips
* ``mbv3_block``    two MobileNetV3 bottlenecks (HardSwish, SE with HardSigmoid)
* ``transformer_block`` encoder block: LayerNorm op and decomposed, MHA, erf-GELU
* ``ocr_crnn``      CRNN OCR: conv stack + bidirectional LSTM + Softmax (1x3x32x320)
* ``dynamic_batch`` exporter-style classifier whose batch dim is ``dim_param "batch"``
* ``pass_*``        tiny graphs aimed at one compiler pass each (see their doc strings)

Small set (``--small``): ``tiny_classifier`` and ``tiny_detector`` (see models/README.md).

Weights are He-initialised from a fixed seed and every BatchNormalization gets
its running statistics from the activations a seeded random input produces
(see ``onnx_builder.calibrate_batchnorm``), so activations keep a realistic
scale through the whole network. Each model is checked by ``onnx.checker``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from onnx_builder import GraphBuilder, activation_report, calibrate_batchnorm, graph_inputs  # noqa: E402

IMAGE = [1, 3, 224, 224]


def _feeds(model: onnx.ModelProto, seed: int = 1234) -> dict[str, np.ndarray]:
    """Seeded N(0, 1) inputs for every f32 runtime input (dim_params -> 1)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in graph_inputs(model):
        shape = [d.dim_value if d.HasField("dim_value") else 1 for d in vi.type.tensor_type.shape.dim]
        feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def _finish(b: GraphBuilder, doc: str) -> onnx.ModelProto:
    model = b.build(doc=doc)
    return calibrate_batchnorm(model, _feeds(model))


# ---------------------------------------------------------------- ResNet-18
def _basic_block(b: GraphBuilder, x: str, cin: int, cout: int, stride: int, name: str) -> str:
    with b.scope(name):
        y = b.conv(x, cin, cout, 3, stride, bias=False, name="conv1")
        y = b.relu(b.batchnorm(y, cout, name="bn1"))
        y = b.conv(y, cout, cout, 3, 1, bias=False, name="conv2")
        y = b.batchnorm(y, cout, name="bn2")
        if stride != 1 or cin != cout:
            with b.scope("downsample"):
                x = b.conv(x, cin, cout, 1, stride, pad=0, bias=False, name="0")
                x = b.batchnorm(x, cout, name="1")
        return b.relu(b.op("Add", [y, x]))


def resnet18(seed: int = 18) -> onnx.ModelProto:
    """ResNet-18 (torchvision layout): conv7x7/2, maxpool, 4x2 BasicBlocks, GAP, Flatten, Gemm."""
    b = GraphBuilder("resnet18", seed, opset=13)
    x = b.input("input", IMAGE)
    y = b.conv(x, 3, 64, 7, 2, pad=3, bias=False, name="conv1")
    y = b.relu(b.batchnorm(y, 64, name="bn1"))
    with b.scope("maxpool"):
        y = b.op("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=0)
    cin = 64
    for i, cout in enumerate([64, 128, 256, 512]):
        with b.scope(f"layer{i + 1}"):
            for j in range(2):
                stride = 2 if (i > 0 and j == 0) else 1
                y = _basic_block(b, y, cin, cout, stride, f"layer{i + 1}.{j}")
                cin = cout
    with b.scope("avgpool"):
        y = b.op("GlobalAveragePool", [y])
    y = b.op("Flatten", [y], axis=1)
    y = b.gemm(y, 512, 1000, name="fc")
    b.output(y, name="output")
    return _finish(b, "ResNet-18, torchvision topology, seeded random weights")


# -------------------------------------------------------------- MobileNetV2
def _inverted_residual(b: GraphBuilder, x: str, cin: int, cout: int, stride: int, t: int, name: str) -> str:
    hidden = cin * t
    with b.scope(name):
        y, k = x, 0
        if t != 1:
            y = b.conv_bn_act(y, cin, hidden, 1, 1, act="relu6", name=f"conv.{k}")
            k += 1
        y = b.conv_bn_act(y, hidden, hidden, 3, stride, groups=hidden, act="relu6", name=f"conv.{k}")
        y = b.conv_bn_act(y, hidden, cout, 1, 1, act=None, name=f"conv.{k + 1}")
        if stride == 1 and cin == cout:
            y = b.op("Add", [x, y])
        return y


MBV2_SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                 (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]


def mobilenetv2(seed: int = 2, size: int = 224) -> onnx.ModelProto:
    """MobileNetV2 1.0 (torchvision layout): inverted residuals, depthwise, ReLU6 as Clip."""
    b = GraphBuilder("mobilenetv2", seed, opset=13)
    x = b.input("input", [1, 3, size, size])
    with b.scope("features"):
        y = b.conv_bn_act(x, 3, 32, 3, 2, act="relu6", name="features.0")
        cin, idx = 32, 1
        for t, c, n, s in MBV2_SETTINGS:
            for i in range(n):
                y = _inverted_residual(b, y, cin, c, s if i == 0 else 1, t, f"features.{idx}")
                cin, idx = c, idx + 1
        y = b.conv_bn_act(y, cin, 1280, 1, 1, act="relu6", name=f"features.{idx}")
    y = b.op("GlobalAveragePool", [y])
    y = b.op("Flatten", [y], axis=1)
    with b.scope("classifier"):
        y = b.gemm(y, 1280, 1000, name="classifier.1")
    b.output(y, name="output")
    return _finish(b, "MobileNetV2 1.0, torchvision topology, seeded random weights")


# ------------------------------------------------------------ CPU segments
def _conv_stack(b: GraphBuilder, x: str, chans: list[int], strides: list[int], name: str) -> str:
    with b.scope(name):
        for i, (cin, cout, s) in enumerate(zip(chans, chans[1:], strides)):
            x = b.conv_bn_act(x, cin, cout, 3, s, act="relu", name=str(i))
    return x


def cpu_middle(seed: int = 3) -> onnx.ModelProto:
    """Conv block -> spatial Softmax over 56*56 and a channel TopK (CPU ops) -> conv block -> classifier."""
    b = GraphBuilder("cpu_middle", seed, opset=13)
    x = b.input("input", IMAGE)
    y = _conv_stack(b, x, [3, 16, 32], [2, 2], "head")  # 1x32x56x56
    with b.scope("attention"):
        flat = b.reshape(y, [1, 32, 56 * 56])
        att = b.op("Softmax", [flat], axis=2)
        att = b.op("Mul", [att, b.f32(56.0 * 56.0, "hw")])
        y = b.op("Mul", [y, b.reshape(att, [1, 32, 56, 56])])
    with b.scope("select"):
        y, _ = b.op("TopK", [y, b.i64([16], "k")], n_out=2, axis=1, largest=1, sorted=1)
    y = _conv_stack(b, y, [16, 64, 128], [2, 2], "tail")
    y = b.op("Flatten", [b.op("GlobalAveragePool", [y])], axis=1)
    b.output(b.gemm(y, 128, 100, name="fc"), name="logits")
    return _finish(b, "conv block, CPU-only Softmax(3136)/TopK in the middle, conv block")


def cpu_ends(seed: int = 4) -> onnx.ModelProto:
    """LogSoftmax over each image plane (CPU) -> conv net -> Softmax(1000) -> TopK(5) (CPU)."""
    b = GraphBuilder("cpu_ends", seed, opset=13)
    x = b.input("input", IMAGE)
    with b.scope("pre"):
        flat = b.reshape(x, [1, 3, 224 * 224])
        y = b.op("LogSoftmax", [flat], axis=2)
        y = b.op("Add", [y, b.f32(np.log(224.0 * 224.0), "logn")])
        y = b.reshape(y, IMAGE)
    y = _conv_stack(b, y, [3, 16, 32, 64], [2, 2, 2], "body")
    y = b.op("Flatten", [b.op("GlobalAveragePool", [y])], axis=1)
    y = b.gemm(y, 64, 1000, name="fc")
    with b.scope("post"):
        p = b.op("Softmax", [y], axis=1)
        scores, classes = b.op("TopK", [p, b.i64([5], "k")], n_out=2, axis=1, largest=1, sorted=1)
    b.output(scores, name="scores")
    b.output(classes, np.int64, name="classes")
    return _finish(b, "CPU ops first (LogSoftmax) and last (Softmax, TopK), conv net between")


# ----------------------------------------------------------------- detector
def _c2f(b: GraphBuilder, x: str, cin: int, cout: int, n: int, shortcut: bool, name: str) -> str:
    """YOLOv8 C2f: 1x1 conv, Split in two, n bottlenecks chained on the second half, Concat, 1x1 conv."""
    c = cout // 2
    with b.scope(name):
        y = b.conv_bn_act(x, cin, 2 * c, 1, act="silu", name="cv1")
        parts = b.split(y, [c, c], axis=1)
        last = parts[1]
        for i in range(n):
            with b.scope(f"m.{i}"):
                z = b.conv_bn_act(last, c, c, 3, act="silu", name="cv1")
                z = b.conv_bn_act(z, c, c, 3, act="silu", name="cv2")
                last = b.op("Add", [last, z]) if shortcut else z
            parts.append(last)
        y = b.op("Concat", parts, axis=1)
        return b.conv_bn_act(y, (2 + n) * c, cout, 1, act="silu", name="cv2")


def detector(seed: int = 8, size: int = 224, nc: int = 80, reg_max: int = 16) -> onnx.ModelProto:
    """YOLOv8-style detector: C2f backbone, FPN neck (Resize + Concat), decoupled head,
    DFL (Softmax over the reg_max axis + 1x1 conv), box decode, output ``1x(4+nc)xA``."""
    b = GraphBuilder("detector", seed, opset=13)
    x = b.input("images", [1, 3, size, size])
    with b.scope("model"):
        y = b.conv_bn_act(x, 3, 16, 3, 2, act="silu", name="model.0")
        y = b.conv_bn_act(y, 16, 32, 3, 2, act="silu", name="model.1")
        y = _c2f(b, y, 32, 32, 1, True, "model.2")
        y = b.conv_bn_act(y, 32, 64, 3, 2, act="silu", name="model.3")
        p3 = _c2f(b, y, 64, 64, 1, True, "model.4")
        y = b.conv_bn_act(p3, 64, 128, 3, 2, act="silu", name="model.5")
        p4 = _c2f(b, y, 128, 128, 1, True, "model.6")
        y = b.conv_bn_act(p4, 128, 256, 3, 2, act="silu", name="model.7")
        p5 = _c2f(b, y, 256, 256, 1, True, "model.8")
        # top-down FPN
        scales = b.f32([1.0, 1.0, 2.0, 2.0], "scales")
        up = b.op("Resize", [p5, "", scales], mode="nearest", coordinate_transformation_mode="asymmetric",
                  nearest_mode="floor")
        n4 = _c2f(b, b.op("Concat", [up, p4], axis=1), 384, 128, 1, False, "model.12")
        up = b.op("Resize", [n4, "", scales], mode="nearest", coordinate_transformation_mode="asymmetric",
                  nearest_mode="floor")
        n3 = _c2f(b, b.op("Concat", [up, p3], axis=1), 192, 64, 1, False, "model.15")
        feats = [(n3, 64, 8), (n4, 128, 16), (p5, 256, 32)]
        heads, anchors, strides = [], [], []
        with b.scope("model.22"):
            for i, (f, c, s) in enumerate(feats):
                c2, c3 = max(16, c // 4, reg_max * 4), max(c, min(nc, 100))
                with b.scope(f"cv2.{i}"):
                    box = b.conv_bn_act(f, c, c2, 3, act="silu", name="0")
                    box = b.conv_bn_act(box, c2, c2, 3, act="silu", name="1")
                    box = b.conv(box, c2, 4 * reg_max, 1, pad=0, gain=1.0, name="2")
                with b.scope(f"cv3.{i}"):
                    cls = b.conv_bn_act(f, c, c3, 3, act="silu", name="0")
                    cls = b.conv_bn_act(cls, c3, c3, 3, act="silu", name="1")
                    cls = b.conv(cls, c3, nc, 1, pad=0, gain=1.0, name="2")
                h = size // s
                y = b.op("Concat", [box, cls], axis=1)
                heads.append(b.reshape(y, [1, 4 * reg_max + nc, h * h]))
                gy, gx = np.meshgrid(np.arange(h) + 0.5, np.arange(h) + 0.5, indexing="ij")
                anchors.append(np.stack([gx.ravel(), gy.ravel()]))
                strides.append(np.full(h * h, float(s)))
            a = sum(int(t.shape[1]) for t in anchors)
            y = b.op("Concat", heads, axis=2)
            box, cls = b.split(y, [4 * reg_max, nc], axis=1)
            with b.scope("dfl"):
                d = b.reshape(box, [1, 4, reg_max, a])
                d = b.op("Transpose", [d], perm=[0, 2, 1, 3])
                d = b.op("Softmax", [d], axis=1)
                proj = np.arange(reg_max, dtype=np.float32).reshape(1, reg_max, 1, 1)
                d = b.op("Conv", [d, b.const(proj, "conv.weight")], kernel_shape=[1, 1])
                d = b.reshape(d, [1, 4, a])
            lt, rb = b.split(d, [2, 2], axis=1)
            anc = b.const(np.concatenate(anchors, axis=1)[None].astype(np.float32), "anchors")
            x1y1 = b.op("Sub", [anc, lt])
            x2y2 = b.op("Add", [anc, rb])
            cxy = b.op("Div", [b.op("Add", [x1y1, x2y2]), b.f32(2.0, "two")])
            wh = b.op("Sub", [x2y2, x1y1])
            dbox = b.op("Concat", [cxy, wh], axis=1)
            dbox = b.op("Mul", [dbox, b.const(np.concatenate(strides)[None, None].astype(np.float32), "strides")])
            y = b.op("Concat", [dbox, b.op("Sigmoid", [cls])], axis=1)
    b.output(y, name="output0")
    return _finish(b, "YOLOv8-style detector head (C2f, FPN, DFL), seeded random weights")


# ----------------------------------------------------------------- U-Net/FPN
def unet_fpn(seed: int = 5, size: int = 224, classes: int = 4) -> onnx.ModelProto:
    """U-Net with ConvTranspose and Resize up-sampling, Concat skips and an FPN side branch."""
    b = GraphBuilder("unet_fpn", seed, opset=13)
    x = b.input("input", [1, 3, size, size])
    e1 = b.conv_bn_act(x, 3, 16, 3, 1, name="enc1")            # 224
    e2 = b.conv_bn_act(e1, 16, 32, 3, 2, name="enc2")          # 112
    e3 = b.conv_bn_act(e2, 32, 64, 3, 2, name="enc3")          # 56
    e4 = b.conv_bn_act(e3, 64, 128, 3, 2, name="enc4")         # 28
    with b.scope("dec3"):
        u = b.conv_transpose(e4, 128, 64, 2, 2, name="up")       # 56
        d3 = b.conv_bn_act(b.op("Concat", [u, e3], axis=1), 128, 64, 3, name="fuse")
    with b.scope("dec2"):
        u = b.op("Resize", [d3, "", b.f32([1.0, 1.0, 2.0, 2.0], "scales")], mode="linear",
                 coordinate_transformation_mode="half_pixel")    # 112
        u = b.conv_bn_act(u, 64, 32, 1, name="proj")
        d2 = b.conv_bn_act(b.op("Concat", [u, e2], axis=1), 64, 32, 3, name="fuse")
    with b.scope("dec1"):
        u = b.conv_transpose(d2, 32, 16, 4, 2, pad=1, name="up")  # 224
        d1 = b.conv_bn_act(b.op("Concat", [u, e1], axis=1), 32, 16, 3, name="fuse")
    with b.scope("fpn"):
        side = b.conv_bn_act(e4, 128, 16, 1, name="lateral")
        side = b.op("Resize", [side, "", "", b.i64([1, 16, size, size], "sizes")], mode="nearest",
                    coordinate_transformation_mode="asymmetric", nearest_mode="floor")
        d1 = b.op("Add", [d1, side])
    y = b.conv(d1, 16, classes, 1, pad=0, gain=1.0, name="head")
    b.output(y, name="mask")
    return _finish(b, "U-Net/FPN: ConvTranspose, Resize (linear, nearest sizes), Concat skips")


# ------------------------------------------------------- MobileNetV3 blocks
def _mbv3_block(b: GraphBuilder, x: str, cin: int, exp: int, cout: int, k: int, stride: int, name: str) -> str:
    """MobileNetV3 bneck: 1x1 expand + HardSwish, kxk depthwise + HardSwish,
    squeeze-excite (GAP, 1x1 Relu, 1x1 HardSigmoid, Mul), 1x1 project, residual Add."""
    with b.scope(name):
        y = b.conv_bn_act(x, cin, exp, 1, act="hardswish", name="expand")
        y = b.conv_bn_act(y, exp, exp, k, stride, groups=exp, act="hardswish", name="depthwise")
        with b.scope("se"):
            s = b.op("GlobalAveragePool", [y])
            s = b.relu(b.conv(s, exp, exp // 4, 1, pad=0, name="fc1"))
            s = b.conv(s, exp // 4, exp, 1, pad=0, gain=1.0, name="fc2")
            s = b.op("HardSigmoid", [s], alpha=1.0 / 6.0, beta=0.5)
            y = b.op("Mul", [y, s])
        y = b.conv_bn_act(y, exp, cout, 1, act=None, name="project")
        if stride == 1 and cin == cout:
            y = b.op("Add", [y, x])
        return y


def mbv3_block(seed: int = 7) -> onnx.ModelProto:
    """Two MobileNetV3 bottlenecks (k5/s2 and k3/s1 with residual), 1x16x56x56 -> 1x24x28x28."""
    b = GraphBuilder("mbv3_block", seed, opset=14)
    x = b.input("input", [1, 16, 56, 56])
    y = _mbv3_block(b, x, 16, 64, 24, 5, 2, "block1")
    y = _mbv3_block(b, y, 24, 72, 24, 3, 1, "block2")
    b.output(y, name="output")
    return _finish(b, "MobileNetV3-style bottlenecks with HardSwish and SE (HardSigmoid)")


# -------------------------------------------------------------- transformer
def transformer_block(seed: int = 9, seq: int = 64, d: int = 128, heads: int = 4, ffn: int = 512) -> onnx.ModelProto:
    """Pre-LN transformer encoder block: LayerNormalization (the op), multi-head
    self-attention (MatMul, Transpose, Softmax), residual, LayerNorm written out as
    ReduceMean/Sub/Pow/Sqrt/Div, FFN with erf-GELU, residual. Opset 17."""
    b = GraphBuilder("transformer_block", seed, opset=17)
    x = b.input("x", [1, seq, d])
    dh = d // heads
    with b.scope("ln1"):
        g = b.const(b.rng.uniform(0.8, 1.2, d).astype(np.float32), "weight")
        be = b.const(b.rng.normal(0, 0.05, d).astype(np.float32), "bias")
        h = b.op("LayerNormalization", [x, g, be], axis=-1, epsilon=1e-5)
    with b.scope("attn"):
        q = b.linear(h, d, d, name="q_proj")
        k = b.linear(h, d, d, name="k_proj")
        v = b.linear(h, d, d, name="v_proj")
        q = b.op("Transpose", [b.reshape(q, [1, seq, heads, dh])], perm=[0, 2, 1, 3])
        k = b.op("Transpose", [b.reshape(k, [1, seq, heads, dh])], perm=[0, 2, 3, 1])
        v = b.op("Transpose", [b.reshape(v, [1, seq, heads, dh])], perm=[0, 2, 1, 3])
        s = b.op("Div", [b.op("MatMul", [q, k]), b.f32(np.sqrt(dh), "sqrt_dh")])
        p = b.op("Softmax", [s], axis=-1)
        o = b.op("Transpose", [b.op("MatMul", [p, v])], perm=[0, 2, 1, 3])
        o = b.linear(b.reshape(o, [1, seq, d]), d, d, name="out_proj")
    r1 = b.op("Add", [x, o])
    with b.scope("ln2"):
        mean = b.reduce("ReduceMean", r1, [-1])
        dev = b.op("Sub", [r1, mean])
        var = b.reduce("ReduceMean", b.op("Pow", [dev, b.f32(2.0, "two")]), [-1])
        std = b.op("Sqrt", [b.op("Add", [var, b.f32(1e-5, "eps")])])
        h = b.op("Div", [dev, std])
        h = b.op("Mul", [h, b.const(b.rng.uniform(0.8, 1.2, d).astype(np.float32), "weight")])
        h = b.op("Add", [h, b.const(b.rng.normal(0, 0.05, d).astype(np.float32), "bias")])
    with b.scope("ffn"):
        f = b.linear(h, d, ffn, name="fc1")
        with b.scope("gelu"):
            e = b.op("Erf", [b.op("Div", [f, b.f32(np.sqrt(2.0), "sqrt2")])])
            f = b.op("Mul", [b.op("Mul", [f, b.op("Add", [e, b.f32(1.0, "one")])]), b.f32(0.5, "half")])
        f = b.linear(f, ffn, d, name="fc2")
    b.output(b.op("Add", [r1, f]), name="output")
    return _finish(b, "transformer encoder block (LayerNorm op and decomposed, MHA, GELU)")


# ---------------------------------------------------------------- OCR CRNN
def ocr_crnn(seed: int = 16, height: int = 32, width: int = 320, hidden: int = 128,
             classes: int = 97) -> onnx.ModelProto:
    """CRNN text recogniser: conv stack squeezing height to 1, bidirectional LSTM over
    the width, per-step classifier + Softmax: ``1x3x32x320 -> 80x1x97``."""
    b = GraphBuilder("ocr_crnn", seed, opset=13)
    x = b.input("x", [1, 3, height, width])
    with b.scope("backbone"):
        y = b.conv_bn_act(x, 3, 32, 3, 2, name="0")          # 16 x 160
        y = b.conv_bn_act(y, 32, 64, 3, 2, name="1")         # 8 x 80
        y = b.conv_bn_act(y, 64, 128, 3, (2, 1), name="2")   # 4 x 80
        y = b.conv_bn_act(y, 128, 256, 3, (2, 1), name="3")  # 2 x 80
        y = b.op("MaxPool", [y], kernel_shape=[2, 1], strides=[2, 1])  # 1 x 80
    t = width // 4
    with b.scope("neck"):
        y = b.squeeze(y, [2])                                # 1 x 256 x T
        y = b.op("Transpose", [y], perm=[2, 0, 1])           # T x 1 x 256
    with b.scope("rnn"):
        kk = 1.0 / np.sqrt(hidden)
        w = b.const(b.rng.uniform(-kk, kk, (2, 4 * hidden, 256)).astype(np.float32), "weight_ih")
        r = b.const(b.rng.uniform(-kk, kk, (2, 4 * hidden, hidden)).astype(np.float32), "weight_hh")
        bias = b.const(b.rng.uniform(-kk, kk, (2, 8 * hidden)).astype(np.float32), "bias")
        yseq, _, _ = b.op("LSTM", [y, w, r, bias], n_out=3, direction="bidirectional", hidden_size=hidden)
        y = b.op("Transpose", [yseq], perm=[0, 2, 1, 3])     # T x 1 x 2 x H
        y = b.reshape(y, [t, 1, 2 * hidden])
    with b.scope("head"):
        y = b.linear(y, 2 * hidden, classes, name="fc")
        y = b.op("Softmax", [y], axis=2)
    b.output(y, name="probs")
    return _finish(b, "CRNN OCR: CNN + bidirectional LSTM + per-step Softmax")


# ------------------------------------------------------------ dynamic batch
def dynamic_batch(seed: int = 6) -> onnx.ModelProto:
    """Exporter-style classifier with ``dim_param "batch"`` and a Shape-based Flatten."""
    b = GraphBuilder("dynamic_batch", seed, opset=17)
    x = b.input("input", ["batch", 3, 64, 64])
    y = _conv_stack(b, x, [3, 16, 32, 64], [2, 2, 2], "features")  # batch x 64 x 8 x 8
    y = b.op("GlobalAveragePool", [y])
    with b.scope("flatten"):
        shp = b.op("Shape", [y])
        n = b.op("Gather", [shp, b.shared_const(np.asarray(0, np.int64), "onnx::gather_index")], axis=0)
        n = b.unsqueeze(n, [0])
        new_shape = b.op("Concat", [n, b.i64([-1], "minus_one")], axis=0)
        y = b.op("Reshape", [y, new_shape])
    y = b.gemm(y, 64, 10, name="fc")
    b.output(y, shape=["batch", 10], name="output")
    model = b.build(doc="dynamic batch dimension, PyTorch-export style")
    return calibrate_batchnorm(model, _feeds(model))


# ------------------------------------------------------------ pass models
def pass_bn_fold(seed: int = 10) -> onnx.ModelProto:
    """BatchNorm folding: Conv(bias)->BN, Conv(no bias)->BN->Relu, Gemm->BN (1-D BN)."""
    b = GraphBuilder("pass_bn_fold", seed, opset=13)
    x = b.input("input", [1, 8, 16, 16])
    y = b.batchnorm(b.conv(x, 8, 16, 3, bias=True, name="conv_bias"), 16, name="bn_a")
    y = b.relu(b.batchnorm(b.conv(y, 16, 16, 3, bias=False, name="conv_nobias"), 16, name="bn_b"))
    y = b.op("Flatten", [b.op("GlobalAveragePool", [y])], axis=1)
    y = b.batchnorm(b.gemm(y, 16, 12, name="fc"), 12, name="bn_fc")
    b.output(y, name="output")
    return _finish(b, "pass case: fold_batchnorm")


def pass_deconv_fusion(seed: int = 17) -> onnx.ModelProto:
    """ConvTranspose epilogues (DBNet head style): ConvTranspose->BN->Relu (BN folded into
    the weights, Relu fused), ConvTranspose(k3 s2 p1)->Add(residual)->Sigmoid."""
    b = GraphBuilder("pass_deconv_fusion", seed, opset=13)
    x = b.input("input", [1, 8, 12, 12])
    y = b.relu(b.batchnorm(b.conv_transpose(x, 8, 6, 2, 2, name="up_bn"), 6, name="bn_up"))
    r = b.conv_transpose(x, 8, 6, 2, 2, name="up_res")
    z = b.conv_transpose(y, 6, 6, 3, 1, pad=1, name="up_k3")
    z = b.op("Sigmoid", [b.op("Add", [z, r])])
    b.output(z, name="output")
    return _finish(b, "pass case: fold_batchnorm and fuse_post_ops into ConvTranspose")


def pass_attention_mask(seed: int = 19) -> onnx.ModelProto:
    """SVTR-style local attention: Q·K^T per head plus a constant [1, 1, L, L] mask
    broadcast over the heads, Softmax, times V; and a second product with a non-constant
    mask of the same broadcast shape."""
    b = GraphBuilder("pass_attention_mask", seed, opset=13)
    L, d, heads = 24, 8, 2
    x = b.input("input", [1, L, heads * d])

    def proj(name):
        w = b.const(b.rng.normal(0, 0.3, (heads * d, heads * d)).astype(np.float32), name)
        y = b.op("MatMul", [x, w])
        y = b.op("Reshape", [y, b.const(np.array([1, L, heads, d], np.int64), name + "_shape")])
        return b.op("Transpose", [y], perm=[0, 2, 1, 3])

    q, k, v = proj("wq"), proj("wk"), proj("wv")
    kt = b.op("Transpose", [k], perm=[0, 1, 3, 2])
    mask = np.where(np.abs(np.subtract.outer(np.arange(L), np.arange(L))) <= 5, 0.0, -1e4)
    s = b.op("Add", [b.op("MatMul", [q, kt]), b.const(mask.reshape(1, 1, L, L).astype(np.float32), "mask")])
    o = b.op("MatMul", [b.op("Softmax", [s], axis=-1), v])
    # A computed mask (from the input) broadcast over the heads.
    m2 = b.op("MatMul", [x, b.op("Transpose", [x], perm=[0, 2, 1])])
    m2 = b.op("Reshape", [m2, b.const(np.array([1, 1, L, L], np.int64), "m2_shape")])
    s2 = b.op("Add", [b.op("MatMul", [k, b.op("Transpose", [q], perm=[0, 1, 3, 2])]), m2])
    o2 = b.op("MatMul", [b.op("Softmax", [s2], axis=-1), v])
    b.output(b.op("Add", [o, o2]), name="output")
    return _finish(b, "pass case: batched MatMuls with a mask Add broadcast over the heads")


def pass_attention_fused(seed: int = 23) -> onnx.ModelProto:
    """Cross-attention over ragged sizes (37 queries, 50 keys, 3 heads, q/k head dim 8, v
    head dim 24): the scale in its own Mul, K transposed, then MatMul -> Softmax -> MatMul
    without a mask, and again (its own MatMul) with a constant [1, 1, 37, 50] windowed
    mask Add; both fuse into one Attention each."""
    b = GraphBuilder("pass_attention_fused", seed, opset=13)
    M, N, heads, dk, dv, C = 37, 50, 3, 8, 24, 16
    x = b.input("input", [1, M, C])
    mem = b.input("memory", [1, N, C])

    def proj(src, L, d, name, perm):
        w = b.const(b.rng.normal(0, 0.4, (C, heads * d)).astype(np.float32), name)
        y = b.op("MatMul", [src, w])
        y = b.op("Reshape", [y, b.const(np.array([1, L, heads, d], np.int64), name + "_shape")])
        return b.op("Transpose", [y], perm=perm)

    q = b.op("Mul", [proj(x, M, dk, "wq", [0, 2, 1, 3]), b.f32(dk ** -0.5, "scale")])
    kt = proj(mem, N, dk, "wk", [0, 2, 3, 1])
    v = proj(mem, N, dv, "wv", [0, 2, 1, 3])
    o1 = b.op("MatMul", [b.op("Softmax", [b.op("MatMul", [q, kt])], axis=-1), v])
    near = np.abs(np.subtract.outer(np.arange(M) * N / M, np.arange(N))) <= 6
    mask = np.where(near, 0.0, -1e4).astype(np.float32).reshape(1, 1, M, N)
    s2 = b.op("Add", [b.op("MatMul", [q, kt]), b.const(mask, "mask")])
    o2 = b.op("MatMul", [b.op("Softmax", [s2], axis=-1), v])
    b.output(b.op("Concat", [o1, o2], axis=3), name="output")
    return _finish(b, "pass case: MatMul -> (masked) Softmax -> MatMul fused into Attention")


def pass_conv_act_fusion(seed: int = 11) -> onnx.ModelProto:
    """Conv followed by each fusable activation / per-channel affine, branches concatenated."""
    b = GraphBuilder("pass_conv_act_fusion", seed, opset=14)
    x = b.input("input", [1, 8, 16, 16])
    c = 8
    branches = []
    for act in ["Relu", "Clip", "Sigmoid", "LeakyRelu", "HardSwish", "Elu", "PRelu", "Affine", "HardSigmoid", "Tanh"]:
        with b.scope(act.lower()):
            y = b.conv(x, 8, c, 3, name="conv")
            if act == "Clip":
                y = b.relu6(y)
            elif act == "LeakyRelu":
                y = b.op("LeakyRelu", [y], alpha=0.1)
            elif act == "Elu":
                y = b.op("Elu", [y], alpha=1.0)
            elif act == "PRelu":
                y = b.op("PRelu", [y, b.const(b.rng.uniform(0.05, 0.3, (c, 1, 1)).astype(np.float32), "slope")])
            elif act == "Affine":
                y = b.op("Mul", [y, b.const(b.rng.uniform(0.5, 1.5, (1, c, 1, 1)).astype(np.float32), "scale")])
                y = b.op("Add", [y, b.const(b.rng.normal(0, 0.1, (1, c, 1, 1)).astype(np.float32), "shift")])
            elif act == "HardSigmoid":
                y = b.op("HardSigmoid", [y], alpha=1.0 / 6.0, beta=0.5)
            else:
                y = b.op(act, [y])
            branches.append(y)
    b.output(b.op("Concat", branches, axis=1), name="output")
    return _finish(b, "pass case: fuse_activation (Conv + Relu/Clip/Sigmoid/LeakyRelu/HardSwish/...)")


def pass_residual_add(seed: int = 12) -> onnx.ModelProto:
    """Residual Add fusion: Add(conv, x) and Add(x, conv), each followed by Relu."""
    b = GraphBuilder("pass_residual_add", seed, opset=13)
    x = b.input("input", [1, 16, 16, 16])
    with b.scope("block1"):
        y = b.conv_bn_act(x, 16, 16, 3, name="a")
        y = b.conv_bn_act(y, 16, 16, 3, act=None, name="b")
        x = b.relu(b.op("Add", [y, x]))
    with b.scope("block2"):
        y = b.conv(x, 16, 16, 3, name="a")
        x = b.relu(b.op("Add", [x, y]))
    with b.scope("block3"):  # residual without trailing activation
        y = b.conv(x, 16, 16, 1, pad=0, name="a")
        x = b.op("Add", [y, x])
    b.output(x, name="output")
    return _finish(b, "pass case: fuse residual Add (+Relu) into Conv")


def pass_identity_removal(seed: int = 13) -> onnx.ModelProto:
    """Identity, Dropout, Pow 1, Mul 1, Add 0, Sub 0, Div 1 and a no-op Reshape around a Conv."""
    b = GraphBuilder("pass_identity_removal", seed, opset=13)
    x = b.input("input", [1, 8, 16, 16])
    y = b.op("Identity", [x])
    y = b.conv(y, 8, 8, 3, name="conv")
    y = b.op("Dropout", [y], n_out=1)
    y = b.op("Pow", [y, b.f32(1.0, "one")])
    y = b.op("Mul", [y, b.f32(1.0, "one")])
    y = b.op("Add", [b.f32(0.0, "zero"), y])
    y = b.op("Sub", [y, b.f32(0.0, "zero")])
    y = b.op("Div", [y, b.f32([[[1.0]]], "one3d")])
    y = b.reshape(y, [1, 8, 16, 16])
    y = b.op("Identity", [b.relu(y)])
    b.output(y, name="output")
    return _finish(b, "pass case: remove identity ops")


def pass_shape_subgraph(seed: int = 14) -> onnx.ModelProto:
    """PyTorch's x.view(x.size(0), -1): Shape->Gather->Unsqueeze->Concat->Reshape, plus a
    constant subgraph (Constant -> Mul -> Add) to fold."""
    b = GraphBuilder("pass_shape_subgraph", seed, opset=13)
    x = b.input("input", [1, 8, 8, 8])
    y = b.relu(b.conv(x, 8, 16, 3, 2, name="conv"))  # 1x16x4x4
    shp = b.op("Shape", [y])
    n = b.op("Gather", [shp, b.shared_const(np.asarray(0, np.int64), "onnx::gather_index")], axis=0)
    n = b.unsqueeze(n, [0])
    y = b.op("Reshape", [y, b.op("Concat", [n, b.i64([-1], "minus_one")], axis=0)])
    scale = b.op("Constant", [], value=onnx.numpy_helper.from_array(np.full(10, 0.5, np.float32), "v"))
    bias = b.op("Add", [b.op("Mul", [scale, b.f32(2.0, "two")]), b.f32(np.linspace(-1, 1, 10), "lin")])
    y = b.op("Mul", [b.gemm(y, 256, 10, name="fc"), bias])
    b.output(y, name="output")
    return _finish(b, "pass case: fold shape subgraph and constants")


def pass_dead_nodes(seed: int = 15) -> onnx.ModelProto:
    """Nodes whose outputs nobody reads (a whole dead branch and a dead tail)."""
    b = GraphBuilder("pass_dead_nodes", seed, opset=13)
    x = b.input("input", [1, 8, 16, 16])
    live = b.relu(b.conv(x, 8, 8, 3, name="live"))
    dead = b.op("Sigmoid", [b.conv(x, 8, 8, 3, name="dead_branch")])
    b.op("Add", [dead, live])
    b.op("Softmax", [b.op("Tanh", [live])], axis=1)
    b.output(live, name="output")
    return _finish(b, "pass case: eliminate dead nodes")


# ------------------------------------------------------------- small models
def tiny_classifier(seed: int = 100) -> onnx.ModelProto:
    """images 1x3x64x64 -> 4 conv blocks -> GAP -> Gemm -> Softmax -> probs 1x10."""
    b = GraphBuilder("tiny_classifier", seed, opset=13)
    x = b.input("images", [1, 3, 64, 64])
    y = _conv_stack(b, x, [3, 16, 32, 64, 64], [2, 2, 2, 1], "features")
    y = b.op("Flatten", [b.op("GlobalAveragePool", [y])], axis=1)
    y = b.op("Softmax", [b.gemm(y, 64, 10, name="fc")], axis=1)
    b.output(y, name="probs")
    return _finish(b, "vnpu demo classifier, seeded random weights (not trained)")


def tiny_detector(seed: int = 101, na: int = 3, nc: int = 3) -> onnx.ModelProto:
    """images 1x3x128x128 -> 5 stride-2 stages (2 convs each) -> YOLOv5-style heads at
    strides 8/16/32: out_s8 1x24x16x16, out_s16 1x24x8x8, out_s32 1x24x4x4 (sigmoid)."""
    b = GraphBuilder("tiny_detector", seed, opset=13)
    x = b.input("images", [1, 3, 128, 128])
    chans = [3, 16, 24, 32, 64, 96]
    feats = []
    with b.scope("backbone"):
        y = x
        for i, (cin, cout) in enumerate(zip(chans, chans[1:])):
            with b.scope(f"stage{i}"):
                y = b.conv_bn_act(y, cin, cout, 3, 2, act="relu", name="down")
                y = b.conv_bn_act(y, cout, cout, 3, 1, act="relu", name="conv")
            if i >= 2:
                feats.append((y, cout))
    for (f, c), name in zip(feats, ["out_s8", "out_s16", "out_s32"]):
        with b.scope(name):
            y = b.conv(f, c, na * (5 + nc), 1, pad=0, gain=1.0, name="head")
            b.output(b.op("Sigmoid", [y]), name=name)
    return _finish(b, "vnpu demo detector, seeded random weights (not trained)")


STANDARD = {
    "resnet18": resnet18,
    "mobilenetv2": mobilenetv2,
    "cpu_middle": cpu_middle,
    "cpu_ends": cpu_ends,
    "detector": detector,
    "unet_fpn": unet_fpn,
    "mbv3_block": mbv3_block,
    "transformer_block": transformer_block,
    "ocr_crnn": ocr_crnn,
    "dynamic_batch": dynamic_batch,
    "pass_bn_fold": pass_bn_fold,
    "pass_deconv_fusion": pass_deconv_fusion,
    "pass_attention_mask": pass_attention_mask,
    "pass_attention_fused": pass_attention_fused,
    "pass_conv_act_fusion": pass_conv_act_fusion,
    "pass_residual_add": pass_residual_add,
    "pass_identity_removal": pass_identity_removal,
    "pass_shape_subgraph": pass_shape_subgraph,
    "pass_dead_nodes": pass_dead_nodes,
}

SMALL = {
    "tiny_classifier": tiny_classifier,
    "tiny_detector": tiny_detector,
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--small", action="store_true", help="generate the small committed models instead")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="generate only these models")
    ap.add_argument("--report", action="store_true", help="print output std/max-abs for a random input")
    args = ap.parse_args(argv)
    table = SMALL if args.small else STANDARD
    names = args.only or list(table)
    unknown = [n for n in names if n not in {**STANDARD, **SMALL}]
    if unknown:
        ap.error(f"unknown model(s): {', '.join(unknown)}")
    os.makedirs(args.out_dir, exist_ok=True)
    for name in names:
        t0 = time.perf_counter()
        model = {**STANDARD, **SMALL}[name]()
        path = os.path.join(args.out_dir, f"{name}.onnx")
        onnx.save(model, path)
        line = f"{path}: {len(model.graph.node)} nodes, {os.path.getsize(path) / 1e6:.2f} MB, " \
               f"{time.perf_counter() - t0:.1f} s"
        if args.report:
            stats = activation_report(model, _feeds(model, seed=99))
            line += " | " + ", ".join(f"{k}: std {s:.3g} max {m:.3g}" for k, (s, m) in stats.items())
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
