"""Tests for hetsync.workloads.base: flat-vector gradients, init, shards, sampling."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.nn import functional as F
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from hetsync.errors import BadInput
from hetsync.workloads import Shard, Workload, from_module


def _data(n: int, n_features: int = 5, n_classes: int = 3, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, n_features, generator=gen)
    y = torch.randint(0, n_classes, (n,), generator=gen)
    y[:n_classes] = torch.arange(n_classes)  # every class present
    return x, y


def _module() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))


def _toy(n_train: int = 60, n_test: int = 30, loss_fn=None) -> Workload:
    return from_module("toy", _module(), train=_data(n_train, seed=1), test=_data(n_test, seed=2), loss_fn=loss_fn)


def _reference_gradient(module: nn.Module, params: torch.Tensor, x, y, loss_fn=F.cross_entropy):
    """Gradient by plain autograd on an ordinary (unwrapped) module."""
    ref = copy.deepcopy(module)
    vector_to_parameters(params.clone(), ref.parameters())
    loss = loss_fn(ref(x), y)
    loss.backward()
    return parameters_to_vector(p.grad for p in ref.parameters()), loss.item()


# --- gradient / evaluate ---------------------------------------------------


def test_gradient_matches_autograd_and_leaves_params_alone() -> None:
    module = _module()
    reference = copy.deepcopy(module)
    wl = from_module("toy", module, train=_data(60, seed=1), test=_data(30, seed=2))
    params = wl.init_params(3)
    before = params.clone()
    x, y = _data(32, seed=4)
    grad, loss = wl.gradient(params, x, y)
    want_grad, want_loss = _reference_gradient(reference, params, x, y)
    assert grad.shape == (wl.n_params,) and grad.dtype == torch.float32
    assert (grad - want_grad).abs().max() < 1e-6
    assert loss == pytest.approx(want_loss, abs=1e-6)
    assert torch.equal(params, before)
    with torch.no_grad():
        assert torch.equal(wl.gradient(params, x, y)[0], grad)


def test_gradient_alternating_param_vectors() -> None:
    module = _module()
    reference = copy.deepcopy(module)
    wl = from_module("toy", module, train=_data(60, seed=1), test=_data(30, seed=2))
    a, b = wl.init_params(0), wl.init_params(1)
    x, y = _data(16, seed=5)
    want = {"a": _reference_gradient(reference, a, x, y)[0], "b": _reference_gradient(reference, b, x, y)[0]}
    kept = []
    for key, params in [("a", a), ("b", b), ("a", a), ("b", b)]:
        grad, _ = wl.gradient(params, x, y)
        assert (grad - want[key]).abs().max() < 1e-6
        kept.append((key, grad))
    for key, grad in kept:  # returned gradients are fresh tensors, not overwritten later
        assert (grad - want[key]).abs().max() < 1e-6


def test_evaluate_matches_manual_and_does_not_disturb_gradient() -> None:
    module = _module()
    reference = copy.deepcopy(module)
    wl = from_module("toy", module, train=_data(60, seed=1), test=_data(30, seed=2))
    a, b = wl.init_params(0), wl.init_params(1)
    x, y = _data(16, seed=5)
    first, _ = wl.gradient(a, x, y)
    accuracy, loss = wl.evaluate(b)
    vector_to_parameters(b.clone(), reference.parameters())
    with torch.no_grad():
        out = reference(wl.test_x)
    assert accuracy == pytest.approx((out.argmax(1) == wl.test_y).float().mean().item())
    assert loss == pytest.approx(F.cross_entropy(out, wl.test_y).item(), rel=1e-5)
    again, _ = wl.gradient(a, x, y)
    assert torch.equal(first, again)


def test_evaluate_uses_eval_mode_and_gradient_train_mode() -> None:
    torch.manual_seed(0)
    wl = from_module(
        "drop",
        nn.Sequential(nn.Linear(5, 16), nn.Dropout(0.5), nn.Linear(16, 3)),
        train=_data(20),
        test=_data(20, seed=1),
    )
    params = wl.init_params(0)
    assert wl.evaluate(params) == wl.evaluate(params)  # dropout off: deterministic
    wl.gradient(params, *_data(8))
    assert wl.model.training


def test_unused_parameter_gets_zero_gradient() -> None:
    class Partial(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.used = nn.Linear(5, 3)
            self.unused = nn.Linear(5, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.used(x)

    wl = from_module("partial", Partial(), train=_data(10), test=_data(10, seed=1))
    grad, _ = wl.gradient(wl.init_params(0), *_data(8, seed=3))
    assert grad[18:].abs().max() == 0 and grad[:18].abs().max() > 0


@pytest.mark.parametrize("clone", [copy.deepcopy, lambda wl: pickle.loads(pickle.dumps(wl))])
def test_copied_workload_keeps_working(clone) -> None:
    wl = _toy()
    params = wl.init_params(0)
    x, y = _data(8)
    twin = clone(wl)
    assert torch.equal(twin.gradient(params, x, y)[0], wl.gradient(params, x, y)[0])
    assert torch.equal(twin.init_params(4), wl.init_params(4))
    assert twin.evaluate(params) == wl.evaluate(params)


def test_gradient_rejects_wrong_params() -> None:
    wl = _toy()
    x, y = _data(4)
    with pytest.raises(BadInput, match="params"):
        wl.gradient(torch.zeros(wl.n_params + 1), x, y)
    with pytest.raises(BadInput, match="float32"):
        wl.gradient(torch.zeros(wl.n_params, dtype=torch.float64), x, y)


def test_sizes() -> None:
    wl = _toy()
    assert wl.n_params == 5 * 7 + 7 + 7 * 3 + 3
    assert wl.model_nbytes == 4 * wl.n_params
    assert wl.n_classes == 3


# --- init_params -------------------------------------------------------------


def test_init_params_deterministic_and_seed_dependent() -> None:
    wl = _toy()
    a = wl.init_params(7)
    assert a.shape == (wl.n_params,) and a.dtype == torch.float32
    kept = a.clone()
    a += 1.0  # the caller owns the result
    assert torch.equal(wl.init_params(7), kept)
    assert not torch.equal(wl.init_params(7), wl.init_params(8))
    other = _toy()
    assert torch.equal(other.init_params(7), wl.init_params(7))


def test_init_params_leaves_global_rng_alone() -> None:
    wl = _toy()
    torch.manual_seed(123)
    state = torch.get_rng_state()
    wl.init_params(5)
    assert torch.equal(torch.get_rng_state(), state)


def test_init_params_after_gradient_does_not_touch_callers_vector() -> None:
    wl = _toy()
    params = wl.init_params(0)
    before = params.clone()
    wl.gradient(params, *_data(8))
    wl.init_params(1)
    assert torch.equal(params, before)


# --- shards --------------------------------------------------------------------


def test_iid_shards_partition_train_set() -> None:
    wl = _toy(n_train=103)
    shards = wl.make_shards(10, seed=0)
    assert len(shards) == 10
    sizes = sorted(len(s) for s in shards)
    assert sizes[0] >= 10 and sizes[-1] <= 11
    indices = np.concatenate([s.indices for s in shards])
    assert sorted(indices.tolist()) == list(range(103))
    for shard in shards:
        assert torch.equal(shard.x, wl.train_x[torch.from_numpy(shard.indices)])
        assert torch.equal(shard.y, wl.train_y[torch.from_numpy(shard.indices)])


def test_shards_reproducible_and_seed_dependent() -> None:
    wl = _toy()
    first = [s.indices.tolist() for s in wl.make_shards(4, seed=3, label_skew=0.5)]
    assert first == [s.indices.tolist() for s in wl.make_shards(4, seed=3, label_skew=0.5)]
    assert first != [s.indices.tolist() for s in wl.make_shards(4, seed=4, label_skew=0.5)]


def test_label_skew_reduces_labels_per_shard() -> None:
    wl = from_module("ten", nn.Linear(5, 10), train=_data(1000, n_classes=10), test=_data(50, n_classes=10))

    def mean_labels(skew: float) -> float:
        return float(np.mean([len(set(s.y.tolist())) for s in wl.make_shards(20, seed=0, label_skew=skew)]))

    iid, half, sorted_ = mean_labels(0.0), mean_labels(0.5), mean_labels(1.0)
    assert sorted_ <= 2.0 < iid
    assert sorted_ < half < iid
    assert iid > 9


def test_more_workers_than_samples_reuses_samples() -> None:
    wl = _toy(n_train=7)
    shards = wl.make_shards(20, seed=0)
    assert all(len(s) == 1 for s in shards)
    assert {int(s.indices[0]) for s in shards} == set(range(7))


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"n_workers": 0}, "n_workers"),
        ({"n_workers": 2.0}, "n_workers"),
        ({"label_skew": -0.1}, "label_skew"),
        ({"label_skew": 1.5}, "label_skew"),
        ({"label_skew": float("nan")}, "label_skew"),
        ({"label_skew": "iid"}, "label_skew"),
        ({"seed": -1}, "seed"),
    ],
)
def test_make_shards_rejects_bad_values(kwargs: dict, field: str) -> None:
    args = {"n_workers": 2, "seed": 0, **kwargs}
    with pytest.raises(BadInput, match=field):
        _toy().make_shards(**args)


# --- Shard sampling ---------------------------------------------------------------


def _shard(n: int, seed: int = 0) -> Shard:
    return Shard(torch.arange(n, dtype=torch.float32).unsqueeze(1), torch.arange(n) % 3, seed=seed)


def test_next_batch_deterministic_per_seed() -> None:
    a, b = _shard(50, seed=1), _shard(50, seed=1)
    for _ in range(20):
        xa, ya = a.next_batch(8)
        xb, yb = b.next_batch(8)
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert not torch.equal(_shard(50, seed=1).next_batch(8)[0], _shard(50, seed=2).next_batch(8)[0])


def test_next_batch_covers_shard_each_epoch() -> None:
    shard = _shard(50)
    for _ in range(3):  # epochs of 5 batches of 10
        seen = torch.cat([shard.next_batch(10)[0] for _ in range(5)]).squeeze(1)
        assert sorted(seen.tolist()) == list(range(50))


def test_next_batch_larger_than_shard() -> None:
    x, y = _shard(3).next_batch(10)
    assert x.shape == (10, 1) and y.shape == (10,)
    values = x.squeeze(1).tolist()
    for start in (0, 3, 6):  # three full epochs, then one sample of the fourth
        assert sorted(values[start : start + 3]) == [0, 1, 2]
    assert torch.equal(y, x.squeeze(1).long() % 3)
    one = _shard(1)
    assert one.next_batch(32)[0].shape == (32, 1)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 20),
    batches=st.lists(st.integers(1, 45), min_size=1, max_size=12),
    seed=st.integers(0, 2**32),
)
def test_next_batch_stream_is_sequence_of_epochs(n: int, batches: list[int], seed: int) -> None:
    shard = _shard(n, seed)
    stream = torch.cat([shard.next_batch(b)[0] for b in batches]).squeeze(1).long().tolist()
    assert len(stream) == sum(batches)
    for start in range(0, len(stream) - n + 1, n):
        assert sorted(stream[start : start + n]) == list(range(n))
    assert len(set(stream[len(stream) - len(stream) % n :])) == len(stream) % n


def test_shard_rejects_bad_input() -> None:
    with pytest.raises(BadInput, match="batch_size"):
        _shard(5).next_batch(0)
    with pytest.raises(BadInput, match="y"):
        Shard(torch.zeros(3, 2), torch.zeros(4, dtype=torch.long))
    with pytest.raises(BadInput, match="x"):
        Shard(torch.zeros(0, 2), torch.zeros(0, dtype=torch.long))


# --- from_module / validation ----------------------------------------------------------


def test_from_module_with_custom_loss() -> None:
    def smoothed(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(out, y, label_smoothing=0.1)

    module = _module()
    reference = copy.deepcopy(module)
    wl = from_module("smooth", module, train=_data(40), test=_data(20, seed=1), loss_fn=smoothed, description="d")
    assert wl.name == "smooth" and wl.description == "d"
    params = wl.init_params(0)
    x, y = _data(12, seed=9)
    grad, loss = wl.gradient(params, x, y)
    want_grad, want_loss = _reference_gradient(reference, params, x, y, smoothed)
    assert (grad - want_grad).abs().max() < 1e-6
    assert loss == pytest.approx(want_loss, abs=1e-6)
    assert wl.evaluate(params)[1] == pytest.approx(smoothed(reference(wl.test_x), wl.test_y).item(), rel=1e-5)


def test_from_module_converts_dtypes() -> None:
    x, y = _data(20)
    wl = from_module("cast", nn.Linear(5, 3).double(), train=(x.double(), y.int()), test=(x, y))
    assert wl.train_x.dtype == torch.float32 and wl.train_y.dtype == torch.int64
    assert wl.init_params(0).dtype == torch.float32


@pytest.mark.parametrize(
    ("model", "train", "test", "field"),
    [
        (nn.ReLU(), _data(10), _data(10), "no parameters"),
        ("linear", _data(10), _data(10), "model"),
        (nn.Linear(5, 3), (_data(10)[0], _data(9)[1]), _data(10), "train_y"),
        (nn.Linear(5, 3), (_data(10)[0], _data(10)[1].float()), _data(10), "train_y"),
        (nn.Linear(5, 3), _data(10), (torch.zeros(10, 4), _data(10)[1]), "test_x"),
        (nn.Linear(5, 3), _data(10), _data(10)[0], "test"),
        (nn.Linear(5, 2), _data(10), _data(10), "classes"),
        (nn.Linear(4, 3), _data(10), _data(10), "train_x"),
        (nn.Sequential(nn.Linear(5, 3), nn.BatchNorm1d(3)), _data(10), _data(10), "BatchNorm"),
    ],
)
def test_from_module_validates(model, train, test, field: str) -> None:
    with pytest.raises(BadInput, match=field):
        from_module("bad", model, train=train, test=test)


def test_frozen_parameters_rejected() -> None:
    model = nn.Linear(5, 3)
    model.bias.requires_grad_(False)
    with pytest.raises(BadInput, match="frozen"):
        from_module("frozen", model, train=_data(10), test=_data(10))
