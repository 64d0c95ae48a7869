"""Real programs nobody here wrote, run plainly and under optmem (trace and plan mode, a
report from every process): scikit-learn, XGBoost, skorch, torchaudio, fastText (its Python
module and its command line), torchvision and darknet, each a short fit or inference with
fixed seeds. Under optmem every program must exit the same way and write the same stdout
and stderr, byte for byte (the numbers it prints are hashes of its predictions and losses),
and every report it leaves must be valid. One exception: scikit-learn's MLP losses are
compared to 9 digits, since the last bits of its float64 BLAS results change with the
placement of its arrays.

Usage: panel.py --preload LIBOPTMEM [--program NAME ...]. Exit status 0 when every program
behaves the same; every difference is listed.
"""

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tracer"))
from report_schema import SchemaError, validate  # noqa: E402

PYTHON = "/usr/bin/python3"

# Each program prints digests of what it computed; nothing that depends on time or
# addresses.
DIGEST = r"""
import hashlib
def digest(*arrays):
    h = hashlib.sha256()
    for a in arrays:
        h.update(memoryview(a).cast("B") if not isinstance(a, bytes) else a)
    return h.hexdigest()[:16]
"""

SKLEARN = DIGEST + r"""
import numpy as np
from sklearn.datasets import load_digits
from sklearn.neural_network import MLPClassifier
from sklearn.ensemble import RandomForestClassifier
X, y = load_digits(return_X_y=True)
mlp = MLPClassifier(hidden_layer_sizes=(128, 64), max_iter=15, random_state=0)
mlp.fit(X, y)
# The predictions bit for bit; the losses to 9 digits: their last bits depend on where
# OpenBLAS finds its operands (docs/hardening.md).
print("mlp", digest(mlp.predict(X)), " ".join("%.9g" % v for v in mlp.loss_curve_))
forest = RandomForestClassifier(n_estimators=30, random_state=0, n_jobs=1).fit(X, y)
print("forest", digest(np.ascontiguousarray(forest.predict_proba(X))))
"""

XGBOOST = DIGEST + r"""
import numpy as np
import xgboost as xgb
rng = np.random.default_rng(0)
X = rng.standard_normal((4000, 32))
y = (X[:, 0] + X[:, 1] * X[:, 2] > 0).astype(np.float32)
d = xgb.DMatrix(X, label=y)
booster = xgb.train({"max_depth": 6, "eta": 0.3, "objective": "binary:logistic",
                     "nthread": 2, "tree_method": "hist", "seed": 0}, d, num_boost_round=40)
print("xgboost", digest(booster.predict(d)))
"""

SKORCH = DIGEST + r"""
import numpy as np
import torch
from skorch import NeuralNetClassifier
torch.manual_seed(0)
torch.set_num_threads(1)
rng = np.random.default_rng(0)
X = rng.standard_normal((2000, 40)).astype(np.float32)
y = (X[:, :5].sum(axis=1) > 0).astype(np.int64)
module = torch.nn.Sequential(torch.nn.Linear(40, 256), torch.nn.ReLU(),
                             torch.nn.Linear(256, 2), torch.nn.Softmax(dim=-1))
net = NeuralNetClassifier(module, max_epochs=6, lr=0.05, batch_size=128, verbose=0,
                          train_split=None)
net.fit(X, y)
print("skorch", digest(net.predict_proba(X)),
      digest(np.array(net.history[:, "train_loss"], dtype=np.float64)))
"""

TORCHAUDIO = DIGEST + r"""
import torch
import torchaudio
torch.manual_seed(0)
torch.set_num_threads(1)
wave = torch.randn(8, 16000)
mel = torchaudio.transforms.MelSpectrogram(sample_rate=16000, n_fft=400, n_mels=40)
model = torch.nn.Sequential(torch.nn.Conv1d(40, 64, 3), torch.nn.ReLU(),
                            torch.nn.AdaptiveAvgPool1d(1), torch.nn.Flatten(),
                            torch.nn.Linear(64, 4))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
target = torch.tensor([0, 1, 2, 3, 0, 1, 2, 3])
losses = []
for _ in range(10):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(mel(wave)), target)
    loss.backward()
    opt.step()
    losses.append(loss.item())
print("torchaudio", digest(torch.tensor(losses, dtype=torch.float64).numpy()))
"""

FASTTEXT_DATA = r"""
import random, sys
random.seed(0)
words = {"sport": "ball goal team match score run win coach league".split(),
         "tech": "chip code cloud data model server bug kernel cache".split()}
with open(sys.argv[1], "w") as f:
    for i in range(4000):
        label = "sport" if i % 2 else "tech"
        f.write("__label__%s %s\n" % (label, " ".join(random.choices(words[label], k=12))))
"""

FASTTEXT = DIGEST + r"""
import sys
import fasttext
model = fasttext.train_supervised(sys.argv[1], epoch=5, thread=1, dim=32, seed=0, verbose=0)
labels, probs = model.predict(["goal team kernel", "chip cloud match"], k=2)
print("fasttext", labels, digest(model.get_input_matrix()))
"""

