#!/usr/bin/python3
"""Checks bench/sched_waits.py's pairing and causes on a hand-written perf script."""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def switch(comm, pid, tid, t, prev, state, nxt, stack):
    head = "%s %d/%d %.6f: sched:sched_switch: prev_comm=%s prev_pid=%d prev_prio=120 " \
           "prev_state=%s ==> next_comm=x next_pid=%d next_prio=120\n" % (comm, pid, tid, t, comm, prev, state, nxt)
    return head + "".join("\tffff %s\n" % f for f in stack) + "\n"


K_TICK = ["__schedule ([kernel.kallsyms])", "asm_sysvec_apic_timer_interrupt ([kernel.kallsyms])"]
K_SYS = ["__schedule ([kernel.kallsyms])", "do_syscall_64 ([kernel.kallsyms])"]
K_FUTEX = ["__schedule ([kernel.kallsyms])", "futex_wait ([kernel.kallsyms])"]
OPT = "(/x/liboptmem.so)"


def main():
    s = ""
    # 100/100 preempted after waking optmem-pages for 5 ms, put back by the idle task.
    s += switch("python3", 100, 100, 1.000, 100, "R", 7, K_SYS + ["syscall " + OPT, "start_drop_thread " + OPT])
    s += switch("swapper/1", 0, 0, 1.005, 0, "R", 100, [])
    # 100/100 asleep on a lock for 2 ms, put back by another program's thread.
    s += switch("python3", 100, 100, 1.010, 100, "S", 0, K_FUTEX + ["om_lock_wait " + OPT, "malloc " + OPT])
    s += switch("cc1", 300, 300, 1.012, 300, "R", 100, [])
    # 100/101 preempted at a tick for 3 ms under dl_iterate_phdr.
    s += switch("python3", 100, 101, 1.020, 101, "R", 0,
                K_TICK + ["madvise (libc)", "drop_modules " + OPT, "__GI___dl_iterate_phdr (libc)"])
    s += switch("swapper/0", 0, 0, 1.023, 0, "R", 101, [])
    # Left out: a 0.2 ms preemption, a wait outside optmem, optmem's own thread, another process.
    s += switch("python3", 100, 100, 1.030, 100, "R", 0, K_TICK + ["malloc " + OPT])
    s += switch("swapper/1", 0, 0, 1.0302, 0, "R", 100, [])
    s += switch("python3", 100, 100, 1.040, 100, "D", 0, ["__schedule ([kernel.kallsyms])", "read (libc)"])
    s += switch("swapper/1", 0, 0, 1.050, 0, "R", 100, [])
    s += switch("optmem-pages", 100, 102, 1.060, 102, "S", 0, K_FUTEX + ["drop_thread " + OPT])
    s += switch("swapper/1", 0, 0, 1.070, 0, "R", 102, [])
    s += switch("python3", 200, 200, 1.080, 200, "S", 0, K_FUTEX + ["malloc " + OPT])
    s += switch("swapper/1", 0, 0, 1.090, 0, "R", 200, [])
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "p.txt")
        with open(path, "w") as f:
            f.write(s)
        cmd = [sys.executable, os.path.join(HERE, "sched_waits.py"), path, "--pid", "100"]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        lines = out.splitlines()
        want = {"main thread: preempted after waking optmem-pages": "5.00",
                "main thread: slept (S)": "2.00",
                "other thread: preempted at a timer tick": "3.00"}
        got = {}
        for line in lines[:-1]:
            name, rest = line[:60].rstrip(), line[60:].split()
            assert rest[0] == "1", line
            got[name] = rest[2]
        assert got == want, (got, out)
        assert lines[-1].endswith(": 1, longest 3.00 ms"), out
        bad = os.path.join(tmp, "bad.txt")
        with open(bad, "w") as f:
            f.write("this is not perf output\n")
        r = subprocess.run(cmd[:2] + [bad, "--pid", "100"], capture_output=True, text=True)
        assert r.returncode == 1 and len(r.stderr.splitlines()) == 1, (r.returncode, r.stderr)
    print("sched_waits: ok")


if __name__ == "__main__":
    main()
