"""Workload: a small CNN with BatchNorm trained with Adam on synthetic images, unmodified PyTorch on CPU."""

import common

args = common.parse_args(__doc__, default_steps=40)

import torch  # noqa: E402  (after argument parsing so --help is instant)
from torch import nn  # noqa: E402

RSS_AFTER_IMPORTS = common.rss_after_imports()

BATCH = 128 * args.batch_scale
CHANNELS = 3
SIZE = 32  # CIFAR-like images
CLASSES = 10
N_BATCHES = 8  # distinct synthetic batches, cycled through


def conv_block(c_in, c_out):
    """Two 3x3 conv + BN + ReLU layers and a 2x2 max-pool."""
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(),
        nn.Conv2d(c_out, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(),
        nn.MaxPool2d(2),
    )


def build():
    """Model, optimizer and a fixed synthetic data set, the same every run."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = nn.Sequential(
        conv_block(CHANNELS, 32),   # 32 -> 16
        conv_block(32, 64),         # 16 -> 8
        conv_block(64, 128),        # 8 -> 4
        nn.Flatten(),
        nn.Linear(128 * 4 * 4, 256), nn.ReLU(),
        nn.Linear(256, CLASSES),
    )
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    xs = torch.randn(N_BATCHES, BATCH, CHANNELS, SIZE, SIZE)
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

    common.train("cnn_bn_adam", args, RSS_AFTER_IMPORTS, step)


if __name__ == "__main__":
    main()
