"""`hobot_dnn.pyeasy_dnn` as on the boards, over vnpu: board Python samples run unchanged.

    from hobot_dnn import pyeasy_dnn as dnn
    models = dnn.load("model.bin")
    p = models[0].inputs[0].properties        # tensor_type, dtype, layout, shape, alignedShape,
                                              # validShape, scale_data, quantiType, quantizeAxis
    outputs = models[0].forward(nv12_bytes)   # array or list of arrays
    outputs[0].buffer                         # numpy array
"""

from __future__ import annotations

import numpy as np

import vnpu

__all__ = ["load", "Model", "pyDNNTensor", "TensorProperties"]


class TensorProperties:
    """Properties of one input/output tensor, named as on the board."""

    def __init__(self, info: vnpu.TensorInfo):
        self.tensor_type = info.type_name
        self.dtype = np.dtype(info.dtype).name
        self.layout = info.layout
        self.shape = tuple(info.shape)
        self.validShape = tuple(info.shape)
        self.alignedShape = tuple(info.aligned_shape)
        self.scale_data = info.scale
        self.shift_data = info.shift
        self.quantiType = info.quanti_type
        self.quantizeAxis = info.quantize_axis
        self.alignedByteSize = info.aligned_byte_size

    def __repr__(self):
        return (f"TensorProperties(tensor_type={self.tensor_type!r}, layout={self.layout!r}, "
                f"shape={self.shape}, alignedShape={self.alignedShape})")


class pyDNNTensor:
    """An input/output description, or (from `forward`) an output with its `.buffer`."""

    def __init__(self, info: vnpu.TensorInfo, buffer=None):
        self.name = info.name
        self.properties = TensorProperties(info)
        self.buffer = buffer

    def __repr__(self):
        return f"pyDNNTensor({self.name!r}, {self.properties!r})"


class Model:
    """One model of a loaded file."""

    def __init__(self, model: vnpu.Model):
        self._m = model
        self.name = model.name
        self.inputs = tuple(pyDNNTensor(i) for i in model.inputs)
        self.outputs = tuple(pyDNNTensor(o) for o in model.outputs)
        self.estimate_latency = model.estimate_latency_us

    def forward(self, input_tensor, core_id: int = 0, priority: int = 0):
        """Runs the model on one array (one input) or a list of arrays; returns a tuple of
        output tensors whose `.buffer` is a numpy array of the output's shape."""
        outs = self._m.infer(input_tensor, priority=priority, core_mask=core_id)
        return tuple(pyDNNTensor(info, buf) for info, buf in zip(self._m.outputs, outs))


def load(model_file):
    """Loads a model file (or a list of files) and returns its models as a list."""
    pack = vnpu.load(model_file)
    return [Model(m) for m in pack]
