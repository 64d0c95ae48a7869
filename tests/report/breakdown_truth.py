"""Runs a bundled workload (its path and arguments follow) and prints, last, what its model
and optimizer hold, as one JSON line: parameter_bytes (the sum of numel * element_size),
traced_parameter_bytes (those of at least OPTMEM_MIN_BYTES), parameters, optimizer_state_bytes
(every tensor of the optimizers' state), optimizer_small_state_bytes (those not the size of
their parameter: step counters), optimizers. The optimizer's constructor is watched to learn
the parameters; the workload is unchanged, but with --keep-grads before its path, zero_grad
keeps the gradients (set_to_none=False, PyTorch 1.x's default: zeroed in place, never freed)."""

import json
import os
import runpy
import sys

import torch

seen = []
_init = torch.optim.Optimizer.__init__


def _watch(self, params, defaults):
    params = list(params)
    seen.append((self, params))
    _init(self, params, defaults)


torch.optim.Optimizer.__init__ = _watch
sys.argv = sys.argv[1:]
if sys.argv[0] == "--keep-grads":
    sys.argv = sys.argv[1:]
    _zero_grad = torch.optim.Optimizer.zero_grad

    def _keep(self, set_to_none=False):
        _zero_grad(self, set_to_none=False)

    torch.optim.Optimizer.zero_grad = _keep
sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0])))
runpy.run_path(sys.argv[0], run_name="__main__")


def nbytes(t):
    return t.numel() * t.element_size()


min_bytes = int(os.environ.get("OPTMEM_MIN_BYTES", "4096"))
sizes = [nbytes(p) for _, ps in seen for p in ps]
state = small = 0
for opt, _ in seen:
    for p, s in opt.state.items():
        for v in s.values():
            if torch.is_tensor(v):
                state += nbytes(v)
                small += nbytes(v) if v.numel() != p.numel() else 0
print(json.dumps({"parameter_bytes": sum(sizes),
                  "traced_parameter_bytes": sum(s for s in sizes if s >= min_bytes),
                  "parameters": len(sizes), "optimizer_state_bytes": state,
                  "optimizer_small_state_bytes": small,
                  "optimizers": [type(opt).__name__ for opt, _ in seen]}))
