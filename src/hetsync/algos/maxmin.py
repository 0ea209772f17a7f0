"""Max–min fair sharing of link capacities among flows (progressive filling).

A flow uses a fixed set of links and gets one rate. An allocation is max–min
fair when no flow's rate can be raised without lowering the rate of a flow
that has an equal or smaller rate; equivalently, every flow crosses a
*bottleneck*: a saturated link on which no other flow gets more than it does.
The fair allocation is unique and is computed by progressive filling
(water-filling): raise all rates together; when a link fills up, freeze the
flows crossing it at the current level and continue with the others.

Classic progressive filling repeatedly takes the link with the smallest
*share* (remaining capacity / number of unfrozen flows crossing it), freezes
its unfrozen flows at that share and subtracts what they use, one bottleneck
level per round. This implementation settles, in one round, every link that
is a *local* bottleneck: no unfrozen flow crossing it has a smaller share
elsewhere on its path. Shares only grow while flows freeze below them, so
such a link fills at exactly its current share whatever is settled first;
processing all of them at once gives the same allocation as the one-level
-at-a-time order in far fewer rounds (one when every flow's tightest link is
a local bottleneck, as for a parameter server's links shared by workers with
faster links of their own; more only along chains of bottlenecks that depend
on each other; never more than the number of distinct levels). Shares equal
within a relative 1e-12 count as ties.

Each round costs O(L + F·K) for L links and F flows of K links each, in about
fifteen vectorized numpy calls (gathers of link shares along the paths, a
scatter marking the links a flow can undercut, elementwise work); there are
no Python loops over flows or links.

``maxmin_rates`` is the validated entry point. ``progressive_fill`` is the
unchecked core for a caller (the fluid network) that keeps its flows' links
and per-link flow counts in arrays of its own.
"""

from __future__ import annotations

import numpy as np

# Shares within this relative distance of each other are a numerical tie.
TIE_RTOL = 1e-12


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
    links_kf = np.ascontiguousarray(links.T, dtype=np.intp)
    link_flows = np.bincount(links_kf.ravel(), minlength=n_links).astype(np.float64)
    progressive_fill(cap, links_kf, link_flows, rates)
    return rates


def progressive_fill(
    capacity_Bps: np.ndarray,
    links: np.ndarray,
    link_flows: np.ndarray,
    rates: np.ndarray,
) -> None:
    """Write the max–min fair rates into ``rates``; no input checking.

    Args:
        capacity_Bps: float64 array ``[L]`` of link capacities (``inf`` allowed).
        links: intp array ``[K, F]`` (flows along the last axis, unlike
            ``maxmin_rates``): ``links[k, f]`` is the k-th link of flow f.
        link_flows: float64 array ``[L]``, how many entries of ``links`` name
            each link (its bincount); not modified.
        rates: float64 array ``[F]``, overwritten with the rates.
    """
    links = np.ascontiguousarray(links)  # gathers from a strided view are slower
    n_links = capacity_Bps.shape[0]
    n_unfrozen = rates.shape[0]
    remaining = capacity_Bps
    crossing = link_flows  # unfrozen flows crossing each link
    unfrozen: np.ndarray | None = None  # None: every flow
    # x/0 is inf or NaN on links without unfrozen flows; only frozen flows,
    # which are masked out, see those shares.
    with np.errstate(divide="ignore", invalid="ignore"):
        while True:
            share = remaining / crossing
            path_share = share[links]
            path_min = path_share[0]
            for row in path_share[1:]:  # row by row beats a reduce over axis 0
                path_min = np.minimum(path_min, row)
            if unfrozen is not None:
                path_min = np.where(unfrozen, path_min, np.inf)
            # A link is a bottleneck unless an unfrozen flow crossing it has a
            # smaller share elsewhere on its path. A bottleneck's flows are
            # frozen at its share, the smallest on their paths. (On a link
            # of unlimited flows only, share = path_min = inf: they get inf.)
            beaten = np.where(path_share > path_min * (1.0 + TIE_RTOL), links, n_links)
            not_bottleneck = np.zeros(n_links + 1, dtype=bool)
            not_bottleneck[beaten] = True
            beaten_everywhere = not_bottleneck[links]
            hit = beaten_everywhere[0]
            for row in beaten_everywhere[1:]:
                hit = hit & row
            hit = ~hit
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
            k = links.shape[0]
            flat = links.ravel()
            crossing = crossing - np.bincount(flat, np.tile(hit, k).astype(np.float64), n_links)
            # Clear rounding below zero on links filled to the brim. Links left
            # without unfrozen flows get meaningless shares seen by no one.
            remaining = np.maximum(remaining - np.bincount(flat, np.tile(used, k), n_links), 0.0)
