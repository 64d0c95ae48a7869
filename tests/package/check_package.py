"""The Debian package end to end: built with cpack, unpacked with dpkg-deb -x into a scratch
root (no root needed), its optmem run preloading its own liboptmem.so, its optmem.pc and
optmem.h compiling and linking a program against its library, its control fields and man page."""

import argparse
import glob
import gzip
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
from until_plan import run_until_plan  # noqa: E402

# Paths every package must hold, relative to its root; the libraries' directory varies.
EXPECTED = ("usr/bin/optmem", "usr/include/optmem.h", "usr/share/man/man1/optmem.1.gz")
LIBRARIES = ("liboptmem.so", "liboptmem_cupti.so", "pkgconfig/optmem.pc")
# Every library the binaries link, as the Debian package that holds it.
LINKED_PACKAGES = ("libc6", "libgcc-s1", "libstdc++6", "libjansson4", "libdw1")

API_PROGRAM = r"""
#include <optmem.h>
#include <stdio.h>
#include <string.h>
int main(void)
{
    char expect[32];
    snprintf(expect, sizeof expect, "%d.%d.%d", OPTMEM_VERSION_MAJOR, OPTMEM_VERSION_MINOR,
             OPTMEM_VERSION_PATCH);
    optmem_step();
    printf("%s %s %s\n", optmem_version(), expect, optmem_mode());
    return strcmp(optmem_version(), expect) != 0;
}
"""


class CheckError(Exception):
    pass


def expect(cond, what):
    if not cond:
        raise CheckError(what)


def run(cmd, env=None, timeout=120, cwd=None):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                          timeout=timeout, cwd=cwd)
    expect(proc.returncode == 0, "%s: exit %d\n%s%s" % (
        " ".join(map(shlex.quote, cmd)), proc.returncode, proc.stdout.decode(),
        proc.stderr.decode()))
    return proc.stdout.decode(), proc.stderr.decode()


def clean_env():
    """The environment without anything optmem or the loader would take from the caller."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("OPTMEM_", "PKG_CONFIG", "LD_"))}


def build_package(args, tmp):
    out = os.path.join(tmp, "out")
    run([args.cpack, "-G", "DEB", "--config", args.config, "-B", out], timeout=300)
    debs = glob.glob(os.path.join(out, "*.deb"))
    arch = run(["dpkg", "--print-architecture"])[0].strip()
    want = "optmem_%s_%s.deb" % (args.version, arch)
    expect([os.path.basename(d) for d in debs] == [want],
           "cpack wrote %s, expected %s" % (debs, want))
    return debs[0]


def check_control(deb, args):
    info = run(["dpkg-deb", "-I", deb])[0]
    fields = dict(re.findall(r"^ ([A-Z][A-Za-z-]*): (.*)$", info, re.M))
    expect(fields.get("Package") == "optmem", "Package: %r" % fields.get("Package"))
    expect(fields.get("Version") == args.version, "Version: %r" % fields.get("Version"))
    expect("Depends" in fields, "no Depends field in:\n" + info)
    depends = {d.strip().split()[0] for d in fields["Depends"].split(",")}
    missing = [p for p in LINKED_PACKAGES if p not in depends]
    expect(not missing, "Depends lacks %s: %s" % (missing, fields["Depends"]))
    print("Depends: " + fields["Depends"])


def check_contents(deb):
    """The files listed by dpkg-deb -c; returns the libraries' directory."""
    listing = run(["dpkg-deb", "-c", deb])[0]
    files = {line.split()[-1].lstrip("./") for line in listing.splitlines()
             if line.startswith("-")}
    for path in EXPECTED:
        expect(path in files, "%s not in the package:\n%s" % (path, listing))
    # Built by any user, the files are root's once installed.
    owners = {line.split()[1] for line in listing.splitlines()}
    expect(owners == {"root/root"}, "owners in the package: %s" % sorted(owners))
    libdirs = {os.path.dirname(f) for f in files if f.endswith("/liboptmem.so")}
    expect(len(libdirs) == 1 and re.fullmatch(r"usr/lib(/[a-z0-9_]+-linux-gnu[a-z0-9_]*)?",
                                              next(iter(libdirs))),
           "liboptmem.so in %s" % sorted(libdirs))
    libdir = libdirs.pop()
    for path in LIBRARIES:
        expect(os.path.join(libdir, path) in files, "%s/%s not in the package" % (libdir, path))
    return libdir


def check_files(root, libdir, args):
    with gzip.open(os.path.join(root, "usr/share/man/man1/optmem.1.gz"), "rb") as f:
        man = f.read()
    with open(args.man, "rb") as f:
        expect(man == f.read(), "optmem.1.gz is not docs/optmem.1")
    version = run([os.path.join(root, "usr/bin/optmem"), "--version"], env=clean_env())[0]
    expect(version.strip() == "optmem " + args.version, "optmem --version: %r" % version)


