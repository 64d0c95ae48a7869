"""Workload: scikit-learn, a random forest grown tree by tree and an MLP classifier trained epoch by epoch, on synthetic data."""

import os

import common

args = common.parse_args(__doc__, default_steps=30)

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = str(args.threads)

import warnings  # noqa: E402

import numpy as np  # noqa: E402
from sklearn.ensemble import RandomForestClassifier  # noqa: E402
from sklearn.neural_network import MLPClassifier  # noqa: E402

RSS_AFTER_IMPORTS = common.rss_after_imports()

SAMPLES = 4000 * args.batch_scale
FEATURES = 40
TREES = 40  # grown over the whole run, a few per step


def main():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((SAMPLES, FEATURES))
    noise = 2 * rng.standard_normal(SAMPLES)
    y = (x[:, :5].sum(1) + noise > 0).astype(int) + (x[:, 5] > 1)
    classes = np.unique(y)
    forest = RandomForestClassifier(n_estimators=0, warm_start=True, random_state=0, n_jobs=1)
    mlp = MLPClassifier(hidden_layer_sizes=(128, 64), random_state=0)

    def step(i):
        """Grows the forest to its share of TREES and trains the MLP one epoch; the value is
        the MLP's loss plus the forest's node count, so that both are compared."""
        forest.n_estimators = max(1, TREES * (i + 1) // args.steps)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a step that adds no tree; the MLP's convergence
            forest.fit(x, y)
            mlp.partial_fit(x, y, classes=classes)
        nodes = sum(t.tree_.node_count for t in forest.estimators_)
        return mlp.loss_ + nodes

    common.train("sklearn_fit", args, RSS_AFTER_IMPORTS, step)


if __name__ == "__main__":
    main()
