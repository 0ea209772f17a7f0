"""One interpreter that imports torch once and forks every rank of a run.

Each rank of ``hetsync run`` and ``hetsync launch`` used to be a fresh
``python -u -m hetsync.runtime`` (or the user's script): N+1 interpreters
each importing torch, about 2 s of CPU apiece — most of a short run's start-up
on a machine with fewer cores than ranks, and about half the CPU time of this
project's test suite. The launcher now starts this module once per launch; it
imports torch, numpy and the runtime, then forks each rank on request (as
Android's zygote, or :mod:`multiprocessing`'s forkserver with modules
preloaded, do). Nothing here touches CUDA, forms a group or reads a rank's
variables before the fork, so a forked rank is what a fresh one was:

- its own session (``setsid``), stdin ``/dev/null``, stdout and stderr its
  log, unbuffered (``-u``); the environment, working folder, ``sys.argv`` and
  ``sys.path[0]`` that ``python -u -m MODULE`` or ``python -u SCRIPT`` would
  have had; numpy's global random state drawn afresh (a fresh process seeds
  it from the OS; Python's ``random`` reseeds itself after a fork);
- it ends as Python would: an uncaught exception prints its traceback and
  exits 1, ``sys.exit`` keeps its code, Ctrl-C ends it by SIGINT, threads
  that are not daemons are joined, ``atexit`` handlers run and files left
  open are flushed — but the interpreter is not torn down (:func:`_leave`);
- ``ps`` and ``top`` name it ``hetsync-rank-R`` (its command line is the
  zygote's);
- it dies with this process (``PR_SET_PDEATHSIG``, as each rank sets it
  with :data:`~hetsync.runtime.config.PARENT_PID_ENV` naming its parent),
  which dies with the launcher.

Unlike a fresh interpreter, the ranks share the zygote's string-hash seed.
``HETSYNC_FORK=0`` turns the zygote off (each rank a fresh interpreter, as
before).

The protocol, one JSON object a line: the launcher writes ``{"module"|"script",
"args", "env", "cwd", "log", "keep_fd"}`` on stdin; the zygote answers
``{"pid"}`` for each, and ``{"exited": pid, "code": c}`` when a rank ends
(``c`` as :attr:`subprocess.Popen.returncode`: negative, the signal). EOF on
stdin ends it. A descriptor the rank must inherit (``keep_fd``: rank 0's
store socket, at that number) comes beside its request over a Unix socket
(``SCM_RIGHTS``), so one zygote serves any number of launches. The
launcher's side is :class:`Zygote`.

**One zygote per launching process** (:func:`kept_zygote`): a process that
launches many runs — ``compare --runtime dist``, ``advise --verify``, the
benches, the test suite — forks all of them from the zygote its first launch
started (one per set of preloaded modules and environment), instead of
importing torch again for each (2.7 s of CPU with a user's script, 4.4 s with
the built-in workloads). It holds nothing a run leaves behind (a run's ranks
are its children only until they end), dies with that process, and is
replaced if it died.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

FORK_ENV = "HETSYNC_FORK"  # "0": start each rank as a fresh interpreter
PRELOAD = (
    "torch",
    "torch.distributed",
    "torch._dynamo",  # (torch.optim.Optimizer imports it on first use: 1.6 s of CPU)
    "numpy",
    "hetsync.runtime.process",
    "hetsync.loop",
    "hetsync.runner",
    "hetsync.workloads",
    "sklearn.model_selection",  # (the built-in workloads split their data with it: 1.7 s of CPU)
)
SCRIPT_PRELOAD = PRELOAD[: PRELOAD.index("hetsync.runner")]
"""A user's script (``hetsync launch``): its loop needs neither the built-in
workloads nor their data split (a second of CPU per launch); a script that
imports them does so in each rank, as a fresh interpreter would."""
PRELOAD_ENV = "HETSYNC_ZYGOTE_PRELOAD"  # the modules to import, comma-separated (the launcher's choice)
FDS_ENV = "HETSYNC_ZYGOTE_FDS"  # the zygote's end of the Unix socket that brings descriptors (keep_fd)
POLL_S = 0.05
MAX_FD = 1 << 16
PR_SET_NAME = 15


def main() -> None:
    from hetsync.runtime.agent import die_with_parent

    die_with_parent()  # (the launcher's pid is in the environment)
    import importlib

    preload = os.environ.pop(PRELOAD_ENV, None)  # (not the ranks')
    fds = socket.socket(fileno=int(os.environ.pop(FDS_ENV))) if FDS_ENV in os.environ else None
    for name in preload.split(",") if preload else PRELOAD:
        importlib.import_module(name)
    requests = sys.stdin.buffer
    replies = sys.stdout.buffer
    pending = b""
    children: set[int] = set()
    zygote = os.getpid()
    while True:
        ready, _, _ = select.select([requests], [], [], POLL_S)
        if ready:
            chunk = os.read(requests.fileno(), 65536)
            if not chunk:
                os._exit(0)  # the launcher is done (or gone); (nothing to tear down)
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                if request.get("keep_fd") is not None:  # (it came beside the request: our own number for it)
                    assert fds is not None, "keep_fd without the descriptors' socket"
                    _, (request["fd"],), _, _ = socket.recv_fds(fds, 1, 1)
                pid = os.fork()
                if pid == 0:
                    try:
                        _become(request, zygote)  # the rank runs and exits from here
                    except BaseException:  # it could not become the rank: say why, in its log or the zygote's
                        import traceback

                        traceback.print_exc()
                    os._exit(1)
                children.add(pid)
                if request.get("keep_fd") is not None:
                    os.close(request["fd"])  # (rank 0's store socket: the rank holds it now)
                _reply(replies, {"pid": pid})
        for pid, code in _reaped(children):
            children.discard(pid)
            _reply(replies, {"exited": pid, "code": code})


def _reply(out, message: dict) -> None:  # type: ignore[no-untyped-def]
    out.write(json.dumps(message).encode() + b"\n")
    out.flush()


def _reaped(children: set[int]) -> list[tuple[int, int]]:
    """The children that have ended, with their codes as Popen gives them."""
    done = []
    for pid in list(children):
        got, status = os.waitpid(pid, os.WNOHANG)
        if got:
            done.append((pid, os.waitstatus_to_exitcode(status)))
    return done


def _become(request: dict, parent: int) -> NoReturn:
    """In the forked child of zygote ``parent``: turn into the rank
    ``request`` describes, run it and exit (:func:`_leave`)."""
    from hetsync.runtime.agent import die_with_parent

    die_with_parent(parent)  # whatever the program does (a rank of hetsync's asks again as it joins)
    # first: the log, the script and its arguments name paths from the launcher's folder, as a fresh
    # process started there reads them (a kept zygote started in another)
    os.chdir(request["cwd"])
    keep = request.get("keep_fd")  # rank 0's store socket, at the number the launcher gave it
    if keep is not None and request["fd"] != keep:
        os.dup2(request["fd"], keep)
        os.close(request["fd"])
    os.setsid()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    # every descriptor the zygote held goes, but the store socket
    if keep is None:
        os.closerange(3, MAX_FD)
    else:
        os.closerange(3, keep)
        os.closerange(keep + 1, MAX_FD)
    import io

    for name, fd in (("stdout", 1), ("stderr", 2)):
        stream = io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), write_through=True, errors="backslashreplace")
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)
    sys.stdin = sys.__stdin__ = open(0, closefd=False)  # noqa: SIM115 (the process's own stdin)
    from hetsync.runtime.config import PARENT_PID_ENV

    os.environ.clear()
    os.environ.update(request["env"])
    os.environ[PARENT_PID_ENV] = str(parent)  # this zygote: the rank dies with it
    _name(f"hetsync-rank-{os.environ.get('RANK', '?')}")
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    os._exit(_leave(_run(request)))


def _name(name: str) -> None:
    """This process's name in ``ps``, ``top`` and ``/proc/PID/comm`` (15
    bytes at most): a forked rank's command line is the zygote's."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0)


