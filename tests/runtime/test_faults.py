"""Faults on real processes (issue 14, items 5-8): ranks killed (SIGKILL) or
stopped (SIGSTOP) at start-up and mid-run, the server killed, the launcher
interrupted or killed, and what listens while a run goes on.

``launch`` runs in a thread of this process, so every process it starts is
a descendant of this one. The test watches them from /proc while the run
goes on (pid and start time: a pid can be reused), finds the ranks by
their environment (``RANK``), kills or stops some, and afterwards checks
that nothing it saw — nor anything in their process groups — is left.

Each test asserts a bound on how long the launcher takes after the fault
(``AFTER_FAULT_S``) or, for a run that finishes, after the server's exit
status (``TEARDOWN_S``). Measured on an idle 2-core machine: 0.7-2 s after
a death at start-up or the server's death, 0.6-1.2 s of teardown after a
run that lost a worker (17-26 s before). The bounds are several times that,
for a loaded machine. Without the fixes these runs hang for minutes, take
15-26 s to tear down, or leave a stopped process behind; the whole file
takes about 90 s.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from hetsync.runtime.launch import launch, proc_stat, server_log_tail
from hetsync.runtime.process import EXIT_STATUS
from hetsync.runtime.zygote import kept_pids

pytestmark = pytest.mark.dist  # starts real processes: make test-fast leaves it out

T = 4.0  # seconds of training in the runs that finish
ARGS = ["--scenario", "hetero-4", "--policies", "bsp", "--set", f"max_time_s={T}", "--no-plots"]
HANG_S = 150.0  # the launcher's own timeout: a run that hangs fails the test, and is stopped
AFTER_FAULT_S = 15.0  # a run that cannot go on (start-up, server) stops within this long of the fault
TEARDOWN_S = 8.0  # a run that finished leaves within this long of the server's exit status


# ------------------------------------------------------------ processes
def _all_stats() -> dict[int, tuple[str, int, int, int]]:
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (st := proc_stat(int(entry))) is not None:
            found[int(entry)] = st
    return found


def _rank_of(pid: int) -> int | None:
    """The rank of a runtime process (not of a torchrun agent)."""
    try:
        name = Path(f"/proc/{pid}/comm").read_text().strip()
        if name.startswith("hetsync-rank-"):  # forked by the zygote (hetsync.runtime.zygote)
            return int(name.removeprefix("hetsync-rank-"))
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    if cmd[1:3] != [b"-u", b"-m"] or cmd[3] != b"hetsync.runtime":  # torchrun starts it as python -u -m ...
        return None
    for var in env:
        if var.startswith(b"RANK="):
            return int(var[5:])
    return None


class Watch:
    """The processes this test process started (its descendants), as seen from /proc."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.status = out / EXIT_STATUS
        self.seen: dict[int, tuple[int, int]] = {}  # pid: (start time, process group)
        self.ranks: dict[int, int] = {}  # rank: pid of its runtime process
        self.status_at: float | None = None
        self.status_missing_at = time.monotonic()  # the last look that found no exit status
        # what this test process had started before (e.g. multiprocessing's resource
        # tracker, left by an earlier test's process pool) is not this run's
        self.before = {(pid, st[3]) for pid, st in _all_stats().items() if st[1] == os.getpid()}

    def look(self) -> None:
        stats = _all_stats()
        # (a zygote this process kept from an earlier test is in self.before, but what it forks now is this run's)
        mine = {os.getpid(), *kept_pids()}
        grew = True
        while grew:
            grew = False
            for pid, (_, ppid, pgrp, start) in stats.items():
                if ppid in mine and pid not in mine and (pid, start) not in self.before:
                    mine.add(pid)
                    grew = True
                    self.seen.setdefault(pid, (start, pgrp))
                    if pid not in self.ranks.values() and (rank := _rank_of(pid)) is not None:
                        self.ranks[rank] = pid  # once it runs the runtime (not yet right after the fork)
        if self.status_at is None:
            now = time.monotonic()
            if self.status.exists():
                self.status_at = now
            else:
                self.status_missing_at = now

    def started(self) -> bool:
        """The process group has formed and the first run is going (rank 0 reports progress)."""
        return (self.out / "progress.json").exists()

    def signal(self, sig: signal.Signals, *ranks: int) -> float:
        for rank in ranks:
            os.kill(self.ranks[rank], sig)
        return time.monotonic()

    def leftovers(self) -> list[str]:
        """Anything seen that still runs, or that runs in one of their process groups (but the
        zygote this process keeps for its next launch: hetsync.runtime.zygote.kept_zygote)."""
        kept = kept_pids()
        groups = {pgrp for pid, (_, pgrp) in self.seen.items() if pid not in kept} - {os.getpgrp()}
        left = []
        for pid, (state, _, pgrp, start) in _all_stats().items():
            if pid in kept:
                continue
            if state not in "ZX" and (self.seen.get(pid, (None,))[0] == start or pgrp in groups):
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes()[:120]
                except OSError:
                    continue
                left.append(f"{pid} ({state}) {cmd!r}")
        return left

    def kill_leftovers(self) -> None:
        kept = kept_pids()  # (the zygote serves the next test's launches: it is nobody's leftover)
        for pid, (start, _) in self.seen.items():
            st = proc_stat(pid)
            if pid in kept:
                continue
            if st is not None and st[3] == start:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def tail(self) -> str:
        return server_log_tail(self.out)


