"""Workloads: a model with a flat parameter layout, its data, loss and evaluation.

Drivers never touch a model's modules. They hold models as one flat float32
vector (a 1-D tensor, ``Workload.n_params`` long), so copying, averaging and
applying updates are single tensor operations whatever the model. A
:class:`Workload` keeps one *template* module whose parameters live in a flat
buffer; :meth:`Workload.gradient` and :meth:`Workload.evaluate` copy the given
vector into that buffer (one memcpy), run the module, and hand results back,
so one workload serves any number of simulated workers.

The training split is cut into per-worker :class:`Shard` s by
:meth:`Workload.make_shards`; each shard samples its own batches
deterministically.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from hetsync.errors import BadInput

LossFn = Callable[[Tensor, Tensor], Tensor]
"""``loss_fn(outputs, labels) -> scalar``: the mean loss over a batch."""

_EVAL_CHUNK = 8192
"""Test samples evaluated per forward pass (bounds evaluation memory)."""


def _check_int(field: str, value: object, minimum: int) -> int:
    """Return ``value`` as an int, or raise :class:`BadInput` naming ``field``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise BadInput(f"{field} must be an integer, got {value!r}")
    if value < minimum:
        raise BadInput(f"{field} must be >= {minimum}, got {value}")
    return int(value)


def _check_labels(field: str, y: object, n: int) -> Tensor:
    """Validate class labels: an integer tensor of ``n`` values >= 0, as int64."""
    if not isinstance(y, Tensor):
        raise BadInput(f"{field} must be a torch.Tensor, got {type(y).__name__}")
    if y.dtype.is_floating_point or y.dtype.is_complex or y.dtype == torch.bool:
        raise BadInput(f"{field} must hold integer class labels, got dtype {y.dtype}")
    if y.shape != (n,):
        raise BadInput(f"{field} must have shape ({n},) to match its inputs, got {tuple(y.shape)}")
    if n and int(y.min()) < 0:
        raise BadInput(f"{field} holds a negative class label ({int(y.min())})")
    return y.to(torch.int64)


def _check_inputs(field: str, x: object) -> Tensor:
    """Validate a non-empty input tensor; floating inputs become float32."""
    if not isinstance(x, Tensor):
        raise BadInput(f"{field} must be a torch.Tensor, got {type(x).__name__}")
    if x.ndim < 1 or len(x) < 1:
        raise BadInput(f"{field} must hold at least one sample, got shape {tuple(x.shape)}")
    return x.to(torch.float32) if x.dtype.is_floating_point else x


class Shard:
    """One worker's slice of the training data and its deterministic batch sampler.

    Batches are drawn without replacement along a random permutation of the
    shard (an epoch); when an epoch ends a fresh permutation is drawn. A batch
    that crosses an epoch end, or is larger than the whole shard, continues
    into the following permutations, so any batch size works, even on a
    one-sample shard.

    Attributes:
        x: inputs, ``[n, ...]``.
        y: int64 class labels, ``[n]``.
        indices: positions of these samples in the workload's training split
            (``None`` for a shard built directly from tensors).
    """

    def __init__(
        self,
        x: Tensor,
        y: Tensor,
        seed: int | np.random.SeedSequence = 0,
        indices: np.ndarray | None = None,
    ) -> None:
        """Wrap ``x``/``y``; ``seed`` (an int >= 0 or a SeedSequence) fixes the batch order."""
        self.x = _check_inputs("x", x)
        self.y = _check_labels("y", y, len(self.x))
        if not isinstance(seed, np.random.SeedSequence):
            seed = _check_int("seed", seed, 0)
        self.indices = indices
        self._rng = np.random.default_rng(seed)
        self._perm = self._permutations(1)[0]
        self._pos = 0

    def __len__(self) -> int:
        """Number of samples in the shard."""
        return len(self.y)

    def _permutations(self, count: int) -> np.ndarray:
        """``count`` independent permutations of the shard, one per row."""
        rows = np.broadcast_to(np.arange(len(self)), (count, len(self)))
        return self._rng.permuted(rows, axis=1)

    def next_batch(self, batch_size: int) -> tuple[Tensor, Tensor]:
        """The next ``batch_size`` samples ``(x, y)`` of the shard's epoch sequence."""
        batch_size = _check_int("batch_size", batch_size, 1)
        n = len(self)
        take = min(batch_size, n - self._pos)
        pieces = [self._perm[self._pos : self._pos + take]]
        self._pos += take
        if self._pos == n:
            full_epochs, self._pos = divmod(batch_size - take, n)
            perms = self._permutations(full_epochs + 1)
            self._perm = perms[-1]
            pieces += [perms[:-1].ravel(), self._perm[: self._pos]]
        index = torch.from_numpy(np.concatenate(pieces))
        return self.x.index_select(0, index), self.y.index_select(0, index)


