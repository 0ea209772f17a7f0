"""A worker's model state, the same in the simulator and in a real worker.

- ``local``: the model the worker computes on; ``ref``: the model at its last
  push or pull, so a delta push sends ``local − ref``.
- Gradient-pushing policies: a finished step leaves one gradient waiting for
  a push; a newer one replaces it (the old step is then dropped).
- Delta-pushing policies: a finished step updates ``local`` in place of the
  server (local SGD); the steps accumulate until a delta push carries them, or
  a pull overwrites them (dropped).

Peer to peer, by default (``p2p_mixing: equal``): a receiver replaces its
model by the equal-weight average of its own and the copies that arrived.
With ``p2p_mixing: push-sum`` (``push_sum=True``): push-sum mixing (Kempe et al., "Gossip-based computation of
aggregate information", FOCS 2003; as in SGP, Assran et al., ICML 2019).
Every worker holds a ``weight`` w_i (1.0 when a run starts) beside its model
x_i. A multicast to k receivers splits the weight: each copy carries
w_i/(k+1) and the sender keeps w_i/(k+1) (:meth:`LocalModel.split_weight`).
A receiver mixes the copies that arrived into its model with
:func:`push_sum_mix`: x_i ← (w_i·x_i + Σ w_j·x_j)/(w_i + Σ w_j),
w_i ← w_i + Σ w_j. Local SGD steps work on x_i and leave w_i alone.

Invariant: splitting and mixing keep Σ w·x and Σ w over the workers and the
copies in flight, so the push-sum average Σ w_i·x_i / Σ w_i (what is
evaluated, :func:`weighted_average`) is unchanged by every exchange, whatever
the fan-out — equal-weight averaging with unequal fan-out drifts toward the
models sent to the most receivers. An all-reduce gives its participants the
exact weighted average and the mean of their weights (which keeps both
sums). A copy that is lost (its sender or receiver died) takes its mass
with it, as does a worker that dies; the surviving average is then that of
the rest. While every weight is equal (an all-reduce only, or equal fan-out:
every sender k receivers and every receiver k copies a round) the result is
exactly the equal-weight average, and then it is computed as before
(sum / count), bit for bit.

Tensors are never modified in place, so a model handed out by the server can
be shared by reference. With ``math`` off (the simulator's event-loop
benchmark) the tensors are ``None`` and only the counting happens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from hetsync.optim import Stepper


def push_sum_mix(
    own: torch.Tensor, own_weight: float, received: list[tuple[torch.Tensor, float]]
) -> tuple[torch.Tensor, float]:
    """Push-sum: the weighted average of ``own`` and the ``received`` (model,
    weight) copies, and the sum of the weights. Equal weights give the plain
    average, computed as (own + Σ received) / count."""
    if not received:
        return own, own_weight
    weights = [own_weight, *(w for _, w in received)]
    for w in weights:
        if not w > 0.0:
            raise ValueError(f"push-sum weight must be > 0, got {w}")
    total_w = math.fsum(weights)
    if all(w == own_weight for w in weights):
        total = own
        for model, _ in received:
            total = total + model
        return total / len(weights), total_w
    total = own * (own_weight / total_w)
    for model, w in received:
        total = total + model * (w / total_w)
    return total, total_w


def weighted_average(models: list[torch.Tensor], weights: list[float]) -> torch.Tensor:
    """Σ w_i·x_i / Σ w_i (the push-sum average); equal weights give
    ``torch.stack(models).mean(dim=0)`` exactly."""
    if not models or len(models) != len(weights):
        raise ValueError(
            f"weighted_average needs one weight per model, got {len(models)} models, {len(weights)} weights"
        )
    if all(w == weights[0] for w in weights):
        return torch.stack(models).mean(dim=0)
    total_w = math.fsum(weights)
    coef = torch.tensor([w / total_w for w in weights], dtype=models[0].dtype)
    out: torch.Tensor = torch.tensordot(coef, torch.stack(models), dims=1)
    return out


@dataclass(slots=True)
class PushPayload:
    kind: str
    payload: torch.Tensor | None
    base_version: int
    steps: int
    samples: int


class LocalModel:
    __slots__ = (
        "local",
        "ref",
        "push_sum",
        "base_version",
        "grad",
        "has_grad",
        "grad_samples",
        "grad_base",
        "local_steps",
        "local_samples",
        "local_base",
        "stepper",
        "local_clock",
        "weight",
    )

    def __init__(
        self, model: torch.Tensor | None, version: int = 0, stepper: Stepper | None = None, *, push_sum: bool = False
    ) -> None:
        self.local = self.ref = model
        # peer to peer: push-sum mixing (the scenario's p2p_mixing: push-sum), or
        # the equal-weight average of its own and the copies (every weight stays 1)
        self.push_sum = push_sum
        # the worker's optimizer for local steps; None: plain SGD. Its state
        # survives pulls (a pull replaces the parameters, not the optimizer).
        self.stepper = stepper
        # the worker's schedule clock: local steps taken so far, or from where a Compute.clock set it
        self.local_clock: float = 0
        self.weight = 1.0  # peer to peer: the push-sum weight (module docstring)
        self.base_version = version
        self.grad: torch.Tensor | None = None
        self.has_grad = False
        self.grad_samples = 0
        self.grad_base = 0
        self.local_steps = 0
        self.local_samples = 0
        self.local_base = version  # version the oldest unpushed local step was computed on

    def finish_step(
        self, grad: torch.Tensor | None, batch: int, base: int, local_lr: float | None, clock: float | None = None
    ) -> int:
        """Book a finished step; returns how many steps it made obsolete (0 or 1).
        ``clock`` (Compute.clock): the schedule clock this local step is taken at."""
        if clock is not None:
            self.local_clock = clock
        if local_lr is not None:
            if grad is not None:
                if self.stepper is None:
                    self.local = torch.add(self.local, grad, alpha=-local_lr)
                else:
                    lr = self.stepper.lr_at(local_lr, self.local_clock)
                    self.local = self.stepper.descend(self.local, grad, lr)  # type: ignore[arg-type]
            self.local_clock += 1
            if self.local_steps == 0:
                # a step that began before a pull landed was computed on the older model
                self.local_base = min(base, self.base_version)
            self.local_steps += 1
            self.local_samples += batch
            return 0
        replaced = 1 if self.has_grad else 0
        self.has_grad = True
        self.grad, self.grad_samples, self.grad_base = grad, batch, base
        return replaced

    def take_push(self, kind: str) -> PushPayload:
        """What a push of ``kind`` carries; raises ValueError if there is nothing to push."""
        if kind == "grad":
            if not self.has_grad:
                raise ValueError("pushes a gradient it has not computed")
            out = PushPayload("grad", self.grad, self.grad_base, 1, self.grad_samples)
            self.has_grad, self.grad = False, None
            return out
        if kind == "delta":
            delta = self.local - self.ref if self.local is not None else None
            base = self.local_base if self.local_steps else self.base_version
            out = PushPayload("delta", delta, base, self.local_steps, self.local_samples)
            self.ref = self.local
            self.local_steps = self.local_samples = 0
            return out
        raise ValueError(f"unknown push kind {kind!r}")

    # ------------------------------------------------ fragments (Streaming DiLoCo)
    def take_fragment(self, lo: int, hi: int) -> PushPayload:
        """A fragment push: the delta of [lo, hi) since the worker last merged
        that fragment (``ref[lo:hi]`` holds the global values it merged then,
        or the start's). It carries the local steps since the worker's last
        push of any fragment (each step is booked with the first push after
        it). ``ref`` is left as it is: the fragment's next delta is again
        measured from the global values the worker merges next."""
        delta = self.local[lo:hi] - self.ref[lo:hi] if self.local is not None and self.ref is not None else None
        base = self.local_base if self.local_steps else self.base_version
        out = PushPayload("delta", delta, base, self.local_steps, self.local_samples)
        self.local_steps = self.local_samples = 0
        return out

    def merge_fragment(self, lo: int, hi: int, merged: torch.Tensor | None, keep: float, version: int) -> None:
        """Merge the global values ``merged`` of [lo, hi) (version ``version``):
        ``local[lo:hi] ← keep·local[lo:hi] + (1 − keep)·merged`` (exactly
        ``merged`` at keep 0) and ``ref[lo:hi] ← merged``. Local steps are
        kept, not overwritten. New tensors: the old ones may be shared."""
        self.base_version = version
        if self.local is None or self.ref is None or merged is None:
            return
        local = self.local.clone()
        mine = local[lo:hi]
        if keep == 0.0:
            mine.copy_(merged)
        else:
            mine.mul_(keep).add_(merged, alpha=1.0 - keep)
        ref = self.ref.clone()
        ref[lo:hi] = merged
        self.local, self.ref = local, ref

    # ---------------------------------------------------------- peer to peer
    def commit_local(self) -> int:
        """Peer to peer: the local steps are the update (there is nothing to
        push); returns how many steps that applies."""
        steps = self.local_steps
        self.ref = self.local
        self.local_steps = self.local_samples = 0
        return steps

    def split_weight(self, receivers: int) -> float:
        """Peer to peer: a multicast to ``receivers`` starts; the sender keeps
        w/(k+1) and returns the same share, which every copy carries."""
        if receivers < 1:
            raise ValueError(f"a multicast needs at least one receiver, got {receivers}")
        if not self.push_sum:
            return self.weight  # equal mixing: the weight stays 1 everywhere
        self.weight = share = self.weight / (receivers + 1)
        return share

    def mix(self, received: list[tuple[torch.Tensor | None, float]]) -> None:
        """Peer to peer: push-sum mix the received (model, weight) copies into
        the model (:func:`push_sum_mix`); the weights add up."""
        if not received:
            return
        if not self.push_sum:  # the equal-weight average of its own and the copies; the weight stays 1
            received = [(model, self.weight) for model, _ in received]
            if self.local is not None:
                self.local, _ = push_sum_mix(self.local, self.weight, received)  # type: ignore[arg-type]
                self.ref = self.local
            return
        if self.local is None:  # counting only: the weights still move
            self.weight = math.fsum([self.weight, *(w for _, w in received)])
            return
        self.local, self.weight = push_sum_mix(self.local, self.weight, received)  # type: ignore[arg-type]
        self.ref = self.local

    def replace(self, model: torch.Tensor | None, weight: float | None = None) -> None:
        """Peer to peer: take the result of an all-reduce as the model, and
        ``weight`` (the mean of the participants' weights) if given."""
        self.local = self.ref = model
        if weight is not None:
            self.weight = weight

    def drop_local(self) -> int:
        """Forget the work not yet pushed (its worker left): returns the steps it held."""
        lost = self.local_steps + int(self.has_grad)
        self.local_steps = self.local_samples = 0
        self.has_grad, self.grad = False, None
        self.ref = self.local
        return lost

    def load(self, model: torch.Tensor | None, version: int) -> int:
        """Replace the model with a pulled one; returns the local steps it overwrote."""
        overwritten = self.local_steps
        self.local = self.ref = model
        self.base_version = version
        self.local_steps = self.local_samples = 0
        return overwritten
