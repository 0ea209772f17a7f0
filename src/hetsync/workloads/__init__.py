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

    A workload of your own is named ``module:function`` (a module on the
    path or in the current folder) or ``path/to/file.py:function``: the
    function, called with ``args``, returns a :class:`Workload` (e.g.
    :func:`from_module` over your model and data) — so a scenario's
    ``workload:`` runs your model in the simulator and on real processes.

    Raises :class:`BadInput` for an unknown name or argument (listing the
    known ones) or a bad argument value, always naming the workload.
    """
    if isinstance(name, str) and ":" in name:
        return own_workload(name, args)
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
    except MemoryError as exc:
        raise BadInput(f"workload {name!r} with {args}: its model does not fit in this machine's memory") from exc
    except RuntimeError as exc:  # torch's allocator says so in a RuntimeError
        if "allocate" not in str(exc):
            raise
        first = str(exc).splitlines()[0][:160]
        raise BadInput(f"workload {name!r} with {args}: its model does not fit in memory ({first})") from exc


def workload_function(ref: str) -> Callable[..., Any]:
    """The function a ``module:function`` or ``path/to/file.py:function``
    reference names (BadInput saying what could not be found). A file's
    folder goes on ``sys.path`` (its own imports work) and the module is
    imported once per process under its file's name."""
    import hashlib
    import importlib
    import importlib.util
    import os
    import sys
    from pathlib import Path

    where, _, attr = ref.rpartition(":")
    if not where or not attr:
        raise BadInput(f"workload {ref!r}: name your own as module:function or path/to/file.py:function")
    if where.endswith(".py"):
        path = Path(where).expanduser().resolve()
        if not path.is_file():
            raise BadInput(f"workload {ref!r}: no such file {where!r}")
        key = "_hetsync_workload_" + hashlib.sha1(str(path).encode()).hexdigest()[:12]  # (one per file)
        module = sys.modules.get(key)
        if module is None:
            if str(path.parent) not in sys.path:
                sys.path.insert(0, str(path.parent))
            spec = importlib.util.spec_from_file_location(key, path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[key] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[key]
                raise
    else:
        if os.getcwd() not in sys.path and "" not in sys.path:
            sys.path.append(os.getcwd())  # (python -m puts the current folder on the path; a console script does not)
        try:
            module = importlib.import_module(where)
        except ImportError as e:
            raise BadInput(f"workload {ref!r}: cannot import module {where!r} ({e})") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise BadInput(f"workload {ref!r}: {where} has no function {attr!r}")
    return fn  # type: ignore[no-any-return]


def own_workload(ref: str, args: dict[str, Any]) -> Workload:
    """Build a workload of your own (``module:function``, see :func:`make_workload`)."""
    fn = workload_function(ref)
    try:
        inspect.signature(fn).bind(**args)
    except TypeError as e:
        raise BadInput(f"workload {ref!r}: cannot take workload_args {sorted(args)} ({e})") from None
    except ValueError:  # (no signature to read: let the call say)
        pass
    built = fn(**args)
    if not isinstance(built, Workload):
        raise BadInput(
            f"workload {ref!r} returned {type(built).__name__}, not a hetsync Workload "
            "(return hetsync.workloads.from_module(name, model, train=..., test=...))"
        )
    return built
