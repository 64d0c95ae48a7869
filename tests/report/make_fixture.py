"""Turns a real report into a committed fixture: the pid, paths and thread id of the run
become fixed values, so that the golden outputs do not depend on the machine.

Usage: make_fixture.py IN.json OUT.json PID NAME (NAME: the program's file name)."""
import json
import sys


def main():
    src, dst, pid, name = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    with open(src) as f:
        r = json.load(f)
    exe = r["process"]["exe"]
    fake = "/opt/optmem-fixture/" + name
    r["process"].update(pid=pid, ppid=pid - 1, exe=fake,
                        argv=[name] + r["process"]["argv"][1:])
    r["duration_ns"] = 1000000
    det = r["iterations"].get("detector")
    if det:
        det["thread"] = pid
    for site in r["sites"]:
        for fr in site["frames"]:
            if fr["module"] == exe:
                fr["module"] = fake
    with open(dst, "w") as f:
        json.dump(r, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
