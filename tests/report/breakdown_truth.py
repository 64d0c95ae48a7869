"""Runs a bundled workload (its path and arguments follow) and prints, last, what its model
holds: one JSON line {"parameter_bytes", "traced_parameter_bytes", "parameters", "optimizer"}.
The optimizer's constructor is watched to learn the parameters; the workload is unchanged."""

import json
import os
import runpy
import sys

import torch

seen = []
_init = torch.optim.Optimizer.__init__


def _watch(self, params, defaults):
    params = list(params)
    seen.append((type(self).__name__, params))
    _init(self, params, defaults)


torch.optim.Optimizer.__init__ = _watch
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0])))
runpy.run_path(sys.argv[0], run_name="__main__")
min_bytes = int(os.environ.get("OPTMEM_MIN_BYTES", "4096"))
sizes = [p.numel() * p.element_size() for _, ps in seen for p in ps]
print(json.dumps({"parameter_bytes": sum(sizes),
                  "traced_parameter_bytes": sum(s for s in sizes if s >= min_bytes),
                  "parameters": len(sizes), "optimizer": [name for name, _ in seen]}))
