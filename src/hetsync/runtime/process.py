"""One runtime process: rank 0 serves, the other ranks work.

``run_process`` is what ``torchrun ... -m hetsync.runtime`` runs on every
rank, and what your own script calls to train your own model under a
hetsync policy (see ``examples/torchrun_custom_model.py``)::

    workload = from_module("mine", model, train=(x, y), test=(xt, yt))
    run_process(scenario, workload, ["bsp", "ssp:s=2"], out="runs/mine")

It must run in a process started by torchrun (it reads ``RANK`` and
``WORLD_SIZE``). The world size fixes the worker count (world size − 1) and
the scenario's per-worker settings are cut to that many.

Rank 0 writes ``summary.json``, the traces and the final models; what is
made of them afterwards (plots, pages, the table) is the caller's:
``on_finished`` gets the summaries once every run has ended.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import fields
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from hetsync.errors import BadInput
from hetsync.outdir import begin, safe_name, write_json_atomic
from hetsync.runtime.config import DEFAULT_STARTUP_TIMEOUT_S as DEFAULT_STARTUP_TIMEOUT_S
from hetsync.runtime.config import (
    EXIT_ABSENT,
    OWN_STORE_ENV,
    REJOIN_ENV,
    STARTUP_EXPIRED,
    STORE_FD_ENV,
    absences_of,
    leave_s_of,
)
from hetsync.runtime.config import EXIT_STATUS as EXIT_STATUS  # written by the server as its last act
from hetsync.runtime.config import STARTED_FILE_ENV as STARTED_FILE_ENV  # rank 0 creates it once the group formed
from hetsync.runtime.config import ProcessOptions as ProcessOptions  # (its home is runtime.config)
from hetsync.runtime.session import rejoin_epoch
from hetsync.scenario import Scenario
from hetsync.workloads import Workload

# what rank 0 hands its caller once every run has ended: the runs' summaries
OnFinished = Callable[[list[dict[str, Any]]], None]


def run_process(
    scenario: Scenario,
    workload: Workload,
    specs: list[str],
    options: ProcessOptions | None = None,
    *,
    on_finished: OnFinished | None = None,
) -> int:
    """Serve (rank 0) or work (other ranks) until every policy has run;
    ``on_finished`` (rank 0): what to do with the runs' summaries then."""
    from hetsync.driver import policy_labels
    from hetsync.optim import warm_up
    from hetsync.runtime.agent import die_with_parent

    die_with_parent()  # under hetsync run: nothing outlives the launcher (or a torchrun agent)
    opts = options or ProcessOptions()
    torch.set_num_threads(1)  # many processes share the cores
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world < 1 + opts.servers:
        raise BadInput(
            f"the runtime needs at least {1 + opts.servers} processes ({opts.servers} server(s) and a worker): "
            "launch with hetsync run or torchrun"
        )
    workers = world - opts.servers
    scenario = scenario.with_workers(workers)
    policy_labels(scenario, specs, driver="dist")  # bad specs fail on every rank before any traffic
    if opts.servers > 1:  # (every rank: the same one-line refusal before any traffic)
        from hetsync.driver import policy_context
        from hetsync.policies import make_policy
        from hetsync.runtime.shards import check_servers

        policies = [make_policy(spec, policy_context(scenario)) for spec in specs]
        check_servers(opts.servers, scenario, policies, path=opts.path)
    opts.check_rejoin(scenario, specs)
    opts.check_device(scenario, specs)
    if 0 < rank <= workers and opts.device == "cuda":  # (before any NCCL group: it takes the current device)
        torch.cuda.set_device(worker_device(opts.device, rank - 1))
    warm_up()  # (before any run's clock starts)
    epoch = rejoin_epoch()
    if epoch is not None:  # a worker the launcher started again: a session of its own, not the world group
        if not 0 < rank <= workers:
            raise BadInput(f"{REJOIN_ENV} is for a worker's process, and this is rank {rank}")
        return _rejoin(rank - 1, epoch, scenario, workload, specs, opts)
    _form_group(rank, opts, settle=any(absent_at_start(scenario, w) for w in range(workers)))
    if 0 < rank <= workers and absent_at_start(scenario, rank - 1):
        _leave_the_group_at_once(rank, opts)
    if rank == 0:
        # never returns: os._exit
        _serve_and_report(scenario, workload, specs, opts, on_finished=on_finished, background_eval=True)
    if rank > workers:  # a sharded server: holds one range of the model
        from hetsync.runtime.shards import ShardServer, shard_ranges

        try:
            ShardServer(rank - workers, shard_ranges(workload.n_params, opts.servers), workers, scenario, specs).serve()
        finally:
            dist.destroy_process_group()
        return 0

    try:
        _worker(rank - 1, 0, scenario, workload, specs, opts).serve()
    finally:
        dist.destroy_process_group()
    return 0


