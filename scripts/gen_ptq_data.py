#!/usr/bin/env python3
"""Data for the PTQ accuracy checks (tests/ptq.rs): real images and f32 models.

    scripts/venv.sh python3 scripts/gen_ptq_data.py [OUT_DIR]      # default build/ptq

Writes into OUT_DIR:

* ``images/``  the sample photographs shipped inside the scikit-image wheel
  (``skimage/data/*.png|jpg``: astronaut, camera, coffee, chelsea, rocket, ...). The wheel
  is fetched with ``pip download scikit-image==0.26.0 --no-deps`` (the package registry,
  nothing else) into ``OUT_DIR/wheels/`` unless ``--wheel FILE`` names one; nothing is
  installed, the images are read straight out of the zip.
* ``resnet18_112.onnx``, ``mobilenetv2_112.onnx``  classifiers (ResNet-18 / MobileNetV2
  topology, 1x3x112x112, 10 classes) and ``detector_160.onnx`` (the YOLOv8-style
  detector of gen_models.py, 1x3x160x160, 20 classes, output ``1x24xA``: cx, cy, w, h,
  then class scores); the test compiles them f32 and PTQ int8.

No trained weights are available offline, so the nets are random but set up the way a
trained net looks to a quantiser: He-initialised seeded weights; every BatchNorm's running
statistics measured on image-like inputs (1/f "pink" noise with correlated colour
channels, averaged over 8 of them, instead of white noise, whose statistics real photos
do not share); the last BatchNorm of each ResNet residual branch with gamma 0.2 (the
small-residual init torchvision offers as ``zero_init_residual``, not quite zero); 10
classes rather than 1000 (a random 1000-way head has top-2 logit gaps of ~0.2 std, far
inside any quantisation noise).

Decoding, cropping and normalising the images is done by the Rust test itself (with the
decoders vnpu already has), so this script needs only numpy and onnx.
"""

from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import zipfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_models  # noqa: E402
from gen_models import _basic_block, _finish  # noqa: E402
from onnx_builder import GraphBuilder, ort_session  # noqa: E402

SKIMAGE = "scikit-image==0.26.0"


def resnet18_sized(size: int, seed: int = 18) -> onnx.ModelProto:
    """gen_models.resnet18 at another input size."""
    b = GraphBuilder("resnet18", seed, opset=13)
    x = b.input("input", [1, 3, size, size])
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
    return _finish(b, f"ResNet-18 at {size}x{size}, seeded random weights")


def pink_noise(rng: np.random.Generator, size: int) -> np.ndarray:
    """A 1x3xSxS image-like tensor: 1/f amplitude spectrum, shared luminance plus
    weaker per-channel colour, each channel at mean 0 and std 1 (ImageNet-normalised)."""
    fy = np.fft.fftfreq(size)[:, None]
    fx = np.fft.fftfreq(size)[None, :]
    amp = 1.0 / np.maximum(np.hypot(fx, fy), 1.0 / size)

    def field() -> np.ndarray:
        spec = amp * (rng.standard_normal((size, size)) + 1j * rng.standard_normal((size, size)))
        f = np.real(np.fft.ifft2(spec))
        return (f - f.mean()) / (f.std() + 1e-9)

    lum = field()
    x = np.stack([lum + 0.35 * field() for _ in range(3)])
    x = (x - x.mean(axis=(1, 2), keepdims=True)) / x.std(axis=(1, 2), keepdims=True)
    return x[None].astype(np.float32)


def calibrate_bn_images(model: onnx.ModelProto, size: int, n: int = 8, seed: int = 7) -> onnx.ModelProto:
    """BatchNorm running statistics averaged over ``n`` pink-noise inputs (waves as in
    onnx_builder.calibrate_batchnorm, one ORT run per input and wave)."""
    rng = np.random.default_rng(seed)
    feeds = [pink_noise(rng, size) for _ in range(n)]
    name = model.graph.input[0].name
    model = onnx.ModelProto.FromString(model.SerializeToString())
    inits = {t.name: t for t in model.graph.initializer}
    bns = [nd for nd in model.graph.node if nd.op_type == "BatchNormalization"]
    producers = {o: nd for nd in model.graph.node for o in nd.output}
    memo: dict = {}

    def upstream(value: str) -> set:
        if value in memo:
            return memo[value]
        memo[value] = set()
        nd = producers.get(value)
        found: set = set()
        if nd is not None:
            for x in nd.input:
                if x:
                    found |= upstream(x)
            if nd.op_type == "BatchNormalization":
                found.add(nd.name)
        memo[value] = found
        return found

    deps = {bn.name: upstream(bn.input[0]) for bn in bns}
    done: set = set()
    while len(done) < len(bns):
        wave = [bn for bn in bns if bn.name not in done and deps[bn.name] <= done]
        probe = onnx.ModelProto.FromString(model.SerializeToString())
        del probe.graph.output[:]
        for bn in wave:
            probe.graph.output.append(helper.make_tensor_value_info(bn.input[0], TensorProto.FLOAT, None))
        sess = ort_session(probe, reference=False)
        sums = None
        for f in feeds:
            acts = sess.run(None, {name: f})
            m = [(a.mean(axis=(0, 2, 3) if a.ndim == 4 else 0), (a.astype(np.float64) ** 2).mean(
                axis=(0, 2, 3) if a.ndim == 4 else 0)) for a in acts]
            sums = m if sums is None else [(s0 + a0, s1 + a1) for (s0, s1), (a0, a1) in zip(sums, m)]
        for bn, (s0, s1) in zip(wave, sums, strict=True):
            mean = s0 / len(feeds)
            var = np.maximum(s1 / len(feeds) - mean ** 2, 0) + 1e-3
            for idx, arr in ((3, mean), (4, var)):
                t = inits[bn.input[idx]]
                t.CopyFrom(numpy_helper.from_array(arr.astype(np.float16).astype(np.float32), t.name))
            done.add(bn.name)
    return model