def _run(request: dict) -> int:
    """Run the rank's program as ``python -u`` would; its exit status."""
    import runpy

    try:
        if "script" in request:
            script = os.path.abspath(request["script"])
            sys.argv = [request["script"], *request["args"]]
            sys.path[0] = os.path.dirname(script)
            runpy.run_path(script, run_name="__main__")
        else:
            sys.argv = ["-m", *request["args"]]
            sys.path[0] = os.getcwd()
            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        sys.excepthook(*sys.exc_info())
        return -int(signal.SIGINT)
    except BaseException:
        sys.excepthook(*sys.exc_info())
        return 1
    return 0


def _leave(code: int) -> int:
    """What Python's exit does that a program relies on — join the threads
    that are not daemons, run the ``atexit`` handlers (``weakref.finalize``,
    multiprocessing's and the program's own), flush the files it left open —
    without tearing the interpreter down: with torch, dynamo and scikit-learn
    loaded that takes 1-2.5 s of CPU per rank (multiprocessing's forked
    children skip it too). Returns the exit status for ``os._exit``."""
    import atexit
    import gc
    import io
    import threading
    import warnings

    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None:
        shutdown()
    atexit._run_exitfuncs()
    with warnings.catch_warnings():  # (isinstance on a deprecated module attribute warns: not the program's)
        warnings.simplefilter("ignore")
        for obj in gc.get_objects():
            if isinstance(obj, io.BufferedWriter | io.BufferedRandom | io.TextIOWrapper):
                with contextlib.suppress(Exception):
                    if not obj.closed:
                        obj.flush()
    if code < 0:  # ended by a signal (Ctrl-C): end the same way
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code & 0xFF


