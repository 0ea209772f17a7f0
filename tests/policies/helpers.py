"""Scripted-event helpers for policy tests (no driver, no torch)."""

from __future__ import annotations

import itertools

from hetsync.policies.base import ComputeDone, PolicyContext, PullDone, PushArrived, PushKind

_ids = itertools.count()


def ctx(workers: int = 3, batch_size: int = 8, lr: float = 0.1) -> PolicyContext:
    return PolicyContext(workers=workers, batch_size=batch_size, lr=lr)


def done(w: int, t: float = 1.0, step: int = 0, base: int = 0, batch: int = 8) -> ComputeDone:
    return ComputeDone(now_s=t, worker=w, step=step, batch_size=batch, base_version=base, duration_s=1.0)


def arrived(
    w: int, t: float = 1.0, base: int = 0, samples: int = 8, kind: PushKind = "grad", steps: int = 1
) -> PushArrived:
    return PushArrived(
        now_s=t, worker=w, push_id=next(_ids), kind=kind, base_version=base, steps=steps, samples=samples
    )


def pulled(w: int, t: float = 1.0, version: int = 1) -> PullDone:
    return PullDone(now_s=t, worker=w, version=version)
