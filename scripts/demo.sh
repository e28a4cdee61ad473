#!/usr/bin/env bash
# The README's run command: builds vnpu (release) and runs the demo: compiles the bundled
# detector and classifier, runs the classifier at priority 255 while the detector
# saturates the cores in tasks of 8 frames (chains of FCs of <= 1000 us each), once with
# BPLAT_CORELIMIT=0 and once with 1, prints both latencies, writes the trace of the
# BPLAT_CORELIMIT=1 run and its timeline centred on a priority-255 FC overtaking queued
# background work. Options: vnpu demo --help.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
cargo build --release --bin vnpu
exec target/release/vnpu demo --out "${VNPU_DEMO_OUT:-build/demo}" "$@"