class Run(Watch):
    """One ``launch`` in a thread of this process, watched."""

    def __init__(self, out: Path, nproc: int, *extra: str, on_progress=None) -> None:  # type: ignore[no-untyped-def]
        super().__init__(out)
        self.code: int | None = None
        self.error: BaseException | None = None
        args = [*ARGS, *extra, "--out", str(out)]
        self.thread = threading.Thread(target=self._launch, args=(nproc, args, on_progress), daemon=True)
        self.thread.start()

    def _launch(self, nproc: int, args: list[str], on_progress) -> None:  # type: ignore[no-untyped-def]
        try:
            self.code = launch(nproc, args, self.out, timeout_s=HANG_S, on_progress=on_progress)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e
        self.ended_at = time.monotonic()

    def until(self, ready: Callable[[], bool], limit_s: float = 120.0) -> None:
        """Watch until ``ready()``; fails if the launcher ended first."""
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            self.look()
            if ready():
                return
            assert self.thread.is_alive(), f"the launcher ended early: {self.code} {self.error}\n{self.tail()}"
            time.sleep(0.05)
        pytest.fail(f"not ready within {limit_s}s\n{self.tail()}")

    def finish(self, *, raised: type[BaseException] | None = None) -> float:
        """Wait for the launcher; returns when it returned (or raised ``raised``)."""
        while self.thread.is_alive():
            self.look()
            self.thread.join(0.05)
        if self.status_at is None and self.status.exists():
            # (the launcher ended within a look of the server's exit status: its teardown took at most
            # the time since the last look that did not find the status)
            self.status_at = self.status_missing_at
        if raised is not None:
            assert isinstance(self.error, raised), self.error
        elif self.error is not None:
            raise AssertionError(f"the launcher failed: {self.error!r}\n{self.tail()}")
        return self.ended_at


@pytest.fixture
def run_in(tmp_path):
    runs: list[Run] = []

    def start(nproc: int, *extra: str, on_progress=None) -> Run:  # type: ignore[no-untyped-def]
        runs.append(Run(tmp_path / f"run{len(runs)}", nproc, *extra, on_progress=on_progress))
        return runs[-1]

    yield start
    for r in runs:  # a failed test must not leave its processes to the next
        r.kill_leftovers()


def _summary(run: Run) -> list[dict]:
    return json.loads((run.out / "summary.json").read_text())


def _error(run: Run) -> str:
    return json.loads(run.status.read_text())["error"]


# ------------------------------------------------------------------ tests
def test_a_worker_killed_at_start_up_stops_the_run_at_once(run_in):
    run = run_in(2)
    run.until(lambda: 2 in run.ranks)  # worker 1's process is starting: the group is not formed
    assert not (run.out / "logs" / ".started").exists()
    killed_at = run.signal(signal.SIGKILL, 2)
    ended_at = run.finish()
    assert run.code == 1, run.tail()
    assert ended_at - killed_at < AFTER_FAULT_S
    message = _error(run)
    assert "start-up" in message and "rank 2" in message and "rank-2.log" in message, message
    assert message in server_log_tail(run.out)  # what hetsync run shows
    assert run.leftovers() == []


