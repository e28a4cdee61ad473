"""Packed model files, models and tasks over the hbDNN C calls, with numpy buffers."""

from __future__ import annotations

import ctypes
import os

import numpy as np

from . import _lib as L
from ._lib import check

#: hbDNNDataType value -> (board name, numpy dtype).
TENSOR_TYPES = {
    0: ("Y", np.uint8), 1: ("NV12", np.uint8), 2: ("NV12_SEPARATE", np.uint8),
    3: ("YUV444", np.uint8), 4: ("RGB", np.uint8), 5: ("BGR", np.uint8),
    6: ("int4", np.int8), 7: ("uint4", np.uint8), 8: ("int8", np.int8), 9: ("uint8", np.uint8),
    10: ("float16", np.float16), 11: ("int16", np.int16), 12: ("uint16", np.uint16),
    13: ("float32", np.float32), 14: ("int32", np.int32), 15: ("uint32", np.uint32),
    16: ("float64", np.float64), 17: ("int64", np.int64), 18: ("uint64", np.uint64),
}
#: hbDNNTensorLayout value -> name.
LAYOUTS = {0: "NHWC", 2: "NCHW", 255: "NONE"}
#: HB_DNN_TIMEOUT
TIMEOUT = -6000008


class TensorInfo:
    """One input or output of a model, as the C API describes it."""

    def __init__(self, name: str, props: L.TensorProperties):
        self.name = name
        self.raw = props
        self.shape = props.validShape.dims()
        self.aligned_shape = props.alignedShape.dims()
        self.tensor_type = int(props.tensorType)
        self.type_name, self.dtype = TENSOR_TYPES.get(self.tensor_type, ("unknown", np.uint8))
        self.layout = LAYOUTS.get(int(props.tensorLayout), str(props.tensorLayout))
        self.quanti_type = int(props.quantiType)
        self.quantize_axis = int(props.quantizeAxis)
        self.aligned_byte_size = int(props.alignedByteSize)
        n = int(props.scale.scaleLen)
        self.scale = np.array([props.scale.scaleData[i] for i in range(n)], dtype=np.float32)
        n = int(props.shift.shiftLen)
        self.shift = np.array([props.shift.shiftData[i] for i in range(n)], dtype=np.uint8)

    @property
    def is_image(self) -> bool:
        """True for image inputs (Y, NV12, YUV444, RGB, BGR): bytes, not typed elements."""
        return self.tensor_type <= 5

    def __repr__(self):
        return f"TensorInfo({self.name!r}, {self.type_name}, {self.layout}, shape={self.shape})"


class _Mem:
    """An hbSysMem block that frees itself."""

    def __init__(self, size: int):
        self.mem = L.SysMem()
        check("hbSysAllocCachedMem", L.lib().hbSysAllocCachedMem(ctypes.byref(self.mem), max(size, 1)))
        self.size = size

    def view(self) -> np.ndarray:
        buf = (ctypes.c_uint8 * self.size).from_address(self.mem.virAddr)
        return np.ctypeslib.as_array(buf)

    def free(self):
        if self.mem.virAddr:
            L.lib().hbSysFreeMem(ctypes.byref(self.mem))
            self.mem.virAddr = None

    def __del__(self):
        self.free()