def scale_bn_gamma(model: onnx.ModelProto, suffix: str, factor: float) -> onnx.ModelProto:
    """Multiplies the gamma (and beta) of BatchNorms whose weight name ends in ``suffix``."""
    inits = {t.name: t for t in model.graph.initializer}
    for nd in model.graph.node:
        if nd.op_type == "BatchNormalization" and nd.input[1].endswith(suffix):
            for idx in (1, 2):
                t = inits[nd.input[idx]]
                t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) * np.float32(factor), t.name))
    return model


def shrink_head(model: onnx.ModelProto, classes: int) -> onnx.ModelProto:
    """Keeps the first ``classes`` outputs of the final Gemm (weights, bias, output shape)."""
    inits = {t.name: t for t in model.graph.initializer}
    gemm = [nd for nd in model.graph.node if nd.op_type == "Gemm"][-1]
    trans_b = any(a.name == "transB" and a.i == 1 for a in gemm.attribute)
    w = numpy_helper.to_array(inits[gemm.input[1]])
    w = w[:classes] if trans_b else w[:, :classes]
    inits[gemm.input[1]].CopyFrom(numpy_helper.from_array(np.ascontiguousarray(w), gemm.input[1]))
    if len(gemm.input) > 2:
        c = numpy_helper.to_array(inits[gemm.input[2]])[:classes]
        inits[gemm.input[2]].CopyFrom(numpy_helper.from_array(c, gemm.input[2]))
    for o in model.graph.output:
        o.type.tensor_type.shape.dim[-1].dim_value = classes
    return model


def fetch_images(out: str, wheel: str | None) -> int:
    if wheel is None:
        wdir = os.path.join(out, "wheels")
        found = sorted(glob.glob(os.path.join(wdir, "scikit_image-*.whl")))
        if not found:
            os.makedirs(wdir, exist_ok=True)
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", wdir, SKIMAGE],
                           check=True)
            found = sorted(glob.glob(os.path.join(wdir, "scikit_image-*.whl")))
        wheel = found[-1]
    idir = os.path.join(out, "images")
    os.makedirs(idir, exist_ok=True)
    n = 0
    with zipfile.ZipFile(wheel) as z:
        for name in sorted(z.namelist()):
            base = os.path.basename(name)
            if not name.startswith("skimage/data/") or not base.lower().endswith((".png", ".jpg", ".jpeg")):
                continue
            with open(os.path.join(idir, base), "wb") as f:
                f.write(z.read(name))
            n += 1
    print(f"{n} images from {os.path.basename(wheel)} -> {idir}")
    return n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", default=os.path.join(os.path.dirname(__file__), "..", "build", "ptq"))
    ap.add_argument("--wheel", help="a scikit-image wheel already on disk")
    a = ap.parse_args(argv)
    out = os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)
    fetch_images(out, a.wheel)
    models = {
        "resnet18_112": lambda: calibrate_bn_images(
            scale_bn_gamma(shrink_head(resnet18_sized(112), 10), ".bn2.weight", 0.2), 112),
        "mobilenetv2_112": lambda: calibrate_bn_images(shrink_head(gen_models.mobilenetv2(size=112), 10), 112),
        "detector_160": lambda: calibrate_bn_images(gen_models.detector(size=160, nc=20), 160),
    }
    for name, make in models.items():
        path = os.path.join(out, f"{name}.onnx")
        m = make()
        onnx.checker.check_model(m, full_check=True)
        onnx.save(m, path)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
