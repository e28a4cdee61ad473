"""`hobot_dnn.pyeasy_dnn`: a board Python sample's calls, unchanged."""

import numpy as np
import pytest

import vnpu
from hobot_dnn import pyeasy_dnn as dnn


@pytest.fixture(scope="module")
def nv12_model(tmp_path_factory, classifier_onnx):
    out = tmp_path_factory.mktemp("pyeasy") / "cls_nv12.bin"
    return vnpu.compile(classifier_onnx, out, max_time_per_fc=1000, input_type_rt="nv12",
                        input_layout_rt="NCHW", name="tiny_classifier")


def bgr2nv12(img):
    """The board samples' helper (OpenCV-free): BGR HxWx3 -> NV12 bytes."""
    h, w = img.shape[:2]
    b, g, r = [img[..., i].astype(np.float32) for i in range(3)]
    y = 0.299 * r + 0.587 * g + 0.114 * b
    u = (b - y) * 0.564 + 128
    v = (r - y) * 0.713 + 128
    uv = np.stack([u[::2, ::2], v[::2, ::2]], axis=-1).reshape(h // 2, w)
    return np.clip(np.concatenate([y, uv]), 0, 255).astype(np.uint8).reshape(-1)


def test_board_sample_flow(nv12_model):
    models = dnn.load(nv12_model)
    assert len(models) == 1
    p = models[0].inputs[0].properties
    assert p.tensor_type == "NV12"
    assert p.layout == "NCHW"
    assert p.shape == (1, 3, 64, 64)
    assert len(p.alignedShape) == 4
    assert p.quantiType == 0
    assert isinstance(p.scale_data, np.ndarray)
    h, w = p.shape[2], p.shape[3]
    img = (np.arange(h * w * 3) % 251).astype(np.uint8).reshape(h, w, 3)
    outputs = models[0].forward(bgr2nv12(img))
    assert len(outputs) == len(models[0].outputs)
    buf = outputs[0].buffer
    assert isinstance(buf, np.ndarray)
    assert buf.shape == outputs[0].properties.shape
    assert outputs[0].properties.tensor_type == "float32"
    assert abs(float(buf.sum()) - 1.0) < 1e-4
    # A list of arrays and core_id/priority work as on the board.
    again = models[0].forward([bgr2nv12(img)], core_id=0, priority=255)
    np.testing.assert_array_equal(again[0].buffer, buf)


def test_float_input_model(classifier_onnx):
    m = dnn.load(classifier_onnx)[0]
    p = m.inputs[0].properties
    assert p.tensor_type == "float32" and p.dtype == "float32"
    out = m.forward(np.zeros(p.shape, np.float32))
    assert out[0].buffer.shape == m.outputs[0].properties.shape
