"""Ranks of a real gloo group for tests/runtime/test_collective.py: rank 0
stands for hetsync's rank 0 (it joins no round), ranks 1..N are workers that
reduce rounds with hetsync.runtime.collective.RoundReducer and check what
comes back against the weighted mean computed by hand.

    RANK=r WORLD_SIZE=n MASTER_ADDR=127.0.0.1 MASTER_PORT=p python collective_ranks.py
"""

from __future__ import annotations

import os
import sys
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from hetsync.errors import BadInput
from hetsync.runtime.collective import WAIT_SLICE_S, GroupBroken, RoundReducer, form_workers_group, workers_group

SIZES = [5, 3, 7, 2]  # four "parameters"; a 6-element cap makes four buckets (one larger than it)


def grads_of(worker: int, round_: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(100 * round_ + worker)
    return [torch.randn(n, generator=g) for n in SIZES]


def main() -> int:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=60))
    form_workers_group(world)
    workers = list(range(world - 1))
    if rank == 0:  # (in no round: the workers' group holds ranks 1..N only)
        dist.barrier()
        dist.barrier()
        dist.destroy_process_group()
        return 0
    w = rank - 1
    reducer = RoundReducer(SIZES, group=workers_group(), cap_bytes=6 * 4)
    assert [b.members for b in reducer.buckets] == [[3], [2], [1], [0]], reducer.buckets
    # round 1: batch sizes 16, 32, ...; gradients handed in as backward does, last parameter first
    batches = {v: 16 * (v + 1) for v in workers}
    reducer.begin(batches[w])
    mine = grads_of(w, 1)
    for i in reversed(range(len(SIZES))):
        reducer.add(i, mine[i])
    got = reducer.mean()
    total = sum(batches.values())
    want = torch.cat([sum(batches[v] * grads_of(v, 1)[i] for v in workers) / total for i in range(len(SIZES))])
    assert torch.allclose(got, want, atol=1e-6), (got, want)
    # round 2: worker 0 computed nothing (zero weight); the others' parameters 1 got no gradient
    reducer.begin(0 if w == 0 else batches[w])
    if w != 0:
        g2 = grads_of(w, 2)
        reducer.add_flat(torch.cat(g2))
    params = [torch.nn.Parameter(torch.zeros(n)) for n in SIZES]
    weight = reducer.mean_into_grads(params)
    rest = [v for v in workers if v != 0]
    assert weight == sum(batches[v] for v in rest), weight
    for i in range(len(SIZES)):
        want_i = sum(batches[v] * grads_of(v, 2)[i] for v in rest) / weight if rest else torch.zeros(SIZES[i])
        assert torch.allclose(params[i].grad, want_i, atol=1e-6), (i, params[i].grad, want_i)
    # round 3: a gradient handed in twice (backward twice before opt.step) is refused, loudly
    reducer.begin(batches[w])
    reducer.add(3, torch.ones(2))
    try:
        reducer.add(3, torch.ones(2))
    except BadInput as e:
        assert "accumulation" in str(e), e
    else:
        raise AssertionError("a second gradient for one parameter in one round was taken")
    reducer.flush()
    reducer.mean()  # (every worker finishes the round: the group stays in step)
    # round 4: the last worker has given the round up, alive (gloo fails no one's wait): once the
    # others know the group is broken (the server said so) their wait ends, within a slice or two
    last = workers[-1]
    if w != last:
        reducer.broken = threading.Event()
        reducer.begin(batches[w])
        reducer.add_flat(torch.cat(grads_of(w, 4)))
        reducer.broken.set()
        t0 = time.monotonic()
        try:
            reducer.mean()
        except GroupBroken:
            waited_s = time.monotonic() - t0
            assert waited_s < 30 * WAIT_SLICE_S, waited_s
        else:
            raise AssertionError("a round the group will not finish was waited for to its end")
        reducer.abandon()
    dist.barrier()  # (all ranks: the others have given up their round before the last one joins it)
    if w == last:  # its part of round 4, late: the others' abandoned collectives end, the group is clean
        reducer.begin(0)
        reducer.mean()
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank}: ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
