"""Checks a `vnpu serve --trace` file of the two-process service test.

usage: check_service_trace.py TRACE.json CORELIMIT [--killed]

Asserts, on recorded events only (never wall time):
- tasks of at least two client processes ran (task_pids names two pids);
- every priority-255 task saw at most CORELIMIT FCs of other (normal) tasks start
  between its submission and its own first FC, across processes;
- at least one normal task of the other process was overtaken (submitted before a
  255 task, started after it), so the check above was exercised;
- with --killed: some task of a client was cancelled (the killed client's queue).
"""
import json
import sys


def main():
    trace, corelimit = sys.argv[1], int(sys.argv[2])
    killed = "--killed" in sys.argv[3:]
    d = json.load(open(trace))
    pids = {int(t): p for t, p in d["task_pids"].items()}
    ev = d["traceEvents"]
    submit, first_fc, prio, fcs = {}, {}, {}, []
    cancelled = set()
    for e in ev:
        a = e.get("args", {})
        if e.get("cat") == "task" and e["name"].startswith("submit "):
            submit.setdefault(a["task"], e["ts"])
            prio[a["task"]] = a["priority"]
        if e.get("cat") == "task" and e["name"].startswith("cancel "):
            cancelled.add(a["task"])
        if e.get("cat") == "fc":
            fcs.append((e["ts"], a["task"]))
            first_fc[a["task"]] = min(first_fc.get(a["task"], e["ts"]), e["ts"])
    fcs.sort()
    assert len(set(pids.values())) >= 2, f"one client process only: {set(pids.values())}"
    fg = [t for t, p in prio.items() if p == 255 and t in first_fc]
    assert fg, "no priority-255 task ran"
    fg_pids = {pids.get(t) for t in fg}
    overtaken = 0
    for t in fg:
        s, f = submit[t], first_fc[t]
        normal = [x for ts, x in fcs if s <= ts < f and prio.get(x, 0) < 255]
        assert len(normal) <= corelimit, (
            f"255 task {t} (pid {pids.get(t)}): {len(normal)} normal FCs started "
            f"between its submission and its first FC (corelimit {corelimit})")
        overtaken += sum(1 for x, sx in submit.items()
                         if prio.get(x, 0) < 255 and pids.get(x) not in fg_pids
                         and sx < s and first_fc.get(x, float("inf")) > f)
    assert overtaken > 0, "no normal task of the other process was overtaken"
    if killed:
        assert cancelled, "the killed client's queued tasks were not cancelled"
    print(f"ok: {len(fg)} priority-255 tasks, {overtaken} overtakes, "
          f"{len(set(pids.values()))} processes, {len(cancelled)} cancelled")


if __name__ == "__main__":
    main()
