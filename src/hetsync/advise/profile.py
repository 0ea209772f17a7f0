"""``hetsync profile``: measure a cluster with a short real job and write the
scenario the simulator runs.

The job (:mod:`hetsync.advise.profile_job`, N worker processes and a server under
one torchrun agent) writes the raw
measurements; everything here is pure fitting on them, then output:

- :func:`fit_compute` fits (with :mod:`hetsync.algos.stepfit`, the fitting
  code ``auto`` uses on its live window too), per worker, ``seconds = fixed_s + per_sample_s ·
  batch`` to the median step time at each batch size (outliers left out),
  and expresses the workers as one base cost (the fastest worker's) times a
  per-worker ``slowdown`` plus a per-worker ``delay_s``
  (:func:`decompose`). Steps more than :data:`OUTLIER_RATIO` times their
  median are outliers: runs of them in time are **background load** (a
  square wave: :func:`fit_load`), the isolated ones **transient
  stragglers** (:func:`fit_transients`). The spread of the rest is the
  **noise** (:func:`fit_jitter`). A **knee** (flat, then linear, the
  simulator's GPU-like curve: :func:`fit_knee`; with three sizes, a
  per-sample cost that rises clearly beyond the medians' noise, as a CPU's
  does when the activations outgrow a cache) and a **memory cap** (a batch
  that ran out of memory) are written only where they show; the knee for
  every worker or none (:func:`fit_profile`).
- :func:`fit_link` fits ``one-way seconds = latency_s + bytes / Bps`` to the
  timed transfers of each link.
- :func:`build_scenario` writes the job's own keys (workload, batch, target,
  policies) with the measured timing keys into a scenario mapping that
  ``hetsync compare`` and ``hetsync advise`` run as it is; for a profiled
  script (:mod:`hetsync.advise.loop_profile`), the cluster only and the
  simulator's job (:func:`script_job`, said in the header by
  :func:`script_header`), and under ``script:`` what ran (:func:`script_entry`:
  the script, its arguments, its folder and the cluster it played), which
  ``advise --verify`` launches (:mod:`hetsync.advise.verify_script`).
- :func:`write_page` writes ``profile.md``, ``profile.html`` and
  ``profile.png`` (the step-time distributions and the step times over time).

``--emulate SCENARIO`` makes one machine play a heterogeneous cluster: every
step sleeps the extra the scenario gives that worker, as the runtime's
workers do, and transfers last at least ``bytes / bandwidth``; the profile
should then recover the scenario's per-worker step times and bandwidths.
A cluster with ``runtime_timing: modelled`` is paced: each step lasts its
modelled time, and that whole step is the measured one (there is no real
gradient under it to take apart); the written ``cluster.yaml`` then says
``runtime_timing: modelled`` too, so that ``hetsync run`` and ``advise
--verify`` replay the fit with the same pacing.
"""

from __future__ import annotations

import json
import math
import statistics
import textwrap
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hetsync.advise.profile_job import link_sizes  # noqa: F401  (also part of this module's API)

# the compute fits: one code with auto's (hetsync.algos.stepfit); also this module's API
from hetsync.algos.stepfit import (  # noqa: F401
    KNEE_BEND,
    KNEE_GAIN,
    KNEE_NOISE,
    KNEE_SHARE,
    MIN_RUN,
    NEGLIGIBLE,
    OUTLIER_RATIO,
    RELIABLE_PER_SAMPLE,
    LoadFit,
    WorkerFit,
    decompose,
    fit_jitter,
    fit_knee,
    fit_load,
    fit_step_cost,
    fit_transients,
    fit_worker,
    load_runs,
    mean_matched_delays,
    median_errors,
    medians_by_batch,
    outlier_mask,
    step_ratios,
)
from hetsync.errors import BadInput

SCENARIO_YAML = "cluster.yaml"
PROFILE_JSON = "profile.json"
PROFILE_MD = "profile.md"
PROFILE_HTML = "profile.html"
PROFILE_PNG = "profile.png"
LOG = "profile.log"
JOB_SLACK_S = 120.0  # the job's wall-clock bound beyond its timed phases

# timing keys the profile writes (any the job's file sets are replaced)
TIMING_KEYS = (
    "device",
    "fixed_s",
    "per_sample_s",
    "slowdown",
    "delay_s",
    "jitter",
    "straggler_prob",
    "straggler_factor",
    "saturation_batch",
    "max_batch",
    "background_load",
    "link_load",
    "bandwidth_Bps",
    "server_bandwidth_Bps",
    "latency_s",
    "server_s_per_message",
    "control_latency",
    "runtime_timing",
)


# -------------------------------------------------------------------- links
@dataclass(frozen=True, slots=True, kw_only=True)
class LinkFit:
    a: int  # rank (0: the server)
    b: int
    latency_s: float  # per message of a realistic size (the fit's intercept)
    Bps: float  # inf: too fast to tell at these sizes
    table: tuple[tuple[int, float], ...]  # (bytes, fastest one-way seconds)
    wire_latency_s: float = 0.0  # half the smallest size's round trip

    def to_dict(self) -> dict[str, Any]:
        return {
            "a": self.a,
            "b": self.b,
            "latency_s": self.latency_s,
            "wire_latency_s": self.wire_latency_s,
            "Bps": self.Bps if math.isfinite(self.Bps) else None,
            "table": [list(r) for r in self.table],
        }


def fit_link(a: int, b: int, transfers: Sequence[Sequence[float]]) -> LinkFit:
    """From round trips of (bytes there, one element back), the fastest of
    each size's repetitions: the smallest size's round trip is two wire
    latencies; every size's one-way time is its round trip less one of them;
    ``one-way = latency_s + bytes / Bps`` is fitted to the larger sizes with
    its own intercept, so that a cost every message of a realistic size pays
    (a sleep that wakes late, a copy, a protocol's framing) is per-message
    latency, not a slower link. Where the intercept comes out below the wire
    latency, or only one size is larger, the slope is fitted through the
    wire latency instead."""
    groups: dict[int, list[float]] = {}
    for nbytes, seconds in transfers:
        groups.setdefault(int(nbytes), []).append(float(seconds))
    # the fastest repetition: what else runs on the machine slows a transfer down, never speeds it up
    med = {nb: min(v) for nb, v in sorted(groups.items())}
    smallest = min(med)
    # no round trip is shorter than the smallest message's: one that was (every try of it stalled) sets the floor
    wire_s = min(med.values()) / 2
    table = tuple((nb, max(0.0, s - wire_s)) for nb, s in med.items())
    larger = [(nb, s) for nb, s in table if nb > smallest]
    latency_s, per_byte_s = wire_s, 0.0
    if len(larger) >= 2:
        latency_s, per_byte_s = fit_step_cost(larger)
    if latency_s < wire_s or len(larger) < 2:
        latency_s = wire_s
        _, per_byte_s = fit_step_cost(table, fixed_s=wire_s)
    Bps = 1.0 / per_byte_s if per_byte_s > 0 else math.inf
    return LinkFit(a=a, b=b, latency_s=latency_s, Bps=Bps, table=table, wire_latency_s=wire_s)