class Workload:
    """A learning problem: template model, train/test data, loss and evaluation.

    The template's parameters define the flat layout: the vector is the
    concatenation of ``model.parameters()`` in order, each flattened. The
    workload takes ownership of ``model`` (it is converted to float32 and its
    parameters are re-pointed into an internal flat buffer); do not use it
    elsewhere.

    Only parameters are part of the flat vector. Models must therefore not
    keep training state in buffers: normalisation layers that track running
    statistics (BatchNorm) are rejected, since those statistics would be
    shared by every simulated worker (use GroupNorm or LayerNorm instead).

    Labels are integer class labels; accuracy is the share of samples whose
    highest output is the label. ``loss_fn(outputs, labels)`` must return the
    mean loss over the batch (default: cross-entropy).

    A workload is not thread-safe: ``gradient`` and ``evaluate`` share the
    template, so use one workload per thread.

    Attributes:
        name, description: as given.
        model: the template module.
        loss_fn: the loss in use.
        train_x, train_y, test_x, test_y: the data (inputs float32 when
            floating, labels int64).
        n_classes: ``max label + 1`` over both splits.
    """

    def __init__(
        self,
        name: str,
        model: nn.Module,
        train_x: Tensor,
        train_y: Tensor,
        test_x: Tensor,
        test_y: Tensor,
        loss_fn: LossFn | None = None,
        description: str = "",
    ) -> None:
        """Validate everything and bind the template's parameters to a flat buffer."""
        if not isinstance(name, str) or not name:
            raise BadInput(f"name must be a non-empty string, got {name!r}")
        if not isinstance(description, str):
            raise BadInput(f"description must be a string, got {type(description).__name__}")
        if loss_fn is not None and not callable(loss_fn):
            raise BadInput(f"loss_fn must be callable, got {type(loss_fn).__name__}")
        self.name = name
        self.description = description
        self.loss_fn: LossFn = F.cross_entropy if loss_fn is None else loss_fn
        self.model = self._check_model(model)
        self.train_x = _check_inputs("train_x", train_x)
        self.train_y = _check_labels("train_y", train_y, len(self.train_x))
        self.test_x = _check_inputs("test_x", test_x)
        self.test_y = _check_labels("test_y", test_y, len(self.test_x))
        if self.train_x.shape[1:] != self.test_x.shape[1:]:
            raise BadInput(
                f"test_x samples have shape {tuple(self.test_x.shape[1:])}, "
                f"train_x samples {tuple(self.train_x.shape[1:])}: they must match"
            )
        self.n_classes = int(max(self.train_y.max(), self.test_y.max())) + 1

        self._bind_flat()
        self._training = True
        self.model.train()
        self._check_forward()

    def _bind_flat(self) -> None:
        """Move the template's parameters (values and ``.grad``) into flat buffers."""
        self._params = list(self.model.parameters())
        self._n_params = sum(p.numel() for p in self._params)
        self._flat = torch.cat([p.detach().reshape(-1) for p in self._params])
        self._flat_grad = torch.zeros_like(self._flat)
        sizes = [p.numel() for p in self._params]
        for p, value, grad in zip(self._params, self._flat.split(sizes), self._flat_grad.split(sizes), strict=True):
            p.data = value.view(p.shape)
            p.grad = grad.view(p.shape)

    def __getstate__(self) -> dict[str, object]:
        """Pickle (and deepcopy) without the flat buffers; they are rebuilt on load."""
        state = self.__dict__.copy()
        for key in ("_params", "_flat", "_flat_grad"):
            del state[key]
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        """Restore a pickled workload and re-bind its template to new flat buffers."""
        self.__dict__.update(state)
        self._bind_flat()

    @staticmethod
    def _check_model(model: object) -> nn.Module:
        """Validate the template module and convert it to float32."""
        if not isinstance(model, nn.Module):
            raise BadInput(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if not list(model.parameters()):
            raise BadInput(f"model {type(model).__name__} has no parameters to train")
        frozen = [name for name, p in model.named_parameters() if not p.requires_grad]
        if frozen:
            raise BadInput(f"model has frozen parameters {frozen}: every parameter is trained")
        running = [
            name
            for name, m in model.named_modules()
            if isinstance(m, nn.modules.batchnorm._NormBase) and m.track_running_stats
        ]
        if running:
            raise BadInput(
                f"model modules {running} track running statistics (BatchNorm): these "
                "are not part of the flat parameter vector; use GroupNorm or LayerNorm"
            )
        return model.float()

    def _check_forward(self) -> None:
        """Run the template on two training samples to catch shape errors early."""
        x, y = self.train_x[:2], self.train_y[:2]
        try:
            with torch.no_grad():
                out = self.model(x)
                loss = self.loss_fn(out, y)
        except Exception as exc:  # the user's module or loss: report it as bad input
            raise BadInput(f"model/loss_fn fail on train_x[:2]: {type(exc).__name__}: {exc}") from exc
        if not isinstance(out, Tensor) or out.ndim != 2 or len(out) != len(x):
            shape = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
            raise BadInput(f"model must map a batch of n samples to [n, classes] outputs, got {shape}")
        if out.shape[1] < self.n_classes:
            raise BadInput(f"model has {out.shape[1]} outputs but the labels have {self.n_classes} classes")
        if not isinstance(loss, Tensor) or loss.ndim != 0:
            raise BadInput("loss_fn must return a scalar tensor (the mean loss over the batch)")

    @property
    def n_params(self) -> int:
        """Length of the flat parameter vector."""
        return self._n_params

    @property
    def model_nbytes(self) -> int:
        """Size of the flat float32 parameter vector in bytes."""
        return self._n_params * 4

    def _load(self, params: Tensor) -> None:
        """Copy ``params`` into the template (validated)."""
        if not isinstance(params, Tensor) or params.shape != (self._n_params,):
            shape = tuple(params.shape) if isinstance(params, Tensor) else type(params).__name__
            raise BadInput(f"params must be a flat vector of {self._n_params} values for {self.name}, got {shape}")
        if params.dtype != torch.float32:
            raise BadInput(f"params must be float32, got {params.dtype}")
        self._flat.copy_(params)

    def _set_training(self, training: bool) -> None:
        """Switch the template between train and eval mode, only when it changes."""
        if self._training != training:
            self.model.train(training)
            self._training = training

    def init_params(self, seed: int) -> Tensor:
        """A fresh flat parameter vector, deterministic for ``seed``.

        Every submodule's ``reset_parameters`` runs under ``torch.manual_seed(seed)``
        inside a forked RNG, so the global RNG state is left untouched.
        Parameters of modules without ``reset_parameters`` keep the template's
        construction-time values.
        """
        seed = _check_int("seed", seed, 0)
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(seed)
            for module in self.model.modules():
                reset = getattr(module, "reset_parameters", None)
                if callable(reset):
                    reset()
        return self._flat.clone()

    def make_shards(self, n_workers: int, seed: int, label_skew: float = 0.0) -> list[Shard]:
        """Split the training set into ``n_workers`` shards.

        Every sample gets a sort key: with probability ``label_skew`` its label
        plus U[0, 1) noise, otherwise a uniform key in ``[0, n_classes)``. The
        samples, sorted by key, are cut into near-equal contiguous parts. So
        ``label_skew=0`` is an iid split (a random permutation) and
        ``label_skew=1`` sorts by label (each worker sees few classes). With
        more workers than samples, samples are reused cyclically so every
        shard holds at least one. Shard ``i`` samples batches with seed
        ``SeedSequence(seed, spawn_key=(i,))``.
        """
        n_workers = _check_int("n_workers", n_workers, 1)
        seed = _check_int("seed", seed, 0)
        if isinstance(label_skew, bool) or not isinstance(label_skew, numbers.Real):
            raise BadInput(f"label_skew must be a number in [0, 1], got {label_skew!r}")
        label_skew = float(label_skew)
        if not (math.isfinite(label_skew) and 0.0 <= label_skew <= 1.0):
            raise BadInput(f"label_skew must be in [0, 1], got {label_skew}")

        n = len(self.train_y)
        rng = np.random.default_rng(np.random.SeedSequence(seed))
        by_label = rng.random(n) < label_skew
        label_keys = self.train_y.numpy() + rng.random(n)
        random_keys = rng.random(n) * self.n_classes
        order = np.argsort(np.where(by_label, label_keys, random_keys), kind="stable")
        parts = np.array_split(np.resize(order, max(n, n_workers)), n_workers)
        shards = []
        for i, part in enumerate(parts):
            index = torch.from_numpy(part)
            shards.append(
                Shard(
                    self.train_x.index_select(0, index),
                    self.train_y.index_select(0, index),
                    seed=np.random.SeedSequence(seed, spawn_key=(i,)),
                    indices=part,
                )
            )
        return shards

    def gradient(self, params: Tensor, x: Tensor, y: Tensor) -> tuple[Tensor, float]:
        """Flat gradient of the mean loss on batch ``(x, y)`` at ``params``, and the loss.

        ``params`` is not modified; the returned gradient is a new tensor.
        """
        self._load(params)
        self._set_training(True)
        self._flat_grad.zero_()
        with torch.enable_grad():  # the caller may be inside torch.no_grad()
            loss = self.loss_fn(self.model(x), y)
            loss.backward()  # accumulates into self._flat_grad: the parameters' .grad views
        return self._flat_grad.clone(), loss.item()

    def evaluate(self, params: Tensor) -> tuple[float, float]:
        """``(accuracy, mean loss)`` of ``params`` on the test split."""
        self._load(params)
        self._set_training(False)
        correct = 0
        loss_sum = 0.0
        with torch.no_grad():
            for start in range(0, len(self.test_y), _EVAL_CHUNK):
                x = self.test_x[start : start + _EVAL_CHUNK]
                y = self.test_y[start : start + _EVAL_CHUNK]
                out = self.model(x)
                loss_sum += self.loss_fn(out, y).item() * len(y)
                correct += int((out.argmax(dim=1) == y).sum())
        n = len(self.test_y)
        return correct / n, loss_sum / n

    def __repr__(self) -> str:
        return f"Workload({self.name!r}, n_params={self._n_params}, train={len(self.train_y)}, test={len(self.test_y)})"


def from_module(
    name: str,
    model: nn.Module,
    train: tuple[Tensor, Tensor],
    test: tuple[Tensor, Tensor],
    loss_fn: LossFn | None = None,
    description: str = "",
) -> Workload:
    """Wrap any ``torch.nn.Module`` and a labelled dataset as a :class:`Workload`.

    Args:
        name: a short name for reports.
        model: maps a batch ``[n, ...]`` to class scores ``[n, classes]``. It
            must have parameters, all trainable, and no BatchNorm running
            statistics. The workload takes ownership of it (converted to
            float32).
        train: ``(x, y)`` training inputs and int class labels, same length;
            split into worker shards by :meth:`Workload.make_shards`.
        test: ``(x, y)`` held-out split used by :meth:`Workload.evaluate`.
        loss_fn: ``loss_fn(outputs, labels)`` returning the batch-mean loss
            as a scalar tensor; default cross-entropy.
        description: free text for reports.

    Floating inputs are converted to float32; labels to int64. A short
    forward pass on two training samples checks that model, data and loss
    fit together. Raises :class:`hetsync.errors.BadInput` naming what is wrong.

    Example::

        import torch
        from torch import nn
        from hetsync.workloads import from_module

        x = torch.randn(1000, 20)
        y = (x[:, 0] > 0).long()
        wl = from_module(
            "toy",
            nn.Sequential(nn.Linear(20, 32), nn.Tanh(), nn.Linear(32, 2)),
            train=(x[:800], y[:800]),
            test=(x[800:], y[800:]),
        )
        params = wl.init_params(seed=0)
        shard = wl.make_shards(n_workers=4, seed=0)[0]
        grad, loss = wl.gradient(params, *shard.next_batch(32))
        params -= 0.1 * grad
        accuracy, test_loss = wl.evaluate(params)
    """
    for field, pair in (("train", train), ("test", test)):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise BadInput(f"{field} must be a pair (x, y) of tensors, got {type(pair).__name__}")
    return Workload(
        name,
        model,
        train_x=train[0],
        train_y=train[1],
        test_x=test[0],
        test_y=test[1],
        loss_fn=loss_fn,
        description=description,
    )
