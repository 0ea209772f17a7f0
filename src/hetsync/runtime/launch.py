"""``hetsync run`` and ``hetsync launch``: the runtime on one machine.

It starts the N+1 ranks itself, each as torchrun would (``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT`` at ``--host:port``, loopback
by default; each rank its own single-process node, as before: ``LOCAL_RANK``
0), all running ``-m hetsync.runtime --config OUT/run-config.json``
(:func:`launch_run`; :func:`launch` passes any runtime arguments) or the
user's script. Rank 0 hosts the rendezvous store, listening on that address
only (:func:`hetsync.runtime.process._form_group`).

Why not torchrun's agent: torchelastic's agent stops all of its local
processes as soon as one fails, so with a single agent one dead worker would
end the whole run; an agent per rank (what this launcher used to start) costs
each rank a second interpreter importing torch before its own starts — most
of the start-up on a small machine. Started directly, a dead worker takes
only itself down, and the server carries on with the others. This module
imports no torch; the ranks are forked by one interpreter that imports it
once for them all, kept for this process's next launches
(:func:`hetsync.runtime.zygote.kept_zygote`; ``HETSYNC_FORK=0``: each rank a
fresh interpreter). (On several machines the usual
torchrun command line works: see the README. Plain DDP, :func:`launch_module`,
still runs under one torchrun agent.)

Nothing started here outlives ``launch`` but the zygote, which ends with
this process: each rank runs in its own session,
recorded as it starts and, at the end, signalled by process group — SIGTERM
(with SIGCONT, for a stopped process), then SIGKILL — also when the launcher
fails or is interrupted. Should the launcher itself be killed, the kernel
kills the ranks (``PR_SET_PDEATHSIG``, set by each rank as it joins:
:func:`hetsync.runtime.agent.die_with_parent`).

Start-up is bounded: a rank that dies before the process group has formed
stops the run at once, and one that hangs stops it after
``--startup-timeout-s`` (the ranks time out themselves; the launcher keeps
its own, longer, bound too). Either way the launcher returns 1 and
``exit-status.json`` holds a one-line reason naming the rank and its log.

Each rank's output goes to ``OUT/logs/rank-<i>.log``; the exit status is the
server's. A script's run (``hetsync launch``) also fails (1) when one of its
workers did — raised, ended without ``sync.finish()``, was killed, or went
silent — even though the run went on without it: ``exit-status.json`` then
holds one line per such worker, its own last word (the line
:data:`WORKER_FAILED` that :mod:`hetsync.loop_checks` printed) or how its
process ended, and the summary keeps the run's results. A worker started
again (``--max-worker-restarts``: :class:`Rejoins`) is judged by its last
life. A script's job started with ``--nproc-max`` writes its rendezvous to
``OUT/rendezvous.json`` while it runs, from which ``hetsync launch --join
OUT`` (:func:`join`) starts one more worker into it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from hetsync.errors import BadInput
from hetsync.outdir import write_json_atomic
from hetsync.runtime.config import (  # (none of them imports torch)
    CONFIG_NAME,
    DEFAULT_STARTUP_TIMEOUT_S,
    EXIT_STATUS,
    MAX_WORKER_RESTARTS_ENV,
    NPROC_MAX_ENV,
    OWN_STORE_ENV,
    PARENT_PID_ENV,
    RDZV_BACKEND,
    REJOIN_ENV,
    STARTED_FILE_ENV,
    STARTUP_EXPIRED,
    STORE_FD_ENV,
    RunConfig,
    absences_of,
)
from hetsync.runtime.zygote import FORK_ENV, PRELOAD, SCRIPT_PRELOAD, Forked, ZygoteFailed, kept_zygote
from hetsync.summary import finished_runs

LOOPBACK = "127.0.0.1"
OUT_ENV = "HETSYNC_OUT"  # the output folder, for a launched script (hetsync.loop's default)
EXIT_GRACE_S = 3.0  # after the server's last act: how long the other ranks' processes get to leave
TERM_GRACE_S = 10.0  # between SIGTERM and SIGKILL (rank 0 checkpoints at SIGTERM; the others just end)
STARTUP_SLACK_S = 60.0  # the launcher's own start-up bound: the ranks' two waits (rendezvous, group) and this
POLL_S = 0.2
# a worker of a launched script says how it failed in this line of its log (hetsync.loop_checks)
WORKER_FAILED = "hetsync: worker {worker} (rank {rank}) failed: {error}"
_WORKER_FAILED = re.compile(r"hetsync: worker \d+ \(rank \d+\) failed: (.*)")
LOOP_ENDED = "its training loop ended"  # the server's reason for a worker that left well (runtime.server)
SERVER_DIED = "rank 0 (the server)"  # how the launcher's reason begins when the server died (with_restarts)
# hetsync launch --nproc-max: where the running job's rendezvous is, for `hetsync launch --join OUT`
# (written in OUT as the ranks start, removed when the launcher ends)
JOB_FILE = "rendezvous.json"
CAME_BACK = "hetsync: the launcher starts worker {worker} again (life {life})"  # in the worker's log


@dataclass(frozen=True)
class Rejoins:
    """Which dead workers ``hetsync run`` starts again (they come back on a
    session of their own: :mod:`hetsync.runtime.session`): a worker the
    scenario's ``membership`` has leave, at the run second it joins again
    (``joins_s[w]``: one per absence, in order; None: it stays away), and
    any other worker whose process died, at once, ``max_worker_restarts``
    times in all at most."""

    joins_s: dict[int, tuple[float | None, ...]] = field(default_factory=dict)
    max_worker_restarts: int = 0

    @classmethod
    def of(cls, config: RunConfig, nproc: int) -> Rejoins | None:
        """The run's (None: no worker comes back)."""
        absences = config.load_scenario().with_workers(nproc).cluster.membership
        joins = {w: tuple(a.join_s for a in absences_of(absences, w)) for w in {a.worker for a in absences}}
        restarts = config.process.max_worker_restarts
        if not restarts and not any(t is not None for times in joins.values() for t in times):
            return None
        return cls(joins, restarts)


