#!/usr/bin/env bash
# The README's test command: sets up what is missing (cmake, the Python venv with onnx +
# onnxruntime, pytest), then runs every test: cargo tests, the header drift check, conformance
# against onnxruntime, the Python package (pytest), and the C/C++ examples under CMake/ctest (once normally, once
# with AddressSanitizer).
#
#   scripts/test.sh            # everything
#   VNPU_SKIP_ASAN=1 scripts/test.sh
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
build="${VNPU_BUILD_DIR:-$repo/build}"
mkdir -p "$build"

step() { printf '\n=== %s\n' "$*"; }

step "tools"
if ! command -v cmake >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq cmake >/dev/null
fi
cmake --version | head -1
cargo --version

step "python venv (onnx, onnxruntime, numpy, pytest)"
scripts/venv.sh >/dev/null

# Generator chatter (onnxruntime logs its own [E:...] lines for the reference cases it
# cannot run, which the manifest records as expected) goes to a log, shown only on failure.
logs="$build/logs"
mkdir -p "$logs"
quietly() {
    local log="$logs/$1.log"; shift
    if "$@" >"$log" 2>&1; then
        echo "ok: $(tail -n 1 "$log")  (full output: $log)"
    else
        cat "$log"; echo "FAILED: $*  (log: $log)"; return 1
    fi
}

step "test models and conformance references"
quietly gen_models scripts/venv.sh python scripts/gen_models.py "$build/models"
quietly gen_cases scripts/venv.sh python tests/conformance/gen_cases.py "$build/conformance" --onnx-node-tests
quietly gen_quant scripts/venv.sh python scripts/gen_quant_models.py "$build/quant"
quietly gen_ptq scripts/venv.sh python scripts/gen_ptq_data.py "$build/ptq"
export VNPU_TEST_MODELS="$build/models"
export VNPU_CONFORMANCE_DIR="$build/conformance"
export VNPU_QUANT_DIR="$build/quant"
export VNPU_PTQ_DIR="$build/ptq"

step "cargo fmt + clippy"
cargo fmt --all -- --check
cargo clippy --all-targets --features test-ops -- -D warnings

step "cargo test"
cargo test --all-targets --features test-ops -- --include-ignored
cargo test --doc

step "Python package (pytest, over target/debug/libvnpu.so)"
# The shared library and CLI of the test profile (the same build CMake links below).
cargo build --profile test --features test-ops --lib --bins
VNPU_LIBRARY="$repo/target/debug/libvnpu.so" VNPU_CLI="$repo/target/debug/vnpu" \
    scripts/venv.sh python -m pytest -q -p no:cacheprovider tests/python


# The C examples link the library cargo test just built (test profile, test-ops feature),
# so CMake does not start a second full build of the crate in the release profile.
# (Release builds: cmake -S . -B build, the default VNPU_CARGO_PROFILE=release.)
cargo_lib=(-DVNPU_CARGO_PROFILE=test -DVNPU_CARGO_FEATURES=test-ops)

step "C examples (CMake + ctest)"
cmake -S . -B "$build/cmake" -DCMAKE_BUILD_TYPE=Release "${cargo_lib[@]}" >/dev/null
cmake --build "$build/cmake" -j 2
(cd "$build/cmake" && ctest --output-on-failure)

if [ "${VNPU_SKIP_ASAN:-0}" != "1" ]; then
    step "C examples under AddressSanitizer"
    cmake -S . -B "$build/cmake-asan" -DCMAKE_BUILD_TYPE=Debug -DVNPU_SANITIZE=ON "${cargo_lib[@]}" >/dev/null
    cmake --build "$build/cmake-asan" -j 2
    (cd "$build/cmake-asan" && ctest --output-on-failure)
fi
step "all tests passed"
