"""The collective data plane: a round's gradients reduced among the workers.

The parameter-server path moves every gradient to rank 0 and every model
back: one Python process receives N models and sends N per round, and DDP,
which never does, is about twice as fast at 12M–50M parameters. On the
collective path (``path="collective"``) rank 0 keeps deciding — the policy,
the ledger's versions and staleness, commands, reports, all small messages —
while the bulk bytes of a round never reach it:

- a worker that finishes a step whose gradient the policy wants pushed
  contributes ``b·g`` (its batch size times its gradient) and ``b`` to an
  all-reduce over the workers' own process group (:func:`workers_group`),
  in buckets of about :data:`BUCKET_BYTES` (DDP's default size), launched
  in a fixed order so that every worker issues the same collectives; in a
  user's loop each bucket starts as soon as backward has filled it
  (gradient hooks, as DDP's reducer does), overlapped with the rest of
  backward;
- its report tells rank 0 the push was *carried* (no payload); the policy
  hears ``PushArrived`` as on the server path and answers ``Apply`` +
  ``Pull``;
- the pull carries no model but the learning rate the server's optimizer
  would have used; the worker waits for the round's buckets, divides the
  sum by Σb (so the update is the batch-weighted mean Σbᵢgᵢ/Σbᵢ, exactly
  the weights BSP and LB-BSP apply) and takes the optimizer step itself,
  where the model lives — with the scenario's optimizer under ``hetsync
  run``, with the user's own optimizer (and so their scheduler) in their
  loop. Every worker holds the same model afterwards: gloo's ring leaves
  every member the same sum.

Delta rounds (``Policy.collective_kind == "delta"``: local SGD, DiLoCo,
under ``hetsync run``) go the same way with weight 1 per worker: a worker
contributes its model delta as it takes its H-th local step, the members
push at different times (rank 0 has a member whose loop has ended join with
zero weight as the round opens, and the rest when the run stops with a
round open), and on the pull each worker takes the outer step — plain
averaging or a copy of the server's outer optimizer — from the round's
starting model (:meth:`~hetsync.runtime.worker.WorkerProcess._apply_round`).

A policy may use this path when it declares its rounds reducible
(``Policy.collective``: every round is a batch-weighted gradient mean over
the workers that computed it, or an equal-weight mean of deltas); rank 0 checks each ``Apply`` against that
(:func:`check_round`) and refuses the run the first time it does not hold.
A worker that is in the group but computes nothing in a round (its own loop
has ended) contributes zero weight. Rank 0 holds no current model: it
fetches one from a worker to evaluate it and at the end of the run.

This module holds the worker's side (:class:`RoundReducer`) and the pure
pieces (:func:`plan_buckets`, :func:`check_round`).
"""

from __future__ import annotations

import datetime
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from hetsync.driver.paths import PATHS as PATHS  # (moved to the driver core; imported from here too)
from hetsync.driver.paths import check_path as check_path
from hetsync.driver.paths import check_round as check_round
from hetsync.driver.paths import uses_collective as uses_collective
from hetsync.errors import BadInput

PATH_ENV = "HETSYNC_PATH"  # the path ``hetsync launch --path`` gives the script's hetsync.init
BUCKET_BYTES = 25 * 2**20  # DDP's bucket_cap_mb default
_group: Any = None  # the workers' process group (ranks 1..N), when the run may use the collective path


def form_workers_group(world: int, backend: str = "gloo") -> None:
    """Every rank calls this once, right after joining the default group:
    the workers' own group (ranks 1..world−1), which the collective path's
    all-reduces use (rank 0 is not in it): ``backend`` gloo for buckets in
    host memory, nccl for buckets on the workers' GPUs (``hetsync run
    --device cuda``; each worker has set its current device first)."""
    global _group
    _group = dist.new_group(ranks=list(range(1, world)), backend=backend)


def workers_group() -> Any:
    if _group is None:
        raise RuntimeError("the collective path needs the workers' group: form_workers_group() was not called")
    return _group


class GroupBroken(RuntimeError):
    """The workers' group is known to be broken (the server saw a member die)
    while this worker still waited for a round's collective."""


WAIT_SLICE_S = 0.25  # how often a wait for a round looks whether the group is known broken


