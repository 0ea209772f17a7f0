"""Tests for hetsync.workloads.base: flat-vector gradients, init, shards, sampling, tasks, metrics, buffers."""

from __future__ import annotations

import copy
import math
import pickle

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.nn import functional as F
from torch.nn.utils import parameters_to_vector, vector_to_parameters
from torch.utils.data import Dataset, TensorDataset

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


def test_gradient_on_device_leaves_the_loss_a_tensor_and_gives_what_gradient_gives() -> None:
    wl = _toy()
    params = wl.init_params(3)
    x, y = _data(32, seed=4)
    grad, loss = wl.gradient(params, x, y)
    grad_t, loss_t = wl.gradient_on_device(params, x, y)
    assert isinstance(loss_t, torch.Tensor) and loss_t.dim() == 0 and not loss_t.requires_grad
    assert torch.equal(grad_t, grad) and loss_t.item() == loss
    assert wl.device == torch.device("cpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_workload_and_a_shard_moved_to_a_gpu_compute_there_what_the_cpu_computes() -> None:
    """signal1d-cnn with BatchNorm: parameters, buffers and the flat buffers
    move; the gradient matches the CPU's (kernels round differently) and the
    buffers are left as they were; the shard draws the same batches."""
    from hetsync.workloads import make_workload

    cpu, gpu = make_workload("signal1d-cnn", batchnorm=True), make_workload("signal1d-cnn", batchnorm=True)
    assert gpu.to("cuda") is gpu and gpu.device.type == "cuda"
    assert {p.device.type for p in gpu.model.parameters()} == {"cuda"}
    assert {b.device.type for b in gpu.model.buffers()} == {"cuda"}
    shard_cpu, shard_gpu = cpu.make_shards(2, 0)[0], gpu.make_shards(2, 0)[0].to("cuda")
    params = cpu.init_params(1)
    for _ in range(3):
        (x, y), (xg, yg) = shard_cpu.next_batch(16), shard_gpu.next_batch(16)
        assert xg.device.type == "cuda" and torch.equal(xg.cpu(), x) and torch.equal(yg.cpu(), y)
        want, _ = cpu.gradient(params, x, y)
        got, loss = gpu.gradient_on_device(params.cuda(), xg, yg)
        assert got.device.type == "cuda" and loss.device.type == "cuda"
        assert (got.cpu() - want).abs().max().item() < 1e-4
    buffers_cpu = [b.clone() for b in cpu.model.buffers()]
    assert all(torch.allclose(b.cpu(), c) for b, c in zip(gpu.model.buffers(), buffers_cpu, strict=True))


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


def test_next_batch_serves_the_current_tensors_and_ones_numpy_cannot_view() -> None:
    """next_batch gathers through numpy views of x and y: a replaced x is
    served from then on, and a tensor without a numpy view (it requires
    grad) goes through index_select, as before."""
    a, b = _shard(20, seed=3), _shard(20, seed=3)
    a.next_batch(4), b.next_batch(4)
    a.x = a.x * 10
    assert torch.equal(a.next_batch(4)[0], b.next_batch(4)[0] * 10)
    a.x = a.x.clone().requires_grad_()
    xa, _ = a.next_batch(4)
    assert xa.requires_grad and torch.equal(xa.detach(), b.next_batch(4)[0] * 10)
    assert len(a._views) <= 2  # the views of tensors replaced are let go


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
        (nn.Linear(5, 3), _data(10), _data(10), "task"),
    ],
)
def test_from_module_validates(model, train, test, field: str) -> None:
    task = "translation" if field == "task" else None
    with pytest.raises(BadInput, match=field):
        from_module("bad", model, train=train, test=test, task=task)


