"""Streaming DiLoCo's fragments and schedule (Douillard et al., "Streaming
DiLoCo with overlapping communication: Towards a Distributed Free Lunch",
arXiv:2501.18512, 2025).

The model — one flat vector here — is split into P contiguous fragments
(:func:`fragment_bounds`). Fragment p is synchronized every H inner steps,
staggered: at the inner steps t > 0 with (t − t_p) mod H = 0, t_p = ⌊p·H/P⌋
(:func:`sync_offsets`, :func:`due_fragment`), so the P fragments take turns
and no two start at the same step. Its sync overlaps the next τ inner steps
and is merged after the τ-th; with τ below the fewest steps between two
fragments' syncs (:func:`min_spacing`) at most one fragment is in flight at
a time.

The paper cuts a transformer into fragments of whole blocks (sequentially or
strided). A flat vector keeps its tensors in order, so hetsync's fragments
are contiguous ranges: on parameter-tensor boundaries when the model's
tensor sizes are known (the boundary nearest to each equal share), else
equal ranges.
"""

from __future__ import annotations

from collections.abc import Sequence

SPLITS = ("tensors", "equal")


def sync_offsets(H: int, P: int) -> tuple[int, ...]:
    """t_p = ⌊p·H/P⌋ for p = 0..P−1: the inner step (mod H) at which fragment p
    starts its sync. Distinct when P ≤ H."""
    if not 1 <= P <= H:
        raise ValueError(f"P must be in [1, H={H}], got {P!r}")
    return tuple(p * H // P for p in range(P))


def min_spacing(H: int, P: int) -> int:
    """The fewest inner steps between two consecutive fragments' syncs (cyclically)."""
    return min(_spacings(H, P))


def max_spacing(H: int, P: int) -> int:
    """The most inner steps between two consecutive fragments' syncs (cyclically)."""
    return max(_spacings(H, P))


def _spacings(H: int, P: int) -> list[int]:
    offsets = sync_offsets(H, P)
    return [b - a for a, b in zip(offsets, (*offsets[1:], H), strict=True)]


def due_fragment(step: int, H: int, P: int) -> int | None:
    """The fragment whose sync starts after a worker's ``step``-th inner step
    (1-based: the count of steps it has done), or None. Step 0 (nothing done
    yet) syncs nothing."""
    if step <= 0:
        return None
    offsets = sync_offsets(H, P)
    phase = step % H
    # offsets are increasing: a short scan (P is small)
    for p, offset in enumerate(offsets):
        if offset == phase:
            return p
    return None


def fragment_bounds(n_params: int, P: int, sizes: Sequence[int] = (), split: str = "tensors") -> list[tuple[int, int]]:
    """P contiguous, non-empty ranges [lo, hi) covering 0..``n_params``.

    ``split="tensors"`` with the model's tensor ``sizes`` (in the flat
    vector's order; they must add up to ``n_params``): each of the P − 1 cuts
    is the tensor boundary nearest to its equal share k·n/P (the lower one on
    a tie), later than the previous cut and leaving a boundary for every
    fragment after it. ValueError when there are fewer tensors than
    fragments. Without ``sizes``, or with ``split="equal"``: the cuts are
    ⌊k·n/P⌋."""
    if P < 1:
        raise ValueError(f"P must be >= 1, got {P!r}")
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    if n_params < P:
        raise ValueError(f"a model of {n_params} values cannot be cut into P={P} non-empty fragments")
    if split == "equal" or not sizes:
        cuts = [k * n_params // P for k in range(P + 1)]
        return list(zip(cuts[:-1], cuts[1:], strict=True))
    if any(s < 1 for s in sizes) or sum(sizes) != n_params:
        raise ValueError(f"tensor sizes must be >= 1 and add up to {n_params}, got {list(sizes)}")
    if len(sizes) < P:
        raise ValueError(f"the model has {len(sizes)} parameter tensors, fewer than P={P} fragments")
    boundaries = [0]
    for s in sizes:
        boundaries.append(boundaries[-1] + s)
    inner = boundaries[1:-1]  # where a cut may go
    cuts = [0]
    start = 0  # index into inner of the first boundary still allowed
    for k in range(1, P):
        target = k * n_params / P
        last = len(inner) - (P - 1 - k)  # leave one boundary for each later cut
        best = min(range(start, last), key=lambda i: (abs(inner[i] - target), inner[i]))
        cuts.append(inner[best])
        start = best + 1
    cuts.append(n_params)
    return list(zip(cuts[:-1], cuts[1:], strict=True))
