"""Workloads: a model with a flat parameter layout, its data, loss and metrics.

Drivers never touch a model's modules. They hold models as one flat float32
vector (a 1-D tensor, ``Workload.n_params`` long), so copying, averaging and
applying updates are single tensor operations whatever the model. A
:class:`Workload` keeps one *template* module whose trainable parameters live
in a flat buffer; :meth:`Workload.gradient` and
:meth:`Workload.evaluate_metrics` copy the given vector into that buffer (one
memcpy), run the module, and hand results back, so one workload serves any
number of simulated workers. :meth:`Workload.gradients` does ``k`` models on
``k`` batches in one call (``torch.func``: ``vmap`` of ``grad`` of
``functional_call``), which the simulator uses for the steps it has in flight;
models ``vmap`` cannot run or cannot speed up fall back to one call per model
(:attr:`Workload.batch_blocker` says why).

Tasks. Targets decide what a workload reports (:attr:`Workload.metrics`, name
-> ``"max"`` or ``"min"``, in order):

- ``"classification"``: integer class labels ``[n]``, outputs ``[n, classes]``,
  cross-entropy; reports ``accuracy`` then ``loss``.
- ``"lm"`` (language model): integer token targets ``[n, T]``, outputs
  ``[n, T, vocab]``, cross-entropy over every token; reports ``loss``,
  ``perplexity`` (``exp`` of the mean token cross-entropy) and next-token
  ``accuracy``.
- ``"regression"``: float targets of any shape with any loss (default mean
  squared error); reports ``loss``.

User metrics come after the built-in ones.

Frozen parameters (``requires_grad=False``) are not in the flat vector: they
keep the template's values for every worker and are never trained.

How buffers are synchronized. Buffers (BatchNorm running statistics, or any
other registered buffer) are not part of the flat vector and never travel
between workers; a worker's model *is* its flat vector. In training every
step runs in train mode, so a BatchNorm layer normalises with its own batch's
statistics, as DDP does per rank; :meth:`Workload.gradient` restores every
buffer after its forward pass, so running statistics never drift into the
template across calls (and one call does not leak into the next worker's).
At evaluation the running statistics are recomputed for the evaluated
parameters ("precise BN"): every BatchNorm-like layer that tracks running
statistics is reset and switched to a cumulative average (``momentum=None``),
forward passes run under ``no_grad`` with only those layers in train mode over
a fixed subset of the training split (up to :data:`_PRECISE_BN_SAMPLES`
samples, drawn once with seed 0, in near-equal chunks of at most
:data:`_PRECISE_BN_CHUNK`), and the test split is then evaluated in eval
mode (where the model stays afterwards). Same parameters, same metrics,
every call; the price is up to 1024 extra training-sample forward passes per
evaluation. Layers built with ``track_running_stats=False`` use batch
statistics at evaluation too, as in plain PyTorch.

The training split is cut into per-worker :class:`Shard` s by
:meth:`Workload.make_shards`; each shard samples its own batches
deterministically.
"""

from __future__ import annotations

import copy
import math
import numbers
import re
import warnings
from collections.abc import Callable, Mapping
from typing import Literal, TypeVar

import numpy as np
import torch
from torch import Tensor, nn
from torch.func import functional_call, grad_and_value, vmap
from torch.nn import functional as F
from torch.nn.modules.batchnorm import _NormBase
from torch.nn.modules.dropout import _DropoutNd
from torch.utils.data import Dataset

from hetsync.errors import BadInput

_T = TypeVar("_T")

LossFn = Callable[[Tensor, Tensor], Tensor]
"""``loss_fn(outputs, targets) -> scalar``: the mean loss over a batch."""

MetricFn = Callable[[Tensor, Tensor], float]
"""``metric(outputs, targets) -> float``: a metric's mean over a batch."""

Direction = Literal["max", "min"]
"""Whether a metric improves upwards (``"max"``) or downwards (``"min"``)."""

Task = Literal["classification", "regression", "lm"]

TASKS: tuple[str, ...] = ("classification", "regression", "lm")

BUILTIN_METRICS: dict[str, dict[str, Direction]] = {
    "classification": {"accuracy": "max", "loss": "min"},
    "lm": {"loss": "min", "perplexity": "min", "accuracy": "max"},
    "regression": {"loss": "min"},
}
"""The metrics each task reports, in order, before any user metric."""

_EVAL_CHUNK = 8192
"""Test targets (class labels, tokens or values) evaluated per forward pass (bounds evaluation memory)."""

_PRECISE_BN_SAMPLES = 1024
"""Training samples whose forward passes recompute running statistics before evaluation."""

_PRECISE_BN_CHUNK = 256
"""Largest batch of those forward passes."""


_NO_BATCHING_RULE = re.compile(r"not yet implemented the batching rule for (\S+?)\.? ")


