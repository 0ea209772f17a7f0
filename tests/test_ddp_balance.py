"""hetsync.ddp_balance on real gloo process groups (3 processes on loopback).

One spawn runs every check, because starting processes is the slow part:
- with equal batches the weighted hook trains exactly like plain DDP;
- with unequal batches the all-reduced gradient is Σ (x_i / X) g_i, and a few
  SGD steps equal single-process SGD on the union of the ranks' batches;
- the controller moves samples away from a rank that is slower per sample,
  keeps Σ x_i = X, and every rank agrees on the sizes.
"""

from __future__ import annotations

import gc
import json
import os
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from hetsync.ddp_balance import BalancedBatches, BatchShareState, weighted_allreduce_hook
from hetsync.runtime.launch import free_port

pytestmark = pytest.mark.dist  # starts real processes: make test-fast leaves it out

WORLD = 3


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(400, 10, generator=g), torch.randint(0, 3, (400,), generator=g)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 3))


def _flat(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _slices(sizes: list[int], step: int) -> list[slice]:
    """Rank r's rows at a step: consecutive blocks of the data, moving on every step."""
    start = (step * sum(sizes)) % 200
    out = []
    for b in sizes:
        out.append(slice(start, start + b))
        start += b
    return out


def _train(model: nn.Module, sizes_per_step: list[list[int]], rank: int | None, lr: float = 0.5) -> None:
    """SGD on rank's block (rank None: one process on the union of all blocks)."""
    x, y = _data()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss()
    for step, sizes in enumerate(sizes_per_step):
        parts = _slices(sizes, step)
        rows = parts[rank] if rank is not None else slice(parts[0].start, parts[-1].stop)
        opt.zero_grad()
        loss_fn(model(x[rows]), y[rows]).backward()
        opt.step()


def _worker(rank: int, port: int, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    try:
        result = _checks(rank)
        # Every DDP model is gone before the group is destroyed: a Reducer
        # freed after destroy_process_group drops the last reference to the
        # gloo group while holding the GIL, and the group's destructor then
        # joins a gloo thread that waits for the GIL (pytorch/pytorch#56297);
        # that deadlock hung this test in about 1 run in 3.
        gc.collect()
    finally:
        dist.destroy_process_group()
    Path(out, f"rank-{rank}.json").write_text(json.dumps(result))


def _checks(rank: int) -> dict[str, object]:
    result: dict[str, object] = {}
    # 1. equal batches: the hook is plain DDP
    equal = [[8, 8, 8]] * 6
    plain = DistributedDataParallel(_model())
    _train(plain, equal, rank)
    hooked = DistributedDataParallel(_model())
    hooked.register_comm_hook(BatchShareState(8 / 24), weighted_allreduce_hook)
    _train(hooked, equal, rank)
    result["equal_diff"] = float((_flat(plain.module) - _flat(hooked.module)).abs().max())

    # 2. unequal batches: one gradient, then a few steps, against one process
    sizes = [2, 5, 9]
    x, y = _data()
    parts = _slices(sizes, 0)
    model = DistributedDataParallel(_model())
    model.register_comm_hook(BatchShareState(sizes[rank] / sum(sizes)), weighted_allreduce_hook)
    nn.CrossEntropyLoss()(model(x[parts[rank]]), y[parts[rank]]).backward()
    reference = _model()
    rows = slice(parts[0].start, parts[-1].stop)
    nn.CrossEntropyLoss()(reference(x[rows]), y[rows]).backward()
    grad = torch.cat([p.grad.reshape(-1) for p in model.module.parameters()])
    ref = torch.cat([p.grad.reshape(-1) for p in reference.parameters()])
    by_hand = torch.zeros_like(ref)  # Σ (x_i / X) g_i, each g_i computed here too
    plain_mean = torch.zeros_like(ref)  # what DDP's default hook would give: (1/W) Σ g_i
    for i, b in enumerate(sizes):
        m = _model()
        nn.CrossEntropyLoss()(m(x[parts[i]]), y[parts[i]]).backward()
        g_i = torch.cat([p.grad.reshape(-1) for p in m.parameters()])
        by_hand += b / sum(sizes) * g_i
        plain_mean += g_i / WORLD
    result["grad_diff"] = float((grad - ref).abs().max())
    result["grad_vs_weighted_sum"] = float((grad - by_hand).abs().max())
    result["grad_vs_plain_mean"] = float((grad - plain_mean).abs().max())

    steps = [[2, 5, 9], [9, 5, 2], [4, 4, 8], [1, 14, 1], [6, 6, 4]]
    model = DistributedDataParallel(_model())
    state = BatchShareState(1.0)
    model.register_comm_hook(state, weighted_allreduce_hook)
    x, y = _data()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for step, sz in enumerate(steps):
        state.weight = sz[rank] / sum(sz)
        part = _slices(sz, step)[rank]
        opt.zero_grad()
        nn.CrossEntropyLoss()(model(x[part]), y[part]).backward()
        opt.step()
    single = _model()
    _train(single, steps, None)
    result["steps_diff"] = float((_flat(model.module) - _flat(single)).abs().max())

    # 3. the controller: rank 2 takes 3x longer per sample
    bal = BalancedBatches(60)
    model = DistributedDataParallel(_model())
    bal.register(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    per_sample_s = 0.002 * (3 if rank == 2 else 1)  # large enough to stand out of a loaded machine's noise
    for step in range(14):
        b = bal.batch_size
        part = slice(step % 100, step % 100 + b)
        bal.start()
        logits = model(x[part])
        time.sleep(per_sample_s * b)  # the injected slowness: inside the timed forward/backward
        nn.CrossEntropyLoss()(logits, y[part]).backward()
        opt.step()
        opt.zero_grad()
        bal.step_done()
    result["batch_log"] = bal.batch_log
    result["weight"] = bal.state.weight
    return result


def test_weighted_hook_and_controller_on_gloo(tmp_path, monkeypatch):
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    # fork: the children inherit the imported torch (a spawn re-imports it three times over)
    mp.start_processes(_worker, args=(free_port(), str(tmp_path)), nprocs=WORLD, join=True, start_method="fork")
    results = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in range(WORLD)]
    for r in results:
        assert r["equal_diff"] <= 1e-6
        assert r["grad_diff"] <= 1e-6 and r["grad_vs_weighted_sum"] <= 1e-6
        assert r["grad_vs_plain_mean"] > 1e-3  # the weighting matters with unequal batches
        assert r["steps_diff"] <= 1e-6
    logs = [r["batch_log"] for r in results]
    assert logs[0] == logs[1] == logs[2]  # every rank computed the same sizes
    log = logs[0]
    assert log[0] == [20, 20, 20] and all(sum(sizes) == 60 for sizes in log)
    last = log[-4:]
    assert all(s[2] < 15 and s[0] > 20 and s[1] > 20 for s in last), log
    assert [r["weight"] for r in results] == [x / 60 for x in log[-1]]
    assert os.environ["GLOO_SOCKET_IFNAME"] == "lo"
