"""Allocates heavily from Python (and torch when installed); prints results that must not
depend on the allocator."""
import hashlib
import sys


def python_objects():
    digest = hashlib.sha256()
    for round_ in range(30):
        blobs = [bytearray((i * 131 + round_) % 251 for i in range(n)) for n in (10, 4000, 70000)]
        big = bytes(range(256)) * (1 << (round_ % 12))
        table = {i: str(i) * (i % 50) for i in range(5000)}
        items = list(range(100000 + round_))
        items.extend(items[:1000])
        for b in blobs:
            digest.update(b)
        digest.update(big)
        digest.update(str(sum(len(v) for v in table.values()) + len(items)).encode())
    print("python", digest.hexdigest())


def torch_ops():
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(2)
    x = torch.randn(256, 512)
    w = torch.randn(512, 128, requires_grad=True)
    for _ in range(5):
        y = torch.relu(x @ w).sum()
        y.backward()
        with torch.no_grad():
            w -= 1e-3 * w.grad
            w.grad.zero_()
    print("torch", repr(float(y)))


if __name__ == "__main__":
    python_objects()
    if "--torch" in sys.argv:
        torch_ops()
