"""What every rank of a runtime run is given: one validated configuration.

``hetsync run`` (and ``compare --runtime dist``, ``advise --verify``) write it
to ``OUT/run-config.json`` and start every rank with ``python -m
hetsync.runtime --config OUT/run-config.json``; whoever calls torchrun by
hand gives the same settings as flags (``python -m hetsync.runtime --help``).
Both build a :class:`RunConfig`, and it validates: the file holds the
scenario as its name or path with the overrides of ``--set`` (each rank loads
it), the policy specs, the process options and whether to draw plots.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hetsync import limits
from hetsync.errors import BadInput

if TYPE_CHECKING:
    from hetsync.scenario import Scenario

CONFIG_NAME = "run-config.json"
DEFAULT_STARTUP_TIMEOUT_S = 60.0

# What the launcher (hetsync.runtime.launch) and the ranks it starts agree on. They live here, free
# of torch, so that the launcher never imports torch: it starts the ranks at once.
EXIT_STATUS = "exit-status.json"  # written by the server as its last act
STARTED_FILE_ENV = "HETSYNC_STARTED_FILE"  # set by hetsync run: rank 0 creates it once the group has formed
PARENT_PID_ENV = "HETSYNC_PARENT_PID"  # the process whose death kills a rank (hetsync.runtime.agent.die_with_parent)
# set by hetsync run: the ranks meet at a store rank 0 hosts (no torchrun agent's), and rank 0's is on
# the listening socket whose fd STORE_FD_ENV gives, bound to --host
OWN_STORE_ENV = "HETSYNC_OWN_STORE"
REJOIN_ENV = "HETSYNC_REJOIN"  # set by the launcher on a worker it started again: its life (1, 2, ...)
# hetsync launch --max-worker-restarts N: hetsync.init's server watches for workers that come back
MAX_WORKER_RESTARTS_ENV = "HETSYNC_MAX_WORKER_RESTARTS"
# hetsync launch --nproc-max M: the run has M workers, those beyond the world group's absent at the start
NPROC_MAX_ENV = "HETSYNC_NPROC_MAX"
RESUME_ENV = "HETSYNC_RESUME"  # "1": a restarted job (hetsync launch --max-restarts) goes on from its checkpoint
STORE_FD_ENV = "HETSYNC_STORE_FD"
STARTUP_EXPIRED = "the process group did not form within startup_timeout_s"  # a rank's start-up timer, in its log
RDZV_BACKEND = "hetsync-static"  # the rendezvous of a torchrun agent started by hetsync (hetsync.runtime.agent)


DEVICES = ("cpu", "cuda")  # what ProcessOptions.device (hetsync run --device) takes


def device_refusal(
    device: str, *, path: str, workers: int, cuda: bool, gpus: int, nccl: bool, p2p: list[str]
) -> str | None:
    """Why a run on ``device`` cannot go on this machine (one line), or None.
    ``cuda``, ``gpus``, ``nccl``: what torch says here; ``p2p``: the run's
    peer-to-peer policy specs (their models go worker to worker over gloo, on
    the CPU only)."""
    if device == "cpu":
        return None
    if not cuda:
        return "--device cuda: torch sees no CUDA device on this machine (torch.cuda.is_available() is False); drop it"
    if p2p:
        return f"--device cuda: {p2p[0]} is peer to peer, whose models go worker to worker on the CPU only; drop it"
    if path == "collective":
        if not nccl:
            return "--path collective --device cuda needs NCCL, which this torch build lacks: use --path ps"
        if gpus < workers:
            return (
                f"--path collective --device cuda: {workers} workers and {gpus} GPU(s), and NCCL puts one rank on "
                f"a GPU: use --nproc {gpus} or fewer, or --path ps (workers share GPUs there)"
            )
    return None


EXIT_ABSENT = 3  # a worker the scenario's membership has start absent leaves the world group at once with it


def absences_of(membership: Sequence[Any], worker: int) -> list[Any]:
    """Worker ``worker``'s entries of a scenario's ``membership``, in the order
    its process lives them (one that starts absent, without ``leave_s``,
    first): its life k leaves at entry k's ``leave_s`` (none: absent from
    the start) and its life k + 1 starts at entry k's ``join_s``."""
    mine = [a for a in membership if a.worker == worker]
    return sorted(mine, key=lambda a: -1.0 if a.leave_s is None else a.leave_s)


