"""pytest setup for the Python package: uses the library and CLI of this checkout's
cargo build (target/debug, as scripts/test.sh builds) unless VNPU_LIBRARY / VNPU_CLI say
otherwise, and the package from python/ unless it is installed."""

import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for prof in ("debug", "release"):
    lib = os.path.join(REPO, "target", prof, "libvnpu.so")
    if "VNPU_LIBRARY" not in os.environ and os.path.exists(lib):
        os.environ["VNPU_LIBRARY"] = lib
        cli = os.path.join(REPO, "target", prof, "vnpu")
        if os.path.exists(cli):
            os.environ.setdefault("VNPU_CLI", cli)
sys.path.insert(0, os.path.join(REPO, "python"))


@pytest.fixture(scope="session")
def models_dir():
    return os.path.join(REPO, "models")


@pytest.fixture(scope="session")
def classifier_onnx(models_dir):
    return os.path.join(models_dir, "tiny_classifier.onnx")


@pytest.fixture(scope="session")
def detector_onnx(models_dir):
    return os.path.join(models_dir, "tiny_detector.onnx")