SERVER_SLACK = 1.25  # an incast within this many times the slowest worker's own transfer: the server kept up


def fit_server_link(rows: Sequence[Sequence[float]], to_server: Sequence[LinkFit]) -> float | None:
    """The server's bandwidth from the incast (rows: bytes per worker,
    seconds until every worker's copy arrived; the fastest repetition).
    Where all of them arrived about as soon as the slowest worker's own link
    lets its copy arrive (:data:`SERVER_SLACK`), the server's link was not
    the bottleneck: it took every worker's link at once, their sum.
    Otherwise the bytes of all copies over the time they took. None without
    an incast (one worker, or a profile from before it was timed)."""
    if not rows or not to_server:
        return None
    nbytes, seconds = int(rows[0][0]), min(float(r[1]) for r in rows)
    latency_s = statistics.median(lk.latency_s for lk in to_server)
    slowest_s = max(nbytes / lk.Bps if math.isfinite(lk.Bps) else 0.0 for lk in to_server)
    total_Bps = sum(lk.Bps for lk in to_server)
    spent_s = seconds - latency_s
    if spent_s <= SERVER_SLACK * slowest_s or spent_s <= 0:
        return total_Bps
    return min(total_Bps, len(to_server) * nbytes / spent_s)


EXCHANGE_WARMUP = 2  # a worker's first round trips with the server are left out (connections, allocations)


def handled_by_worker(rows: Sequence[Sequence[float]], n: int) -> list[list[float]]:
    """The server's handling times (rows: worker, seconds, in arrival order) per worker, in order."""
    out: list[list[float]] = [[] for _ in range(n)]
    for w, seconds in rows:
        if 0 <= int(w) < n:
            out[int(w)].append(float(seconds))
    return out


def fit_server_message(handled: Sequence[Sequence[float]]) -> float | None:
    """The server's time per message: the mean of its handling of a push
    and its reply (two messages), halved, over every worker's round trips
    but their first :data:`EXCHANGE_WARMUP`; None when none was timed (a
    profile from before the server timed its work). The mean, as for the
    round trips: a message the server's machine delayed costs in full."""
    kept = [h for per_worker in handled for h in per_worker[EXCHANGE_WARMUP:]]
    return statistics.fmean(kept) / 2 if kept else None


@dataclass(frozen=True, slots=True, kw_only=True)
class ExchangeFit:
    """One worker's round trips with the server during the compute phase
    (a model-sized message there and back after every step, while the
    others step): what each message cost beyond bytes / the link's fitted
    bandwidth."""

    worker: int
    count: int
    nbytes: int
    mean_s: float  # mean extra per message (half a round trip's extra)
    median_s: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "worker": self.worker,
            "count": self.count,
            "nbytes": self.nbytes,
            "mean_s": self.mean_s,
            "median_s": self.median_s,
        }


def fit_exchange(
    worker: int, rows: Sequence[Sequence[float]], nbytes: int, Bps: float, handled_s: Sequence[float] = ()
) -> ExchangeFit | None:
    """Per message, ``(round trip − 2 · bytes / Bps − server's handling) / 2``
    (at least 0) over the worker's round trips (rows: start_s, seconds, ...),
    the first :data:`EXCHANGE_WARMUP` left out; None without any.
    ``handled_s``: the server's own time on each of this worker's round
    trips, in order (the scenario's ``server_s_per_message`` models it
    apart); left out of the figure when there is one per round trip. The
    mean is what a run's throughput pays (a message that waits for a busy
    machine counts in full); the median is shown beside it."""
    kept = [float(r[1]) for r in rows[EXCHANGE_WARMUP:]]
    if not kept:
        return None
    server = [float(h) for h in handled_s[EXCHANGE_WARMUP:]] if len(handled_s) == len(rows) else [0.0] * len(kept)
    wire_s = 2 * nbytes / Bps if math.isfinite(Bps) and Bps > 0 else 0.0
    extra = [max(0.0, s - wire_s - h) / 2 for s, h in zip(kept, server, strict=True)]
    return ExchangeFit(
        worker=worker,
        count=len(kept),
        nbytes=nbytes,
        mean_s=statistics.fmean(extra),
        median_s=statistics.median(extra),
    )


