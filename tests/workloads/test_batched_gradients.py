"""Workload.gradients: k models' gradients in one vmapped call equal k calls of
Workload.gradient; models vmap cannot run fall back to those calls."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from torch import nn

from hetsync.errors import BadInput
from hetsync.workloads import from_module, make_workload


def _rows(wl, k, batch):
    shards = wl.make_shards(k, 0)
    base = wl.init_params(0)
    params = torch.stack(
        [base + 0.05 * i * torch.randn(wl.n_params, generator=torch.Generator().manual_seed(i)) for i in range(k)]
    )
    batches = [s.next_batch(batch) for s in shards]
    return params, torch.stack([x for x, _ in batches]), torch.stack([y for _, y in batches])


def _check_equal(wl, params, x, y):
    grads, losses = wl.gradients(params, x, y)
    assert grads.shape == params.shape and losses.shape == (len(params),)
    for i in range(len(params)):
        grad, loss = wl.gradient(params[i], x[i], y[i])
        assert (grads[i] - grad).abs().max().item() <= 1e-6
        assert losses[i].item() == pytest.approx(loss, abs=1e-6)
    # the rows really differ: one model per row, not one model broadcast
    assert (grads[0] - grads[1]).abs().max().item() > 1e-4


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("digits-mlp", {}),
        ("digits-cnn", {}),
        ("signal1d-mlp", {"n_samples": 400}),
        ("signal1d-cnn", {"n_samples": 400}),
    ],
)
def test_batched_gradients_equal_one_call_per_model(name, args):
    wl = make_workload(name, **args)
    assert wl.batch_blocker is None
    _check_equal(wl, *_rows(wl, 4, 8))
    assert wl.batch_blocker is None  # the vmapped path ran


def test_an_op_without_a_batching_rule_goes_one_model_at_a_time(recwarn):
    # tinylm's attention has no batching rule on CPU: vmap would loop, slower than plain calls
    wl = make_workload("tinylm", n_chars=4000, d_model=16, layers=1, heads=2, context=8)
    assert wl.batch_blocker is None
    _check_equal(wl, *_rows(wl, 4, 8))
    assert "no batching rule for aten::" in wl.batch_blocker
    assert not [w for w in recwarn if "performance drop" in str(w.message)]  # not passed on to the user


def test_frozen_parameters_and_constant_buffers_batch():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    model[0].bias.requires_grad_(False)
    model.register_buffer("unused", torch.ones(3))
    x = torch.randn(60, 6)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
    wl = from_module("frozen", model, (x[:40], y[:40]), (x[40:], y[40:]))
    assert wl.batch_blocker is None
    _check_equal(wl, *_rows(wl, 3, 5))


def test_batchnorm_and_dropout_block_batching_and_fall_back():
    wl = make_workload("signal1d-cnn", n_samples=400, batchnorm=True)
    assert "BatchNorm1d" in wl.batch_blocker
    _check_equal(wl, *_rows(wl, 3, 8))

    x = torch.randn(40, 4)
    y = (x[:, 0] > 0).long()
    drop = from_module("drop", nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 2)), (x, y), (x, y))
    assert "Dropout" in drop.batch_blocker
    grads, _ = drop.gradients(*_rows(drop, 2, 4))
    assert grads.shape == (2, drop.n_params)


class _Branchy(nn.Module):
    """Python control flow on tensor values: vmap refuses it."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 2)

    def forward(self, x):
        out = self.lin(x)
        return out * 2 if out.sum() > 0 else out


def test_a_model_vmap_refuses_falls_back_with_the_reason():
    torch.manual_seed(0)
    x = torch.randn(40, 4)
    y = (x[:, 0] > 0).long()
    wl = from_module("branchy", _Branchy(), (x, y), (x, y))
    assert wl.batch_blocker is None  # nothing known to block it before trying
    _check_equal(wl, *_rows(wl, 3, 4))
    assert wl.batch_blocker.startswith("vmap failed")


def test_bad_shapes_are_refused():
    wl = make_workload("digits-logreg")
    params, x, y = _rows(wl, 2, 4)
    with pytest.raises(BadInput, match=r"params must be \[k, 650\]"):
        wl.gradients(params[0], x, y)
    with pytest.raises(BadInput, match="float32"):
        wl.gradients(params.double(), x, y)
    with pytest.raises(BadInput, match="stack 2 batches"):
        wl.gradients(params, x[:1], y)


def test_a_workload_that_batched_still_pickles_and_copies():
    wl = make_workload("digits-logreg")
    rows = _rows(wl, 2, 4)
    grads, _ = wl.gradients(*rows)
    for twin in (pickle.loads(pickle.dumps(wl)), copy.deepcopy(wl)):
        assert torch.equal(twin.gradients(*rows)[0], grads)