@dataclass
class _Restarter:
    """The launcher's side of :class:`Rejoins` while a run goes on: when each
    dead worker comes back, and how many lives each has had."""

    plan: Rejoins
    start: Callable[[int, int], _Agent]  # (rank, life) -> the process started
    lives: dict[int, int] = field(default_factory=dict)  # rank: its current life (0: the first)
    due: dict[int, float] = field(default_factory=dict)  # rank: when (monotonic) it starts again
    done: set[int] = field(default_factory=set)  # the pids of the processes whose end is handled
    used: int = 0  # restarts given under max_worker_restarts

    def look(self, current: dict[int, _Agent], formed_at: float, now: float) -> list[_Agent]:
        """Schedule the workers that died, start those due; returns the new processes."""
        for rank, a in current.items():
            if a.proc.poll() is None or a.proc.pid in self.done or a.proc.returncode == 0:
                continue
            self.done.add(a.proc.pid)
            life = self.lives.get(rank, 0)
            joins = self.plan.joins_s.get(rank - 1, ())
            if life < len(joins):  # it left as the scenario says: back at its join time, if it has one
                join_s = joins[life]
                if join_s is not None:
                    self.due[rank] = formed_at + join_s
            elif self.used < self.plan.max_worker_restarts:
                self.used += 1
                self.due[rank] = now
        started = []
        for rank, at in sorted(self.due.items()):
            if now >= at:
                del self.due[rank]
                self.lives[rank] = self.lives.get(rank, 0) + 1
                a = self.start(rank, self.lives[rank])
                print(f"hetsync: started {now - formed_at:.2f} s after the group formed", file=a.log, flush=True)
                started.append(a)
        return started


def free_port(host: str = LOOPBACK) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def agent_command(
    rank: int,
    world: int,
    host: str,
    port: int,
    runtime_args: Sequence[str],
    *,
    startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S,
    nproc_per_node: int = 1,
    module: str = "hetsync.runtime",
    script: str | None = None,
) -> list[str]:
    """The agent's command line; it runs ``-m module`` (or ``script``, a
    Python file: ``hetsync launch``) with ``runtime_args``."""
    endpoint = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    program = [script] if script is not None else ["-m", module]
    return [
        sys.executable,
        "-m",
        "hetsync.runtime.agent",
        f"--nnodes={world}",
        f"--nproc-per-node={nproc_per_node}",
        f"--rdzv-backend={RDZV_BACKEND}",
        f"--rdzv-endpoint={endpoint}",
        "--rdzv-id=hetsync",
        f"--rdzv-conf=rank={rank},timeout={math.ceil(startup_timeout_s)}",
        "--max-restarts=0",
        "--monitor-interval=0.2",
        *program,
        *runtime_args,
    ]


def rank_command(runtime_args: Sequence[str], *, script: str | None = None) -> list[str]:
    """A rank's command line: ``-m hetsync.runtime`` (or ``script``, a Python
    file: ``hetsync launch``) with ``runtime_args``, unbuffered as torchrun runs it."""
    program = [script] if script is not None else ["-m", "hetsync.runtime"]
    return [sys.executable, "-u", *program, *runtime_args]


def rank_environment(rank: int, world: int, host: str, port: int) -> dict[str, str]:
    """What torchrun's agent gave rank ``rank`` of ``world``, each rank its own
    single-process node, with the rendezvous store at ``host:port`` (rank 0
    hosts it: :data:`STORE_FD_ENV`)."""
    return {
        "RANK": str(rank),
        "WORLD_SIZE": str(world),
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "GROUP_RANK": str(rank),
        "GROUP_WORLD_SIZE": str(world),
        "ROLE_NAME": "default",
        "ROLE_RANK": str(rank),
        "ROLE_WORLD_SIZE": str(world),
        "MASTER_ADDR": host,
        "MASTER_PORT": str(port),
        OWN_STORE_ENV: "1",
    }


def launch_ddp(nproc: int, ddp_args: Sequence[str], out_dir: Path, *, host: str = LOOPBACK) -> int:
    """Plain DDP (``hetsync.runtime.ddp``) under one torchrun agent with ``nproc`` processes."""
    out_dir.mkdir(parents=True, exist_ok=True)
    return launch_module(
        "hetsync.runtime.ddp", nproc, [*ddp_args, "--out", str(out_dir)], out_dir / "ddp.log", host=host
    )


