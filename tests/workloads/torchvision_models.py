"""Workload: OptNet's models (AlexNet, VGG-11, GoogLeNet, ResNet-18) from torchvision, random weights, inference or SGD training on CPU."""

import common

# Per model: input side (pixels, square) and batch. Chosen so that a default run takes
# well under a minute on 2 cores under glibc while keeping each architecture as it is:
# every model here ends in an adaptive average pool, so inputs smaller than 224x224
# still flow through the unchanged layers (AlexNet's 11x11/4 stem and three max-pools
# leave 1x1 at 64x64, VGG's five pools 2x2, GoogLeNet's 3x3 at 96x96 and its auxiliary
# heads 6x6, ResNet's 2x2 at 64x64).
SIZES = {
    "alexnet": {"size": 64, "batch": 16},
    "vgg11": {"size": 64, "batch": 8},
    "googlenet": {"size": 96, "batch": 8},
    "resnet18": {"size": 64, "batch": 16},
}
CLASSES = 1000  # torchvision's default heads, as OptNet measured the ImageNet models
N_BATCHES = 4  # distinct synthetic batches, cycled through
# The original GoogLeNet weights its two auxiliary classifiers' losses by 0.3.
AUX_WEIGHT = 0.3


def add_args(p):
    """This workload's own options."""
    p.add_argument("--model", required=True, choices=sorted(SIZES))
    p.add_argument("--mode", required=True, choices=("infer", "train"),
                   help="infer: eval() under torch.no_grad(); train: SGD with momentum")
    p.add_argument("--size", type=int, default=None, help="input side in pixels (default: per model)")
    p.add_argument("--batch", type=int, default=None, help="batch size (default: per model)")


args = common.parse_args(__doc__, default_steps=10, add_args=add_args)

import torch  # noqa: E402  (after argument parsing so --help is instant)
import torchvision  # noqa: E402
from torch import nn  # noqa: E402

RSS_AFTER_IMPORTS = common.rss_after_imports()

SIZE = args.size or SIZES[args.model]["size"]
BATCH = (args.batch or SIZES[args.model]["batch"]) * args.batch_scale


def make_model(name):
    """The torchvision model with random weights (weights=None: nothing is downloaded)."""
    if name == "googlenet":
        # init_weights=True is what weights=None implies; passing it silences the
        # warning about the changed default. aux_logits as in the original training.
        return torchvision.models.googlenet(weights=None, aux_logits=True, init_weights=True)
    return getattr(torchvision.models, name)(weights=None)


def build():
    """Model, optimizer (training only) and a fixed synthetic data set, the same every run."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = make_model(args.model)
    xs = torch.randn(N_BATCHES, BATCH, 3, SIZE, SIZE)
    ys = torch.randint(0, CLASSES, (N_BATCHES, BATCH))
    opt = None
    if args.mode == "train":
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    return model, opt, xs, ys


def main():
    model, opt, xs, ys = build()
    loss_fn = nn.CrossEntropyLoss()

    def train_step(i):
        opt.zero_grad(set_to_none=True)
        out = model(xs[i % N_BATCHES])
        y = ys[i % N_BATCHES]
        if isinstance(out, tuple):  # GoogLeNet in training mode: (logits, aux2, aux1)
            loss = loss_fn(out[0], y) + AUX_WEIGHT * (loss_fn(out[1], y) + loss_fn(out[2], y))
        else:
            loss = loss_fn(out, y)
        loss.backward()
        opt.step()
        return loss.item()

    def infer_step(i):
        with torch.no_grad():
            out = model(xs[i % N_BATCHES])
        # The sum of the logits in double: one number that changes with any bit of
        # the output, so runs under different allocators can be compared exactly.
        return out.double().sum().item()

    if args.mode == "train":
        model.train()
        step, metric = train_step, "loss"
    else:
        model.eval()
        step, metric = infer_step, "checksum"
    extra = {"model": args.model, "mode": args.mode, "input_size": SIZE, "batch": BATCH}
    common.train("torchvision_%s_%s" % (args.model, args.mode), args, RSS_AFTER_IMPORTS, step,
                 metric=metric, extra=extra)


if __name__ == "__main__":
    main()
