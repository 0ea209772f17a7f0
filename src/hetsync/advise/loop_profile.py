"""Profile your own training loop: the script you run under a policy with
:func:`hetsync.init`, timed as it is, becomes the cluster file that
``hetsync advise`` simulates.

``hetsync profile --script train.py [--emulate SCENARIO] -- ARGS`` starts the
script on ``--nproc`` workers plus rank 0 (as ``hetsync launch`` does) with
``HETSYNC_PROFILE`` set. ``hetsync.init`` then gives its handle a :class:`Profiler`
instead of running the policy the script names, and the script runs
unchanged:

- ``sync.optimizer(model, opt)`` on a worker returns a
  :class:`ProfilingOptimizer`: ``opt.step()`` steps the user's optimizer
  (the model trains as it would alone, no synchronization) and records the
  time since the previous ``step()`` returned — data loading, forward,
  backward, clipping and the optimizer step: everything the loop does per
  step. ``sync.batch_size`` (and ``sync.loader``) cycle through a few batch
  sizes (default ``b/2, b, 2b`` of the scenario's ``batch_size``) so the
  fit sees the per-sample cost; the first rounds are warm-up. ``sync.done``
  turns true after ``compute_s`` seconds. Each step then sleeps what the
  emulated cluster adds for this worker, as the runtime's workers do (a
  cluster with ``runtime_timing: modelled``: until the step lasts its
  modelled time, as ``hetsync run --pace``): the cluster of ``--emulate``,
  else the scenario the script passed to ``init`` — the loop is timed as
  ``hetsync launch`` runs it (:func:`emulated_cluster`) — at the run's
  worker count.
- ``sync.finish()`` times every link (worker–server, worker–worker) with
  transfers around the model's size, the same code as ``hetsync profile``'s
  built-in job (:mod:`hetsync.advise.profile_job`), and rank 0 writes ``raw.json``
  with the steps, the transfers, the scenario the script passed to
  ``init``, the model's size, the user's optimizer as scenario keys
  (:func:`optimizer_keys`) and ``--workload``'s reference.

The command then fits it as it fits the built-in job, but ``cluster.yaml``
keeps only the cluster of the script's scenario (timing keys fitted to the
loop, ``model_bytes`` of the user's model, workers, seed, batch): the run's
time limit, evaluation interval and target were for the user's model in that
run. The simulator's job is the user's model where ``--workload
module:function`` names it (with the script's target and optimizer), else
the built-in digits-mlp as a stand-in (:func:`hetsync.advise.profile.script_job`),
which advise says.

Under plain torchrun, ``HETSYNC_PROFILE='{"out": "runs/prof"}' torchrun ...
train.py`` does the same, and ``hetsync profile --from-raw runs/prof/raw.json``
fits it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from hetsync.advise.profile_job import RAW_JSON, emulated_step, link_sizes, links_and_gather, paced, raw_record
from hetsync.errors import BadInput
from hetsync.optim import OptimizerView, gpu_devices, wait_for
from hetsync.scenario import Scenario

PROFILE_ENV = "HETSYNC_PROFILE"
WARMUP_ROUNDS = 2  # untimed steps per batch size first


@dataclass(frozen=True)
class ProfileSettings:
    """What ``hetsync profile --script`` asks of the script's processes."""

    out: str
    compute_s: float = 6.0
    link_reps: int = 5
    batch_sizes: tuple[int, ...] | None = None  # None: b/2, b, 2b of the scenario's batch
    emulate: str | None = None
    workload: str | None = None  # the user's model for the simulator (module:function), recorded in raw.json

    def __post_init__(self) -> None:
        if not isinstance(self.out, str) or not self.out:
            raise BadInput(f"{PROFILE_ENV}: 'out' must be a folder path, got {self.out!r}")
        if not (isinstance(self.compute_s, (int, float)) and 0 < self.compute_s <= 600):
            raise BadInput(f"{PROFILE_ENV}: 'compute_s' must be seconds in (0, 600], got {self.compute_s!r}")
        if not (isinstance(self.link_reps, int) and 1 <= self.link_reps <= 100):
            raise BadInput(f"{PROFILE_ENV}: 'link_reps' must be an integer in 1..100, got {self.link_reps!r}")
        if self.batch_sizes is not None and (
            not self.batch_sizes or any(not isinstance(b, int) or b < 1 for b in self.batch_sizes)
        ):
            raise BadInput(f"{PROFILE_ENV}: 'batch_sizes' must be whole numbers >= 1, got {self.batch_sizes!r}")
        if self.workload is not None and (not isinstance(self.workload, str) or ":" not in self.workload):
            raise BadInput(f"{PROFILE_ENV}: 'workload' must be module:function, got {self.workload!r}")

    def to_env(self) -> str:
        return json.dumps(
            {
                "out": self.out,
                "compute_s": self.compute_s,
                "link_reps": self.link_reps,
                "batch_sizes": list(self.batch_sizes) if self.batch_sizes is not None else None,
                "emulate": self.emulate,
                "workload": self.workload,
            }
        )

    @classmethod
    def from_env(cls, text: str) -> ProfileSettings:
        try:
            raw = json.loads(text)
        except ValueError:
            raise BadInput(f'{PROFILE_ENV} must be a JSON object such as \'{{"out": "runs/prof"}}\'') from None
        if not isinstance(raw, dict):
            raise BadInput(f'{PROFILE_ENV} must be a JSON object such as \'{{"out": "runs/prof"}}\'')
        known = {"out", "compute_s", "link_reps", "batch_sizes", "emulate", "workload"}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise BadInput(f"{PROFILE_ENV}: unknown key {unknown[0]!r} (known: {', '.join(sorted(known))})")
        if "out" not in raw:
            raise BadInput(f"{PROFILE_ENV}: 'out' (the folder for raw.json) is required")
        sizes = raw.get("batch_sizes")
        return cls(
            out=raw["out"],
            compute_s=raw.get("compute_s", 6.0),
            link_reps=raw.get("link_reps", 5),
            batch_sizes=tuple(sizes) if isinstance(sizes, list) else sizes,
            emulate=raw.get("emulate"),
            workload=raw.get("workload"),
        )


