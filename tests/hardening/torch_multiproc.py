#!/usr/bin/env python3
"""Multi-process PyTorch under optmem: two DDP ranks on CPU (gloo), and a DataLoader with
two forked workers. Each runs plain and under LD_PRELOAD: the same losses or batches, one
report per process, and `optmem report` merges them."""
import argparse
import glob
import json
import os
import socket
import subprocess
import sys
import tempfile

HERE = os.path.abspath(__file__)


def rank_main(steps):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                    torch.nn.Linear(256, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(1 + rank)
    for step in range(steps):
        x = torch.randn(128, 64, generator=g)
        y = torch.randint(0, 10, (128,), generator=g)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"rank {rank} step {step} loss {loss.item():.10f}", flush=True)
    dist.destroy_process_group()


def loader_main(epochs):
    import torch
    from torch.utils.data import DataLoader, Dataset
    torch.set_num_threads(1)

    class Squares(Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(i)
            return torch.randn(4096, generator=g), i  # 16 KiB: managed requests

    loader = DataLoader(Squares(), batch_size=8, num_workers=2, shuffle=False)
    for epoch in range(epochs):
        for x, idx in loader:
            print(f"epoch {epoch} batch {idx.tolist()} sum {x.double().sum().item():.6f}",
                  flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ddp(env, steps):
    port = str(free_port())
    procs = []
    for rank in range(2):
        e = dict(env, RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                 MASTER_PORT=port, OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, HERE, "--rank-main", str(steps)], env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        if p.returncode != 0:
            sys.exit(f"FAIL: a rank exited {p.returncode}:\n{out}{err}")
    return "".join(out for out, _ in outs)


def run_loader(env, epochs):
    p = subprocess.run([sys.executable, HERE, "--loader-main", str(epochs)],
                       env=dict(env, OMP_NUM_THREADS="1"), capture_output=True, text=True,
                       timeout=300)
    if p.returncode != 0:
        sys.exit(f"FAIL: the DataLoader run exited {p.returncode}:\n{p.stdout}{p.stderr}")
    return p.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank-main", type=int)
    ap.add_argument("--loader-main", type=int)
    ap.add_argument("--preload")
    ap.add_argument("--cli")
    ap.add_argument("--what", choices=["ddp", "dataloader"])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--worker-reports", type=int, default=2,
                    help="reports expected from DataLoader workers")
    a = ap.parse_args()
    if a.rank_main is not None:
        return rank_main(a.rank_main)
    if a.loader_main is not None:
        return loader_main(a.loader_main)

    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPTMEM_", "LD_PRELOAD"))}
    go = run_ddp if a.what == "ddp" else run_loader
    failures = []
    with tempfile.TemporaryDirectory() as work:
        plain = go(base, a.steps)
        env = dict(base, LD_PRELOAD=a.preload, OPTMEM_LOG="quiet",
                   OPTMEM_REPORT=os.path.join(work, "r.%r.%p.json"))
        under = go(env, a.steps)
        if sorted(plain.splitlines()) != sorted(under.splitlines()):
            failures.append(f"output differs:\nplain:\n{plain}\noptmem:\n{under}")
        reports = sorted(glob.glob(os.path.join(work, "r.*.json")))
        procs = []
        for path in reports:
            with open(path) as f:
                r = json.load(f)
            procs.append((r["process"]["rank"], r["process"]["pid"], r["process"]["ppid"],
                          r["counters"]["managed_requests"]))
        print("reports (rank, pid, ppid, managed requests):", procs)
        if a.what == "ddp":
            ranks = sorted(rank for rank, _, _, _ in procs)
            if ranks != [0, 1]:
                failures.append(f"expected one report per rank, got ranks {ranks}")
        else:
            main_pids = {pid for _, pid, _, _ in procs}
            workers = [p for p in procs if p[2] in main_pids]
            if len(procs) != 1 + a.worker_reports or len(workers) != a.worker_reports:
                failures.append(f"expected the main process and {a.worker_reports} workers, "
                                f"got {procs}")
        merged = subprocess.run([a.cli, "report", *reports], capture_output=True, text=True)
        if merged.returncode != 0 or not merged.stdout:
            failures.append(f"optmem report failed: {merged.stderr}")
        else:
            print(merged.stdout.splitlines()[0])
    for f in failures:
        print("FAIL:", f)
    if not failures:
        print(f"ok: {a.what}: {len(plain.splitlines())} lines identical plain and under optmem")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
