"""Sharded servers: what both drivers need to agree on (issue 27).

With ``--servers S`` the flat model is cut into S contiguous ranges
(:func:`shard_ranges`) held by S servers: server 0 is rank 0 (it still runs
the policy), server k ≥ 1 is the process (the runtime) or the network node
(the simulator) numbered :func:`server_rank` — after the N workers. A push
sends range k to server k, a pull gets range k from server k, in parallel.
The runtime carries them with torch.distributed processes
(:mod:`hetsync.runtime.shards`), the simulator as S flows per push or pull
(:mod:`hetsync.sim.engine`). What cannot be split is refused, by both, with
the same one line (:func:`check_servers`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hetsync.errors import BadInput

MAX_SERVERS = 64


def shard_ranges(n_params: int, servers: int) -> list[tuple[int, int]]:
    """``servers`` contiguous ranges [lo, hi) covering ``n_params`` values,
    their sizes differing by at most one (the first ones larger)."""
    if not 1 <= servers <= n_params:
        raise BadInput(f"servers must be between 1 and the model's {n_params} parameters, got {servers}")
    base, extra = divmod(n_params, servers)
    ranges, lo = [], 0
    for k in range(servers):
        hi = lo + base + (1 if k < extra else 0)
        ranges.append((lo, hi))
        lo = hi
    return ranges


def server_rank(k: int, workers: int) -> int:
    """The process rank of server ``k`` (0: rank 0; the others follow the workers)."""
    return 0 if k == 0 else workers + k


def parse_server_counts(given: str, flag: str) -> tuple[int, ...]:
    """A command line's comma-separated server counts (``flag`` names the
    option), in order, each once; BadInput in one line unless each is in
    1..MAX_SERVERS."""
    try:
        counts = tuple(dict.fromkeys(int(x) for x in given.split(",") if x.strip()))
    except ValueError:
        counts = ()
    if not counts or any(not 1 <= k <= MAX_SERVERS for k in counts):
        raise BadInput(f"{flag} takes server counts in 1..{MAX_SERVERS}, comma-separated; got {given!r}")
    return counts


def check_servers(servers: int, scenario: Any, policies: Sequence[Any], *, path: str, driver: str = "dist") -> None:
    """BadInput, in one line, when ``servers`` > 1 cannot carry this run:
    gradient clipping by the global norm (no server sees the whole
    gradient), delay compensation (the base models would be split too),
    peer-to-peer policies and the collective path (no server holds a model);
    on real processes (``driver="dist"``) also fragments (Streaming DiLoCo),
    which only the simulator cuts by the servers' ranges."""
    if not isinstance(servers, int) or isinstance(servers, bool) or not 1 <= servers <= MAX_SERVERS:
        raise BadInput(f"--servers must be an integer in [1, {MAX_SERVERS}], got {servers!r}")
    if servers == 1:
        return
    why = None
    if path != "ps":
        why = "the collective path holds no model on any server: drop --servers or use --path ps"
    elif scenario.job.clip_norm is not None:
        why = "clip_norm clips by the whole gradient's norm, which no shard sees: drop clip_norm or use --servers 1"
    else:
        for policy in policies:
            if policy.topology == "p2p":
                why = f"{policy.label} is peer to peer: no server holds a model; drop --servers"
            elif policy.fragmented and driver == "dist":
                why = f"{policy.label} pushes and pulls fragments, which the servers' ranges would cut: use --servers 1"
            elif policy.needs_base_models():
                why = f"{policy.label} compensates delays against models the shards would split: use --servers 1"
            if why:
                break
    if why:
        raise BadInput(f"--servers {servers}: {why}")
