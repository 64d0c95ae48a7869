"""Workload: a 2-layer MLP with hand-written backprop and SGD in numpy, on synthetic data."""

import os

import common

args = common.parse_args(__doc__, default_steps=40)

# OpenBLAS reads its thread count when it is loaded, so it has to be set before
# numpy is imported; there is no portable numpy call for it afterwards.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = str(args.threads)

import numpy as np  # noqa: E402

RSS_AFTER_IMPORTS = common.rss_after_imports()

BATCH = 1024 * args.batch_scale
IN_FEATURES = 1024
HIDDEN = 4096
CLASSES = 100
N_BATCHES = 8  # distinct synthetic batches, cycled through
LR = 0.05


def build():
    """Weights and a fixed synthetic data set, the same every run."""
    rng = np.random.default_rng(0)
    params = {
        "w1": (rng.standard_normal((IN_FEATURES, HIDDEN)) / np.sqrt(IN_FEATURES)).astype(np.float32),
        "b1": np.zeros(HIDDEN, np.float32),
        "w2": (rng.standard_normal((HIDDEN, CLASSES)) / np.sqrt(HIDDEN)).astype(np.float32),
        "b2": np.zeros(CLASSES, np.float32),
    }
    xs = rng.standard_normal((N_BATCHES, BATCH, IN_FEATURES), dtype=np.float32)
    ys = rng.integers(0, CLASSES, (N_BATCHES, BATCH))
    return params, xs, ys


def forward_backward(p, x, y):
    """Softmax cross-entropy loss and the gradients of every parameter.

    Written with plain expressions (no out=) so each step allocates fresh
    activation, gradient and temporary arrays, as ordinary numpy code does.
    """
    h_pre = x @ p["w1"] + p["b1"]
    h = np.maximum(h_pre, 0.0)
    logits = h @ p["w2"] + p["b2"]
    shifted = logits - logits.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    probs = exp / exp.sum(axis=1, keepdims=True)
    rows = np.arange(len(y))
    loss = -np.log(probs[rows, y]).mean()
    d_logits = probs.copy()
    d_logits[rows, y] -= 1.0
    d_logits /= len(y)
    grads = {"w2": h.T @ d_logits, "b2": d_logits.sum(axis=0)}
    d_h = (d_logits @ p["w2"].T) * (h_pre > 0)
    grads["w1"] = x.T @ d_h
    grads["b1"] = d_h.sum(axis=0)
    return float(loss), grads


def main():
    params, xs, ys = build()

    def step(i):
        loss, grads = forward_backward(params, xs[i % N_BATCHES], ys[i % N_BATCHES])
        for k, g in grads.items():
            params[k] = params[k] - LR * g
        return loss

    common.train("numpy_mlp", args, RSS_AFTER_IMPORTS, step)


if __name__ == "__main__":
    main()
