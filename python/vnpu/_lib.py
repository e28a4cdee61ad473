"""Finding and binding libvnpu.so: ctypes mirrors of the hbDNN structs and prototypes.

The struct layouts are those of `include/dnn/hb_dnn.h` (libdnn 1.18+ layout); the test
suite checks their sizes against the C ones (hbDNNTensorProperties 176 B, hbDNNTensor 272 B).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os

MAX_DIMS = 8


class TensorShape(ctypes.Structure):
    _fields_ = [("dimensionSize", ctypes.c_int32 * MAX_DIMS), ("numDimensions", ctypes.c_int32)]

    def dims(self):
        return tuple(int(self.dimensionSize[i]) for i in range(self.numDimensions))


class QuantiShift(ctypes.Structure):
    _fields_ = [("shiftLen", ctypes.c_int32), ("shiftData", ctypes.POINTER(ctypes.c_uint8))]


class QuantiScale(ctypes.Structure):
    _fields_ = [
        ("scaleLen", ctypes.c_int32),
        ("scaleData", ctypes.POINTER(ctypes.c_float)),
        ("zeroPointLen", ctypes.c_int32),
        ("zeroPointData", ctypes.POINTER(ctypes.c_int8)),
    ]


class TensorProperties(ctypes.Structure):
    _fields_ = [
        ("validShape", TensorShape),
        ("alignedShape", TensorShape),
        ("tensorLayout", ctypes.c_int32),
        ("tensorType", ctypes.c_int32),
        ("shift", QuantiShift),
        ("scale", QuantiScale),
        ("quantiType", ctypes.c_int32),
        ("quantizeAxis", ctypes.c_int32),
        ("alignedByteSize", ctypes.c_int32),
        ("stride", ctypes.c_int32 * MAX_DIMS),
    ]


class SysMem(ctypes.Structure):
    _fields_ = [("phyAddr", ctypes.c_uint64), ("virAddr", ctypes.c_void_p), ("memSize", ctypes.c_uint32)]


class Tensor(ctypes.Structure):
    _fields_ = [("sysMem", SysMem * 4), ("properties", TensorProperties)]


class CtrlParam(ctypes.Structure):
    _fields_ = [
        ("bpuCoreId", ctypes.c_int32),
        ("dspCoreId", ctypes.c_int32),
        ("priority", ctypes.c_int32),
        ("more", ctypes.c_int32),
        ("customId", ctypes.c_int64),
        ("reserved1", ctypes.c_int32),
        ("reserved2", ctypes.c_int32),
    ]


_P = ctypes.c_void_p
_I = ctypes.c_int32
_PROTOS = {
    "vnpuGetVersion": (ctypes.c_char_p, []),
    "vnpuGetLastErrorDetail": (ctypes.c_char_p, []),
    "hbDNNGetVersion": (ctypes.c_char_p, []),
    "hbDNNGetErrorDesc": (ctypes.c_char_p, [_I]),
    "hbDNNInitializeFromFiles": (_I, [ctypes.POINTER(_P), ctypes.POINTER(ctypes.c_char_p), _I]),
    "hbDNNRelease": (_I, [_P]),
    "hbDNNGetModelNameList": (_I, [ctypes.POINTER(ctypes.POINTER(ctypes.c_char_p)), ctypes.POINTER(_I), _P]),
    "hbDNNGetModelHandle": (_I, [ctypes.POINTER(_P), _P, ctypes.c_char_p]),
    "hbDNNGetInputCount": (_I, [ctypes.POINTER(_I), _P]),
    "hbDNNGetOutputCount": (_I, [ctypes.POINTER(_I), _P]),
    "hbDNNGetInputName": (_I, [ctypes.POINTER(ctypes.c_char_p), _P, _I]),
    "hbDNNGetOutputName": (_I, [ctypes.POINTER(ctypes.c_char_p), _P, _I]),
    "hbDNNGetInputTensorProperties": (_I, [ctypes.POINTER(TensorProperties), _P, _I]),
    "hbDNNGetOutputTensorProperties": (_I, [ctypes.POINTER(TensorProperties), _P, _I]),
    "hbDNNInfer": (_I, [ctypes.POINTER(_P), ctypes.POINTER(ctypes.POINTER(Tensor)), ctypes.POINTER(Tensor), _P,
                        ctypes.POINTER(CtrlParam)]),
    "hbDNNWaitTaskDone": (_I, [_P, _I]),
    "hbDNNReleaseTask": (_I, [_P]),
    "hbDNNGetEstimateLatency": (_I, [ctypes.POINTER(_I), _P]),
    "hbSysAllocCachedMem": (_I, [ctypes.POINTER(SysMem), ctypes.c_uint32]),
    "hbSysFlushMem": (_I, [ctypes.POINTER(SysMem), _I]),
    "hbSysFreeMem": (_I, [ctypes.POINTER(SysMem)]),
}


def _candidates():
    env = os.environ.get("VNPU_LIBRARY")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    yield from sorted(glob.glob(os.path.join(here, "lib", "libvnpu.so*")))
    yield "libvnpu.so.0"
    yield "libvnpu.so"
    found = ctypes.util.find_library("vnpu")
    if found:
        yield found
    repo = os.path.dirname(os.path.dirname(here))
    for prof in ("release", "debug"):
        yield os.path.join(repo, "target", prof, "libvnpu.so")


def _load():
    tried = []
    for c in _candidates():
        if os.sep in c and not os.path.exists(c):
            tried.append(c + " (missing)")
            continue
        try:
            lib = ctypes.CDLL(c)
        except OSError as e:
            tried.append(f"{c} ({e})")
            continue
        for name, (res, args) in _PROTOS.items():
            f = getattr(lib, name)
            f.restype = res
            f.argtypes = args
        lib._vnpu_path = c
        return lib
    raise ImportError(
        "cannot load libvnpu.so; set VNPU_LIBRARY=/path/to/libvnpu.so or install the C library "
        "(cmake --install). Tried: " + "; ".join(tried)
    )


_lib = None


def lib():
    """The loaded library (loaded on first use)."""
    global _lib
    if _lib is None:
        _lib = _load()
    return _lib


class VnpuError(RuntimeError):
    """A failed C call: `code` is the hbDNN status, the message names the call and detail."""

    def __init__(self, call, code):
        L = lib()
        desc = (L.hbDNNGetErrorDesc(code) or b"").decode(errors="replace")
        detail = (L.vnpuGetLastErrorDetail() or b"").decode(errors="replace")
        super().__init__(f"{call} failed ({code}: {desc}){': ' + detail if detail else ''}")
        self.code = code


def check(call, code):
    """Raises VnpuError unless `code` is 0."""
    if code != 0:
        raise VnpuError(call, code)