def launch_module(
    module: str,
    nproc: int,
    args: Sequence[str],
    log_path: Path,
    *,
    host: str = LOOPBACK,
    limit_s: float | None = None,
) -> int:
    """``python -m module args`` on ``nproc`` local processes (forked by a
    zygote: :func:`_launch_forked`; plain DDP, and everything with
    ``HETSYNC_FORK=0``, under one torchrun agent), loopback rendezvous,
    output to ``log_path``; returns the exit status. Everything it started is stopped when it returns,
    fails, is interrupted or runs past ``limit_s`` (TimeoutError)."""
    if os.environ.get(FORK_ENV, "1") != "0" and module != "hetsync.runtime.ddp":  # (DDP runs as its users run it)
        return _launch_forked(module, nproc, args, log_path, host=host, limit_s=limit_s)
    cmd = agent_command(0, 1, host, free_port(host), list(args), nproc_per_node=nproc, module=module)
    with log_path.open("w") as log:
        agent = _Agent(0, _spawn(cmd, log, _environment(host)), log)
        t0 = time.monotonic()
        try:
            while agent.proc.poll() is None:
                _find_children([agent])
                if limit_s is not None and time.monotonic() - t0 > limit_s:
                    raise TimeoutError(f"{module} did not finish within {limit_s:.0f} s; see {log_path}")
                time.sleep(POLL_S)
            return agent.proc.returncode
        finally:
            _stop([agent])


def _launch_forked(
    module: str, nproc: int, args: Sequence[str], log_path: Path, *, host: str, limit_s: float | None
) -> int:
    """:func:`launch_module`'s job without torchrun's agent: ``nproc`` ranks
    forked by a zygote (:mod:`hetsync.runtime.zygote`), rank 0 hosting the
    store as ``init_process_group``'s ``env://`` does, all writing to
    ``log_path``; the first rank to fail ends the job with its status."""
    env = _environment(host)
    port = free_port(host)
    agents: list[_Agent] = []
    log = log_path.open("w")
    zygote = kept_zygote(env, log_path.with_name(log_path.name + ".zygote"), label=str(log_path.parent.resolve()))
    t0 = time.monotonic()
    try:
        for rank in range(nproc):
            rank_env = {**env, **rank_environment(rank, nproc, host, port)}
            del rank_env[OWN_STORE_ENV]  # (plain env://: rank 0 binds the port itself)
            proc = zygote.fork(args, log_path, rank_env, module=module, timeout_s=limit_s or 600.0)
            agents.append(_Agent(rank, proc, log, agent=False))
        while True:
            codes = [a.proc.poll() for a in agents]
            failed = [c for c in codes if c not in (None, 0)]
            if failed or all(c == 0 for c in codes):
                return failed[0] if failed else 0
            if limit_s is not None and time.monotonic() - t0 > limit_s:
                raise TimeoutError(f"{module} did not finish within {limit_s:.0f} s; see {log_path}")
            time.sleep(POLL_S)
    finally:
        _stop(agents)
        zygote.close()
        log.close()


def launch_run(
    config: RunConfig,
    nproc: int,
    *,
    host: str = LOOPBACK,
    on_progress=None,  # type: ignore[no-untyped-def]
    timeout_s: float | None = None,
    on_restart: Callable[[int, str], None] | None = None,
) -> int:
    """``hetsync run``: ``nproc`` workers and a server, every rank given the
    run config, written to ``OUT/run-config.json``; returns as :func:`launch`.

    If the server dies (killed, crashed: not a refusal, not a failure it
    reported), the job is started again with ``--resume`` from the
    checkpoints, up to ``config.process.max_restarts`` times (torchrun's
    restart policy: every rank again; ``on_restart(attempt, reason)`` is
    told first, the attempt's ``logs/`` kept as ``logs-attempt-K``); the
    summary's runs that went on from a checkpoint list the ``restarts``. Without
    restarts left, the runs the server did not finish get a summary built
    from their traces (:func:`hetsync.salvage.salvage`), marked interrupted."""
    out = config.process.out
    out.mkdir(parents=True, exist_ok=True)

    def attempt(k: int) -> int:
        resumed = (
            config if k == 0 else dataclasses.replace(config, process=dataclasses.replace(config.process, resume=True))
        )
        path = resumed.write(out / CONFIG_NAME)
        return launch(
            nproc,
            ["--config", str(path)],
            out,
            host=host,
            on_progress=on_progress,
            timeout_s=timeout_s,
            startup_timeout_s=config.process.startup_timeout_s,
            servers=config.process.servers,
            rejoins=Rejoins.of(config, nproc),
        )

    return with_restarts(attempt, out, config.process.max_restarts, on_restart)


def with_restarts(
    attempt: Callable[[int], int], out: Path, max_restarts: int, on_restart: Callable[[int, str], None] | None = None
) -> int:
    """``attempt(0)``, then ``attempt(k)`` again (k = 1, 2, …: it resumes
    from the checkpoints) each time the server died, ``max_restarts`` times
    at most; each earlier attempt's ``logs/`` kept as ``logs-attempt-K``, and
    ``on_restart(k, reason)`` told. Returns the last attempt's status; the
    runs of ``out/summary.json`` that went on from a checkpoint list the
    ``restarts``. If the server died with no restart left, the runs it had
    not finished get a summary from their traces (:func:`hetsync.salvage.salvage`)."""
    from hetsync import salvage

    restarts: list[dict[str, object]] = []
    t0 = time.monotonic()
    while True:
        code = attempt(len(restarts))
        reason = launcher_reason(out) if code != 0 else None
        if reason is None or not reason.startswith(SERVER_DIED):
            break
        if len(restarts) >= max_restarts:
            salvage.salvage(out)
            break
        kept = out / f"logs-attempt-{len(restarts)}"  # this attempt's logs stay (the next one writes logs/ anew)
        shutil.rmtree(kept, ignore_errors=True)
        (out / "logs").rename(kept)
        reason = reason.replace(str(out / "logs"), str(kept))
        restarts.append({"after_s": round(time.monotonic() - t0, 3), "reason": reason})
        if on_restart is not None:
            on_restart(len(restarts), reason)
    if restarts and code == 0:
        _record_restarts(out / "summary.json", restarts)
    return code


