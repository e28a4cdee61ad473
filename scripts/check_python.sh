#!/usr/bin/env bash
# Self-check of the Python tooling (model generator, conformance cases, ORT bench).
#
#   scripts/check_python.sh            # quick: small models, op cases, bench smoke run
#   scripts/check_python.sh --full     # also the standard models, networks and ONNX suites
#
# Each check prints PASS/FAIL; the last line is "N passed, N failed" and the exit
# status is non-zero when anything failed. Uses scripts/venv.sh (pinned versions).
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
full=0
[[ "${1:-}" == "--full" ]] && full=1
py() { scripts/venv.sh python3 "$@"; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
check() {
    local what="$1"
    shift
    if "$@" >"$tmp/log" 2>&1; then
        echo "PASS $what"
        passed=$((passed + 1))
    else
        echo "FAIL $what"
        sed 's/^/    /' "$tmp/log" | tail -20
        failed=$((failed + 1))
    fi
}

scripts/venv.sh >/dev/null || { echo "0 passed, 1 failed"; exit 1; }

small_models_reproducible() {
    py scripts/gen_models.py --small "$tmp/small" &&
        for m in models/*.onnx; do cmp "$m" "$tmp/small/$(basename "$m")" || return 1; done
}
small_models_under_2mb() {
    for m in models/*.onnx; do
        [[ $(stat -c %s "$m") -lt 2000000 ]] || { echo "$m is over 2 MB"; return 1; }
    done
}
op_cases() {
    py tests/conformance/gen_cases.py "$tmp/cases" --no-networks &&
        py tests/conformance/check_manifest.py "$tmp/cases" --ort
}
bench_smoke() {
    py bench/ort_bench.py models/tiny_classifier.onnx --runs 50 >"$tmp/bench.json" &&
        py -c 'import json,sys; d=json.loads(open(sys.argv[1]).read()); assert d["runs"]==50 and d["median_ms"]>0, d' \
            "$tmp/bench.json" &&
        py bench/ort_bench.py --priority-scenario models/tiny_classifier.onnx models/tiny_detector.onnx \
            --fps 50 --seconds 1 >"$tmp/prio.json" &&
        py -c 'import json,sys; d=json.loads(open(sys.argv[1]).read()); assert d["small_runs"]==50 and d["big_runs"]>0, d' \
            "$tmp/prio.json" &&
        py -c 'import sys; sys.path.insert(0, "bench"); import ort_bench; assert ort_bench.default_threads() == 0' &&
        # Pinned to fewer CPUs than the machine has, the "default threads" pool is sized
        # to them (onnxruntime's own default would pin threads to every core).
        { ! command -v taskset >/dev/null || [[ "$(nproc --all)" -lt 2 ]] ||
            taskset -c 0 scripts/venv.sh python3 -c 'import sys; sys.path.insert(0, "bench"); import ort_bench; n = ort_bench.default_threads(); assert n == 1, n'; }
}
full_models() { py scripts/gen_models.py "$tmp/models"; }
full_cases() {
    py tests/conformance/gen_cases.py "$tmp/full" --onnx-node-tests &&
        py tests/conformance/check_manifest.py "$tmp/full" --ort
}

check "small models regenerate byte for byte" small_models_reproducible
check "small models are under 2 MB" small_models_under_2mb
check "op cases generate and onnxruntime reproduces them" op_cases
check "ort_bench latency and priority modes" bench_smoke
if [[ $full -eq 1 ]]; then
    check "standard models generate and pass onnx.checker" full_models
    check "all conformance cases incl. ONNX suites" full_cases
fi
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
