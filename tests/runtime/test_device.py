"""``hetsync run --device``: where the workers of the built-in workloads
compute (hetsync.runtime.config.device_refusal, hetsync.runtime.process,
hetsync.runtime.worker). On the CPU: ``--device cpu`` is the run without
it, and the refusals. On a CUDA device (skipped without one; this workplace
rarely lends one: scripts/gpu-checks.sh runs these there): the workers'
tensors on the GPU after real runs, and no device-to-host copy per step on
the collective path (torch.profiler)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hetsync.errors import BadInput
from hetsync.runtime.config import ProcessOptions, RunConfig, device_refusal
from hetsync.runtime.launch import LOOPBACK, free_port

RANKS = Path(__file__).with_name("device_ranks.py")
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_an_unknown_device_is_refused_naming_the_field():
    with pytest.raises(BadInput, match="device must be one of cpu, cuda, got 'tpu'"):
        ProcessOptions(device="tpu")
    assert RunConfig.from_dict({"process": {"device": "cuda"}}).process.device == "cuda"


@pytest.mark.parametrize(
    ("given", "refused"),
    [
        ({}, None),
        ({"cuda": False}, "torch sees no CUDA device"),
        ({"p2p": ["p2p-random"]}, "p2p-random is peer to peer"),
        ({"path": "collective", "gpus": 1}, "2 workers and 1 GPU(s)"),
        ({"path": "collective", "nccl": False}, "needs NCCL"),
        ({"path": "collective"}, None),  # a GPU per worker
        ({"gpus": 1}, None),  # path ps: the workers share it
    ],
)
def test_what_cuda_needs_of_the_machine_and_the_policies(given, refused):
    args = {"path": "ps", "workers": 2, "cuda": True, "gpus": 2, "nccl": True, "p2p": []} | given
    why = device_refusal("cuda", **args)
    assert (why is None) if refused is None else (refused in why), why
    assert device_refusal("cpu", **(args | {"cuda": False})) is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal of a machine without CUDA")
@pytest.mark.parametrize("path", ["ps", "collective"])
def test_cuda_without_a_gpu_is_refused_in_one_line_before_anything_starts(tmp_path, capsys, path):
    from hetsync.cli import main

    out = tmp_path / "out"
    code = main(
        ["run", "-s", "hetero-4", "-p", "bsp", "--nproc", "2", "--path", path, "--device", "cuda", "-o", str(out)]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and "--device cuda: torch sees no CUDA device" in err and len(err.splitlines()) == 1, err
    assert not out.exists()


@pytest.mark.dist
def test_device_cpu_is_the_run_without_it(tmp_path):
    """BSP for 20 rounds on the collective path (whose buckets now follow the
    device): the same model, bit for bit, and the same summary."""
    from hetsync.cli import main

    models, runs = {}, {}
    for name, extra in (("default", []), ("cpu", ["--device", "cpu"])):
        out = tmp_path / name
        args = ["run", "-s", "elastic-4-signal", "-p", "bsp", "--nproc", "2", "--path", "collective", "--no-plots"]
        assert main([*args, "--set", "max_steps=20", "--set", "max_time_s=120", "--out", str(out), *extra]) == 0
        assert json.loads((out / "run-config.json").read_text())["process"]["device"] == "cpu"
        (runs[name],) = json.loads((out / "summary.json").read_text())
        models[name] = torch.load(out / "model-bsp.pt", weights_only=True)
    assert all(torch.equal(models["default"][k], models["cpu"][k]) for k in models["default"])
    for key in ("updates", "steps", "stop_reason", "final_metrics", "bytes_sent"):
        assert runs["default"][key] == runs["cpu"][key], key
    assert runs["cpu"]["updates"] == 20


def _ranks(out: Path, world: int, flags: list[str], profile: bool = False) -> list[dict]:
    """The runtime's ranks (device_ranks.py) on a loopback group; each worker's placement."""
    env = {**os.environ, "MASTER_ADDR": LOOPBACK, "MASTER_PORT": str(free_port()), "WORLD_SIZE": str(world)}
    env |= {"GLOO_SOCKET_IFNAME": "lo", "HETSYNC_PROFILE": "1" if profile else "0"}
    argv = [sys.executable, str(RANKS), *flags, "--out", str(out), "--no-plots"]
    procs = [
        subprocess.Popen(argv, env={**env, "RANK": str(r)}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for r in range(world)
    ]
    logs = [p.communicate(timeout=240)[0].decode() for p in procs]
    assert [p.returncode for p in procs] == [0] * world, "\n".join(logs)
    return [json.loads((out / f"placement-{w}.json").read_text()) for w in range(world - 1)]


PS_FLAGS = ["--scenario", "elastic-4-signal", "--policies", "diloco:H=4", "--set", "max_steps=6"]
PS_FLAGS += ["--set", "max_time_s=120", "--set", "workload_args={batchnorm: true}"]


@pytest.mark.dist
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=cuda)])
def test_a_workers_model_optimizer_state_buffers_and_batches_are_on_its_device(tmp_path, device):
    """DiLoCo on the ps path (its inner AdamW moments live on the worker) on
    signal1d-cnn with BatchNorm (running statistics: buffers), two workers;
    on one GPU both share cuda:0."""
    where = "cpu" if device == "cpu" else "cuda:0"
    for facts in _ranks(tmp_path, 3, [*PS_FLAGS, "--device", device]):
        assert facts["steps"] > 0 and facts["optimizer state tensors"] > 0, facts
        for part in ("model", "module parameters", "module buffers", "optimizer state", "batches"):
            assert facts[part] == [where], (part, facts)
    (run,) = json.loads((tmp_path / "summary.json").read_text())
    assert run["updates"] > 0 and run["final_metrics"]["accuracy"] > 0


@pytest.mark.dist
@cuda
def test_a_collective_step_on_a_gpu_copies_nothing_to_the_host():
    """BSP on the collective path, one worker on cuda:0 (rank 0 + 1 worker:
    NCCL's group of one), 60 rounds under torch.profiler: every
    device-to-host copy the profiler saw is a payload the wire (gloo) took
    — the model rank 0 fetches to evaluate and at the end — far fewer than
    the steps."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        flags = ["--scenario", "elastic-4-signal", "--policies", "bsp", "--path", "collective", "--device", "cuda"]
        flags += ["--set", "max_steps=60", "--set", "max_time_s=120"]
        (facts,) = _ranks(Path(tmp), 2, flags, profile=True)
    print(facts)
    assert facts["steps"] == 60 and facts["buckets"] == ["cuda:0"] and facts["model"] == ["cuda:0"], facts
    assert facts["optimizer state"] == ["cuda:0"], facts  # (the copy of the server's momentum SGD)
    assert facts["dtoh"] is not None and facts["dtoh"] - facts["host_sends"] <= 2, facts
    assert facts["host_sends"] < facts["steps"] // 4, facts
