"""``hetsync bench faults``: a fault soak on real processes.

Declared as jobs × fault kinds. Each job is one real run of
:data:`RUN_S` seconds on ``hetero-4`` with :data:`WORKERS` workers, started
as a user starts it — ``hetsync run`` (every policy family on the
parameter-server path, BSP on the collective path, a peer-to-peer one) or
``hetsync launch`` of a user's own loop (:mod:`hetsync.benches.faults_loop`)
— as a command of its own, watched from outside. Each job runs once without
a fault (its throughput baseline) and once per fault kind, the fault at a
time drawn from ``--seed``'s generator (:func:`draw_fault`):

- ``worker-kill``: SIGKILL to a drawn worker's process (it stays gone);
- ``worker-restart``: the same, with ``--max-worker-restarts 1``: the
  launcher starts the worker again at once and it rejoins the running job
  (on jobs whose workers can come back: path ps with a server);
- ``worker-stop``: SIGSTOP to a drawn worker, SIGCONT after a drawn pause
  (some longer than the runs' ``--worker-timeout-s``, :data:`WORKER_TIMEOUT_S`);
- ``server-kill``: SIGKILL to rank 0 with ``--checkpoint-dir`` and
  ``--max-restarts 1``;
- ``link-slow``: a drawn worker's link :data:`SLOW_FACTOR`× slower from the
  drawn time on. The runtime cannot change a link from outside while it
  runs; this is its own emulation (``--throttle`` paces every transfer to
  the scenario's bandwidth, and a ``link_load`` with ``phase_s`` divides
  that worker's from the drawn time on), declared when the run starts.

The signals are sent as an operator's ``kill`` would: to the pid of the
rank's process (named ``hetsync-rank-R``), found in /proc among the
processes that carry this run's tag in their environment (every process
the command starts inherits it).

Per run (:func:`judge`): *finished* — the command ended by itself, within
:data:`RUN_LIMIT_S`, with a summary; *exit 0*; *results lost* — the
summary or the trace missing or unreadable, the trace without its ``end``,
the run marked interrupted, its steps not accounted (more applied and
dropped than computed, or more computed than applied, dropped and
outstanding — started, not ended —, or other than the workers' own counts), a killed server
not restarted, or a restarted worker that did not come back; *left over* — processes of the run still alive one second
after the command ended (they are then killed); *time to recover* — the longest
stretch without a model update (an ``apply``, or a peer-to-peer exchange's
end) from the fault to the run's end, counted from the fault if it began
before (a fault-free run: from its middle, for comparison; a run with no
update after its fault: to its end), in wall-clock time: the trace's times
are seconds since the run's start, whose wall-clock time is read from
``progress.json`` (written every 0.5 s with the fraction of ``max_time_s``
done: its mtime less that time; after a restart, the resumed leg's); *throughput kept* —
samples trained per wall-clock second from the run's start to its end (a
restart's lost time included) ÷ the job's fault-free ``samples_per_s``.
Per kind (:func:`kind_rows`): counts, medians and ranges of those.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hetsync.benches.common import Row
from hetsync.console import terminal_console
from hetsync.errors import BadInput

NAME = "faults"
SCRIPT = Path(__file__).with_name("faults_loop.py")
RUN_S = 10.0  # each run's training time (its clock; a restart's lost time comes on top)
QUICK_RUN_S = 4.0
WORKERS = 3
WORKER_TIMEOUT_S = 3.0  # a worker silent this long leaves the run (some drawn pauses are longer)
CHECKPOINT_EVERY_S = 1.0
EVAL_EVERY_S = 0.5
SLOW_FACTOR = 20.0
BANDWIDTH_BPS = 1.25e7  # 100 Mb/s: the digits MLP's 100 KB in 8 ms, 160 ms on the slowed link
RUN_LIMIT_S = 240.0  # one command, start to end: a run past it hangs, and is stopped
LEFTOVER_GRACE_S = 1.0
TAG_ENV = "HETSYNC_FAULT_SOAK"
PROGRESS_KINDS = ("apply", "send", "allreduce")  # trace records that mark a model update


@dataclass(frozen=True, slots=True)
class Job:
    name: str
    policy: str
    path: str = "ps"
    loop: bool = False  # a user's own loop under hetsync launch (else hetsync run)


JOBS = (
    Job("bsp", "bsp"),
    Job("asp", "asp"),
    Job("ssp", "ssp:s=3"),
    Job("dssp", "dssp"),
    Job("elastic-bsp", "elastic-bsp"),
    Job("wbsp", "wbsp"),
    Job("lb-bsp", "lb-bsp"),
    Job("backup", "backup:b=1"),
    Job("local-sgd", "local-sgd:H=4"),
    Job("diloco", "diloco"),
    Job("p2p-random", "p2p-random"),
    Job("bsp-collective", "bsp", path="collective"),
    Job("own-loop", "bsp", loop=True),
)
KINDS = {
    "worker-kill": "a worker's process SIGKILLed",
    "worker-restart": "a worker's process SIGKILLed, started again at once (--max-worker-restarts 1)",
    "worker-stop": "a worker SIGSTOPped, SIGCONT after a drawn pause",
    "server-kill": "rank 0 SIGKILLed, with checkpoints and --max-restarts 1",
    "link-slow": f"a worker's link {SLOW_FACTOR:g}x slower from then on (--throttle's emulation)",
}
LINK_JOBS = ("bsp", "asp", "wbsp", "p2p-random")  # link-slow on these (the full cross would double the soak)
QUICK = (("bsp", "worker-kill"),)  # (the other kinds: tests/runtime/test_faults.py, one by one)


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str
    at_s: float  # on the run's clock
    rank: int  # 0: the server; 1..N: workers
    pause_s: float = 0.0  # worker-stop: SIGCONT this long after SIGSTOP


def applies(job: Job, kind: str) -> bool:
    """Whether the declared soak runs ``kind`` on ``job`` (link-slow: hetsync run's jobs in
    :data:`LINK_JOBS`; worker-restart: those whose workers can come back, on path ps with a
    server: not peer to peer, not the collective path)."""
    if kind == "link-slow":
        return not job.loop and job.name in LINK_JOBS
    if kind == "worker-restart":
        return job.path == "ps" and not job.policy.startswith("p2p")
    return True


def matrix(jobs: Iterable[Job], kinds: Iterable[str]) -> list[tuple[Job, str]]:
    """The faulted runs: each job × each kind that applies to it, in that order."""
    kinds = list(kinds)
    return [(job, kind) for job in jobs for kind in kinds if applies(job, kind)]


def draw_fault(kind: str, rng: np.random.Generator, *, run_s: float = RUN_S, workers: int = WORKERS) -> Fault:
    """A fault of ``kind`` at a time drawn uniformly in [0.3, 0.7] of the run
    (after a checkpoint, before the end); a worker's fault hits a drawn
    worker; a stop lasts 0.5–2 × the worker timeout."""
    at_s = float(rng.uniform(0.3, 0.7)) * run_s
    if kind == "server-kill":
        return Fault(kind, at_s, 0)
    rank = int(rng.integers(1, workers + 1))
    pause_s = float(rng.uniform(0.5, 2.0)) * WORKER_TIMEOUT_S if kind == "worker-stop" else 0.0
    return Fault(kind, at_s, rank, pause_s)


# ------------------------------------------------------------------ a run
def command(job: Job, fault: Fault | None, out: Path, script: Path, *, run_s: float = RUN_S) -> list[str]:
    """The job's command line as a user types it (with the fault's options)."""
    hetsync = [sys.executable, "-m", "hetsync"]
    restart = fault is not None and fault.kind == "server-kill"
    ckpt = ["--checkpoint-dir", str(out / "ckpt"), "--max-restarts", "1"] if restart else []
    comes_back = ["--max-worker-restarts", "1"] if fault is not None and fault.kind == "worker-restart" else []
    if job.loop:
        loop_args = [job.policy, f"{run_s:g}", f"{WORKER_TIMEOUT_S:g}", *([str(out / "ckpt")] if restart else [])]
        launch = [*hetsync, "launch", "--nproc", str(WORKERS), "--out", str(out), *ckpt[2:], *comes_back]
        return [*launch, str(script), *loop_args]
    sets = {
        "max_time_s": run_s,
        "eval_every_s": EVAL_EVERY_S,
        "bandwidth_Bps": BANDWIDTH_BPS,
    }
    if fault is not None and fault.kind == "link-slow":
        period = 1000.0  # on while (t + phase) mod period < on_s: from at_s on, for good
        load = {"workers": [fault.rank - 1], "period_s": period, "factor": SLOW_FACTOR}
        load |= {"on_s": period - fault.at_s, "phase_s": period - fault.at_s}
        sets["link_load"] = json.dumps(load)  # type: ignore[assignment]
    argv = [*hetsync, "run", "-s", "hetero-4", "-p", job.policy, "--nproc", str(WORKERS), "--path", job.path]
    argv += ["--throttle", "--no-plots", "--worker-timeout-s", f"{WORKER_TIMEOUT_S:g}", "-o", str(out)]
    if restart:
        argv += ["--checkpoint-every-s", f"{CHECKPOINT_EVERY_S:g}"]
    return argv + ckpt + comes_back + [x for key, value in sets.items() for x in ("--set", f"{key}={value}")]


@dataclass
class Observed:
    """What watching one command saw."""

    code: int | None  # None: it hung and was stopped
    elapsed_s: float
    fault_wall: float | None = None  # when the fault struck (time.time())
    epochs: list[tuple[float, float]] = field(default_factory=list)  # (progress.json's mtime, the run's start)
    leftovers: list[str] = field(default_factory=list)


def _tagged(tag: str) -> dict[int, tuple[int, str, str]]:
    """The live processes whose environment carries ``tag``: pid → (start time, state, name)."""
    from hetsync.runtime.launch import proc_stat

    found = {}
    needle = f"{TAG_ENV}={tag}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            if needle not in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                continue
            name = Path(f"/proc/{entry}/comm").read_text().strip()
        except OSError:
            continue
        stat = proc_stat(int(entry))
        if stat is not None and stat[0] not in "ZX":
            found[int(entry)] = (stat[3], stat[0], name)
    return found


def _run_start(progress: Path, run_s: float) -> tuple[float, float] | None:
    """(mtime, the run's start as time.time()) from ``progress.json``: its mtime less the time it says was done."""
    try:
        mtime = progress.stat().st_mtime_ns / 1e9
        fraction = float(json.loads(progress.read_text())["fraction"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return (mtime, mtime - fraction * run_s) if 0 < fraction < 1 else None


def watch(argv: list[str], fault: Fault | None, out: Path, *, run_s: float = RUN_S) -> Observed:
    """Run ``argv``, strike ``fault`` at its time on the run's clock, and see what is left when it ends."""
    tag = uuid.uuid4().hex
    env = {**os.environ, TAG_ENV: tag}
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    seen: dict[int, int] = {}
    obs = Observed(code=None, elapsed_s=0.0)
    stopped: tuple[int, int] | None = None  # (pid, start) of a stopped worker not yet continued
    with (out.parent / f"{out.name}.console").open("w") as console:
        proc = subprocess.Popen(argv, stdout=console, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            while proc.poll() is None and time.time() - t0 < RUN_LIMIT_S:
                procs = _tagged(tag)
                seen.update({pid: p[0] for pid, p in procs.items()})
                start = _run_start(out / "progress.json", run_s)
                if start is not None and (not obs.epochs or start[0] != obs.epochs[-1][0]):
                    obs.epochs.append(start)
                if fault is not None and obs.fault_wall is None and obs.epochs:
                    due = min(e for _, e in obs.epochs) + fault.at_s
                    if fault.kind == "link-slow":
                        obs.fault_wall = due  # the runtime switches it itself
                    elif time.time() >= due:
                        stopped = _strike(fault, procs, obs)
                if stopped is not None and obs.fault_wall is not None and time.time() >= obs.fault_wall + fault.pause_s:  # type: ignore[union-attr]
                    _signal(*stopped, signal.SIGCONT)
                    stopped = None
                time.sleep(0.05)
        finally:
            if proc.poll() is None:  # it hung: stop the launcher (its ranks die with it) and count it
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            obs.code = proc.returncode if time.time() - t0 < RUN_LIMIT_S else None
            obs.elapsed_s = time.time() - t0
            time.sleep(LEFTOVER_GRACE_S)
            left = _tagged(tag)
            obs.leftovers = [f"{pid} {name} ({state})" for pid, (_, state, name) in sorted(left.items())]
            for pid, (start, _, _) in left.items():  # the bench leaves nothing either
                _signal(pid, start, signal.SIGCONT)
                _signal(pid, start, signal.SIGKILL)
    return obs


def _strike(fault: Fault, procs: dict[int, tuple[int, str, str]], obs: Observed) -> tuple[int, int] | None:
    """Send the fault's signal to its rank's process if it is there (else try again next look)."""
    target = [(pid, p[0]) for pid, p in procs.items() if p[2] == f"hetsync-rank-{fault.rank}"]
    if len(target) != 1:
        return None
    sig = signal.SIGSTOP if fault.kind == "worker-stop" else signal.SIGKILL
    _signal(*target[0], sig)
    obs.fault_wall = time.time()
    return target[0] if fault.kind == "worker-stop" else None


def _signal(pid: int, start: int, sig: signal.Signals) -> None:
    from hetsync.runtime.launch import proc_stat

    stat = proc_stat(pid)
    if stat is not None and stat[3] == start:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


# ------------------------------------------------------------------ judging
def lost(out: Path, kind: str | None) -> list[str]:
    """What of the run's results is missing or does not add up (empty: nothing lost)."""
    from hetsync.salvage import INTERRUPTED
    from hetsync.summary import as_dicts, read_summary
    from hetsync.trace import iter_records

    try:
        runs = as_dicts(read_summary(out / "summary.json"))
    except BadInput as e:
        return [f"summary: {e}"]
    if len(runs) != 1:
        return [f"summary holds {len(runs)} runs"]
    (run,) = runs
    problems = []
    try:
        ends = [r for r in iter_records(out / str(run["trace"]), kinds=("end",))]
    except (OSError, BadInput, ValueError) as e:
        ends, problems = [], [f"trace: {e}"]
    if not ends and not problems:
        problems.append("trace: no end record")
    if run.get("stop_reason") == INTERRUPTED:
        problems.append("run interrupted")
    steps = run.get("steps") or 0
    ended = (run.get("applied_steps") or 0) + (run.get("dropped_steps") or 0)
    if not ended <= steps <= ended + (run.get("outstanding_steps") or 0):  # (outstanding: started, not ended)
        problems.append(
            f"{steps} steps computed, {ended} applied or dropped, {run.get('outstanding_steps')} outstanding"
        )
    if sum((run.get("per_worker") or {}).get("steps") or []) != steps:
        problems.append(f"{steps} steps, workers counted {(run.get('per_worker') or {}).get('steps')}")
    if kind == "server-kill" and not run.get("restarts"):
        problems.append("the killed server was not restarted")
    if kind == "worker-restart" and not run.get("workers_joined"):
        problems.append("the killed worker did not come back")
    return problems


def update_times(records: list[dict[str, Any]], start: float, resumed_start: float) -> list[float]:
    """The wall-clock times of the run's model updates (``apply``, a peer to
    peer exchange's end): the records' times are on the run's clock, which
    began at ``start``, or, after the trace's last ``resume``, at ``resumed_start``."""
    resumes = [i for i, r in enumerate(records) if r["ev"] == "resume"]
    cut = resumes[-1] if resumes else len(records)
    legs = ((records[:cut], start), (records[cut + 1 :], resumed_start))
    return sorted(origin + r.get("end", r["t"]) for leg, origin in legs for r in leg if r["ev"] in PROGRESS_KINDS)


def time_to_recover(updates: list[float], fault_wall: float, end_wall: float) -> tuple[float, float | None]:
    """(the longest stretch without a model update from the fault to the
    run's end — counted from the fault if it began before —, the time from
    the fault to the first update after it, None if none came)."""
    after = [t for t in updates if t > fault_wall]
    if not after:
        return max(0.0, end_wall - fault_wall), None
    gaps = [b - a for a, b in zip([fault_wall, *after[:-1]], after, strict=True)]
    return max(*gaps, end_wall - after[-1]), after[0] - fault_wall


def judge(obs: Observed, out: Path, kind: str | None, baseline_rate: float | None) -> dict[str, Any]:
    """One run's outcome: finished, exit status, results lost, left over, recovery, throughput kept."""
    from hetsync.summary import as_dicts, read_summary
    from hetsync.trace import iter_records

    problems = lost(out, kind)
    result: dict[str, Any] = {
        "finished": obs.code is not None and (out / "summary.json").is_file(),
        "exit": obs.code,
        "lost": problems,
        "leftovers": obs.leftovers,
        "elapsed_s": obs.elapsed_s,
        "recover_s": None,
        "next_update_s": None,
        "fault_wall": obs.fault_wall,
        "epochs": obs.epochs,
        "samples_per_s": None,
        "kept": None,
    }
    if problems and problems[0].startswith("summary"):
        return result
    (run,) = as_dicts(read_summary(out / "summary.json"))
    starts = [e for _, e in obs.epochs]
    first = min(starts) if starts else None
    later = [e for m, e in obs.epochs if obs.fault_wall is not None and m > obs.fault_wall]
    last = min(later[-3:]) if later and run.get("resumed_from") else first
    if first is not None and last is not None:
        samples = run["samples_per_s"] * run["wall_time_s"]
        result["samples_per_s"] = samples / (last + run["wall_time_s"] - first)
        if baseline_rate:
            result["kept"] = result["samples_per_s"] / baseline_rate
        # (a fault-free run: the same figures from its middle, for comparison)
        at = obs.fault_wall if obs.fault_wall is not None else first + run["wall_time_s"] / 2
        with contextlib.suppress(OSError, BadInput, ValueError):
            updates = update_times(list(iter_records(out / str(run["trace"]))), first, last)
            stall, result["next_update_s"] = time_to_recover(updates, at, last + run["wall_time_s"])
            result["recover_s"] = stall
    return result


# ------------------------------------------------------------------ the bench
def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seed", type=int, default=0, help="seed of the fault draws (default 0)")
    p.add_argument("--jobs", default=",".join(j.name for j in JOBS), help="comma-separated, of the declared jobs")
    p.add_argument("--faults", default=",".join(KINDS), help=f"comma-separated, of {', '.join(KINDS)}")
    p.add_argument("--quick", action="store_true", help="a handful of runs: " + ", ".join(map(" × ".join, QUICK)))
    p.add_argument("--out", type=Path, default=None, help="keep the runs here (default: a temporary folder)")


def plan(args: argparse.Namespace) -> list[tuple[Job, str]]:
    """The faulted runs ``args`` ask for (BadInput for an unknown job or kind)."""
    by_name = {j.name: j for j in JOBS}
    if args.quick:
        return [(by_name[j], k) for j, k in QUICK]
    jobs = [s.strip() for s in args.jobs.split(",") if s.strip()]
    kinds = [s.strip() for s in args.faults.split(",") if s.strip()]
    bad = [j for j in jobs if j not in by_name] + [k for k in kinds if k not in KINDS]
    if bad or not jobs or not kinds:
        raise BadInput(f"--jobs of {', '.join(by_name)}; --faults of {', '.join(KINDS)}; got {bad or 'none'}")
    runs = matrix([by_name[j] for j in jobs], kinds)
    if not runs:
        raise BadInput(f"no faulted run: {', '.join(kinds)} applies to none of {', '.join(jobs)}")
    return runs


def run(args: argparse.Namespace) -> list[Row]:
    runs = plan(args)
    if args.out is not None:
        return _run(args, runs, Path(args.out))
    with tempfile.TemporaryDirectory() as tmp:
        return _run(args, runs, Path(tmp))


def _run(args: argparse.Namespace, runs: list[tuple[Job, str]], out: Path) -> list[Row]:
    con = terminal_console()
    rng = np.random.default_rng(args.seed)
    run_s = QUICK_RUN_S if args.quick else RUN_S
    script = Path(shutil.copyfile(SCRIPT, _fresh(out / "script") / SCRIPT.name))  # (not on the benches' sys.path)
    baselines: dict[str, float | None] = {}
    outcomes = []
    for job in dict.fromkeys(job for job, _ in runs):
        where = _fresh(out / job.name / "fault-free")
        obs = watch(command(job, None, where, script, run_s=run_s), None, where, run_s=run_s)
        base = judge(obs, where, None, None)
        baselines[job.name] = base["samples_per_s"]
        con.print(f"  {job.name}, fault-free: {_said(base)}", markup=False, highlight=False)
        outcomes.append({"job": job.name, "kind": "fault-free", **base})
    for job, kind in runs:
        fault = draw_fault(kind, rng, run_s=run_s)
        where = _fresh(out / job.name / kind)
        obs = watch(command(job, fault, where, script, run_s=run_s), fault, where, run_s=run_s)
        got = {
            "job": job.name,
            "kind": kind,
            "fault": fault_text(fault),
            **judge(obs, where, kind, baselines[job.name]),
        }
        outcomes.append(got)
        con.print(f"  {job.name}, {got['fault']}: {_said(got)}", markup=False, highlight=False)
    (out / "outcomes.json").write_text(json.dumps(outcomes, indent=1) + "\n")
    return kind_rows(outcomes, run_s) + run_rows(outcomes)


def _fresh(folder: Path) -> Path:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def fault_text(fault: Fault) -> str:
    """``worker 2 SIGSTOP at 3.1 s for 4.2 s``, ``rank 0 SIGKILL at 2.5 s``."""
    who = "rank 0" if fault.rank == 0 else f"worker {fault.rank - 1}"
    what = {"worker-kill": "SIGKILL", "worker-stop": "SIGSTOP", "server-kill": "SIGKILL", "link-slow": "link slowed"}
    what["worker-restart"] = "SIGKILL, started again,"
    text = f"{who} {what[fault.kind]} at {fault.at_s:.1f} s"
    return text + (f" for {fault.pause_s:.1f} s" if fault.kind == "worker-stop" else "")


def _said(o: dict[str, Any]) -> str:
    parts = [f"exit {o['exit']}", f"{o['elapsed_s']:.0f} s"]
    if o["lost"]:
        parts.append("lost: " + "; ".join(o["lost"]))
    if o["leftovers"]:
        parts.append(f"{len(o['leftovers'])} left over")
    if o.get("recover_s") is not None:
        stalled = "no update after it" if o.get("next_update_s") is None else f"next update {o['next_update_s']:.2f} s"
        parts.append(f"longest stall {o['recover_s']:.2f} s ({stalled})")
    if o.get("kept") is not None:
        parts.append(f"kept {o['kept']:.2f}")
    return ", ".join(parts)


def _range(values: list[float], fmt: str) -> str:
    if not values:
        return "—"
    mid = format(statistics.median(values), fmt)
    return mid if len(values) == 1 else f"{mid} [{min(values):{fmt}}–{max(values):{fmt}}]"


def kind_rows(outcomes: list[dict[str, Any]], run_s: float = RUN_S) -> list[Row]:
    """Per fault kind: runs, finished, exit 0, results lost, processes left
    over, runs with a model update after the fault, time to recover and
    throughput kept (median [lowest–highest])."""
    rows: list[Row] = []
    setting = f"per fault kind: {WORKERS} workers, {run_s:g} s runs; medians [lowest–highest]"
    for kind in [k for k in ("fault-free", *KINDS) if any(o["kind"] == k for o in outcomes)]:
        mine = [o for o in outcomes if o["kind"] == kind]
        n = len(mine)
        head = {"policy": kind, "row_name": "fault", "setting": setting}
        recover = [o["recover_s"] for o in mine if o.get("recover_s") is not None]
        recovered = sum(o.get("next_update_s") is not None for o in mine)
        kept = [o["kept"] for o in mine if o.get("kept") is not None]
        figures = [
            ("runs", n, str(n)),
            ("finished", sum(o["finished"] for o in mine), f"{sum(o['finished'] for o in mine)}/{n}"),
            ("exit 0", sum(o["exit"] == 0 for o in mine), f"{sum(o['exit'] == 0 for o in mine)}/{n}"),
            ("results lost", sum(bool(o["lost"]) for o in mine), str(sum(bool(o["lost"]) for o in mine))),
            (
                "processes left over",
                sum(len(o["leftovers"]) for o in mine),
                str(sum(len(o["leftovers"]) for o in mine)),
            ),
            ("updates again after the fault", recovered, f"{recovered}/{n}" if kind != "fault-free" else "—"),
            ("time to recover (s)", statistics.median(recover) if recover else None, _range(recover, ".2f")),
            ("throughput kept (x)", statistics.median(kept) if kept else None, _range(kept, ".2f")),
        ]
        rows += [{**head, "metric": m, "value": v, "unit": "", "shown": s} for m, v, s in figures]
    return rows


def run_rows(outcomes: list[dict[str, Any]]) -> list[Row]:
    """One line per faulted run: its fault, exit status, recovery and throughput kept."""
    rows: list[Row] = []
    for o in outcomes:
        if o["kind"] == "fault-free":
            continue
        head = {"policy": f"{o['job']} · {o['kind']}", "row_name": "run", "setting": "each faulted run"}
        lost_text = "; ".join(o["lost"]) or "no"
        figures = [
            ("fault", None, o["fault"]),
            ("exit", o["exit"], str(o["exit"])),
            ("time to recover (s)", o["recover_s"], "—" if o["recover_s"] is None else f"{o['recover_s']:.2f}"),
            ("throughput kept (x)", o["kept"], "—" if o["kept"] is None else f"{o['kept']:.2f}"),
            ("results lost", bool(o["lost"]), lost_text),
            ("left over", len(o["leftovers"]), str(len(o["leftovers"]))),
        ]
        rows += [{**head, "metric": m, "value": v, "unit": "", "shown": s} for m, v, s in figures]
    return rows
