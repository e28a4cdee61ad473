#!/usr/bin/env bash
# Run a command inside the benchmark venv (onnxruntime, OpenVINO, MNN), creating it first.
#
#   scripts/bench_venv.sh python3 bench/ort_bench.py --runtimes ort,openvino,mnn m.onnx
#   scripts/bench_venv.sh            # just create/refresh the venv, print its path
#
# The venv lives at ${VNPU_BENCH_VENV:-<repo>/build/bench-venv}, apart from the test
# venv (scripts/venv.sh) so that testing never downloads the peers. It is (re)installed
# from scripts/bench_requirements.txt whenever that file changes (hash stamp). A peer
# that fails to install is left out (the bench marks its cells) rather than failing
# the whole venv: the requirements are installed together first, then one by one.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
venv="${VNPU_BENCH_VENV:-$repo/build/bench-venv}"
req="$here/bench_requirements.txt"
python="${VNPU_PYTHON:-python3}"

want="$(sha256sum "$req" | cut -d' ' -f1)"
stamp="$venv/.vnpu-bench-requirements.sha256"

mkdir -p "$venv"
exec 9>"$venv/.vnpu-lock"
flock 9
if [[ ! -x "$venv/bin/python" ]]; then
    echo "bench_venv.sh: creating $venv" >&2
    "$python" -m venv "$venv"
fi
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
    pip=("$venv/bin/python" -m pip install --disable-pip-version-check -q)
    echo "bench_venv.sh: installing $(grep -v '^#' "$req" | xargs) into $venv" >&2
    if ! "${pip[@]}" -r "$req" >&2; then
        echo "bench_venv.sh: installing together failed; trying one package at a time" >&2
        grep -v '^\s*#' "$req" | grep -v '^\s*$' | while read -r pkg; do
            "${pip[@]}" "$pkg" >&2 || echo "bench_venv.sh: could not install $pkg (left out)" >&2
        done
    fi
    echo "$want" > "$stamp"
fi
flock -u 9
exec 9>&-

if [[ $# -eq 0 ]]; then
    echo "$venv"
    exit 0
fi
export VIRTUAL_ENV="$venv"
export PATH="$venv/bin:$PATH"
exec "$@"