def _worker(
    w: int, epoch: int, scenario: Scenario, workload: Workload, specs: list[str], opts: ProcessOptions, link: Any = None
) -> Any:
    """Worker ``w``'s process, in its ``epoch``-th life (0: started with the
    job; 1, 2, …: started again by the launcher, on ``link``). It dies as
    the fault options say (``kill_worker``, first life only) or where the
    scenario's ``membership`` has it leave."""
    from hetsync.runtime.worker import WorkerProcess

    kills = [opts.kill_at_s] if opts.kill_worker == w and epoch == 0 and opts.kill_at_s is not None else []
    leave_s = leave_s_of(scenario.cluster.membership, w, epoch)
    kill_at = min([*kills, *([leave_s] if leave_s is not None else [])], default=None)
    throttle, pace = opts.emulation(scenario)
    return WorkerProcess(
        w,
        scenario,
        workload,
        throttle=throttle,
        pace=pace,
        kill_at_s=kill_at,
        specs=specs,
        checkpoint_dir=opts.checkpoint_dir,
        checkpoint_every_s=opts.checkpoint_every_s,
        resume=opts.resume,
        servers=opts.servers,
        link=link,
        device=worker_device(opts.device, w),
    )


def worker_device(device: str, w: int) -> torch.device:
    """Where worker ``w`` computes: the CPU, or ``cuda:w % GPUs`` (workers
    share GPUs round robin on path ps; the collective path has one each:
    :func:`hetsync.runtime.config.device_refusal`)."""
    if device == "cpu":
        return torch.device("cpu")
    return torch.device("cuda", w % torch.cuda.device_count())


def absent_at_start(scenario: Scenario, w: int) -> bool:
    """Whether the scenario's ``membership`` has worker ``w`` start absent (it joins later)."""
    mine = absences_of(scenario.cluster.membership, w)
    return bool(mine) and mine[0].leave_s is None


def _leave_the_group_at_once(rank: int, opts: ProcessOptions) -> None:
    """A worker that starts absent: it was in the world group while it
    formed (every rank must be), and leaves it as soon as rank 0 says the
    group formed, with :data:`EXIT_ABSENT`; the launcher starts it again at
    its ``join_s``, on a session of its own."""
    started = os.environ.get(STARTED_FILE_ENV)
    deadline = time.monotonic() + opts.startup_timeout_s
    while started and not Path(started).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    print(f"hetsync: worker {rank - 1} starts absent (membership): it leaves the group", flush=True)
    sys.stdout.flush()
    os._exit(EXIT_ABSENT)


def _rejoin(w: int, epoch: int, scenario: Scenario, workload: Workload, specs: list[str], opts: ProcessOptions) -> int:
    """A restarted worker: it announces itself on rank 0's store, opens its
    session (:mod:`hetsync.runtime.session`) and serves the server's commands
    on it; it never enters the world group. Leaves with a one-line reason
    after ``startup_timeout_s`` if the server does not take it."""
    _worker(w, epoch, scenario, workload, specs, opts, come_back(w, epoch, opts)).serve()
    return 0


