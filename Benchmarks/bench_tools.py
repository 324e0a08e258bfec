#!/usr/bin/env python3
"""Helpers for the benchmark scripts (run by them, not by hand).

  threads-sample PID OUT.json READY [INTERVAL]
      Per-thread CPU of PID from /proc/PID/task/*/stat (utime+stime, clock ticks): one
      snapshot at once (then READY is created), then one every INTERVAL seconds (0.25)
      until SIGTERM or until PID exits; writes OUT.json with, per thread id, its name
      (comm) and the first and last ticks seen, plus the process's own utime+stime (which
      keeps the CPU of threads that ended) at start and end.

  threads-report --run LABEL FILE.json REQUESTS [--run ...] [--top N]
      Per-thread and per-thread-group CPU in us/request for each sampled run.

  callgrind-top FILE REQUESTS [--top N]
      Self cost (Ir, instructions) per function from a callgrind dump, computed from the
      file itself (callgrind_annotate 3.19 shows frames active at a zero/dump as if the
      whole cost were theirs); prints total and per-request instructions and the top N
      functions by self cost (mangled: pipe through swift-demangle).
"""
import collections
import json
import os
import re
import signal
import sys
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")


def _stat_fields(path):
    with open(path) as f:
        text = f.read()
    comm = text[text.index("(") + 1:text.rindex(")")]
    rest = text[text.rindex(")") + 2:].split()
    # rest[0] is field 3 (state); utime = field 14, stime = field 15
    return comm, int(rest[11]) + int(rest[12])


def _snapshot(pid):
    threads = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return None, None
    for tid in tids:
        try:
            comm, ticks = _stat_fields(f"/proc/{pid}/task/{tid}/stat")
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
        threads[tid] = (comm, ticks)
    try:
        _, proc = _stat_fields(f"/proc/{pid}/stat")
    except FileNotFoundError:
        return None, None
    return threads, proc


def threads_sample(pid, out, ready, interval=0.25):
    stop = {"now": False}

    def on_signal(*_):
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    seen = {}
    first, proc_start = _snapshot(pid)
    if first is None:
        sys.exit(f"no process {pid}")
    for tid, (comm, ticks) in first.items():
        seen[tid] = {"comm": comm, "first": ticks, "last": ticks, "new": False}
    proc_end = proc_start
    open(ready, "w").close()
    started = time.time()
    while True:
        time.sleep(interval)
        snap, proc = _snapshot(pid)
        if snap is None:
            break
        proc_end = proc
        for tid, (comm, ticks) in snap.items():
            if tid in seen:
                seen[tid]["last"] = ticks
                seen[tid]["comm"] = comm
            else:  # started after the first snapshot: all of its CPU belongs to the run
                seen[tid] = {"comm": comm, "first": 0, "last": ticks, "new": True}
        if stop["now"]:
            break
    with open(out, "w") as f:
        json.dump({"clk_tck": CLK_TCK, "seconds": time.time() - started, "proc_start": proc_start,
                   "proc_end": proc_end, "threads": seen}, f)


# Thread names as they show under load (Linux keeps 15 bytes; libdispatch names its workers
# after their root queue, so "com.apple.root.default-qos[.overcommit]" shows as its tail).
GROUPS = [
    (re.compile(r"^NIO-"), "event loops", "NIO event loop threads (HTTP in and out)"),
    (re.compile(r"^cache-writer$"), "writer", "the cache writer's own thread (SQLite commits, eviction)"),
    (re.compile(r"qos\.overcommit$|overcommit"), "serial queues", "dispatch overcommit workers: serial queues (GRDB's reader queues)"),
    (re.compile(r"default-qos$"), "task pool", "dispatch default-qos workers: Swift concurrency tasks (pipeline)"),
]


def group_of(comm):
    for rx, short, _ in GROUPS:
        if rx.search(comm):
            return short
    return comm


