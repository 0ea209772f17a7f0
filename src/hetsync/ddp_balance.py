"""Balanced batches for PyTorch DDP: LB-BSP without a parameter server.

LB-BSP (Chen, Weng, Wang, Li, Li, SoCC 2020, arXiv 1806.02508) keeps BSP's
semantics — every step, one update with the mean gradient of a global batch
of X samples — but lets each rank take a different share x_rank of those X
samples, sized so that all ranks finish their forward and backward passes
together. Two pieces make that work under ``DistributedDataParallel``:

1. :func:`weighted_allreduce_hook`, a DDP communication hook. DDP's default
   all-reduce averages the ranks' gradients, ``(1/W) Σ g_i``: right only if
   every rank had the same batch. With local batches x_i, the gradient of
   the global batch's mean loss is ``Σ (x_i / X) g_i`` (each g_i being the
   mean-loss gradient of rank i's own batch). So each rank multiplies its
   bucket by ``x_i / X`` and the hook *sums* (all-reduce SUM, no division
   by W). With equal batches ``x_i / X = 1/W`` and this is plain DDP.
2. :class:`BalancedBatches`, the controller. After each step every rank
   contributes its own compute time, batch and load to one small
   ``all_gather``, and every rank runs the same deterministic batch-size
   manager of :mod:`hetsync.algos.lbbsp` on the same numbers, so all ranks
   agree on the next batch sizes without a coordinator. The compute time is
   measured from :meth:`BalancedBatches.start` to the moment the last
   gradient bucket became ready (the hook notes it), so it excludes the
   wait for the other ranks in the all-reduce.

Usage (every rank runs the same script; see
``examples/ddp_balanced_batches.py``)::

    bal = BalancedBatches(global_batch=384)            # X, fixed
    model = DistributedDataParallel(net)
    bal.register(model)
    for step in range(steps):
        x, y = next_batch(bal.batch_size)              # this rank's share
        bal.start()
        loss_fn(model(x), y).backward()                # loss: the mean over the local batch
        opt.step()
        opt.zero_grad()
        bal.step_done()                                # all ranks agree on the next sizes
    del model, bal; gc.collect()                       # DDP objects go before the group does:
    dist.destroy_process_group()                       # pytorch#56297 can deadlock otherwise

The learning rate is that of one step with batch X, as for DDP with X / W
samples per rank.
"""

# No ``from __future__ import annotations`` here: DDP inspects the hook's
# annotations at registration and wants the real dist.GradBucket and
# torch.futures.Future[torch.Tensor] objects, not strings.
import time
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from hetsync.algos.lbbsp import CPUBatchManager, GPUBatchManager, largest_remainder

__all__ = ["BalancedBatches", "BatchShareState", "weighted_allreduce_hook"]


class BatchShareState:
    """The hook's state: this rank's weight ``x_rank / X`` and when its last bucket was ready."""

    def __init__(self, weight: float, process_group: dist.ProcessGroup | None = None) -> None:
        self.weight = float(weight)
        self.process_group = process_group
        self.last_ready_s: float | None = None  # time.perf_counter() of the last bucket hook call


def weighted_allreduce_hook(state: BatchShareState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """All-reduce (sum) of each rank's bucket times ``x_rank / X``: the samples-weighted mean gradient."""
    state.last_ready_s = time.perf_counter()
    group = state.process_group if state.process_group is not None else dist.group.WORLD
    tensor = bucket.buffer()
    tensor.mul_(state.weight)
    work = dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group, async_op=True)
    assert work is not None
    return work.get_future().then(lambda fut: fut.value()[0])


