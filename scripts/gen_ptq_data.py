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
  topology, 1x3x112x112, 1000 classes) and ``detector_160.onnx`` (the YOLOv8-style
  detector of gen_models.py, 1x3x160x160, 20 classes, output ``1x24xA``: cx, cy, w, h,
  then class scores), all with He-initialised seeded weights and BatchNorm statistics
  from a seeded random input (gen_models.py); the test compiles them f32 and PTQ int8.

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

import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_models  # noqa: E402
from gen_models import _basic_block, _finish  # noqa: E402
from onnx_builder import GraphBuilder  # noqa: E402

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
        "resnet18_112": lambda: resnet18_sized(112),
        "mobilenetv2_112": lambda: gen_models.mobilenetv2(size=112),
        "detector_160": lambda: gen_models.detector(size=160, nc=20),
    }
    for name, make in models.items():
        path = os.path.join(out, f"{name}.onnx")
        onnx.save(make(), path)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