def _record_restarts(summary_path: Path, restarts: list[dict[str, object]]) -> None:
    """Each run that went on from its checkpoint lists the job's restarts
    (one run across them); one that started after them does not."""
    from hetsync.outdir import write_json_atomic
    from hetsync.summary import read_summary

    try:
        runs = [dict(run) for run in read_summary(summary_path)]
    except BadInput:  # (missing, or not a summary of hetsync's: not ours to rewrite)
        return
    for run in runs:
        if run.get("resumed_from") is not None:
            run["restarts"] = restarts
    write_json_atomic(summary_path, runs)


def launch(
    nproc: int,
    runtime_args: Sequence[str],
    out_dir: Path,
    *,
    host: str = LOOPBACK,
    on_progress=None,  # type: ignore[no-untyped-def]
    timeout_s: float | None = None,
    script: str | None = None,
    env: dict[str, str] | None = None,
    startup_timeout_s: float | None = None,
    cwd: str | Path | None = None,
    servers: int = 1,
    rejoins: Rejoins | None = None,
    nproc_max: int | None = None,
) -> int:
    """Run ``nproc`` workers and ``servers`` servers (rank 0, and ranks
    ``nproc`` + 1 … holding the model's other shards: :mod:`hetsync.runtime.shards`); returns the server's exit status
    (1, with the reason in ``exit-status.json``, if the server died or the
    processes did not start, or — with ``script`` — a worker failed: one line
    each there, see :func:`_failed_workers`). ``script``: every rank runs this Python file
    with ``runtime_args`` (a training loop using :mod:`hetsync.loop`, whose
    default output folder is then ``out_dir``) instead of ``-m hetsync.runtime``.
    ``env``: extra environment variables for every rank. ``startup_timeout_s``:
    the ranks' start-up bound (default: ``--startup-timeout-s`` among ``runtime_args``). ``cwd``: the ranks'
    working folder (default: this process's; ``out_dir`` should then be absolute). ``rejoins``:
    which dead workers are started again, and when (:class:`Rejoins`). ``nproc_max`` (a
    script): the run has that many workers, the last ``nproc_max - nproc`` absent at the start;
    each may join while it runs (:func:`join`, which reads ``OUT/rendezvous.json``)."""
    if nproc < 1:
        raise BadInput(f"--nproc must be >= 1 (workers; the server is one more process), got {nproc}")
    startup_s = startup_timeout_s if startup_timeout_s is not None else _startup_timeout_s(runtime_args)
    out_dir.mkdir(parents=True, exist_ok=True)
    logs = out_dir / "logs"
    logs.mkdir(exist_ok=True)
    (out_dir / "progress.json").unlink(missing_ok=True)
    (out_dir / EXIT_STATUS).unlink(missing_ok=True)
    started = logs / ".started"  # rank 0 creates it once the process group has formed
    started.unlink(missing_ok=True)
    world = nproc + servers
    env = {**_environment(host), **(env or {})}
    env[STARTED_FILE_ENV] = str(started)
    env[OUT_ENV] = str(out_dir)
    if script is not None and rejoins is not None:  # (hetsync.init's server watches for them)
        env[MAX_WORKER_RESTARTS_ENV] = str(rejoins.max_worker_restarts)
    if nproc_max is not None:
        if script is None or nproc_max < nproc:
            raise BadInput(f"--nproc-max {nproc_max} needs a script and --nproc {nproc} or fewer workers to start")
        env[NPROC_MAX_ENV] = str(nproc_max)
    # the rendezvous store's socket, listening from now on: a worker that starts before rank 0 does
    # waits in its backlog rather than retrying (torch's client backs off up to a second between tries)
    store = socket.create_server((host, 0), family=socket.AF_INET6 if ":" in host else socket.AF_INET)
    port = int(store.getsockname()[1])
    job_file = out_dir / JOB_FILE
    job_file.unlink(missing_ok=True)
    if nproc_max is not None and nproc_max > nproc:  # for `hetsync launch --join OUT`
        for claim in logs.glob(".worker-*.joined"):
            claim.unlink()
        job = {"host": host, "port": port, "world": world, "nproc": nproc, "nproc_max": nproc_max}
        command = {"script": str(Path(str(script)).resolve()), "args": list(runtime_args)}
        write_json_atomic(job_file, {**job, **command, "launcher_pid": os.getpid(), "out": str(out_dir.resolve())})
    agents: list[_Agent] = []
    zygote = None
    if env.get(FORK_ENV, "1") != "0":  # one interpreter imports torch and forks the ranks
        zygote = kept_zygote(
            env,
            logs / "zygote.log",
            cwd=cwd,
            label=str(out_dir.resolve()),
            preload=PRELOAD if script is None else SCRIPT_PRELOAD,
        )
    forking = zygote is not None

    def start(rank: int, life: int = 0) -> _Agent:
        """Start rank ``rank`` (``life`` > 0: a worker started again, which comes back on a session)."""
        nonlocal forking
        log_path = logs / f"rank-{rank}.log"
        log = log_path.open("a" if life else "w")
        rank_env = {**env, **rank_environment(rank, world, host, port)}
        fds: tuple[int, ...] = ()
        if rank == 0:  # it hosts the store on this socket, which it inherits
            fds = (store.fileno(),)
            rank_env[STORE_FD_ENV] = str(fds[0])
        if life:
            rank_env[REJOIN_ENV] = str(life)
            print(CAME_BACK.format(worker=rank - 1, life=life), file=log, flush=True)
        proc: subprocess.Popen[bytes] | Forked | None = None
        if forking:
            assert zygote is not None
            try:
                proc = zygote.fork(
                    runtime_args,
                    log_path,
                    rank_env,
                    script=script,
                    cwd=cwd,
                    keep_fd=fds[0] if fds else None,
                    timeout_s=startup_s,
                )
            except ZygoteFailed as e:
                print(f"hetsync: {e}; starting the ranks as fresh interpreters", file=log, flush=True)
                forking = False
        if proc is None:
            proc = _spawn(rank_command(runtime_args, script=script), log, rank_env, pass_fds=fds, cwd=cwd)
        store.close()  # (rank 0 holds it now: the port closes when rank 0 ends)
        return _Agent(rank, proc, log, agent=False)

    try:
        for rank in range(world):
            agents.append(start(rank))
        startup_limit_s = 2 * startup_s + STARTUP_SLACK_S
        restarter = _Restarter(rejoins, start) if rejoins is not None else None
        return _supervise(
            agents,
            out_dir,
            started,
            startup_limit_s,
            timeout_s,
            on_progress,
            judge_workers=script is not None,
            restarter=restarter,
        )
    finally:
        job_file.unlink(missing_ok=True)  # (no worker joins a job that is over)
        store.close()
        _stop(agents)
        if zygote is not None:
            zygote.close()
        started.unlink(missing_ok=True)