class ZygoteFailed(RuntimeError):
    """The zygote did not answer; the launcher starts the ranks itself instead."""


class Zygote:
    """The launcher's side: start the zygote, have it fork ranks, learn how they ended."""

    def __init__(
        self,
        env: dict[str, str],
        log_path: Path,
        *,
        cwd: str | Path | None = None,
        label: str = "",
        preload: Sequence[str] = PRELOAD,
    ):
        """``label`` (the run's output folder) only shows in ``ps``, on its
        command line and its ranks'. ``preload``: the modules the zygote
        imports before it forks (:data:`PRELOAD`, or :data:`SCRIPT_PRELOAD`
        for a user's script)."""
        self._log = log_path.open("w")
        self._fds, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "hetsync.runtime.zygote", *([label] if label else [])],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._log,
                env={**env, PRELOAD_ENV: ",".join(preload), FDS_ENV: str(theirs.fileno())},
                start_new_session=True,
                pass_fds=(theirs.fileno(),),
                cwd=cwd,
            )
        finally:
            theirs.close()
        assert self.proc.stdout is not None
        os.set_blocking(self.proc.stdout.fileno(), False)
        self._pending = b""
        self._forked: list[int] = []
        self.codes: dict[int, int] = {}
        self._lock = threading.RLock()  # (one fork at a time: the replies come in the order of the requests)
        self.kept = False  # kept_zygote's: close() leaves it running for the next launch

    def fork(
        self,
        args: Sequence[str],
        log_path: Path,
        env: dict[str, str],
        *,
        module: str = "hetsync.runtime",
        script: str | None = None,
        cwd: str | Path | None = None,
        keep_fd: int | None = None,
        timeout_s: float,
    ) -> Forked:
        """A rank running ``module`` (or ``script``) with ``args``, output to ``log_path``."""
        with self._lock:  # (one fork at a time: the replies come in the order of the requests)
            request: dict[str, Any] = {"args": list(args), "env": env, "log": str(log_path), "keep_fd": keep_fd}
            # (a rank starts where a fresh process would: the launcher's folder now, not the zygote's)
            request["cwd"] = str(cwd) if cwd is not None else os.getcwd()
            request.update({"script": script} if script is not None else {"module": module})
            assert self.proc.stdin is not None and self.proc.stdout is not None
            try:
                self.proc.stdin.write(json.dumps(request).encode() + b"\n")
                self.proc.stdin.flush()
                if keep_fd is not None:
                    socket.send_fds(self._fds, [b"f"], [keep_fd])
            except OSError as e:
                raise ZygoteFailed(f"the zygote is gone ({e})") from e
            deadline = time.monotonic() + timeout_s
            while not self._forked:
                self._read()
                if self._forked:
                    break
                if self.proc.poll() is not None:
                    raise ZygoteFailed(f"the zygote exited with status {self.proc.returncode}")
                if time.monotonic() > deadline:
                    self.end()  # (a reply that came late would answer the next request)
                    raise ZygoteFailed(f"the zygote did not fork within {timeout_s:.0f} s")
                select.select([self.proc.stdout], [], [], POLL_S)
            return Forked(self, self._forked.pop(0))

    def returncode(self, pid: int) -> int | None:
        """How rank ``pid`` ended (as Popen.returncode), or None while it runs."""
        with self._lock:
            self._read()
            if pid not in self.codes and self.proc.poll() is not None:
                self._read()  # (its last words)
                if pid not in self.codes and not os.path.exists(f"/proc/{pid}"):
                    self.codes[pid] = -int(signal.SIGKILL)  # the zygote died, and its ranks with it
            return self.codes.get(pid)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        try:
            while chunk := os.read(self.proc.stdout.fileno(), 65536):
                self._pending += chunk
        except BlockingIOError:
            pass
        while b"\n" in self._pending:
            line, self._pending = self._pending.split(b"\n", 1)
            message = json.loads(line)
            if "exited" in message:
                self.codes[message["exited"]] = message["code"]
            else:
                self._forked.append(message["pid"])

    def close(self) -> None:
        """End the zygote (its ranks have been stopped by then), unless it is
        kept for the next launch (:func:`kept_zygote`)."""
        if not self.kept:
            self.end()

    def end(self) -> None:
        """End the zygote, kept or not."""
        assert self.proc.stdin is not None
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._fds.close()
        self._log.close()