# ----------------------------------------------------------------- profile
@dataclass(frozen=True, slots=True, kw_only=True)
class Profile:
    """Everything fitted from one job's measurements."""

    workers: int
    batch_size: int
    fits: tuple[WorkerFit, ...]
    fixed_s: float
    per_sample_s: float
    slowdown: tuple[float, ...]
    delay_s: tuple[float, ...]
    reference: int
    jitter: float
    straggler_prob: float
    straggler_factor: float
    transient_steps: int
    load: LoadFit | None
    links: tuple[LinkFit, ...]
    raw: dict[str, Any] = field(repr=False)
    exchanges: tuple[ExchangeFit, ...] = ()
    server_Bps: float | None = None  # None: not timed
    server_s_per_message: float | None = None  # None: not timed (fit_server_message)
    median_delay_s: tuple[float, ...] = ()  # the delays fitted to the median steps, before mean_matched_delays

    @property
    def server_links(self) -> list[LinkFit]:
        return sorted((lk for lk in self.links if lk.a == 0), key=lambda lk: lk.b)

    @property
    def bandwidth_Bps(self) -> list[float]:
        by_worker = {lk.b - 1: lk.Bps for lk in self.server_links}
        return [by_worker.get(w, math.inf) for w in range(self.workers)]

    @property
    def link_latency_s(self) -> float:
        """The median worker↔server link's per-message latency, timed one pair at a time."""
        lats = [lk.latency_s for lk in self.server_links]
        return statistics.median(lats) if lats else 0.0

    @property
    def latency_s(self) -> float:
        """The scenario's per-message latency: the median worker's mean
        extra per message in the round trips taken while training-like
        traffic ran (:func:`fit_exchange`), else the links' own."""
        if self.exchanges:
            return max(self.link_latency_s, statistics.median(x.mean_s for x in self.exchanges))
        return self.link_latency_s

    def step_s(self, worker: int, batch: int | None = None) -> float:
        """The fitted nominal step (base · slowdown + delay) of a worker."""
        b = self.batch_size if batch is None else batch
        knee = self.fits[self.reference].knee_batch
        base = self.fixed_s + self.per_sample_s * (max(0, b - knee) if knee is not None else b)
        return base * self.slowdown[worker] + self.delay_s[worker]

    def to_dict(self) -> dict[str, Any]:
        return {
            "workers": self.workers,
            "batch_size": self.batch_size,
            "fixed_s": self.fixed_s,
            "per_sample_s": self.per_sample_s,
            "slowdown": list(self.slowdown),
            "delay_s": list(self.delay_s),
            "median_delay_s": list(self.median_delay_s),
            "reference_worker": self.reference,
            "step_s": [self.step_s(w) for w in range(self.workers)],
            "jitter": self.jitter,
            "straggler_prob": self.straggler_prob,
            "straggler_factor": self.straggler_factor,
            "transient_steps": self.transient_steps,
            "background_load": self.load.to_yaml() if self.load is not None else None,
            "bandwidth_Bps": [b if math.isfinite(b) else None for b in self.bandwidth_Bps],
            "latency_s": self.latency_s,
            "link_latency_s": self.link_latency_s,
            "exchanges": [x.to_dict() for x in self.exchanges],
            "server_s_per_message": self.server_s_per_message,
            "server_bandwidth_Bps": _finite_or_none(self.server_Bps),
            "workers_fit": [f.to_dict() for f in self.fits],
            "links": [lk.to_dict() for lk in self.links],
            "emulate": self.raw.get("emulate"),
            "host": self.raw.get("host"),
            "compute_s": self.raw.get("compute_s"),
        }


def fit_profile(raw: dict[str, Any], batch_size: int) -> Profile:
    """Fit a :class:`Profile` to a job's ``raw.json``."""
    n = int(raw["workers"])
    per_rank = {int(r["rank"]): r for r in raw["per_rank"]}
    per_worker = [per_rank[w + 1]["compute"].get("steps", []) for w in range(n)]
    failed = [[int(b) for b in per_rank[w + 1]["compute"].get("failed_batches", {})] for w in range(n)]
    fits = tuple(fit_worker(w, per_worker[w], failed[w]) for w in range(n))
    shown = [f.knee_batch is not None for f in fits]
    if any(shown) and not all(shown):
        # one curve for the cluster (the simulator's knee is device-wide): the knee where most workers show it
        fits = tuple(fit_worker(w, per_worker[w], failed[w], knee=2 * sum(shown) >= n) for w in range(n))
        if len({f.knee_batch is None for f in fits}) > 1:
            fits = tuple(fit_worker(w, per_worker[w], failed[w], knee=False) for w in range(n))
    fixed_s, per_sample_s, slowdowns, delays, ref = decompose(fits, batch_size)
    load = fit_load(per_worker, delays)
    prob, factor, count, _ = fit_transients(per_worker, delays)
    jitter = fit_jitter(per_worker, delays)
    knee = fits[ref].knee_batch
    base_s = fixed_s + per_sample_s * (max(0, batch_size - knee) if knee is not None else batch_size)
    median_delays = delays
    delays = mean_matched_delays(per_worker, batch_size, base_s, slowdowns, delays, (prob, factor), load)
    links = tuple(fit_link(int(lk["a"]), int(lk["b"]), lk["transfers"]) for r in raw["per_rank"] for lk in r["links"])
    to_server = {lk.b - 1: lk.Bps for lk in links if lk.a == 0}
    exchanges = []
    handled = handled_by_worker((per_rank[0].get("compute") or {}).get("handled", []), n)
    for w in range(n):
        compute = per_rank[w + 1]["compute"]
        if compute.get("exchanges"):
            x = fit_exchange(
                w, compute["exchanges"], int(compute["exchange_bytes"]), to_server.get(w, math.inf), handled[w]
            )
            if x is not None:
                exchanges.append(x)
    return Profile(
        workers=n,
        batch_size=batch_size,
        fits=fits,
        fixed_s=fixed_s,
        per_sample_s=per_sample_s,
        slowdown=tuple(slowdowns),
        delay_s=tuple(delays),
        reference=ref,
        jitter=jitter,
        straggler_prob=prob,
        straggler_factor=factor,
        transient_steps=count,
        load=load,
        links=tuple(sorted(links, key=lambda lk: (lk.a, lk.b))),
        raw=raw,
        exchanges=tuple(exchanges),
        median_delay_s=tuple(median_delays),
        server_s_per_message=fit_server_message(handled),
        server_Bps=fit_server_link(per_rank[0].get("incast", []), [lk for lk in links if lk.a == 0]),
    )