def wait_round(work: Any, broken: threading.Event | None) -> None:
    """Wait for one bucket's all-reduce. A member's death usually fails the
    collective on every survivor at once, but not always: a survivor whose
    part of the ring no longer touches the dead member may wait on a peer
    that has already given the round up. So the wait goes in slices, and
    ends with :class:`GroupBroken` once ``broken`` is set."""
    if broken is None:
        work.wait()
        return
    while True:
        try:
            work.wait(timeout=datetime.timedelta(seconds=WAIT_SLICE_S))
            return
        except RuntimeError:
            if work.is_completed():  # it ended after the slice ran out (a race), or failed: its own outcome
                work.wait()
                return
            if broken.is_set():
                raise GroupBroken(
                    "the workers' group (gloo) is broken: the server saw a member leave, and this round's "
                    "all-reduce will not end"
                ) from None


def plan_buckets(sizes: Sequence[int], cap_elements: int) -> list[list[int]]:
    """Tensor indices grouped into buckets, last tensor first (backward
    produces gradients in about that order), each holding at most
    ``cap_elements`` unless one tensor alone is larger."""
    if cap_elements < 1:
        raise ValueError(f"cap_elements must be ≥ 1, got {cap_elements}")
    buckets: list[list[int]] = []
    current: list[int] = []
    filled = 0
    for i in reversed(range(len(sizes))):
        if current and filled + sizes[i] > cap_elements:
            buckets.append(current)
            current, filled = [], 0
        current.append(i)
        filled += sizes[i]
    if current:
        buckets.append(current)
    return buckets


@dataclass(slots=True)
class _Bucket:
    members: list[int]  # tensor indices
    offsets: list[int]  # where each member starts in the bucket
    buf: torch.Tensor  # the members' b·g, then (last bucket only) b
    filled: int = 0
    work: Any = None


