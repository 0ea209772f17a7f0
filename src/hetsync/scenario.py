"""Scenarios: a cluster profile plus a learning job, read from YAML.

A scenario names the workers and how fast each one is, the network, the
workload and the stop condition. Built-in scenarios ship inside the package
(``hetsync/scenarios/*.yaml``); any other YAML file with the same keys works
too. Every key is checked: an unknown key or a bad value raises
:class:`~hetsync.errors.BadInput` with a message that names the key.

A file's keys are flat (``workers``, ``batch_size``, ``max_time_s``,
``per_sample_s``, ...; docs/scenarios.md); in code a :class:`Scenario` holds
them in four sections, each a frozen dataclass that checks its own values:

- :class:`Cluster`: the workers, their speeds and links, the server's costs;
- :class:`Job`: the workload, the training recipe, the batch, the seed;
- :class:`StopRule`: the :class:`Target`, the time and step limits, the
  evaluation interval;
- :class:`Timing`: the device's curve, the base :class:`StepCost`, noise and
  stragglers. ``fixed_s: measured`` or ``per_sample_s: measured`` reads as a
  :class:`StepToMeasure`, which :func:`hetsync.steptime.resolve_measured`
  turns into a :class:`StepCost` where a scenario is loaded for a simulation.

:func:`scenario_from_dict` reads the flat keys into the sections and
:meth:`Scenario.to_dict` writes them back.

Per-worker keys (``slowdown``, ``delay_s``, ``bandwidth_Bps``,
``saturation_batch``, ``max_batch``) take a scalar (every worker the same), a
list with one value per worker, or a generator mapping:

- ``{linspace: [a, b]}``: evenly spaced from a (worker 0) to b (worker N−1);
- ``{uniform: [a, b]}``: drawn uniformly, from the scenario seed;
- ``{cycle: [v0, v1, ...]}``: the pattern repeated over the workers;
- ``{workers: [i, j, ...] | half | all, value: v, default: d}``: v on the
  named workers (``half``: the second half), d (default 0 or 1) elsewhere.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from hetsync import limits as L
from hetsync.errors import BadInput
from hetsync.recipe import OptimizerConfig, ScheduleConfig, parse_clip_norm, parse_optimizer, parse_schedule
from hetsync.safeyaml import YAMLLimitError, safe_load

BUILTIN_PACKAGE = "hetsync.scenarios"
DIRECTIONS = ("max", "min")  # of a target: reached at value >= target ("max") or <= target ("min")
MEASURED = "measured"  # fixed_s / per_sample_s: time the workload on this machine (hetsync.steptime)


@dataclass(frozen=True, slots=True, kw_only=True)
class BackgroundLoad:
    """Time-varying load on some workers, like a stress tool switched on and
    off: while on, their steps take ``factor`` times longer. A square wave of
    period ``period_s``, on for ``on_s`` of it, with a per-worker phase."""

    workers: tuple[int, ...]
    period_s: float
    on_s: float
    factor: float
    phases_s: tuple[float, ...]  # one per loaded worker

    def factor_at(self, worker: int, now_s: float) -> float:
        try:
            k = self.workers.index(worker)
        except ValueError:
            return 1.0
        return self.factor if (now_s + self.phases_s[k]) % self.period_s < self.on_s else 1.0

    def next_switch(self, worker: int, now_s: float) -> tuple[float, float]:
        """The worker's next switch strictly after ``now_s``: (time, factor
        from then on); (inf, 1.0) if its load never changes."""
        if worker not in self.workers or not 0 < self.on_s < self.period_s:
            return math.inf, 1.0
        phase = self.phases_s[self.workers.index(worker)]
        cycle = math.floor((now_s + phase) / self.period_s) * self.period_s - phase
        eps = 1e-9 * self.period_s
        for at, factor in ((cycle + self.on_s, 1.0), (cycle + self.period_s, self.factor)):
            if at > now_s + eps:
                return at, factor
        return cycle + self.period_s + self.on_s, 1.0


Table = tuple[tuple[int, float], ...]  # (batch size, median seconds per step), as timed
STEP_COST_KEYS = ("fixed_s", "per_sample_s")  # the YAML keys of a step's base cost


@dataclass(frozen=True, slots=True, kw_only=True)
class StepCost:
    """A step's base cost, ``fixed_s + per_sample_s · batch`` seconds, before
    the cluster's slowdowns, noise, stragglers, load and delays apply
    (docs/architecture.md §4). ``measured`` names the coefficients timed on
    this machine (hetsync.steptime) and ``table`` the timings they were
    fitted to; both are empty where the scenario gave the figures."""

    fixed_s: float
    per_sample_s: float
    measured: tuple[str, ...] = ()
    table: Table = ()

    def __post_init__(self) -> None:
        for key in STEP_COST_KEYS:
            _check_step_figure(key, getattr(self, key))
        _check(set(self.measured) <= set(STEP_COST_KEYS), "measured", self.measured, f"must name {STEP_COST_KEYS}")

    def step_s(self, batch: int, saturation_batch: int = 0) -> float:
        """The base seconds of a step of ``batch`` samples: linear in the
        batch (a CPU-like worker), or flat up to ``saturation_batch`` and
        linear after it (a GPU-like worker, docs/architecture.md §4)."""
        return self.fixed_s + self.per_sample_s * max(0, batch - saturation_batch)

    def to_dict(self) -> dict[str, Any]:
        """A summary's ``measured_step`` (docs/formats.md): the figures, the table, the keys fitted."""
        return {
            "fixed_s": self.fixed_s,
            "per_sample_s": self.per_sample_s,
            "table": [[b, s] for b, s in self.table],
            "fitted": list(self.measured),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class StepToMeasure:
    """A step cost the scenario asks to time on this machine (``fixed_s`` or
    ``per_sample_s`` is ``measured``): None for a coefficient to measure, the
    figure for one given. :func:`hetsync.steptime.resolve_measured` turns it
    into a :class:`StepCost` where a scenario is loaded for a simulation."""

    fixed_s: float | None
    per_sample_s: float | None

    def __post_init__(self) -> None:
        if self.fixed_s is not None and self.per_sample_s is not None:
            raise BadInput(
                "a StepToMeasure has fixed_s or per_sample_s to measure (None); figures for both are a StepCost"
            )
        for key in STEP_COST_KEYS:
            if getattr(self, key) is not None:
                _check_step_figure(key, getattr(self, key))

    @property
    def to_measure(self) -> tuple[str, ...]:
        return tuple(k for k in STEP_COST_KEYS if getattr(self, k) is None)


def _check_step_figure(key: str, v: Any) -> None:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= L.MAX_STEP_S
    _check(ok, key, v, f"must be a number in [0, {L.shown(L.MAX_STEP_S)}] or {MEASURED!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Absence:
    """One entry of the scenario key ``membership``: worker ``worker`` leaves
    the run at ``leave_s`` and joins it again at ``join_s`` (simulated
    seconds). ``leave_s`` None: it starts absent and first joins at
    ``join_s``; ``join_s`` None: it leaves for good. ``key`` names the entry
    in messages (``membership[0]``)."""

    worker: int
    leave_s: float | None = None
    join_s: float | None = None
    key: str = "membership"

    def __post_init__(self) -> None:
        k = self.key
        w = self.worker
        _check(isinstance(w, int) and not isinstance(w, bool) and w >= 0, f"{k}.worker", w, "must be an integer >= 0")
        for name in ("leave_s", "join_s"):
            v = getattr(self, name)
            if v is not None:
                _check_range(f"{k}.{name}", v, 0, L.MAX_TIME_S)
        _check(
            self.leave_s is not None or self.join_s is not None,
            k,
            None,
            "needs leave_s, join_s or both (leave_s alone: it leaves for good; join_s alone: it starts absent)",
        )
        if self.leave_s is not None and self.join_s is not None:
            _check(self.join_s > self.leave_s, f"{k}.join_s", self.join_s, f"must be after leave_s={self.leave_s:g}")

    @property
    def start_s(self) -> float:
        """When the absence begins (0: at the start)."""
        return 0.0 if self.leave_s is None else self.leave_s

    @property
    def end_s(self) -> float:
        """When it ends (infinity: never)."""
        return math.inf if self.join_s is None else self.join_s


@dataclass(frozen=True, slots=True, kw_only=True)
class Cluster:
    """The machines: how many workers, how fast each one is, the links and
    what the parameter server costs. A per-worker tuple holds one value per
    worker (``saturation_batch`` and ``max_batch`` may be empty: none)."""

    workers: int
    # each worker's speed: its steps take `slowdown` times the base cost, plus
    # `delay_s` (an injected sleep, as the WBSP paper makes stragglers); on a
    # GPU-like worker the cost is flat up to `saturation_batch` and the batch
    # is capped at `max_batch`
    slowdown: tuple[float, ...] = ()
    delay_s: tuple[float, ...] = ()
    saturation_batch: tuple[int, ...] = ()
    max_batch: tuple[int, ...] = ()
    background_load: BackgroundLoad | None = None
    # the links: each worker's uplink and downlink, the server's (None: the
    # fastest worker's), the latency of a transfer; while `link_load` is on, a
    # loaded worker's links carry bandwidth_Bps / factor
    bandwidth_Bps: tuple[float, ...] = ()
    server_bandwidth_Bps: float | None = None
    latency_s: float = 0.0
    link_load: BackgroundLoad | None = None
    # the parameter server's own time per message it handles (a report, a push,
    # a command or a model it sends), one message at a time in arrival order;
    # 0: the server is free (peer-to-peer runs have no server: ignored there)
    server_s_per_message: float = 0.0
    # commands to workers and their step/pull reports to the server are
    # messages that travel latency_s, as a model's transfer does (False: free)
    control_latency: bool = False
    # workers that leave and (re)join the run (simulator): one Absence per interval away
    membership: tuple[Absence, ...] = ()

    def __post_init__(self) -> None:
        n = self.workers
        _check(
            isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= L.MAX_WORKERS,
            "workers",
            n,
            f"must be in 1..{L.MAX_WORKERS}",
        )
        for key, low, high in _PER_WORKER_RANGES:
            values = getattr(self, key)
            if key in ("saturation_batch", "max_batch") and not values:
                continue
            _check(len(values) == n, key, len(values), f"must have one value per worker ({n})")
            for i, v in enumerate(values):
                _check_range(f"{key}[{i}]", v, low, high, low_open=key == "slowdown")
        _check_range("latency_s", self.latency_s, 0, L.MAX_STEP_S)
        _check_range("server_s_per_message", self.server_s_per_message, 0, L.MAX_STEP_S)
        _check(isinstance(self.control_latency, bool), "control_latency", self.control_latency, "must be true or false")
        if self.server_bandwidth_Bps is not None:
            _check(
                self.server_bandwidth_Bps >= L.MIN_BANDWIDTH_BPS,
                "server_bandwidth_Bps",
                self.server_bandwidth_Bps,
                f"must be >= {L.MIN_BANDWIDTH_BPS:g} bytes/s (use .inf for a free link)",
            )
        _check_membership(self.membership, n)

    @property
    def server_Bps(self) -> float:
        """The server's link: its own setting, else the fastest worker's."""
        return self.server_bandwidth_Bps if self.server_bandwidth_Bps is not None else max(self.bandwidth_Bps)

    def cut_to(self, n: int) -> Cluster:
        """The cluster for n workers: worker i keeps worker i mod N's values;
        the loads keep the workers below n."""

        def cut(values: tuple[Any, ...]) -> tuple[Any, ...]:
            return tuple(values[i % len(values)] for i in range(n)) if values else values

        def keep_workers(load: BackgroundLoad | None) -> BackgroundLoad | None:
            if load is None:
                return None
            keep = [(w, ph) for w, ph in zip(load.workers, load.phases_s, strict=True) if w < n]
            return dataclasses.replace(load, workers=tuple(w for w, _ in keep), phases_s=tuple(ph for _, ph in keep))

        return dataclasses.replace(
            self,
            workers=n,
            **{key: cut(getattr(self, key)) for key in _PER_WORKER_DEFAULTS},
            background_load=keep_workers(self.background_load),
            link_load=keep_workers(self.link_load),
            membership=tuple(a for a in self.membership if a.worker < n),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    """The learning job: the workload, the training recipe, the batch, the
    seed, and the policies compared on it unless others are named."""

    workload: str = "digits-mlp"
    workload_args: dict[str, Any] = field(default_factory=dict)
    batch_size: int = 32
    lr: float = 0.1
    # the training recipe (hetsync.recipe): `optimizer` steps on gradients
    # (server applies and workers' local steps, unless local_optimizer is
    # set), `outer_optimizer` on delta pushes; the schedule scales lr
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    local_optimizer: OptimizerConfig | None = None
    outer_optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    clip_norm: float | None = None
    label_skew: float = 0.0
    # peer to peer: how a receiver mixes the models that arrived — "equal"
    # (equal-weight average with its own) or "push-sum" (weights travel with
    # the copies, so the network's weighted average is kept; hetsync.localmodel)
    p2p_mixing: str = "equal"
    # bytes a model transfer carries; None: the workload's real model size
    # (set it to emulate, say, a 100 MB model while the math runs on a small one)
    model_bytes: int | None = None
    seed: int = 0
    policies: tuple[str, ...] = ("bsp", "asp", "ssp")
    # a profiled script's (`hetsync profile --script` writes it): what `advise --verify` launches -- the
    # script's path, its arguments, the folder it ran from and the cluster it emulated (the simulator ignores it)
    script: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        _check(
            1 <= self.batch_size <= L.MAX_BATCH_SIZE, "batch_size", self.batch_size, f"must be in 1..{L.MAX_BATCH_SIZE}"
        )
        _check_range("lr", self.lr, 0, L.MAX_LR, low_open=True)
        _check(0 <= self.seed <= L.MAX_SEED, "seed", self.seed, f"must be in 0..{L.MAX_SEED}")
        _check(0 <= self.label_skew <= 1, "label_skew", self.label_skew, "must be in [0, 1]")
        _check(self.p2p_mixing in P2P_MIXING, "p2p_mixing", self.p2p_mixing, f"must be one of {', '.join(P2P_MIXING)}")
        if self.model_bytes is not None:
            _check(
                0 <= self.model_bytes <= L.MAX_MODEL_BYTES,
                "model_bytes",
                self.model_bytes,
                f"must be in 0..{L.MAX_MODEL_BYTES} (10 TB)",
            )
        if self.policies:
            from hetsync.policies import parse_policy_spec, policy_class

            for spec in self.policies:
                policy_class(parse_policy_spec(spec)[0])


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """What counts as reached: ``metric`` (one the workload reports) at
    ``value``; ``direction`` "max" (reached at >= value) or "min" (<=), None:
    the workload's for that metric. YAML: ``target: {metric, value,
    direction}``, or the shorthand ``target_accuracy: v``."""

    metric: str = "accuracy"
    value: float = 0.9
    direction: str | None = None

    def __post_init__(self) -> None:
        _check(
            isinstance(self.metric, str) and bool(self.metric), "target.metric", self.metric, "must be a metric name"
        )
        _check(math.isfinite(self.value), "target.value", self.value, "must be a finite number")
        if self.metric == "accuracy":
            _check(0 < self.value <= 1, "target.value", self.value, "must be in (0, 1] for accuracy")
        _check(self.direction in (None, *DIRECTIONS), "target.direction", self.direction, "must be 'max' or 'min'")

    @property
    def accuracy(self) -> float | None:
        """The target value when the metric is accuracy, else None."""
        return self.value if self.metric == "accuracy" else None

    def direction_for(self, workload_name: str, metrics: dict[str, str]) -> str:
        """The direction ("max" or "min") given the metrics the workload
        reports (name -> direction, in order); BadInput naming
        ``target.metric`` if the workload does not report the metric, or
        ``target.direction`` if neither the target nor the workload gives one."""
        if self.metric not in metrics:
            raise BadInput(
                f"scenario key 'target.metric': workload {workload_name!r} reports "
                f"{', '.join(metrics) or 'no metrics'}; got {self.metric!r}"
            )
        direction = self.direction or metrics[self.metric]
        if direction not in DIRECTIONS:
            raise BadInput(
                f"scenario key 'target.direction' is required (max or min): workload {workload_name!r} "
                f"gives no direction for metric {self.metric!r}"
            )
        return direction


@dataclass(frozen=True, slots=True, kw_only=True)
class StopRule:
    """When a run ends and what it aims at: the target, the virtual (or
    real) time and the steps a run may take (at least one of them), and how
    often the model is evaluated (None: the driver's default)."""

    target: Target = field(default_factory=Target)
    max_time_s: float | None = None
    max_steps: int | None = None
    eval_every_s: float | None = None

    def __post_init__(self) -> None:
        _check(
            self.max_time_s is not None or self.max_steps is not None,
            "max_time_s",
            None,
            "or max_steps must be set (the stop condition)",
        )
        if self.max_time_s is not None:
            _check_range("max_time_s", self.max_time_s, 0, L.MAX_TIME_S, low_open=True)
        if self.max_steps is not None:
            _check(1 <= self.max_steps <= L.MAX_STEPS, "max_steps", self.max_steps, f"must be in 1..{L.MAX_STEPS}")
        if self.eval_every_s is not None:
            _check_range("eval_every_s", self.eval_every_s, L.MIN_EVAL_EVERY_S, L.MAX_TIME_S)
            if self.max_time_s is not None:
                evaluations = self.max_time_s / self.eval_every_s
                _check(
                    evaluations <= L.MAX_EVALUATIONS,
                    "eval_every_s",
                    self.eval_every_s,
                    f"must be >= max_time_s / {L.MAX_EVALUATIONS} = {self.max_time_s / L.MAX_EVALUATIONS:g} "
                    f"(at most {L.MAX_EVALUATIONS} evaluations per run)",
                )


@dataclass(frozen=True, slots=True, kw_only=True)
class Timing:
    """How long a step takes (docs/architecture.md §4): the device's curve
    (``cpu``: linear in the batch; ``gpu``: flat up to each worker's
    saturation batch), the base step cost, per-step noise and transient
    stragglers; and how real processes play it (``runtime_timing``).
    YAML keys: device, fixed_s, per_sample_s, jitter, straggler_prob,
    straggler_factor, runtime_timing."""

    device: str = "cpu"
    # the base cost; a StepToMeasure until hetsync.steptime.resolve_measured
    # times the workload (read it through Scenario.step_cost, which says so)
    step: StepCost | StepToMeasure = field(default_factory=lambda: StepCost(fixed_s=0.0, per_sample_s=0.001))
    jitter: float = 0.0
    straggler_prob: float = 0.0
    straggler_factor: float = 1.0
    # how real processes emulate the timing above: "real" stretches each real
    # step by the worker's slowdown (and adds delay_s) and moves the real model
    # at loopback speed; "modelled" makes every step last the modelled step
    # time and every transfer the modelled link time, as `hetsync run --pace
    # --throttle` does (the simulator ignores this key)
    runtime_timing: str = "real"

    def __post_init__(self) -> None:
        _check(self.device in ("cpu", "gpu"), "device", self.device, "must be 'cpu' or 'gpu'")
        _check(
            self.runtime_timing in RUNTIME_TIMINGS,
            "runtime_timing",
            self.runtime_timing,
            f"must be one of {', '.join(RUNTIME_TIMINGS)}",
        )
        _check_range("jitter", self.jitter, 0, L.MAX_JITTER)
        _check(0 <= self.straggler_prob <= 1, "straggler_prob", self.straggler_prob, "must be in [0, 1]")
        _check_range("straggler_factor", self.straggler_factor, 1, L.MAX_FACTOR)

    @property
    def resolved(self) -> bool:
        """Whether the step cost is figures (not ``measured`` still to time)."""
        return isinstance(self.step, StepCost)

    @property
    def modelled(self) -> bool:
        """Whether real processes play the modelled step and transfer times (``runtime_timing``)."""
        return self.runtime_timing == "modelled"


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    """A cluster and a job on it: the machines (:class:`Cluster`), the
    learning job (:class:`Job`), when a run stops (:class:`StopRule`) and
    how long a step takes (:class:`Timing`). A YAML file holds the same
    settings as flat keys (``workers``, ``batch_size``, ``max_time_s``,
    ``per_sample_s``, ...): :func:`scenario_from_dict` reads them into the
    sections and :meth:`to_dict` writes them back."""

    name: str
    description: str = ""
    cluster: Cluster
    job: Job = field(default_factory=Job)
    stop: StopRule
    timing: Timing = field(default_factory=Timing)
    # the mapping it was read from, so generators ({workers: half}, ...) can be
    # re-resolved for another worker count
    source: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    # what running it as asked changed from the file (another worker count cut
    # or repeated a per-worker list): shown on the terminal, kept in summaries
    notes: tuple[str, ...] = field(default=(), compare=False, repr=False)

    @property
    def step_cost(self) -> StepCost:
        """The base step cost as figures; an error naming the fix while a
        ``measured`` coefficient is not timed yet."""
        step = self.timing.step
        if isinstance(step, StepCost):
            return step
        raise BadInput(
            f"scenario {self.name!r}: {step.to_measure[0]} is {MEASURED!r} and not measured yet "
            "(resolve it where the scenario is loaded: hetsync.steptime.resolve_measured(scenario))"
        )

    def nominal_step_s(self, worker: int, batch_size: int) -> float:
        """Step time without noise, stragglers or load."""
        cluster = self.cluster
        gpu = self.timing.device == "gpu" and bool(cluster.saturation_batch)
        base = self.step_cost.step_s(batch_size, cluster.saturation_batch[worker] if gpu else 0)
        return base * cluster.slowdown[worker] + cluster.delay_s[worker]

    def with_step_cost(self, cost: StepCost) -> Scenario:
        """The scenario charged ``cost`` (its ``measured`` coefficients timed;
        a coefficient the scenario gave keeps its figure). ``source`` holds
        the figures too, so :meth:`with_workers` keeps them."""
        if self.timing.resolved:
            return self
        source = {**self.source, **{k: getattr(cost, k) for k in cost.measured}} if self.source is not None else None
        return dataclasses.replace(self, timing=dataclasses.replace(self.timing, step=cost), source=source)

    def with_workers(self, n: int) -> Scenario:
        """The same cluster for n workers. Generators (``{workers: half, ...}``,
        ``{linspace: ...}``) are resolved again for n; explicit per-worker
        lists are cycled (worker i gets the value of worker i mod N). The job,
        the stop rule and the timing stay as they are."""
        if n == self.cluster.workers:
            return self
        if not 1 <= n <= L.MAX_WORKERS:
            raise BadInput(f"scenario {self.name!r}: cannot run with {n} workers (1..{L.MAX_WORKERS})")
        if self.source is not None:
            note = describe_fit(self.source, n, name=self.name)
            fitted = scenario_from_dict(fit_to_workers(self.source, n), default_name=self.name)
            source: dict[str, Any] | None = fitted.source
            cluster = fitted.cluster
        else:
            c = self.cluster
            loads = {k: getattr(c, k) for k in ("background_load", "link_load")}
            written: dict[str, Any] = {k: list(getattr(c, k)) for k in _PER_WORKER_DEFAULTS}
            written |= {k: {"workers": list(v.workers)} for k, v in loads.items() if v is not None}
            note = describe_fit({"workers": c.workers, **written}, n, name=self.name)
            source, cluster = None, c.cut_to(n)
        return dataclasses.replace(self, cluster=cluster, source=source, notes=(*self.notes, *([note] if note else [])))

    def setting(self, key: str) -> Any:
        """What the YAML key ``key`` became, for code that walks a file's keys:
        ``setting("batch_size")`` is ``job.batch_size``; ``fixed_s`` and
        ``per_sample_s`` give the figure (``measured`` while it is to be
        measured); ``target`` and ``target_accuracy`` give the :class:`Target`."""
        if key in ("name", "description"):
            return getattr(self, key)
        if key in ("target", "target_accuracy"):
            return self.stop.target
        if key in STEP_COST_KEYS:
            figure = getattr(self.timing.step, key)
            return MEASURED if figure is None else figure
        if key not in _SECTION_OF:
            raise KeyError(f"no scenario key {key!r}")
        return getattr(getattr(self, _SECTION_OF[key]), key)

    def to_dict(self) -> dict[str, Any]:
        """The scenario as flat YAML keys (the file format, docs/scenarios.md)."""
        out: dict[str, Any] = {"name": self.name, "description": self.description}
        out |= dataclasses.asdict(self.cluster)
        out["membership"] = [  # (as the file writes them: an omitted time is absent, the entry's name is not kept)
            {k: v for k, v in (("worker", a.worker), ("leave_s", a.leave_s), ("join_s", a.join_s)) if v is not None}
            for a in self.cluster.membership
        ]
        out |= dataclasses.asdict(self.job)
        out["policies"] = list(self.job.policies)
        stop = dataclasses.asdict(self.stop)
        target = stop.pop("target")
        out |= stop
        # the target as the scenario key that sets it
        out["target"] = {k: v for k, v in target.items() if k != "direction" or v is not None}
        timing = dataclasses.asdict(self.timing)
        step = timing.pop("step")
        out |= timing
        out |= {k: MEASURED if step[k] is None else step[k] for k in STEP_COST_KEYS}
        return out


def fit_to_workers(raw: dict[str, Any], n: int, keep: frozenset[str] = frozenset()) -> dict[str, Any]:
    """A raw scenario mapping for n workers: explicit per-worker lists are
    cycled (worker i gets entry i mod len) and explicit load worker lists
    drop indices >= n; generators are left to resolve for n. Keys in ``keep``
    (given for the new size already) are left alone."""
    out = {**raw, "workers": n}
    for key in _PER_WORKER_DEFAULTS:
        value = out.get(key)
        if key not in keep and isinstance(value, list) and value:
            out[key] = [value[i % len(value)] for i in range(n)]
    for key in ("background_load", "link_load"):
        load = out.get(key)
        if key not in keep and isinstance(load, dict) and isinstance(load.get("workers"), list):
            out[key] = {**load, "workers": [w for w in load["workers"] if isinstance(w, int) and w < n]}
    members = out.get("membership")
    if "membership" not in keep and isinstance(members, list):
        out["membership"] = [
            a for a in members if not (isinstance(a, dict) and isinstance(a.get("worker"), int) and a["worker"] >= n)
        ]
    return out


def describe_fit(raw: dict[str, Any], n: int, keep: frozenset[str] = frozenset(), *, name: str) -> str | None:
    """One line saying what :func:`fit_to_workers` changes in ``raw`` to run
    it with n workers (lists cut or repeated, loaded workers dropped); None if
    n is already its worker count."""
    old = raw.get("workers")
    if not isinstance(old, int) or isinstance(old, bool) or old == n:
        return None
    changes = []
    for key in _PER_WORKER_DEFAULTS:
        value = raw.get(key)
        if key in keep or not isinstance(value, list) or len(value) == n or _all_equal(value):
            continue  # a list of one value reads the same for any worker count
        if n < len(value):
            changes.append(f"{key} keeps its first {n} values and drops {_few(value[n:])}")
        else:
            changes.append(f"{key} repeats its {len(value)} values over {n} workers")
    for key in ("background_load", "link_load"):
        load = raw.get(key)
        if key not in keep and isinstance(load, dict) and isinstance(load.get("workers"), list):
            dropped = [w for w in load["workers"] if isinstance(w, int) and w >= n]
            if dropped:
                changes.append(f"{key} drops workers {_few(dropped)}")
    return f"scenario {name!r} has {old} workers, running {n}" + (": " + "; ".join(changes) if changes else "")


def _all_equal(values: list[Any]) -> bool:
    return all(v == values[0] for v in values)


def _few(values: list[Any], most: int = 6) -> str:
    shown = ", ".join(repr(v) for v in values[:most])
    more = f", ... ({len(values) - most} more)" if len(values) > most else ""
    return f"[{shown}{more}]"


RUNTIME_TIMINGS = ("real", "modelled")  # Scenario.runtime_timing
P2P_MIXING = ("equal", "push-sum")  # how peer-to-peer receivers mix (Scenario.p2p_mixing)


def _check_membership(entries: tuple[Absence, ...], n: int) -> None:
    """Each entry's worker exists, and one worker's absences do not overlap."""
    by_worker: dict[int, list[Absence]] = {}
    for a in entries:
        _check(a.worker < n, f"{a.key}.worker", a.worker, f"must be a worker of the cluster, 0..{n - 1}")
        by_worker.setdefault(a.worker, []).append(a)
    for w, absences in by_worker.items():
        absences.sort(key=lambda a: a.start_s)
        starts_absent = [a for a in absences if a.leave_s is None]
        _check(
            len(starts_absent) <= 1,
            starts_absent[-1].key if starts_absent else "membership",
            None,
            f"starts worker {w} absent a second time (leave_s omitted: absent from the start)",
        )
        for before, after in zip(absences, absences[1:], strict=False):
            _check(
                after.start_s >= before.end_s,
                after.key,
                None,
                f"overlaps {before.key} (worker {w} is away from {before.start_s:g} s"
                + (f" to {before.end_s:g} s" if before.join_s is not None else " for good")
                + "): one worker's absences must not overlap",
            )


def _membership(raw: Any) -> tuple[Absence, ...]:
    """The scenario key ``membership``: a list of ``{worker, leave_s, join_s}``."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise BadInput(
            f"scenario key 'membership' must be a list of {{worker: W, leave_s: T1, join_s: T2}} entries, got {raw!r}"
        )
    out = []
    allowed = {"worker", "leave_s", "join_s"}
    for i, entry in enumerate(raw):
        key = f"membership[{i}]"
        if not isinstance(entry, dict):
            raise BadInput(
                f"scenario key {key!r} must be a mapping {{worker: W, leave_s: T1, join_s: T2}}, got {entry!r}"
            )
        unknown = set(entry) - allowed
        if unknown:
            raise BadInput(f"scenario key '{key}.{sorted(unknown)[0]}' is unknown (known: {sorted(allowed)})")
        if "worker" not in entry:
            raise BadInput(f"scenario key '{key}.worker' is required")
        times: dict[str, float | None] = {}
        for name in ("leave_s", "join_s"):
            v = entry.get(name)
            times[name] = None if v is None else _finite_number(f"{key}.{name}", v)
        out.append(Absence(worker=entry["worker"], key=key, **times))
    return tuple(out)


def _check(ok: bool, key: str, value: Any, rule: str) -> None:
    if not ok:
        shown = "" if value is None else f", got {value!r}"
        raise BadInput(f"scenario key {key!r} {rule}{shown}")


def _check_range(key: str, value: float, low: float, high: float, *, low_open: bool = False) -> None:
    """``value`` in [low, high] (``(low, high]`` with ``low_open``); NaN is
    out of every range, and infinity is only in one whose ``high`` is."""
    ok = (low < value if low_open else low <= value) and value <= high
    interval = f"{'(' if low_open else '['}{L.shown(low)}, {L.shown(high)}]"
    kind = "a number" if math.isinf(high) else "a finite number"
    _check(ok, key, value, f"must be {kind} in {interval}")


# per-worker keys: the range each value must lie in
_PER_WORKER_RANGES = (
    ("slowdown", 0.0, L.MAX_FACTOR),  # > 0
    ("delay_s", 0.0, L.MAX_STEP_S),
    ("bandwidth_Bps", L.MIN_BANDWIDTH_BPS, math.inf),
    ("saturation_batch", 0, L.MAX_BATCH_SIZE),
    ("max_batch", 1, L.MAX_BATCH_SIZE),
)


# ------------------------------------------------------------------ loading
_PER_WORKER_DEFAULTS = {
    "slowdown": 1.0,
    "delay_s": 0.0,
    "bandwidth_Bps": math.inf,
    "saturation_batch": None,
    "max_batch": None,
}


def _per_worker(key: str, raw: Any, n: int, rng: np.random.Generator) -> tuple[Any, ...]:
    if raw is None:
        default = _PER_WORKER_DEFAULTS[key]
        return () if default is None else (default,) * n
    integer = key in ("saturation_batch", "max_batch")
    if isinstance(raw, dict):
        values = _generate(key, raw, n, rng)
    elif isinstance(raw, (list, tuple)):
        values = list(raw)
    else:
        values = [raw] * n
    out = []
    for i, v in enumerate(values):
        v = _yaml_number(v)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise BadInput(f"scenario key '{key}[{i}]' must be a number, got {v!r}")
        if integer and not (math.isfinite(v) and v == int(v)):
            raise BadInput(f"scenario key '{key}[{i}]' must be a whole number of samples, got {v!r}")
        out.append(int(v) if integer else float(v))
    return tuple(out)


def _yaml_number(v: Any) -> Any:
    """PyYAML reads ``1.25e8`` (no dot or exponent sign) as a string; take it as the number it means."""
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return v
    return v


def _generate(key: str, spec: dict[str, Any], n: int, rng: np.random.Generator) -> list[float]:
    kinds = {"linspace", "uniform", "cycle", "workers"}
    if len(spec.keys() & kinds) != 1:
        raise BadInput(f"scenario key {key!r}: a mapping needs exactly one of {sorted(kinds)}, got {sorted(spec)}")
    if "linspace" in spec or "uniform" in spec:
        kind = "linspace" if "linspace" in spec else "uniform"
        bounds = spec[kind]
        if not (isinstance(bounds, list) and len(bounds) == 2):
            raise BadInput(f"scenario key '{key}.{kind}' must be a list [low, high], got {bounds!r}")
        lo, hi = (_finite_number(f"{key}.{kind}[{i}]", b) for i, b in enumerate(bounds))
        if kind == "linspace":
            return [float(v) for v in np.linspace(lo, hi, n)]
        return [float(v) for v in rng.uniform(lo, hi, n)]
    if "cycle" in spec:
        pattern = spec["cycle"]
        if not (isinstance(pattern, list) and pattern):
            raise BadInput(f"scenario key '{key}.cycle' must be a non-empty list, got {pattern!r}")
        return [pattern[i % len(pattern)] for i in range(n)]
    unknown = set(spec) - {"workers", "value", "default"}
    if unknown:
        raise BadInput(f"scenario key {key!r}: unknown field {sorted(unknown)[0]!r}")
    chosen = _worker_set(f"{key}.workers", spec["workers"], n)
    if "value" not in spec:
        raise BadInput(f"scenario key '{key}.value' is required with '{key}.workers'")
    default = spec.get("default", 1.0 if key == "slowdown" else 0.0)
    return [spec["value"] if i in chosen else default for i in range(n)]


def _finite_number(key: str, raw: Any) -> float:
    v = _yaml_number(raw)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise BadInput(f"scenario key {key!r} must be a finite number, got {raw!r}")
    return float(v)


def _worker_set(key: str, raw: Any, n: int) -> tuple[int, ...]:
    if raw == "all":
        return tuple(range(n))
    if raw == "half":
        return tuple(range(n - n // 2, n))
    if isinstance(raw, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in raw):
        bad = [i for i in raw if not 0 <= i < n]
        if bad:
            raise BadInput(f"scenario key {key!r}: worker {bad[0]} is out of range 0..{n - 1}")
        return tuple(sorted(set(raw)))
    raise BadInput(f"scenario key {key!r} must be 'all', 'half' or a list of worker indices, got {raw!r}")


def _background_load(raw: Any, n: int, rng: np.random.Generator, key: str = "background_load") -> BackgroundLoad | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise BadInput(f"scenario key {key!r} must be a mapping, got {raw!r}")
    allowed = {"workers", "period_s", "on_s", "factor", "random_phase", "phase_s"}
    unknown = set(raw) - allowed
    if unknown:
        raise BadInput(f"scenario key '{key}.{sorted(unknown)[0]}' is unknown (known: {sorted(allowed)})")
    workers = _worker_set(f"{key}.workers", raw.get("workers", "all"), n)
    for field_name in ("period_s", "on_s", "factor"):
        if field_name not in raw:
            raise BadInput(f"scenario key '{key}.{field_name}' is required")
    period = _finite_number(f"{key}.period_s", raw["period_s"])
    on = _finite_number(f"{key}.on_s", raw["on_s"])
    factor = _finite_number(f"{key}.factor", raw["factor"])
    _check_range(f"{key}.period_s", period, 0, L.MAX_TIME_S, low_open=True)
    _check(0 <= on <= period, f"{key}.on_s", on, "must be in [0, period_s]")
    _check_range(f"{key}.factor", factor, 1, L.MAX_FACTOR)
    if "phase_s" in raw:  # one phase for every listed worker: a load switched on at a chosen time
        phase = _finite_number(f"{key}.phase_s", raw["phase_s"])
        _check(0 <= phase < period, f"{key}.phase_s", phase, "must be in [0, period_s)")
        phases = (phase,) * len(workers)
    elif raw.get("random_phase", True):
        phases = tuple(float(p) for p in rng.uniform(0, period, len(workers)))
    else:
        phases = (0.0,) * len(workers)
    return BackgroundLoad(workers=workers, period_s=period, on_s=on, factor=factor, phases_s=phases)


def _flat_keys(section: type) -> tuple[str, ...]:
    """The YAML keys a section reads (its target and step cost have their own keys)."""
    return tuple(f.name for f in dataclasses.fields(section) if f.name not in ("target", "step"))


_SECTIONS = (Cluster, Job, StopRule, Timing)
_SECTION_OF = {  # a flat YAML key -> the Scenario field of the section that holds it
    key: name
    for name, section in (("cluster", Cluster), ("job", Job), ("stop", StopRule), ("timing", Timing))
    for key in _flat_keys(section)
}
_DEFAULT_STEP = {"fixed_s": 0.0, "per_sample_s": 0.001}  # fixed_s / per_sample_s when the file gives none
# what a scenario mapping may hold: `target` or its shorthand `target_accuracy` sets the stop rule's target
_KEYS = frozenset(
    {
        "name",
        "description",
        *(k for s in _SECTIONS for k in _flat_keys(s)),
        *STEP_COST_KEYS,
        "target",
        "target_accuracy",
    }
)
_TYPES: dict[str, tuple[type, ...]] = {
    "name": (str,),
    "description": (str,),
    "workers": (int,),
    "workload": (str,),
    "workload_args": (dict,),
    "batch_size": (int,),
    "lr": (int, float),
    "label_skew": (int, float),
    "p2p_mixing": (str,),
    "max_time_s": (int, float),
    "max_steps": (int,),
    "eval_every_s": (int, float),
    "seed": (int,),
    "policies": (list,),
    "device": (str,),
    "runtime_timing": (str,),
    "fixed_s": (int, float),
    "per_sample_s": (int, float),
    "jitter": (int, float),
    "straggler_prob": (int, float),
    "straggler_factor": (int, float),
    "server_bandwidth_Bps": (int, float),
    "latency_s": (int, float),
    "server_s_per_message": (int, float),
    "control_latency": (bool,),
    "model_bytes": (int,),
}


def scenario_from_dict(raw: dict[str, Any], *, default_name: str = "custom") -> Scenario:
    """Validate a parsed YAML mapping and resolve per-worker values."""
    if not isinstance(raw, dict):
        raise BadInput(f"a scenario must be a YAML mapping of keys to values, got {type(raw).__name__}")
    for key in raw:
        if key not in _KEYS:
            raise BadInput(f"unknown scenario key {key!r} (known: {', '.join(sorted(_KEYS))})")
    if "workers" not in raw:
        raise BadInput("scenario key 'workers' is required")
    values: dict[str, Any] = {"name": default_name}
    for key, types in _TYPES.items():
        if key not in raw or raw[key] is None:
            continue
        v = _yaml_number(raw[key]) if float in types else raw[key]
        if key in STEP_COST_KEYS and v == MEASURED:
            values[key] = MEASURED
            continue
        if (isinstance(v, bool) and bool not in types) or not isinstance(v, types):
            want = " or ".join(t.__name__ for t in types) + (f" or {MEASURED!r}" if key in STEP_COST_KEYS else "")
            raise BadInput(f"scenario key {key!r} must be {want}, got {v!r}")
        values[key] = float(v) if float in types else v
    n = values.get("workers")
    if n is None:
        raise BadInput("scenario key 'workers' is required (a number of workers, got none)")
    _check(1 <= n <= L.MAX_WORKERS, "workers", n, f"must be in 1..{L.MAX_WORKERS}")
    seed = values.get("seed", 0)
    _check(0 <= seed <= L.MAX_SEED, "seed", seed, f"must be in 0..{L.MAX_SEED}")  # before it seeds a generator
    if "policies" in values:
        values["policies"] = tuple(str(p) for p in values["policies"])
    rng = np.random.default_rng([values.get("seed", 0), 0x5CE7])
    for key in _PER_WORKER_DEFAULTS:
        values[key] = _per_worker(key, raw.get(key), n, rng)
    values["background_load"] = _background_load(raw.get("background_load"), n, rng)
    values["optimizer"] = parse_optimizer("optimizer", raw.get("optimizer"))
    if raw.get("local_optimizer") is not None:
        values["local_optimizer"] = parse_optimizer("local_optimizer", raw["local_optimizer"])
    values["outer_optimizer"] = parse_optimizer("outer_optimizer", raw.get("outer_optimizer"), outer=True)
    values["schedule"] = parse_schedule("schedule", raw.get("schedule"))
    values["clip_norm"] = parse_clip_norm(raw.get("clip_norm"))
    values["link_load"] = _background_load(raw.get("link_load"), n, rng, "link_load")
    values["membership"] = _membership(raw.get("membership"))
    values["script"] = parse_script(raw.get("script"))
    return Scenario(
        name=values["name"],
        description=values.get("description", ""),
        cluster=Cluster(**_pick(Cluster, values)),
        job=Job(**_pick(Job, values)),
        stop=StopRule(target=_target(raw), **_pick(StopRule, values)),
        timing=Timing(step=_step_cost(values), **_pick(Timing, values)),
        source={"name": values["name"], **raw},
    )


def _pick(section: type, values: dict[str, Any]) -> dict[str, Any]:
    return {k: values[k] for k in _flat_keys(section) if k in values}


def _step_cost(values: dict[str, Any]) -> StepCost | StepToMeasure:
    """``fixed_s`` and ``per_sample_s`` as a step cost: figures, or one to measure if either is ``measured``."""
    figures = {k: values.get(k, _DEFAULT_STEP[k]) for k in STEP_COST_KEYS}
    if MEASURED in figures.values():
        return StepToMeasure(**{k: None if v == MEASURED else v for k, v in figures.items()})
    return StepCost(**figures)


SCRIPT_FIELDS = ("path", "args", "cwd", "emulate")  # the `script` key's


def parse_script(value: Any) -> dict[str, Any] | None:
    """The ``script`` key of a profiled script's cluster file, checked:
    ``path`` (the script), ``args`` (its arguments), ``cwd`` (the folder it
    ran from), ``emulate`` (the cluster it played: a scenario mapping, a
    name or a path; null: none)."""
    if value is None:
        return None
    fix = "hetsync profile --script writes it; profile again to get it back"
    if not isinstance(value, dict):
        raise BadInput(f"scenario key 'script' must be a mapping {{path, args, cwd, emulate}} ({fix}), got {value!r}")
    unknown = sorted(str(k) for k in value if k not in SCRIPT_FIELDS)
    if unknown:
        raise BadInput(f"scenario key 'script.{unknown[0]}' is unknown (known: {', '.join(SCRIPT_FIELDS)})")
    path, args, cwd, emulate = (value.get(k) for k in SCRIPT_FIELDS)
    if not isinstance(path, str) or not path:
        raise BadInput(f"scenario key 'script.path' must be the training script's path ({fix}), got {path!r}")
    if args is None:
        args = []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise BadInput(f"scenario key 'script.args' must be a list of the script's arguments (strings), got {args!r}")
    if cwd is not None and (not isinstance(cwd, str) or not cwd):
        raise BadInput(f"scenario key 'script.cwd' must be the folder the script ran from, got {cwd!r}")
    if emulate is not None and not isinstance(emulate, (dict, str)):
        raise BadInput(
            f"scenario key 'script.emulate' must be the emulated cluster (a mapping, a name or a path) or null, "
            f"got {emulate!r}"
        )
    return {"path": path, "args": list(args), "cwd": cwd, "emulate": emulate}


def _target(raw: dict[str, Any]) -> Target:
    """The target from ``target: {metric, value, direction}`` or the
    shorthand ``target_accuracy: v`` (= ``{metric: accuracy, value: v}``);
    none given: the default (accuracy 0.9). Whether the workload reports the
    metric is checked where the workload is built."""
    spec, short = raw.get("target"), raw.get("target_accuracy")
    if spec is not None and short is not None:
        raise BadInput(
            "scenario keys 'target' and 'target_accuracy' both set the target: give one "
            "(target_accuracy: v is short for target: {metric: accuracy, value: v})"
        )
    if short is not None:
        v = _yaml_number(short)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise BadInput(f"scenario key 'target_accuracy' must be int or float, got {v!r}")
        _check(0 < v <= 1, "target_accuracy", v, "must be in (0, 1]")
        return Target(metric="accuracy", value=float(v))
    if spec is None:
        return Target()
    if not isinstance(spec, dict):
        raise BadInput(
            f"scenario key 'target' must be a mapping {{metric: NAME, value: NUMBER, direction: max|min}}, got {spec!r}"
        )
    allowed = ("metric", "value", "direction")
    unknown = sorted(str(k) for k in spec if k not in allowed)
    if unknown:
        raise BadInput(f"scenario key 'target.{unknown[0]}' is unknown (known: {', '.join(allowed)})")
    for key in ("metric", "value"):
        if spec.get(key) is None:
            raise BadInput(f"scenario key 'target.{key}' is required")
    metric = spec["metric"]
    if not isinstance(metric, str) or not metric.strip():
        raise BadInput(f"scenario key 'target.metric' must be a metric name, got {metric!r}")
    value = _yaml_number(spec["value"])
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadInput(f"scenario key 'target.value' must be a finite number, got {value!r}")
    direction = spec.get("direction")
    if direction is not None and direction not in DIRECTIONS:
        raise BadInput(f"scenario key 'target.direction' must be 'max' or 'min', got {direction!r}")
    return Target(metric=metric.strip(), value=float(value), direction=direction)


def builtin_scenarios() -> dict[str, Path]:
    root = resources.files(BUILTIN_PACKAGE)
    return {
        Path(entry.name).stem: Path(str(entry))
        for entry in sorted(root.iterdir(), key=lambda e: e.name)
        if entry.name.endswith(".yaml")
    }


def resolve_scenario(scenario: str | Scenario, overrides: dict[str, Any]) -> Scenario:
    """What the Python API takes as a scenario: a built-in name or a YAML
    path (``overrides`` replace its keys, as ``--set`` does), or a
    :class:`Scenario` as it is (then no overrides)."""
    if isinstance(scenario, Scenario):
        if overrides:
            raise BadInput("pass scenario keys either in the Scenario or as keyword arguments, not both")
        return scenario
    if not isinstance(scenario, str):
        raise BadInput(f"scenario must be a name, a YAML path or a Scenario, got {type(scenario).__name__}")
    return load_scenario(scenario, **overrides)


def load_scenario(name_or_path: str, **overrides: Any) -> Scenario:
    """A built-in scenario by name, or a YAML file by path; ``overrides``
    replace keys before validation (as ``--set key=value`` does)."""
    builtins = builtin_scenarios()
    if name_or_path in builtins:
        path = builtins[name_or_path]
    else:
        path = Path(name_or_path)
        if not path.is_file():
            raise BadInput(
                f"unknown scenario {name_or_path!r}: not a built-in ({', '.join(builtins)}) and no such file"
            )
    try:
        size = path.stat().st_size
        if size > L.MAX_SCENARIO_FILE_BYTES:
            raise BadInput(
                f"scenario file {str(path)!r} is {size} bytes; a scenario file may hold at most "
                f"{L.MAX_SCENARIO_FILE_BYTES} bytes (1 MiB): use generators such as {{linspace: [a, b]}} "
                "for long per-worker lists"
            )
        raw = safe_load(path.read_text())
    except YAMLLimitError as e:
        raise BadInput(f"scenario file {str(path)!r}: {e}") from None
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        line = f" (line {where.line + 1})" if where is not None else ""
        raise BadInput(f"scenario file {str(path)!r} is not valid YAML{line}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(f"cannot read scenario file {str(path)!r}: {e}") from None
    notes: list[str] = []
    if isinstance(raw, dict):
        n = overrides.get("workers")
        if isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= L.MAX_WORKERS and n != raw.get("workers"):
            # another cluster size: the file's per-worker lists and load worker
            # sets are fitted to it (as Scenario.with_workers does), not refused
            # -- and what that changed is said (Scenario.notes)
            note = describe_fit(raw, n, keep=frozenset(overrides), name=str(raw.get("name", path.stem)))
            notes += [note] if note else []
            raw = fit_to_workers(raw, n, keep=frozenset(overrides))
        # `target` and its shorthand `target_accuracy` are one setting: an override of either replaces both
        if overrides.keys() & {"target", "target_accuracy"}:
            raw = {k: v for k, v in raw.items() if k not in ("target", "target_accuracy")}
        raw = {**raw, **overrides}
    scenario = scenario_from_dict(raw, default_name=path.stem)
    return dataclasses.replace(scenario, notes=tuple(notes)) if notes else scenario


def parse_override(text: str) -> tuple[str, Any]:
    """``"workers=16"`` → ``("workers", 16)``; the value is parsed as YAML."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise BadInput(f"--set expects KEY=VALUE, got {text!r}")
    try:
        return key.strip(), safe_load(value)
    except YAMLLimitError as e:
        raise BadInput(f"--set {key.strip()}: {e}") from None
    except yaml.YAMLError:
        raise BadInput(f"--set {key.strip()}: value {value!r} is not valid YAML") from None


def add_override_argument(parser: Any, example: str = "workers=16") -> None:
    """The ``--set KEY=VALUE`` flag (repeatable) that ``parse_override`` reads."""
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"override a scenario key, e.g. --set {example} (repeatable)",
    )