def join(
    out_dir: Path,
    runtime_args: Sequence[str],
    *,
    script: str,
    cwd: str | Path | None = None,
    timeout_s: float | None = None,
    on_start: Callable[[int, Path], None] | None = None,
) -> int:
    """``hetsync launch --join OUT``: one more worker of ``script`` into the
    job running in ``out_dir`` (started with ``--nproc-max``), on this
    machine. It takes the first worker index not yet taken (each its own
    file, created exclusively: two joins at once get two workers), runs as
    that worker's rank with the job's rendezvous (``OUT/rendezvous.json``)
    and comes in on a session of its own, as a worker started again does
    (``HETSYNC_REJOIN=1``; :mod:`hetsync.runtime.session`). ``on_start(worker,
    log)`` is told once it is started. Returns its exit status: it ends
    when the run does (the server's ``EXIT``); should the job's launcher be
    gone first, it is given ``TERM_GRACE_S`` to leave, then stopped."""
    job = running_job(out_dir)
    args = job.get("args")
    ran = [str(job.get("script")), *(str(a) for a in (args if isinstance(args, list) else []))]
    if [str(Path(script).resolve()), *runtime_args] != ran:  # (its policy spec must be the server's)
        raise BadInput(
            f"--join {out_dir}: the job runs {shlex.join(ran)}; give the worker that same script and arguments"
        )
    worker = _claim_worker(out_dir, job)
    rank = worker + 1
    host, port = str(job["host"]), int(job["port"])
    env = {**_environment(host), **rank_environment(rank, int(job["world"]), host, port)}
    env[NPROC_MAX_ENV] = str(job["nproc_max"])
    env[REJOIN_ENV] = "1"  # (its first session)
    env[OUT_ENV] = str(out_dir)
    log_path = out_dir / "logs" / f"rank-{rank}.log"
    log = log_path.open("w")
    print(f"hetsync: worker {worker} joins the running job (--join)", file=log, flush=True)
    agent = _Agent(rank, _spawn(rank_command(runtime_args, script=script), log, env, cwd=cwd), log, agent=False)
    if on_start is not None:
        on_start(worker, log_path)
    t0 = time.monotonic()
    launcher = int(job["launcher_pid"])
    try:
        while agent.proc.poll() is None:
            if timeout_s is not None and time.monotonic() - t0 > timeout_s:
                raise TimeoutError(f"worker {worker} did not finish within {timeout_s:.0f} s; see {log_path}")
            if not _pid_alive(launcher):  # the job is over: its server is gone, and the worker hears it
                _await_exit([agent], TERM_GRACE_S)
                break
            time.sleep(POLL_S)
        code = agent.proc.poll()
        return code if code is not None else 1  # (still running after the job ended: it failed to leave)
    finally:
        _stop([agent])