def check_run(root, libdir, args, tmp):
    """The unpacked optmem run preloads the unpacked library, runs the workload and writes
    its report."""
    installed = os.path.realpath(os.path.join(root, libdir, "liboptmem.so"))
    reports = os.path.join(tmp, "reports")
    os.mkdir(reports)
    cmd = [os.path.join(root, "usr/bin/optmem"), "run", "-o",
           os.path.join(reports, "report.%p.json"), "--", args.python,
           os.path.join(HERE, "workload.py"), "40", "--until-eof"]
    # The summary needs a plan, searched on the optmem-plan thread (the default): the
    # workload goes on until its report shows one (40 short steps may end first).
    rc, out, err, planned = run_until_plan(cmd, os.path.join(reports, "report.*.json"),
                                           env=clean_env(), cwd=tmp)
    expect(rc == 0, "%s: exit %d\n%s%s" % (" ".join(map(shlex.quote, cmd)), rc, out, err))
    expect(planned, "no plan in the run's report within 120 s:\n" + err)
    seen = json.loads(out)
    expect(seen["ld_preload"] == installed,
           "LD_PRELOAD %r, expected the unpacked %r" % (seen["ld_preload"], installed))
    expect(seen["mapped"] == [installed],
           "liboptmem.so mapped: %s, expected only %s" % (seen["mapped"], installed))
    m = re.search(r"^optmem: report: (\S+)$", err, re.M)
    expect(m is not None, "optmem run printed no report path:\n" + err)
    path = m.group(1)
    expect(os.path.dirname(path) == reports and os.path.exists(path),
           "report %s not written under %s" % (path, reports))
    with open(path) as f:
        report = json.load(f)
    requests = report["counters"]["managed_requests"]
    expect(requests >= seen["requests"], "report: %d managed requests, the workload made %d" %
           (requests, seen["requests"]))
    expect("served from the plan" in err, "no run summary:\n" + err)
    # The unpacked optmem report reads it.
    text = run([os.path.join(root, "usr/bin/optmem"), "report", path], env=clean_env())[0]
    expect(text.strip() != "", "optmem report printed nothing")


def check_pkg_config(root, libdir, args, tmp):
    """optmem.pc names the package's /usr; with the scratch root as sysroot, its flags build
    and link a program of the public API against the unpacked library."""
    env = clean_env()
    env["PKG_CONFIG_PATH"] = os.path.join(root, libdir, "pkgconfig")
    env["PKG_CONFIG_LIBDIR"] = env["PKG_CONFIG_PATH"]  # not the machine's own .pc files
    prefix = run([args.pkg_config, "--variable=prefix", "optmem"], env=env)[0].strip()
    expect(prefix == "/usr", "optmem.pc prefix %r, expected /usr" % prefix)
    modversion = run([args.pkg_config, "--modversion", "optmem"], env=env)[0].strip()
    expect(modversion == args.version, "pkg-config --modversion: %r" % modversion)
    env["PKG_CONFIG_SYSROOT_DIR"] = root
    env["PKG_CONFIG_ALLOW_SYSTEM_CFLAGS"] = "1"
    env["PKG_CONFIG_ALLOW_SYSTEM_LIBS"] = "1"
    flags = run([args.pkg_config, "--cflags", "--libs", "optmem"], env=env)[0].split()
    print("pkg-config --cflags --libs optmem: " + " ".join(flags))
    want = ["-I" + os.path.join(root, "usr/include"), "-L" + os.path.join(root, libdir),
            "-loptmem"]
    expect(sorted(flags) == sorted(want), "flags %s, expected %s" % (flags, want))
    src = os.path.join(tmp, "api.c")
    with open(src, "w") as f:
        f.write(API_PROGRAM)
    exe = os.path.join(tmp, "api")
    run([args.cc, "-std=c11", "-Wall", "-Werror", src, "-o", exe] + flags, env=env)
    env = clean_env()
    env["LD_LIBRARY_PATH"] = os.path.join(root, libdir)
    env["OPTMEM_MODE"] = "trace"
    env["OPTMEM_REPORT"] = os.path.join(tmp, "api.json")
    out = run([exe], env=env)[0].split()
    expect(out == [args.version, args.version, "trace"], "api program printed %s" % out)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cpack", required=True)
    ap.add_argument("--config", required=True, help="the build's CPackConfig.cmake")
    ap.add_argument("--version", required=True)
    ap.add_argument("--man", required=True, help="docs/optmem.1")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--pkg-config", default="pkg-config")
    ap.add_argument("--cc", default="cc")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="optmem-package-test.")
    try:
        deb = build_package(args, tmp)
        check_control(deb, args)
        libdir = check_contents(deb)
        root = os.path.join(tmp, "root")
        run(["dpkg-deb", "-x", deb, root])
        check_files(root, libdir, args)
        check_run(root, libdir, args, tmp)
        check_pkg_config(root, libdir, args, tmp)
    except (CheckError, subprocess.SubprocessError, OSError, KeyError, ValueError) as e:
        print("FAIL package: %s" % e, file=sys.stderr)
        return 1
    finally:
        if args.keep:
            print("kept " + tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print("ok package: %s" % os.path.basename(deb))
    return 0


if __name__ == "__main__":
    sys.exit(main())