def _finite_or_none(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _round(values: Sequence[float], digits: int = 6) -> list[float]:
    return [float(f"{v:.{digits}g}") for v in values]


# A profiled script's cluster.yaml keeps of the scenario the script ran with only its cluster and the batch
# the step curve is fitted around: that run's time limit, evaluation interval and target were for the
# user's model in that run, not for what the simulator learns (issue 26: every candidate tied).
SCRIPT_KEYS = ("workers", "seed", "batch_size", "model_bytes")
# The simulator's job there. With no workload of the user's named, the built-in digits-mlp stands in for
# the learning, with the demo's job for it (scenario 'default': lr 0.5, accuracy 0.93, 30 s, every 0.5 s).
STAND_IN_JOB: dict[str, Any] = {"lr": 0.5, "target_accuracy": 0.93, "max_time_s": 30.0, "eval_every_s": 0.5}
STAND_IN = "digits-mlp"  # the Scenario's default workload: a file that names none learns it
# With the user's workload (``workload: module:function``): its target is the script's (a metric of that
# model), its optimizer the script's where hetsync can name it; this much simulated time, evaluated this often.
OWN_JOB: dict[str, Any] = {"max_time_s": 30.0, "eval_every_s": 0.5}


def script_job(raw: dict[str, Any]) -> dict[str, Any]:
    """The job keys of a profiled script's ``cluster.yaml`` (see :data:`SCRIPT_KEYS`)."""
    ref = raw.get("workload")
    if ref is None:
        return dict(STAND_IN_JOB)
    out: dict[str, Any] = {"workload": ref}
    ran = raw.get("job") or {}
    for key in ("target", "target_accuracy"):
        if key in ran:
            out[key] = ran[key]
    out.update(raw.get("optimizer") or {})  # lr and optimizer, as the script's optimizer had them
    return out | OWN_JOB


CLUSTER_KEYS = frozenset({"name", "description", "workers", "seed", *TIMING_KEYS})
"""An emulated cluster's keys, as a profiled script's ``script.emulate`` keeps them (no job)."""


def script_entry(raw: dict[str, Any]) -> dict[str, Any] | None:
    """The ``script`` key of a profiled script's ``cluster.yaml``: what
    ``advise --verify`` launches -- the script (its absolute path), its
    arguments, the folder it ran from, and the cluster it played
    (:func:`emulated_cluster`). None for a ``raw.json`` that names no script."""
    argv = raw.get("script")
    if not isinstance(argv, list) or len(argv) < 2:
        return None
    cwd = raw.get("cwd")
    path = Path(str(argv[1]))
    if not path.is_absolute():
        path = Path(cwd) / path if isinstance(cwd, str) else path.resolve()
    return {
        "path": str(path),
        "args": [str(a) for a in argv[2:]],
        "cwd": cwd if isinstance(cwd, str) else None,
        "emulate": emulated_cluster(raw),
    }


def emulated_cluster(raw: dict[str, Any]) -> dict[str, Any] | str | None:
    """The cluster a profiled script played, at the profile's worker count:
    ``--emulate``'s, else the scenario the script passed to ``hetsync.init``
    (``raw["job"]``) -- its cluster keys only (:data:`CLUSTER_KEYS`), the
    per-worker values resolved, so that every seed plays the same machines;
    None where it played none. An ``--emulate`` file that cannot be read here
    (a raw.json from another machine) stays its name, for ``--verify`` to
    say so."""
    from hetsync.scenario import builtin_scenarios, load_scenario, scenario_from_dict

    emulate, n = raw.get("emulate"), int(raw["workers"])
    if emulate is None:
        return None
    if raw.get("emulated_by") == "script" and isinstance(raw.get("job"), dict):
        sc = scenario_from_dict(dict(raw["job"]), default_name=str(emulate)).with_workers(n)
    else:
        where = str(emulate)
        cwd = raw.get("cwd")
        if where not in builtin_scenarios() and not Path(where).is_absolute() and isinstance(cwd, str):
            where = str(Path(cwd) / where)
        try:
            sc = load_scenario(where).with_workers(n)
        except BadInput:
            return where
    return cluster_mapping(sc)


def cluster_mapping(sc: Any) -> dict[str, Any]:
    """``sc``'s cluster keys (:data:`CLUSTER_KEYS`) as a scenario mapping, its per-worker values as lists."""
    from hetsync.scenario import _PER_WORKER_DEFAULTS, fit_to_workers

    source = fit_to_workers(dict(sc.source) if sc.source is not None else sc.to_dict(), sc.cluster.workers)
    out = {k: v for k, v in source.items() if k in CLUSTER_KEYS}
    out["name"], out["workers"] = sc.name, sc.cluster.workers
    for key in _PER_WORKER_DEFAULTS:
        values = list(getattr(sc.cluster, key))
        if key in out or any(v is not None for v in values):
            out[key] = [v if not isinstance(v, float) else float(f"{v:.6g}") for v in values]
    return out


def left_out(raw: dict[str, Any]) -> dict[str, Any]:
    """The keys of the script's run a profiled script's ``cluster.yaml`` leaves out (its job)."""
    ran = raw.get("job") or {}
    copied = {"target", "target_accuracy"} if raw.get("workload") is not None else set()
    kept = set(SCRIPT_KEYS) | set(TIMING_KEYS) | copied | {"name", "description"}
    return {k: v for k, v in ran.items() if k not in kept}


def script_header(raw: dict[str, Any]) -> str:
    """The header lines of a profiled script's ``cluster.yaml``: what is the
    cluster, what is the simulator's job and where it comes from."""
    model = f"your {raw.get('model')}'s ({raw.get('model_bytes')} bytes)"
    lines = [
        f"the cluster of your loop: every timing key below was fitted to its steps and links; model_bytes is {model}"
    ]
    dropped = left_out(raw)
    if dropped:
        shown = ", ".join(f"{k}={v!r}" for k, v in dropped.items())
        lines.append(f"your run's job is left out ({shown}): it was for your model in that run")
    job = script_job(raw)
    settings = ", ".join(f"{k}={v!r}" for k, v in job.items() if k != "workload")
    if raw.get("workload") is None:
        lines.append(
            f"no workload named: the simulator learns the built-in {STAND_IN} as a stand-in for your model, with the "
            f"demo's job for it ({settings}); to simulate your model, name it (workload: module:function "
            "returning hetsync.workloads.from_module(...); hetsync profile --script ... --workload module:function)"
        )
    else:
        lines.append(f"the simulator learns your workload {raw['workload']} ({settings})")
    lines.append(
        "hetsync advise and compare run it as it is; change the job with --set key=value (e.g. --set max_time_s=120)"
    )
    entry = script_entry(raw)
    if entry is not None:
        played = "the cluster it emulated" if entry["emulate"] is not None else "no emulated cluster (as profiled)"
        lines.append(
            f"script: what hetsync advise --verify launches, once per verified policy: your script, its arguments, "
            f"the folder it ran from and {played}"
        )
    return "\n".join(textwrap.fill(line, 116, subsequent_indent="  ") for line in lines)


def build_scenario(job: Any, prof: Profile, *, description: str) -> dict[str, Any]:
    """The scenario mapping: the job's own keys (workload, batch, target,
    policies, recipe) and the measured timing keys. For a profiled script
    (``raw.json`` with the ``job`` it ran): its cluster only (:data:`SCRIPT_KEYS`)
    and the simulator's job (:func:`script_job`)."""
    from hetsync.scenario import fit_to_workers

    source = dict(job.source) if job.source is not None else job.to_dict()
    kept = {k: v for k, v in fit_to_workers(source, prof.workers).items() if k not in TIMING_KEYS}
    if prof.raw.get("job") is not None:
        kept = {k: kept[k] for k in SCRIPT_KEYS if k in kept} | script_job(prof.raw)
    raw = {"name": f"{job.name}-profiled", "description": description}
    raw.update((k, v) for k, v in kept.items() if k not in raw)
    knees = [f.knee_batch for f in prof.fits]
    gpu = all(k is not None for k in knees)
    raw["device"] = "gpu" if gpu else "cpu"
    raw["fixed_s"] = float(f"{prof.fixed_s:.6g}")
    raw["per_sample_s"] = float(f"{prof.per_sample_s:.6g}")
    if gpu:
        raw["saturation_batch"] = [int(k) for k in knees if k is not None]
    caps = [max((b for b, _, _ in f.table), default=None) if f.failed_batches else None for f in prof.fits]
    if any(c is not None for c in caps):
        largest = max(prof.raw.get("batch_sizes", [prof.batch_size]))
        raw["max_batch"] = [int(c) if c is not None else int(largest) for c in caps]
    raw["slowdown"] = _round(prof.slowdown, 4)
    raw["delay_s"] = _round(prof.delay_s, 4)
    raw["jitter"] = round(min(prof.jitter, 10.0), 4)
    if prof.straggler_prob > 0:
        raw["straggler_prob"] = round(prof.straggler_prob, 4)
        raw["straggler_factor"] = round(prof.straggler_factor, 3)
    if prof.load is not None:
        raw["background_load"] = prof.load.to_yaml()
    bw = prof.bandwidth_Bps
    raw["bandwidth_Bps"] = [float(f"{b:.4g}") if math.isfinite(b) else float("inf") for b in bw]
    if prof.server_Bps is not None:
        raw["server_bandwidth_Bps"] = float(f"{prof.server_Bps:.4g}") if math.isfinite(prof.server_Bps) else math.inf
    raw["latency_s"] = float(f"{prof.latency_s:.4g}")
    if prof.server_s_per_message is not None:
        # the runtime's server handles one message at a time, and its commands are messages too
        raw["server_s_per_message"] = float(f"{prof.server_s_per_message:.4g}")
        raw["control_latency"] = True
    if prof.raw.get("paced"):
        # an emulated cluster whose steps lasted its modelled time: real processes replay this fit the same way
        raw["runtime_timing"] = "modelled"
    entry = script_entry(prof.raw) if prof.raw.get("job") is not None else None
    if entry is not None:  # what advise --verify launches (hetsync.advise.verify_script)
        raw["script"] = entry
    return raw


def write_scenario(raw: dict[str, Any], path: Path, header: str) -> Path:
    """Write the scenario YAML and read it back as the simulator will (a check that it runs as it is)."""
    import yaml

    from hetsync.scenario import load_scenario

    text = yaml.safe_dump(raw, sort_keys=False, allow_unicode=True, width=120)
    lines = "".join(f"# {line}\n" for line in header.splitlines())
    path.write_text(lines + text, encoding="utf-8")
    load_scenario(str(path))
    return path


# ---------------------------------------------------------------------- job
def job_arguments(
    *,
    scenario: str,
    emulate: str | None,
    batch_sizes: Sequence[int],
    compute_s: float,
    link_bytes: Sequence[int],
    link_reps: int,
    out: Path,
    exchange_bytes: int = 0,
) -> list[str]:
    args = [
        "--scenario",
        scenario,
        "--batch-sizes",
        ",".join(map(str, batch_sizes)),
        "--compute-s",
        str(compute_s),
        "--link-bytes",
        ",".join(map(str, link_bytes)),
        "--link-reps",
        str(link_reps),
        "--out",
        str(out),
    ]
    if exchange_bytes > 0:
        args += ["--exchange-bytes", str(exchange_bytes)]
    return args + (["--emulate", emulate] if emulate else [])


def run_job(nproc: int, job_args: Sequence[str], out: Path, *, host: str, limit_s: float) -> dict[str, Any]:
    """Run the job (``nproc`` workers and a server) under one torchrun agent,
    as ``hetsync run`` starts its processes; returns its ``raw.json``.
    Everything it started is stopped when it returns, fails or is interrupted."""
    from hetsync.advise.profile_job import RAW_JSON
    from hetsync.runtime import launch

    raw_path = out / RAW_JSON
    raw_path.unlink(missing_ok=True)
    log_path = out / LOG
    try:
        code = launch.launch_module(
            "hetsync.advise.profile_job", nproc + 1, job_args, log_path, host=host, limit_s=limit_s
        )
    except TimeoutError:
        raise RuntimeError(f"the profiling job did not finish within {limit_s:.0f} s; see {log_path}") from None
    if code != 0 or not raw_path.is_file():
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-15:])
        raise RuntimeError(f"the profiling job failed (status {code}); end of {log_path}:\n{tail}")
    return json.loads(raw_path.read_text())


