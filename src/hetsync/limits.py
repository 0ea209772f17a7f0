"""Upper bounds on what a user can set, and memory estimates checked before
anything is allocated.

Every size a scenario, a policy spec or a command-line option can name is
bounded, so that a typo (``batch_size=1000000000000``) or a hostile file
ends in a one-line :class:`~hetsync.errors.BadInput` instead of a 7 TiB
allocation, an overflow deep in the simulator, or a hang. The bounds are far
above what any built-in scenario or paper setting uses; docs/scenarios.md
lists them.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

from hetsync.errors import BadInput

if TYPE_CHECKING:
    from hetsync.scenario import Scenario
    from hetsync.workloads import Workload

MAX_WORKERS = 100_000  # simulated workers (large-1024 is the largest built-in; 10,240 is a target)
MAX_BATCH_SIZE = 1_000_000  # samples in one worker's mini-batch
MAX_SEED = 2**32 - 1  # what numpy's and torch's seeding both take
MAX_MODEL_BYTES = 10**13  # 10 TB per model transfer
MAX_STEPS = 10**9  # max_steps per worker
MAX_TIME_S = 1e8  # max_time_s, load periods (about three years)
MAX_STEP_S = 1e6  # fixed_s, per_sample_s, delay_s, latency_s: seconds per step or transfer
MAX_FACTOR = 1e6  # slowdown, straggler_factor, load factors
MAX_JITTER = 10.0  # log-sd of the lognormal step noise
MAX_LR = 1e3  # larger rates only make every workload diverge
MIN_BANDWIDTH_BPS = 1.0  # bytes per second (inf: a free link)
MIN_EVAL_EVERY_S = 1e-3
MAX_EVALUATIONS = 100_000  # max_time_s / eval_every_s
MAX_NPROC = 64  # worker processes `hetsync run` starts on one machine (torchrun for more)
MAX_WORKER_TIMEOUT_S = 86_400.0  # a day, the process group's own timeout
MIN_CHECKPOINT_EVERY_S = 0.1
MAX_SCENARIO_FILE_BYTES = 2**20  # 1 MiB: a scenario needs a few KiB; reading YAML takes seconds per MiB

_GIB = 2**30
_GRADIENT_COPIES = 2  # what the forward pass keeps, and its gradient in the backward pass
_MODEL_COPIES = 3  # per worker: local model, gradient, optimizer or pushed delta


def shown(x: float) -> str:
    """A bound as a user would type it: 1000000, 0.001, 1e+08, inf."""
    if math.isfinite(x) and x == int(x) and abs(x) < 1e9:
        return str(int(x))
    return f"{x:g}"


def physical_memory_bytes() -> int:
    """This machine's memory (16 GiB where the OS does not say)."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, OSError, ValueError):
        return 16 * _GIB


def batch_bytes(scenario: Scenario, workload: Workload) -> int:
    """About how much memory one worker's mini-batch takes: its inputs and
    targets, plus what the model keeps for the backward pass and the outputs,
    twice (their gradients). Measured on the model itself: the bytes the
    autograd graph saves for batches of 2 and of 4 samples, whose difference
    is what each further sample adds (the parameters cancel out)."""
    x, y = workload.train_x, workload.train_y
    sample = x[0].numel() * x.element_size() + y[0].numel() * y.element_size()
    try:
        per_sample = (_graph_bytes(workload, 4) - _graph_bytes(workload, 2)) / 2
    except Exception:  # a user's model that will not run like this: count the data alone
        per_sample = 0.0
    return int(scenario.job.batch_size * (sample + _GRADIENT_COPIES * max(0.0, per_sample)))


def _graph_bytes(workload: Workload, batch: int) -> int:
    """Bytes of the tensors a forward pass on ``batch`` samples keeps for
    backward, and of its outputs (eval mode: no running statistics move)."""
    import torch

    total = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal total
        total += t.numel() * t.element_size()
        return t

    model = workload.model
    training = model.training
    model.eval()
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = model(workload.train_x[:batch])
            workload.loss_fn(out, workload.train_y[:batch])
    finally:
        model.train(training)
    return total + out.numel() * out.element_size()


def check_memory(scenario: Scenario, workload: Workload, *, processes: int = 1) -> None:
    """Refuse a scenario whose mini-batches (``processes`` of them at once) or
    per-worker models would not fit in this machine's memory; the message
    names the key and the estimate."""
    have = physical_memory_bytes()
    need = batch_bytes(scenario, workload) * processes
    if need > have:
        where = f" ({processes} worker processes at once)" if processes > 1 else ""
        raise BadInput(
            f"scenario key 'batch_size' = {scenario.job.batch_size} needs about {need / _GIB:.1f} GiB for the "
            f"mini-batches of workload {workload.name!r}{where}, more than this machine's "
            f"{have / _GIB:.1f} GiB: use a smaller batch_size"
        )
    need = scenario.cluster.workers * workload.model_nbytes * _MODEL_COPIES
    if need > have:
        raise BadInput(
            f"scenario key 'workers' = {scenario.cluster.workers} needs about {need / _GIB:.1f} GiB for the workers' "
            f"copies of the {workload.model_nbytes}-byte model of workload {workload.name!r}, more than this "
            f"machine's {have / _GIB:.1f} GiB: use fewer workers"
        )
