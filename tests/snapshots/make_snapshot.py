"""Writes a synthetic PyTorch memory snapshot and the figures it was built to have.

The snapshot is the pickle torch.cuda.memory._dump_snapshot writes, of plain dicts and
lists, made with the standard library only.

Usage: make_snapshot.py OUT.pickle [--seed N] [--format dict|legacy] [--devices D]
                        [--streams S] [--events N] [--protocol P] [--truth OUT.json]

Each device and stream gets its own allocator: one block per segment, segments cached when
their block is freed and given back now and then (segment_free, as empty_cache does), some
blocks and segments live before recording began, some frees only requested. The truth file
gives, per device and stream (and per device, all its streams together), the buffers, the lower bound (most bytes live at once, sizes
rounded as the caching allocator does: at least 512, a multiple of 512) and the native peak (most bytes held in segments), counted here while the
events are made, independently of how optmem reads them back.
"""
import argparse
import json
import pickle
import random

ROUND = 512
SEGMENT = 2 << 20

PY_FRAMES = [
    {"filename": "/work/train.py", "line": 40, "name": "<module>"},
    {"filename": "/work/model.py", "line": 12, "name": "forward"},
    {"filename": "/work/model.py", "line": 30, "name": "attention"},
    {"filename": "/work/optim.py", "line": 7, "name": "step"},
]
# A C++ stack as PyTorch records it: the unwinder and the allocator first.
CXX_FRAMES = [
    {"filename": "??", "line": 0, "name": "torch::unwind::unwind()"},
    {"filename": "CUDACachingAllocator.cpp", "line": 0,
     "name": "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc"},
    {"filename": "??", "line": 0, "name": "at::detail::empty_cuda"},
]


def round_up(n, to):
    return (n + to - 1) // to * to


def block_size(n):
    """The caching allocator's round_size: at least 512, a multiple of 512."""
    return max(ROUND, round_up(n, ROUND))


class Stream:
    """One device and stream: its allocator, and what it counts."""

    def __init__(self, device, stream, rng, addr_base, dev):
        self.device, self.stream, self.rng = device, stream, rng
        self.dev = dev  # the device's counts, all streams together: [live, lower bound]
        self.next_addr = addr_base
        self.segments = {}  # addr -> [total_size, block or None]
        self.live = 0  # bytes of blocks live now (rounded)
        self.lb = 0
        self.reserved = 0
        self.native = 0
        self.buffers = 0
        self.pending = []  # (addr, size, frames): free requested, never completed

    def new_segment(self, size):
        addr = self.next_addr
        self.next_addr += size + SEGMENT
        self.segments[addr] = [size, None]
        self.reserved += size
        self.native = max(self.native, self.reserved)
        return addr

    def take(self, rsize):
        """A cached segment that fits, else a new one; (addr, new?)."""
        for addr, seg in sorted(self.segments.items()):
            if seg[1] is None and seg[0] >= rsize:
                return addr, False
        return self.new_segment(round_up(rsize, SEGMENT)), True

    def grow_live(self, n):
        self.live += n
        self.lb = max(self.lb, self.live)
        self.dev[0] += n
        self.dev[1] = max(self.dev[1], self.dev[0])

    def shrink_live(self, n):
        self.live -= n
        self.dev[0] -= n


def frames_for(rng):
    k = rng.randint(0, 3)
    fr = [dict(f) for f in CXX_FRAMES] + [dict(f) for f in rng.sample(PY_FRAMES, k)]
    return fr if k or rng.random() < 0.5 else []


def event(action, addr, size, st, frames, t):
    e = {"action": action, "addr": addr, "size": size, "stream": st.stream, "frames": frames}
    if t is not None:
        e["time_us"] = t
    return e