def measure(
    sc: Any,
    job_name: str,
    out: Path,
    *,
    emulate: str | None,
    batch_sizes: Sequence[int],
    compute_s: float,
    link_reps: int,
    host: str,
    model_nbytes: int,
) -> dict[str, Any]:
    """Run the profiling job for scenario ``sc`` (its workers, workload and batch) and
    return its ``raw.json``: steps at ``batch_sizes`` for ``compute_s``, then
    every link ``link_reps`` times at sizes around the model's."""
    nproc = sc.cluster.workers
    nbytes = sc.job.model_bytes if sc.job.model_bytes is not None else model_nbytes
    job_args = job_arguments(
        scenario=job_name,
        emulate=emulate,
        batch_sizes=list(batch_sizes),
        compute_s=compute_s,
        link_bytes=link_sizes(nbytes),
        exchange_bytes=nbytes,
        link_reps=link_reps,
        out=out,
    )
    pairs = nproc + nproc * (nproc - 1) // 2
    return run_job(nproc, job_args, out, host=host, limit_s=compute_s + pairs * 2.0 + JOB_SLACK_S)


def run_script(
    script: Path,
    script_args: Sequence[str],
    nproc: int,
    out: Path,
    *,
    emulate: str | None,
    batch_sizes: Sequence[int] | None,
    compute_s: float,
    link_reps: int,
    host: str,
    workload: str | None = None,
) -> dict[str, Any]:
    """Run the user's training script (:func:`hetsync.init`) on ``nproc``
    workers + rank 0 in profiling mode (:mod:`hetsync.advise.loop_profile`) and
    return its ``raw.json``; its ranks' logs go to ``out/logs``."""
    from hetsync.advise.loop_profile import PROFILE_ENV, ProfileSettings
    from hetsync.advise.profile_job import RAW_JSON
    from hetsync.runtime import launch

    settings = ProfileSettings(
        out=str(out),
        compute_s=compute_s,
        link_reps=link_reps,
        batch_sizes=tuple(batch_sizes) if batch_sizes is not None else None,
        emulate=emulate,
        workload=workload,
    )
    raw_path = out / RAW_JSON
    raw_path.unlink(missing_ok=True)
    pairs = nproc + nproc * (nproc - 1) // 2
    limit_s = compute_s + pairs * 2.0 + JOB_SLACK_S
    try:
        code = launch.launch(
            nproc,
            list(script_args),
            out,
            host=host,
            script=str(script),
            env={PROFILE_ENV: settings.to_env()},
            timeout_s=limit_s,
        )
    except TimeoutError:
        raise RuntimeError(f"the profiled script did not finish within {limit_s:.0f} s; see {out}/logs") from None
    if code != 0 or not raw_path.is_file():
        tails = []
        for log in sorted((out / "logs").glob("rank-*.log")):
            lines = log.read_text(errors="replace").splitlines()
            # the script's own traceback (torch prefixes it with [rankN]:), else the log's end
            own = [line for line in lines if line.startswith("[rank")]
            if lines:
                tails.append(f"--- {log.name}\n" + "\n".join((own or lines)[-8:]))
        raise RuntimeError(
            f"the profiled script failed (status {code}); does it call hetsync.init, sync.optimizer and "
            f"sync.finish()? End of its logs in {out}/logs:\n" + "\n".join(tails)
        )
    return json.loads(raw_path.read_text())


def script_workload(ref: str, script: Path) -> tuple[str, Any]:
    """``--workload``: the reference as cluster.yaml should keep it, and the
    workload it builds (checked before anything starts). A ``module`` found
    beside the script (or in the current folder) is written as that file's
    absolute path (``/path/module.py:function``), so that advise finds it
    from any folder; one importable as it is (installed) stays dotted."""
    import importlib.util

    from hetsync.workloads import make_workload

    where, sep, attr = ref.rpartition(":")
    if not sep or not where or not attr:
        raise BadInput(f"--workload {ref!r}: name your model's workload as module:function or file.py:function")
    if not where.endswith(".py"):
        for folder in (script.resolve().parent, Path.cwd()):
            beside = folder.joinpath(*where.split(".")).with_suffix(".py")
            if beside.is_file():
                ref = f"{beside}:{attr}"
                break
        else:
            try:
                found = importlib.util.find_spec(where) is not None
            except (ImportError, ValueError):
                found = False
            if not found:
                raise BadInput(
                    f"--workload {ref!r}: no module {where!r} beside {str(script)!r}, in this folder or installed"
                )
    else:
        ref = f"{Path(where).expanduser().resolve()}:{attr}"
    return ref, make_workload(ref)


def loops_ended_early(raw: dict[str, Any]) -> list[tuple[int, float]]:
    """Workers of a profiled script whose loop ended (data or epochs ran
    out) before the profile's time: (worker, seconds it ran)."""
    out = []
    for r in raw.get("per_rank", []):
        compute = r.get("compute") or {}
        if int(r.get("rank", 0)) > 0 and compute.get("timed_out") is False:
            out.append((int(r["rank"]) - 1, float(compute.get("loop_s", 0.0))))
    return sorted(out)


def job_of_raw(raw: dict[str, Any]) -> Any:
    """The scenario a profiled script passed to ``hetsync.init`` (with its
    model's size), or None for the built-in job's ``raw.json``."""
    from hetsync.scenario import scenario_from_dict

    job = raw.get("job")
    if job is None:
        return None
    if not isinstance(job, dict):
        raise BadInput("raw.json: 'job' must be the scenario mapping hetsync.init ran with")
    return scenario_from_dict(dict(job), default_name=str(job.get("name", "own-loop")))


def write_profiled(job: Any, prof: Profile, out: Path, *, header: str, description: str) -> Path:
    """``cluster.yaml`` (the job with the fitted timing keys) and
    ``profile.json`` (every fit) into ``out``; returns the YAML's path."""
    from hetsync.outdir import write_json_atomic

    path = write_scenario(build_scenario(job, prof, description=description), out / SCENARIO_YAML, header)
    write_json_atomic(out / PROFILE_JSON, prof.to_dict())
    return path


def check_emulation(emulate: str | None, nproc: int | None) -> tuple[Any, int]:
    """The emulated scenario (or None) at the worker count, and that count:
    ``--nproc``, else the emulated cluster's workers (else 4). A cluster
    played with another worker count is mapped as
    :meth:`~hetsync.scenario.Scenario.with_workers` maps it (generators such
    as ``{linspace: ...}`` resolved again, per-worker lists cycled); its
    ``notes`` say how."""
    from hetsync.scenario import load_scenario

    if emulate is None:
        return None, nproc if nproc is not None else 4
    emulated = load_scenario(emulate)
    n = nproc if nproc is not None else emulated.cluster.workers
    return emulated.with_workers(n), n


def read_raw(path: Path, nproc: int | None) -> dict[str, Any]:
    """A ``raw.json`` written by the job (``--from-raw``), checked: BadInput
    naming what is wrong (unreadable, not the job's, another worker count)."""
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise BadInput(f"--from-raw {path}: cannot read it as JSON ({e.__class__.__name__})") from None
    ok = isinstance(raw, dict) and isinstance(raw.get("workers"), int) and isinstance(raw.get("per_rank"), list)
    if not ok or len(raw["per_rank"]) != raw["workers"] + 1:
        raise BadInput(
            f"--from-raw {path}: not a raw.json of hetsync.advise.profile_job (workers, per_rank: one per rank)"
        )
    if nproc is not None and nproc != raw["workers"]:
        raise BadInput(
            f"--from-raw {path} profiled {raw['workers']} workers, not --nproc {nproc}: leave --nproc out "
            "(the profile's worker count is the cluster's)"
        )
    return raw


# --------------------------------------------------------------------- page
def _fmt_ms(s: float) -> str:
    return f"{s * 1e3:.3g} ms"


def _fmt_per_sample(s: float) -> str:
    """``0.914 µs/sample``, ``3.44 ms/sample``"""
    return f"{s * 1e3:.3g} ms/sample" if abs(s) >= 1e-3 else f"{s * 1e6:.3g} µs/sample"


def _fmt_bps(Bps: float) -> str:
    if not math.isfinite(Bps):
        return "too fast to tell"
    for unit, scale in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if Bps >= scale:
            return f"{Bps / scale:.3g} {unit}"
    return f"{Bps:.3g} B/s"


def worker_rows(prof: Profile) -> tuple[list[str], list[list[str]]]:
    b = prof.batch_size
    fastest = min(prof.step_s(w) for w in range(prof.workers))
    headers = [
        "worker",
        "steps",
        f"step at batch {b}",
        "× fastest",
        "fit per batch",
        "slowdown",
        "delay",
        "outliers",
        "to server",
        "latency",
    ]
    links = {lk.b - 1: lk for lk in prof.server_links}
    rows = []
    for w, fit in enumerate(prof.fits):
        lk = links.get(w)
        curve = f"{_fmt_ms(fit.fixed_s)} + {_fmt_per_sample(fit.per_sample_s)}"
        if fit.knee_batch is not None:
            curve += f" above {fit.knee_batch}"
        rows.append(
            [
                str(w),
                str(fit.steps),
                _fmt_ms(prof.step_s(w)),
                f"{prof.step_s(w) / fastest:.2f}×",
                curve,
                f"{prof.slowdown[w]:.3g}",
                _fmt_ms(prof.delay_s[w]),
                f"{fit.outliers} ({fit.load_steps} in runs)",
                _fmt_bps(lk.Bps) if lk else "—",
                _fmt_ms(lk.latency_s) if lk else "—",
            ]
        )
    return headers, rows


def summary_lines(prof: Profile) -> list[str]:
    """What the cluster looks like, in a few lines."""
    what = "the paced step" if prof.raw.get("paced") else "the gradient alone"
    knee = prof.fits[prof.reference].knee_batch
    above = f" above batch {knee}" if knee is not None else ""
    lines = [
        f"base step ({what} on worker {prof.reference}, the fastest): fixed {_fmt_ms(prof.fixed_s)} + "
        f"{_fmt_per_sample(prof.per_sample_s)}{above}; noise log-sd {prof.jitter:.3g} (of the base)",
    ]
    if prof.straggler_prob > 0:
        lines.append(
            f"transient stragglers: {prof.straggler_prob:.1%} of steps ({prof.transient_steps}) "
            f"{prof.straggler_factor:.3g}× slower"
        )
    else:
        lines.append("transient stragglers: none seen")
    if prof.exchanges:
        means = [x.mean_s for x in prof.exchanges]
        lines.append(
            f"per message, beyond bytes / bandwidth, in round trips with the server while every worker stepped: "
            f"{_fmt_ms(min(means))} to {_fmt_ms(max(means))} on average (median worker: latency_s "
            f"{_fmt_ms(prof.latency_s)}; the links alone, one pair at a time: {_fmt_ms(prof.link_latency_s)})"
        )
    if prof.server_s_per_message is not None:
        lines.append(
            f"server: {_fmt_ms(prof.server_s_per_message)} per message (server_s_per_message: its own work on "
            "each push and reply, as the runtime's server does it — driver core, policy, optimizer step, trace, "
            "encoding — timed on the server, halved; the simulator serves messages one at a time)"
        )
    if prof.load is not None:
        ld = prof.load
        lines.append(
            f"background load on workers {list(ld.workers)}: ×{ld.factor:.3g} for {ld.on_s:.3g} s every {ld.period_s:.3g} s"
        )
    else:
        lines.append("background load: none seen")
    lines.append(knee_line(prof))
    caps = [(f.worker, f.failed_batches) for f in prof.fits if f.failed_batches]
    lines.append(f"out of memory at: {caps}" if caps else "memory cap: none hit at the sizes timed")
    pairs = [lk for lk in prof.links if lk.a > 0]
    if pairs:
        finite = [lk.Bps for lk in pairs if math.isfinite(lk.Bps)]
        rng = f"{_fmt_bps(min(finite))} to {_fmt_bps(max(finite))}" if finite else "too fast to tell"
        lines.append(f"worker↔worker links ({len(pairs)}): {rng}")
    if prof.server_Bps is not None:
        lines.append(
            f"server's link (every worker sending to it at once): {_fmt_bps(prof.server_Bps)}"
            + (
                " — it kept up with every worker's link at once"
                if prof.server_Bps >= 0.999 * sum(prof.bandwidth_Bps)
                else ""
            )
        )
    return lines


def knee_line(prof: Profile) -> str:
    """One line on the step curve: the knee and why, or how well the line fits."""
    knees = [f.knee_batch for f in prof.fits if f.knee_batch is not None]
    ref = prof.fits[prof.reference]
    sizes = [(b, s) for b, s, _ in ref.table]
    if not knees:
        worst = max((abs(f.step_s(b) / s - 1) for f in prof.fits for b, s, _ in f.table if s > 0), default=0.0)
        return f"knee: none (a straight line fits every worker's median steps within {worst:.0%})"
    at = knees[0] if len(set(knees)) == 1 else knees
    curve = "the simulator's knee curve: device: gpu, saturation_batch"
    if len(sizes) == 3:
        (b1, t1), (b2, t2), (b3, t3) = sizes
        lower, upper = _fmt_per_sample((t2 - t1) / (b2 - b1)), _fmt_per_sample((t3 - t2) / (b3 - b2))
        slopes = f"{lower} from {b1} to {b2}, {upper} from {b2} to {b3}"
        return (
            f"knee: the per-sample cost rises with the batch on worker {ref.worker} ({slopes}): fitted flat up to "
            f"batch {at}, then {_fmt_per_sample(ref.per_sample_s)} ({curve}; below batch {b1} it is a guess)"
        )
    return f"knee: flat up to batch {at}, then {_fmt_per_sample(ref.per_sample_s)} on worker {ref.worker} ({curve})"