# (a kept zygote is keyed by what it imported and the environment it imported it in; what is
# per launch — hetsync's own variables, the rendezvous, the parent, these — is not part of it:
# each rank gets its launch's whole environment. PYTEST_CURRENT_TEST names the running test:
# with it in the key, every test of a suite started a zygote of its own.)
_PER_LAUNCH = frozenset(
    {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "PYTEST_CURRENT_TEST"}
)
_kept: dict[tuple[Any, ...], Zygote] = {}
_kept_lock = threading.Lock()


def kept_zygote(
    env: dict[str, str],
    log_path: Path,
    *,
    cwd: str | Path | None = None,
    label: str = "",
    preload: Sequence[str] = PRELOAD,
) -> Zygote:
    """This process's zygote for ``preload`` in ``env`` (and ``cwd``):
    started by the first launch that asks (its log at ``log_path``, its
    ``label`` that launch's), reused by the next ones, started anew if it
    died. ``close()`` leaves it running; it ends with this process."""
    imports_env = tuple(sorted((k, v) for k, v in env.items() if not k.startswith("HETSYNC_") and k not in _PER_LAUNCH))
    key = (tuple(preload), imports_env, str(cwd) if cwd is not None else None)
    with _kept_lock:
        z = _kept.get(key)
        if z is None or z.proc.poll() is not None:
            if z is not None:
                z.end()
            z = _kept[key] = Zygote(env, log_path, cwd=cwd, label=label, preload=preload)
            z.kept = True
        return z


def kept_pids() -> set[int]:
    """The processes of this process's kept zygotes (they outlive each launch by design)."""
    return {z.proc.pid for z in _kept.values()}


@atexit.register
def _end_kept() -> None:
    for z in _kept.values():
        with contextlib.suppress(Exception):
            z.end()


class Forked:
    """A rank the zygote forked, with the part of :class:`subprocess.Popen` the launcher uses."""

    def __init__(self, zygote: Zygote, pid: int):
        self.zygote = zygote
        self.pid = pid

    @property
    def returncode(self) -> int | None:
        return self.zygote.returncode(self.pid)

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"rank {self.pid}", timeout or 0.0)
            time.sleep(POLL_S)
        return code


if __name__ == "__main__":
    main()
