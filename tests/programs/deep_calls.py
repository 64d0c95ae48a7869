"""Requests from deep Python stacks: each iteration makes six bytearrays of 64 to 192 KiB at
the bottom of 21 Python calls and one of 112 KiB at 13, then frees them. Usage:
deep_calls.py [ITERATIONS] (3000 by default). The program of docs/tracer.md, "Cost per
request", and of tests/cheap_key.py."""

import sys

SIZES = [64 << 10, 96 << 10, 128 << 10, 160 << 10, 192 << 10, 80 << 10]


def bottom(out):
    for s in SIZES:
        out.append(bytearray(s))


def mid(out):
    out.append(bytearray(112 << 10))


def down(n, out):
    if n == 13:
        mid(out)
    if n == 0:
        bottom(out)
        return
    down(n - 1, out)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    for _ in range(n):
        out = []
        down(20, out)
        del out


main()