def plot_profile(prof: Profile, path: Path) -> Path:
    """Two panels: the step-time distribution of every worker at every batch
    size (box plots), and every step's time over the profile (load and
    transient stragglers show as runs and spikes)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    per_rank = {int(r["rank"]): r for r in prof.raw["per_rank"]}
    sizes = sorted({int(b) for w in range(prof.workers) for _, b, *_ in per_rank[w + 1]["compute"]["steps"]})
    fig = Figure(figsize=(11, 4.2 + 0.1 * prof.workers), layout="constrained")
    FigureCanvasAgg(fig)
    ax1, ax2 = fig.subplots(1, 2, width_ratios=[1.2, 1])
    colors = [f"C{i % 10}" for i in range(len(sizes))]
    width = 0.8 / max(1, len(sizes))
    for j, b in enumerate(sizes):
        data, pos = [], []
        for w in range(prof.workers):
            vals = [row[2] * 1e3 for row in per_rank[w + 1]["compute"]["steps"] if int(row[1]) == b]
            if vals:
                data.append(vals)
                pos.append(w + (j - (len(sizes) - 1) / 2) * width)
        if data:
            bp = ax1.boxplot(data, positions=pos, widths=width * 0.9, patch_artist=True, showfliers=True)
            for patch in bp["boxes"]:
                patch.set_facecolor(colors[j])
                patch.set_alpha(0.6)
            for flier in bp["fliers"]:
                flier.set(markersize=3, markeredgecolor=colors[j])
            ax1.plot([], [], "s", color=colors[j], label=f"batch {b}")
    for w in range(prof.workers):
        ax1.plot([w - 0.4, w + 0.4], [prof.step_s(w) * 1e3] * 2, "k--", lw=0.8)
    ax1.plot([], [], "k--", lw=0.8, label=f"fitted step at batch {prof.batch_size}")
    ax1.set_xticks(range(prof.workers), [str(w) for w in range(prof.workers)])
    ax1.set_xlabel("worker")
    ax1.set_ylabel("step time (ms)")
    ax1.set_yscale("log")
    ax1.set_title("step-time distribution per worker and batch size")
    ax1.legend(fontsize=8)
    for w in range(prof.workers):
        steps = per_rank[w + 1]["compute"]["steps"]
        ax2.plot([r[0] for r in steps], [r[2] * 1e3 for r in steps], ".", ms=2.5, label=f"worker {w}")
    ax2.set_yscale("log")
    ax2.set_xlabel("time since the profile started (s)")
    ax2.set_ylabel("step time (ms)")
    ax2.set_title("every step over time (load, stragglers)")
    if prof.workers <= 10:
        ax2.legend(fontsize=8, markerscale=3)
    from matplotlib.ticker import FuncFormatter

    for ax in (ax1, ax2):
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if f"{v:.1g}"[0] in "25" else ""))
    fig.savefig(path, dpi=110)
    return path


def link_rows(prof: Profile) -> tuple[list[str], list[list[str]]]:
    headers = ["link", "latency", "bandwidth", "one-way at the sizes timed"]
    rows = []
    for lk in prof.links:
        a = "server" if lk.a == 0 else f"worker {lk.a - 1}"
        sizes = "; ".join(f"{nb} B: {_fmt_ms(s)}" for nb, s in lk.table)
        rows.append([f"{a} ↔ worker {lk.b - 1}", _fmt_ms(lk.latency_s), _fmt_bps(lk.Bps), sizes])
    return headers, rows


def write_page(prof: Profile, out: Path, *, scenario_path: Path, command: str, plots: bool = True) -> list[Path]:
    """``profile.md`` and (with plots) ``profile.png`` and a self-contained ``profile.html``."""
    import base64
    import html

    written = []
    png = out / PROFILE_PNG
    if plots:
        written.append(plot_profile(prof, png))
    emulated = prof.raw.get("emulate")
    intro = (
        f"Generated by `{command}` on {time.strftime('%Y-%m-%d')} on {prof.raw.get('host')}: "
        f"{prof.workers} worker processes and a server, {prof.raw.get('compute_s')} s of timed steps each"
        + (f", emulating `{emulated}`" if emulated else "")
        + f". Scenario written to `{scenario_path.name}`."
    )
    wh, wr = worker_rows(prof)
    lh, lr = link_rows(prof)
    md = [f"# hetsync profile · {prof.workers} workers", "", intro, ""]
    md += ["| " + " | ".join(wh) + " |", "|---" + "|---:" * (len(wh) - 1) + "|"]
    md += ["| " + " | ".join(r) + " |" for r in wr]
    md += ["", *[f"- {line}" for line in summary_lines(prof)], ""]
    md += ["| " + " | ".join(lh) + " |", "|---|---:|---:|---|"]
    md += ["| " + " | ".join(r) + " |" for r in lr]
    md.append("")
    if plots:
        md += [f"![step times]({PROFILE_PNG})", ""]
    (out / PROFILE_MD).write_text("\n".join(md), encoding="utf-8")
    written.append(out / PROFILE_MD)
    if not plots:
        return written
    esc = html.escape

    def table(headers: list[str], rows: list[list[str]]) -> str:
        head = "<tr>" + "".join(f"<th>{esc(h)}</th>" for h in headers) + "</tr>"
        return (
            "<table>"
            + head
            + "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in rows)
            + "</table>"
        )

    from hetsync.report.pages import _HTML_STYLE

    data = base64.b64encode(png.read_bytes()).decode("ascii")
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>hetsync profile</title><style>{_HTML_STYLE}</style></head><body>",
        f"<h1>hetsync profile · {prof.workers} workers</h1>",
        f"<p>{esc(intro)}</p>",
        table(wh, wr),
        "<ul>" + "".join(f"<li>{esc(line)}</li>" for line in summary_lines(prof)) + "</ul>",
        f'<img alt="step times" src="data:image/png;base64,{data}">',
        "<h2>Links</h2>",
        table(lh, lr),
        "</body></html>",
    ]
    (out / PROFILE_HTML).write_text("\n".join(parts) + "\n", encoding="utf-8")
    written.append(out / PROFILE_HTML)
    return written


def terminal_table(prof: Profile) -> Any:
    from rich.table import Table
    from rich.text import Text

    headers, rows = worker_rows(prof)
    table = Table(title=Text(f"profile · {prof.workers} workers · batch {prof.batch_size}"), header_style="bold")
    for j, h in enumerate(headers):
        table.add_column(Text(h), justify="left" if j == 4 else "right", no_wrap=True)
    for r in rows:
        table.add_row(*(Text(c) for c in r))
    return table
