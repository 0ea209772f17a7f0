"""hetsync.runtime.zygote: a rank forked from the interpreter that imported
torch once behaves as the fresh ``python -u SCRIPT`` it replaces — its
arguments, path, environment, folder, output, exit status, atexit handlers
and files left open — and the launcher learns how each ended. Real
processes: one zygote per test, a few forks of a small script."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from hetsync.runtime.config import PARENT_PID_ENV
from hetsync.runtime.zygote import SCRIPT_PRELOAD, Zygote

pytestmark = pytest.mark.dist  # starts real processes

SCRIPT = """
import atexit, json, os, sys, threading, time
import numpy as np
import helper  # beside the script: sys.path[0] is the script's folder

mode = sys.argv[1]
print("hello from", __name__)  # unbuffered: in the log at once
kept = open("left-open.txt", "w")  # never closed: flushed at exit, as by a fresh interpreter
kept.write("kept")
atexit.register(lambda: open("atexit.txt", "w").write("ran"))
threading.Thread(target=lambda: (time.sleep(0.3), open("thread.txt", "w").write("joined"))).start()
json.dump({
    "argv": sys.argv, "cwd": os.getcwd(), "name": __name__, "helper": helper.VALUE,
    "var": os.environ.get("ZYGOTE_TEST"), "parent": os.environ["PARENT_VAR"], "ppid": os.getppid(),
    "draw": float(np.random.rand()), "comm": open("/proc/self/comm").read().strip(),
    "pgid": os.getpgid(0), "pid": os.getpid(),
    "preloaded": [m for m in ("torch", "sklearn") if m in sys.modules],
    "preload_var": os.environ.get("HETSYNC_ZYGOTE_PRELOAD"),
}, open("seen.json", "w"))
if mode == "exit3":
    sys.exit(3)
if mode == "raise":
    raise ValueError("on purpose")
if mode == "wait":
    time.sleep(60)
