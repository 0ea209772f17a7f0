"""A worker's model state, the same in the simulator and in a real worker.

- ``local``: the model the worker computes on; ``ref``: the model at its last
  push or pull, so a delta push sends ``local − ref``.
- Gradient-pushing policies: a finished step leaves one gradient waiting for
  a push; a newer one replaces it (the old step is then dropped).
- Delta-pushing policies: a finished step updates ``local`` in place of the
  server (local SGD); the steps accumulate until a delta push carries them, or
  a pull overwrites them (dropped).

Tensors are never modified in place, so a model handed out by the server can
be shared by reference. With ``math`` off (the simulator's event-loop
benchmark) the tensors are ``None`` and only the counting happens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hetsync.optim import Stepper


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
    )

    def __init__(self, model: torch.Tensor | None, version: int = 0, stepper: Stepper | None = None) -> None:
        self.local = self.ref = model
        # the worker's optimizer for local steps; None: plain SGD. Its state
        # survives pulls (a pull replaces the parameters, not the optimizer).
        self.stepper = stepper
        self.local_clock = 0  # local steps taken so far: the worker's schedule clock
        self.base_version = version
        self.grad: torch.Tensor | None = None
        self.has_grad = False
        self.grad_samples = 0
        self.grad_base = 0
        self.local_steps = 0
        self.local_samples = 0
        self.local_base = version  # version the oldest unpushed local step was computed on

    def finish_step(self, grad: torch.Tensor | None, batch: int, base: int, local_lr: float | None) -> int:
        """Book a finished step; returns how many steps it made obsolete (0 or 1)."""
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

    # ---------------------------------------------------------- peer to peer
    def commit_local(self) -> int:
        """Peer to peer: the local steps are the update (there is nothing to
        push); returns how many steps that applies."""
        steps = self.local_steps
        self.ref = self.local
        self.local_steps = self.local_samples = 0
        return steps

    def mix(self, received: list[torch.Tensor | None]) -> None:
        """Peer to peer: replace the model by the equal-weight average of its
        own and the received ones."""
        if self.local is None or not received:
            return
        total = self.local
        for model in received:
            total = total + model  # type: ignore[operator]
        self.local = self.ref = total / (1 + len(received))

    def replace(self, model: torch.Tensor | None) -> None:
        """Peer to peer: take the result of an all-reduce as the model."""
        self.local = self.ref = model

    def load(self, model: torch.Tensor | None, version: int) -> int:
        """Replace the model with a pulled one; returns the local steps it overwrote."""
        overwritten = self.local_steps
        self.local = self.ref = model
        self.base_version = version
        self.local_steps = self.local_samples = 0
        return overwritten