@pytest.mark.slow
def test_a_worker_stopped_at_start_up_stops_the_run_after_the_start_up_timeout(run_in):
    run = run_in(2, "--startup-timeout-s", "5")
    run.until(lambda: 2 in run.ranks)
    stopped_at = run.signal(signal.SIGSTOP, 2)
    ended_at = run.finish()
    assert run.code == 1, run.tail()
    # the error names the 5-s bound that ended it; a hang would run to HANG_S. The margin is a
    # loaded machine's (37 s seen with a 10-s bound at a load average of 10 on 2 cores), not the behaviour's
    assert ended_at - stopped_at < 5 + 4 * AFTER_FAULT_S < HANG_S
    assert "startup_timeout_s=5" in _error(run)
    assert run.leftovers() == []  # the stopped process too


@pytest.mark.parametrize("path", ["ps", "collective"])  # collective: the survivor's all-reduce fails; on to ps
def test_a_worker_killed_mid_run(run_in, path):
    run = run_in(2, "--worker-timeout-s", "3", "--path", path)
    run.until(run.started)
    time.sleep(1.0)
    run.signal(signal.SIGKILL, 2)
    ended_at = run.finish()
    assert run.code == 0, run.tail()
    assert run.status_at is not None and ended_at - run.status_at < TEARDOWN_S
    bsp = _summary(run)[0]
    assert [x["worker"] for x in bsp["workers_left"]] == [1]
    assert bsp["stop_reason"] == "max_time"
    assert bsp["path"] == path and (bsp["path_fallback"] is not None) == (path == "collective")
    assert bsp["updates"] > bsp["path_fallback"]["version"] if path == "collective" else True  # it went on
    assert run.leftovers() == []


def test_after_a_death_on_the_collective_path_the_survivors_go_on_through_rank_0(run_in):
    """Found by ``hetsync bench faults``: with two survivors, each saw its all-reduce fail and left the
    collective path before rank 0's FETCH of their model came, answered it with no model, and rank 0's
    pulls waited for one until the run's end: no update after the death."""
    # (a killed worker's connection resets at once; the timeout is for silence, which a loaded machine can mimic)
    run = run_in(
        3, "--worker-timeout-s", "10", "--path", "collective", "--set", "max_time_s=8", "--set", "eval_every_s=0.5"
    )
    run.until(run.started)
    time.sleep(2.0)
    run.signal(signal.SIGKILL, 1)  # worker 0: rank 0 asks worker 1 for the model
    run.finish()
    assert run.code == 0, run.tail()
    bsp = _summary(run)[0]
    assert [x["worker"] for x in bsp["workers_left"]] == [0], bsp["workers_left"]  # the survivors never went silent
    fell_back_at = bsp["path_fallback"]["version"]
    steps = bsp["per_worker"]["steps"]
    assert bsp["updates"] > fell_back_at + 10 and min(steps[1:]) > steps[0] + 10, (bsp["updates"], steps)
    assert run.leftovers() == []


def test_a_stopped_worker_is_not_left_behind(run_in):
    run = run_in(2, "--worker-timeout-s", "1.5")
    run.until(run.started)
    time.sleep(1.0)
    run.signal(signal.SIGSTOP, 2)
    ended_at = run.finish()
    assert run.code == 0, run.tail()
    assert run.status_at is not None and ended_at - run.status_at < TEARDOWN_S
    bsp = _summary(run)[0]
    assert [x["worker"] for x in bsp["workers_left"]] == [1]
    assert "worker_timeout_s" in bsp["workers_left"][0]["reason"]
    assert run.leftovers() == []  # it was stopped (state T): killed, not orphaned


def test_two_workers_killed(run_in):
    run = run_in(3, "--worker-timeout-s", "3")
    run.until(run.started)
    time.sleep(1.0)
    run.signal(signal.SIGKILL, 1, 3)
    ended_at = run.finish()
    assert run.code == 0, run.tail()
    assert run.status_at is not None and ended_at - run.status_at < TEARDOWN_S
    bsp = _summary(run)[0]
    assert sorted(x["worker"] for x in bsp["workers_left"]) == [0, 2]
    steps = bsp["per_worker"]["steps"]
    assert steps[1] > steps[0] and steps[1] > steps[2]  # the survivor went on alone
    assert run.leftovers() == []


