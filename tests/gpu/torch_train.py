"""PyTorch training on a GPU, the same steps on every route to device memory: the PyTorch workload of tools/gpu_check.sh (needs CUDA; not a ctest).

The route is the caller's, as a user sets it: PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync,
PYTORCH_NO_CUDA_MEMORY_CACHING=1, the default caching allocator, or --pluggable LIB
(CUDAPluggableAllocator over LIB's optmem_cuda_malloc/optmem_cuda_free). Prints one
"step N loss X" line a step, steps/s, and the device memory the process added, read
with cudaMemGetInfo after the forward, the backward and the optimizer step of every step.
"""

import argparse
import os
import sys
import time

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("--steps", type=int, default=40)
p.add_argument("--model", choices=("transformer", "cnn"), default="transformer")
p.add_argument("--pluggable", metavar="LIB",
               help="allocate through CUDAPluggableAllocator(LIB, optmem_cuda_malloc, "
               "optmem_cuda_free)")
p.add_argument("--snapshot", metavar="PATH",
               help="record the allocator's history and dump a memory snapshot to PATH "
               "(the caching allocator only)")
args = p.parse_args()
if args.steps < 4:
    p.error("--steps must be at least 4")

# Deterministic cuBLAS needs its workspace fixed before the first handle exists.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402
from torch import nn  # noqa: E402

if not torch.cuda.is_available():
    sys.exit("torch_train: torch.cuda.is_available() is false: no GPU to train on")
if args.pluggable:
    allocator = torch.cuda.memory.CUDAPluggableAllocator(
        args.pluggable, "optmem_cuda_malloc", "optmem_cuda_free")
    torch.cuda.memory.change_current_allocator(allocator)

dev = torch.device("cuda", 0)
torch.manual_seed(0)
torch.use_deterministic_algorithms(True, warn_only=True)
torch.backends.cudnn.benchmark = False
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.cuda.init()
torch.zeros(1, device=dev)  # the context, before the baseline is read
torch.cuda.synchronize()
free0, total = torch.cuda.mem_get_info(0)
if args.snapshot:
    torch.cuda.memory._record_memory_history(max_entries=400000)

if args.model == "transformer":
    BATCH, SEQ, VOCAB, D, HEADS, FF, LAYERS = 32, 256, 4096, 512, 8, 2048, 6

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(VOCAB, D)
            self.pos = nn.Parameter(torch.randn(1, SEQ, D) * 0.02)
            layer = nn.TransformerEncoderLayer(D, HEADS, FF, dropout=0.0, batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
            self.head = nn.Linear(D, VOCAB)

        def forward(self, x):
            return self.head(self.encoder(self.embed(x) + self.pos)).reshape(-1, VOCAB)

    gen = torch.Generator(device=dev).manual_seed(1)
    xs = torch.randint(0, VOCAB, (8, BATCH, SEQ), device=dev, generator=gen)
    ys = torch.roll(xs, shifts=1, dims=2).reshape(8, -1)
else:
    BATCH, CLASSES = 64, 100

    def block(cin, cout, stride):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
                             nn.BatchNorm2d(cout), nn.ReLU())

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(block(3, 64, 1), block(64, 128, 2), block(128, 128, 1),
                                      block(128, 256, 2), block(256, 256, 1),
                                      block(256, 512, 2))
            self.head = nn.Linear(512, CLASSES)

        def forward(self, x):
            return self.head(self.body(x).mean((2, 3)))

    gen = torch.Generator(device=dev).manual_seed(1)
    xs = torch.randn(8, BATCH, 3, 64, 64, device=dev, generator=gen)
    ys = torch.randint(0, CLASSES, (8, BATCH), device=dev, generator=gen)

model = Net().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
loss_fn = nn.CrossEntropyLoss()
peak_used = steady_used = 0


def sample(steady):
    """Device memory in use now (cudaMemGetInfo): it holds what an allocator keeps, and
    misses what one returns to the driver within a step."""
    global peak_used, steady_used
    torch.cuda.synchronize()
    free, _ = torch.cuda.mem_get_info(0)
    peak_used = max(peak_used, free0 - free)
    if steady:
        steady_used = max(steady_used, free0 - free)


WARMUP = 3
start = None
for i in range(args.steps):
    if i == WARMUP:
        torch.cuda.synchronize()
        start = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(xs[i % 8]), ys[i % 8])
    sample(i >= WARMUP)
    loss.backward()
    sample(i >= WARMUP)
    opt.step()
    sample(i >= WARMUP)
    print("step %d loss %.9g" % (i, loss.item()), flush=True)
torch.cuda.synchronize()
seconds = time.perf_counter() - start

if args.snapshot:
    torch.cuda.memory._dump_snapshot(args.snapshot)
    torch.cuda.memory._record_memory_history(enabled=None)
try:
    reserved = "%.1f MiB" % (torch.cuda.max_memory_reserved(0) / 2**20)
except RuntimeError:  # not kept by every backend
    reserved = "not kept"
print("steps/s %.2f" % ((args.steps - WARMUP) / seconds))
print("peak device memory used %.1f MiB above the %.1f MiB used after CUDA init of %.1f MiB "
      "(cudaMemGetInfo, 3 reads a step), %.1f MiB from step %d on; torch max_memory_reserved %s"
      % (peak_used / 2**20, (total - free0) / 2**20, total / 2**20, steady_used / 2**20, WARMUP,
         reserved))