def running_job(out_dir: Path) -> dict[str, Any]:
    """The rendezvous of the job running in ``out_dir`` (``OUT/rendezvous.json``), checked."""
    path = out_dir / JOB_FILE
    try:
        job = json.loads(path.read_text())
        int(job["port"]), int(job["world"]), int(job["nproc_max"]), int(job["launcher_pid"]), str(job["host"])
    except OSError:
        raise BadInput(
            f"--join {out_dir}: no job is running there ({path} is missing: it exists while a `hetsync launch "
            "--nproc-max M` with --out there runs)"
        ) from None
    except (ValueError, KeyError, TypeError):
        raise BadInput(f"--join {out_dir}: {path} is not a job's rendezvous as hetsync launch writes it") from None
    if not _pid_alive(int(job["launcher_pid"])) or (out_dir / EXIT_STATUS).exists():
        raise BadInput(f"--join {out_dir}: the job there has ended (its launcher is gone or its run is over)")
    return dict(job)


def _claim_worker(out_dir: Path, job: dict[str, Any]) -> int:
    """The first worker index in [nproc, nproc_max) not yet taken, taken now
    (an exclusively created file per worker: two joins never take the same)."""
    nproc, nproc_max = int(job["nproc"]), int(job["nproc_max"])
    for w in range(nproc, nproc_max):
        try:
            os.close(os.open(out_dir / "logs" / f".worker-{w}.joined", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            continue
        return w
    raise BadInput(
        f"--join {out_dir}: the job has all its workers (--nproc-max {nproc_max}: workers {nproc}..{nproc_max - 1} "
        "joined already); start it with a larger --nproc-max"
    )


def _pid_alive(pid: int) -> bool:
    stat = proc_stat(pid)
    return stat is not None and stat[0] not in "ZX"


def _supervise(
    agents: list[_Agent],
    out_dir: Path,
    started: Path,
    startup_limit_s: float,
    timeout_s: float | None,
    on_progress,  # type: ignore[no-untyped-def]
    *,
    judge_workers: bool = False,
    restarter: _Restarter | None = None,
) -> int:
    """Wait for the server's exit status, or for a reason to stop without one.
    ``judge_workers`` (a user's script): a run whose worker failed fails too.
    ``restarter``: once the group has formed, it starts dead workers again
    (each new process joins ``agents``, so that it is stopped with the rest)."""
    status = out_dir / EXIT_STATUS
    t0 = time.monotonic()
    formed = False
    formed_at = 0.0
    current = {a.rank: a for a in agents[1:]}  # each worker's latest process
    while True:
        _find_children(agents)
        if status.exists():
            # the server's last act: give the others a moment to leave by
            # themselves (an agent whose worker died, or a stopped worker,
            # never does: torchelastic's exit barrier waits minutes for it)
            _await_exit(agents, EXIT_GRACE_S)
            code = _status_code(status)
            failed = _failed_workers(agents, out_dir) if judge_workers and code == 0 else []
            return _workers_failed(out_dir, failed) if failed else code
        if agents[0].proc.poll() is not None and not status.exists():
            return _failed(out_dir, f"{SERVER_DIED} {agents[0].ended(out_dir)} before the run finished")
        if formed and restarter is not None and not status.exists():
            for a in restarter.look(current, formed_at, time.monotonic()):
                agents.append(a)
                current[a.rank] = a
        if not formed:
            formed = started.exists()
            formed_at = time.monotonic()
            # a runtime that refused its input (exit 2) is not a fault: the
            # server refuses it too, and says why in its log; nor is a worker
            # that gave up waiting for the group while the server, whose own
            # start-up timer names the bound, can still say so
            server_waits = agents[0].proc.poll() is None and not agents[0].stopped()
            gone = [
                a
                for a in agents[1:]
                if a.proc.poll() is not None and a.exit_code(out_dir) != 2 and not (server_waits and a.gave_up(out_dir))
            ]
            if not formed and gone and not started.exists():  # (looked again: it may have formed meanwhile)
                a = gone[0]
                return _failed(
                    out_dir,
                    f"start-up failed: rank {a.rank} (worker {a.rank - 1}) {a.ended(out_dir)} "
                    "before the process group formed",
                    rank=a.rank,
                )
            if not formed and time.monotonic() - t0 > startup_limit_s:
                return _failed(out_dir, f"start-up did not finish within {startup_limit_s:.0f}s")
        if timeout_s is not None and time.monotonic() - t0 > timeout_s:
            _ask_for_stacks(agents)
            raise TimeoutError(
                f"the run did not finish within {timeout_s}s; see {out_dir / 'logs'} "
                "(every rank still running wrote its threads' stacks there)"
            )
        if on_progress is not None:
            _report_progress(out_dir / "progress.json", on_progress)
        time.sleep(POLL_S)


def _ask_for_stacks(agents: list[_Agent], settle_s: float = 1.0) -> None:
    """Every rank still running prints its threads' stacks to its log
    (:func:`hetsync.runtime.process.stacks_on_request`)."""
    pids = [
        pid for a in agents for pid in (a.children if a.agent else [a.proc.pid]) if a.agent or a.proc.poll() is None
    ]
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGUSR1)
    if pids:
        time.sleep(settle_s)


@dataclass
class _Agent:
    """A process the launcher started: one rank itself (``agent`` false), or
    a torchrun agent and the processes it started."""

    rank: int
    proc: subprocess.Popen[bytes] | Forked
    log: IO[str]
    children: dict[int, int] = field(default_factory=dict)  # pid: start time (a pid can be reused)
    agent: bool = True

    def __post_init__(self) -> None:
        stat = None if self.agent else proc_stat(self.proc.pid)
        if stat is not None:  # a rank is its own runtime process (not yet reaped: its pid is still its own)
            self.children[self.proc.pid] = stat[3]

    def exit_code(self, out_dir: Path) -> int | None:
        """The rank's runtime process's exit status (negative: the signal):
        a rank's own, else as torchelastic logs it, else the agent's own."""
        if not self.agent:
            return self.proc.returncode
        log = out_dir / "logs" / f"rank-{self.rank}.log"
        try:
            found = re.findall(r"failed \(exitcode: (-?\d+)\)", log.read_text(errors="replace"))
        except OSError:
            found = []
        return int(found[-1]) if found else self.proc.returncode

    def gave_up(self, out_dir: Path) -> bool:
        """Whether the rank's start-up timer ended it (the group did not form in time)."""
        try:
            return STARTUP_EXPIRED in (out_dir / "logs" / f"rank-{self.rank}.log").read_text(errors="replace")
        except OSError:
            return False

    def stopped(self) -> bool:
        """Whether the rank's runtime process is stopped (SIGSTOP): it will not say anything."""
        return any(
            (st := proc_stat(pid)) is not None and st[3] == start and st[0] in "Tt"
            for pid, start in self.children.items()
        )

    def ended(self, out_dir: Path) -> str:
        """How the rank's process ended, in words."""
        code = self.exit_code(out_dir)
        if code is not None and code < 0:
            try:
                return f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"was killed by signal {-code}"
        return f"exited with status {code}"


def _environment(host: str) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    if host.startswith("127.") or host in ("localhost", "::1"):
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # keep gloo's own sockets on loopback too
    env[PARENT_PID_ENV] = str(os.getpid())  # the agents die with this process
    return env


def _spawn(
    cmd: list[str], log: IO[str], env: dict[str, str], *, pass_fds: tuple[int, ...] = (), cwd: str | Path | None = None
) -> subprocess.Popen[bytes]:
    try:
        # a session of its own: a terminal's Ctrl-C reaches the launcher only, which stops the rest
        return subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True, pass_fds=pass_fds, cwd=cwd
        )
    except BaseException:
        log.close()
        raise


