"""The data paths a run's rounds may take, and which policies may take them.

Both drivers model or run them (issue 27): ``ps``, the parameter-server path
— every gradient pushed to the server, which applies the round and sends the
model back to each worker — and ``collective`` — a round's gradients
all-reduced among the workers, the server deciding only (its pull carries no
model; every worker holds the round's mean afterwards). The runtime carries
the collective path with gloo collectives (:mod:`hetsync.runtime.collective`),
the simulator as a ring of flows among the workers' nodes
(:mod:`hetsync.sim.engine`). What both need to agree on lives here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from hetsync.errors import BadInput, PolicyError

PATHS = ("ps", "collective")


def check_path(path: object) -> str:
    if path not in PATHS:
        raise BadInput(f"path must be one of {', '.join(PATHS)}, got {path!r}")
    return str(path)


def parse_paths(given: str, flag: str) -> tuple[str, ...]:
    """A command line's comma-separated paths (``flag`` names the option), in
    order, each once; BadInput in one line for an unknown or empty list."""
    paths = tuple(dict.fromkeys(x.strip() for x in given.split(",") if x.strip()))
    if not paths or any(x not in PATHS for x in paths):
        raise BadInput(f"{flag} takes {' and '.join(PATHS)}, comma-separated; got {given!r}")
    return paths


def uses_collective(path: str, policy: Any) -> bool:
    """Whether a run of ``policy`` on ``path`` reduces its rounds among the
    workers; BadInput when the path was asked for and the policy cannot use it."""
    if path != "collective":
        return False
    if not getattr(policy, "collective", False):
        raise BadInput(
            f"{policy.label} cannot use path=collective: its exchanges are not rounds of a batch-weighted "
            "gradient mean or an equal-weight delta mean over the workers (policies that can: bsp, lb-bsp, "
            "lb-bsp-static, local-sgd, diloco); use path=ps"
        )
    return True


def check_round(label: str, contributions: Sequence[tuple[int, float]], pushes: Mapping[int, Any]) -> None:
    """``contributions`` ((push id, weight) of one Apply) must be what a
    round's reduce computes: for gradient pushes the batch-weighted mean
    (weights ∝ samples, summing to 1), for delta pushes the equal-weight
    mean (1/k each). ``pushes``: push id → the held push (its ``kind`` and
    ``samples``). PolicyError otherwise, naming the path. (An unknown id is
    left to the ledger, which names it.)"""
    if any(pid not in pushes for pid, _ in contributions):
        return
    kinds = {pushes[pid].kind for pid, _ in contributions}
    if kinds == {"delta"}:
        expected = {pid: 1.0 / len(contributions) for pid, _ in contributions}
        what = "the equal-weight mean of the round's deltas"
    elif kinds <= {"grad"}:
        samples = {pid: int(pushes[pid].samples) for pid, _ in contributions}
        total = sum(samples.values())
        expected = {pid: samples[pid] / total if total else 0.0 for pid, _ in contributions}
        what = "the batch-weighted mean"
    else:
        raise PolicyError(f"{label}: an Apply mixes gradient and delta pushes, which the collective path cannot reduce")
    for pid, weight in contributions:
        if not math.isclose(weight, expected[pid], rel_tol=1e-6, abs_tol=1e-9):
            raise PolicyError(
                f"{label}: an Apply weights push {pid} {weight:g}, but the collective path reduces "
                f"{what} ({expected[pid]:g}); run it with path=ps"
            )
