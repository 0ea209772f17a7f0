"""Ranks of ``python -m hetsync.runtime`` for tests/runtime/test_device.py:
the real runtime, each worker writing down where its tensors are once it
has served every run.

    RANK=r WORLD_SIZE=n MASTER_ADDR=127.0.0.1 MASTER_PORT=p python device_ranks.py [runtime flags]

Worker w writes ``<--out>/placement-<w>.json``: the devices of its flat
model, the workload's module (parameters and buffers), its optimizers'
state (the local one's, and on the collective path its copy of the
server's), its shard (the batches are drawn from it) and the collective
path's buckets; the steps it took; and ``host_sends``, the payloads that
left the device for the wire (gloo). With ``HETSYNC_PROFILE=1`` its whole
serve runs under ``torch.profiler`` with CUDA activity and ``dtoh`` counts
the device-to-host copies the profiler saw.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import torch

from hetsync.runtime import worker as W
from hetsync.runtime.__main__ import main

_serve, _send = W.WorkerProcess.serve, W.WorkerProcess._send


def _devices(tensors: Any) -> list[str]:
    return sorted({str(t.device) for t in tensors})


def _state_tensors(steppers: list[Any]) -> list[torch.Tensor]:
    """The optimizers' per-parameter state (momentum, moments); Adam's step
    counters are one-value CPU tensors by torch's design and left out."""
    out = []
    for stepper in steppers:
        if stepper is not None:
            for per_param in stepper.state_dict().get("state", {}).values():
                out += [t for t in per_param.values() if isinstance(t, torch.Tensor) and t.dim() > 0]
    return out


def placement(wp: Any) -> dict[str, Any]:
    module = wp.workload.model
    return {
        "model": _devices([wp.model.local]),
        "module parameters": _devices(module.parameters()),
        "module buffers": _devices(module.buffers()),
        "optimizer state": _devices(_state_tensors([wp.model.stepper, wp.replica])),
        "optimizer state tensors": len(_state_tensors([wp.model.stepper, wp.replica])),
        "batches": _devices([wp.shard.x, wp.shard.y]),
        "buckets": _devices([b.buf for b in wp.reducer.buckets]) if wp.reducer is not None else [],
        "steps": wp.steps,
        "host_sends": wp.host_sends,
    }


def serve(self: Any) -> None:
    self.host_sends = 0
    dtoh = None
    if os.environ.get("HETSYNC_PROFILE") == "1":
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            _serve(self)
        # kineto names them "Memcpy DtoH (Device -> Pageable)" / "(Device -> Pinned)"
        dtoh = sum(e.count for e in prof.key_averages() if "DtoH" in e.key)
    else:
        _serve(self)
    facts = placement(self) | {"dtoh": dtoh}
    (Path(self.out) / f"placement-{self.w}.json").write_text(json.dumps(facts, indent=1))


def send(self: Any, msg: Any, payload: torch.Tensor | None = None) -> None:
    if payload is not None and payload.device.type != "cpu":
        self.host_sends = getattr(self, "host_sends", 0) + 1
    _send(self, msg, payload)


if __name__ == "__main__":
    argv = sys.argv[1:]
    W.WorkerProcess.out = argv[argv.index("--out") + 1]  # type: ignore[attr-defined]
    W.WorkerProcess.serve = serve  # type: ignore[method-assign]
    W.WorkerProcess._send = send  # type: ignore[method-assign]
    sys.exit(main(argv))
