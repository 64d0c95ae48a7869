"""A short numpy and scikit-learn script as a user writes it (no PyTorch), run by check_user_script.py."""
import numpy as np
from sklearn.linear_model import LogisticRegression


def data(n, d):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, d))
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(int)
    return x, y


def features(x):
    return np.hstack([x, x ** 2, np.tanh(x)])


def main():
    x, y = data(4000, 40)
    for _ in range(4):
        feats = features(x)
        clf = LogisticRegression(max_iter=50).fit(feats, y)
    print(round(clf.score(feats, y), 3))


main()
