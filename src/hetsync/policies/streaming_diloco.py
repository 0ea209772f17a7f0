"""Streaming DiLoCo — A. Douillard, Y. Donchev, K. Rush, S. Kale, Z. Charles,
Z. Garrett, G. Teston, D. Lacey, R. McIlroy, J. Shen, A. Ramé, A. Szlam,
M. Ranzato, P. Barham, "Streaming DiLoCo with overlapping communication:
Towards a Distributed Free Lunch" (arXiv:2501.18512, 2025).

DiLoCo (:mod:`hetsync.policies.diloco`) with its three changes:

1. **Fragments, streamed.** The model is cut into P fragments, contiguous
   ranges of the flat parameter vector (on parameter-tensor boundaries with
   ``split=tensors``, the default, else equal ranges:
   :func:`hetsync.algos.streaming.fragment_bounds`). Fragment p is synced every
   H inner steps, staggered: after a worker's t-th inner step when
   (t − ⌊p·H/P⌋) mod H = 0. So each fragment is still averaged once per H
   steps, as DiLoCo's whole model is, but a sync moves 1/P of the model.
2. **Overlap.** A worker that pushes fragment p's delta keeps computing; the
   averaged fragment is merged into its model after τ more inner steps (before
   its (t+τ+1)-th starts), ``θ_p ← α·θ_p + (1 − α)·θ̃_p`` with θ̃_p the
   global fragment after the outer step. If it has not arrived by then the
   worker waits for it there: that is the only barrier, so a worker is at
   most (the most steps between two syncs) + τ − 1 steps ahead of the
   slowest (``step_gap_bound``). τ must be below the fewest steps between two
   fragments' syncs, so at most one fragment is in flight at a time.
3. **Low-precision outer gradients.** The deltas travel at ``bits`` = 32, 8 or
   4 (a real quantize / dequantize round trip with one scale per fragment:
   uniform symmetric integers, *not* the paper's 4-bit float E3M0 — see
   :mod:`hetsync.algos.quantize`), and so does their average on the way
   back; the sum and the outer step are in float32, as in the paper. The
   bytes of each transfer are counted at that width.

Optimizers, as DiLoCo's: inner AdamW on each worker (its state kept across
merges), outer SGD with Nesterov momentum (ε 0.7, β 0.9 by default, the
DiLoCo paper's). The outer optimizer keeps **one state per fragment** (a
momentum buffer of the fragment's size, stepped only when that fragment is
applied); since Nesterov momentum is elementwise this is exactly one state
over the whole vector of which each step touches only the fragment's range.

The delta of a fragment is measured from the global values the worker last
merged there (not from its own mixed values), as in the paper's outer
gradient θ̃_p − θ_{m,p}; the first delta of each fragment from the start's.
α: the paper merges the local and the global fragment with a mixing factor
and finds a balanced mix best; we take α = 0.5 as the default from our
reading of secondary descriptions (we could not read its full text here).
α = 0 replaces the local fragment by the global one (the τ steps' work on
that fragment then survives only through the next delta's reference).

How it maps onto hetsync's parameter server (the paper all-reduces among
workers): the worker's fragment push is a ``Push(kind="delta",
fragment=...)``; when every live worker's push of the fragment has arrived
the server applies their mean (weights 1/k) to that range through the outer
optimizer, and every worker pulls the range (``Pull(fragment, keep=α)``),
holding it until the step that merges it (``Compute(merge=True)``). On a real
network each worker would receive the quantized mean delta and take the same
outer step itself, as the paper's replicas do; the bytes are the same.

Step accounting: a fragment push carries the local steps since the worker's
last push of any fragment, so every step is applied with the first fragment
applied after it (its effect on the other fragments reaches the server with
their own later syncs).

A worker whose own training loop ends (``WorkerLeaving``, :mod:`hetsync.loop`)
with steps it has not pushed pushes at once the delta of the fragment due
next, so its last steps reach the model: the push waits, parked, for that
fragment's round (the workers going on push theirs at their own time) and
the round waits for it; the leaver pulls nothing. When no worker goes on,
the leavers' parked pushes close rounds of their own.

Joins are not taken (``takes_joins`` is False: a driver refuses a run in
which a worker joins): a joiner would have to enter the staggered fragment
schedule in step with the others, whose fragment rounds wait for every
going-on worker's push of the same fragment; that alignment is not built.

Default H = 10 (as hetsync's DiLoCo: short runs), P = 2, τ = 1 (one step of
overlap hides a fragment's round trip on the built-in scenarios' links),
bits = 4 (the paper's width).

On real processes (``hetsync run``, ``hetsync.init`` in a user's loop) the
same commands travel the parameter-server path: a fragment's push carries
the bytes of its encoded delta (:func:`hetsync.algos.quantize.encode`: the
scale and the packed integers, so 4 bits move an eighth of float32's bytes);
its pull, the encoded mean the server applied, from which the worker takes
the fragment's outer step itself with its own copy of the fragment's outer
optimizer, as the paper's replicas do (after a resume, whose workers lost
those copies, the pull carries the fragment's float32 values). Not on the
collective path or with sharded servers (refused in one line).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hetsync.algos.streaming import SPLITS, due_fragment, fragment_bounds, max_spacing, min_spacing
from hetsync.errors import BadInput
from hetsync.policies.base import (
    FRAGMENT_BITS,
    Apply,
    Command,
    Compute,
    ComputeDone,
    Event,
    Fragment,
    Policy,
    PolicyContext,
    Pull,
    PullDone,
    Push,
    PushArrived,
    WorkerLeaving,
    WorkerLeft,
    everyone_pushed,
    param,
)
from hetsync.policies.config import config_params, config_values
from hetsync.policies.diloco import DiLoCoConfig


@dataclass(frozen=True, kw_only=True)
class StreamingDiLoCoConfig(DiLoCoConfig):
    H: int = param(10, help="inner steps between two syncs of one fragment", ge=1)
    P: int = param(2, help="fragments of the model, synced in turn (one every H/P inner steps)", ge=1)
    tau: int = param(1, help="inner steps a fragment's sync overlaps before it is merged", ge=0)
    alpha: float = param(
        0.5, help="share of the worker's own fragment kept at the merge (0: take the global one)", ge=0.0, le=1.0
    )
    bits: int = param(4, help="width of the outer gradients on the wire: 32, 8 or 4 (uniform integers)", ge=4, le=32)
    split: str = param(
        "tensors", help="fragment boundaries: tensors (on parameter-tensor boundaries) or equal", choices=SPLITS
    )


@dataclass(slots=True)
class _InFlight:
    """A worker's fragment between its push and its merge."""

    fragment: int
    merge_after: int  # merged after the worker's step with this count (1-based)
    arrived: bool = False


