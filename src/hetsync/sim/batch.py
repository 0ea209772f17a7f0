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
"""

from __future__ import annotations

import torch
from torch import Tensor

from hetsync.errors import BadInput
from hetsync.workloads import Workload

MAX_GROUP = 512
"""Models evaluated in one vmapped call: bounds the stacked parameters and activations."""


class GradientBatcher:
    """Gradients owed to steps in flight, keyed by worker (one step per worker at a time)."""

    def __init__(self, workload: Workload, *, max_group: int = MAX_GROUP) -> None:
        if isinstance(max_group, bool) or not isinstance(max_group, int) or max_group < 1:
            raise BadInput(f"max_group must be an integer >= 1, got {max_group!r}")
        self.workload = workload
        self.max_group = max_group
        self._owed: dict[int, tuple[Tensor, Tensor, Tensor]] = {}
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
        for key, (_, x, y) in self._owed.items():
            groups.setdefault((x.shape, x.dtype, y.shape, y.dtype), []).append(key)
        owed, self._owed = self._owed, {}
        for keys in groups.values():
            for start in range(0, len(keys), self.max_group):
                chunk = keys[start : start + self.max_group]
                if self.workload.batch_blocker is not None:  # found out on an earlier call: no stacking
                    for k in chunk:
                        self._ready[k] = self.workload.gradient(*owed[k])[0]
                    self.evaluated += len(chunk)
                    continue
                params = torch.stack([owed[k][0] for k in chunk])
                x = torch.stack([owed[k][1] for k in chunk])
                y = torch.stack([owed[k][2] for k in chunk])
                grads, _ = self.workload.gradients(params, x, y)
                # own storage per row: a gradient held long (an unapplied push)
                # must not keep its whole chunk alive
                for k, g in zip(chunk, grads, strict=True):
                    self._ready[k] = g.clone()
                if self.workload.batch_blocker is None:  # else it went one model at a time
                    self.calls += 1
                self.evaluated += len(chunk)
