#!/usr/bin/env python3
"""Prints the processes that used more than a share of a core over a short window.

CI calls it between its phases: a process an earlier phase left running (a browser, a daemon)
slows every later one, and without this the log only shows the later phases timing out.

    scripts/busy-processes.py [--window SECONDS] [--min-share FRACTION] [--kill-pattern REGEX]

Prints one line per busy process (pid, parent, share of a core, command line), or nothing.
With --kill-pattern, busy or not, processes whose command line matches the pattern and that are
not this script's ancestors are listed and sent SIGKILL (CI's leftovers of its own phases).
"""
import argparse
import os
import re
import signal
import time


def ticks_by_pid():
    """Each process's parent and CPU ticks (user and system), from /proc/PID/stat."""
    ticks = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # After the command's ")": state is field 3, ppid 4, utime 14, stime 15.
        fields = stat[stat.rfind(")") + 2:].split()
        ticks[int(name)] = (int(fields[1]), int(fields[11]) + int(fields[12]))
    return ticks


def command_line(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:160]
    except OSError:
        return "?"


def ancestors(ticks):
    """This script and the processes it runs under, by the parents in `ticks`."""
    pid, chain = os.getpid(), set()
    while pid > 1 and pid not in chain:
        chain.add(pid)
        pid = ticks.get(pid, (0, 0))[0]
    return chain


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--window", type=float, default=2.0)
    parser.add_argument("--min-share", type=float, default=0.15)
    parser.add_argument("--kill-pattern")
    args = parser.parse_args()

    hz = os.sysconf("SC_CLK_TCK")
    before = ticks_by_pid()
    time.sleep(args.window)
    after = ticks_by_pid()
    mine = ancestors(after)
    for pid, (ppid, ticks) in sorted(after.items()):
        if pid in mine or pid not in before:
            continue
        share = (ticks - before[pid][1]) / hz / args.window
        if share >= args.min_share:
            print(f"busy: pid {pid} (parent {ppid}) {share * 100:.0f} % of a core: {command_line(pid)}")
    if args.kill_pattern:
        pattern = re.compile(args.kill_pattern)
        for pid in after:
            if pid in mine:
                continue
            line = command_line(pid)
            if pattern.search(line):
                print(f"left running, killed: pid {pid}: {line}")
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass


if __name__ == "__main__":
    main()