class StreamingDiLoCo(Policy):
    name = "streaming-diloco"
    summary = "DiLoCo synced one fragment at a time, overlapped with tau steps, in 32/8/4 bits"
    config_class = StreamingDiLoCoConfig
    config: StreamingDiLoCoConfig
    fragmented = True

    def __init__(self, ctx: PolicyContext, **params: object) -> None:
        super().__init__(ctx, **params)
        c = self.config
        self.H, self.P, self.tau = c.H, c.P, c.tau
        if c.bits not in FRAGMENT_BITS:
            raise BadInput(f"policy {self.name!r} parameter 'bits' must be 32, 8 or 4, got {c.bits}")
        if self.P > self.H:
            raise BadInput(
                f"policy {self.name!r} parameter 'P' must be <= H={self.H} (one fragment starts its sync per "
                f"inner step at most), got {self.P}"
            )
        gap = min_spacing(self.H, self.P)
        if self.tau >= gap:
            raise BadInput(
                f"policy {self.name!r} parameter 'tau' must be < {gap}, the fewest inner steps between two "
                f"fragments' syncs with H={self.H} and P={self.P} (at most one fragment in flight), got {self.tau}"
            )
        self.local_lr: float = c.inner_lr or ctx.lr
        self._fragments: list[Fragment] | None = None
        if ctx.param_sizes:
            self._fragments = self._cut(ctx.param_sizes)
        self.steps = [0] * self.n  # inner steps each worker has done
        self.inflight: list[_InFlight | None] = [None] * self.n
        self.waiting: set[int] = set()  # at a merge point, its fragment not arrived yet
        self.alive = set(range(self.n))
        self.leaving: set[int] = set()
        self.round: list[PushArrived] = []
        self.last_push = [0] * self.n  # each worker's step count at its last push
        self.early: dict[int, int] = {}  # leavers' pushes on their way: the fragment each carries
        self.unarrived = [0] * self.n  # pushes each worker was told to make that have not arrived
        self.parked: dict[int, list[PushArrived]] = {}  # leavers' pushes that arrived, by fragment: for its round

    def _cut(self, sizes: tuple[int, ...]) -> list[Fragment]:
        try:
            bounds = fragment_bounds(sum(sizes), self.P, sizes, self.config.split)
        except ValueError as e:
            hint = " (split=equal cuts anywhere)" if self.config.split == "tensors" else ""
            raise BadInput(f"policy {self.name!r} parameter 'P': {e}{hint}") from None
        return [Fragment(lo=lo, hi=hi, bits=self.config.bits) for lo, hi in bounds]

    @property
    def fragments(self) -> list[Fragment]:
        """The P fragments (the driver gives the model's layout in ``PolicyContext.param_sizes``)."""
        if self._fragments is None:
            raise BadInput(
                f"policy {self.name!r} needs the model's parameter layout (PolicyContext.param_sizes) to cut "
                "its fragments; the simulator gives it"
            )
        return self._fragments

    @property
    def label(self) -> str:
        """H, P, tau and bits always, the other parameters where they differ from their defaults."""
        values = config_values(self.config)
        always = ("H", "P", "tau", "bits")
        changed = [
            p.name for p in config_params(type(self.config)) if p.name not in always and values[p.name] != p.default
        ]
        shown = [f"{k}={values[k]}" for k in always] + [f"{k}={values[k]}" for k in changed]
        return f"{self.name}({','.join(shown)})"

    def step_gap_bound(self) -> int | None:
        return max_spacing(self.H, self.P) + self.tau - 1

    def outer_optimizer(self) -> dict[str, Any] | None:
        momentum = self.config.outer_momentum
        return {"name": "sgd", "lr": self.config.outer_lr, "momentum": momentum, "nesterov": momentum > 0}

    def local_optimizer(self) -> dict[str, Any] | None:
        return {"name": "adamw", "weight_decay": self.config.inner_wd}

    # ---------------------------------------------------------------- events
    def _step(self, w: int, *, merge: bool = False) -> Compute:
        return Compute(worker=w, batch_size=self.ctx.batch_size, local_lr=self.local_lr, merge=merge)

    def start(self, now_s: float) -> list[Command]:
        return [self._step(w) for w in range(self.n)]

    def on_event(self, event: Event) -> list[Command]:
        if isinstance(event, ComputeDone):
            return self._on_step(event.worker)
        if isinstance(event, PushArrived):
            w = event.worker
            self.unarrived[w] -= 1
            if w in self.early and not self.unarrived[w]:  # a leaver's last: parked until its fragment's round
                self.parked.setdefault(self.early.pop(w), []).append(event)
            else:
                self.round.append(event)
            return self._maybe_close()
        if isinstance(event, PullDone):
            return self._on_pulled(event.worker)
        if isinstance(event, WorkerLeaving):
            w = event.worker
            self.leaving.add(w)  # no more steps; a push it made stays in the round
            self.waiting.discard(w)
            if self.steps[w] == self.last_push[w]:
                return self._maybe_close()
            p = self._next_due(w)  # its last steps go with the next fragment's round
            self.early[w] = p
            self.last_push[w] = self.steps[w]
            self.unarrived[w] += 1
            return [Push(worker=w, kind="delta", fragment=self.fragments[p]), *self._maybe_close()]
        if isinstance(event, WorkerLeft):
            self.alive.discard(event.worker)
            self.leaving.discard(event.worker)
            self.waiting.discard(event.worker)
            self.early.pop(event.worker, None)  # (its push will not come)
            return self._maybe_close()
        return []

    def _next_due(self, w: int) -> int:
        """The fragment whose sync comes next after the worker's steps so far."""
        t = self.steps[w] + 1
        while (p := due_fragment(t, self.H, self.P)) is None:
            t += 1
        return p

    def _on_step(self, w: int) -> list[Command]:
        """After the worker's t-th step: push the fragment due at t, then go on —
        unless a fragment is due to be merged now and has not arrived."""
        if w in self.leaving:
            return []
        self.steps[w] = t = self.steps[w] + 1
        cmds: list[Command] = []
        p = due_fragment(t, self.H, self.P)
        if p is not None:
            cmds.append(Push(worker=w, kind="delta", fragment=self.fragments[p]))
            self.inflight[w] = _InFlight(fragment=p, merge_after=t + self.tau)
            self.last_push[w] = t
            self.unarrived[w] += 1
        pending = self.inflight[w]
        if pending is not None and pending.merge_after == t:
            if not pending.arrived:
                self.waiting.add(w)  # the merge point: wait for the fragment
                return cmds
            self.inflight[w] = None
            return [*cmds, self._step(w, merge=True)]
        return [*cmds, self._step(w)]

    def _on_pulled(self, w: int) -> list[Command]:
        pending = self.inflight[w]
        if pending is None:
            return []
        pending.arrived = True
        if w not in self.waiting:
            return []  # merged when the worker reaches its merge point
        self.waiting.discard(w)
        self.inflight[w] = None
        return [self._step(w, merge=True)]

    def _maybe_close(self) -> list[Command]:
        """Every live worker's push of the fragment has arrived (and every
        leaver's due with it): apply their mean to it, and every worker going
        on pulls it. With no worker going on, the leavers' parked pushes make
        rounds of their own."""
        going_on = self.alive - self.leaving
        if not going_on and not self.round and not self.early and self.parked:
            p = min(self.parked)
            self.round = self.parked.pop(p)
            return [*self._close(p, going_on), *self._maybe_close()]
        if not everyone_pushed(self.round, going_on):
            return []
        p = self._round_fragment(self.round)
        if p in self.early.values():
            return []  # a leaver's push of this fragment is on its way
        self.round += self.parked.pop(p, [])
        return self._close(p, going_on)

    def _close(self, p: int, going_on: set[int]) -> list[Command]:
        """Apply the round's mean to fragment ``p``; the workers going on pull it."""
        pushes, self.round = self.round, []
        fragment = self.fragments[p]
        weight = 1.0 / len(pushes)
        cmds: list[Command] = [Apply(contributions=tuple((push.push_id, weight) for push in pushes))]
        keep = self.config.alpha
        cmds += [Pull(worker=w, fragment=fragment, keep=keep) for w in sorted(going_on) if self.inflight[w]]
        return cmds

    def _round_fragment(self, pushes: list[PushArrived]) -> int:
        """The fragment the round's pushes carry (each pusher's one in flight)."""
        frags = {f.fragment for p in pushes if (f := self.inflight[p.worker]) is not None}
        if len(frags) > 1:  # (the schedule rules it out: tau < the spacing of the syncs)
            raise AssertionError(f"{self.name}: one round holds pushes of fragments {sorted(frags)}")
        if frags:
            return frags.pop()
        return 0  # every pusher has left: the pulls go to nobody, the apply needs no range of its own
