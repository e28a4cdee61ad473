#!/usr/bin/env python3
"""Check a generated conformance folder: manifest schema, every file present
with the byte size its dtype and shape imply, unique names; with ``--ort``
also re-run onnxruntime on the ``op``/``network`` cases and compare with the
stored references (they must reproduce exactly up to the case tolerance).

    scripts/venv.sh python3 tests/conformance/check_manifest.py tests/conformance/data [--ort]

Prints ``N passed, N failed`` and exits non-zero on any failure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))

TAGS = {"f32": np.float32, "i64": np.int64, "i32": np.int32, "u8": np.uint8, "bool": np.bool_}
KINDS = {"op", "network", "onnx-node"}


def load_tensor(root: str, t: dict) -> np.ndarray:
    """Read one manifest tensor back as an array of its declared dtype and shape."""
    dtype = np.dtype(TAGS[t["dtype"]]).newbyteorder("<") if t["dtype"] != "bool" else np.dtype(np.uint8)
    raw = np.fromfile(os.path.join(root, t["file"]), dtype=dtype)
    arr = raw.reshape(t["shape"])
    return arr.astype(bool) if t["dtype"] == "bool" else arr.astype(dtype.newbyteorder("="))


def check_case(root: str, case: dict) -> list[str]:
    """Structural problems of one case (empty when it is well-formed)."""
    errs = []
    for key in ("name", "kind", "model", "rtol", "atol", "inputs", "outputs"):
        if key not in case:
            errs.append(f"missing key {key}")
    if errs:
        return errs
    if case["kind"] not in KINDS:
        errs.append(f"unknown kind {case['kind']}")
    if not os.path.isfile(os.path.join(root, case["model"])):
        errs.append(f"missing model {case['model']}")
    if not case["outputs"]:
        errs.append("no outputs")
    for t in case["inputs"] + case["outputs"]:
        if t.get("dtype") not in TAGS:
            errs.append(f"{t.get('name')}: bad dtype {t.get('dtype')}")
            continue
        path = os.path.join(root, t["file"])
        if not os.path.isfile(path):
            errs.append(f"{t['name']}: missing {t['file']}")
            continue
        want = int(np.prod(t["shape"], dtype=np.int64)) * np.dtype(TAGS[t["dtype"]]).itemsize
        have = os.path.getsize(path)
        if have != want:
            errs.append(f"{t['name']}: {t['file']} has {have} bytes, shape {t['shape']} {t['dtype']} needs {want}")
    return errs


def rerun(root: str, case: dict) -> str | None:
    """Re-run onnxruntime on one case; a message when it does not reproduce the reference."""
    import onnx
    from onnx_builder import run_ort

    model = onnx.load(os.path.join(root, case["model"]))
    feeds = {t["name"]: load_tensor(root, t) for t in case["inputs"]}
    got = run_ort(model, feeds)
    for t, have in zip(case["outputs"], got, strict=True):
        want = load_tensor(root, t)
        if have.shape != want.shape:
            return f"{t['name']}: shape {list(have.shape)} vs {list(want.shape)}"
        if want.dtype.kind == "f":
            ok = np.allclose(have, want, rtol=case["rtol"], atol=case["atol"])
        else:
            ok = np.array_equal(have, want)
        if not ok:
            return f"{t['name']}: values differ"
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root")
    ap.add_argument("--ort", action="store_true", help="re-run onnxruntime on op/network cases")
    args = ap.parse_args(argv)
    with open(os.path.join(args.root, "manifest.json")) as fh:
        manifest = json.load(fh)
    passed = failed = 0
    seen: set[str] = set()
    for case in manifest["cases"]:
        errs = check_case(args.root, case)
        if case.get("name") in seen:
            errs.append("duplicate name")
        seen.add(case.get("name"))
        if not errs and args.ort and case["kind"] in ("op", "network"):
            msg = rerun(args.root, case)
            if msg:
                errs.append(f"onnxruntime does not reproduce: {msg}")
        if errs:
            failed += 1
            print(f"FAIL {case.get('name')}: {'; '.join(errs)}")
        else:
            passed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