def test_task_inferred_from_targets() -> None:
    x = torch.randn(12, 5)
    assert _toy().task == "classification"
    regression = from_module("r", nn.Linear(5, 1), train=(x, torch.randn(12, 1)), test=(x, torch.randn(12, 1)))
    assert regression.task == "regression" and regression.n_classes is None
    ints = torch.randint(0, 4, (12, 1))
    forced = from_module("r", nn.Linear(5, 1), train=(x, ints), test=(x, ints), task="regression")
    assert forced.task == "regression" and forced.train_y.dtype == torch.float32
    with pytest.raises(BadInput, match="train_y"):
        from_module("r", nn.Linear(5, 1), train=(x, ints.view(12, 1, 1)), test=(x, ints))


# --- metrics -----------------------------------------------------------------------


def _old_evaluate(wl: Workload, params: torch.Tensor, chunk: int = 8192) -> tuple[float, float]:
    """The arithmetic of Workload.evaluate before metrics existed."""
    wl._load(params)
    wl._set_training(False)
    correct, loss_sum = 0, 0.0
    with torch.no_grad():
        for start in range(0, len(wl.test_y), chunk):
            x, y = wl.test_x[start : start + chunk], wl.test_y[start : start + chunk]
            out = wl.model(x)
            loss_sum += wl.loss_fn(out, y).item() * len(y)
            correct += int((out.argmax(dim=1) == y).sum())
    return correct / len(wl.test_y), loss_sum / len(wl.test_y)


def test_classifier_metrics_equal_old_evaluate() -> None:
    wl = _toy(n_test=50)
    assert wl.metrics == {"accuracy": "max", "loss": "min"}
    assert list(wl.metrics) == ["accuracy", "loss"]
    params = wl.init_params(2)
    values = wl.evaluate_metrics(params)
    assert list(values) == ["accuracy", "loss"]
    assert (values["accuracy"], values["loss"]) == _old_evaluate(wl, params)
    assert wl.evaluate(params) == _old_evaluate(wl, params)


def test_metrics_weight_chunks_by_size(monkeypatch: pytest.MonkeyPatch) -> None:
    def top2(out: torch.Tensor, y: torch.Tensor) -> float:
        return (out.topk(2, dim=1).indices == y[:, None]).any(dim=1).float().mean().item()

    wl = from_module("top2", _module(), train=_data(40), test=_data(53, seed=3), metrics={"top2": (top2, "max")})
    assert list(wl.metrics.items()) == [("accuracy", "max"), ("loss", "min"), ("top2", "max")]
    params = wl.init_params(1)
    whole = wl.evaluate_metrics(params)
    monkeypatch.setattr("hetsync.workloads.base._EVAL_CHUNK", 10)  # chunks of 10, ..., 10, 3
    chunked = wl.evaluate_metrics(params)
    assert list(chunked) == ["accuracy", "loss", "top2"]
    for name in whole:
        assert chunked[name] == pytest.approx(whole[name], rel=1e-6)
    with torch.no_grad():
        assert whole["top2"] == pytest.approx(top2(wl.model(wl.test_x), wl.test_y))
    assert (chunked["accuracy"], chunked["loss"]) == _old_evaluate(wl, params, chunk=10)


@pytest.mark.parametrize(
    ("metrics", "needle"),
    [
        ({"mae": (lambda o, y: 0.0, "up")}, "mae"),
        ({"mae": ("abs", "min")}, "mae"),
        ({"mae": lambda o, y: 0.0}, "mae"),
        ({"loss": (lambda o, y: 0.0, "min")}, "loss"),
        ({"": (lambda o, y: 0.0, "min")}, "metrics"),
        ({"mae": (lambda o, y: 1 / 0, "min")}, "mae"),
        ([("mae", abs, "min")], "metrics"),
    ],
)
def test_bad_metrics_name_the_metric(metrics, needle: str) -> None:
    with pytest.raises(BadInput, match=needle):
        from_module("bad", _module(), train=_data(10), test=_data(10), metrics=metrics)


# --- Dataset input ----------------------------------------------------------------------


