#!/usr/bin/env bash
# The README's run command: builds vnpu (release) and runs the demo: compiles the bundled
# detector and classifier, runs the classifier at priority 255 while the detector
# saturates the cores (BPLAT_CORELIMIT 0 and 1), prints latencies, writes a trace and
# its timeline picture.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
cargo build --release --bin vnpu
exec target/release/vnpu demo --out "${VNPU_DEMO_OUT:-build/demo}" "$@"