def _find_children(agents: list[_Agent]) -> None:
    """Record the processes each live agent started (its runtime process,
    in a session of its own) until one of them is seen alive."""
    waiting = {
        a.proc.pid: a
        for a in agents
        if a.proc.poll() is None and not any(_alive(pid, start) for pid, start in a.children.items())
    }
    if not waiting:
        return
    for entry in os.listdir("/proc"):
        stat = proc_stat(int(entry)) if entry.isdigit() else None
        if stat is not None and stat[1] in waiting:
            waiting[stat[1]].children[int(entry)] = stat[3]


def proc_stat(pid: int) -> tuple[str, int, int, int] | None:
    """A process's state letter, parent, process group and start time (in
    clock ticks since boot: with the pid, it names the process even after the
    pid is reused), from /proc; None if there is no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    return fields[0], int(fields[1]), int(fields[2]), int(fields[19])


def _alive(pid: int, start: int) -> bool:
    stat = proc_stat(pid)
    return stat is not None and stat[3] == start and stat[0] not in "ZX"


def _signal(pid: int, start: int, sig: signal.Signals) -> None:
    """Signal the process group of ``pid`` (its own, made by torchelastic), if ``pid`` is still that process."""
    stat = proc_stat(pid)
    if stat is None or stat[3] != start or stat[0] in "ZX":
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig) if stat[2] == pid else os.kill(pid, sig)


def _await_exit(agents: list[_Agent], limit_s: float) -> None:
    """Wait up to ``limit_s`` for every runtime process to have exited (or
    to be stopped, SIGSTOP: that one will not)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        states = [proc_stat(pid) for a in agents for pid in a.children]
        if all(st is None or st[0] in "ZXTt" for st in states):
            return
        time.sleep(0.05)


def _stop(agents: list[_Agent]) -> None:
    """Stop everything the agents started, then the agents; reap them."""
    runtimes = [(pid, start) for a in agents for pid, start in a.children.items()]
    if any(_alive(pid, start) for pid, start in runtimes):
        for pid, start in runtimes:
            _signal(pid, start, signal.SIGTERM)
            _signal(pid, start, signal.SIGCONT)  # a stopped process acts on SIGTERM only once continued
        deadline = time.monotonic() + TERM_GRACE_S
        while time.monotonic() < deadline and any(_alive(pid, start) for pid, start in runtimes):
            time.sleep(0.05)
    # the agents hold nothing to save; on SIGTERM torchelastic would wait for its
    # process again, and one in its exit barrier does not act on it for seconds
    for a in agents:
        if a.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(a.proc.pid, signal.SIGKILL)
    for pid, start in runtimes:
        _signal(pid, start, signal.SIGKILL)
    for a in agents:
        with contextlib.suppress(subprocess.TimeoutExpired):  # SIGKILL was sent
            a.proc.wait(timeout=10)
        a.log.close()


def _startup_timeout_s(runtime_args: Sequence[str]) -> float:
    """``--startup-timeout-s`` among the runtime's arguments (or its default), checked here, before any process starts."""
    value: str | None = None
    for i, arg in enumerate(runtime_args):
        if arg == "--startup-timeout-s" and i + 1 < len(runtime_args):
            value = runtime_args[i + 1]
        elif arg.startswith("--startup-timeout-s="):
            value = arg.split("=", 1)[1]
    if value is None:
        return DEFAULT_STARTUP_TIMEOUT_S
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise BadInput(f"--startup-timeout-s must be a positive number of seconds, got {value!r}")
    return seconds


