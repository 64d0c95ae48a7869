#!/usr/bin/env python3
"""Hard placement instances for the replanner, in MiniMalloc's CSV (id,lower,upper,size[,alignment]).

Kinds:
  perfect   random guillotine cuts of a full rectangle (time x bytes) into N pieces, one
            buffer each: the pieces tile it, so the optimum is its height, the lower bound.
  crowded   N buffers of random size, alignment and lifetime crammed into a short timeline.
  cyclic    a perfect packing on a circle: the cut rectangle's time axis turned by a random
            shift modulo the period, so arcs wrap; the optimum is again the height.
  loop      a training loop's circle: arcs longer than half the period (tensors that live
            into the next iteration, which meet pairwise) stacked in a random order, and
            short arcs cut from part of the room each long arc leaves while it is dead,
            some across the rooms of neighbours in the stack; the optimum is the long
            arcs' bytes, above the most bytes live at once.

Writes the CSV to -o and one JSON line to stdout: kind, seed, buffers, period (0 on a line),
lb (most bytes live at once) and optimum (the height for perfect and cyclic, else null).
"""
import argparse
import json
import random
import sys


def guillotine(rng, n, width, height, granule):
    """n rectangles (x0, x1, y0, y1) tiling [0, width) x [0, height); each cut splits a
    piece across its time or its bytes at a random point on the grid (bytes in granules)."""
    pieces = [(0, width, 0, height)]
    tries = 0
    while len(pieces) < n:
        tries += 1
        if tries > 100 * n:
            sys.exit("gen_instances: cannot cut %d pieces from %dx%d" % (n, width, height))
        # larger pieces are cut first, so the sizes stay varied but none is a sliver
        k = max(range(len(pieces)), key=lambda i: (pieces[i][1] - pieces[i][0]) *
                (pieces[i][3] - pieces[i][2]) * rng.random())
        x0, x1, y0, y1 = pieces[k]
        across_time = rng.random() < 0.5
        if across_time and x1 - x0 >= 2:
            c = rng.randrange(x0 + 1, x1)
            pieces[k:k + 1] = [(x0, c, y0, y1), (c, x1, y0, y1)]
        elif not across_time and (y1 - y0) // granule >= 2:
            c = y0 + granule * rng.randrange(1, (y1 - y0) // granule)
            pieces[k:k + 1] = [(x0, x1, y0, c), (x0, x1, c, y1)]
    return pieces


def lower_bound(rows, period):
    """Most bytes live at once; rows are (lower, upper, size), half-open, arcs mod period."""
    ev = []
    for lo, up, size in rows:
        if period and up > period:
            ev += [(lo, size), (period, -size), (0, size), (up - period, -size)]
        else:
            ev += [(lo, size), (up, -size)]
    ev.sort(key=lambda e: (e[0], e[1]))  # ends before starts at the same time
    live = best = 0
    for _, d in ev:
        live += d
        best = max(best, live)
    return best


def loop(rng, n):
    """A circle whose optimum is its clique of long arcs: (rows, period, optimum)."""
    granule = 16
    period = max(16, 2 * n)
    nlong = max(2, n // 4)
    layers = []  # (start, length, size) in stack order, bottom first
    for _ in range(nlong):
        length = period // 2 + 1 + rng.randrange(period - period // 2 - 1)
        layers.append((rng.randrange(period), length, granule * (1 + rng.randrange(64))))
    rows = [(s, s + ln, size, 0) for s, ln, size in layers]
    # taken[i][t]: time t of layer i's room (its long arc dead) holds a short arc already
    taken = [[False] * period for _ in layers]

    def free(i, t):
        s, ln, _ = layers[i]
        return (t - s) % period >= ln and not taken[i][t]

    tries = 0
    while len(rows) < n and tries < 1000 * n:
        tries += 1
        i = rng.randrange(nlong)
        s, ln, _ = layers[i]
        t0 = (s + ln + rng.randrange(period - ln)) % period
        if not free(i, t0):
            continue
        # along its room for a while, then up into the rooms above while they are free
        span = 1
        while span < period // 2 and free(i, (t0 + span) % period) and rng.random() < 0.85:
            span += 1
        top = i
        while (top + 1 < nlong and rng.random() < 0.4 and
               all(free(top + 1, (t0 + d) % period) for d in range(span))):
            top += 1
        size = sum(layers[j][2] for j in range(i, top + 1))
        for j in range(i, top + 1):
            for d in range(span):
                taken[j][(t0 + d) % period] = True
        # a piece of two layers or more is sometimes two arcs, split across its bytes
        if top > i and len(rows) + 1 < n and rng.random() < 0.5:
            cut = granule * (1 + rng.randrange(size // granule - 1))
            rows += [(t0, t0 + span, cut, 0), (t0, t0 + span, size - cut, 0)]
        else:
            rows.append((t0, t0 + span, size, 0))
    rng.shuffle(rows)
    return rows, period, sum(size for _, _, size in layers)


def generate(kind, n, seed):
    """(rows of (lower, upper, size, alignment), period, optimum or None)."""
    rng = random.Random("%s/%d/%d" % (kind, n, seed))
    if kind in ("perfect", "cyclic"):
        granule = 16
        width = max(8, 2 * n)
        height = granule * max(64, 8 * n)
        pieces = guillotine(rng, n, width, height, granule)
        rng.shuffle(pieces)
        period = width if kind == "cyclic" else 0
        shift = rng.randrange(width) if period else 0
        rows = []
        for x0, x1, y0, y1 in pieces:
            lo = (x0 + shift) % width if period else x0
            rows.append((lo, lo + x1 - x0, y1 - y0, 0))
        return rows, period, height
    if kind == "loop":
        return loop(rng, n)
    if kind == "crowded":
        horizon = max(4, n // 8)
        rows = []
        for _ in range(n):
            lo = rng.randrange(horizon)
            up = lo + 1 + rng.randrange(min(horizon - lo, 1 + horizon // 3))
            align = 1 << rng.choice((0, 4, 6, 8, 12))
            size = rng.choice((1, 8, 48, 100, 512, 4096, 12288)) * (1 + rng.randrange(16))
            rows.append((lo, up, size, align))
        return rows, 0, None
    sys.exit("gen_instances: unknown kind '%s' (perfect, crowded, cyclic, loop)" % kind)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", help="perfect, crowded, cyclic or loop")
    ap.add_argument("--n", type=int, default=200, help="buffers (default 200)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("-o", "--output", required=True, help="CSV to write")
    a = ap.parse_args()
    if a.n < 1 or a.n > 10**6:
        sys.exit("gen_instances: --n must be in 1..1000000")
    rows, period, optimum = generate(a.kind, a.n, a.seed)
    aligned = any(r[3] > 1 for r in rows)
    with open(a.output, "w") as f:
        f.write("id,lower,upper,size" + (",alignment" if aligned else "") + "\n")
        for i, (lo, up, size, align) in enumerate(rows):
            f.write("%d,%d,%d,%d" % (i, lo, up, size) + (",%d" % align if aligned else "") + "\n")
    lb = lower_bound([r[:3] for r in rows], period)
    if optimum is not None and lb != optimum and a.kind != "loop":
        sys.exit("gen_instances: internal error, packing of height %d has LB %d" % (optimum, lb))
    print(json.dumps({"kind": a.kind, "seed": a.seed, "buffers": len(rows), "period": period,
                      "lb": lb, "optimum": optimum}))


if __name__ == "__main__":
    main()
