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
  turns true after ``compute_s`` seconds. With ``--emulate`` each step then
  sleeps what the emulated cluster adds for this worker, as the runtime's
  workers do (a cluster with ``runtime_timing: modelled``: until the step
  lasts its modelled time, as ``hetsync run --pace``).
- ``sync.finish()`` times every link (worker–server, worker–worker) with
  transfers around the model's size, the same code as ``hetsync profile``'s
  built-in job (:mod:`hetsync.profile_job`), and rank 0 writes ``raw.json``
  with the steps, the transfers, the scenario the script passed to
  ``init`` and the model's size.

The command then fits it as it fits the built-in job: ``cluster.yaml`` has the
script's scenario (workload, target, recipe) with the measured timing keys
and ``model_bytes`` of the user's model. The simulator's *convergence* per
step is still that scenario's workload: the profile measures the cluster and
the model's cost, not how the user's model learns.

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

from hetsync.errors import BadInput
from hetsync.optim import OptimizerView, gpu_devices, wait_for
from hetsync.profile_job import RAW_JSON, emulated_step, link_sizes, links_and_gather, paced, raw_record
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

    def to_env(self) -> str:
        return json.dumps(
            {
                "out": self.out,
                "compute_s": self.compute_s,
                "link_reps": self.link_reps,
                "batch_sizes": list(self.batch_sizes) if self.batch_sizes is not None else None,
                "emulate": self.emulate,
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
        known = {"out", "compute_s", "link_reps", "batch_sizes", "emulate"}
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
        )


def settings_from_env() -> ProfileSettings | None:
    text = os.environ.get(PROFILE_ENV)
    return ProfileSettings.from_env(text) if text else None


def step_sizes(settings: ProfileSettings, scenario: Scenario) -> list[int]:
    from hetsync.steptime import batch_sizes_for

    if settings.batch_sizes is not None:
        return sorted(set(settings.batch_sizes))
    return list(batch_sizes_for(scenario.batch_size))


class Profiler:
    """A profiling run's part in this process (held by :class:`hetsync.loop.Sync`,
    which asks it for the batch size, ``done``, the optimizer and ``finish``)."""

    def __init__(self, rank: int, scenario: Scenario, settings: ProfileSettings, out: Path) -> None:
        self.rank = rank
        self.scenario = scenario
        self.workers = scenario.workers
        self.settings = settings
        self.out = out
        self.sizes = step_sizes(settings, scenario)
        self.emulated = None
        if settings.emulate is not None:
            from hetsync.scenario import load_scenario

            self.emulated = load_scenario(settings.emulate).with_workers(scenario.workers)
        self.opt: ProfilingOptimizer | None = None
        self._link_bytes: list[int] = []

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
        job.update(name=sc.name, workers=sc.workers, model_bytes=model_nbytes)
        raw = raw_record(
            self.workers,
            self.sizes,
            self._link_bytes,
            self.settings.compute_s,
            self.settings.emulate,
            gathered,
            paced_emulation=paced(self.emulated),
        )
        raw |= {
            "job": job,
            "model": model_name,
            "model_bytes": model_nbytes,
            "script": [sys.executable, *sys.argv],
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
