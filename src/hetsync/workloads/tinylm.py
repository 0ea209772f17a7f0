"""A tiny decoder-only transformer for character-level language modelling.

GPT-style and built from ``torch.nn`` primitives only: token and learned
positional embeddings, pre-LayerNorm blocks of causal multi-head
self-attention (``F.scaled_dot_product_attention`` with ``is_causal=True``)
and a GELU MLP, a final LayerNorm and an untied linear head. Every parameter
belongs to an ``nn.Linear``, ``nn.Embedding`` or ``nn.LayerNorm``, so
:meth:`hetsync.workloads.Workload.init_params` re-initialises all of them,
and nothing is modified in place, so ``torch.func.functional_call`` works.
No dropout: a step's gradient depends only on the parameters and the batch.
"""

from __future__ import annotations

from torch import Tensor, nn
from torch.nn import functional as F


class Block(nn.Module):
    """Pre-LayerNorm transformer block: ``x + attn(ln(x))``, then ``x + mlp(ln(x))``."""

    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, 4 * d_model)
        self.fc2 = nn.Linear(4 * d_model, d_model)

    def forward(self, x: Tensor) -> Tensor:
        n, length, d_model = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(n, length, 3, self.heads, d_model // self.heads).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(n, length, d_model))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TinyLM(nn.Module):
    """Maps tokens ``[n, T]`` (``T <= context``) to next-token logits ``[n, T, vocab]``."""

    def __init__(self, vocab: int, context: int, d_model: int, layers: int, heads: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, d_model)
        self.positions = nn.Embedding(context, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.tokens(tokens) + self.positions.weight[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))
