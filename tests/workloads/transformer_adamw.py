"""Workload: a small transformer encoder (nn.TransformerEncoder) trained with AdamW on synthetic tokens, unmodified PyTorch on CPU."""

import common

args = common.parse_args(__doc__)

import torch  # noqa: E402  (after argument parsing so --help is instant)
from torch import nn  # noqa: E402

RSS_AFTER_IMPORTS = common.rss_after_imports()

BATCH = 8 * args.batch_scale
SEQ = 128
VOCAB = 1000
D_MODEL = 256
HEADS = 8
FF = 1024
LAYERS = 4
N_BATCHES = 8  # distinct synthetic batches, cycled through


class TokenTagger(nn.Module):
    """Embedding + learned positions + encoder + per-token classifier head."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D_MODEL)
        self.pos = nn.Parameter(torch.randn(1, SEQ, D_MODEL) * 0.02)
        layer = nn.TransformerEncoderLayer(D_MODEL, HEADS, FF, dropout=0.1,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, LAYERS)
        self.head = nn.Linear(D_MODEL, VOCAB)

    def forward(self, tokens):
        return self.head(self.encoder(self.embed(tokens) + self.pos))


def build():
    """Model, optimizer and a fixed synthetic data set, the same every run."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = TokenTagger()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    xs = torch.randint(0, VOCAB, (N_BATCHES, BATCH, SEQ))
    # Target: the token shifted by one position, a learnable synthetic task.
    ys = torch.roll(xs, shifts=1, dims=2)
    return model, opt, xs, ys


def main():
    model, opt, xs, ys = build()
    loss_fn = nn.CrossEntropyLoss()
    model.train()

    def step(i):
        opt.zero_grad(set_to_none=True)
        logits = model(xs[i % N_BATCHES])
        loss = loss_fn(logits.reshape(-1, VOCAB), ys[i % N_BATCHES].reshape(-1))
        loss.backward()
        opt.step()
        return loss.item()

    common.train("transformer_adamw", args, RSS_AFTER_IMPORTS, step)


if __name__ == "__main__":
    main()
