"""The numpy-first `vnpu` module: compile, load, infer with ctrl params, async, trace."""

import ctypes
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import vnpu
from vnpu import _lib


def test_struct_layouts_match_the_c_header():
    assert ctypes.sizeof(_lib.TensorShape) == 36
    assert ctypes.sizeof(_lib.TensorProperties) == 176
    assert ctypes.sizeof(_lib.SysMem) == 24
    assert ctypes.sizeof(_lib.Tensor) == 272
    assert ctypes.sizeof(_lib.CtrlParam) == 32


def test_version_and_library():
    assert vnpu.version()
    assert os.path.exists(vnpu.library_path())


def _x(seed=0):
    return np.random.default_rng(seed).random((1, 3, 64, 64), dtype=np.float32)


def test_compile_load_infer(tmp_path, classifier_onnx):
    out = vnpu.compile(classifier_onnx, tmp_path / "cls.bin", max_time_per_fc=1000, name="cls")
    pack = vnpu.load(out)
    assert len(pack) == 1
    m = pack["cls"]
    assert m.inputs[0].shape == (1, 3, 64, 64)
    assert m.inputs[0].dtype == np.float32
    (probs,) = m.infer(_x())
    assert probs.shape == tuple(m.outputs[0].shape)
    assert abs(float(probs.sum()) - 1.0) < 1e-4, "softmax output sums to 1"
    # The ONNX file loaded directly (compiled on load) gives the same numbers.
    (again,) = vnpu.load(classifier_onnx)[0].infer(_x())
    np.testing.assert_allclose(again, probs, rtol=1e-5, atol=1e-6)
    assert m.estimate_latency_us >= 0


def test_inputs_as_list_dict_and_other_dtype(classifier_onnx):
    m = vnpu.load(classifier_onnx)[0]
    ref = m.infer(_x(1))[0]
    name = m.inputs[0].name
    np.testing.assert_array_equal(m.infer([_x(1)])[0], ref)
    np.testing.assert_array_equal(m.infer({name: _x(1)})[0], ref)
    np.testing.assert_array_equal(m.infer(_x(1).astype(np.float64))[0], ref)


def test_ctrl_params_and_async_submit_wait(classifier_onnx):
    m = vnpu.load(classifier_onnx)[0]
    ref = [m.infer(_x(i))[0] for i in range(6)]
    tasks = [m.submit(_x(i), priority=[0, 255][i % 2], core_mask=0, custom_id=i) for i in range(6)]
    for i, t in enumerate(tasks):
        np.testing.assert_array_equal(t.wait()[0], ref[i])
        assert t.done()
    assert m.infer(_x(0), priority=255, custom_id=7)[0].shape == ref[0].shape


def test_packed_file_with_two_models(tmp_path, classifier_onnx, detector_onnx):
    out = vnpu.compile([detector_onnx, classifier_onnx], tmp_path / "pack.bin", max_time_per_fc=1000)
    pack = vnpu.load(out)
    assert sorted(m.name for m in pack) == ["tiny_classifier", "tiny_detector"]
    det = pack["tiny_detector"]
    x = np.zeros(det.inputs[0].shape, det.inputs[0].dtype)
    outs = det.infer(x)
    assert len(outs) == len(det.outputs)
    with pytest.raises(KeyError, match="tiny_classifier"):
        pack["nope"]


def test_errors_are_clear(tmp_path, classifier_onnx):
    m = vnpu.load(classifier_onnx)[0]
    with pytest.raises(ValueError, match="needs 49152 bytes"):
        m.infer(np.zeros((1, 3, 8, 8), np.float32))
    with pytest.raises(ValueError, match="0..=255"):
        m.infer(_x(), priority=300)
    with pytest.raises(ValueError, match="1 inputs"):
        m.infer([_x(), _x()])
    with pytest.raises(FileNotFoundError):
        vnpu.load(tmp_path / "missing.bin")
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"not a model at all" * 10)
    with pytest.raises(vnpu.VnpuError) as e:
        vnpu.load(bad)
    assert e.value.code != 0 and "hbDNNInitializeFromFiles" in str(e.value)
    with pytest.raises(RuntimeError, match="1000..=4294967295"):
        vnpu.compile(classifier_onnx, tmp_path / "x.bin", max_time_per_fc=5)


def test_trace_and_timeline(tmp_path, classifier_onnx):
    trace = tmp_path / "trace.json"
    code = (
        "import numpy as np, vnpu\n"
        f"vnpu.trace_to({str(trace)!r})\n"
        f"m = vnpu.load({classifier_onnx!r})[0]\n"
        "for i in range(3): m.infer(np.zeros((1, 3, 64, 64), np.float32), priority=i)\n"
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    events = json.loads(trace.read_text())["traceEvents"]
    assert events, "the trace has events"
    svg = vnpu.render_trace(trace, tmp_path / "t.svg")
    assert open(svg).read().lstrip().startswith("<")
