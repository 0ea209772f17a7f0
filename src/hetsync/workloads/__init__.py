"""Workloads: the real learning problems the drivers train.

A :class:`Workload` is a model (held as one flat float32 parameter vector),
its training data (split into per-worker :class:`Shard` s), a loss and a test
evaluation. Built-in workloads are listed in :data:`WORKLOADS` and built with
:func:`make_workload`; wrap your own module and data with :func:`from_module`.

Example::

    from hetsync.workloads import make_workload

    wl = make_workload("digits-mlp", hidden=32)
    params = wl.init_params(seed=0)
    shard = wl.make_shards(n_workers=8, seed=0, label_skew=0.5)[0]
    grad, loss = wl.gradient(params, *shard.next_batch(32))
    wl.metrics                   # {"accuracy": "max", "loss": "min"}
    wl.evaluate_metrics(params)  # {"accuracy": 0.1..., "loss": 2.3...}
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hetsync.errors import BadInput
from hetsync.workloads import builtin
from hetsync.workloads.base import BUILTIN_METRICS, Shard, Workload, from_module, token_cross_entropy

__all__ = [
    "BUILTIN_METRICS",
    "WORKLOADS",
    "Shard",
    "Workload",
    "WorkloadSpec",
    "from_module",
    "make_workload",
    "token_cross_entropy",
]


@dataclass(frozen=True)
class WorkloadSpec:
    """A registered workload: its name, one-line summary, arguments with defaults, builder."""

    name: str
    summary: str
    defaults: dict[str, Any]
    build: Callable[..., Workload]


def _spec(name: str, build: Callable[..., Workload]) -> WorkloadSpec:
    """Register ``build``: defaults from its signature, summary from its docstring."""
    defaults = {arg: p.default for arg, p in inspect.signature(build).parameters.items()}
    summary = (build.__doc__ or "").strip().splitlines()[0]
    return WorkloadSpec(name, summary, defaults, build)


WORKLOADS: dict[str, WorkloadSpec] = {
    spec.name: spec
    for spec in (
        _spec("digits-logreg", builtin.digits_logreg),
        _spec("digits-mlp", builtin.digits_mlp),
        _spec("digits-cnn", builtin.digits_cnn),
        _spec("synthetic", builtin.synthetic),
        _spec("signal1d-mlp", builtin.signal1d_mlp),
        _spec("signal1d-cnn", builtin.signal1d_cnn),
        _spec("tinylm", builtin.tinylm),
    )
}


def make_workload(name: str, **args: Any) -> Workload:
    """Build the registered workload ``name``; ``args`` override its defaults.

    Raises :class:`BadInput` for an unknown name or argument (listing the
    known ones) or a bad argument value, always naming the workload.
    """
    spec = WORKLOADS.get(name) if isinstance(name, str) else None
    if spec is None:
        raise BadInput(f"unknown workload {name!r}; known workloads: {', '.join(WORKLOADS)}")
    unknown = sorted(set(args) - set(spec.defaults))
    if unknown:
        allowed = ", ".join(spec.defaults) or "none"
        raise BadInput(f"workload {name!r} has no argument {', '.join(unknown)}; allowed: {allowed}")
    try:
        return spec.build(**{**spec.defaults, **args})
    except BadInput as exc:
        raise BadInput(f"workload {name!r}: {exc}") from exc
