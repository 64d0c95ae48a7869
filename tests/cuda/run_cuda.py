"""Runs a program linked against the fake CUDA plainly and under liboptmem.so with the device
domain managed (OPTMEM_DEVICES=cpu,cuda, plan mode, OPTMEM_VERIFY=1), requires exit status 0
and the same stdout from both, valid reports, and the --check expressions on the reports.

A check is "DOMAIN PATH OP VALUE": DOMAIN is cpu (the top level) or cuda:N (an entry of
device_domains), prefixed "child:" to check every report but the first process's (forked
children); PATH is a dotted path into the domain, or served_fraction (served_from_plan over
serving_requests); OP is ==, >= or <=; VALUE is a number, or @NAME for the number the program
printed on a line "NAME NUMBER". "DOMAIN present" and "DOMAIN absent" check that a domain is
or is not reported; "devices == N" counts the device domains. "%NAME OP FACTOR DOMAIN PATH"
compares a number the optmem run printed on stderr as "NAME NUMBER" (what the device held,
which differs from the plain run's) with FACTOR times the domain's PATH; "%NAME OP VALUE"
with a number."""
import argparse
import glob
import json
import operator
import os
import re
import sys
import tempfile

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, TESTS)
sys.path.insert(0, os.path.join(TESTS, "tracer"))
from run_serving import command, plain_env, run, run_under_optmem  # noqa: E402
from report_schema import SchemaError, validate  # noqa: E402

OPS = {"==": operator.eq, ">=": operator.ge, "<=": operator.le}


def domain_of(report, name):
    if name == "cpu":
        return report
    for d in report.get("device_domains") or []:
        if isinstance(d, dict) and d.get("name") == name:
            return d
    return None


def lookup(dom, path):
    if path == "served_fraction":
        serving = dom.get("serving") or {}
        requests = serving.get("serving_requests")
        if not requests:
            raise KeyError("serving.serving_requests is 0 or missing")
        return serving["served_from_plan"] / requests
    value = dom
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            raise KeyError(path)
        value = value[key]
    return value


def printed_numbers(stdout):
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+) (\d+)$", stdout, re.M)}


def check(expr, main, children, printed, printed_err):
    """Returns the failures of one check expression."""
    words = expr.split()
    if words[:1] and words[0].startswith("%"):
        if len(words) not in (3, 5) or words[1] not in OPS:
            return [f"bad check expression: {expr}"]
        if words[0][1:] not in printed_err:
            return [f"{expr}: the optmem run printed no line '{words[0][1:]} N' on stderr"]
        got = printed_err[words[0][1:]]
        if len(words) == 3:
            return [] if OPS[words[1]](got, int(words[2])) else [f"{expr}: got {got}"]
        dom = domain_of(main, words[3])
        if dom is None:
            return [f"{expr}: no domain {words[3]} in the report"]
        try:
            want = float(words[2]) * lookup(dom, words[4])
        except (KeyError, ValueError) as e:
            return [f"{expr}: {e}"]
        got = printed_err[words[0][1:]]
        return [] if OPS[words[1]](got, want) else [f"{expr}: got {got}, against {want:.0f}"]
    if words[:1] == ["devices"] and len(words) == 3:
        got = len(main.get("device_domains") or [])
        return [] if OPS[words[1]](got, int(words[2])) else [f"{expr}: {got} device domain(s)"]
    where, name = (children, words[0][6:]) if words[0].startswith("child:") else ([main], words[0])
    if not where:
        return [f"{expr}: no report of a forked child"]
    failures = []
    for report in where:
        pid = report["process"]["pid"]
        dom = domain_of(report, name)
        if len(words) == 2 and words[1] in ("present", "absent"):
            if (dom is not None) != (words[1] == "present"):
                failures.append(f"{expr}: not so in the report of pid {pid}")
            continue
        if len(words) != 4 or words[2] not in OPS:
            return [f"bad check expression: {expr}"]
        if dom is None:
            failures.append(f"{expr}: no domain {name} in the report of pid {pid}")
            continue
        want = words[3]
        if want.startswith("@"):
            if want[1:] not in printed:
                return [f"{expr}: the program printed no line '{want[1:]} N'"]
            want = printed[want[1:]]
        else:
            want = float(want) if "." in want else int(want)
        try:
            got = lookup(dom, words[1])
        except KeyError as e:
            failures.append(f"{expr}: {e} missing in pid {pid}'s {name}")
            continue
        if not OPS[words[2]](got, want):
            failures.append(f"{expr}: got {got!r} in pid {pid}'s {name}")
    return failures


