"""Fresh processes without a fresh ``import torch`` each: a
:mod:`multiprocessing` context whose processes are forked from a server that
imported torch, the simulator and the built-in workloads once.

A bench that measures each run in a process of its own (its peak memory,
its torch state) and ``advise``'s pool of simulations used the ``spawn``
context: every process a new interpreter importing torch, dynamo and
scikit-learn again, 4-5 s of CPU apiece. The forkserver is started once per
calling process, single-threaded, before any of the caller's threads or
torch's thread pools exist (forking the caller itself would copy those half
made), and forks each new process from that clean state — as
:mod:`hetsync.runtime.zygote` does for the ranks of a run.
"""

from __future__ import annotations

import multiprocessing
from multiprocessing.context import BaseContext

PRELOAD = ["torch", "torch._dynamo", "numpy", "sklearn.model_selection", "hetsync.sim.engine", "hetsync.workloads"]


def fresh_process_context() -> BaseContext:
    """The ``forkserver`` context, its server preloading :data:`PRELOAD`."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx
