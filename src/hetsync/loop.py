"""Every hetsync policy inside your own training loop.

A DDP-style script changes in a few lines; torchrun (or ``hetsync launch``,
which survives a worker's death) starts one more process than there are
workers::

    import hetsync

    sync = hetsync.init("wbsp", scenario="hetero-4", evaluate=my_eval)   # under torchrun
    model = Net()
    opt = sync.optimizer(model, torch.optim.AdamW(model.parameters(), lr=3e-4))
    sampler = sync.sampler(train_set)                                    # this worker's shard
    for x, y in DataLoader(train_set, batch_size=sync.batch_size, sampler=sampler):
        loss_fn(model(x), y).backward()
        opt.step()          # pushes, pulls, waits or multicasts as the policy says
        opt.zero_grad()
        if sync.done:
            break
    sync.finish()

**Roles.** Rank 0 runs the policy: ``sync.optimizer(model, opt)`` on rank 0
serves the whole run (the parameter server, or a peer-to-peer policy's
coordinator), writes ``summary.json``, the trace, the plots and the final
model as the module's ``state_dict`` (``model-<policy>.pt``), and ends the
process, so the script needs no branch for it. Ranks 1..N are the workers
0..N−1 and return from ``sync.optimizer`` with a wrapper of their optimizer.

**What ``opt.step()`` does.** The policy's commands reach the worker as in
``hetsync run`` (:mod:`hetsync.runtime.worker`); what was a step of a
built-in workload is now the user's code between two ``opt.step()`` calls
(data loading, forward, backward, clipping — it is timed as the step).

- *Gradient policies* (BSP, ASP, SSP, backup workers, LB-BSP, DSSP,
  ElasticBSP): the worker's gradients (``p.grad`` of the trainable parameters) are pushed; the
  server takes the optimizer step with **rank 0's copy of the user's
  optimizer** on the global model (so AdamW's moments live on the server, as
  DDP keeps them identical on every rank). The worker's own optimizer does
  not step. Gradient clipping in the loop clips each worker's gradient.
- *Local-work policies* (local SGD, DiLoCo, WBSP, WBSP-overlap, peer to
  peer): the user's optimizer steps the worker's model; deltas go to
  the server's outer optimizer (the policy's, e.g. DiLoCo's Nesterov, or
  plain averaging), or models to peers. A pull replaces the parameters and
  keeps the worker's optimizer state, as the policies' headers say.

Then ``opt.step()`` waits for the worker's next step to be allowed (a pull,
a barrier), loads the model it must compute on into the module, and returns.

**Learning-rate schedules.** Build any ``torch.optim.lr_scheduler`` (or set
``param_groups`` yourself) before or after ``sync.optimizer``: both step the
same ``param_groups``. Rank 0 never returns from ``sync.optimizer``, so it
never runs a scheduler built after it, and one built before it never steps
there; so under a gradient policy every gradient push carries the settings
the worker's optimizer had for that step — per parameter group ``lr``,
``momentum``, ``betas`` and ``weight_decay`` (:data:`hetsync.optim.FOLLOWED`:
what OneCycleLR and CyclicLR cycle besides the lr) — when they changed since
its previous push, and rank 0's copy takes the step at them (at their mean,
weighted as the gradients, when one update combines workers whose settings
differ). Under BSP that is DDP's step exactly, whatever the order of
construction (``tests/runtime/test_loop_schedules.py``). Settings a step
reads but no scheduler moves (``eps``, ``nesterov``, ``dampening``...) are
rank 0's own: under a gradient policy the loop changing one after
``sync.optimizer`` is refused (BadInput naming it), as is adding a
parameter group. Under local-work policies the schedule drives the
worker's own steps, and no worker's schedule reaches the server's outer
optimizer (DiLoCo's Nesterov, the scenario's ``outer_optimizer``, or plain
averaging): its settings are its own, as in DiLoCo, whose inner AdamW
follows a cosine schedule while the outer Nesterov keeps a constant rate.
Deltas therefore carry no settings.

**Batch size.** ``sync.batch_size`` is the batch the policy asks for the
next step (LB-BSP changes it per worker): draw that many samples.

**Running statistics.** Normalization layers' buffers (BatchNorm's
``running_mean``, ``running_var``, ``num_batches_tracked``) are moved only by
the workers' forward passes; each worker trains with its own. Every worker
sends them to rank 0 twice per evaluation interval and when its loop ends;
the model rank 0 evaluates and saves holds their mean (the largest
``num_batches_tracked``). Other buffers (masks, tables) are constants and
stay each rank's.

**Devices.** The module may live on a GPU (``model.to("cuda")`` before
``sync.optimizer``), on every rank: hetsync moves CPU copies of its
parameters, gradients and running statistics (gloo is the transport), loads
what it receives onto each parameter's device, and times a step once the
GPU's queued kernels are done. Rank 0's copy of the optimizer steps on the
device its module is on (tests/runtime/test_loop_gpu.py, skipped without CUDA).

**Limits.** Frozen parameters keep each rank's values. Checkpoints (``checkpoint_dir=``, ``resume=True``) hold
rank 0's side, as ``hetsync run``'s do; the loop's own state is the
script's: a resumed loop starts again, fast-forwards its schedule
(``sync.fast_forward(sched)``) and its step count by ``sync.first_step``,
and ``sync.loader`` skips the samples drawn before; the workers' local
optimizer state (local policies) starts afresh. On the collective path your
optimizer is the server's (it takes each round's step): each worker saves
its state beside the checkpoint and a resumed run loads it. Under plain torchrun a
worker that dies ends the whole job (torchrun stops every process when one
fails); ``hetsync launch`` starts each rank on its own (no torchrun agent), so
the server sees the worker leave and carries on, as in ``hetsync run``.
With ``--max-worker-restarts`` it starts a dead worker again, and with
``--nproc-max`` (then ``hetsync launch --join OUT``) it takes workers that
come later: their ``hetsync.init`` opens a session of its own with rank 0
(:func:`~hetsync.runtime.process.come_back`) instead of entering the process group, is sent the
current model, and ``sync.first_step`` / ``sync.drawn_before`` say where
its loop goes on, as after a resume; its local optimizer state starts
afresh (docs/membership.md).

**Failures are loud** (:mod:`hetsync.loop_checks`). A worker whose script
raises or ends without ``sync.finish()`` says so in one line as its last;
``hetsync launch`` prints it, naming the worker, and exits with status 1 once
the run is over, as it does for a worker killed or dropped as silent. Once
``sync.optimizer`` has returned, hetsync owns the process group: a collective
on it raises at once (rank 0 would never join it). A ``DistributedSampler``
built on a worker with default arguments splits the data over the workers,
not the ranks; a second ``opt.step()`` without a backward is warned about.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import math
import os
import sys
import threading
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from hetsync import limits as L
from hetsync.driver.core import eval_interval_s
from hetsync.errors import BadInput
from hetsync.loop_checks import StepCheck, WorkerChecks
from hetsync.optim import (
    FOLLOWED,
    OptimizerView,
    changed_setting,
    fixed_settings,
    gpu_devices,
    hyperparameters,
    outer_stepper,
    set_hyperparameters,
    wait_for,
)
from hetsync.runtime import protocol as P
from hetsync.runtime.checkpoint_check import worker_state_path
from hetsync.runtime.collective import PATH_ENV, RoundReducer, check_path, uses_collective, workers_group
from hetsync.runtime.config import MAX_WORKER_RESTARTS_ENV, NPROC_MAX_ENV, REJOIN_ENV, RESUME_ENV
from hetsync.runtime.evaluator import BackgroundEvaluator
from hetsync.runtime.launch import OUT_ENV
from hetsync.runtime.shards import PendingModel
from hetsync.runtime.worker import Done, WorkerProcess
from hetsync.scenario import Scenario, Target, resolve_scenario, scenario_from_dict

KNOWN_DIRECTIONS = {"accuracy": "max", "loss": "min", "perplexity": "min", "error": "min"}
DEFAULT_MAX_TIME_S = 86_400.0  # without a scenario's limit: the run ends when the workers' loops do
DEFAULT_EVAL_EVERY_S = 2.0

Evaluate = Callable[[nn.Module], Mapping[str, float]]

_active: Sync | None = None


def init(
    policy: str,
    scenario: str | Scenario | None = None,
    *,
    out: str | Path | None = None,
    evaluate: Evaluate | None = None,
    metrics: Mapping[str, str] | None = None,
    throttle: bool = False,
    worker_timeout_s: float = 60.0,
    startup_timeout_s: float = 60.0,
    plots: bool = True,
    checkpoint_dir: str | Path | None = None,
    checkpoint_every_s: float = 10.0,
    resume: bool = False,
    path: str | None = None,
    **overrides: Any,
) -> Sync:
    """Join the run as the rank torchrun made this process (rank 0: the
    policy's server; ranks 1..N: workers 0..N−1) and return the handle.

    Args:
        policy: a policy spec, as on the command line (``"ssp:s=2"``).
        scenario: a built-in scenario's name, a YAML path, a
            :class:`~hetsync.scenario.Scenario`, or None (no emulated
            heterogeneity; the run lasts until the workers' loops end).
            Its worker count becomes the world size − 1. A name or a path
            gives the cluster only (speeds, delays, stragglers, noise,
            links): its job keys (``max_time_s``, ``max_steps``, target,
            ``eval_every_s``, ``batch_size``...) are not applied unless passed
            as ``overrides``, and rank 0 prints a note naming those that
            would have changed the run. A ``Scenario`` is taken as it is.
        out: output folder (default ``$HETSYNC_OUT`` under ``hetsync
            launch``, else ``runs/loop``).
        evaluate: ``evaluate(model) -> {metric: value}``, called on rank 0
            every ``eval_every_s`` on a copy of the module loaded with the
            global model (in eval mode, without gradients), on a thread beside
            the policy's loop, which goes on serving the workers; evaluations
            slower than the interval are skipped, not queued (summary:
            ``eval_time_s``, ``eval_share``, ``evals_skipped``). Use the model
            it is given. Without it nothing is evaluated and the summary has
            no metric.
        metrics: direction (``"max"``/``"min"``) of metrics other than
            accuracy, loss, perplexity and error.
        throttle: transfers last model bytes / the scenario's bandwidth.
        checkpoint_dir: rank 0 saves the run there every
            ``checkpoint_every_s`` and at the end, as ``hetsync run
            --checkpoint-dir`` does (the global model, the server's copy of
            your optimizer, the policy's state, each worker's step count and
            samples drawn).
        resume: continue from the checkpoint in ``checkpoint_dir``; each
            worker's :attr:`Sync.first_step` and :meth:`Sync.loader` go on
            from where the checkpoint left it.
        path: how a round's gradients travel: ``"ps"`` (to rank 0, which
            steps and sends the model back, as the papers' systems do) or
            ``"collective"`` (all-reduced among the workers during backward,
            each stepping your optimizer, as DDP does; rank 0 only decides:
            :mod:`hetsync.runtime.collective`; BSP and LB-BSP; local SGD and
            DiLoCo all-reduce each round's model deltas and every worker takes
            the outer step). Default:
            ``$HETSYNC_PATH`` (``hetsync launch --path``), else ``"ps"``.
        overrides: scenario keys (``max_time_s=60``, ``target={...}``).
    """
    global _active
    if _active is not None:
        raise BadInput("hetsync.init was already called in this process; call it once")
    rank, world = _ranks()
    workers, joinable, restarts = _membership(world)
    from hetsync.runtime.session import rejoin_epoch

    epoch = rejoin_epoch()  # hetsync launch started this worker again, or it joins the job (--join)
    if epoch is not None and rank == 0:
        raise BadInput(f"{REJOIN_ENV} is for a worker's process, and this is rank 0 (the policy's)")
    from hetsync.driver import policy_labels
    from hetsync.run_as import RUN_AS_ENV, impose

    # under `hetsync advise --verify` (HETSYNC_RUN_AS): its policy, cluster and job, said on rank 0
    policy, scenario, overrides, throttle = impose(policy, scenario, overrides, throttle, rank)
    from hetsync.driver.advised import advised_start

    advised = advised_start(policy)  # auto:start=ADVICE: its start read from that advice, on every rank
    policy = policy if advised is None else advised.spec
    sc = _scenario(scenario, workers, overrides)
    if advised is not None:  # (said with the scenario's notes: on rank 0, in the summary, by hetsync launch)
        sc = dataclasses.replace(sc, notes=(*sc.notes, advised.said))
    (label,) = policy_labels(sc, [policy], driver="loop")  # a bad spec fails on every rank before any traffic
    if path is None or RUN_AS_ENV in os.environ:  # (a launcher's policy may not take the script's path)
        path = os.environ.get(PATH_ENV, "ps")
    path = check_path(path)
    from hetsync.driver import policy_context
    from hetsync.policies import make_policy

    chosen = make_policy(policy, policy_context(sc))
    uses_collective(path, chosen)  # (BadInput for a policy that cannot take the path)
    if rank == 0:  # (also in the summary's notes, which hetsync launch shows)
        for note in sc.notes:
            print(f"hetsync: note: {note}", file=sys.stderr, flush=True)
    if evaluate is not None and not callable(evaluate):
        raise BadInput(f"evaluate must be a function evaluate(model) -> {{metric: value}}, got {evaluate!r}")
    for name, direction in (metrics or {}).items():
        if direction not in ("max", "min"):
            raise BadInput(f"metrics[{name!r}] must be 'max' or 'min', got {direction!r}")
    launched = os.environ.get(OUT_ENV)
    if launched is not None and out is not None and Path(out) != Path(launched):
        raise BadInput(
            f"hetsync launch writes into --out {launched}, and hetsync.init was given out={str(out)!r}: drop one"
        )
    folder = Path(out if out is not None else launched or "runs/loop")
    checkpoints = None if checkpoint_dir is None else Path(checkpoint_dir)
    if not resume and checkpoints is not None and os.environ.get(RESUME_ENV) == "1":
        # hetsync launch --max-restarts started the job again after its server died: go on from the
        # checkpoint where there is one (one machine: every rank sees the same folder), else afresh
        from hetsync.runtime.checkpoint_check import checkpoint_path

        resume = checkpoint_path(checkpoints, label).is_file()
    if resume and rank == 0:  # (the checkpoint is rank 0's: workers on other machines do not see it)
        _check_resumable(checkpoints, label)
    from hetsync.runtime.process import ProcessOptions, _form_group, come_back

    opts = ProcessOptions(
        out=folder,
        worker_timeout_s=worker_timeout_s,
        startup_timeout_s=startup_timeout_s,
        throttle=throttle,
        checkpoint_dir=checkpoints,
        checkpoint_every_s=checkpoint_every_s,
        resume=resume,
        path=path,
        max_worker_restarts=restarts,
        joinable=joinable,
    )
    opts.check_rejoin(sc, [policy])  # (every rank, before any traffic: the same one line)
    from hetsync.runtime.agent import die_with_parent

    die_with_parent()
    torch.set_num_threads(1)
    from hetsync.advise.loop_profile import Profiler, settings_from_env

    profiling = settings_from_env()  # under `hetsync profile --script`: time the loop, run no policy
    link = None
    if epoch is None:
        _form_group(rank, opts)
    else:  # a session of its own with rank 0: the world group formed without it
        link = come_back(rank - 1, epoch, opts)
    _active = Sync(rank, sc, policy, opts, evaluate, dict(metrics or {}), plots=plots, link=link)
    if profiling is not None:
        _active._profiler = Profiler(rank, sc, profiling, opts.out)
    if rank > 0:  # a worker's failure is loud, its quiet mistakes warned about (hetsync.loop_checks)
        checks = _active._checks = WorkerChecks(rank - 1, rank, sc.cluster.workers, world)
        checks.watch_exit(finished=lambda sync=_active: _active is not sync)
        checks.split_samplers_by_worker()
    return _active


def _membership(world: int) -> tuple[int, int, int]:
    """(the run's workers, how many of them may join later, worker restarts)
    as ``hetsync launch`` says (:data:`NPROC_MAX_ENV`: ``--nproc-max``;
    :data:`MAX_WORKER_RESTARTS_ENV`: ``--max-worker-restarts``); under
    torchrun, the world's workers and neither."""
    present = world - 1
    raw_max, raw_restarts = os.environ.get(NPROC_MAX_ENV), os.environ.get(MAX_WORKER_RESTARTS_ENV)
    try:
        workers = present if not raw_max else int(raw_max)
        restarts = int(raw_restarts) if raw_restarts else 0
    except ValueError:
        raise BadInput(
            f"{NPROC_MAX_ENV}={raw_max!r} and {MAX_WORKER_RESTARTS_ENV}={raw_restarts!r} must be whole numbers "
            "(hetsync launch sets them from --nproc-max and --max-worker-restarts)"
        ) from None
    if workers < present:
        raise BadInput(
            f"{NPROC_MAX_ENV}={workers} is below the {present} workers of the process group: "
            "--nproc-max must be at least --nproc"
        )
    return workers, workers - present, restarts


def _check_resumable(checkpoint_dir: Path | None, label: str) -> None:
    """``resume=True`` needs the checkpoint it continues (checked on rank 0
    before the process group forms; its server checks that the checkpoint is
    this run's when it loads it)."""
    from hetsync.runtime.checkpoint_check import checkpoint_path

    if checkpoint_dir is None:
        raise BadInput("hetsync.init(resume=True) needs checkpoint_dir=: the folder the interrupted run saved into")
    path = checkpoint_path(checkpoint_dir, label)
    if not path.is_file():
        raise BadInput(
            f"hetsync.init(resume=True): {str(path)!r} does not exist (no checkpoint of {label} in "
            f"{str(checkpoint_dir)!r}); drop resume=True to start afresh"
        )


def _ranks() -> tuple[int, int]:
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        raise BadInput(
            "hetsync.init must run under torchrun or hetsync launch (RANK and WORLD_SIZE are not set): "
            "e.g. hetsync launch --nproc 2 script.py, or torchrun --nproc-per-node=3 script.py "
            "(one process more than workers: rank 0 runs the policy)"
        )
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if world < 2:
        raise BadInput(
            f"hetsync.init needs at least 2 processes (rank 0 runs the policy, the others train); WORLD_SIZE={world}"
        )
    return rank, world


def _scenario(scenario: str | Scenario | None, workers: int, overrides: dict[str, Any]) -> Scenario:
    """The run's scenario: the cluster of ``scenario`` (a name or a YAML
    path), the job of the script — the own loop's defaults and ``overrides``;
    the scenario's job keys are dropped, and a note names those that would
    have changed the run. A :class:`Scenario` object is taken as it is."""
    if isinstance(scenario, Scenario):
        return resolve_scenario(scenario, overrides).with_workers(workers)
    job = dict(overrides)
    if "max_time_s" not in job and "max_steps" not in job:
        job["max_time_s"] = DEFAULT_MAX_TIME_S
    limit_s = job.get("max_time_s")
    if "eval_every_s" not in job:
        job["eval_every_s"] = DEFAULT_EVAL_EVERY_S
        if isinstance(limit_s, int | float) and not isinstance(limit_s, bool) and limit_s > 0:
            # (a short timed run gets 40 evaluations; a long one at most MAX_EVALUATIONS)
            job["eval_every_s"] = min(max(DEFAULT_EVAL_EVERY_S, limit_s / L.MAX_EVALUATIONS), limit_s / 40)
    if scenario is None:
        raw: dict[str, Any] = {"name": "own-loop", "workers": workers, "fixed_s": 0.0, "per_sample_s": 0.0}
        return scenario_from_dict({**raw, **job}, default_name="own-loop")
    filed = resolve_scenario(scenario, {})  # (the file as it is: checked, and what it would have run)
    given = set(overrides) | (TARGET_KEYS if overrides.keys() & TARGET_KEYS else set())
    dropped = [key for key in filed.source or {} if key in JOB_KEYS and key not in given]
    sc = resolve_scenario(scenario, {**dict.fromkeys(dropped), **job})
    source = {k: v for k, v in (sc.source or {}).items() if not (k in dropped and v is None)}
    changed = {
        key: (filed.source or {})[key]
        for key in dropped
        if key not in UNSEEN_JOB_KEYS and _job(filed, key) != _job(sc, key)
    }
    note: tuple[str, ...] = ()
    if changed:
        settings = ", ".join(f"{key}={value!r}" for key, value in changed.items())
        note = (
            f"scenario {filed.name!r} gives your loop its cluster (workers' speeds, noise, stragglers, links), "
            f"not its job: {settings} not applied; to keep them, pass them to hetsync.init(..., {settings})",
        )
    sc = dataclasses.replace(sc, source=source, notes=(*sc.notes, *note))
    return sc.with_workers(workers)


# A scenario named in hetsync.init emulates a cluster; the job is the script's. These keys are the
# job's: a scenario's are dropped unless passed to hetsync.init (UNSEEN_JOB_KEYS silently: they never
# act on your loop -- its model, data, optimizer, schedule and clipping are the script's, and the
# scenario's lr is only the reference the policy's rate is read against: ModuleStepper).
TARGET_KEYS = frozenset({"target", "target_accuracy"})
_YOUR_RECIPE = frozenset({"lr", "optimizer", "local_optimizer", "schedule", "clip_norm"})
_YOUR_WORKLOAD = frozenset({"workload", "workload_args", "label_skew", "policies"})  # (and your policy)
UNSEEN_JOB_KEYS = _YOUR_RECIPE | _YOUR_WORKLOAD
JOB_KEYS = TARGET_KEYS | UNSEEN_JOB_KEYS | frozenset({"max_time_s", "max_steps", "eval_every_s", "batch_size"})
JOB_KEYS |= frozenset({"outer_optimizer", "p2p_mixing", "model_bytes"})


def _job(sc: Scenario, key: str) -> Any:
    """What a job key of the file became in ``sc``."""
    if key in TARGET_KEYS:
        return (sc.stop.target.metric, sc.stop.target.value, sc.stop.target.direction)
    return sc.setting(key)


class Sync:
    """This process's part of the run (from :func:`init`)."""

    def __init__(
        self,
        rank: int,
        scenario: Scenario,
        policy: str,
        opts: Any,
        evaluate: Evaluate | None,
        metrics: dict[str, str],
        *,
        plots: bool = True,
        link: Any = None,
    ) -> None:
        self.rank = rank
        self.scenario = scenario
        self.policy = policy
        self.opts = opts
        self.plots = plots  # rank 0 draws the report after the run (report.html, trace.json, PNGs)
        self.out: Path = opts.out
        self.workers = scenario.cluster.workers
        self.worker: int | None = rank - 1 if rank > 0 else None
        self._evaluate = evaluate
        self._metrics = metrics
        self._worker: _LoopWorker | None = None
        self._profiler: Any = None  # a hetsync.advise.loop_profile.Profiler under `hetsync profile --script`
        self._checks: WorkerChecks | None = None  # a worker's (init)
        # a worker that came back (or joined late): its session with rank 0 (hetsync.runtime.session)
        self._link = link

    @property
    def batch_size(self) -> int:
        """The batch the policy asks this worker to draw for its next step."""
        if self._profiler is not None:
            return int(self._profiler.batch_size)
        w = self._worker
        if w is not None and w.pending is not None:
            return w.pending[0].batch_size
        return self.scenario.job.batch_size

    @property
    def first_step(self) -> int:
        """This worker's step count when its loop began: 0, or where a resumed
        run's checkpoint left it (fast-forward a schedule by as many steps).
        Known once :meth:`optimizer` has returned."""
        w = self._worker
        return 0 if w is None else w.first_step

    @property
    def drawn_before(self) -> int:
        """Samples this worker had drawn by the checkpoint a resumed run goes
        on from (0 on a fresh run); :meth:`loader` skips them."""
        w = self._worker
        return 0 if w is None else w.drawn_before

    def fast_forward(self, scheduler: Any) -> None:
        """Step ``scheduler`` (any ``torch.optim.lr_scheduler``) :attr:`first_step`
        times: a resumed run's schedule goes on where it was; nothing on a
        fresh run. Call it after :meth:`optimizer`, before the loop."""
        with warnings.catch_warnings():  # the scheduler's "step() before optimizer.step()" does not apply
            warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step()`", category=UserWarning)
            for _ in range(self.first_step):
                scheduler.step()

    @property
    def done(self) -> bool:
        """The run is over for this worker (the server's time or step limit):
        further ``opt.step()`` calls do nothing; leave the loop."""
        if self._profiler is not None:
            return bool(self._profiler.done)
        return self._worker is not None and self._worker.done

    def sampler(self, dataset: Any, *, shuffle: bool = True, seed: int | None = None) -> Any:
        """A ``DistributedSampler`` over this worker's shard (workers, not ranks: rank 0 trains nothing)."""
        from torch.utils.data.distributed import DistributedSampler

        return DistributedSampler(
            dataset,
            num_replicas=self.workers,
            rank=self.worker if self.worker is not None else 0,
            shuffle=shuffle,
            seed=self.scenario.job.seed if seed is None else seed,
        )

    def loader(
        self, dataset: Any, *, shuffle: bool = True, drop_last: bool = False, **kwargs: Any
    ) -> torch.utils.data.DataLoader:
        """A ``DataLoader`` over this worker's shard whose every batch has the
        size the policy asks for that step (``sync.batch_size``: LB-BSP varies
        it), reshuffled each time it is iterated (each epoch). A resumed run's
        loader goes on after the samples the worker had drawn by the
        checkpoint (its epoch and place in it). ``kwargs`` go to
        the ``DataLoader`` (``collate_fn``, ``pin_memory``...); with
        ``num_workers > 0`` the sizes lag by the loader's prefetch depth.
        ``drop_last``: leave out an epoch's last batch when it is short, as
        ``DataLoader`` does."""
        if "batch_size" in kwargs or "sampler" in kwargs or "batch_sampler" in kwargs:
            raise BadInput("sync.loader picks the batches itself: drop batch_size, sampler and batch_sampler")
        batches = PolicyBatches(self, self.sampler(dataset, shuffle=shuffle), drop_last=drop_last)
        return torch.utils.data.DataLoader(dataset, batch_sampler=batches, **kwargs)

    def optimizer(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> SyncOptimizer:
        """Wrap ``optimizer`` (built over ``model``'s parameters). On rank 0
        this runs the policy to the end and exits the process."""
        self._check_optimizer_args(model, optimizer)
        if self._profiler is not None:
            return self._profiler.optimizer(model, optimizer)  # type: ignore[no-any-return]
        # only rank 0 evaluates (the first call learns the metrics' names)
        flat = ModuleModel(model, self._evaluate if self.rank == 0 else None, self._metrics)
        if self.rank == 0:
            self._serve(flat, optimizer)  # never returns
        throttle, pace = self.opts.emulation(self.scenario)
        self._worker = _LoopWorker(
            self.rank - 1,
            self.scenario,
            flat,
            optimizer,
            throttle=throttle,
            pace=pace,
            spec=self.policy,
            checkpoint_dir=self.opts.checkpoint_dir,
            checkpoint_every_s=self.opts.checkpoint_every_s,
            resume=self.opts.resume,
            link=self._link,
        )
        self._worker.start()
        if self._checks is not None:  # hetsync owns the process group now, and each opt.step() is a step
            self._checks.refuse_collectives()
            self._worker.step_check = self._checks.check_steps(flat.params)
        return SyncOptimizer(optimizer, self._worker)

    def _check_optimizer_args(self, model: Any, optimizer: Any) -> None:
        if not isinstance(model, nn.Module):
            raise BadInput(f"sync.optimizer takes the model (a torch.nn.Module) first, got {type(model).__name__}")
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise BadInput(f"sync.optimizer takes a torch.optim.Optimizer, got {type(optimizer).__name__}")
        if self._worker is not None or (self._profiler is not None and self._profiler.opt is not None):
            raise BadInput("sync.optimizer was already called; call it once per process")

    def _serve(self, flat: ModuleModel, optimizer: torch.optim.Optimizer) -> None:
        from hetsync.runtime.process import _serve_and_report

        target = self.scenario.stop.target
        if flat.metrics and target.metric not in flat.metrics:
            first, direction = next(iter(flat.metrics.items()))
            bound = "≤" if direction == "min" else "≥"
            known = target.direction or KNOWN_DIRECTIONS.get(target.metric)
            given = "≤" if known == "min" else "≥" if known == "max" else "at"
            whose = " (hetsync's default)" if target == Target() else ""
            raise BadInput(
                f"your evaluate reports {', '.join(flat.metrics)}, and the run's target is {target.metric} "
                f"{given} {target.value:g}{whose}: give yours, e.g. hetsync.init(..., "
                f"target={{'metric': '{first}', 'value': V}}) for time to {first} {bound} V"
            )

        command = " ".join(["python", *sys.argv])

        def report(runs: list[dict[str, Any]]) -> None:
            # (imported once the run is over: hetsync.runner brings matplotlib, the workers would wait for it)
            from hetsync.runner import reporter

            reporter(self.out, plots=self.plots, command=command)(runs)

        stepper = ModuleStepper(flat.params, optimizer, self.scenario.job.lr)
        _serve_and_report(
            self.scenario,
            flat,  # type: ignore[arg-type]
            [self.policy],
            self.opts,
            gradient_stepper=stepper,  # type: ignore[arg-type]
            progress_lines=True,
            on_finished=report,
            background_eval=True,  # (on a copy of the module: ModuleModel.evaluator)
        )

    def finish(self) -> None:
        """Leave the run (a worker whose loop has ended) and close the
        process group. The summary, trace and model are written by rank 0."""
        global _active
        w = self._worker
        if self._profiler is not None and self._profiler.opt is not None:
            self._profiler.finish()
        elif w is None:
            raise BadInput("sync.finish() before sync.optimizer(model, opt): there is nothing to finish")
        else:
            w.leave()
            w.flush()
        if dist.is_initialized():  # (a worker that came back on a session never entered the world group)
            dist.distributed_c10d.destroy_process_group()  # (not dist.destroy_process_group: the user's, guarded)
        _active = None


class PolicyBatches(torch.utils.data.Sampler):
    """Batches of indices from ``sampler``, each as large as ``sync.batch_size``
    when it is drawn; a new epoch (``set_epoch``) every time it is iterated."""

    def __init__(self, sync: Sync, sampler: Any, *, drop_last: bool = False) -> None:
        self.sync = sync
        self.sampler = sampler
        self.drop_last = drop_last
        self.epoch = 0
        self._skip: int | None = None  # samples a resumed run had drawn, skipped at the first iteration

    def __iter__(self) -> Any:
        if self._skip is None:
            self.epoch, self._skip = divmod(self.sync.drawn_before, max(1, len(self.sampler)))
        self.sampler.set_epoch(self.epoch)
        self.epoch += 1
        indices = iter(self.sampler)
        if self._skip:
            indices = itertools.islice(indices, self._skip, None)
            self._skip = 0
        while True:
            size = self.sync.batch_size
            batch = list(itertools.islice(indices, size))
            if not batch or (self.drop_last and len(batch) < size):
                return
            yield batch

    def __len__(self) -> int:  # as many as at the current batch size
        rounding = math.floor if self.drop_last else math.ceil
        return rounding(len(self.sampler) / self.sync.batch_size)


# ------------------------------------------------------------------ models
RUNNING_STATS = {"running_mean", "running_var", "num_batches_tracked"}  # torch's normalization layers


def _trainable(model: nn.Module) -> list[nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


def _load_params(params: list[nn.Parameter], flat: torch.Tensor) -> None:
    """Copy ``flat`` into ``params`` (never aliasing it)."""
    offset = 0
    with torch.no_grad():
        for p in params:
            n = p.numel()
            p.copy_(flat[offset : offset + n].view_as(p))
            offset += n


def _load_buffers(buffers: list[torch.Tensor], values: list[torch.Tensor] | None) -> None:
    if values is not None:
        with torch.no_grad():
            for b, value in zip(buffers, values, strict=True):
                b.copy_(value)


def _flat_cpu(params: list[nn.Parameter]) -> torch.Tensor:
    """The parameters as one new CPU vector (what the transports move), wherever the module lives."""
    return torch.cat([p.detach().reshape(-1).cpu() for p in params])


class ModuleModel:
    """The user's module seen as the flat vector the drivers move: its
    trainable parameters in ``model.parameters()`` order. It stands in for a
    :class:`~hetsync.workloads.Workload` on the server (size, initial model,
    evaluation) — it has no data: the user's loop draws it."""

    def __init__(self, model: nn.Module, evaluate: Evaluate | None, directions: Mapping[str, str]) -> None:
        self.model = model
        self.name = type(model).__name__
        self.params = _trainable(model)
        if not self.params:
            raise BadInput(f"{self.name} has no trainable parameters (requires_grad): there is nothing to train")
        for p in self.params:
            if p.dtype != torch.float32:
                raise BadInput(f"{self.name}: hetsync moves float32 parameters; a parameter is {p.dtype}")
        self.n_params = sum(p.numel() for p in self.params)
        self.param_sizes = tuple(p.numel() for p in self.params)  # (Streaming DiLoCo cuts its fragments on them)
        # accelerators the module's parameters live on: a step is timed once their queued work is done
        self.accelerators = gpu_devices(self.params)
        self.model_nbytes = 4 * self.n_params
        # normalization layers' running statistics (BatchNorm, InstanceNorm): the workers send
        # theirs (P.Buffers); the server averages their last ones into the model it evaluates and
        # saves. Other buffers (masks, tables) are constants: each rank keeps its own.
        self.buffers = [b for name, b in model.named_buffers() if name.rsplit(".", 1)[-1] in RUNNING_STATS]
        self.n_buffer_values = sum(b.numel() for b in self.buffers)
        if self.n_buffer_values > self.n_params:  # (they travel in a model-sized payload; BatchNorm has 2 per 2)
            warnings.warn(f"{self.name}: running statistics larger than the model stay on each rank", stacklevel=2)
            self.buffers, self.n_buffer_values = [], 0
        self.worker_buffers: dict[int, torch.Tensor] = {}  # server: each worker's last buffers, flat
        self.workload_args: dict[str, Any] = {}
        self._evaluate = evaluate
        self.metrics: dict[str, str] = {}
        if evaluate is not None:
            for name in self.evaluate_metrics(self.flat()):
                direction = directions.get(name, KNOWN_DIRECTIONS.get(name))
                if direction is None:
                    raise BadInput(
                        f"evaluate reports metric {name!r} with no known direction: "
                        f"pass metrics={{{name!r}: 'max' or 'min'}} to hetsync.init"
                    )
                self.metrics[name] = direction

    def flat(self) -> torch.Tensor:
        return _flat_cpu(self.params)

    def flat_grad(self) -> torch.Tensor:
        return torch.cat(
            [p.grad.detach().reshape(-1).cpu() if p.grad is not None else torch.zeros(p.numel()) for p in self.params]
        )

    def load(self, flat: torch.Tensor) -> None:
        """Copy ``flat`` into the module's parameters (never aliasing it)."""
        _load_params(self.params, flat)

    def set_grad(self, flat: torch.Tensor) -> None:
        offset = 0
        for p in self.params:
            n = p.numel()
            p.grad = flat[offset : offset + n].view_as(p).to(p.device, copy=True)
            offset += n

    # buffers
    def flat_buffers(self) -> torch.Tensor:
        """This module's buffers as float32, flat, padded to a model-sized payload."""
        out = torch.zeros(self.n_params)
        offset = 0
        for b in self.buffers:
            out[offset : offset + b.numel()] = b.detach().reshape(-1).to("cpu", torch.float32)
            offset += b.numel()
        return out

    def take_buffers(self, worker: int, flat: torch.Tensor) -> None:
        """``worker``'s buffers, as :meth:`flat_buffers` sent them."""
        self.worker_buffers[worker] = flat[: self.n_buffer_values].clone()

    def _mean_buffers(self) -> list[torch.Tensor] | None:
        """The workers' last buffers, one new tensor per buffer: floating-point
        ones averaged (as the statistics of the union of their batches,
        roughly), integer ones (BatchNorm's ``num_batches_tracked``) the
        largest; None before any came."""
        if not self.worker_buffers:
            return None
        rows = torch.stack(list(self.worker_buffers.values()))
        out, offset = [], 0
        for b in self.buffers:
            part = rows[:, offset : offset + b.numel()]
            value = part.mean(0) if b.is_floating_point() else part.max(0).values.round()
            out.append(value.view_as(b).to(b.dtype))
            offset += b.numel()
        return out

    def _load_worker_buffers(self) -> None:
        """The workers' last buffers (:meth:`_mean_buffers`) into the module."""
        _load_buffers(self.buffers, self._mean_buffers())

    # what the server asks of a workload
    def init_params(self, seed: int) -> torch.Tensor:
        """The module's parameters as rank 0 built it (workers start from this)."""
        return self.flat().clone()

    def evaluate_metrics(self, theta: torch.Tensor) -> dict[str, float]:
        """``evaluate`` on the module itself, loaded with ``theta`` (the first
        call, which learns the metrics' names, and the run's final evaluation;
        during the run: :meth:`evaluator`)."""
        if self._evaluate is None:
            return {}
        self.load(theta)
        self._load_worker_buffers()
        return self._evaluate_module(self.model)

    def evaluator(self) -> BackgroundEvaluator | None:
        """The server's evaluations beside its loop: ``evaluate`` on a copy of
        the module (made now, once: the server's copy of your optimizer steps
        the module itself meanwhile), loaded with the global model and the
        workers' mean running statistics as they were when each evaluation was
        asked for. None when the module cannot be copied: it is evaluated on
        the server's loop then, which serves no worker meanwhile (said once)."""
        if self._evaluate is None:
            return None
        try:
            twin = copy.deepcopy(self.model)
        except Exception as e:  # (a module holding a lock, a file, a generator...)
            print(
                f"hetsync: {self.name} cannot be copied ({type(e).__name__}: {e}): evaluate runs on the "
                "server's loop, which serves no worker while it runs",
                file=sys.stderr,
                flush=True,
            )
            return None
        params = _trainable(twin)
        buffers = [b for name, b in twin.named_buffers() if name.rsplit(".", 1)[-1] in RUNNING_STATS]
        buffers = buffers if self.buffers else []  # (the same ones as the module's: none when too large)

        def snapshot(theta: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor] | None]:
            return theta.detach().clone(), self._mean_buffers()  # (on the server's loop: it owns worker_buffers)

        def evaluate(snap: tuple[torch.Tensor, list[torch.Tensor] | None]) -> dict[str, float]:
            theta, stats = snap
            _load_params(params, theta)
            _load_buffers(buffers, stats)
            return self._evaluate_module(twin)

        return BackgroundEvaluator(evaluate, snapshot=snapshot)

    def _evaluate_module(self, module: nn.Module) -> dict[str, float]:
        """``evaluate(module)`` in eval mode without gradients, its result checked."""
        assert self._evaluate is not None
        was_training = module.training
        module.eval()
        try:
            with torch.no_grad():
                values = self._evaluate(module)
        finally:
            module.train(was_training)
        if not isinstance(values, Mapping) or not values:
            raise BadInput(f"evaluate(model) must return a non-empty mapping {{metric: value}}, got {values!r}")
        out = {}
        for name, value in values.items():
            try:
                out[str(name)] = float(value)
            except (TypeError, ValueError):
                raise BadInput(f"evaluate(model) returned {name!r}: {value!r}, not a number") from None
        return out

    def state_dict_with(self, theta: torch.Tensor | None) -> dict[str, torch.Tensor]:
        """The module's ``state_dict`` with ``theta`` loaded (what ``model-<policy>.pt`` holds)."""
        if theta is not None:
            self.load(theta)
        self._load_worker_buffers()
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}


class ModuleStepper:
    """The server's optimizer for gradient pushes when the user brought one:
    rank 0's copy of it steps rank 0's module, loaded with the global model.

    Same interface as :class:`hetsync.optim.Stepper`, plus :meth:`follow`:
    the step runs at the settings of the workers' optimizers when they
    computed the gradients (each group's lr, momentum, betas, weight decay:
    whatever their schedulers set, which rank 0 — it never returns from
    ``sync.optimizer`` — never sees). The ledger's ``lr`` is the policy's
    rate, read relative to the scenario's ``base_lr`` (1 for every built-in
    policy): each group's lr is the workers' times that ratio."""

    plain = False

    def __init__(self, params: list[nn.Parameter], optimizer: torch.optim.Optimizer, base_lr: float) -> None:
        self.params = params
        self.opt = optimizer
        self.base_lr = base_lr
        self._took_settings()  # (rank 0's own until the first gradient brings the workers')

    def follow(self, hyper: tuple[float, ...]) -> None:
        """Take the workers' settings (:func:`hetsync.optim.hyperparameters`) for the next steps."""
        set_hyperparameters(self.opt, hyper)
        self._took_settings()

    def _took_settings(self) -> None:
        """The rates and momenta :meth:`descend` scales and lowers, as the optimizer holds them now."""
        self.lrs = [float(g["lr"]) for g in self.opt.param_groups]
        self.momenta = [g.get("momentum") for g in self.opt.param_groups]  # (momentum=corrected lowers them)

    def lr_at(self, lr: float, clock: float) -> float:
        return lr

    def descend(
        self, model: torch.Tensor, grad: torch.Tensor, lr: float, *, clip: bool = True, implicit_momentum: float = 0.0
    ) -> torch.Tensor:
        offset = 0
        with torch.no_grad():
            for p in self.params:
                n = p.numel()
                p.copy_(model[offset : offset + n].view_as(p))
                p.grad = grad[offset : offset + n].view_as(p).to(p.device, copy=True)
                offset += n
        ratio = lr / self.base_lr  # (exactly 1.0 when the policy runs at the scenario's rate)
        for group, group_lr, momentum in zip(self.opt.param_groups, self.lrs, self.momenta, strict=True):
            group["lr"] = group_lr * ratio
            if implicit_momentum:  # a policy's momentum=corrected (hetsync.policies.staleness)
                if momentum is None:
                    raise BadInput(f"momentum=corrected lowers a momentum; {type(self.opt).__name__} has none")
                group["momentum"] = max(0.0, momentum - implicit_momentum)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return _flat_cpu(self.params)

    def state_dict(self) -> dict[str, Any]:
        return self.opt.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:
            self.opt.load_state_dict(state)


# ----------------------------------------------------------------- workers


class _LoopWorker(WorkerProcess):
    """A runtime worker whose steps are the user's code: it executes the
    server's commands up to the next step, hands control back to the loop,
    and finishes that step when ``opt.step()`` is called. Its transfers run
    in order with the steps (no background lanes): the user's module holds
    the live model while the loop runs, so a pull may not replace it mid-step."""

    background = False

    def __init__(
        self,
        worker: int,
        scenario: Scenario,
        flat: ModuleModel,
        optimizer: torch.optim.Optimizer,
        *,
        throttle: bool,
        pace: bool = False,
        spec: str | None = None,
        checkpoint_dir: Path | None = None,
        checkpoint_every_s: float = 10.0,
        resume: bool = False,
        link: Any = None,
    ) -> None:
        super().__init__(
            worker,
            scenario,
            flat,  # type: ignore[arg-type]
            throttle=throttle,
            pace=pace,
            specs=[spec] if spec is not None else None,
            checkpoint_dir=checkpoint_dir,
            checkpoint_every_s=checkpoint_every_s,
            resume=resume,
            link=link,
        )
        self.flat = flat
        self.opt = optimizer
        self.pending: tuple[P.StepOrder, Done, torch.Tensor | None, float, int] | None = None
        self.done = False
        self._exited = False
        self._in_module: torch.Tensor | None = None  # the flat model last copied into the module
        self._module_ahead = False  # local steps moved the module since the local model was copied out
        # the server's copy of the optimizer steps at this one's settings (lr, momentum, betas, weight
        # decay: what schedulers move), sent with a gradient when they changed; the others must stay
        self._settings = fixed_settings(optimizer)
        self._step_hyper: tuple[float, ...] | None = None  # at the last step's end
        self._hyper_sent: tuple[float, ...] | None = None  # with the run's last gradient push
        self.first_step = 0  # where the run (a resumed one: its checkpoint) left this worker
        self.drawn_before = 0  # samples drawn by then
        self.step_check: StepCheck | None = None  # opt.step() twice without a backward (hetsync.loop_checks)
        # the collective path: the step was reported at the end of its backward pass, whose gradients
        # are the round's mean already (_backward_done)
        self._reported = False
        self._grads_reduced = False
        self._callback_queued = False
        # running statistics go to the server twice per evaluation interval, and when the loop ends
        self._buffers_every_s = eval_interval_s(scenario) / 2 if flat.buffers else math.inf
        self._buffers_sent_s = 0.0

    # the user's loop owns the data and the local optimizer
    def _reset_data(self, drawn: int) -> None:
        self.shard = None
        self.first_step, self.drawn_before = self.steps, drawn

    def _stepper(self, run: int) -> None:
        """None: the user's optimizer takes local steps. On the collective path
        it is the server's too (it takes each round's step), and with
        checkpoints its state is kept beside them (:meth:`_snapshot`)."""
        policy = self._policy(run)
        self._state_path = None
        if self.checkpoint_dir is not None and self.collective and policy is not None:
            self._state_path = worker_state_path(self.checkpoint_dir, policy.label, self.w)
        return None

    def _snapshot(self, cmd: P.SnapshotCmd) -> None:
        """A checkpoint on the collective path: the user's optimizer state
        (the server's, here: momentum, Adam moments, its step count), saved
        beside the checkpoint, and the model to the server if asked. Commands
        come in order here (no lanes): the round's pull came before, so the
        model is at ``cmd.version`` (else the server keeps its last checkpoint)."""
        version = self.model.base_version
        if not self.collective or version != cmd.version:
            return
        self._rounds_saved = {"version": version, "optimizer": copy.deepcopy(self.opt.state_dict())}
        if self.outer_replica is not None:  # (delta rounds: the outer optimizer's state, and the round's model)
            self._rounds_saved["outer_replica"] = copy.deepcopy(self.outer_replica.state_dict())
        self._save_local_state(every=False)
        if cmd.send_model:
            model = self.global_model if self.round_kind == "delta" else self.flat.flat()
            self._send(P.Snapshot(version=version), model)

    def _load_rounds(self, rounds: dict[str, Any]) -> None:
        """A resumed collective run: the user's optimizer's moments and step
        counts as the checkpoint left them; its settings (lr...) stay the
        script's: its schedule, fast-forwarded by sync.first_step, sets them
        (loading them too would decay them twice)."""
        state = self.opt.state_dict()
        self.opt.load_state_dict({**state, "state": rounds["optimizer"]["state"]})
        if self.outer_replica is not None and "outer_replica" in rounds:
            self.outer_replica.load_state_dict(rounds["outer_replica"])

    def start(self) -> None:
        threading.Thread(target=self._read_commands, daemon=True, name="control").start()
        self._advance()

    # the collective path (hetsync.runtime.collective): the user's optimizer takes each round's step
    def _start_rounds(self, run: int) -> None:
        """Gradients go into the round's buckets as backward produces them
        (each bucket's all-reduce starts once it is full, as DDP's reducer does).
        A policy whose rounds average models (local SGD, DiLoCo: ``delta``)
        reduces each worker's delta since the last round once its local steps
        are done, and every worker takes the outer step the server would."""
        policy, full = self._round_kind(run)  # (a full round's Σ weights: its mean comes out of the reduce as is)
        self.outer_replica = (
            outer_stepper(self.sc, policy) if policy is not None and self.round_kind == "delta" else None
        )
        if self.reducer is not None:
            self.reducer.expected = full
            return
        params = self.flat.params
        self.reducer = RoundReducer(
            [p.numel() for p in params], group=workers_group(), expected_weight=full, broken=self.group_broken
        )
        for i, p in enumerate(params):
            p.register_post_accumulate_grad_hook(lambda p, i=i: self._grad_ready(i, p))

    def _grad_ready(self, index: int, param: nn.Parameter) -> None:
        """A parameter's gradient is final for this backward pass: into its
        bucket; the pass's first one also queues :meth:`_backward_done` for
        the end of the pass, as DDP's reducer does."""
        reducer = self.reducer
        if not (self.collective and reducer is not None and self.round_kind == "grad"):
            return  # (delta rounds: local steps; the round's delta goes in at its push)
        if self._reported:
            raise BadInput(
                f"worker {self.w}: a second backward pass before opt.step() (gradient accumulation): on the "
                "collective path each pass's gradients are reduced as it ends, as DDP's are; call opt.step() "
                "after each backward, or use path='ps'"
            )
        if not reducer.active or self.pending is None:
            return
        if not self._callback_queued:
            self._callback_queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._backward_done)
        with self._group_may_break():
            reducer.add(index, param.grad)

    def _backward_done(self) -> None:
        """The end of the loop's backward pass (autograd's callback): the step
        is reported now, while its last buckets reduce, and the pass returns
        with every ``.grad`` the round's mean — what your code between
        backward and ``opt.step()`` (clipping, logging a norm) sees under DDP."""
        self._callback_queued = False
        if self.pending is None or not self.collective:
            return
        self._finish_step()
        self._reported = True
        if self.collective and self.reducer is not None and self.reducer.active:
            with self._group_may_break():
                self.reducer.mean_into_grads(self.flat.params)
            self._grads_reduced = self.collective

    def _contribute(self, grad: torch.Tensor | None, samples: int) -> None:
        if self.round_kind == "delta":  # the delta since the last round, as a whole (weight 1)
            super()._contribute(grad, samples)
            return
        assert self.reducer is not None
        with self._group_may_break():
            if not self.reducer.active:  # (no round began with the step: a continuous one)
                self.reducer.begin(samples)
            for i, p in enumerate(self.flat.params):
                if i not in self.reducer.seen:
                    self.reducer.add(i, p.grad)

    def _apply_round(self, lr: float, version: int) -> int:
        """The user's optimizer steps on the round's batch-weighted mean
        gradient, written into the parameters' ``.grad`` — DDP's step (at the
        policy's rate relative to the scenario's: 1 for BSP and LB-BSP). A
        round of deltas: the outer step on their mean, from the last round's
        model (:meth:`~hetsync.runtime.worker.WorkerProcess._outer_step`),
        into the module."""
        assert self.reducer is not None
        if self.round_kind == "delta":
            with self._group_may_break():
                new = self._outer_step(self.reducer.mean())
                self.global_model, self.global_version = new, version
                overwritten = self.model.load(new, version)
                self._sync_module()
                return overwritten
            return 0  # (the round is lost: the server's next pull brings the model)
        if not self._grads_reduced:  # (no backward pass reduced it: a step without one)
            if not self.reducer.active:
                raise RuntimeError(f"worker {self.w}: told to apply a round it has no part in")
            with self._group_may_break():
                self.reducer.mean_into_grads(self.flat.params)
        self._grads_reduced = False
        if not self.collective:
            return 0  # (the round is lost: the server's next pull brings the model)
        ratio = lr / self.sc.job.lr if self.sc.job.lr else 1.0
        lrs = [g["lr"] for g in self.opt.param_groups]
        if ratio != 1.0:
            for g in self.opt.param_groups:
                g["lr"] = g["lr"] * ratio
        self.opt.step()
        if ratio != 1.0:
            for g, group_lr in zip(self.opt.param_groups, lrs, strict=True):
                g["lr"] = group_lr
        self.model.base_version = version
        return 0

    def _fetch(self) -> tuple[torch.Tensor | None, float]:
        if not self.collective:  # (the local model: _leave_collective sets it before the path changes)
            return super()._fetch()
        with self.model_lock:  # (not during a round's step)
            if self.round_kind == "delta":  # the last round's model: local steps since are not in it
                return self.global_model, 1.0
            return self.flat.flat(), 1.0

    def _leave_collective(self) -> None:
        """The group broke: from now on the model is the server's to send, and
        until its next pull the one this worker holds is the module's (its
        rounds were steps of the user's optimizer on the module, never of the
        local copy, which is the run's first model): the server's fall-back
        fetches it from a worker and goes on from it, not from the start.
        (Called with the model lock held or from the loop's own thread; the
        local model is set before the path changes, for the control thread's
        ``FETCH``, which after the fall-back gives the last round's model: here
        the module's, not the run's first.)"""
        self._copy_out()
        if self.round_kind == "grad":  # (delta rounds: the last round's model stays the global one)
            self.global_model = self.model.local
        super()._leave_collective()

    def _hyper(self) -> tuple[float, ...] | None:
        """The settings the last step ran at, if the server has not had them yet
        (a gradient push carries the gradient of the last step)."""
        if self._step_hyper is None or self._step_hyper == self._hyper_sent:
            return None
        self._hyper_sent = self._step_hyper
        return self._step_hyper

    def _take_settings(self) -> None:
        """The optimizer's settings for this gradient step, as DDP's ``opt.step()``
        would read them: before ``sched.step()``, whichever side of ``sync.optimizer``
        the scheduler was built on (both step the same param_groups). (A local
        step is the worker's own optimizer's: nothing to check or send.)"""
        changed = changed_setting(self._settings, self.opt)
        if changed is not None:
            raise BadInput(
                f"worker {self.w}: your loop changed the optimizer after sync.optimizer ({changed}); rank 0's "
                f"copy, which takes the steps, follows only {', '.join(FOLLOWED)}: set the others before "
                "sync.optimizer, on every rank"
            )
        self._step_hyper = hyperparameters(self.opt)
        if len(self._step_hyper) > P.HYPER_MAX:
            raise BadInput(
                f"worker {self.w}: {len(self.opt.param_groups)} parameter groups are more than a push can "
                f"carry the settings of ({P.HYPER_MAX} values): merge groups that share their settings"
            )

    def _sync_module(self) -> None:
        if self.model.local is not None and self.model.local is not self._in_module:
            self.flat.load(self.model.local)
            self._in_module = self.model.local
            self._module_ahead = False

    def _catch_up(self) -> None:
        """The local model from the module, if local steps have moved it since
        it was last copied out. Local steps of a delta round on the collective
        path leave the model in the module (a copy of the whole model per step
        cost local SGD about a tenth of its step at 12M–50M parameters); it is
        copied out once, when the round takes the delta. (Only the loop's own
        thread reads the local model on that path: ``FETCH`` is given the
        round's global model.)"""
        if self._module_ahead:
            self._copy_out()

    def _copy_out(self) -> None:
        """The module's parameters, as they are now, become the local model."""
        self.model.local = self._in_module = self.flat.flat()
        self._module_ahead = False

    def _push(self, done: Done, kind: str) -> torch.Tensor | None:
        self._catch_up()
        return super()._push(done, kind)

    def _next(self) -> tuple[P.Command, torch.Tensor | None]:
        item = self.commands.get()
        if isinstance(item, BaseException):
            raise RuntimeError(f"worker {self.w}: lost the server (rank 0): {item}") from item
        return item

    def _advance(self) -> None:
        """Do the server's commands until the next step is allowed (the loop
        computes it) or the run ends: the worker's side of the protocol is
        WorkerProcess's (:meth:`~hetsync.runtime.worker.WorkerProcess.until_step`)."""
        step = self.until_step()
        if step is None:  # EXIT
            self.done = self._exited = True
            return
        self._pend(*step)

    def _reset(self, cmd: P.ResetCmd, pulled: torch.Tensor | PendingModel) -> None:
        super()._reset(cmd, pulled)
        self._sync_module()
        self._hyper_sent = None  # a run's server has not had them

    def _bye(self) -> None:
        super()._bye()
        self.done = True

    def _pend(self, step: P.StepOrder, done: Done, out: torch.Tensor | None) -> None:
        """The next step may start: the user's loop computes it."""
        start, base = self._begin_step(step)
        self._sync_module()
        if self.collective and step.push_after == "grad" and step.local_lr is None:
            assert self.reducer is not None
            self.reducer.begin(step.batch_size)  # (its buckets fill during the loop's backward)
        self.pending = (step, done, out, start, base)

    def step(self) -> None:
        """The user's step is done: finish it as the command said (on the
        collective path the backward pass has), then go on to the next."""
        if self.step_check is not None:
            self.step_check.step()
        if self._reported:
            self._reported = False
        elif self.pending is None:
            return
        else:
            self._finish_step()
        self._advance()  # (a continuous step goes on: the worker's state holds it)

    def _finish_step(self) -> None:
        """Report the pending step as its command said (push, local step, into the round)."""
        assert self.pending is not None
        order, done, out, start, base = self.pending
        self.pending = None
        wait_for(self.flat.accelerators)
        measured_s = self._now_s() - start
        if order.local_lr is not None:  # a local step: the user's optimizer takes it
            self.opt.step()
            if self.collective and self.round_kind == "delta":
                self._module_ahead = True  # (copied out once, when the round takes its delta: _push)
            else:
                self._copy_out()
            grad = None
        elif self.collective and order.push_after == "grad":  # the round's step is taken here, on its pull
            grad = None
        else:  # rank 0's copy of the optimizer will take the step: at this one's settings
            self._take_settings()
            grad = self.flat.flat_grad()
        after = self._end_step(order, done, grad, start, base, measured_s)
        out = after if after is not None else out
        self._send_report(done, out)
        if self._now_s() - self._buffers_sent_s >= self._buffers_every_s:
            self._send_buffers()

    def _send_buffers(self) -> None:
        """The module's running statistics, for the model the server evaluates and saves."""
        if self.flat.buffers:
            self._buffers_sent_s = self._now_s()
            self._send(P.Buffers(), self.flat.flat_buffers())

    def leave(self) -> None:
        """Tell the server this worker's loop has ended, do the transfers it
        still commands for the steps already reported (WBSP-overlap pushes
        the steps finished since its last push: they are not lost), and wait
        for its ``EXIT``. The step given for after the loop is not run."""
        if self._exited:
            return
        self._send_buffers()
        # p2p: the push-sum weight of the model it leaves
        model = self.model.local if self.model.local is not None and not self.collective else self.flat.flat()
        self._send(P.Leaving(weight=self.model.weight), model)
        if self.collective and self.reducer is not None and self.reducer.active:
            self._zero_round()  # the round it was given and will not compute: the others reduce with it
        self.pending = None
        while True:
            cmd, payload = self._next()
            if isinstance(cmd, P.ExitCmd):
                break
            if isinstance(cmd, P.StopCmd):  # the run ended before the server saw us leave
                self._bye()
            elif self.state.zero_order(cmd):
                self._zero_round()  # parked: a round of the others'
            elif isinstance(cmd, P.SnapshotCmd):
                self._snapshot(cmd)  # the run's last checkpoint (collective path): its model is this one's
            elif isinstance(cmd, P.WorkCmd) and (cmd.push is not None or cmd.pull is not None):
                transfers = dataclasses.replace(cmd, step=None)  # (sent before the server knew)
                self._send_report(*self._transfers(transfers, payload, free_since_s=self._now_s()))
        self.done = self._exited = True


class SyncOptimizer(OptimizerView):
    """The user's optimizer under a hetsync policy: ``step()`` finishes this
    worker's step as the policy says (push, local step, multicast) and waits
    until the next one may start. Everything else is the wrapped optimizer's
    (:class:`~hetsync.optim.OptimizerView`), so LR schedulers work on either."""

    def __init__(self, optimizer: torch.optim.Optimizer, worker: _LoopWorker) -> None:
        super().__init__(optimizer)
        self._worker = worker

    def step(self, closure: Callable[[], Any] | None = None) -> Any:  # type: ignore[override]
        loss = closure() if closure is not None else None
        self._worker.step()
        # what the wrapped optimizer's own step would have told a scheduler built on it before
        # sync.optimizer (torch warns "lr_scheduler.step() before optimizer.step()" otherwise)
        self.optimizer._opt_called = True  # type: ignore[attr-defined]
        return loss
