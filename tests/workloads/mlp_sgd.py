"""Workload: an MLP trained with SGD (momentum) on synthetic data, unmodified PyTorch on CPU."""

import common

args = common.parse_args(__doc__)

import torch  # noqa: E402  (after argument parsing so --help is instant)
from torch import nn  # noqa: E402

RSS_AFTER_IMPORTS = common.rss_after_imports()

BATCH = 512 * args.batch_scale
IN_FEATURES = 1024
HIDDEN = 2048
CLASSES = 100
N_BATCHES = 8  # distinct synthetic batches, cycled through


def build():
    """Model, optimizer and a fixed synthetic data set, the same every run."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(IN_FEATURES, HIDDEN), nn.ReLU(),
        nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
        nn.Dropout(0.1),
        nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
        nn.Linear(HIDDEN, CLASSES),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    xs = torch.randn(N_BATCHES, BATCH, IN_FEATURES)
    ys = torch.randint(0, CLASSES, (N_BATCHES, BATCH))
    return model, opt, xs, ys


def main():
    model, opt, xs, ys = build()
    loss_fn = nn.CrossEntropyLoss()
    model.train()

    def step(i):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(xs[i % N_BATCHES]), ys[i % N_BATCHES])
        loss.backward()
        opt.step()
        return loss.item()

    common.train("mlp_sgd", args, RSS_AFTER_IMPORTS, step)


if __name__ == "__main__":
    main()
