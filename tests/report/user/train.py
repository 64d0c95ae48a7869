"""A short training script as a user writes it (torchvision's SqueezeNet 1.1, or the model named by its second argument; random 64x64 images, SGD with momentum), run by check_user_script.py; prints, last, the model's parameter sizes as JSON."""
import json
import sys

import torch
import torchvision


def make_batch(n):
    x = torch.randn(n, 3, 64, 64)
    y = torch.randint(0, 10, (n,))
    return x, y


def train(steps, name):
    model = getattr(torchvision.models, name)(weights=None, num_classes=10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    for _ in range(steps):
        x, y = make_batch(8)
        opt.zero_grad(set_to_none=True)
        out = model(x)
        loss = loss_fn(out, y)
        loss.backward()
        opt.step()
    return model


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = train(int(sys.argv[1]) if len(sys.argv) > 1 else 5,
                  sys.argv[2] if len(sys.argv) > 2 else "squeezenet1_1")
    print(json.dumps({"parameters": [p.numel() * p.element_size() for p in model.parameters()]}))
