#!/usr/bin/env bash
# Run a command inside the project's Python venv, creating it first if needed.
#
#   scripts/venv.sh python3 scripts/gen_models.py build/models
#   scripts/venv.sh            # just create/refresh the venv, print its path
#
# The venv lives at ${VNPU_VENV:-<repo>/.venv}. It is (re)installed from
# scripts/requirements.txt whenever that file changes (a stamp file records the
# hash of the requirements it was built from), so the call is idempotent and
# cheap once the venv exists. Nothing is installed system-wide.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
venv="${VNPU_VENV:-$repo/.venv}"
req="$here/requirements.txt"
python="${VNPU_PYTHON:-python3}"

hash_of() {
    if command -v sha256sum >/dev/null 2>&1; then
        sha256sum "$1" | cut -d' ' -f1
    else
        "$python" -c 'import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest())' "$1"
    fi
}

want="$(hash_of "$req")"
stamp="$venv/.vnpu-requirements.sha256"

# Serialise creation/installation when several scripts start at once.
mkdir -p "$venv"
if command -v flock >/dev/null 2>&1; then
    exec 9>"$venv/.vnpu-lock"
    flock 9
fi
if [[ ! -x "$venv/bin/python" ]]; then
    echo "venv.sh: creating $venv" >&2
    "$python" -m venv "$venv"
fi
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
    echo "venv.sh: installing $(grep -v '^#' "$req" | xargs) into $venv" >&2
    "$venv/bin/python" -m pip install --disable-pip-version-check -q -r "$req" >&2
    echo "$want" > "$stamp"
fi

if command -v flock >/dev/null 2>&1; then
    flock -u 9
    exec 9>&-
fi

if [[ $# -eq 0 ]]; then
    echo "$venv"
    exit 0
fi
export VIRTUAL_ENV="$venv"
export PATH="$venv/bin:$PATH"
exec "$@"