def threads_report(runs, top):
    for label, path, requests in runs:
        data = json.load(open(path))
        hz = data["clk_tck"]
        requests = max(int(requests), 1)
        rows = []
        for tid, t in data["threads"].items():
            d = t["last"] - t["first"]
            rows.append((d, tid, t["comm"], t["new"]))
        rows.sort(reverse=True)
        total_threads = sum(r[0] for r in rows)
        proc = data["proc_end"] - data["proc_start"]
        gone = proc - total_threads
        us = lambda ticks: ticks / hz * 1e6 / requests
        print(f"{label}: Concierge threads, CPU while the run and its settle lasted "
              f"({data['seconds']:.1f}s, {requests} requests)")
        print(f"  {'tid':>8} {'thread (comm)':<17} {'group':<12} {'CPU s':>7} {'us/req':>8}")
        for d, tid, comm, new in rows[:top]:
            if d == 0:
                continue
            print(f"  {tid:>8} {comm:<17} {group_of(comm):<12} {d / hz:7.2f} {us(d):8.1f}{'  (new)' if new else ''}")
        groups = collections.Counter()
        for d, _, comm, _ in rows:
            groups[group_of(comm)] += d
        if gone > 0:
            groups["ended"] += gone
        print(f"  by group: " + ", ".join(f"{g} {us(v):.1f}" for g, v in groups.most_common() if v > 0)
              + f"  (us/req; process {us(proc):.1f})")
        print()


def threads_groups(path, requests):
    """group -> us/req, for the summary line of the main script."""
    data = json.load(open(path))
    hz = data["clk_tck"]
    groups = collections.Counter()
    for t in data["threads"].values():
        groups[group_of(t["comm"])] += t["last"] - t["first"]
    requests = max(int(requests), 1)
    return {g: v / hz * 1e6 / requests for g, v in groups.items()}


def callgrind_self(path):
    names, objects, fn_object = {}, {}, {}
    self_cost = collections.Counter()
    current = current_object = callee = None
    after_calls = False
    trigger = ""
    rx = re.compile(r"^(c?fn|c?ob|fl|fi|fe|cfi|cfl)=\((\d+)\)(?: (.*))?$")
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            m = rx.match(line)
            if m:
                kind, ident, name = m.groups()
                if kind in ("fn", "cfn") and name is not None:
                    names[ident] = name
                if kind in ("ob", "cob") and name is not None:
                    objects[ident] = name
                if kind == "ob":
                    current_object = ident
                elif kind == "fn":
                    current = ident
                    fn_object.setdefault(ident, current_object)
                continue
            if line.startswith("calls="):
                after_calls = True  # the next cost line is the call's inclusive cost
                continue
            if line.startswith("desc: Trigger:"):
                trigger = line.split(":", 2)[2].strip()
                continue
            if line[0].isdigit() or line[0] in "+-*":
                parts = line.split()
                if len(parts) < 2:
                    continue
                if after_calls:
                    after_calls = False
                    continue
                self_cost[current] += int(parts[1])
    return names, objects, fn_object, self_cost, trigger


def callgrind_top(path, requests, top):
    names, objects, fn_object, self_cost, trigger = callgrind_self(path)
    total = sum(self_cost.values())
    requests = max(int(requests), 1)
    print(f"instructions: {total:,} in {requests} requests = {total / requests:,.0f} per request ({trigger})")
    print(f"  {'self %':>7} {'Ir/req':>9}  symbol [object]")
    for ident, cost in self_cost.most_common(top):
        obj = os.path.basename(objects.get(fn_object.get(ident), "?"))
        print(f"  {100 * cost / total:6.2f}% {cost / requests:9.0f}  {names.get(ident, '?')} [{obj}]")


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    cmd = argv[1]
    if cmd == "threads-sample":
        threads_sample(int(argv[2]), argv[3], argv[4], float(argv[5]) if len(argv) > 5 else 0.25)
    elif cmd == "threads-report":
        runs, top, i = [], 8, 2
        while i < len(argv):
            if argv[i] == "--run":
                runs.append((argv[i + 1], argv[i + 2], argv[i + 3]))
                i += 4
            elif argv[i] == "--top":
                top = int(argv[i + 1])
                i += 2
            else:
                sys.exit(f"unknown argument {argv[i]}")
        threads_report(runs, top)
    elif cmd == "threads-group":  # threads-group FILE REQUESTS GROUP -> us/req
        print(f"{threads_groups(argv[2], argv[3]).get(argv[4], 0.0):.1f}")
    elif cmd == "callgrind-top":
        top = int(argv[5]) if len(argv) > 5 and argv[4] == "--top" else 10
        callgrind_top(argv[2], argv[3], top)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