class Task:
    """A submitted inference: `wait()` returns the outputs (a list of numpy arrays)."""

    def __init__(self, model, handle, in_mems, out_mems, keep):
        self.model = model
        self._handle = handle
        self._in = in_mems
        self._out = out_mems
        self._keep = keep
        self._result = None

    def wait(self, timeout_ms: int = 0):
        """Waits for the task (0 = no limit) and returns its outputs. A timeout raises
        TimeoutError and leaves the task running; a failed task raises VnpuError."""
        if self._result is not None:
            return self._result
        lib = L.lib()
        rc = lib.hbDNNWaitTaskDone(self._handle, int(timeout_ms))
        if rc == TIMEOUT:
            raise TimeoutError(f"task of model '{self.model.name}' not done after {timeout_ms} ms")
        lib.hbDNNReleaseTask(self._handle)
        self._handle = None
        check("hbDNNWaitTaskDone", rc)
        outs = []
        for info, mem in zip(self.model.outputs, self._out):
            raw = mem.view()
            arr = raw.view(info.dtype).copy()
            full = info.aligned_shape if arr.size == int(np.prod(info.aligned_shape)) else info.shape
            arr = arr.reshape(full)
            if full != info.shape:
                arr = arr[tuple(slice(0, d) for d in info.shape)]
            outs.append(arr)
        for m in self._in + self._out:
            m.free()
        self._result = outs
        return outs

    def done(self) -> bool:
        """True when the task has finished (polls without blocking)."""
        if self._result is not None:
            return True
        try:
            self.wait(timeout_ms=1)
            return True
        except TimeoutError:
            return False

    def __del__(self):
        if self._handle is not None:
            try:
                L.lib().hbDNNWaitTaskDone(self._handle, 0)
                L.lib().hbDNNReleaseTask(self._handle)
            except Exception:  # interpreter shutdown
                pass


class Model:
    """One model of a loaded file."""

    def __init__(self, pack, name: str, handle):
        self._pack = pack  # keeps the packed handle alive
        self.name = name
        self._h = handle
        lib = L.lib()
        self.inputs = self._infos(lib.hbDNNGetInputCount, lib.hbDNNGetInputName,
                                  lib.hbDNNGetInputTensorProperties)
        self.outputs = self._infos(lib.hbDNNGetOutputCount, lib.hbDNNGetOutputName,
                                   lib.hbDNNGetOutputTensorProperties)

    def _infos(self, count_fn, name_fn, props_fn):
        n = ctypes.c_int32()
        check("hbDNNGet*Count", count_fn(ctypes.byref(n), self._h))
        infos = []
        for i in range(n.value):
            name = ctypes.c_char_p()
            check("hbDNNGet*Name", name_fn(ctypes.byref(name), self._h, i))
            p = L.TensorProperties()
            check("hbDNNGet*TensorProperties", props_fn(ctypes.byref(p), self._h, i))
            infos.append(TensorInfo(name.value.decode(), p))
        return infos

    @property
    def estimate_latency_us(self) -> int:
        """The compiler's latency estimate in µs."""
        v = ctypes.c_int32()
        check("hbDNNGetEstimateLatency", L.lib().hbDNNGetEstimateLatency(ctypes.byref(v), self._h))
        return v.value

    def _fill(self, info: TensorInfo, data) -> "_Mem":
        arr = np.ascontiguousarray(data)
        mem = _Mem(info.aligned_byte_size)
        dst = mem.view()
        if info.is_image:
            raw = arr.astype(np.uint8, copy=False).reshape(-1).view(np.uint8)
        else:
            if arr.dtype != info.dtype:
                arr = arr.astype(info.dtype)
            if arr.size == int(np.prod(info.shape)) and info.shape != info.aligned_shape:
                padded = np.zeros(info.aligned_shape, dtype=info.dtype)
                padded[tuple(slice(0, d) for d in info.shape)] = arr.reshape(info.shape)
                arr = padded
            raw = arr.reshape(-1).view(np.uint8)
        if raw.size != info.aligned_byte_size:
            mem.free()
            raise ValueError(
                f"input '{info.name}' of model '{self.name}' needs {info.aligned_byte_size} bytes "
                f"({info.type_name} {info.layout} {list(info.shape)}), got {raw.size} "
                f"(array shape {list(arr.shape)}, {arr.dtype})")
        dst[:] = raw
        return mem

    def submit(self, inputs, priority: int = 0, core_mask: int = 0, custom_id: int = 0) -> Task:
        """Starts an inference and returns its Task. `inputs`: one array, a list (one per
        input) or a dict by input name. priority 0..=255 (255 preempts), core_mask 0 = any."""
        if isinstance(inputs, dict):
            inputs = [inputs[i.name] for i in self.inputs]
        elif not isinstance(inputs, (list, tuple)):
            inputs = [inputs]
        if len(inputs) != len(self.inputs):
            raise ValueError(f"model '{self.name}' has {len(self.inputs)} inputs, got {len(inputs)}")
        if not 0 <= int(priority) <= 255:
            raise ValueError(f"priority {priority} is out of range: must be 0..=255")
        in_mems = [self._fill(i, d) for i, d in zip(self.inputs, inputs)]
        out_mems = [_Mem(o.aligned_byte_size) for o in self.outputs]
        in_t = (L.Tensor * len(in_mems))()
        for t, info, m in zip(in_t, self.inputs, in_mems):
            t.properties = info.raw
            t.sysMem[0] = m.mem
        out_t = (L.Tensor * max(len(out_mems), 1))()
        for t, info, m in zip(out_t, self.outputs, out_mems):
            t.properties = info.raw
            t.sysMem[0] = m.mem
        out_p = ctypes.cast(out_t, ctypes.POINTER(L.Tensor))
        ctrl = L.CtrlParam(bpuCoreId=int(core_mask), dspCoreId=0, priority=int(priority), more=0,
                           customId=int(custom_id))
        task = ctypes.c_void_p()
        rc = L.lib().hbDNNInfer(ctypes.byref(task), ctypes.byref(out_p), in_t, self._h, ctypes.byref(ctrl))
        if rc != 0:
            for m in in_mems + out_mems:
                m.free()
            check("hbDNNInfer", rc)
        return Task(self, task, in_mems, out_mems, (in_t, out_t, out_p, ctrl))

    def infer(self, inputs, priority: int = 0, core_mask: int = 0, custom_id: int = 0, timeout_ms: int = 0):
        """Runs one inference and returns the outputs (list of numpy arrays, valid shape)."""
        return self.submit(inputs, priority, core_mask, custom_id).wait(timeout_ms)

    def __call__(self, inputs, **ctrl):
        return self.infer(inputs, **ctrl)

    def __repr__(self):
        return f"Model({self.name!r}, inputs={self.inputs}, outputs={self.outputs})"


