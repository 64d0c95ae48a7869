"""Workload: a small CNN with BatchNorm trained with Adam on synthetic images, unmodified PyTorch on CPU;
with --eval-every, evaluation phases between training phases."""

import common


def add_args(p):
    p.add_argument("--eval-every", type=int, default=0, metavar="K",
                   help="after every K training steps, evaluate (default 0: never)")
    p.add_argument("--eval-steps", type=int, default=6, metavar="E",
                   help="evaluation steps each time, forward only at twice the batch, each "
                        "counted as a step (default %(default)s)")


args = common.parse_args(__doc__, default_steps=40, add_args=add_args)

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
    held_out = (torch.randn(N_BATCHES // 2, 2 * BATCH, CHANNELS, SIZE, SIZE)
                if args.eval_every else None)
    return model, opt, xs, ys, held_out


def main():
    model, opt, xs, ys, held_out = build()
    loss_fn = nn.CrossEntropyLoss()
    cycle = args.eval_every + args.eval_steps

    def evaluate(i):
        """The sum of the logits of a held-out batch: a value that depends on every weight."""
        model.eval()
        with torch.no_grad():
            value = model(held_out[i % len(held_out)]).sum().item()
        model.train()
        return value

    def step(i):
        if args.eval_every and i % cycle >= args.eval_every:
            return evaluate(i)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(xs[i % N_BATCHES]), ys[i % N_BATCHES])
        loss.backward()
        opt.step()
        return loss.item()

    common.train("cnn_bn_adam", args, RSS_AFTER_IMPORTS, step)


if __name__ == "__main__":
    main()