def stacks_on_request() -> None:
    """``kill -USR1`` on a rank prints every thread's stack to its log and
    lets it run on: how a hung run shows where it waits (the launcher asks
    for it before it gives up on a run past its time limit). Left alone when
    the program has a handler of its own."""
    if hasattr(signal, "SIGUSR1") and signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL:
        faulthandler.register(signal.SIGUSR1, all_threads=True)


def come_back(w: int, epoch: int, opts: ProcessOptions) -> Any:
    """Worker ``w``'s session with rank 0 (life ``epoch``; a user's loop too:
    :func:`hetsync.loop.init`), opened within ``startup_timeout_s`` or the
    process leaves with a one-line reason."""
    from hetsync.runtime.session import join_session

    stacks_on_request()
    timer = threading.Timer(opts.startup_timeout_s, _startup_expired, args=(w + 1, opts))
    timer.daemon = True
    timer.start()
    t0 = time.monotonic()
    link = join_session(w, epoch, opts.startup_timeout_s)
    timer.cancel()
    print(
        f"hetsync: worker {w} (life {epoch}): its session with rank 0 opened in {time.monotonic() - t0:.2f} s",
        flush=True,
    )
    return link


def _form_group(rank: int, opts: ProcessOptions, *, settle: bool = False) -> None:
    """Join the process group, or leave with a one-line reason after
    ``startup_timeout_s``. ``settle`` (a worker starts absent and leaves the
    group at once): every rank waits at a barrier until every other has
    formed it — rank 0's group forming is not another worker's, and a worker
    still connecting to the one that leaves failed with "Connection closed by
    peer" (seen under load in tests/runtime/test_rejoin.py).

    The group's timeout is a day, not the start-up's: gloo keeps it for every
    later receive, and a worker waits for its next command as long as the
    server takes (deaths are seen at once, as a connection reset, and silence
    by the server's watchdog). So start-up is bounded by a timer instead; it
    also covers a rank that dies while gloo connects.

    Under ``hetsync run`` and ``hetsync launch`` (no torchrun agent,
    :data:`OWN_STORE_ENV`) rank 0 hosts the rendezvous store on the socket
    the launcher bound to ``--host`` (:data:`STORE_FD_ENV`; torch's own
    store, given an address, listens on every interface), and the others
    connect to it."""
    stacks_on_request()
    timer = threading.Timer(opts.startup_timeout_s, _startup_expired, args=(rank, opts))
    timer.daemon = True
    timer.start()
    if os.environ.get(OWN_STORE_ENV):
        world = int(os.environ["WORLD_SIZE"])
        host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
        fd = int(os.environ[STORE_FD_ENV]) if rank == 0 else None
        # (the group's timeout, as env:// gives its store: the timer above bounds start-up)
        store = dist.TCPStore(
            host, port, world, rank == 0, timedelta(days=1), wait_for_workers=False, master_listen_fd=fd
        )
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timedelta(days=1))
    else:
        dist.init_process_group("gloo", timeout=timedelta(days=1))
    if settle:  # (every rank computes it from the same scenario: all or none take part)
        dist.barrier()
    if opts.path == "collective":  # (every rank, in the same order: new_group is collective)
        from hetsync.runtime.collective import form_workers_group

        # the workers' bulk bytes: NCCL between GPUs, gloo on the CPU (rank 0's control stays gloo)
        form_workers_group(
            dist.get_world_size() - (opts.servers - 1), backend="nccl" if opts.device == "cuda" else "gloo"
        )
    timer.cancel()
    started = os.environ.get(STARTED_FILE_ENV)
    if rank == 0 and started:
        Path(started).touch()


def _startup_expired(rank: int, opts: ProcessOptions) -> None:
    message = (
        f"start-up failed: {STARTUP_EXPIRED}={opts.startup_timeout_s:g} "
        "(a rank died or hangs while starting; see the other ranks' logs)"
    )
    print(f"hetsync.runtime: rank {rank}: {message}", file=sys.stderr, flush=True)
    if rank == 0:
        _write_status(opts.out, 1, message)
    os._exit(1)


