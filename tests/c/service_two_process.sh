#!/bin/sh
# Two client processes on one `vnpu serve` daemon (ctest). Built from plain hbDNN C code:
# a background client floods the queue with priority-0 tasks, a foreground client submits
# priority-255 tasks; the daemon's trace must show each 255 task behind at most
# BPLAT_CORELIMIT normal FCs of the other process. With "kill", the background client is
# killed with SIGKILL mid-run instead: its queued tasks are cancelled (every task ends),
# it disappears from `vnpu status` and the clients after it run as usual.
#
# usage: service_two_process.sh VNPU_CLI CLIENT MODEL WORKDIR PYTHON CHECKER [kill]
set -eu
cli=$1 client=$2 model=$3 work=$4 python=$5 checker=$6 mode=${7:-order}
mkdir -p "$work"
sock="$work/vnpu-$mode.sock"
trace="$work/trace-$mode.json"
rm -f "$sock" "$trace"
BPLAT_CORELIMIT=1 "$cli" serve --socket "$sock" --cores 1 --trace "$trace" 2>"$work/serve-$mode.log" &
daemon=$!
bg=
cleanup() {
  [ -n "$bg" ] && kill -9 "$bg" 2>/dev/null || true
  kill -TERM "$daemon" 2>/dev/null || true
}
trap cleanup EXIT
i=0
while [ ! -S "$sock" ]; do
  i=$((i + 1))
  [ $i -gt 300 ] && { echo "daemon did not start"; cat "$work/serve-$mode.log"; exit 1; }
  sleep 0.1
done
export VNPU_SERVICE="$sock"
# Let the background queue fill: wait until the daemon lists the client with live tasks.
# A fast machine (or model) may run all of a background client's tasks between two
# polls: then a client with four times the tasks is started, up to 256000 tasks.
tasks=1000
while :; do
  VNPU_SERVICE="$sock" "$client" "$model" 0 "$tasks" 16 >"$work/bg-$mode.log" 2>&1 &
  bg=$!
  i=0
  queued=
  while kill -0 "$bg" 2>/dev/null; do
    if "$cli" status --socket "$sock" --json | grep -q '"live_tasks":[1-9]'; then
      queued=1
      break
    fi
    i=$((i + 1))
    [ $i -gt 300 ] && { echo "background client never queued"; cat "$work/bg-$mode.log"; exit 1; }
    sleep 0.1
  done
  [ -n "$queued" ] && break
  wait "$bg" || { echo "background client failed"; cat "$work/bg-$mode.log"; exit 1; }
  bg=
  tasks=$((tasks * 4))
  [ $tasks -gt 256000 ] && { echo "background client never seen queued"; exit 1; }
done
if [ "$mode" = kill ]; then
  victim=$bg
  kill -9 "$bg"
  wait "$bg" 2>/dev/null || true
  bg=
  # Its session, tasks and memory go away (deadlock guard only, not a timing check).
  i=0
  while "$cli" status --socket "$sock" --json | grep -q "\"pid\":$victim[,}]"; do
    i=$((i + 1))
    [ $i -gt 300 ] && { echo "killed client still listed"; "$cli" status --socket "$sock"; exit 1; }
    sleep 0.1
  done
  # A normal and a 255 client after the kill run as usual.
  "$client" "$model" 0 4 2
  "$client" "$model" 255 4 1
else
  "$client" "$model" 255 20 1
  wait "$bg"
  bg=
fi
kill -TERM "$daemon"
wait "$daemon"
trap - EXIT
cat "$work/serve-$mode.log"
if [ "$mode" = kill ]; then
  "$python" - "$trace" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ev = [e for e in d["traceEvents"] if e.get("cat") == "task"]
submitted = {e["args"]["task"] for e in ev if e["name"].startswith("submit ")}
ended = {e["args"]["task"] for e in ev if e["name"].startswith(("done ", "cancel "))}
cancelled = sum(1 for e in ev if e["name"].startswith("cancel "))
# Whether any of the killed client's tasks were still queued at the kill depends on
# timing; what must hold either way: every task submitted ended (done or cancelled).
assert submitted and submitted <= ended, f"tasks never ended: {sorted(submitted - ended)[:10]}"
print(f"ok: all {len(submitted)} tasks ended ({cancelled} cancelled at the kill)")
PY
else
  "$python" "$checker" "$trace" 1
fi