def leave_s_of(membership: Sequence[Any], worker: int, life: int) -> float | None:
    """When worker ``worker`` leaves in its ``life``-th life (0: the process the
    job started; each restart one more), as ``membership`` says (None: it stays)."""
    mine = absences_of(membership, worker)
    return mine[life].leave_s if life < len(mine) else None


def _seconds(name: str, value: Any, low: float, high: float, *, low_open: bool = False) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (low < value if low_open else low <= value) and value <= high
    if not ok:
        interval = f"{'(' if low_open else '['}{limits.shown(low)}, {limits.shown(high)}]"
        raise BadInput(f"{name} must be a number of seconds in {interval}, got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessOptions:
    """How the processes of a run behave (every rank gets the same)."""

    out: Path = Path("runs/dist")
    worker_timeout_s: float = 60.0  # a worker silent this long while it owes a report is declared gone
    startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S  # for every rank to join the process group
    checkpoint_dir: Path | None = None
    checkpoint_every_s: float = 10.0
    resume: bool = False  # continue each policy from its checkpoint in checkpoint_dir
    throttle: bool = False  # transfers last at least model bytes / the worker's bandwidth
    # steps last as long as the scenario models them (fixed_s + per_sample_s · batch, slowdown,
    # noise, delay), not the real step stretched by the slowdown: with throttle, the scenario's timing
    pace: bool = False
    kill_worker: int | None = None  # fault injection: this worker dies (SIGKILL) ...
    kill_at_s: float | None = None  # ... at this time into each run
    # the data plane of gradient rounds: "ps" (through rank 0, as the papers' systems) or
    # "collective" (all-reduced among the workers: hetsync.runtime.collective)
    path: str = "ps"
    # server processes holding the model's shards (hetsync.runtime.shards): 1 is rank 0 alone
    servers: int = 1
    # when the server (rank 0) dies: restart the job from its checkpoints this many times at most
    # (hetsync.runtime.launch.launch_run; torchrun's --max-restarts)
    max_restarts: int = 0
    # a worker process that dies is started again by the launcher, this many times in all at most; it
    # comes back on a session of its own (hetsync.runtime.session) and goes on where it was
    max_worker_restarts: int = 0
    # the scenario's last `joinable` workers are absent at the start (they have no rank in the world
    # group) and may join on sessions while the run goes on (hetsync launch --nproc-max): the server
    # knows every worker from the start, as policies size their state by the worker count
    joinable: int = 0
    # where each worker computes the built-in workload (hetsync run --device): "cpu", or "cuda" (worker w on
    # cuda:w % GPUs: its model, optimizer state, buffers and batches; the collective path's buckets too, reduced
    # over NCCL). The wire to rank 0 stays gloo (host copies where it needs them); rank 0 keeps its model on the
    # CPU. Not the scenario's `device: cpu|gpu`, which is a simulated step-time curve.
    device: str = "cpu"

    def __post_init__(self) -> None:
        _seconds("worker_timeout_s", self.worker_timeout_s, 0, limits.MAX_WORKER_TIMEOUT_S, low_open=True)
        _seconds("startup_timeout_s", self.startup_timeout_s, 0, limits.MAX_WORKER_TIMEOUT_S, low_open=True)
        _seconds("checkpoint_every_s", self.checkpoint_every_s, limits.MIN_CHECKPOINT_EVERY_S, limits.MAX_TIME_S)
        if self.kill_worker is not None and (
            isinstance(self.kill_worker, bool) or not isinstance(self.kill_worker, int)
        ):
            raise BadInput(f"kill_worker must be a worker index, got {self.kill_worker!r}")
        if self.kill_at_s is not None:
            _seconds("kill_at_s", self.kill_at_s, 0, limits.MAX_TIME_S)
        if self.path not in ("ps", "collective"):
            raise BadInput(f"path must be ps or collective, got {self.path!r}")
        if self.device not in DEVICES:
            raise BadInput(f"device must be one of {', '.join(DEVICES)}, got {self.device!r}")
        if isinstance(self.servers, bool) or not isinstance(self.servers, int) or not 1 <= self.servers <= 64:
            raise BadInput(f"servers must be an integer in [1, 64], got {self.servers!r}")
        if isinstance(self.max_restarts, bool) or not isinstance(self.max_restarts, int) or self.max_restarts < 0:
            raise BadInput(f"max_restarts must be an integer >= 0, got {self.max_restarts!r}")
        if (
            isinstance(self.max_worker_restarts, bool)
            or not isinstance(self.max_worker_restarts, int)
            or self.max_worker_restarts < 0
        ):
            raise BadInput(f"max_worker_restarts must be an integer >= 0, got {self.max_worker_restarts!r}")
        if isinstance(self.joinable, bool) or not isinstance(self.joinable, int) or self.joinable < 0:
            raise BadInput(f"joinable must be an integer >= 0, got {self.joinable!r}")
        if self.joinable > 0 and self.path != "ps":
            raise BadInput(
                f"--nproc-max: {self.joinable} worker(s) may join, on path ps only (the collective path's group "
                "of workers is formed at start); drop --path collective"
            )
        if self.joinable > 0 and self.servers != 1:
            raise BadInput("--nproc-max: workers join with one server only (sharded servers keep links of their own)")
        if self.max_worker_restarts > 0 and self.path != "ps":
            raise BadInput(
                f"max_worker_restarts {self.max_worker_restarts}: a restarted worker comes back on path ps only "
                "(the collective path's group of workers is formed at start); drop --path collective"
            )
        if self.max_worker_restarts > 0 and self.servers != 1:
            raise BadInput(
                f"max_worker_restarts {self.max_worker_restarts}: a restarted worker comes back with one server "
                "only (sharded servers keep their own links to it); drop --servers"
            )
        if self.max_restarts > 0 and self.checkpoint_dir is None:
            raise BadInput(
                f"max_restarts {self.max_restarts} needs a checkpoint_dir (--checkpoint-dir): a restarted server "
                "goes on from its last checkpoint"
            )

    def check_device(self, scenario: Scenario, specs: list[str]) -> None:
        """BadInput (one line) for a ``device`` this machine or these policies
        cannot give (:func:`device_refusal`): asked of torch only for ``cuda``,
        so a CPU run imports nothing more."""
        if self.device == "cpu":
            return
        import torch
        import torch.distributed as dist

        from hetsync.driver import policy_context
        from hetsync.policies import make_policy

        p2p = [s for s in specs if make_policy(s, policy_context(scenario)).topology == "p2p"]
        why = device_refusal(
            self.device,
            path=self.path,
            workers=scenario.cluster.workers,
            cuda=torch.cuda.is_available(),
            gpus=torch.cuda.device_count() if torch.cuda.is_available() else 0,
            nccl=dist.is_nccl_available(),
            p2p=p2p,
        )
        if why is not None:
            raise BadInput(why)

    def check_rejoin(self, scenario: Scenario, specs: list[str]) -> None:
        """:func:`hetsync.driver.core.check_rejoin` with these options: the same
        one-line refusal from the launcher and from every rank."""
        from hetsync.driver.core import check_rejoin

        resumable = self.resume or self.max_restarts > 0
        check_rejoin(
            scenario,
            specs,
            path=self.path,
            servers=self.servers,
            max_worker_restarts=self.max_worker_restarts,
            resumable=resumable,
            joinable=self.joinable,
        )

    def emulation(self, scenario: Scenario) -> tuple[bool, bool]:
        """(throttle, pace) for a run of ``scenario``: the flags, or both on where
        the scenario asks for its modelled timing (``runtime_timing: modelled``)."""
        modelled = scenario.timing.modelled
        throttle, pace = self.throttle or modelled, self.pace or modelled
        if pace and not scenario.timing.resolved:
            why = "runtime_timing: modelled" if modelled else "--pace"
            raise BadInput(
                f"{why} needs scenario {scenario.name!r}'s fixed_s and per_sample_s as numbers, and they are "
                "'measured' (on real processes the real step is the measured one): drop it"
            )
        return throttle, pace

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _jsonable(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_dict(cls, raw: Any, where: str = "process") -> ProcessOptions:
        known = {f.name for f in fields(cls)}
        given = _mapping(raw, where, known)
        for key in ("out", "checkpoint_dir"):
            if given.get(key) is not None:
                if not isinstance(given[key], str) or not given[key]:
                    raise BadInput(f"{where}.{key} must be a folder path, got {given[key]!r}")
                given[key] = Path(given[key])
        for key in ("resume", "throttle", "pace"):
            if key in given and not isinstance(given[key], bool):
                raise BadInput(f"{where}.{key} must be true or false, got {given[key]!r}")
        return cls(**given)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunConfig:
    """A runtime run: the scenario (a built-in name or a YAML path, with the
    keys ``--set`` and ``--seed`` replace), the policy specs (None: the
    scenario's), the process options, and whether the server draws plots."""

    scenario: str = "default"
    overrides: Mapping[str, Any] = field(default_factory=dict)
    policies: tuple[str, ...] | None = None
    process: ProcessOptions = field(default_factory=ProcessOptions)
    plots: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.scenario, str) or not self.scenario:
            raise BadInput(f"scenario must be a built-in name or a YAML path, got {self.scenario!r}")
        if not isinstance(self.overrides, Mapping) or not all(isinstance(k, str) for k in self.overrides):
            raise BadInput(f"overrides must map scenario keys to values, got {self.overrides!r}")
        if self.policies is not None and (
            not isinstance(self.policies, tuple)
            or not self.policies
            or not all(isinstance(s, str) and s for s in self.policies)
        ):
            raise BadInput(f"policies must be a non-empty list of policy specs, got {self.policies!r}")
        if not isinstance(self.process, ProcessOptions):
            raise BadInput(f"process must be ProcessOptions, got {type(self.process).__name__}")
        if not isinstance(self.plots, bool):
            raise BadInput(f"plots must be true or false, got {self.plots!r}")

    def load_scenario(self) -> Scenario:
        from hetsync.scenario import load_scenario

        return load_scenario(self.scenario, **self.overrides)

    def specs(self, scenario: Scenario) -> list[str]:
        """The policy specs to run (the scenario's when none are given), checked."""
        from hetsync.driver import policy_specs

        return policy_specs(",".join(self.policies) if self.policies else None, scenario)

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "overrides": dict(self.overrides),
            "policies": None if self.policies is None else list(self.policies),
            "process": self.process.to_dict(),
            "plots": self.plots,
        }

    @classmethod
    def from_dict(cls, raw: Any) -> RunConfig:
        given = _mapping(raw, "the run config", {f.name for f in fields(cls)})
        if "process" in given:
            given["process"] = ProcessOptions.from_dict(given["process"])
        if isinstance(given.get("policies"), list):
            given["policies"] = tuple(given["policies"])
        return cls(**given)

    def write(self, path: Path) -> Path:
        """Write the config as JSON (through a temporary file: a rank never reads half of it)."""
        try:
            text = json.dumps(self.to_dict(), indent=1) + "\n"
        except TypeError as e:  # an override YAML parsed into something JSON has not (a date)
            raise BadInput(f"overrides must be plain values (numbers, text, lists, mappings): {e}") from None
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text)
        tmp.replace(path)
        return path

    @classmethod
    def read(cls, path: Path) -> RunConfig:
        try:
            raw = json.loads(Path(path).read_text())
        except OSError as e:
            raise BadInput(f"cannot read the run config {str(path)!r}: {e.strerror or e}") from None
        except ValueError as e:
            raise BadInput(f"the run config {str(path)!r} is not valid JSON: {e}") from None
        return cls.from_dict(raw)


def _mapping(raw: Any, where: str, known: set[str]) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise BadInput(f"{where} must be a JSON object, got {type(raw).__name__}")
    unknown = sorted(str(k) for k in raw if k not in known)
    if unknown:
        raise BadInput(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(known))})")
    return dict(raw)


def _jsonable(value: Any) -> Any:
    return str(value) if isinstance(value, Path) else value
