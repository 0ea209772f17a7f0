"""hetsync: synchronization policies for training on heterogeneous clusters.

The policy core (``hetsync.policies``, ``hetsync.algos``) is sans-IO and
imports only the standard library and numpy; the simulator (``hetsync.sim``)
runs it in virtual time with real SGD math; the runtime (``hetsync.runtime``)
runs it on real processes over torch.distributed.

The public surface:

- :func:`hetsync.init` — your own training loop under any policy, on real
  processes (:mod:`hetsync.loop`)::

      sync = hetsync.init("wbsp", scenario="hetero-4")
      opt = sync.optimizer(model, torch.optim.AdamW(model.parameters(), lr=3e-4))

- :func:`hetsync.compare`, :func:`hetsync.simulate` — the simulator's
  comparisons from Python, writing what the commands write (:mod:`hetsync.api`).
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["compare", "init", "simulate", "__version__"]

_LAZY = {"init": "hetsync.loop", "compare": "hetsync.api", "simulate": "hetsync.api"}


def __getattr__(name: str) -> Any:
    # imported on first use: `import hetsync` (and the command line) stays free of torch
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'hetsync' has no attribute {name!r}")
