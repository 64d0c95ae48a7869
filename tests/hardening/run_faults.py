#!/usr/bin/env python3
"""Resource faults and signals under optmem: a report directory that does not exist, a
report that does not fit (RLIMIT_FSIZE), an arena that cannot be reserved (RLIMIT_AS), and
SIGTERM to `optmem run`. The program's output and status never change; each fault gives
one clear optmem: line."""
import argparse
import glob
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time

failures = []


def fail(msg):
    print("FAIL:", msg)
    failures.append(msg)


def optmem_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith("optmem:")]


def run(cmd, env, preexec=None):
    return subprocess.run(cmd, env=env, preexec_fn=preexec, capture_output=True, text=True,
                          timeout=120)


def expect_one_line(name, plain, got, needle, work):
    """Same output and status as the plain run, one optmem: line containing needle, and no
    report nor temporary file left in work."""
    if got.returncode != plain.returncode or got.stdout != plain.stdout:
        fail(f"{name}: status {got.returncode} or output changed:\n{got.stdout}{got.stderr}")
    hits = [line for line in optmem_lines(got.stderr) if needle in line]
    if len(hits) != 1:
        fail(f"{name}: expected one optmem: line with {needle!r}, stderr was:\n{got.stderr}")
    else:
        print(f"ok: {name}: {hits[0]}")
    left = os.listdir(work) if os.path.isdir(work) else []
    if left:
        fail(f"{name}: files left behind: {left}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preload", required=True)
    ap.add_argument("--cli", required=True, help="the optmem command")
    ap.add_argument("command", nargs="+", help="a program that prints a deterministic result")
    a = ap.parse_args()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPTMEM_", "LD_PRELOAD"))}
    plain = run(a.command, base)
    if plain.returncode != 0:
        sys.exit("FAIL: the program fails without optmem:\n" + plain.stdout + plain.stderr)

    with tempfile.TemporaryDirectory() as work:
        env = dict(base, LD_PRELOAD=a.preload)

        # 1. The report's directory does not exist; the line names the path as expanded.
        missing = os.path.join(work, "missing", "r.%p.json")
        got = run(a.command, dict(env, OPTMEM_REPORT=missing))
        expect_one_line("missing directory", plain, got, "could not write the report", work)
        if "%p" in got.stderr or "/missing/r." not in got.stderr:
            fail(f"missing directory: the line does not name the expanded path:\n{got.stderr}")

        # 2. The disk is full for this process: writes past 2 KiB fail with EFBIG
        # (SIGXFSZ ignored, as a process with a full disk gets ENOSPC, not a signal).
        def small_files():
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))

        got = run(a.command, dict(env, OPTMEM_REPORT=os.path.join(work, "r.json")), small_files)
        expect_one_line("report too large", plain, got, "could not write the report", work)

        # 3. The arena's reservation (twice the RAM, MAP_NORESERVE) fails under RLIMIT_AS:
        # the program goes on recording only, and the report still comes.
        def small_address_space():
            resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

        report = os.path.join(work, "as.json")
        got = run(a.command, dict(env, OPTMEM_REPORT=report), small_address_space)
        if os.path.exists(report):
            with open(report) as f:
                json.load(f)
            os.unlink(report)
        else:
            fail("arena reservation: no report")
        expect_one_line("arena reservation", plain, got, "could not be reserved", work)

        # 4. SIGTERM to `optmem run`: forwarded to the command, whose status optmem run
        # returns as its own (killed by SIGTERM). optmem installs no handler: the report
        # is the last checkpoint, written within 2.25 s of the requests (docs/hardening.md;
        # the wait allows for a loaded machine), whole, with no temporary left.
        script = ("import time\n"
                  "blocks = [bytearray(65536) for _ in range(16)]\n"
                  "print('ready', flush=True)\n"
                  "time.sleep(60)\n")
        term = os.path.join(work, "term.json")
        p = subprocess.Popen([a.cli, "run", "-o", term, "--", "/usr/bin/python3", "-c", script],
                             env=base, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        ready = p.stdout.readline().strip()
        time.sleep(6)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
        if ready != "ready" or p.returncode not in (-signal.SIGTERM, 128 + signal.SIGTERM):
            fail(f"SIGTERM: status {p.returncode}, first line {ready!r}:\n{out}{err}")
        reports = glob.glob(os.path.join(work, "term*"))
        if term not in reports:
            fail(f"SIGTERM: no report:\n{err}")
        for path in reports:
            if path != term:
                fail(f"SIGTERM: left {path}")
            else:
                with open(path) as f:
                    json.load(f)
        print(f"ok: SIGTERM: status {p.returncode}; report written: "
              f"{'yes' if os.path.exists(term) else 'no'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
