"""``hetsync run``: the runtime on one machine, through PyTorch's launcher.

It starts ``python -m torch.distributed.run`` (torchrun) once per rank —
each rank its own single-process node, with static rendezvous at
``--host:port`` (loopback by default) — all running ``-m hetsync.runtime``.

Why one launcher agent per rank rather than one agent with N+1 local
processes: torchelastic's agent stops all of its local processes as soon as
one fails, so with a single agent one dead worker would end the whole run.
With an agent per rank a dead worker takes only its own agent down, and the
server carries on with the others. (On several machines the usual torchrun
command line works: see the README.)

Each rank's output goes to ``OUT/logs/rank-<i>.log``; the exit status is the
server's.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from hetsync.errors import BadInput
from hetsync.runtime.process import EXIT_STATUS  # written by the server as its last act

LOOPBACK = "127.0.0.1"
GRACE_S = 5.0


def free_port(host: str = LOOPBACK) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def agent_command(rank: int, world: int, host: str, port: int, runtime_args: Sequence[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nnodes={world}",
        f"--node-rank={rank}",
        "--nproc-per-node=1",
        f"--master-addr={host}",
        f"--master-port={port}",
        "--max-restarts=0",
        "--monitor-interval=0.2",
        "-m",
        "hetsync.runtime",
        *runtime_args,
    ]


def launch_ddp(nproc: int, ddp_args: Sequence[str], out_dir: Path, *, host: str = LOOPBACK) -> int:
    """Plain DDP (``hetsync.runtime.ddp``) under one torchrun agent with ``nproc`` processes."""
    out_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=1",
        f"--nproc-per-node={nproc}",
        f"--master-addr={host}",
        f"--master-port={free_port(host)}",
        "--max-restarts=0",
        "-m",
        "hetsync.runtime.ddp",
        *ddp_args,
        "--out",
        str(out_dir),
    ]
    with (out_dir / "ddp.log").open("w") as log:
        return subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env).returncode


def launch(
    nproc: int,
    runtime_args: Sequence[str],
    out_dir: Path,
    *,
    host: str = LOOPBACK,
    on_progress=None,  # type: ignore[no-untyped-def]
    timeout_s: float | None = None,
) -> int:
    """Run ``nproc`` workers and a server; returns the server's exit status."""
    if nproc < 1:
        raise BadInput(f"--nproc must be >= 1 (workers; the server is one more process), got {nproc}")
    out_dir.mkdir(parents=True, exist_ok=True)
    logs = out_dir / "logs"
    logs.mkdir(exist_ok=True)
    (out_dir / "progress.json").unlink(missing_ok=True)
    (out_dir / EXIT_STATUS).unlink(missing_ok=True)
    world = nproc + 1
    port = free_port(host)
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    if host.startswith("127.") or host == "localhost":
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # keep gloo's own sockets on loopback too
    procs = []
    for rank in range(world):
        log = (logs / f"rank-{rank}.log").open("w")
        cmd = agent_command(rank, world, host, port, runtime_args)
        procs.append((subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env), log))
    server = procs[0][0]
    status = out_dir / EXIT_STATUS
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        while server.poll() is None and not status.exists():
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"the run did not finish within {timeout_s}s; see {logs}")
            if on_progress is not None:
                _report_progress(out_dir / "progress.json", on_progress)
            time.sleep(0.2)
        # the agents leave by themselves when every rank finished; an agent
        # whose worker died never reaches torchelastic's exit barrier, so the
        # others are stopped after a grace period instead of waiting for it
        grace = time.monotonic() + GRACE_S
        while time.monotonic() < grace and any(p.poll() is None for p, _ in procs):
            time.sleep(0.1)
    finally:
        for p, log in procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            log.close()
    try:
        return int(json.loads(status.read_text())["code"])
    except (OSError, ValueError, KeyError):
        return server.returncode if server.returncode else 1


def _report_progress(path: Path, on_progress) -> None:  # type: ignore[no-untyped-def]
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    on_progress(state["label"], state["fraction"])


def server_log_tail(out_dir: Path, lines: int = 25) -> str:
    path = out_dir / "logs" / "rank-0.log"
    try:
        text = path.read_text().splitlines()
    except OSError:
        return ""
    keep = [ln for ln in text if not ln.startswith(("W1", "I1", "[W"))]
    return "\n".join(keep[-lines:])