class RoundReducer:
    """A worker's side of one round after another: the buckets it
    all-reduces and the mean it hands back.

    ``sizes``: the element count of each gradient tensor, in parameter
    order (one entry, the flat model, for ``hetsync run``'s workers).
    ``device``: where the buckets live — the CPU for gloo (a gradient on a
    GPU is copied into them), the worker's GPU for NCCL (nothing leaves the
    device: the round's Σb stays there too, see :meth:`_close`).
    Use :meth:`begin` with this worker's weight (its batch size; 0: it
    computed nothing), then :meth:`add` each tensor's gradient (a bucket
    starts its all-reduce once filled, in bucket order) or :meth:`add_flat`,
    then :meth:`mean` for Σbᵢgᵢ/Σbᵢ as one flat tensor in parameter order."""

    def __init__(
        self,
        sizes: Sequence[int],
        *,
        group: Any = None,
        cap_bytes: int = BUCKET_BYTES,
        expected_weight: float = 1.0,
        broken: threading.Event | None = None,
        device: torch.device | str = "cpu",
    ) -> None:
        self.sizes = list(sizes)
        self.device = torch.device(device)
        # set (by whoever learns it: the worker's control thread) when the group is known broken: a wait
        # for a round ends then even if gloo's collective does not fail for this member (GroupBroken)
        self.broken = broken
        # Σbᵢ of a full round (the run's global batch): gradients go in as bᵢ·gᵢ/B, so a round whose
        # weights do add up to B is the mean as it comes out of the all-reduce (no pass to divide it)
        if not expected_weight > 0:
            raise ValueError(f"expected_weight must be > 0, got {expected_weight}")
        self.expected = float(expected_weight)
        self.group = group
        self.starts = [0]
        for n in self.sizes:
            self.starts.append(self.starts[-1] + n)
        self.n = self.starts[-1]
        plan = plan_buckets(self.sizes, max(1, cap_bytes // 4))
        self.buckets: list[_Bucket] = []
        self.where: dict[int, tuple[int, int]] = {}  # tensor index -> (bucket, offset)
        for k, members in enumerate(plan):
            offsets, at = [], 0
            for i in members:
                offsets.append(at)
                self.where[i] = (k, at)
                at += self.sizes[i]
            extra = 1 if k == len(plan) - 1 else 0  # the weight rides in the last bucket
            self.buckets.append(_Bucket(members, offsets, torch.zeros(at + extra, device=self.device)))
        self.weight = 0.0
        self.active = False
        self.launched = 0  # buckets whose all-reduce has started (always a prefix)
        self.seen: set[int] = set()

    def begin(self, weight: float) -> None:
        if self.active:
            raise RuntimeError("a round is still open: call mean() first")
        self.active, self.weight, self.launched = True, float(weight), 0
        self.seen.clear()
        for b in self.buckets:
            b.filled, b.work = 0, None

    def add(self, index: int, grad: torch.Tensor | None) -> None:
        """Tensor ``index``'s gradient (None: zero) is final for this round."""
        if index in self.seen:
            raise BadInput(
                "a parameter's gradient changed after its bucket was reduced (backward ran twice before "
                "opt.step(): gradient accumulation); the collective path reduces during backward, use path='ps'"
            )
        self.seen.add(index)
        k, at = self.where[index]
        b = self.buckets[k]
        part = b.buf[at : at + self.sizes[index]]
        if grad is None or self.weight == 0:
            part.zero_()
        else:
            # (into the bucket's memory: a GPU gradient goes to the host for gloo, stays put for NCCL)
            torch.mul(grad.detach().reshape(-1).to(part.device), self.weight / self.expected, out=part)
        b.filled += 1
        self._launch_ready()

    def add_flat(self, flat: torch.Tensor | None) -> None:
        """The whole gradient at once (None: zero), in parameter order."""
        for i in range(len(self.sizes)):
            self.add(i, None if flat is None else flat[self.starts[i] : self.starts[i + 1]])

    def _launch_ready(self) -> None:
        while self.launched < len(self.buckets):
            b = self.buckets[self.launched]
            if b.filled < len(b.members):
                return
            if self.launched == len(self.buckets) - 1:
                b.buf[-1:].fill_(self.weight)
            b.work = dist.all_reduce(b.buf, group=self.group, async_op=True)
            self.launched += 1

    def flush(self) -> None:
        """Tensors no gradient reached this round (unused parameters) count as zero."""
        for i in range(len(self.sizes)):
            if i not in self.seen:
                self.add(i, None)

    def abandon(self) -> None:
        """The group is broken (a member died): forget the round; nothing more
        is reduced. Each bucket gets a new buffer: a collective left pending
        may still write into the old one, which the model must not see."""
        self.active = False
        for b in self.buckets:
            b.work = None
            b.buf = torch.zeros_like(b.buf)

    def mean(self) -> torch.Tensor:
        """Wait for the round's all-reduce; Σbᵢgᵢ/Σbᵢ as one flat tensor in
        parameter order (zeros when nobody contributed)."""
        _, scale = self._close()
        out = torch.empty(self.n, device=self.device)
        for b in self.buckets:
            for i, at in zip(b.members, b.offsets, strict=True):
                out[self.starts[i] : self.starts[i + 1]] = b.buf[at : at + self.sizes[i]]
        if isinstance(scale, torch.Tensor) or scale != 1.0:
            out.mul_(scale)
        return out

    def _close(self) -> tuple[torch.Tensor | float, torch.Tensor | float]:
        """End the round: every bucket launched (unused tensors as zero) and
        reduced. Returns Σbᵢ and the factor that turns the reduced Σbᵢgᵢ/B
        into Σbᵢgᵢ/Σbᵢ (0 when nobody contributed): numbers for buckets in
        host memory, one-value tensors on the device for buckets on a GPU
        (reading Σb there would copy it to the host every round)."""
        self.flush()
        # buckets on a device (NCCL): the collective's own wait, which has the device's stream wait and
        # not the host; a NCCL wait sliced by timeouts would abort its communicator at the first slice a
        # slower member outlasts. So a member's death there is left to NCCL's own watchdog.
        broken = self.broken if self.device.type == "cpu" else None
        for b in self.buckets:
            wait_round(b.work, broken)
        self.active = False
        total = self.buckets[-1].buf[-1]
        if total.device.type != "cpu":
            return total, torch.where(total > 0, self.expected / total, torch.zeros_like(total))
        t = float(total)
        return t, (self.expected / t if t > 0 else 0.0)

    def mean_into_grads(self, params: Sequence[torch.Tensor]) -> float:
        """Wait for the round; make each parameter's ``.grad`` Σbᵢgᵢ/Σbᵢ —
        on the CPU a view into the bucket it was reduced in, scaled there
        (no copy, as DDP's ``gradient_as_bucket_view``; the loop's
        ``zero_grad`` drops or zeroes it before the next backward). Returns Σbᵢ."""
        total, scale = self._close()
        for b in self.buckets:
            if isinstance(scale, torch.Tensor) or scale != 1.0:
                b.buf.mul_(scale)
            for i, at in zip(b.members, b.offsets, strict=True):
                p = params[i]
                view = b.buf[at : at + self.sizes[i]].view_as(p)
                if p.device.type == "cpu":
                    p.grad = view
                else:
                    p.grad = view.to(p.device)
        return float(total)