class PackedModel:
    """A loaded set of model files (`hbDNNInitializeFromFiles`); `.onnx` files compile on load."""

    def __init__(self, paths):
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        paths = [os.fspath(p) for p in paths]
        for p in paths:
            if not os.path.exists(p):
                raise FileNotFoundError(p)
        lib = L.lib()
        arr = (ctypes.c_char_p * len(paths))(*[p.encode() for p in paths])
        h = ctypes.c_void_p()
        check("hbDNNInitializeFromFiles", lib.hbDNNInitializeFromFiles(ctypes.byref(h), arr, len(paths)))
        self._h = h
        names = ctypes.POINTER(ctypes.c_char_p)()
        n = ctypes.c_int32()
        check("hbDNNGetModelNameList", lib.hbDNNGetModelNameList(ctypes.byref(names), ctypes.byref(n), h))
        self.models = []
        for i in range(n.value):
            name = names[i]
            mh = ctypes.c_void_p()
            check("hbDNNGetModelHandle", lib.hbDNNGetModelHandle(ctypes.byref(mh), h, name))
            self.models.append(Model(self, name.decode(), mh))

    def __getitem__(self, key):
        if isinstance(key, str):
            for m in self.models:
                if m.name == key:
                    return m
            raise KeyError(f"no model named '{key}' (have: {', '.join(m.name for m in self.models)})")
        return self.models[key]

    def __len__(self):
        return len(self.models)

    def __iter__(self):
        return iter(self.models)

    def __del__(self):
        if getattr(self, "_h", None) is not None and self._h.value:
            try:
                L.lib().hbDNNRelease(self._h)
            except Exception:
                pass
            self._h = None