def _slow_vmap(caught: list[warnings.WarningMessage]) -> str | None:
    """Why a vmapped call was slow, from the warnings it raised (re-raising the others), or None.

    An op without a batching rule (e.g. CPU flash attention) makes ``vmap``
    loop over the models, which costs more than one plain call per model.
    """
    slow = []
    for w in caught:
        match = _NO_BATCHING_RULE.search(str(w.message))
        if match:
            slow.append(match.group(1))
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if not slow:
        return None
    return (
        f"vmap has no batching rule for {', '.join(sorted(set(slow)))} (it would loop, slower than one call per model)"
    )


def _check_int(field: str, value: object, minimum: int) -> int:
    """Return ``value`` as an int, or raise :class:`BadInput` naming ``field``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise BadInput(f"{field} must be an integer, got {value!r}")
    if value < minimum:
        raise BadInput(f"{field} must be >= {minimum}, got {value}")
    return int(value)


def token_cross_entropy(outputs: Tensor, targets: Tensor) -> Tensor:
    """Mean cross-entropy over every token: ``outputs [n, T, vocab]``, ``targets [n, T]``."""
    return F.cross_entropy(outputs.flatten(0, -2), targets.flatten())


_DEFAULT_LOSS: dict[str, LossFn] = {
    "classification": F.cross_entropy,
    "lm": token_cross_entropy,
    "regression": F.mse_loss,
}


def _exp(x: float) -> float:
    """``exp(x)``, ``inf`` where it overflows (a diverged model's perplexity)."""
    return math.exp(x) if x < 709.0 else math.inf


def _infer_task(field: str, y: object) -> str:
    """The task that targets ``y`` imply: int ``[n]`` labels, int ``[n, T]`` tokens, or floats."""
    if not isinstance(y, Tensor):
        raise BadInput(f"{field} must be a torch.Tensor, got {type(y).__name__}")
    if y.dtype.is_floating_point:
        return "regression"
    if y.ndim == 1:
        return "classification"
    if y.ndim == 2:
        return "lm"
    raise BadInput(
        f"{field} has integer targets of shape {tuple(y.shape)}: use [n] class labels, [n, T] tokens, "
        "or pass task='regression'"
    )


def _check_targets(field: str, y: object, n: int, task: str | None) -> Tensor:
    """Validate ``n`` targets for ``task``: labels and tokens become int64, values float32.

    ``task=None`` (a bare :class:`Shard`) accepts targets of any shape:
    integer ones become int64 and must be >= 0, floating ones float32.
    """
    if not isinstance(y, Tensor):
        raise BadInput(f"{field} must be a torch.Tensor, got {type(y).__name__}")
    if y.dtype.is_complex or y.dtype == torch.bool:
        raise BadInput(f"{field} must hold numbers, got dtype {y.dtype}")
    if task in (None, "regression") and (y.ndim < 1 or len(y) != n):
        raise BadInput(f"{field} must hold {n} targets to match its inputs, got shape {tuple(y.shape)}")
    if task == "regression" or (task is None and y.dtype.is_floating_point):
        return y.to(torch.float32)
    kind = {"classification": "class label", "lm": "token"}.get(task or "", "target")
    if y.dtype.is_floating_point:
        raise BadInput(f"{field} must hold integer {kind}s, got dtype {y.dtype}")
    if task == "classification" and y.shape != (n,):
        raise BadInput(f"{field} must have shape ({n},) to match its inputs, got {tuple(y.shape)}")
    if task == "lm" and (y.ndim != 2 or len(y) != n or y.shape[1] < 1):
        raise BadInput(f"{field} must have shape ({n}, T) to match its inputs, got {tuple(y.shape)}")
    if n and int(y.min()) < 0:
        raise BadInput(f"{field} holds a negative {kind} ({int(y.min())})")
    return y.to(torch.int64)


def _check_inputs(field: str, x: object) -> Tensor:
    """Validate a non-empty input tensor; floating inputs become float32."""
    if not isinstance(x, Tensor):
        raise BadInput(f"{field} must be a torch.Tensor, got {type(x).__name__}")
    if x.ndim < 1 or len(x) < 1:
        raise BadInput(f"{field} must hold at least one sample, got shape {tuple(x.shape)}")
    return x.to(torch.float32) if x.dtype.is_floating_point else x


def _check_metrics(metrics: object, task: str) -> dict[str, tuple[MetricFn, Direction]]:
    """Validate user metrics ``{name: (fn, "max" | "min")}``."""
    if metrics is None:
        return {}
    if not isinstance(metrics, Mapping):
        raise BadInput(f"metrics must be a dict {{name: (fn, 'max' | 'min')}}, got {type(metrics).__name__}")
    checked: dict[str, tuple[MetricFn, Direction]] = {}
    for name, spec in metrics.items():
        if not isinstance(name, str) or not name:
            raise BadInput(f"metrics: a metric name must be a non-empty string, got {name!r}")
        if name in BUILTIN_METRICS[task]:
            raise BadInput(f"metrics[{name!r}] clashes with a built-in {task} metric; pick another name")
        if not isinstance(spec, (tuple, list)) or len(spec) != 2:
            raise BadInput(f"metrics[{name!r}] must be a pair (fn, 'max' | 'min'), got {spec!r}")
        fn, direction = spec
        if not callable(fn):
            raise BadInput(f"metrics[{name!r}]: fn must be callable, got {type(fn).__name__}")
        if direction not in ("max", "min"):
            raise BadInput(f"metrics[{name!r}]: direction must be 'max' or 'min', got {direction!r}")
        checked[name] = (fn, direction)
    return checked


def take_rows(array: np.ndarray, rows: np.ndarray, dtype: torch.dtype) -> Tensor:
    """``array[rows]`` as a new tensor of ``dtype`` (the array's own) in torch's
    memory: aligned as the kernels that read it expect (numpy's allocations
    are not, which costs the matrix multiplies a few percent)."""
    out = torch.empty((len(rows), *array.shape[1:]), dtype=dtype)
    np.take(array, rows, axis=0, out=out.numpy())
    return out


class Shard:
    """One worker's slice of the training data and its deterministic batch sampler.

    Batches are drawn without replacement along a random permutation of the
    shard (an epoch); when an epoch ends a fresh permutation is drawn. A batch
    that crosses an epoch end, or is larger than the whole shard, continues
    into the following permutations, so any batch size works, even on a
    one-sample shard.

    Attributes:
        x: inputs, ``[n, ...]``.
        y: targets, ``[n, ...]``: int64 class labels or tokens, or float32
            values.
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
        self.y = _check_targets("y", y, len(self.x), task=None)
        if not isinstance(seed, np.random.SeedSequence):
            seed = _check_int("seed", seed, 0)
        self.indices = indices
        self._views: dict[int, tuple[Tensor, np.ndarray | None]] = {}  # id -> (x or y, its numpy view)
        self._rng = np.random.default_rng(seed)
        self._perm = self._permutations(1)[0]
        self._pos = 0

    def __len__(self) -> int:
        """Number of samples in the shard."""
        return len(self.y)

    def __getstate__(self) -> dict[str, object]:
        """Pickle without the numpy views (rebuilt on first use)."""
        return {**self.__dict__, "_views": {}}

    def _permutations(self, count: int) -> np.ndarray:
        """``count`` independent permutations of the shard, one per row.

        Row by row with ``Generator.permutation``: the same draws as
        ``permuted(rows, axis=1)`` on ``count`` rows of ``arange`` (both
        shuffle each row in turn), at half the cost for the one or two rows
        a batch usually needs.
        """
        n = len(self)
        if count == 1:
            return self._rng.permutation(n)[None, :]
        return np.stack([self._rng.permutation(n) for _ in range(count)])

    def next_batch(self, batch_size: int) -> tuple[Tensor, Tensor]:
        """The next ``batch_size`` samples ``(x, y)`` of the shard's epoch sequence."""
        index = self.next_index(batch_size)
        return self._take(self.x, index), self._take(self.y, index)

    def next_index(self, batch_size: int) -> np.ndarray:
        """The positions in the shard of the next ``batch_size`` samples (the
        batch :meth:`next_batch` would return, drawn the same way): for a
        caller that gathers many shards' batches at once."""
        if type(batch_size) is not int or batch_size < 1:  # (the common case checked cheaply: a simulator hot path)
            batch_size = _check_int("batch_size", batch_size, 1)
        n = len(self.y)
        pos = self._pos
        end = pos + batch_size
        if end < n:
            index = self._perm[pos:end]
            self._pos = end
        else:
            take = n - pos
            full_epochs, self._pos = divmod(batch_size - take, n)
            perms = self._permutations(full_epochs + 1)
            pieces = [self._perm[pos:], perms[:-1].ravel(), perms[-1][: self._pos]]
            self._perm = perms[-1]
            index = np.concatenate(pieces)
        return index

    def _take(self, t: Tensor, index: np.ndarray) -> Tensor:
        """``t.index_select(0, index)``, by numpy's ``take`` where ``t`` has a
        numpy view (the same values, at about half the cost for small batches)."""
        views = self._views
        view = views.get(id(t))
        if view is None or view[0] is not t:
            try:
                array = t.numpy() if not t.requires_grad else None
            except (TypeError, RuntimeError):  # a dtype or device numpy does not have
                array = None
            view = views[id(t)] = (t, array)
            if len(views) > 2:  # x or y was replaced: keep the current two
                for key in [k for k, (u, _) in views.items() if u is not self.x and u is not self.y]:
                    del views[key]
        if view[1] is None:  # (on a GPU the positions go there: a copy to the device, never back)
            return t.index_select(0, torch.from_numpy(index).to(t.device))
        return take_rows(view[1], index, t.dtype)

    def to(self, device: torch.device | str) -> Shard:
        """The shard's samples moved to ``device`` (once: every batch is then
        drawn there), in place; the batch order is unchanged. Returns self."""
        self.x, self.y = self.x.to(device), self.y.to(device)
        self._views = {}
        return self


class Workload:
    """A learning problem: template model, train/test data, loss and metrics.

    The template's trainable parameters define the flat layout: the vector is
    the concatenation of the ``model.parameters()`` that require gradients, in
    order, each flattened. Frozen parameters keep the template's values. The
    workload takes ownership of ``model`` (it is converted to float32 and its
    trainable parameters are re-pointed into an internal flat buffer); do not
    use it elsewhere. Buffers (BatchNorm running statistics) are handled as
    the module docstring describes under "How buffers are synchronized".

    ``task`` (inferred from ``train_y`` when ``None``: int ``[n]`` ->
    ``"classification"``, int ``[n, T]`` -> ``"lm"``, floating ->
    ``"regression"``) fixes the targets' form, the default loss and the
    built-in metrics; see the module docstring. ``loss_fn(outputs, targets)``
    must return the mean loss over the batch. ``metrics`` adds user metrics
    ``{name: (fn, "max" | "min")}``, where ``fn(outputs, targets)`` returns
    the batch mean as a float; evaluation weights each test chunk by its
    number of samples.

    A workload is not thread-safe: ``gradient`` and ``evaluate_metrics`` share
    the template, so use one workload per thread.

    Attributes:
        name, description: as given.
        task: ``"classification"``, ``"regression"`` or ``"lm"``.
        metrics: metric name -> direction (``"max"`` or ``"min"``), in the
            order :meth:`evaluate_metrics` reports them.
        model: the template module.
        loss_fn: the loss in use.
        train_x, train_y, test_x, test_y: the data (inputs float32 when
            floating; labels and tokens int64, regression targets float32).
        n_classes: ``max label + 1`` (classification) or ``max token + 1``
            (lm) over both splits; ``None`` for regression.
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
        *,
        metrics: Mapping[str, tuple[MetricFn, Direction]] | None = None,
        task: Task | None = None,
    ) -> None:
        """Validate everything and bind the template's trainable parameters to a flat buffer."""
        if not isinstance(name, str) or not name:
            raise BadInput(f"name must be a non-empty string, got {name!r}")
        if not isinstance(description, str):
            raise BadInput(f"description must be a string, got {type(description).__name__}")
        if loss_fn is not None and not callable(loss_fn):
            raise BadInput(f"loss_fn must be callable, got {type(loss_fn).__name__}")
        if task is not None and task not in TASKS:
            raise BadInput(f"task must be one of {', '.join(TASKS)}, got {task!r}")
        self.name = name
        self.description = description
        self.task: str = _infer_task("train_y", train_y) if task is None else task
        self._metric_fns = _check_metrics(metrics, self.task)
        self.metrics: dict[str, Direction] = {
            **BUILTIN_METRICS[self.task],
            **{metric: direction for metric, (_, direction) in self._metric_fns.items()},
        }
        self.loss_fn: LossFn = _DEFAULT_LOSS[self.task] if loss_fn is None else loss_fn
        self.model = self._check_model(model)
        self.train_x = _check_inputs("train_x", train_x)
        self.train_y = _check_targets("train_y", train_y, len(self.train_x), self.task)
        self.test_x = _check_inputs("test_x", test_x)
        self.test_y = _check_targets("test_y", test_y, len(self.test_x), self.task)
        if self.train_x.shape[1:] != self.test_x.shape[1:]:
            raise BadInput(
                f"test_x samples have shape {tuple(self.test_x.shape[1:])}, "
                f"train_x samples {tuple(self.train_x.shape[1:])}: they must match"
            )
        if self.train_y.shape[1:] != self.test_y.shape[1:]:
            raise BadInput(
                f"test_y targets have shape {tuple(self.test_y.shape[1:])}, "
                f"train_y targets {tuple(self.train_y.shape[1:])}: they must match"
            )
        self.n_classes: int | None = None
        if self.task != "regression":
            self.n_classes = int(max(self.train_y.max(), self.test_y.max())) + 1
        # Precise-BN subset: random (not the first samples) in case the user's split is sorted.
        n_stats = min(len(self.train_x), _PRECISE_BN_SAMPLES)
        self._stats_index = torch.from_numpy(np.random.default_rng(0).permutation(len(self.train_x))[:n_stats])

        self._bind_flat()
        self._training = True
        self.model.train()
        self._check_forward()

    def _bind_flat(self) -> None:
        """Move the trainable parameters (values and ``.grad``) into flat buffers; list the rest."""
        self._params = [p for p in self.model.parameters() if p.requires_grad]
        self._frozen = [p for p in self.model.parameters() if not p.requires_grad]
        self._buffers = list(self.model.buffers())
        self._norms = [m for m in self.model.modules() if isinstance(m, _NormBase) and m.track_running_stats]
        self._n_params = sum(p.numel() for p in self._params)
        self._flat = torch.cat([p.detach().reshape(-1) for p in self._params])
        self._flat_grad = torch.zeros_like(self._flat)
        self._batched_grad: Callable[[Tensor, Tensor, Tensor], tuple[Tensor, Tensor]] | None = None
        self._batch_blocker: str | None = self._find_batch_blocker()
        sizes = [p.numel() for p in self._params]
        for p, value, grad in zip(self._params, self._flat.split(sizes), self._flat_grad.split(sizes), strict=True):
            p.data = value.view(p.shape)
            p.grad = grad.view(p.shape)

    def __getstate__(self) -> dict[str, object]:
        """Pickle (and deepcopy) without the flat buffers; they are rebuilt on load."""
        state = self.__dict__.copy()
        for key in ("_params", "_flat", "_flat_grad", "_frozen", "_buffers", "_norms", "_batched_grad"):
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
        if not any(p.requires_grad for p in model.parameters()):
            raise BadInput(f"model {type(model).__name__} has no trainable parameters: all are frozen")
        return model.float()

    def _restoring_buffers(self, run: Callable[[], _T]) -> _T:
        """``run()``, then put every buffer back as it was (no running-statistics drift)."""
        if not self._buffers:
            return run()
        saved = [b.clone() for b in self._buffers]
        try:
            return run()
        finally:
            with torch.no_grad():
                for buffer, value in zip(self._buffers, saved, strict=True):
                    buffer.copy_(value)

    def _check_forward(self) -> None:
        """Run the template on two training samples to catch shape errors early."""
        x, y = self.train_x[:2], self.train_y[:2]
        try:
            with torch.no_grad():
                out = self._restoring_buffers(lambda: self.model(x))
        except Exception as exc:  # the user's module: report it as bad input
            raise BadInput(f"model fails on train_x[:2]: {type(exc).__name__}: {exc}") from exc
        self._check_outputs(out, y)
        try:
            with torch.no_grad():
                loss = self.loss_fn(out, y)
        except Exception as exc:  # the user's loss: report it as bad input
            raise BadInput(f"loss_fn fails on (outputs, train_y[:2]): {type(exc).__name__}: {exc}") from exc
        if not isinstance(loss, Tensor) or loss.ndim != 0:
            raise BadInput("loss_fn must return a scalar tensor (the mean loss over the batch)")
        for metric, (fn, _) in self._metric_fns.items():
            try:
                float(fn(out, y))
            except Exception as exc:  # the user's metric: report it as bad input
                raise BadInput(f"metrics[{metric!r}] fails on train_x[:2]: {type(exc).__name__}: {exc}") from exc

    def _check_outputs(self, out: object, y: Tensor) -> None:
        """Check the model's outputs on ``train_x[:2]`` against the task's targets ``y``."""
        shape = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
        classes = self.n_classes or 0
        if self.task == "classification":
            if not isinstance(out, Tensor) or out.ndim != 2 or len(out) != len(y):
                raise BadInput(f"model must map a batch of n samples to [n, classes] outputs, got {shape}")
            if out.shape[1] < classes:
                raise BadInput(f"model has {out.shape[1]} outputs but the labels have {self.n_classes} classes")
        elif self.task == "lm":
            if not isinstance(out, Tensor) or out.ndim != 3 or out.shape[:2] != y.shape:
                raise BadInput(
                    f"model must map tokens [n, T] to [n, T, vocab] outputs, got {shape} for {tuple(y.shape)}"
                )
            if out.shape[2] < classes:
                raise BadInput(
                    f"model has {out.shape[2]} outputs per token but the targets hold {self.n_classes} tokens"
                )
        else:
            if not isinstance(out, Tensor) or out.ndim < 1 or len(out) != len(y):
                raise BadInput(f"model must map a batch of n samples to [n, ...] outputs, got {shape}")
            if self.loss_fn is F.mse_loss and out.shape != y.shape:
                raise BadInput(
                    f"model outputs {shape} for train_y[:2] of shape {tuple(y.shape)}: the default regression "
                    "loss (mean squared error) needs equal shapes (class labels must be integers)"
                )

    @property
    def device(self) -> torch.device:
        """Where the template computes (:meth:`to`); the data splits stay on the CPU."""
        return self._flat.device

    def to(self, device: torch.device | str) -> Workload:
        """Move the template (trainable and frozen parameters, buffers, the
        flat buffers they live in) to ``device``, in place: :meth:`gradient`
        then takes ``params`` and batches there (a worker of ``hetsync run
        --device cuda`` moves its shard with :meth:`Shard.to`). The splits
        stay on the CPU (shards are cut there), so evaluation stays a CPU
        workload's job. Returns self."""
        self.model.to(device)
        self._bind_flat()
        return self

    @property
    def n_params(self) -> int:
        """Length of the flat parameter vector (trainable parameters only)."""
        return self._n_params

    @property
    def model_nbytes(self) -> int:
        """Size of the flat float32 parameter vector in bytes."""
        return self._n_params * 4

    @property
    def param_sizes(self) -> tuple[int, ...]:
        """Values of each trainable parameter tensor, in the flat vector's order (they add up to ``n_params``)."""
        return tuple(p.numel() for p in self._params)

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
        construction-time values; frozen parameters and buffers keep their
        values whatever the resets do.
        """
        seed = _check_int("seed", seed, 0)
        kept = [t.clone() for t in (*self._frozen, *self._buffers)]
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(seed)
            for module in self.model.modules():
                reset = getattr(module, "reset_parameters", None)
                if callable(reset):
                    reset()
            for t, value in zip((*self._frozen, *self._buffers), kept, strict=True):
                t.copy_(value)
        return self._flat.clone()

    def make_shards(self, n_workers: int, seed: int, label_skew: float = 0.0) -> list[Shard]:
        """Split the training set into ``n_workers`` shards.

        Every sample gets a sort key: with probability ``label_skew`` its label
        plus U[0, 1) noise, otherwise a uniform key in ``[0, n_classes)``. The
        samples, sorted by key, are cut into near-equal contiguous parts. So
        ``label_skew=0`` is an iid split (a random permutation) and
        ``label_skew=1`` sorts by label (each worker sees few classes); only
        classification has labels to skew by. With more workers than samples,
        samples are reused cyclically so every shard holds at least one.
        Shard ``i`` samples batches with seed ``SeedSequence(seed, spawn_key=(i,))``.
        """
        n_workers = _check_int("n_workers", n_workers, 1)
        seed = _check_int("seed", seed, 0)
        if isinstance(label_skew, bool) or not isinstance(label_skew, numbers.Real):
            raise BadInput(f"label_skew must be a number in [0, 1], got {label_skew!r}")
        label_skew = float(label_skew)
        if not (math.isfinite(label_skew) and 0.0 <= label_skew <= 1.0):
            raise BadInput(f"label_skew must be in [0, 1], got {label_skew}")
        if label_skew > 0 and self.task != "classification":
            raise BadInput(f"label_skew needs class labels; {self.name} is a {self.task} task: use label_skew=0")

        n = len(self.train_y)
        rng = np.random.default_rng(np.random.SeedSequence(seed))
        by_label = rng.random(n) < label_skew
        label_keys = rng.random(n)
        if self.task == "classification":
            label_keys = self.train_y.numpy() + label_keys
        random_keys = rng.random(n) * (self.n_classes or 1)
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
        Buffers are left as they were (see "How buffers are synchronized").
        """
        grad, loss = self.gradient_on_device(params, x, y)
        return grad, loss.item()

    def gradient_on_device(self, params: Tensor, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        """:meth:`gradient` with the loss left a one-value tensor where the
        model lives: nothing is read back to the host (on a GPU, ``.item()``
        would copy and wait every step). ``params``, ``x``, ``y`` on
        :attr:`device` (:meth:`to`)."""
        self._load(params)
        self._set_training(True)
        self._flat_grad.zero_()

        def forward_backward() -> Tensor:
            with torch.enable_grad():  # the caller may be inside torch.no_grad()
                loss = self.loss_fn(self.model(x), y)
                loss.backward()  # accumulates into self._flat_grad: the parameters' .grad views
            return loss

        loss = self._restoring_buffers(forward_backward)
        return self._flat_grad.clone(), loss.detach()

    # ------------------------------------------------------------ batched
    def _find_batch_blocker(self) -> str | None:
        """Why :meth:`gradients` cannot run the template under ``vmap``, or None if it can.

        BatchNorm-like layers that track running statistics update them in
        place from each batch, which ``vmap`` cannot do per model; dropout
        draws random masks that ``vmap`` refuses by default and that would
        not match :meth:`gradient`'s draws anyway.
        """
        if self._norms:
            kinds = sorted({type(m).__name__ for m in self._norms})
            return f"{', '.join(kinds)} with running statistics (vmap cannot update them per model)"
        dropouts = sorted({type(m).__name__ for m in self.model.modules() if isinstance(m, _DropoutNd) and m.p > 0})
        if dropouts:
            return f"{', '.join(dropouts)} (random masks under vmap would not match the one-at-a-time path)"
        return None

    @property
    def batch_blocker(self) -> str | None:
        """Why :meth:`gradients` falls back to one :meth:`gradient` call per model, or None.

        Set when the model has layers ``vmap`` cannot batch (see
        :meth:`_find_batch_blocker`), after a batched call failed (the error
        is kept here), or after one ran an op that has no batching rule, which
        makes ``vmap`` loop and lose to one call per model (CPU flash
        attention, as in ``tinylm``). Every later call goes one at a time.
        """
        return self._batch_blocker

    def _make_batched_grad(self) -> Callable[[Tensor, Tensor, Tensor], tuple[Tensor, Tensor]]:
        """``vmap(grad_and_value(loss))`` over flat parameters: ``[k, n] x [k, b, ...] x [k, b, ...]``."""
        names = [name for name, p in self.model.named_parameters() if p.requires_grad]
        shapes = [p.shape for p in self._params]
        sizes = [p.numel() for p in self._params]
        model, loss_fn = self.model, self.loss_fn

        def loss(flat: Tensor, x: Tensor, y: Tensor) -> Tensor:
            params = {name: t.view(shape) for name, t, shape in zip(names, flat.split(sizes), shapes, strict=True)}
            return loss_fn(functional_call(model, params, (x,)), y)

        return vmap(grad_and_value(loss))  # type: ignore[no-any-return]

    def gradients(self, params: Tensor, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        """Gradients and losses of ``k`` models at once: row ``i`` is :meth:`gradient` ``(params[i], x[i], y[i])``.

        ``params`` is ``[k, n_params]``; ``x`` and ``y`` are ``k`` batches of
        equal shape stacked, ``[k, b, ...]``. Returns the flat gradients
        ``[k, n_params]`` (a new tensor) and the losses ``[k]``. One
        ``torch.func`` call (``vmap`` of ``grad`` of ``functional_call``)
        does the ``k`` forward and backward passes together, which costs far
        less than ``k`` calls for small models; the results equal
        :meth:`gradient`'s up to float rounding. Models ``vmap`` cannot run
        (:attr:`batch_blocker`) take one :meth:`gradient` call per row.
        """
        if not isinstance(params, Tensor) or params.ndim != 2 or params.shape[1] != self._n_params:
            shape = tuple(params.shape) if isinstance(params, Tensor) else type(params).__name__
            raise BadInput(f"params must be [k, {self._n_params}] for {self.name}, got {shape}")
        if params.dtype != torch.float32:
            raise BadInput(f"params must be float32, got {params.dtype}")
        k = len(params)
        if not isinstance(x, Tensor) or not isinstance(y, Tensor) or len(x) != k or len(y) != k:
            raise BadInput(f"x and y must each stack {k} batches, one per row of params")
        if self._batch_blocker is None:
            self._set_training(True)
            if self._batched_grad is None:
                self._batched_grad = self._make_batched_grad()
            try:
                with torch.enable_grad(), warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    grads, losses = self._restoring_buffers(lambda: self._batched_grad(params, x, y))  # type: ignore[misc]
            except Exception as exc:  # the user's model or loss under vmap: go one at a time from now on
                self._batch_blocker = f"vmap failed: {type(exc).__name__}: {exc}"
            else:
                self._batch_blocker = _slow_vmap(caught)
                if self._batch_blocker is None:
                    return grads, losses.detach()
                # results are right but slower than one call per model; those
                # calls give them, now and from now on, the same every run
        rows = [self.gradient(params[i], x[i], y[i]) for i in range(k)]
        return torch.stack([g for g, _ in rows]), torch.tensor([loss for _, loss in rows])

    def _recompute_running_stats(self) -> None:
        """Precise BN: running statistics of the loaded parameters over a fixed training subset."""
        if not self._norms:
            return
        momenta = [m.momentum for m in self._norms]
        self.model.eval()  # dropout and friends off: the statistics are deterministic
        self._training = False
        try:
            for m in self._norms:
                m.reset_running_stats()
                m.momentum = None  # cumulative average over the chunks
                m.train()
            n_chunks = -(-len(self._stats_index) // _PRECISE_BN_CHUNK)
            with torch.no_grad():
                for index in self._stats_index.tensor_split(n_chunks):  # near-equal: never one lone sample
                    self.model(self.train_x.index_select(0, index))
        finally:
            for m, momentum in zip(self._norms, momenta, strict=True):
                m.momentum = momentum
                m.eval()

    def evaluate_metrics(self, params: Tensor) -> dict[str, float]:
        """Every metric of :attr:`metrics`, in order, for ``params`` on the test split."""
        self._load(params)
        self._recompute_running_stats()
        self._set_training(False)
        chunk = max(1, _EVAL_CHUNK // max(1, self.test_y[0].numel()))
        separate_ce = self.task == "lm" and self.loss_fn is not token_cross_entropy
        correct = 0
        loss_sum = 0.0
        ce_sum = 0.0
        custom_sums = dict.fromkeys(self._metric_fns, 0.0)
        with torch.no_grad():
            for start in range(0, len(self.test_y), chunk):
                x = self.test_x[start : start + chunk]
                y = self.test_y[start : start + chunk]
                out = self.model(x)
                loss_sum += self.loss_fn(out, y).item() * len(y)
                if separate_ce:
                    ce_sum += token_cross_entropy(out, y).item() * len(y)
                if self.task != "regression":
                    correct += int((out.argmax(dim=-1) == y).sum())
                for metric, (fn, _) in self._metric_fns.items():
                    custom_sums[metric] += float(fn(out, y)) * len(y)
        n = len(self.test_y)
        loss = loss_sum / n
        values = {"loss": loss}
        if self.task == "classification":
            values["accuracy"] = correct / n
        elif self.task == "lm":
            values["accuracy"] = correct / self.test_y.numel()
            values["perplexity"] = _exp(ce_sum / n if separate_ce else loss)
        values.update((metric, total / n) for metric, total in custom_sums.items())
        return {metric: values[metric] for metric in self.metrics}

    def evaluate(self, params: Tensor) -> tuple[float, float]:
        """``(accuracy, mean loss)`` of ``params`` on the test split (see :meth:`evaluate_metrics`)."""
        if "accuracy" not in self.metrics:
            raise BadInput(f"workload {self.name} ({self.task}) reports no accuracy; use evaluate_metrics")
        values = self.evaluate_metrics(params)
        return values["accuracy"], values["loss"]

    def module_with(self, params: Tensor) -> nn.Module:
        """A standalone copy of the template holding ``params`` (for code that needs a module, e.g. DDP).

        Frozen parameters and buffers are copied from the template. The copy's
        parameters that require gradients, in ``parameters()`` order, are the
        flat layout: ``parameters_to_vector(p for p in m.parameters() if
        p.requires_grad)`` gives the flat vector back.
        """
        self._load(params)
        module = copy.deepcopy(self.model)
        for p in module.parameters():
            p.grad = None
            p.data = p.data.clone()  # own storage, not a view into the workload's flat buffer
        return module

    def state_dict_with(self, params: Tensor | None) -> dict[str, Tensor] | None:
        """The template holding ``params`` as a ``state_dict`` (parameters,
        frozen parameters and buffers by name): what ``model-<policy>.pt``
        holds; it loads with ``weights_only=True`` into the same module."""
        if params is None:
            return None
        return {k: v.detach().clone() for k, v in self.module_with(params).state_dict().items()}

    def __repr__(self) -> str:
        return f"Workload({self.name!r}, n_params={self._n_params}, train={len(self.train_y)}, test={len(self.test_y)})"


def _materialise(field: str, data: object) -> tuple[Tensor, Tensor]:
    """``(x, y)`` tensors from a pair of tensors or a Dataset of ``(x, y)`` items (stacked)."""
    if isinstance(data, Dataset):
        try:
            items = [data[i] for i in range(len(data))]  # type: ignore[arg-type]
        except TypeError:  # no len(): an IterableDataset
            items = list(data)  # type: ignore[call-overload]
        if not items:
            raise BadInput(f"{field} must hold at least one sample, got an empty {type(data).__name__}")
        columns: list[list[Tensor]] = [[], []]
        for i, item in enumerate(items):
            if not isinstance(item, (tuple, list)) or len(item) != 2:
                raise BadInput(f"{field}[{i}] must be an (x, y) pair, got {type(item).__name__}")
            for column, part, value in zip(columns, "xy", item, strict=True):
                try:
                    column.append(torch.as_tensor(value))
                except Exception as exc:  # anything torch cannot turn into a tensor
                    raise BadInput(f"{field}[{i}]: {part} is not tensor-like ({type(value).__name__}): {exc}") from exc
                if column[-1].shape != column[0].shape:
                    raise BadInput(
                        f"{field}[{i}]: {part} has shape {tuple(column[-1].shape)} but {field}[0] has "
                        f"{tuple(column[0].shape)}; every item must have the same shapes"
                    )
        return torch.stack(columns[0]), torch.stack(columns[1])
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        raise BadInput(
            f"{field} must be a pair (x, y) of tensors or a Dataset of (x, y) items, got {type(data).__name__}"
        )
    return data[0], data[1]


def from_module(
    name: str,
    model: nn.Module,
    train: tuple[Tensor, Tensor] | Dataset,
    test: tuple[Tensor, Tensor] | Dataset,
    loss_fn: LossFn | None = None,
    description: str = "",
    metrics: Mapping[str, tuple[MetricFn, Direction]] | None = None,
    task: Task | None = None,
) -> Workload:
    """Wrap any ``torch.nn.Module`` and a dataset as a :class:`Workload`.

    Args:
        name: a short name for reports.
        model: maps a batch of inputs ``[n, ...]`` to outputs: class scores
            ``[n, classes]`` (classification), token scores ``[n, T, vocab]``
            (lm), or anything ``loss_fn`` takes (regression). It needs at
            least one trainable parameter; frozen ones stay as they are and
            are not part of the flat vector. Buffers such as BatchNorm
            running statistics are allowed: they never travel between workers
            and are recomputed for every evaluation (see the module
            docstring). The workload takes ownership of it (converted to
            float32).
        train: the training data, split into worker shards by
            :meth:`Workload.make_shards`: a pair ``(x, y)`` of tensors of the
            same length, or a ``torch.utils.data.Dataset`` whose items are
            ``(x, y)`` pairs. A Dataset is read once, here, and its items are
            stacked into two tensors, so it must fit in memory.
        test: the held-out split used by :meth:`Workload.evaluate_metrics`,
            in the same forms.
        loss_fn: ``loss_fn(outputs, targets)`` returning the batch-mean loss
            as a scalar tensor; default cross-entropy (over every token for
            lm, :func:`token_cross_entropy`) or mean squared error
            (regression).
        description: free text for reports.
        metrics: extra metrics ``{name: (fn, "max" | "min")}`` reported after
            the built-in ones; ``fn(outputs, targets)`` returns the batch
            mean as a float (evaluation weights chunks by their size).
        task: ``"classification"``, ``"regression"`` or ``"lm"``; default
            from the training targets: integer ``[n]`` -> classification,
            integer ``[n, T]`` -> lm, floating -> regression (so integer
            targets need ``task="regression"`` to be regressed).

    Floating inputs are converted to float32; labels and tokens to int64,
    regression targets to float32. A short forward pass on two training
    samples checks that model, data, loss and metrics fit together. Raises
    :class:`hetsync.errors.BadInput` naming what is wrong.

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
        wl.evaluate_metrics(params)  # {"accuracy": ..., "loss": ...}
    """
    train_x, train_y = _materialise("train", train)
    test_x, test_y = _materialise("test", test)
    return Workload(
        name,
        model,
        train_x=train_x,
        train_y=train_y,
        test_x=test_x,
        test_y=test_y,
        loss_fn=loss_fn,
        description=description,
        metrics=metrics,
        task=task,
    )