def settings_from_env() -> ProfileSettings | None:
    text = os.environ.get(PROFILE_ENV)
    return ProfileSettings.from_env(text) if text else None


def step_sizes(settings: ProfileSettings, scenario: Scenario) -> list[int]:
    from hetsync.steptime import batch_sizes_for

    if settings.batch_sizes is not None:
        return sorted(set(settings.batch_sizes))
    return list(batch_sizes_for(scenario.job.batch_size))


def optimizer_keys(optimizer: torch.optim.Optimizer) -> dict[str, Any] | None:
    """The scenario keys (``lr``, ``optimizer``) of the user's optimizer, for
    the simulator to learn the user's workload with it: plain SGD (momentum,
    Nesterov, weight decay) or AdamW (betas, eps, weight decay), from its
    first parameter group at its base rate (a scheduler's ``initial_lr``);
    None for another optimizer (the scenario's defaults then apply)."""
    group = optimizer.param_groups[0]
    lr = float(group.get("initial_lr", group["lr"]))
    if type(optimizer) is torch.optim.SGD:
        opt: dict[str, Any] = {"name": "sgd"}
        for key in ("momentum", "weight_decay"):
            if group.get(key):
                opt[key] = float(group[key])
        if group.get("nesterov"):
            opt["nesterov"] = True
    elif type(optimizer) is torch.optim.AdamW:
        opt = {"name": "adamw", "betas": [float(b) for b in group["betas"]], "eps": float(group["eps"])}
        opt["weight_decay"] = float(group["weight_decay"])
    else:
        return None
    return {"lr": lr, "optimizer": opt}


def emulated_cluster(settings: ProfileSettings, scenario: Scenario) -> Scenario | None:
    """The cluster a profiling run plays on this machine, at the run's worker
    count: ``--emulate``'s when given (it wins over the script's); else the
    scenario the script passed to :func:`hetsync.init`, which ``hetsync
    launch`` would emulate too (its speeds, delays, noise, stragglers, load
    and links), when it has anything to emulate; else None (the loop as it
    is)."""
    if settings.emulate is not None:
        from hetsync.scenario import load_scenario

        return load_scenario(settings.emulate).with_workers(scenario.cluster.workers)
    return scenario if _emulates(scenario) else None


def _emulates(sc: Scenario) -> bool:
    """Whether running ``sc``'s cluster changes a step or a transfer (what
    :class:`~hetsync.driver.timing.TimingModel` and the link floors apply)."""
    import math

    return bool(
        sc.timing.modelled
        or any(s != 1.0 for s in sc.cluster.slowdown)
        or any(d > 0 for d in sc.cluster.delay_s)
        or sc.timing.jitter > 0
        or sc.timing.straggler_prob > 0
        or sc.cluster.background_load is not None
        or sc.cluster.link_load is not None
        or any(math.isfinite(b) for b in sc.cluster.bandwidth_Bps)
    )