def test_the_server_killed_leaves_a_readable_trace_and_a_clean_error(run_in):
    run = run_in(2, "--set", "max_time_s=60", "--set", "eval_every_s=0.25")
    run.until(run.started)
    time.sleep(1.5)  # a few evaluations
    killed_at = run.signal(signal.SIGKILL, 0)
    ended_at = run.finish()
    assert run.code == 1
    assert ended_at - killed_at < AFTER_FAULT_S
    message = _error(run)
    assert "rank 0" in message and "SIGKILL" in message and "rank-0.log" in message, message
    assert server_log_tail(run.out).splitlines()[-1] == message
    assert not (run.out / "summary.json").exists()
    text = (run.out / "trace-bsp.jsonl").read_text()
    lines = text.split("\n")[:-1]  # whole lines only: a last one cut mid-write is not
    records = [json.loads(line) for line in lines]
    assert records[0]["ev"] == "start"
    assert sum(r["ev"] == "eval" for r in records) >= 2 and any(r["ev"] == "compute" for r in records)
    assert run.leftovers() == []


def test_an_interrupted_launcher_leaves_nothing(run_in):
    """Ctrl-C (here from the progress callback) stops every process at once."""

    def interrupt(label: str, fraction: float, status: str) -> None:
        if fraction > 0.2:
            raise KeyboardInterrupt

    run = run_in(2, on_progress=interrupt)
    run.until(run.started)
    interrupted_at = time.monotonic()
    ended_at = run.finish(raised=KeyboardInterrupt)
    assert ended_at - interrupted_at < AFTER_FAULT_S
    assert run.leftovers() == []


def test_a_killed_launcher_leaves_nothing(tmp_path):
    """SIGKILL to ``hetsync run`` itself: its agents die with it, and their
    processes with them (PR_SET_PDEATHSIG), stopped or not."""
    out = tmp_path / "out"
    code = "from pathlib import Path; from hetsync.runtime.launch import launch; "
    code += f"launch(2, {[*ARGS, '--out', str(out)]!r}, Path({str(out)!r}))"
    run = Watch(out)  # (before the launcher: what runs already is not this run's)
    launcher = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 120
        while not (run.started() and len(run.ranks) == 3):
            assert launcher.poll() is None and time.monotonic() < deadline
            run.look()
            time.sleep(0.05)
        run.signal(signal.SIGSTOP, 2)
        launcher.kill()
        launcher.wait()
        deadline = time.monotonic() + AFTER_FAULT_S
        while run.leftovers() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert run.leftovers() == []
    finally:
        launcher.kill()
        run.kill_leftovers()


def _listeners(pids: set[int]) -> set[tuple[str, int]]:
    """The listening TCP sockets (address, port) that ``pids`` hold, from /proc."""
    inodes = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(int(target[8:-1]))
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and int(fields[9]) in inodes:  # TCP_LISTEN
                found.add(_address(fields[1]))
    return found


def _address(hex_addr: str) -> tuple[str, int]:
    """/proc/net/tcp{,6}'s ``ADDR:PORT`` (hex, the address in host order by 32-bit words)."""
    addr, port = hex_addr.split(":")
    raw = b"".join(int(addr[i : i + 8], 16).to_bytes(4, "little") for i in range(0, len(addr), 8))
    if len(raw) == 4:
        return ".".join(str(b) for b in raw), int(port, 16)
    if raw[:12] == b"\0" * 10 + b"\xff\xff":  # an IPv4-mapped IPv6 address
        return ".".join(str(b) for b in raw[12:]), int(port, 16)
    return ":".join(raw[i : i + 2].hex() for i in range(0, 16, 2)), int(port, 16)


def test_address_decoding():
    assert _address("0100007F:1F90") == ("127.0.0.1", 8080)
    assert _address("00000000:0050") == ("0.0.0.0", 80)
    assert _address("00000000000000000000000000000000:0050") == ("0000:0000:0000:0000:0000:0000:0000:0000", 80)
    assert _address("0000000000000000FFFF00000100007F:0050") == ("127.0.0.1", 80)


def test_a_default_run_listens_on_loopback_only(run_in):
    run = run_in(2, "--set", "max_time_s=1")  # (the run's length changes nothing of what listens)
    seen: set[tuple[str, int]] = set()

    def look() -> bool:
        alive = {pid for pid, (start, _) in run.seen.items() if (st := proc_stat(pid)) and st[3] == start}
        seen.update(_listeners(alive))
        return not run.thread.is_alive()

    # from the first process on, through start-up, the runs and the teardown
    while not look():
        run.look()
        time.sleep(0.1)
    run.finish()
    assert run.code == 0, run.tail()
    assert seen, "no listener seen: the rendezvous store listens during the whole run"
    assert {addr for addr, _ in seen} == {"127.0.0.1"}, seen
    assert run.leftovers() == []
