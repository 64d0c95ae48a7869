"""Writes a replay file (tests/cuda/replay.c) of a model's forward pass made of identical layers.

Usage: make_layered_replay.py OUT.replay [--seed N] [--layers L] [--requests R] [--unit BYTES]

Weights live throughout. Each step embeds its input, runs L layers that make the same R
requests each (temporaries freed a request or two later; the layer's output, its next
layer's input, freed once that layer has made its own), and a head whose output lives to
the end of the step. A layer's live bytes come back where it ends, so the layer repeats
exactly inside the step, as in an inference forward pass; the step repeats only at its seam.
Sizes are multiples of --unit (default 1 MiB, so that the device's 2 MiB pages round
little) drawn from the seed; the weights hold about as much as the step's most bytes live.
"""
import argparse
import random


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--layers", type=int, default=10)
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--unit", type=int, default=1 << 20)
    args = ap.parse_args()
    if args.layers < 2 or args.requests < 3 or args.unit < 512 or args.unit % 512:
        ap.error("want --layers >= 2, --requests >= 3 and --unit a multiple of 512")
    rng = random.Random(args.seed)

    def size(lo, hi):
        return rng.randrange(lo, hi) * args.unit

    act = size(16, 64)  # the activation passed from layer to layer
    temps = [size(1, 128) for _ in range(args.requests - 1)]
    lives = [rng.choice((1, 1, 2)) for _ in temps]  # requests a temporary outlives
    embed = [size(1, 32) for _ in range(3)]
    head = [size(32, 128) for _ in range(3)]
    weights = [size(8, 64) for _ in range(args.layers + 2)]

    lines = ["optmem-replay 1", f"# make_layered_replay.py --seed {args.seed} --layers "
             f"{args.layers} --requests {args.requests}"]
    lines += [f"p {w} 0" for w in weights]
    ids = iter(range(1, 1 << 40))
    live = []  # [id, requests left]

    def alloc(n, outlives):
        for entry in live:
            entry[1] -= 1
        for entry in [e for e in live if e[1] < 0]:
            lines.append(f"f {entry[0]}")
            live.remove(entry)
        i = next(ids)
        lines.append(f"a {i} {n} 0")
        if outlives is not None:
            live.append([i, outlives])
        return i

    x = None
    for k, n in enumerate(embed):
        y = alloc(n if k < 2 else act, 0 if k < 2 else None)
    x = y
    for _ in range(args.layers):
        for n, life in zip(temps, lives):
            alloc(n, life)
        y = alloc(act, None)
        lines.append(f"f {x}")
        x = y
    outs = [alloc(n, None) for n in head]
    for entry in live:
        lines.append(f"f {entry[0]}")
    lines += [f"f {i}" for i in [x] + outs]
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
