#!/usr/bin/env python3
"""Generate the benchmark models of `cargo bench --bench vnpu` (seeded random weights,
the structure of real exported networks; DESIGN §6 item 1, issue 12 item 1).

    scripts/venv.sh python3 scripts/gen_bench_models.py OUT_DIR
    scripts/venv.sh python3 scripts/gen_bench_models.py OUT_DIR --only dbnet_mv3 svtr_tiny

Written as ``OUT_DIR/<name>.onnx``:

* ``resnet18``, ``mobilenetv2``, ``unet_fpn``, ``detector`` (YOLOv8n at 224): the
  standard models of ``scripts/gen_models.py``
* ``yolov8n_640``  the same YOLOv8n-style detector at 640x640
* ``dbnet_mv3``    DBNet text detector, PaddleOCR ``det_mv3_db`` layout: MobileNetV3-large
  x0.5 backbone (ReLU/HardSwish, SE with HardSigmoid), DB-FPN neck (1x1 laterals,
  nearest 2x Resize + Add, 3x3 smoothing, Resize to 1/4, Concat), head Conv-BN-ReLU,
  two ConvTranspose 2x2/2 with BN, Sigmoid; ``1x3x640x640 -> 1x1x640x640``
* ``svtr_tiny``    SVTR-T text recogniser: two-conv patch embedding (BN + GELU), three
  stages of pre-LN transformer blocks (LayerNormalization, fused QKV MatMul, MatMul
  attention, Softmax, erf-GELU MLP; local mixing as an additive mask in the first two
  stages), 3x3 stride-(2,1) merging convs, height pooling, 1x1 conv + HardSwish, Linear
  to 6625 classes + Softmax; ``1x3x48x320 -> 1x80x6625``
* ``yolox_tiny``   YOLOX-tiny: Focus stem (strided Slices + Concat), CSP-Darknet with
  SiLU, SPP (MaxPool 5/9/13), PAFPN (Resize + Concat, strided convs), decoupled head
  (cls / reg / obj branches, Sigmoid), flattened to ``1x3549x85`` at 416x416
* ``crnn_bilstm``  CRNN OCR: VGG-style conv backbone (BN, ReLU, MaxPool) to height 1,
  two stacked bidirectional LSTM layers of hidden 256, Linear to 6625 classes + Softmax;
  ``1x3x32x320 -> 80x1x6625``

Weights are He-initialised from fixed seeds and BatchNorm statistics are calibrated on
a seeded input (``onnx_builder.calibrate_batchnorm``). Each model is checked by
``onnx.checker`` and run once on onnxruntime.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_models import _feeds, _finish, detector, mobilenetv2, resnet18, unet_fpn  # noqa: E402
from onnx_builder import GraphBuilder, run_ort  # noqa: E402

NEAREST_2X = dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")


def _div8(v: float) -> int:
    """MobileNet channel rounding (make_divisible by 8, never below 90 %)."""
    n = max(8, int(v + 4) // 8 * 8)
    return n + 8 if n < 0.9 * v else n


def _layernorm(b: GraphBuilder, x: str, d: int, name: str) -> str:
    with b.scope(name):
        g = b.const(b.rng.uniform(0.8, 1.2, d).astype(np.float32), "weight")
        be = b.const(b.rng.normal(0, 0.05, d).astype(np.float32), "bias")
        return b.op("LayerNormalization", [x, g, be], axis=-1, epsilon=1e-6)


def _gelu(b: GraphBuilder, x: str) -> str:
    """erf-GELU as exporters write it: x * 0.5 * (1 + erf(x / sqrt 2))."""
    with b.scope("gelu"):
        e = b.op("Erf", [b.op("Div", [x, b.f32(np.sqrt(2.0), "sqrt2")])])
        return b.op("Mul", [b.op("Mul", [x, b.op("Add", [e, b.f32(1.0, "one")])]), b.f32(0.5, "half")])


# ------------------------------------------------------------ DBNet (MobileNetV3)
#: MobileNetV3-large bottlenecks: kernel, expansion, out, SE, activation, stride.
MV3_LARGE = [
    (3, 16, 16, False, "relu", 1), (3, 64, 24, False, "relu", 2), (3, 72, 24, False, "relu", 1),
    (5, 72, 40, True, "relu", 2), (5, 120, 40, True, "relu", 1), (5, 120, 40, True, "relu", 1),
    (3, 240, 80, False, "hardswish", 2), (3, 200, 80, False, "hardswish", 1),
    (3, 184, 80, False, "hardswish", 1), (3, 184, 80, False, "hardswish", 1),
    (3, 480, 112, True, "hardswish", 1), (3, 672, 112, True, "hardswish", 1),
    (5, 672, 160, True, "hardswish", 2), (5, 960, 160, True, "hardswish", 1),
    (5, 960, 160, True, "hardswish", 1),
]


def _bneck(b: GraphBuilder, x: str, cin: int, exp: int, cout: int, k: int, se: bool, act: str,
           stride: int, name: str) -> str:
    with b.scope(name):
        y = x
        if exp != cin:
            y = b.conv_bn_act(y, cin, exp, 1, act=act, name="expand_conv")
        y = b.conv_bn_act(y, exp, exp, k, stride, groups=exp, act=act, name="bottleneck_conv")
        if se:
            with b.scope("mid_se"):
                mid = _div8(exp / 4)
                s = b.op("GlobalAveragePool", [y])
                s = b.relu(b.conv(s, exp, mid, 1, pad=0, name="conv1"))
                s = b.conv(s, mid, exp, 1, pad=0, gain=1.0, name="conv2")
                s = b.op("HardSigmoid", [s], alpha=0.2, beta=0.5)
                y = b.op("Mul", [y, s])
        y = b.conv_bn_act(y, exp, cout, 1, act=None, name="linear_conv")
        if stride == 1 and cin == cout:
            y = b.op("Add", [x, y])
        return y


def dbnet_mv3(seed: int = 40, size: int = 640, scale: float = 0.5, inner: int = 256) -> onnx.ModelProto:
    """DBNet with a MobileNetV3-large x0.5 backbone, DB-FPN neck and ConvTranspose head."""
    b = GraphBuilder("dbnet_mv3", seed, opset=14)
    x = b.input("x", [1, 3, size, size])
    feats, chans = [], []
    with b.scope("backbone"):
        c = _div8(16 * scale)
        y = b.conv_bn_act(x, 3, c, 3, 2, act="hardswish", name="conv")
        for i, (k, e, o, se, act, s) in enumerate(MV3_LARGE):
            if s == 2 and i > 2:
                feats.append(y)
                chans.append(c)
            e, o = _div8(scale * e), _div8(scale * o)
            y = _bneck(b, y, c, e, o, k, se, act, s, f"stage.{i}")
            c = o
        last = _div8(scale * 960)
        y = b.conv_bn_act(y, c, last, 1, act="hardswish", name="conv2")
        feats.append(y)
        chans.append(last)
    with b.scope("neck"):
        c2, c3, c4, c5 = (b.conv(f, ci, inner, 1, pad=0, bias=False, name=f"in{j + 2}_conv")
                          for j, (f, ci) in enumerate(zip(feats, chans)))
        scales = b.f32([1.0, 1.0, 2.0, 2.0], "scales")
        out4 = b.op("Add", [c4, b.op("Resize", [c5, "", scales], **NEAREST_2X)])
        out3 = b.op("Add", [c3, b.op("Resize", [out4, "", scales], **NEAREST_2X)])
        out2 = b.op("Add", [c2, b.op("Resize", [out3, "", scales], **NEAREST_2X)])
        ps = [b.conv(t, inner, inner // 4, 3, bias=False, name=f"p{j + 2}_conv")
              for j, t in enumerate([out2, out3, out4, c5])]
        ups = [ps[0]]
        for j, p in enumerate(ps[1:], start=1):
            f = float(2 ** j)
            ups.append(b.op("Resize", [p, "", b.f32([1.0, 1.0, f, f], f"scales{j}")], **NEAREST_2X))
        y = b.op("Concat", ups, axis=1)
    with b.scope("head.binarize"):
        q = inner // 4
        y = b.conv_bn_act(y, inner, q, 3, act="relu", name="conv1")
        y = b.conv_transpose(y, q, q, 2, 2, name="conv2")
        y = b.relu(b.batchnorm(y, q, name="conv_bn2"))
        y = b.conv_transpose(y, q, 1, 2, 2, name="conv3")
        y = b.op("Sigmoid", [y])
    b.output(y, name="maps")
    return _finish(b, "DBNet text detector: MobileNetV3-large x0.5, DB-FPN, ConvTranspose head")


# ------------------------------------------------------------------ SVTR-tiny
def _svtr_block(b: GraphBuilder, x: str, n: int, d: int, heads: int, mask: str | None, name: str) -> str:
    dh = d // heads
    with b.scope(name):
        h = _layernorm(b, x, d, "norm1")
        with b.scope("mixer"):
            qkv = b.linear(h, d, 3 * d, name="qkv")
            qkv = b.op("Transpose", [b.reshape(qkv, [1, n, 3, heads, dh])], perm=[2, 0, 3, 1, 4])
            q, k, v = (b.squeeze(t, [0]) for t in b.split(qkv, [1, 1, 1], axis=0))
            q = b.op("Mul", [q, b.f32(dh ** -0.5, "scale")])
            a = b.op("MatMul", [q, b.op("Transpose", [k], perm=[0, 1, 3, 2])])
            if mask is not None:
                a = b.op("Add", [a, mask])
            a = b.op("Softmax", [a], axis=-1)
            o = b.op("Transpose", [b.op("MatMul", [a, v])], perm=[0, 2, 1, 3])
            o = b.linear(b.reshape(o, [1, n, d]), d, d, name="proj")
        x = b.op("Add", [x, o])
        h = _layernorm(b, x, d, "norm2")
        with b.scope("mlp"):
            f = _gelu(b, b.linear(h, d, 4 * d, name="fc1"))
            f = b.linear(f, 4 * d, d, name="fc2")
        return b.op("Add", [x, f])


def _local_mask(h: int, w: int, kh: int = 7, kw: int = 11) -> np.ndarray:
    """SVTR local mixing: each token attends to a kh x kw window (additive -inf mask)."""
    ys, xs = np.divmod(np.arange(h * w), w)
    near = (np.abs(ys[:, None] - ys[None]) <= kh // 2) & (np.abs(xs[:, None] - xs[None]) <= kw // 2)
    return np.where(near, 0.0, -1e4).astype(np.float32)[None, None]


def svtr_tiny(seed: int = 41, height: int = 48, width: int = 320, classes: int = 6625) -> onnx.ModelProto:
    """SVTR-T recogniser (dims 64/128/256, depths 3/6/3, heads 2/4/8; local, local, global)."""
    b = GraphBuilder("svtr_tiny", seed, opset=17)
    x = b.input("x", [1, 3, height, width])
    dims, depths, heads = [64, 128, 256], [3, 6, 3], [2, 4, 8]
    with b.scope("patch_embed"):
        y = b.conv(x, 3, dims[0] // 2, 3, 2, bias=False, name="proj.0.conv")
        y = _gelu(b, b.batchnorm(y, dims[0] // 2, name="proj.0.norm"))
        y = b.conv(y, dims[0] // 2, dims[0], 3, 2, bias=False, name="proj.1.conv")
        y = _gelu(b, b.batchnorm(y, dims[0], name="proj.1.norm"))
    h, w = height // 4, width // 4
    y = b.op("Transpose", [b.reshape(y, [1, dims[0], h * w])], perm=[0, 2, 1])  # 1 x N x C
    y = b.op("Add", [y, b.const(b.rng.normal(0, 0.02, (1, h * w, dims[0])).astype(np.float32), "pos_embed")])
    for s, (d, depth, nh) in enumerate(zip(dims, depths, heads)):
        n = h * w
        mask = b.const(_local_mask(h, w), f"mask{s}") if s < 2 else None
        for i in range(depth):
            y = _svtr_block(b, y, n, d, nh, mask, f"blocks{s + 1}.{i}")
        if s < 2:
            with b.scope(f"sub_sample{s + 1}"):
                img = b.reshape(b.op("Transpose", [y], perm=[0, 2, 1]), [1, d, h, w])
                img = b.conv(img, d, dims[s + 1], 3, (2, 1), name="conv")
                h //= 2
                y = b.op("Transpose", [b.reshape(img, [1, dims[s + 1], h * w])], perm=[0, 2, 1])
                y = _layernorm(b, y, dims[s + 1], "norm")
    y = _layernorm(b, y, dims[-1], "norm")
    with b.scope("last_stage"):
        img = b.reshape(b.op("Transpose", [y], perm=[0, 2, 1]), [1, dims[-1], h, w])
        img = b.op("AveragePool", [img], kernel_shape=[h, 1], strides=[h, 1])  # 1 x C x 1 x W
        img = b.hardswish(b.conv(img, dims[-1], 192, 1, pad=0, bias=False, name="last_conv"))
        y = b.op("Transpose", [b.squeeze(img, [2])], perm=[0, 2, 1])  # 1 x W x 192
    with b.scope("head"):
        y = b.op("Softmax", [b.linear(y, 192, classes, name="fc")], axis=2)
    b.output(y, name="probs")
    return _finish(b, "SVTR-T text recogniser: conv patch embed, local/global transformer mixing")


# ------------------------------------------------------------------ YOLOX-tiny
def _csp(b: GraphBuilder, x: str, cin: int, cout: int, n: int, shortcut: bool, name: str) -> str:
    """YOLOX CSPLayer: two 1x1 branches, n bottlenecks (1x1, 3x3) on one, Concat, 1x1."""
    h = cout // 2
    with b.scope(name):
        a = b.conv_bn_act(x, cin, h, 1, act="silu", name="conv1")
        c = b.conv_bn_act(x, cin, h, 1, act="silu", name="conv2")
        for i in range(n):
            with b.scope(f"m.{i}"):
                z = b.conv_bn_act(a, h, h, 1, act="silu", name="conv1")
                z = b.conv_bn_act(z, h, h, 3, act="silu", name="conv2")
                a = b.op("Add", [z, a]) if shortcut else z
        return b.conv_bn_act(b.op("Concat", [a, c], axis=1), 2 * h, cout, 1, act="silu", name="conv3")


def yolox_tiny(seed: int = 42, size: int = 416, nc: int = 80, depth: float = 0.33,
               width: float = 0.375) -> onnx.ModelProto:
    """YOLOX-tiny: Focus, CSP-Darknet (SiLU), SPP, PAFPN, decoupled head, ``1 x A x (5 + nc)``."""
    b = GraphBuilder("yolox_tiny", seed, opset=13)
    x = b.input("images", [1, 3, size, size])
    c = [int(v * width) for v in (64, 128, 256, 512, 1024)]
    n = max(round(3 * depth), 1)
    with b.scope("backbone.backbone"):
        with b.scope("stem"):
            sl = []
            for y0, x0 in [(0, 0), (1, 0), (0, 1), (1, 1)]:
                sl.append(b.op("Slice", [x, b.i64([y0, x0], "starts"), b.i64([size, size], "ends"),
                                         b.i64([2, 3], "axes"), b.i64([2, 2], "steps")]))
            y = b.conv_bn_act(b.op("Concat", sl, axis=1), 12, c[0], 3, act="silu", name="conv")
        y = b.conv_bn_act(y, c[0], c[1], 3, 2, act="silu", name="dark2.0")
        y = _csp(b, y, c[1], c[1], n, True, "dark2.1")
        y = b.conv_bn_act(y, c[1], c[2], 3, 2, act="silu", name="dark3.0")
        d3 = _csp(b, y, c[2], c[2], 3 * n, True, "dark3.1")
        y = b.conv_bn_act(d3, c[2], c[3], 3, 2, act="silu", name="dark4.0")
        d4 = _csp(b, y, c[3], c[3], 3 * n, True, "dark4.1")
        y = b.conv_bn_act(d4, c[3], c[4], 3, 2, act="silu", name="dark5.0")
        with b.scope("dark5.1"):
            y = b.conv_bn_act(y, c[4], c[4] // 2, 1, act="silu", name="conv1")
            pools = [b.op("MaxPool", [y], kernel_shape=[k, k], strides=[1, 1], pads=[k // 2] * 4)
                     for k in (5, 9, 13)]
            y = b.conv_bn_act(b.op("Concat", [y] + pools, axis=1), 2 * c[4], c[4], 1, act="silu", name="conv2")
        d5 = _csp(b, y, c[4], c[4], n, False, "dark5.2")
    scales = b.f32([1.0, 1.0, 2.0, 2.0], "scales")
    with b.scope("backbone"):
        f0 = b.conv_bn_act(d5, c[4], c[3], 1, act="silu", name="lateral_conv0")
        up = b.op("Resize", [f0, "", scales], **NEAREST_2X)
        f1 = _csp(b, b.op("Concat", [up, d4], axis=1), c[4], c[3], n, False, "C3_p4")
        f1 = b.conv_bn_act(f1, c[3], c[2], 1, act="silu", name="reduce_conv1")
        up = b.op("Resize", [f1, "", scales], **NEAREST_2X)
        p3 = _csp(b, b.op("Concat", [up, d3], axis=1), c[3], c[2], n, False, "C3_p3")
        y = b.conv_bn_act(p3, c[2], c[2], 3, 2, act="silu", name="bu_conv2")
        p4 = _csp(b, b.op("Concat", [y, f1], axis=1), c[3], c[3], n, False, "C3_n3")
        y = b.conv_bn_act(p4, c[3], c[3], 3, 2, act="silu", name="bu_conv1")
        p5 = _csp(b, b.op("Concat", [y, f0], axis=1), c[4], c[4], n, False, "C3_n4")
    hid = int(256 * width)
    outs = []
    with b.scope("head"):
        for i, (f, ci) in enumerate([(p3, c[2]), (p4, c[3]), (p5, c[4])]):
            s = b.conv_bn_act(f, ci, hid, 1, act="silu", name=f"stems.{i}")
            with b.scope(f"cls_convs.{i}"):
                cl = b.conv_bn_act(s, hid, hid, 3, act="silu", name="0")
                cl = b.conv_bn_act(cl, hid, hid, 3, act="silu", name="1")
            with b.scope(f"reg_convs.{i}"):
                rg = b.conv_bn_act(s, hid, hid, 3, act="silu", name="0")
                rg = b.conv_bn_act(rg, hid, hid, 3, act="silu", name="1")
            reg = b.conv(rg, hid, 4, 1, pad=0, gain=1.0, name=f"reg_preds.{i}")
            obj = b.op("Sigmoid", [b.conv(rg, hid, 1, 1, pad=0, gain=1.0, name=f"obj_preds.{i}")])
            cls = b.op("Sigmoid", [b.conv(cl, hid, nc, 1, pad=0, gain=1.0, name=f"cls_preds.{i}")])
            g = size // (8 << i)
            outs.append(b.reshape(b.op("Concat", [reg, obj, cls], axis=1), [1, 5 + nc, g * g]))
        y = b.op("Transpose", [b.op("Concat", outs, axis=2)], perm=[0, 2, 1])
    b.output(y, name="output")
    return _finish(b, "YOLOX-tiny detector: Focus, CSP-Darknet with SiLU, PAFPN, decoupled head")


# ------------------------------------------------------------ CRNN + BiLSTM
def crnn_bilstm(seed: int = 43, height: int = 32, width: int = 320, hidden: int = 256,
                classes: int = 6625) -> onnx.ModelProto:
    """CRNN: VGG-style conv backbone to height 1, 2 stacked BiLSTM(256), Linear + Softmax."""
    b = GraphBuilder("crnn_bilstm", seed, opset=13)
    x = b.input("x", [1, 3, height, width])
    with b.scope("backbone"):
        y = b.conv_bn_act(x, 3, 64, 3, name="0")
        y = b.op("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])               # 16 x 160
        y = b.conv_bn_act(y, 64, 128, 3, name="1")
        y = b.op("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])               # 8 x 80
        y = b.conv_bn_act(y, 128, 256, 3, name="2")
        y = b.conv_bn_act(y, 256, 256, 3, name="3")
        y = b.op("MaxPool", [y], kernel_shape=[2, 1], strides=[2, 1])               # 4 x 80
        y = b.conv_bn_act(y, 256, 256, 3, name="4")
        y = b.conv_bn_act(y, 256, 256, 3, name="5")
        y = b.op("MaxPool", [y], kernel_shape=[2, 1], strides=[2, 1])               # 2 x 80
        y = b.conv_bn_act(y, 256, 256, (2, 1), pad=[0, 0, 0, 0], name="6")          # 1 x 80
    t = width // 4
    with b.scope("neck"):
        y = b.op("Transpose", [b.squeeze(y, [2])], perm=[2, 0, 1])                   # T x 1 x 256
    fin = 256
    kk = 1.0 / np.sqrt(hidden)
    for layer in range(2):
        with b.scope(f"rnn.{layer}"):
            w = b.const(b.rng.uniform(-kk, kk, (2, 4 * hidden, fin)).astype(np.float32), "weight_ih")
            r = b.const(b.rng.uniform(-kk, kk, (2, 4 * hidden, hidden)).astype(np.float32), "weight_hh")
            bias = b.const(b.rng.uniform(-kk, kk, (2, 8 * hidden)).astype(np.float32), "bias")
            yseq, _, _ = b.op("LSTM", [y, w, r, bias], n_out=3, direction="bidirectional", hidden_size=hidden)
            y = b.reshape(b.op("Transpose", [yseq], perm=[0, 2, 1, 3]), [t, 1, 2 * hidden])
            fin = 2 * hidden
    with b.scope("head"):
        y = b.op("Softmax", [b.linear(y, 2 * hidden, classes, name="fc")], axis=2)
    b.output(y, name="probs")
    return _finish(b, "CRNN OCR: VGG-style CNN + 2-layer BiLSTM(256) + 6625-class Softmax")


MODELS = {
    "resnet18": resnet18,
    "mobilenetv2": mobilenetv2,
    "unet_fpn": unet_fpn,
    "detector": detector,
    "yolov8n_640": lambda: _renamed(detector(size=640), "yolov8n_640"),
    "dbnet_mv3": dbnet_mv3,
    "svtr_tiny": svtr_tiny,
    "yolox_tiny": yolox_tiny,
    "crnn_bilstm": crnn_bilstm,
}


def _renamed(model: onnx.ModelProto, name: str) -> onnx.ModelProto:
    model.graph.name = name
    return model


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--only", nargs="+", metavar="NAME", choices=list(MODELS), help="generate only these")
    ap.add_argument("--missing", action="store_true", help="skip models whose file already exists")
    args = ap.parse_args(argv)
    os.makedirs(args.out_dir, exist_ok=True)
    for name in args.only or list(MODELS):
        path = os.path.join(args.out_dir, f"{name}.onnx")
        if args.missing and os.path.exists(path):
            continue
        t0 = time.perf_counter()
        model = MODELS[name]()
        outs = run_ort(model, _feeds(model, seed=99))
        tmp = path + ".tmp"
        onnx.save(model, tmp)
        os.replace(tmp, path)
        shapes = ", ".join("x".join(map(str, o.shape)) for o in outs)
        print(f"{path}: {len(model.graph.node)} nodes, {os.path.getsize(path) / 1e6:.2f} MB, "
              f"output {shapes}, {time.perf_counter() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