def build(args):
    rng = random.Random(args.seed)
    streams, devs = [], []
    for d in range(args.devices):
        devs.append([0, 0])
        for s in range(args.streams):
            streams.append(Stream(d, s * 7, rng, (d + 1) << 44 | (s + 1) << 36, devs[d]))
    traces = [[] for _ in range(args.devices)]
    t = 1_700_000_000_000_000 if args.format == "dict" else None
    live = {}  # (device, addr) -> (size requested, rsize, frames, stream)

    # Before recording: blocks, some freed in the trace, some live until the end.
    for st in streams:
        for _ in range(rng.randint(1, 4)):
            size = rng.randint(1, 8 << 20)
            rsize = block_size(size)
            addr, _ = st.take(rsize)
            st.segments[addr][1] = (size, rsize)
            live[(st.device, addr)] = (size, rsize, frames_for(rng), st)
            st.grow_live(rsize)
            st.buffers += 1
        st.new_segment(SEGMENT)  # a cached, empty segment
    if args.format == "legacy":
        return streams, devs, traces
    for _ in range(args.events):
        st = rng.choice(streams)
        tr = traces[st.device]
        if t is not None:
            t += rng.randint(1, 50)
        mine = [k for k, v in live.items() if v[3] is st]
        r = rng.random()
        if r < 0.5 or not mine:
            size = rng.choice([rng.randint(0, 4096), rng.randint(1, 24 << 20)])
            rsize = block_size(size)
            addr, new = st.take(rsize)
            if new:
                tr.append(event("segment_alloc", addr, st.segments[addr][0], st, [], t))
            st.segments[addr][1] = (size, rsize)
            fr = frames_for(rng)
            live[(st.device, addr)] = (size, rsize, fr, st)
            tr.append(event("alloc", addr, size, st, fr, t))
            st.grow_live(rsize)
            st.buffers += 1
        elif r < 0.92:
            key = rng.choice(mine)
            size, rsize, fr, _ = live.pop(key)
            addr = key[1]
            st.segments[addr][1] = None
            tr.append(event("free_requested", addr, size, st, fr, t))
            if rng.random() < 0.03:
                # Never completed: the block keeps its segment; optmem ends it here.
                st.shrink_live(rsize)
                st.segments[addr][1] = ("pending", rsize)
                continue
            if rng.random() < 0.5:
                tr.append(event("snapshot", 0, 0, st, [], t))  # noise between the two
            tr.append(event("free_completed", addr, size, st, fr, t))
            st.shrink_live(rsize)
        else:
            # empty_cache: give back the cached segments.
            for addr, seg in sorted(st.segments.items()):
                if seg[1] is None:
                    tr.append(event("segment_free", addr, seg[0], st, [], t))
                    st.reserved -= seg[0]
                    del st.segments[addr]
    return streams, devs, traces


def segments_of(streams, args):
    out = []
    for st in streams:
        for addr, (total, blk) in sorted(st.segments.items()):
            blocks = []
            if blk is None:
                blocks.append({"size": total, "requested_size": 0, "state": "inactive"})
            else:
                size, rsize = blk
                state = "active_pending_free" if size == "pending" else "active_allocated"
                req = rsize if size == "pending" else size
                if args.format == "dict":
                    b = {"size": rsize, "requested_size": req, "state": state,
                         "frames": [dict(f) for f in PY_FRAMES[:2]]}
                else:  # torch 1.13: the request and its frames in the block's history
                    b = {"size": rsize, "state": state, "history": [
                        {"addr": addr, "real_size": req, "frames": [dict(PY_FRAMES[3])]}]}
                blocks.append(b)
                if total > rsize:
                    blocks.append({"size": total - rsize, "requested_size": 0,
                                   "state": "inactive"})
            if args.format == "dict":
                at = addr
                for b in blocks:
                    b["address"] = at
                    at += b["size"]
            out.append({"device": st.device, "address": addr, "total_size": total,
                        "allocated_size": sum(b["size"] for b in blocks
                                              if b["state"] != "inactive"),
                        "active_size": 0, "stream": st.stream, "segment_type": "large",
                        "blocks": blocks})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--format", choices=["dict", "legacy"], default="dict")
    ap.add_argument("--devices", type=int, default=1)
    ap.add_argument("--streams", type=int, default=1)
    ap.add_argument("--events", type=int, default=400)
    ap.add_argument("--protocol", type=int, default=4)
    ap.add_argument("--truth")
    args = ap.parse_args()
    streams, devs, traces = build(args)
    segs = segments_of(streams, args)
    if args.format == "dict":
        obj = {"segments": segs, "device_traces": traces,
               "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
                                      "garbage_collection_threshold": 0.0,
                                      "expandable_segments": False}}
    else:
        obj = segs
    with open(args.out, "wb") as f:
        f.write(pickle.dumps(obj, protocol=args.protocol))
    # A block whose free was requested and never completed is live in the segments: the
    # trace ends it at the request, and it is not counted a second time.
    truth = {"streams": [{"device": st.device, "stream": st.stream, "buffers": st.buffers,
                          "lower_bound": st.lb, "native_peak": st.native} for st in streams],
             "devices": [{"device": d, "lower_bound": dev[1],
                          "buffers": sum(st.buffers for st in streams if st.device == d)}
                         for d, dev in enumerate(devs)]}
    if args.truth:
        with open(args.truth, "w") as f:
            json.dump(truth, f, indent=1)


if __name__ == "__main__":
    main()
