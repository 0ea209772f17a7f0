"""Max–min fair sharing of link capacities among flows (progressive filling).

A flow uses a fixed set of links and gets one rate. An allocation is max–min
fair when no flow's rate can be raised without lowering the rate of a flow
that has an equal or smaller rate; equivalently, every flow crosses a
*bottleneck*: a saturated link on which no other flow gets more than it does.
The fair allocation is unique and is computed by progressive filling
(water-filling): raise all rates together; when a link fills up, freeze the
flows crossing it at the current level and continue with the others.

In closed form, one round finds the link whose remaining capacity divided by
its number of unfrozen flows (its *share*) is smallest, freezes every
unfrozen flow crossing such a link at that share, and subtracts what they use
from the links they cross. Each round is a handful of vectorized numpy
operations costing O(L + F_u·K) for L links and F_u unfrozen flows of K links
each; the number of rounds is the number of distinct bottleneck levels (links
whose shares tie within a relative 1e-12 are filled in the same round), so a
homogeneous cluster needs one or two rounds and the worst case is
min(L, F) rounds.

``maxmin_rates`` is the validated entry point. ``progressive_fill`` is the
unchecked core for a caller (the fluid network) that keeps its flows'
links as separate columns and its per-link flow counts up to date.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# Links whose shares are within this relative distance of the smallest one
# are filled in the same round: a numerical tie, not a separate level.
_TIE_RTOL = 1e-12


def maxmin_rates(capacity_Bps: np.ndarray, flow_links: np.ndarray) -> np.ndarray:
    """Return the max–min fair rate of every flow.

    Args:
        capacity_Bps: float array ``[L]``, capacity of each link in bytes/s;
            ``inf`` means unlimited, ``0`` a link that carries nothing.
        flow_links: int array ``[F, K]`` (``K >= 1``), the links each flow
            uses. A link listed twice in one row is used twice (the flow's
            rate counts twice against it).

    Returns:
        float array ``[F]`` of rates in bytes/s. A flow all of whose links are
        unlimited gets ``inf``; a flow crossing a zero-capacity link gets 0.

    Raises:
        ValueError: on a wrong shape or dtype, a negative or NaN capacity, or
            a link index outside ``[0, L)``.
    """
    cap = np.asarray(capacity_Bps, dtype=np.float64)
    links = np.asarray(flow_links)
    if cap.ndim != 1:
        raise ValueError(f"capacity_Bps must be 1-D, got shape {cap.shape}")
    if links.ndim != 2 or links.shape[1] < 1:
        raise ValueError(f"flow_links must have shape [F, K] with K >= 1, got {links.shape}")
    if links.size and links.dtype.kind not in "iu":
        raise ValueError(f"flow_links must hold integer link indices, got dtype {links.dtype}")
    if np.isnan(cap).any() or (cap < 0).any():
        raise ValueError("capacity_Bps must be nonnegative (inf allowed, NaN not)")
    n_links = cap.shape[0]
    if links.size and (links.min() < 0 or links.max() >= n_links):
        raise ValueError(f"flow_links holds a link index outside [0, {n_links})")

    rates = np.empty(links.shape[0], dtype=np.float64)
    if rates.size == 0:
        return rates
    columns = [np.ascontiguousarray(links[:, k], dtype=np.intp) for k in range(links.shape[1])]
    link_flows = np.bincount(links.ravel(), minlength=n_links).astype(np.float64)
    progressive_fill(cap, columns, link_flows, rates)
    return rates


def progressive_fill(
    capacity_Bps: np.ndarray,
    link_columns: Sequence[np.ndarray],
    link_flows: np.ndarray,
    rates: np.ndarray,
) -> None:
    """Write the max–min fair rates into ``rates``; no input checking.

    Args:
        capacity_Bps: float64 array ``[L]`` of link capacities (``inf`` allowed).
        link_columns: K intp arrays of length F; ``link_columns[k][f]`` is the
            k-th link of flow f.
        link_flows: float64 array ``[L]``, how many (flow, column) pairs use
            each link, i.e. the bincount of all columns together; not modified.
        rates: float64 array ``[F]``, overwritten with the rates.
    """
    n_links = capacity_Bps.shape[0]
    n_unfrozen = rates.shape[0]
    remaining = capacity_Bps
    crossing = link_flows  # unfrozen flows crossing each link
    unfrozen: np.ndarray | None = None  # None: every flow
    link_min = np.empty(n_links)
    # x/0 is inf or NaN on links without unfrozen flows; no unfrozen flow
    # sees those shares.
    with np.errstate(divide="ignore", invalid="ignore"):
        while True:
            share = remaining / crossing
            # The smallest share on each flow's path, then the smallest of
            # those among the unfrozen flows crossing each link.
            path_min = share[link_columns[0]]
            for col in link_columns[1:]:
                np.minimum(path_min, share[col], out=path_min)
            if unfrozen is not None:
                path_min = np.where(unfrozen, path_min, np.inf)
            link_min.fill(np.inf)
            for col in link_columns:
                np.minimum.at(link_min, col, path_min)
            # A link whose share no flow crossing it can undercut is a
            # bottleneck: its unfrozen flows are frozen at that share, the
            # smallest on their paths. (A link of unlimited flows only has
            # share = link_min = inf: those flows get inf.)
            link_min *= 1.0 + _TIE_RTOL
            bottleneck = share <= link_min
            hit = bottleneck[link_columns[0]]
            for col in link_columns[1:]:
                hit |= bottleneck[col]
            if unfrozen is None:
                if np.count_nonzero(hit) == n_unfrozen:
                    np.copyto(rates, path_min)
                    return
                unfrozen = ~hit
            else:
                hit &= unfrozen
                unfrozen ^= hit
            np.copyto(rates, path_min, where=hit)
            n_unfrozen -= np.count_nonzero(hit)
            if n_unfrozen == 0:
                return
            # A flow frozen at inf crosses unlimited links only: it uses nothing.
            used = np.where(hit & (path_min < np.inf), path_min, 0.0)
            count = hit.astype(np.float64)
            for col in link_columns:
                remaining = remaining - np.bincount(col, used, n_links)
                crossing = crossing - np.bincount(col, count, n_links)
            # Links left without unfrozen flows (bottlenecks among them) take
            # no part any more; elsewhere clear rounding below zero.
            remaining = np.where(crossing > 0.0, np.maximum(remaining, 0.0), np.inf)
