#!/usr/bin/python3
"""Sorts the times a program's threads were switched out inside optmem by cause, from perf's sched_switch."""
import argparse
import collections
import re
import sys

HEADER = re.compile(r"^(\S.*?)\s+(-?\d+)/(-?\d+)\s+([\d.]+):\s+(\S+):\s+(.*)$")


def parse(lines):
    """The events of `perf script -F comm,pid,tid,time,event,trace,ip,sym,dso`."""
    events, cur = [], None
    for line in lines:
        if not line.strip():
            if cur:
                events.append(cur)
            cur = None
        elif line[0] not in "\t ":
            m = HEADER.match(line.rstrip())
            if not m:
                raise ValueError("not perf script output with -F comm,pid,tid,time,...: %r" % line[:80])
            cur = dict(comm=m.group(1), pid=int(m.group(2)), tid=int(m.group(3)),
                       t=float(m.group(4)), ev=m.group(5), tr=m.group(6), stack=[])
        elif cur is not None:
            cur["stack"].append(line.strip())
    if cur:
        events.append(cur)
    return events


def fields(trace):
    return dict(x.split("=", 1) for x in trace.replace("==>", "").split() if "=" in x)


def cause(state, kernel, user):
    """Why a thread left the CPU inside optmem, from its state and stacks."""
    if not state.startswith("R"):
        return "slept (%s)" % state
    k, u = " ".join(kernel), " ".join(user)
    woke = user and user[0].split(" ")[1] == "syscall" and "alloc_locked" in u
    if "start_drop_thread" in u or woke:
        return "preempted after waking optmem-pages"
    if "apic_timer" in k:
        return "preempted at a timer tick"
    if "exc_page_fault" in k:
        return "preempted leaving a page fault"
    if "process_vm_readv" in u:
        return "preempted in process_vm_readv"
    return "preempted in another system call"


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("script", help="perf script output (system-wide sched:sched_switch with call chains)")
    ap.add_argument("--pid", type=int, required=True, help="the program's process id")
    ap.add_argument("--lib", default="liboptmem", help="frames of this object mean inside optmem")
    ap.add_argument("--min-ms", type=float, default=1.0, help="count preemptions this long or longer")
    a = ap.parse_args()
    try:
        with open(a.script, errors="replace") as f:
            events = parse(f)
        ours = {e["tid"] for e in events if e["pid"] == a.pid}
        if not ours:
            raise ValueError("no event of process %d" % a.pid)
        pending, counts, longest, locked = {}, collections.Counter(), {}, []
        for e in events:
            if e["ev"] != "sched:sched_switch":
                continue
            d = fields(e["tr"])
            prev, nxt = int(d["prev_pid"]), int(d["next_pid"])
            if prev in ours:
                pending[prev] = (e, d["prev_state"])
            if nxt not in ours or nxt not in pending:
                continue
            out, state = pending.pop(nxt)
            ms = (e["t"] - out["t"]) * 1e3
            kernel = [f for f in out["stack"] if "kallsyms" in f]
            user = [f for f in out["stack"] if "kallsyms" not in f]
            if out["comm"].startswith("optmem") or not any(a.lib in f for f in user):
                continue
            if state.startswith("R") and ms < a.min_ms:
                continue
            c = ("main thread: " if out["tid"] == a.pid else "other thread: ") + cause(state, kernel, user)
            counts[c] += 1
            longest[c] = max(longest.get(c, 0.0), ms)
            if any("dl_iterate_phdr" in f for f in user):
                locked.append(ms)
    except (OSError, ValueError, KeyError) as err:
        sys.exit("sched_waits: %s" % err)
    for c, n in counts.most_common():
        print("%-60s %4d  longest %6.2f ms" % (c, n, longest[c]))
    print("of them under dl_iterate_phdr (the loader's lock held): %d, longest %.2f ms"
          % (len(locked), max(locked, default=0.0)))


if __name__ == "__main__":
    main()
