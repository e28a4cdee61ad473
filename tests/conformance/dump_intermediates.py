#!/usr/bin/env python3
"""Dump every intermediate value of one conformance case, as onnxruntime computes it.

    scripts/venv.sh python3 tests/conformance/dump_intermediates.py MANIFEST_DIR CASE_NAME OUT_DIR

Reads the case from ``MANIFEST_DIR/manifest.json``, makes every node output of the
top-level graph a graph output, runs onnxruntime with the reference settings on the
case's inputs and writes ``OUT_DIR/values.json``::

    {"values": [{"name": ..., "dtype": "f32", "shape": [...], "file": "v_<i>.bin"}, ...]}

in graph order, with each tensor as raw little-endian bytes beside it. Values whose
dtype has no manifest tag are left out. The conformance test runs this only when a
case fails, to name the first compiled node whose output diverges.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
from onnx_builder import NP_TO_TAG, ort_session  # noqa: E402

TAG_TO_NP = {tag: dt for dt, tag in NP_TO_TAG.items()}


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    root, case_name, out_dir = sys.argv[1:]
    with open(os.path.join(root, "manifest.json")) as f:
        cases = json.load(f)["cases"]
    case = next((c for c in cases if c["name"] == case_name), None)
    if case is None:
        print(f"no case named {case_name} in {root}/manifest.json", file=sys.stderr)
        return 1
    model = onnx.load(os.path.join(root, case["model"]))
    present = {o.name for o in model.graph.output}
    names = []
    for node in model.graph.node:
        for out in node.output:
            if out and out not in names:
                names.append(out)
                if out not in present:
                    # An output without type information: onnxruntime infers it.
                    model.graph.output.append(onnx.ValueInfoProto(name=out))
    feeds = {}
    for t in case["inputs"]:
        data = np.fromfile(os.path.join(root, t["file"]), dtype=TAG_TO_NP[t["dtype"]])
        if t["dtype"] == "bool":
            data = data.astype(np.bool_)
        feeds[t["name"]] = data.reshape(t["shape"])
    sess = ort_session(model)
    outs = sess.run(names, feeds)
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for i, (name, arr) in enumerate(zip(names, outs, strict=True)):
        arr = np.asarray(arr)
        tag = NP_TO_TAG.get(arr.dtype)
        if tag is None:
            continue
        file = f"v_{i}.bin"
        with open(os.path.join(out_dir, file), "wb") as f:
            f.write(np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<")).tobytes())
        written.append({"name": name, "dtype": tag,
                        "shape": [int(d) for d in arr.shape], "file": file})
    with open(os.path.join(out_dir, "values.json"), "w") as f:
        json.dump({"values": written}, f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