def _status_code(path: Path) -> int:
    for _ in range(10):  # the server may still be writing it
        try:
            return int(json.loads(path.read_text())["code"])
        except (OSError, ValueError, KeyError, TypeError):
            time.sleep(0.1)
    return 1


def _failed(out_dir: Path, reason: str, *, rank: int = 0) -> int:
    """Record why the run stopped without the server's own status; returns 1."""
    message = f"{reason}; see {out_dir / 'logs' / f'rank-{rank}.log'}"
    status = out_dir / EXIT_STATUS
    tmp = status.with_name(".exit-status.tmp")
    tmp.write_text(json.dumps({"code": 1, "error": message, "by": "launcher"}) + "\n")
    os.replace(tmp, status)
    return 1


def _failed_workers(agents: list[_Agent], out_dir: Path) -> list[dict[str, object]]:
    """The workers of a launched script that failed, each with what went
    wrong: the line it printed as it failed (an exception: its first line;
    no ``sync.finish()``), else how its process ended if that was not well
    (a signal, a status), else why the server counted it gone if that was
    not its loop's end (silent past ``worker_timeout_s``, connection lost).
    A worker the launcher started again (``--max-worker-restarts``) is
    judged by its last life: its process, its log since it was started
    again, and whether it left after it came back."""
    left = _left_early(out_dir)
    failed: list[dict[str, object]] = []
    latest = {a.rank: a for a in agents[1:]}  # (a process started again comes after the one it replaces)
    for a in latest.values():
        log = out_dir / "logs" / f"rank-{a.rank}.log"
        try:
            text = log.read_text(errors="replace")
        except OSError:
            text = ""
        again = text.rfind(CAME_BACK.split(" (life")[0].format(worker=a.rank - 1))
        said = _WORKER_FAILED.findall(text[max(again, 0) :])  # (its last life's)
        code = a.exit_code(out_dir)  # (None: still running, e.g. in torchelastic's exit barrier)
        error = said[0] if said else a.ended(out_dir) if code else left.get(a.rank - 1)
        if error is not None:
            failed.append({"worker": a.rank - 1, "rank": a.rank, "error": error.strip()})
    return failed


def _left_early(out_dir: Path) -> dict[int, str]:
    """Workers that left a run for another reason than their loop's end
    (``summary.json``), and did not join it again after (a worker started
    again, ``--max-worker-restarts``; one absent at the start, ``--nproc-max``)."""
    runs = finished_runs(out_dir / "summary.json")  # (none if it is missing or unreadable)
    early: dict[int, str] = {}
    for run in runs:
        if not isinstance(run, dict):
            continue
        joined: dict[int, float] = {}
        for came in run.get("workers_joined") or []:
            if isinstance(came, dict):
                w = int(came.get("worker", -1))
                joined[w] = max(joined.get(w, -math.inf), float(came.get("t", 0.0)))
        for gone in run.get("workers_left") or []:
            if not isinstance(gone, dict) or gone.get("reason") == LOOP_ENDED:
                continue
            w = int(gone.get("worker", -1))
            if float(gone.get("t", 0.0)) >= joined.get(w, -math.inf):
                early.setdefault(w, str(gone.get("reason")))
    return early


def _workers_failed(out_dir: Path, failed: list[dict[str, object]]) -> int:
    """Record that the run finished but some of its workers failed: one line
    per worker, naming it, its error and its log; returns 1."""
    logs = out_dir / "logs"
    lines = [WORKER_FAILED.format(**f).removeprefix("hetsync: ") + f"; see {logs}/rank-{f['rank']}.log" for f in failed]
    status = out_dir / EXIT_STATUS
    tmp = status.with_name(".exit-status.tmp")
    tmp.write_text(json.dumps({"code": 1, "error": "\n".join(lines), "by": "launcher", "workers": failed}) + "\n")
    os.replace(tmp, status)
    return 1


def _report_progress(path: Path, on_progress) -> None:  # type: ignore[no-untyped-def]
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    on_progress(state["label"], state["fraction"], str(state.get("status", "")))


def launcher_reason(out_dir: Path) -> str | None:
    """The launcher's one-line reason if it, not the server, ended the run
    (start-up failed, the server died), or its line per failed worker of a
    script's run that finished; None otherwise."""
    try:
        status = json.loads((out_dir / EXIT_STATUS).read_text())
    except (OSError, ValueError):
        return None
    if isinstance(status, dict) and status.get("by") == "launcher" and status.get("error"):
        return str(status["error"])
    return None


def server_log_tail(out_dir: Path, lines: int = 25) -> str:
    """The end of the server's own output (not torchelastic's report on it),
    then the launcher's reason if it stopped the run."""
    reason = launcher_reason(out_dir)
    try:
        text = (out_dir / "logs" / "rank-0.log").read_text(errors="replace").splitlines()
    except OSError:
        text = []
    for i, ln in enumerate(text):
        if re.search(r"failed \(exitcode: -?\d+\)", ln):  # torchelastic's traceback and report follow
            text = text[:i]
            break
    keep = [ln for ln in text if not ln.startswith(("W1", "I1", "E1", "[W"))]
    if reason:
        keep.append(reason)
    return "\n".join(keep[-lines:])