class Profiler:
    """A profiling run's part in this process (held by :class:`hetsync.loop.Sync`,
    which asks it for the batch size, ``done``, the optimizer and ``finish``)."""

    def __init__(self, rank: int, scenario: Scenario, settings: ProfileSettings, out: Path) -> None:
        self.rank = rank
        self.scenario = scenario
        self.workers = scenario.cluster.workers
        self.settings = settings
        self.out = out
        self.sizes = step_sizes(settings, scenario)
        self.emulated = emulated_cluster(settings, scenario)
        self.opt: ProfilingOptimizer | None = None
        self._link_bytes: list[int] = []
        self._optimizer_keys: dict[str, Any] | None = None

    @property
    def batch_size(self) -> int:
        return self.opt.batch_size if self.opt is not None else self.sizes[0]

    @property
    def done(self) -> bool:
        return self.opt is not None and self.opt.done

    def optimizer(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> ProfilingOptimizer:
        """Rank 0: coordinate the profile and exit. A worker: the timing wrapper."""
        trainable = [p for p in model.parameters() if p.requires_grad]
        model_nbytes = sum(p.numel() * p.element_size() for p in trainable)
        self._link_bytes = link_sizes(model_nbytes)
        self._optimizer_keys = optimizer_keys(optimizer)
        dist.barrier()  # every worker starts timing at once, as in training
        if self.rank == 0:
            self._coordinate(type(model).__name__, model_nbytes)  # never returns
        timing = None
        if self.emulated is not None:
            from hetsync.driver.timing import TimingModel

            timing = TimingModel(self.emulated)
        self.opt = ProfilingOptimizer(optimizer, self.rank - 1, self.sizes, self.settings.compute_s, timing)
        return self.opt

    def finish(self) -> None:
        """A worker's loop has ended: time the links with the others, hand the steps to rank 0."""
        opt = self.opt
        assert opt is not None
        compute = {"steps": opt.records(), "failed_batches": {}, "loop_s": opt.elapsed_s(), "timed_out": opt.done}
        opt.done = True
        self._links_and_gather(compute)

    def _links_and_gather(self, compute: dict[str, Any]) -> list[Any]:
        """After every loop has ended: the links, then everything to rank 0."""
        return links_and_gather(
            self.rank, self.workers, self.emulated, self._link_bytes, self.settings.link_reps, compute
        )

    def _coordinate(self, model_name: str, model_nbytes: int) -> None:
        """Rank 0: wait for the loops, time the links, write ``raw.json``, exit."""
        from hetsync.outdir import write_json_atomic
        from hetsync.runtime.process import _write_status

        started = time.time()
        gathered = self._links_and_gather({})
        sc = self.scenario
        job = dict(sc.source) if sc.source is not None else sc.to_dict()
        job.update(name=sc.name, workers=sc.cluster.workers, model_bytes=model_nbytes)
        emulate, by = self.settings.emulate, "--emulate"
        if emulate is None and self.emulated is not None:  # the script's own scenario, as hetsync launch plays it
            emulate, by = sc.name, "script"
        raw = raw_record(
            self.workers,
            self.sizes,
            self._link_bytes,
            self.settings.compute_s,
            emulate,
            gathered,
            paced_emulation=paced(self.emulated),
        )
        raw |= {
            "emulated_by": by if emulate is not None else None,
            "workload": self.settings.workload,
            "optimizer": self._optimizer_keys,
            "job": job,
            "model": model_name,
            "model_bytes": model_nbytes,
            "script": [sys.executable, *sys.argv],
            "cwd": os.getcwd(),  # (the script's path and arguments are as given there)
            "loop_s": time.time() - started,
        }
        folder = Path(self.settings.out)
        folder.mkdir(parents=True, exist_ok=True)
        write_json_atomic(folder / RAW_JSON, raw)
        dist.destroy_process_group()
        _write_status(self.out, 0, "")  # the launcher's sign that rank 0 finished its part
        sys.stdout.flush()
        os._exit(0)


class ProfilingOptimizer(OptimizerView):
    """The user's optimizer in a profiling run: ``step()`` steps it and
    records how long this step of the loop took; the rest is the wrapped
    optimizer's (:class:`~hetsync.optim.OptimizerView`)."""

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        worker: int,
        sizes: list[int],
        compute_s: float,
        timing: Any,
    ) -> None:
        super().__init__(optimizer)
        self._w = worker
        self._sizes = sizes
        self._compute_s = compute_s
        self._timing = timing
        self._pace = timing is not None and paced(timing.sc)  # the step lasts the emulated cluster's modelled one
        self._steps = 0
        self._rows: list[list[float]] = []
        self.done = False
        self._t0 = time.perf_counter()  # the phase starts now, on every worker together
        self._last = self._t0  # when the previous step ended
        self._gpus = gpu_devices(p for g in optimizer.param_groups for p in g["params"])

    @property
    def batch_size(self) -> int:
        return self._sizes[self._steps % len(self._sizes)]

    def step(self, closure: Callable[[], Any] | None = None) -> Any:  # type: ignore[override]
        loss = closure() if closure is not None else None
        if self.done:
            return loss
        batch = self.batch_size
        start = self._last
        self.optimizer.step()
        wait_for(self._gpus)  # (a GPU's queued kernels belong to this step)
        measured = time.perf_counter() - start
        if self._timing is not None:
            measured = emulated_step(self._timing, self._w, start, measured, start - self._t0, batch, self._pace)
        end = time.perf_counter()
        if self._steps >= WARMUP_ROUNDS * len(self._sizes):
            self._rows.append([start - self._t0, batch, end - start, measured])
        self._steps += 1
        self._last = end
        if end - self._t0 >= self._compute_s:
            self.done = True
        return loss

    def records(self) -> list[list[float]]:
        return list(self._rows)

    def elapsed_s(self) -> float:
        return time.perf_counter() - self._t0