class _Pairs(Dataset):
    """Items as (numpy array, python int): what a user's own Dataset often returns."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x.numpy(), y.tolist()

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        return self.x[i], self.y[i]


def test_dataset_input_equals_tensor_input() -> None:
    train, test = _data(40, seed=1), _data(20, seed=2)
    by_tensors = from_module("t", _module(), train=train, test=test)
    for wrap in (lambda d: TensorDataset(*d), lambda d: _Pairs(*d)):
        by_dataset = from_module("d", _module(), train=wrap(train), test=wrap(test))
        for name in ("train_x", "train_y", "test_x", "test_y"):
            a, b = getattr(by_tensors, name), getattr(by_dataset, name)
            assert a.dtype == b.dtype and torch.equal(a, b)
        params = by_tensors.init_params(0)
        x, y = by_tensors.make_shards(2, seed=0)[1].next_batch(8)
        assert torch.equal(by_tensors.gradient(params, x, y)[0], by_dataset.gradient(params, x, y)[0])
        assert by_tensors.evaluate_metrics(params) == by_dataset.evaluate_metrics(params)


class _Items(Dataset):
    def __init__(self, items: list) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int):
        return self.items[i]


@pytest.mark.parametrize(
    ("items", "needle"),
    [
        ([torch.zeros(5)], r"train\[0\]"),
        ([(torch.zeros(5), 0), (torch.zeros(5), 1, 2)], r"train\[1\]"),
        ([(torch.zeros(5), 0), (torch.zeros(4), 1)], r"train\[1\]: x"),
        ([(torch.zeros(5), 0), (torch.zeros(5), object())], r"train\[1\]: y"),
        ([], "train"),
    ],
)
def test_dataset_items_validated(items: list, needle: str) -> None:
    with pytest.raises(BadInput, match=needle):
        from_module("bad", nn.Linear(5, 3), train=_Items(items), test=_data(10))


# --- regression ---------------------------------------------------------------------------


def _regression_data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 5, generator=gen)
    y = x @ torch.tensor([[1.0, -2.0], [0.5, 0.0], [0.0, 1.0], [2.0, 0.3], [-1.0, 0.5]]) + 0.1 * torch.randn(
        n, 2, generator=gen
    )
    return x, y


def _mae(out: torch.Tensor, y: torch.Tensor) -> float:
    return (out - y).abs().mean().item()


def test_regression_with_float_targets_and_mse() -> None:
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 2))
    reference = copy.deepcopy(module)
    wl = from_module(
        "reg", module, train=_regression_data(200, 0), test=_regression_data(50, 1), metrics={"mae": (_mae, "min")}
    )
    assert wl.task == "regression" and wl.loss_fn is F.mse_loss
    assert list(wl.metrics.items()) == [("loss", "min"), ("mae", "min")]
    params = wl.init_params(0)
    x, y = _regression_data(16, 2)
    grad, loss = wl.gradient(params, x, y)
    want_grad, want_loss = _reference_gradient(reference, params, x, y, F.mse_loss)
    assert (grad - want_grad).abs().max() < 1e-6 and loss == pytest.approx(want_loss, abs=1e-6)

    values = wl.evaluate_metrics(params)
    vector_to_parameters(params.clone(), reference.parameters())
    with torch.no_grad():
        out = reference(wl.test_x)
    assert values["loss"] == pytest.approx(F.mse_loss(out, wl.test_y).item(), rel=1e-5)
    assert values["mae"] == pytest.approx(_mae(out, wl.test_y), rel=1e-5)
    shard = wl.make_shards(1, seed=0)[0]
    for _ in range(100):
        params -= 0.05 * wl.gradient(params, *shard.next_batch(32))[0]
    assert wl.evaluate_metrics(params)["loss"] < 0.5 * values["loss"]
    with pytest.raises(BadInput, match="accuracy"):
        wl.evaluate(params)


def test_regression_targets_of_any_shape_and_own_loss() -> None:
    x = torch.randn(30, 6)
    y = torch.randn(30, 2, 3)

    class Grid(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(6, 6)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.linear(x).view(-1, 2, 3)

    wl = from_module("grid", Grid(), train=(x[:20], y[:20]), test=(x[20:], y[20:]), loss_fn=F.l1_loss)
    params = wl.init_params(0)
    assert wl.evaluate_metrics(params)["loss"] > 0
    shard = wl.make_shards(3, seed=0)[2]
    bx, by = shard.next_batch(5)
    assert bx.shape == (5, 6) and by.shape == (5, 2, 3) and by.dtype == torch.float32
    assert wl.gradient(params, bx, by)[0].shape == (wl.n_params,)


def test_regression_shape_mismatch_with_default_loss() -> None:
    x = torch.randn(10, 5)
    with pytest.raises(BadInput, match="train_y"):
        from_module("reg", nn.Linear(5, 1), train=(x, torch.randn(10)), test=(x, torch.randn(10)))


def test_label_skew_needs_class_labels() -> None:
    wl = from_module("reg", nn.Linear(5, 2), train=_regression_data(40, 0), test=_regression_data(10, 1))
    shards = wl.make_shards(4, seed=0)
    assert sorted(np.concatenate([s.indices for s in shards]).tolist()) == list(range(40))
    with pytest.raises(BadInput, match="label_skew needs class labels"):
        wl.make_shards(4, seed=0, label_skew=0.5)


# --- language-model task ---------------------------------------------------------------------


class _Bigram(nn.Module):
    def __init__(self, vocab: int = 7) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.embed(tokens)


def _tokens(n: int, length: int = 6, vocab: int = 7, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    text = torch.randint(0, vocab, (n, length + 1), generator=gen)
    text[0, 0] = vocab - 1
    return text[:, :-1], text[:, 1:]


def test_lm_task_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    wl = from_module("lm", _Bigram(), train=_tokens(30), test=_tokens(23, seed=1))
    assert wl.task == "lm" and wl.n_classes == 7
    assert list(wl.metrics.items()) == [("loss", "min"), ("perplexity", "min"), ("accuracy", "max")]
    params = wl.init_params(0)
    values = wl.evaluate_metrics(params)
    assert list(values) == ["loss", "perplexity", "accuracy"]
    assert values["perplexity"] == math.exp(values["loss"])
    with torch.no_grad():
        out = wl.model(wl.test_x)
    assert values["loss"] == pytest.approx(F.cross_entropy(out.reshape(-1, 7), wl.test_y.reshape(-1)).item(), rel=1e-6)
    assert values["accuracy"] == pytest.approx((out.argmax(-1) == wl.test_y).float().mean().item())
    assert wl.evaluate(params) == (values["accuracy"], values["loss"])
    monkeypatch.setattr("hetsync.workloads.base._EVAL_CHUNK", 12)  # two samples (12 tokens) per chunk
    for name, value in wl.evaluate_metrics(params).items():
        assert value == pytest.approx(values[name], rel=1e-6)
    with pytest.raises(BadInput, match="label_skew"):
        wl.make_shards(2, seed=0, label_skew=1.0)


def test_lm_perplexity_is_cross_entropy_whatever_the_loss() -> None:
    def smoothed(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(out.flatten(0, 1), y.flatten(), label_smoothing=0.2)

    plain = from_module("lm", _Bigram(), train=_tokens(30), test=_tokens(20, seed=1))
    smooth = from_module("lm", _Bigram(), train=_tokens(30), test=_tokens(20, seed=1), loss_fn=smoothed)
    params = plain.init_params(0)
    assert smooth.evaluate_metrics(params)["perplexity"] == pytest.approx(plain.evaluate_metrics(params)["perplexity"])
    assert smooth.evaluate_metrics(params)["loss"] != plain.evaluate_metrics(params)["loss"]


@pytest.mark.parametrize(
    ("model", "needle"),
    [
        (nn.Sequential(_Bigram(), nn.Flatten()), "vocab"),
        (nn.Sequential(nn.Embedding(7, 4), nn.Linear(4, 5)), "tokens"),
        (_Bigram(vocab=9), None),
    ],
)
def test_lm_outputs_checked(model: nn.Module, needle: str | None) -> None:
    train, test = _tokens(10, vocab=7), _tokens(10, vocab=7, seed=1)
    if needle is None:
        assert from_module("lm", model, train=train, test=test).n_classes == 7
        return
    with pytest.raises(BadInput, match=needle):
        from_module("lm", model, train=train, test=test)


# --- frozen parameters ---------------------------------------------------------------------------


def _half_frozen() -> nn.Module:
    module = _module()
    module[0].weight.requires_grad_(False)
    return module


def test_frozen_parameters_are_not_in_the_flat_vector() -> None:
    module = _half_frozen()
    frozen = module[0].weight.detach().clone()
    reference = copy.deepcopy(module)
    wl = from_module("frozen", module, train=_data(40), test=_data(20, seed=1))
    assert wl.n_params == 7 + 7 * 3 + 3 and wl.model_nbytes == 4 * wl.n_params
    params = wl.init_params(0)
    assert torch.equal(wl.init_params(0), params) and not torch.equal(wl.init_params(1), params)
    x, y = _data(16, seed=3)
    grad, loss = wl.gradient(params, x, y)
    ref_params = [p for p in reference.parameters() if p.requires_grad]
    vector_to_parameters(params.clone(), ref_params)
    want = F.cross_entropy(reference(x), y)
    want.backward()
    assert (grad - parameters_to_vector(p.grad for p in ref_params)).abs().max() < 1e-6
    assert loss == pytest.approx(want.item(), abs=1e-6)
    wl.evaluate_metrics(params - 0.1 * grad)
    assert torch.equal(wl.model[0].weight, frozen)
    twin = pickle.loads(pickle.dumps(wl))
    assert torch.equal(twin.init_params(3), wl.init_params(3)) and torch.equal(twin.model[0].weight, frozen)


def test_all_frozen_rejected() -> None:
    model = nn.Linear(5, 3)
    model.requires_grad_(False)
    with pytest.raises(BadInput, match="trainable"):
        from_module("frozen", model, train=_data(10), test=_data(10))


# --- buffers: BatchNorm running statistics -------------------------------------------------------


def _bn_module(dropout: float = 0.0) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(dropout), nn.Linear(16, 3))


def _bn_workload(module: nn.Module, n_train: int = 200) -> Workload:
    x, y = _data(n_train, seed=1)
    return from_module("bn", module, train=(3 * x + 1, y), test=(3 * _data(40, seed=2)[0] + 1, _data(40, seed=2)[1]))


def _buffers(wl: Workload) -> list[torch.Tensor]:
    return [b.clone() for b in wl.model.buffers()]


def test_batchnorm_gradient_uses_batch_statistics_and_does_not_drift() -> None:
    module = _bn_module()
    reference = copy.deepcopy(module).train()
    wl = _bn_workload(module)
    params = wl.init_params(0)
    x, y = wl.make_shards(1, seed=0)[0].next_batch(32)
    before = _buffers(wl)
    first, loss = wl.gradient(params, x, y)
    assert all(torch.equal(a, b) for a, b in zip(before, _buffers(wl), strict=True))
    assert torch.equal(wl.gradient(params, x, y)[0], first)
    want_grad, want_loss = _reference_gradient(reference, params, x, y)
    assert (first - want_grad).abs().max() < 1e-5 and loss == pytest.approx(want_loss, abs=1e-6)
    wl.evaluate_metrics(wl.init_params(1))  # sets running statistics; training ignores them
    assert torch.equal(wl.gradient(params, x, y)[0], first)


def test_batchnorm_evaluation_recomputes_running_statistics() -> None:
    module = _bn_module(dropout=0.5)
    reference = copy.deepcopy(module)
    wl = _bn_workload(module, n_train=200)  # <= one precise-BN chunk: statistics of the whole train split
    params = wl.init_params(0)
    shard = wl.make_shards(1, seed=0)[0]
    for _ in range(20):
        params -= 0.1 * wl.gradient(params, *shard.next_batch(16))[0]
    values = wl.evaluate_metrics(params)
    for other in range(3):  # other parameters and training in between change nothing
        wl.evaluate_metrics(wl.init_params(other))
        wl.gradient(wl.init_params(other), *shard.next_batch(16))
        assert wl.evaluate_metrics(params) == values

    vector_to_parameters(params.clone(), reference.parameters())
    reference.eval()
    reference[1].train()
    reference[1].momentum = 1.0  # running statistics := those of the one batch
    with torch.no_grad():
        reference(wl.train_x)
        reference.eval()
        out = reference(wl.test_x)
    assert values["loss"] == pytest.approx(F.cross_entropy(out, wl.test_y).item(), rel=1e-4)
    assert values["accuracy"] == pytest.approx((out.argmax(1) == wl.test_y).float().mean().item())
    assert wl.model[1].momentum == 0.1  # restored


def test_batchnorm_workload_copies_and_shards() -> None:
    wl = _bn_workload(_bn_module(), n_train=3000)  # several precise-BN chunks
    params = wl.init_params(0)
    twin = copy.deepcopy(wl)
    assert twin.evaluate_metrics(params) == wl.evaluate_metrics(params)
    x, y = wl.make_shards(3, seed=0, label_skew=0.5)[0].next_batch(8)
    assert torch.equal(twin.gradient(params, x, y)[0], wl.gradient(params, x, y)[0])


# --- Shard targets -------------------------------------------------------------------------------


def test_shard_takes_targets_of_any_shape() -> None:
    shard = Shard(torch.randn(6, 3), torch.randn(6, 2, 2), seed=0)
    x, y = shard.next_batch(4)
    assert x.shape == (4, 3) and y.shape == (4, 2, 2) and y.dtype == torch.float32
    tokens = Shard(torch.zeros(6, 5, dtype=torch.long), torch.ones(6, 5, dtype=torch.int32), seed=0)
    assert tokens.next_batch(2)[1].dtype == torch.int64
    with pytest.raises(BadInput, match="y"):
        Shard(torch.randn(6, 3), torch.randn(5, 2))
    with pytest.raises(BadInput, match="y"):
        Shard(torch.randn(6, 3), torch.full((6,), -1))


def test_module_with_is_a_standalone_copy() -> None:
    wl = _bn_workload(_half_frozen_bn())
    params = wl.init_params(4)
    module = wl.module_with(params)
    trainable = [p for p in module.parameters() if p.requires_grad]
    assert torch.equal(parameters_to_vector(trainable), params)
    assert torch.equal(module[0].weight, wl.model[0].weight)  # frozen, from the template
    wl.gradient(wl.init_params(5), *_data(8))  # rewrites the workload's flat buffer ...
    assert torch.equal(parameters_to_vector(trainable), params)  # ... but not the copy's storage
    x, y = _data(8)
    module.train()
    assert module(x).shape == (8, 3) and all(p.grad is None for p in module.parameters())


def _half_frozen_bn() -> nn.Module:
    module = _bn_module()
    module[0].weight.requires_grad_(False)
    return module


@pytest.mark.parametrize(("n", "batch"), [(1, 3), (5, 64), (46, 64), (100, 32), (7, 7)])
def test_shard_batches_follow_the_permuted_rows_of_its_generator(n, batch):
    """The batch order is pinned: each epoch is one row of
    ``Generator.permuted(rows of arange, axis=1)`` on the shard's seed, however
    many epochs a batch spans (the sampler draws them row by row, faster)."""
    seed = np.random.SeedSequence(3, spawn_key=(2,))
    shard = Shard(torch.arange(n, dtype=torch.float32)[:, None], torch.zeros(n, dtype=torch.int64), seed=seed)
    rng = np.random.default_rng(np.random.SeedSequence(3, spawn_key=(2,)))
    stream: list[int] = []
    got: list[int] = []
    for _ in range(12):
        got += shard.next_batch(batch)[0][:, 0].long().tolist()
    while len(stream) < len(got):
        count = 1 + (len(got) - len(stream)) // n
        stream += rng.permuted(np.broadcast_to(np.arange(n), (count, n)), axis=1).ravel().tolist()
    assert got == stream[: len(got)]
