"""Your own language-model training loop under a hetsync policy: a small
decoder-only transformer (hetsync's TinyLM, ~110k parameters) on generated
English-like text, AdamW, warm-up + cosine, clipping; perplexity is the target.

    hetsync launch --nproc 3 --out runs/own-lm examples/own_loop_lm.py --policy diloco:H=8
    hetsync launch --nproc 3 --out runs/own-lm-p2p examples/own_loop_lm.py --policy p2p-random:p=1

(3 workers and rank 0, which runs the policy.) The text comes from
``hetsync.workloads.text.generate`` (deterministic; nothing is downloaded).
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import torch
from torch import nn
from torch.utils.data import TensorDataset

import hetsync
from hetsync.workloads.text import ALPHABET, encode, generate
from hetsync.workloads.tinylm import TinyLM

CONTEXT = 64


def windows(tokens: np.ndarray) -> torch.Tensor:
    n = (len(tokens) - 1) // CONTEXT
    return torch.from_numpy(tokens[: n * CONTEXT + 1].copy())


def data() -> tuple[TensorDataset, torch.Tensor]:
    tokens = encode(generate(220_000, seed=0))
    split = len(tokens) * 10 // 11
    train = windows(tokens[:split])
    n = (len(train) - 1) // CONTEXT
    x = train[: n * CONTEXT].view(n, CONTEXT)
    y = train[1 : n * CONTEXT + 1].view(n, CONTEXT)
    test = windows(tokens[split:])
    m = (len(test) - 1) // CONTEXT
    return TensorDataset(x, y), torch.stack(
        [test[: m * CONTEXT].view(m, CONTEXT), test[1 : m * CONTEXT + 1].view(m, CONTEXT)]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default="diloco:H=8")
    parser.add_argument("--scenario", default=None, help="a scenario to emulate (default: none)")
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    train, (xt, yt) = data()

    def evaluate(model: nn.Module) -> dict[str, float]:
        logits = model(xt[:256])
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), yt[:256].reshape(-1)).item()
        return {"perplexity": math.exp(loss), "loss": loss}

    sync = hetsync.init(
        args.policy,
        scenario=args.scenario,
        evaluate=evaluate,
        batch_size=16,
        target={"metric": "perplexity", "value": 6.0},
    )
    torch.manual_seed(0)
    model = TinyLM(vocab=len(ALPHABET), context=CONTEXT, d_model=64, layers=2, heads=4)
    opt = sync.optimizer(model, torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1))
    steps = args.epochs * math.ceil(len(train) / sync.workers / 16)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 20) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / steps)))
    )
    loader = sync.loader(train)  # hetsync: this worker's shard, in batches of the size the policy asks for
    for _ in range(args.epochs):
        for x, y in loader:
            logits = model(x)
            nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad()
            sched.step()
            if sync.done:
                break
        if sync.done:
            break
    sync.finish()


if __name__ == "__main__":
    main()