""".replace("PARENT_VAR", PARENT_PID_ENV)


@pytest.fixture
def zygote(tmp_path):
    (tmp_path / "job.py").write_text(SCRIPT)
    (tmp_path / "helper.py").write_text("VALUE = 42\n")
    z = Zygote(dict(os.environ), tmp_path / "zygote.log", label=str(tmp_path))
    yield z
    z.close()


def _fork(zygote: Zygote, tmp_path: Path, name: str, mode: str):
    folder = tmp_path / name
    folder.mkdir()
    env = {**os.environ, "ZYGOTE_TEST": name, "RANK": "7"}
    return zygote.fork(
        [mode], folder / "log.txt", env, script=str(tmp_path / "job.py"), cwd=folder, timeout_s=120
    ), folder


def test_a_forked_script_sees_what_python_u_script_would_and_ends_as_it_would(zygote, tmp_path):
    ok, ok_dir = _fork(zygote, tmp_path, "ok", "ok")
    other, other_dir = _fork(zygote, tmp_path, "other", "exit3")
    assert ok.wait(timeout=60) == 0, (ok_dir / "log.txt").read_text()
    assert other.wait(timeout=60) == 3
    seen = json.loads((ok_dir / "seen.json").read_text())
    assert seen["argv"] == [str(tmp_path / "job.py"), "ok"] and seen["name"] == "__main__"
    assert seen["helper"] == 42 and seen["var"] == "ok" and seen["cwd"] == str(ok_dir)
    assert int(seen["parent"]) == seen["ppid"] == zygote.proc.pid  # it dies with the zygote (PDEATHSIG)
    assert seen["comm"] == "hetsync-rank-7" and seen["pgid"] == seen["pid"] == ok.pid  # its own session
    assert "hello from __main__" in (ok_dir / "log.txt").read_text()
    assert (ok_dir / "left-open.txt").read_text() == "kept"
    assert (ok_dir / "atexit.txt").read_text() == "ran" and (ok_dir / "thread.txt").read_text() == "joined"
    assert seen["draw"] != json.loads((other_dir / "seen.json").read_text())["draw"]  # numpy reseeded per fork
    assert f"{tmp_path}" in Path(f"/proc/{zygote.proc.pid}/cmdline").read_text()  # (ps names the run)
    assert seen["preloaded"] == ["torch", "sklearn"] and seen["preload_var"] is None  # (the built-in workloads')


def test_a_zygote_for_a_users_script_leaves_the_builtin_workloads_data_split_out(tmp_path):
    """(a second of CPU per hetsync launch; a script that imports it still can)"""
    (tmp_path / "job.py").write_text(SCRIPT)
    (tmp_path / "helper.py").write_text("VALUE = 42\n")
    z = Zygote(dict(os.environ), tmp_path / "zygote.log", preload=SCRIPT_PRELOAD)
    try:
        proc, folder = _fork(z, tmp_path, "script", "ok")
        assert proc.wait(timeout=60) == 0, (folder / "log.txt").read_text()
    finally:
        z.close()
    assert json.loads((folder / "seen.json").read_text())["preloaded"] == ["torch"]


def test_an_exception_prints_its_traceback_and_exits_1_and_a_signal_is_reported_as_popen_does(zygote, tmp_path):
    raised, raised_dir = _fork(zygote, tmp_path, "raise", "raise")
    waiting, _ = _fork(zygote, tmp_path, "wait", "wait")
    assert raised.wait(timeout=60) == 1
    log = (raised_dir / "log.txt").read_text()
    assert "Traceback" in log and "ValueError: on purpose" in log
    assert waiting.poll() is None
    os.kill(waiting.pid, signal.SIGKILL)
    assert waiting.wait(timeout=30) == -signal.SIGKILL


def test_a_rank_given_no_folder_starts_in_the_launchers_folder_of_the_moment(zygote, tmp_path, monkeypatch):
    """As a fresh process would, paths relative to it (its log) too: a kept zygote started in one
    folder serves launches from others."""
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
        monkeypatch.chdir(tmp_path / name)
        rank = zygote.fork(["ok"], Path("rank.log"), {**os.environ}, script=str(tmp_path / "job.py"), timeout_s=120)
        assert rank.wait(timeout=60) == 0, (tmp_path / name / "rank.log").read_text()
        assert json.loads((tmp_path / name / "seen.json").read_text())["cwd"] == str(tmp_path / name)
        assert "hello from __main__" in (tmp_path / name / "rank.log").read_text()


def test_a_rank_dies_with_its_zygote(zygote, tmp_path):
    waiting, _ = _fork(zygote, tmp_path, "wait", "wait")
    zygote.proc.kill()
    zygote.proc.wait()
    assert waiting.wait(timeout=30) == -signal.SIGKILL  # (PR_SET_PDEATHSIG: the rank is gone too)


def test_the_launcher_can_be_told_to_start_fresh_interpreters(tmp_path):
    from hetsync.runtime.launch import launch

    script = tmp_path / "job.py"
    script.write_text("import sys; print(open('/proc/self/cmdline').read().split(chr(0))[1:3]); sys.exit(0)\n")
    env = {"HETSYNC_FORK": "0"}
    launch(1, [], tmp_path / "out", script=str(script), env=env, timeout_s=120, startup_timeout_s=5)
    log = (tmp_path / "out" / "logs" / "rank-0.log").read_text()  # (rank 0 runs the script too)
    assert f"['-u', '{script}']" in log, log


FD_SCRIPT = """
import os, socket, sys
fd = int(sys.argv[1])
conn, _ = socket.socket(fileno=fd).accept()  # the launcher's listening socket, at the number it gave
conn.sendall(b"served by %d" % os.getpid())
"""


def test_one_kept_zygote_serves_every_launch_hands_each_its_socket_and_is_replaced_when_it_died(tmp_path):
    import socket

    from hetsync.runtime.zygote import kept_zygote

    (tmp_path / "fd.py").write_text(FD_SCRIPT)
    env = {**os.environ, "ZYGOTE_KEPT_TEST": str(tmp_path)}  # (a zygote of this test's own)
    first = kept_zygote(env, tmp_path / "zygote.log", preload=SCRIPT_PRELOAD)
    pids = set()
    for i in range(2):  # two launches: the same zygote; each rank gets its socket at the launcher's number
        # (what differs between a suite's tests, or a run's launches, does not start another zygote)
        per_launch = {"HETSYNC_OUT": f"run-{i}", "PYTEST_CURRENT_TEST": f"test_{i}", "MASTER_PORT": str(29500 + i)}
        z = kept_zygote({**env, **per_launch}, tmp_path / f"zygote-{i}.log", preload=SCRIPT_PRELOAD)
        assert z is first and z.proc.poll() is None
        with socket.create_server(("127.0.0.1", 0)) as server:
            rank = z.fork(
                [str(server.fileno())],
                tmp_path / f"log-{i}.txt",
                env,
                script=str(tmp_path / "fd.py"),
                keep_fd=server.fileno(),
                timeout_s=120,
            )
            with socket.create_connection(server.getsockname(), timeout=60) as c:
                said = c.recv(100).decode()
        assert rank.wait(timeout=60) == 0, (tmp_path / f"log-{i}.txt").read_text()
        assert said == f"served by {rank.pid}"
        pids.add(rank.pid)
        z.close()  # (kept: it goes on running)
    assert len(pids) == 2 and first.proc.poll() is None
    first.proc.kill()
    first.proc.wait()
    again = kept_zygote(env, tmp_path / "zygote-again.log", preload=SCRIPT_PRELOAD)
    assert again is not first and again.proc.poll() is None
    again.end()
