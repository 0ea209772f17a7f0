"""hetsync.loop with the user's module on a GPU: the parameters and batches
live on ``cuda:0`` in every rank while the transports (gloo) move CPU copies.
Needs a CUDA device; skipped without one (CI has none). On one GPU every rank
shares ``cuda:0``, which is what a small heterogeneous cluster of one machine
looks like, and what NCCL would refuse (one GPU per rank): gloo is the
transport here."""

from __future__ import annotations

import pytest
import torch

from tests.runtime.test_loop import ddp, launched

pytestmark = [
    pytest.mark.dist,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def test_bsp_with_the_module_on_a_gpu_equals_ddp_on_the_cpu(tmp_path):
    """The same script as test_loop's BSP-equals-DDP, its module on the GPU:
    what the server steps (rank 0's optimizer, its module on the GPU too) and
    what the workers load must follow the devices both ways."""
    steps = 20
    (run,) = launched(tmp_path, "bsp", steps, "cuda")
    ours = torch.load(tmp_path / "model-bsp.pt", weights_only=True, map_location="cpu")
    reference = ddp(tmp_path, steps)
    assert sorted(ours) == sorted(reference)
    # cuBLAS and the CPU's kernels round differently; 20 AdamW steps keep that far below 1e-4
    assert max((ours[k] - reference[k]).abs().max().item() for k in ours) <= 1e-4
    assert run["steps"] == 2 * steps and run["updates"] == steps
    assert run["final_metrics"]["accuracy"] > 0.5


@pytest.mark.parametrize("policy", ["asp", "diloco:H=5", "wbsp-overlap", "p2p-random"])
def test_policies_with_local_or_server_steps_train_a_module_on_a_gpu(tmp_path, policy):
    """Server steps (asp), local optimizer steps and deltas (diloco), pushes of
    summed steps (wbsp-overlap) and models exchanged between peers (p2p)."""
    steps = 12
    (run,) = launched(tmp_path, policy, steps, "cuda")
    assert run["stop_reason"] == "no workers left", run
    assert run["steps"] == 2 * steps and run["updates"] > 0
    assert run["final_metrics"]["accuracy"] > 0.4


def test_batchnorm_statistics_come_back_from_the_gpu(tmp_path):
    steps = 12
    launched(tmp_path, "asp", steps, "bn", "cuda")
    ours = torch.load(tmp_path / "model-asp.pt", weights_only=True, map_location="cpu")
    workers = [torch.load(tmp_path / f"buffers-{w}.pt", weights_only=True, map_location="cpu") for w in range(2)]
    for key in ("norm.running_mean", "norm.running_var"):
        assert torch.allclose(ours[key], (workers[0][key] + workers[1][key]) / 2, atol=1e-6), key
    assert ours["norm.num_batches_tracked"].item() == steps
