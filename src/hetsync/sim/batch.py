"""Batched gradient math for the simulator: steps in flight evaluated together.

A simulated step's gradient depends only on the worker's model when the step
starts and on its mini-batch, and nobody looks at it before the step ends.
Hundreds of workers are mid-step at any moment, so the simulator does not
compute a gradient when a step starts: it hands the model and the batch to a
:class:`GradientBatcher` and asks for the gradient when the step ends. The
first such request evaluates every step owed so far in one
:meth:`hetsync.workloads.Workload.gradients` call per group of equal batch
shapes (``vmap`` of ``grad``, at most ``max_group`` models at a time to bound
memory); later requests find their gradient ready.

Models are held by reference (the simulator never modifies a model tensor in
place), the batch is drawn when the step starts (so each shard's batch
sequence is the one-at-a-time path's), and a group's order is the order its
steps started in, so the same run batches the same way every time.

Two copies are saved where they can be (the results are bit for bit the
same): a step submitted as rows of the workload's training split
(:meth:`GradientBatcher.submit_rows`, what the simulator does) has its
samples gathered for the whole group in one ``take``, straight into the
stacked batch; and a group whose steps all start from the same model (every
worker of a BSP round) passes that model expanded, not ``k`` copies of it.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from hetsync.errors import BadInput
from hetsync.workloads import Workload
from hetsync.workloads.base import take_rows

MAX_GROUP = 512
"""Models evaluated in one vmapped call: bounds the stacked parameters and activations."""


class GradientBatcher:
    """Gradients owed to steps in flight, keyed by worker (one step per worker at a time)."""

    def __init__(self, workload: Workload, *, max_group: int = MAX_GROUP) -> None:
        if isinstance(max_group, bool) or not isinstance(max_group, int) or max_group < 1:
            raise BadInput(f"max_group must be an integer >= 1, got {max_group!r}")
        self.workload = workload
        self.max_group = max_group
        # the model, and the batch (x, y) or the rows of the training split it is made of
        self._owed: dict[int, tuple[Tensor, Tensor, Tensor] | tuple[Tensor, np.ndarray]] = {}
        self._train: tuple[np.ndarray | None, np.ndarray | None] | None = None  # numpy views of the split
        self._ready: dict[int, Tensor] = {}
        self.calls = 0  # vmapped calls made (a workload that cannot batch makes none)
        self.evaluated = 0  # gradients computed

    def __len__(self) -> int:
        """Gradients owed and not yet computed."""
        return len(self._owed)

    def submit(self, key: int, params: Tensor, x: Tensor, y: Tensor) -> None:
        """Owe the gradient of the loss on ``(x, y)`` at ``params`` to ``key``."""
        if key in self._owed or key in self._ready:
            raise ValueError(f"worker {key} already has a gradient in flight")
        self._owed[key] = (params, x, y)

    def submit_rows(self, key: int, params: Tensor, rows: np.ndarray) -> None:
        """As :meth:`submit`, for the batch of the training split's ``rows``
        (``workload.train_x[rows]``, ``workload.train_y[rows]``; a shard's
        samples are rows of it, :attr:`hetsync.workloads.Shard.indices`)."""
        if key in self._owed or key in self._ready:
            raise ValueError(f"worker {key} already has a gradient in flight")
        self._owed[key] = (params, rows)

    def _gather(self, rows: np.ndarray) -> tuple[Tensor, Tensor]:
        """The training split's ``rows``, as ``index_select`` gives them."""
        wl = self.workload
        if self._train is None:
            self._train = (_numpy_view(wl.train_x), _numpy_view(wl.train_y))
        out = []
        for t, view in zip((wl.train_x, wl.train_y), self._train, strict=True):
            if view is None:
                out.append(t.index_select(0, torch.from_numpy(rows)))
            else:
                out.append(take_rows(view, rows, t.dtype))
        return out[0], out[1]

    def discard(self, key: int) -> None:
        """Forget ``key``'s gradient, owed or ready (its step will never end: its worker left)."""
        self._owed.pop(key, None)
        self._ready.pop(key, None)

    def take(self, key: int) -> Tensor:
        """``key``'s gradient, computing every owed one first if it is not ready."""
        if key not in self._ready:
            if key not in self._owed:
                raise KeyError(f"worker {key} has no gradient in flight")
            self.flush()
        return self._ready.pop(key)

    def flush(self) -> None:
        """Compute every owed gradient, grouped by batch shape, ``max_group`` at a time."""
        groups: dict[tuple[object, ...], list[int]] = {}
        for key, item in self._owed.items():
            if len(item) == 2:  # rows of the training split: one shape per batch size
                groups.setdefault((len(item[1]),), []).append(key)
            else:
                _, x, y = item
                groups.setdefault((x.shape, x.dtype, y.shape, y.dtype), []).append(key)
        owed, self._owed = self._owed, {}
        for keys in groups.values():
            for start in range(0, len(keys), self.max_group):
                chunk = keys[start : start + self.max_group]
                if self.workload.batch_blocker is not None:  # found out on an earlier call: no stacking
                    for k in chunk:
                        item = owed[k]
                        x, y = self._gather(item[1]) if len(item) == 2 else item[1:]  # type: ignore[misc]
                        self._ready[k] = self.workload.gradient(item[0], x, y)[0]
                    self.evaluated += len(chunk)
                    continue
                first = owed[chunk[0]][0]
                if all(owed[k][0] is first for k in chunk):  # one model (a BSP round): no copies
                    params = first.expand(len(chunk), -1)
                else:
                    params = torch.stack([owed[k][0] for k in chunk])
                if len(owed[chunk[0]]) == 2:
                    b = len(owed[chunk[0]][1])
                    x, y = self._gather(np.concatenate([owed[k][1] for k in chunk]))
                    x = x.view(len(chunk), b, *x.shape[1:])
                    y = y.view(len(chunk), b, *y.shape[1:])
                else:
                    x = torch.stack([owed[k][1] for k in chunk])
                    y = torch.stack([owed[k][2] for k in chunk])  # type: ignore[misc]
                grads, _ = self.workload.gradients(params, x, y)
                # own storage per row: a gradient held long (an unapplied push)
                # must not keep its whole chunk alive
                for k, g in zip(chunk, grads, strict=True):
                    self._ready[k] = g.clone()
                if self.workload.batch_blocker is None:  # else it went one model at a time
                    self.calls += 1
                self.evaluated += len(chunk)


def _numpy_view(t: Tensor) -> np.ndarray | None:
    """``t``'s numpy view, or None where numpy has no such array (a dtype it lacks)."""
    try:
        return None if t.requires_grad else t.numpy()
    except (TypeError, RuntimeError):
        return None