def _write_status(out: Path, code: int, message: str) -> None:
    status_path = out / EXIT_STATUS
    status_path.parent.mkdir(parents=True, exist_ok=True)
    status_path.write_text(json.dumps({"code": code, "error": message}) + "\n")


def _serve_and_report(
    scenario: Scenario,
    workload: Workload,
    specs: list[str],
    opts: ProcessOptions,
    *,
    gradient_stepper: Any = None,
    progress_lines: bool | None = None,
    on_finished: OnFinished | None = None,
    background_eval: bool = False,
) -> None:
    """Serve, then leave ``exit-status.json`` as the very last act: a launcher
    stops waiting for the other ranks once it appears (a stopped worker never
    ends; under torchrun agents, torchelastic's exit barrier would wait for
    the agents of workers that died for minutes).

    ``gradient_stepper`` is :mod:`hetsync.loop`'s: the user's optimizer on
    the server; ``on_finished``: the caller's use of the summaries (its
    report), before the exit status. ``progress_lines``: print a progress
    line every few seconds (default: unless ``hetsync run`` shows its own
    progress bar). ``background_eval``: evaluate beside the server loop
    (:mod:`hetsync.runtime.evaluator`; a user's own ``evaluate`` on a copy of the module)."""
    status_path = opts.out / EXIT_STATUS
    status_path.unlink(missing_ok=True)
    if progress_lines is None:
        progress_lines = STARTED_FILE_ENV not in os.environ
    replacing = None
    try:
        if STARTED_FILE_ENV not in os.environ:  # plain torchrun: no hetsync command set the earlier results aside
            replacing = begin(opts.out, set_aside=not opts.resume)
        code = _serve(
            scenario,
            workload,
            specs,
            opts,
            gradient_stepper=gradient_stepper,
            progress_lines=progress_lines,
            on_finished=on_finished,
            background_eval=background_eval,
        )
        message = ""
    except BadInput as e:
        code, message = 2, str(e)
    except Exception as e:  # reported to the launcher, and in this rank's log
        traceback.print_exc()
        code, message = 1, f"{type(e).__name__}: {e}"
    if replacing is not None:
        line = replacing.finish(code == 0)
        if line:
            print(f"hetsync.runtime: {line}", file=sys.stderr, flush=True)
    _write_status(opts.out, code, message)
    sys.stdout.flush()
    sys.stderr.flush()
    # dead workers leave gloo pairs that would block a clean teardown
    os._exit(code)


def _serve(
    scenario: Scenario,
    workload: Workload,
    specs: list[str],
    opts: ProcessOptions,
    *,
    gradient_stepper: Any = None,
    progress_lines: bool = False,
    on_finished: OnFinished | None = None,
    background_eval: bool = False,
) -> int:
    from hetsync.driver import policy_labels
    from hetsync.runtime.server import RuntimeOptions, ServerProcess

    out = opts.out
    out.mkdir(parents=True, exist_ok=True)
    server = ServerProcess(
        scenario,
        workload,
        RuntimeOptions(
            **{f.name: getattr(opts, f.name) for f in fields(opts)},
            progress_lines=progress_lines,
            background_eval=background_eval,
        ),
        gradient_stepper=gradient_stepper,
    )
    runs = []
    try:
        for i, (spec, label) in enumerate(zip(specs, policy_labels(scenario, specs), strict=True)):
            name = safe_name(label)
            runs.append(server.run(spec, out / f"trace-{name}.jsonl", run_index=i))
            # the final global model, as the module's state_dict
            torch.save(workload.state_dict_with(server.last_model), out / f"model-{name}.pt")
            write_json_atomic(out / "summary.json", runs)
    finally:
        server.shutdown()
    if on_finished is not None:
        on_finished(runs)
    return 0
