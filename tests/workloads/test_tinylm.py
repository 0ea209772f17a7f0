"""Tests for hetsync.workloads.tinylm and the registered ``tinylm`` workload."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
import torch
from torch.func import functional_call

from hetsync.workloads import make_workload, text
from hetsync.workloads.tinylm import TinyLM


@pytest.fixture(autouse=True)
def _single_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_windows_follow_the_text() -> None:
    wl = make_workload("tinylm", context=16, n_chars=20000, stride=4)
    assert wl.task == "lm" and wl.n_classes <= len(text.ALPHABET)
    assert wl.metrics == {"loss": "min", "perplexity": "min", "accuracy": "max"}
    assert wl.train_x.shape[1:] == (16,) and wl.train_y.shape[1:] == (16,)
    assert wl.train_x.dtype == torch.int64
    assert torch.equal(wl.train_x[:, 1:], wl.train_y[:, :-1])  # y is x shifted by one character
    tokens = text.encode(text.generate(20000, seed=0)[:20000])
    cut = 20000 - 2000
    assert torch.equal(wl.train_x[3], torch.from_numpy(tokens[12:28]))  # windows every `stride` characters
    assert len(wl.test_x) == (2000 - 1) // 16  # the last 10 %, tiled without overlap
    assert torch.equal(wl.test_x[1], torch.from_numpy(tokens[cut + 16 : cut + 32]))
    assert torch.equal(
        wl.test_y[-1], torch.from_numpy(tokens[cut + 16 * len(wl.test_x) - 15 : cut + 16 * len(wl.test_x) + 1])
    )
    assert int(wl.train_x.max()) < len(text.ALPHABET)


def test_perplexity_is_exp_loss_and_a_step_lowers_the_loss() -> None:
    wl = make_workload("tinylm")
    params = wl.init_params(0)
    values = wl.evaluate_metrics(params)
    assert list(values) == ["loss", "perplexity", "accuracy"]
    assert values["perplexity"] == math.exp(values["loss"])
    assert values["perplexity"] > 20  # untrained: worse than the unigram model (about 22)
    x, y = wl.make_shards(4, seed=0)[1].next_batch(32)
    assert wl.model(x).shape == (32, 32, len(text.ALPHABET))
    grad, loss = wl.gradient(params, x, y)
    assert wl.gradient(params - 0.5 * grad, x, y)[1] < loss


def test_attention_is_causal_and_functional_call_works() -> None:
    wl = make_workload("tinylm", context=12, d_model=16, layers=2, heads=2, n_chars=3000)
    x = wl.train_x[:3].clone()
    out = wl.model(x)
    x[:, 7] = (x[:, 7] + 1) % len(text.ALPHABET)
    changed = wl.model(x)
    assert torch.equal(out[:, :7], changed[:, :7])  # earlier positions never see later tokens
    assert not torch.allclose(out[:, 7:], changed[:, 7:])
    params = {name: torch.randn_like(p) for name, p in wl.model.named_parameters()}
    direct = functional_call(wl.model, params, (x,))
    assert direct.shape == changed.shape and not torch.allclose(direct, changed)


def test_init_params_resets_every_block_differently() -> None:
    model = TinyLM(vocab=10, context=8, d_model=16, layers=3, heads=4)
    weights = [block.qkv.weight for block in model.blocks]
    assert not torch.equal(weights[0], weights[1]) and not torch.equal(weights[1], weights[2])
    wl = make_workload("tinylm", context=8, d_model=16, layers=3, heads=4, n_chars=3000)
    a, b = wl.init_params(0), wl.init_params(1)
    assert torch.equal(a, wl.init_params(0))
    changed = (a != b).float().mean()
    assert changed > 0.9  # everything but LayerNorm's ones and zeros