def summary(report):
    lines = []
    for d in [report] + list(report.get("device_domains") or []):
        name = d.get("name", "cpu") if d is not report else "cpu"
        it = d.get("iterations") or {}
        lines.append(f"  {name}: counters {json.dumps(d.get('counters'))} lower_bound "
                     f"{d.get('lower_bound_bytes')} period {it.get('period_requests')} "
                     f"serving {json.dumps(d.get('serving'))}")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preload", required=True)
    ap.add_argument("--fake-dir", required=True, help="where libcuda.so.1 and libcudart.so.13 are")
    ap.add_argument("--devices", default="cpu,cuda", help="OPTMEM_DEVICES of the optmem run")
    ap.add_argument("--expect", default="optmem", choices=("optmem", "fake"),
                    help="CUDA_TEST_EXPECT of the optmem run: who serves device requests")
    ap.add_argument("--env", action="append", default=[], help="NAME=VALUE for both runs")
    ap.add_argument("--check", action="append", default=[])
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = command(args)

    base = plain_env()
    base["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (args.fake_dir, base.get("LD_LIBRARY_PATH")) if p)
    for item in args.env:
        key, _, value = item.partition("=")
        base[key] = value
    rc, plain_out, plain_err = run(cmd, dict(base, CUDA_TEST_EXPECT="fake"))
    if rc != 0:
        sys.exit(f"FAIL: the program fails without optmem ({rc}):\n{plain_err}")

    with tempfile.TemporaryDirectory() as tmp:
        env = dict(base, LD_PRELOAD=args.preload, OPTMEM_MODE="plan", OPTMEM_VERIFY="1",
                   OPTMEM_DEVICES=args.devices, OPTMEM_REPORT=f"{tmp}/report.%p.json",
                   CUDA_TEST_EXPECT=args.expect)
        err, failures = run_under_optmem(cmd, env, plain_out,
                                         problems=("verify:", "double free", "FAIL"))
        reports = []
        for path in sorted(glob.glob(f"{tmp}/report.*.json")):
            try:
                reports.append(json.load(open(path)))
            except (OSError, ValueError) as e:
                failures.append(f"{path}: unreadable report: {e}")
        if not reports:
            print("FAIL:", *failures, "no report written\n" + err, sep="\n")
            sys.exit(1)
        reports.sort(key=lambda r: r["process"]["pid"])
        main_report, children = reports[0], reports[1:]
        for r in reports:
            pid = r["process"]["pid"]
            try:
                validate(r)
            except SchemaError as e:
                failures.append(f"report of pid {pid} is not valid: {e}")
            for d in [r] + list(r.get("device_domains") or []):
                serving = d.get("serving") or {}
                for key in ("verify_violations", "invalid_frees"):
                    if serving.get(key):
                        failures.append(f"pid {pid} {d.get('name', 'cpu')}: "
                                        f"serving.{key} = {serving[key]}")
            print(f"report of pid {pid}:\n{summary(r)}")
        printed = printed_numbers(plain_out)
        for expr in args.check:
            failures += check(expr, main_report, children, printed, printed_numbers(err))
        if failures:
            print("FAIL:", *failures, sep="\n")
            sys.exit(1)
        print(f"ok: same output as the plain run, {len(reports)} report(s), "
              f"{len(args.check)} check(s)")


if __name__ == "__main__":
    main()