TORCHVISION = DIGEST + r"""
import torch
import torchvision
torch.manual_seed(0)
torch.set_num_threads(1)
model = torchvision.models.mobilenet_v2(num_classes=10)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x = torch.randn(4, 3, 64, 64)
y = torch.tensor([1, 2, 3, 4])
losses = []
for _ in range(4):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    losses.append(loss.item())
model.eval()
with torch.no_grad():
    out = model(x)
print("torchvision", digest(torch.tensor(losses, dtype=torch.float64).numpy()),
      digest(out.numpy()))
"""

def python_program(script, *args):
    return lambda tmp: [PYTHON, "-c", script, *[a.format(tmp=tmp) for a in args]]


def prepare_fasttext(tmp):
    subprocess.run([PYTHON, "-c", FASTTEXT_DATA, os.path.join(tmp, "fasttext.txt")],
                   check=True)


# name: (what to run, what to prepare in the scratch directory once, or None)
PROGRAMS = {
    "sklearn": (python_program(SKLEARN), None),
    "xgboost": (python_program(XGBOOST), None),
    "skorch": (python_program(SKORCH), None),
    "torchaudio": (python_program(TORCHAUDIO), None),
    "fasttext": (python_program(FASTTEXT, "{tmp}/fasttext.txt"), prepare_fasttext),
    "fasttext_cli": (lambda tmp: ["fasttext", "supervised", "-input", f"{tmp}/fasttext.txt",
                                  "-output", f"{tmp}/ftmodel", "-epoch", "5", "-thread", "1",
                                  "-dim", "32", "-verbose", "0"], prepare_fasttext),
    "torchvision": (python_program(TORCHVISION), None),
    # darknet's reference network (its own cfg), forward passes on a generated input.
    "darknet": (lambda tmp: ["darknet", "speed", "/usr/share/darknet/cfg/darknet.cfg", "20"],
                None),
}
# Lines a program prints that measure time: compared without their numbers.
TIMED = ("econds", "Speed", "FLOPS:", "fps")


def comparable(out):
    lines = []
    for line in out.decode(errors="replace").splitlines():
        if any(t in line for t in TIMED):
            line = " ".join(w for w in line.split() if not any(c.isdigit() for c in w))
        lines.append(line)
    return lines


def first_difference(a, b):
    if not isinstance(a, list):
        return f"plain {a!r}, optmem {b!r}"
    i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return (f"line {i + 1} of {len(a)} / {len(b)}:\n  plain:  {a[i] if i < len(a) else None!r}"
            f"\n  optmem: {b[i] if i < len(b) else None!r}")


def env_for(args, mode, report):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPTMEM_")}
    env.pop("LD_PRELOAD", None)
    env["OMP_NUM_THREADS"] = "1"
    if mode:
        env.update(LD_PRELOAD=args.preload, OPTMEM_MODE=mode, OPTMEM_REPORT=report)
    return env


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--preload", required=True)
    ap.add_argument("--program", choices=sorted(PROGRAMS), action="append")
    args = ap.parse_args()
    args.preload = os.path.abspath(args.preload)
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.program or PROGRAMS:
            command, prepare = PROGRAMS[name]
            if prepare:
                prepare(tmp)
            runs = {}
            for mode in (None, "trace", "plan"):
                report = os.path.join(tmp, f"{name}-{mode}.%p.json")
                start = time.monotonic()
                proc = subprocess.run(command(tmp), env=env_for(args, mode, report), cwd=tmp,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      timeout=600)
                runs[mode] = (proc, time.monotonic() - start)
                if mode:
                    reports = glob.glob(report.replace("%p", "*"))
                    if not reports:
                        failures.append(f"{name}, {mode}: no report")
                    for path in reports:
                        try:
                            with open(path) as f:
                                validate(json.load(f))
                        except (ValueError, SchemaError) as e:
                            failures.append(f"{name}, {mode}: {path}: {e}")
            plain = runs[None][0]
            if plain.returncode != 0:
                failures.append(f"{name}: fails without optmem (exit {plain.returncode}):\n"
                                f"{plain.stderr.decode(errors='replace')[-2000:]}")
            for mode in ("trace", "plan"):
                got = runs[mode][0]
                for what, a, b in (("exit status", plain.returncode, got.returncode),
                                   ("stdout", comparable(plain.stdout), comparable(got.stdout)),
                                   ("stderr", comparable(plain.stderr), comparable(got.stderr))):
                    if a != b:
                        failures.append(f"{name}, {mode}: {what} differs: {first_difference(a, b)}")
            print(f"{name:14s} " + "  ".join(
                f"{m or 'plain'} {runs[m][1]:.1f} s" for m in (None, "trace", "plan")) +
                f"  {plain.stdout.decode(errors='replace').strip().splitlines()[-1:]}",
                flush=True)
    for f in failures:
        print("FAIL:", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