class BalancedBatches:
    """Per-rank batch sizes for DDP, re-sized every step for equal finish.

    ``global_batch`` is X, fixed. ``variant="cpu"`` predicts each rank's
    throughput from its recent throughputs and loads (``predictor`` "rls"
    or "ewma"); ``variant="gpu"`` fits each rank's flat-then-linear step
    curve and damps the moves. ``max_batch``: a memory cap, one int for all
    ranks or one per rank. Call :meth:`register` once on the DDP model,
    :meth:`start` before each forward pass and :meth:`step_done` after each
    backward pass (on every rank: it is a collective).
    """

    def __init__(
        self,
        global_batch: int,
        *,
        variant: str = "cpu",
        predictor: str = "rls",
        lags: int = 2,
        history: int = 20,
        max_batch: int | Sequence[int] | None = None,
        process_group: dist.ProcessGroup | None = None,
    ) -> None:
        if not dist.is_initialized():
            raise RuntimeError("BalancedBatches needs an initialized process group (dist.init_process_group)")
        self.group = process_group
        self.rank = dist.get_rank(process_group)
        self.world = dist.get_world_size(process_group)
        self.total = int(global_batch)
        if self.total < self.world:
            raise ValueError(f"global_batch {global_batch} must be at least the world size {self.world}")
        caps: list[int] | None
        if max_batch is None:
            caps = None
        elif isinstance(max_batch, int):
            caps = [max_batch] * self.world
        else:
            caps = [int(c) for c in max_batch]
            if len(caps) != self.world:
                raise ValueError(f"max_batch has {len(caps)} values for {self.world} ranks")
        self.caps = caps
        self.manager: CPUBatchManager | GPUBatchManager
        if variant == "cpu":
            self.manager = CPUBatchManager(
                self.world, self.total, predictor=predictor, lags=lags, history=history, caps=caps
            )
        elif variant == "gpu":
            self.manager = GPUBatchManager(self.world, self.total, history=history, caps=caps)
        else:
            raise ValueError(f"variant must be 'cpu' or 'gpu', got {variant!r}")
        self.batch_sizes = largest_remainder([self.total / self.world] * self.world, self.total, hi=caps)
        self.state = BatchShareState(self.batch_sizes[self.rank] / self.total, process_group)
        self.batch_log: list[list[int]] = [list(self.batch_sizes)]  # every step's batches, all ranks
        self._t0: float | None = None

    @property
    def batch_size(self) -> int:
        """This rank's batch for the next step."""
        return self.batch_sizes[self.rank]

    def register(self, model: Any) -> None:
        """Install :func:`weighted_allreduce_hook` on a ``DistributedDataParallel`` model."""
        model.register_comm_hook(self.state, weighted_allreduce_hook)

    def start(self) -> None:
        """Mark the start of this rank's step (before the forward pass)."""
        self._t0 = time.perf_counter()
        self.state.last_ready_s = None

    def step_done(self, duration_s: float | None = None, load: float = 1.0) -> list[int]:
        """Exchange step times and set every rank's next batch; returns all ranks' batches.

        ``duration_s`` defaults to the time from :meth:`start` to the last
        gradient bucket's hook (to now if the hook did not run). ``load`` is
        an optional background-load reading (1.0 = unloaded), the exogenous
        input of the CPU predictor.
        """
        if duration_s is None:
            if self._t0 is None:
                raise RuntimeError("call start() before the forward pass, or pass duration_s")
            end = self.state.last_ready_s if self.state.last_ready_s is not None else time.perf_counter()
            duration_s = end - self._t0
        mine = torch.tensor([float(duration_s), float(self.batch_size), float(load)], dtype=torch.float64)
        gathered = [torch.zeros(3, dtype=torch.float64) for _ in range(self.world)]
        dist.all_gather(gathered, mine, group=self.group)
        for r, row in enumerate(gathered):
            d, b, ld = (float(v) for v in row)
            self.manager.observe(r, int(round(b)), d, ld if ld > 0 else 1.0)
        alloc = self.manager.allocate(list(range(self.world)))
        self.batch_sizes = [alloc[r] for r in range(self.world)]
        self.state.weight = self.batch_sizes[self.rank] / self.total
        self.batch_log.append(list(self.batch_sizes))
        self._t0 = None
        return list(self.batch_sizes)
