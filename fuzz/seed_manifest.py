#!/usr/bin/env python3
"""Turns compiled .vnpu files into seeds of the `manifest` fuzz target.

A seed is: u32 LE manifest length, the manifest bytes, the weights bytes (the target
rebuilds the header and the checksums around them). Usage:
    seed_manifest.py OUT_DIR FILE.vnpu [FILE.vnpu ...]
"""
import os
import struct
import sys


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for path in sys.argv[2:]:
        b = open(path, "rb").read()
        moff, mlen, woff, wlen = struct.unpack_from("<QQQQ", b, 16)
        seed = struct.pack("<I", mlen) + b[moff:moff + mlen] + b[woff:woff + wlen]
        name = os.path.splitext(os.path.basename(path))[0] + ".seed"
        with open(os.path.join(out, name), "wb") as f:
            f.write(seed)


if __name__ == "__main__":
    main()
