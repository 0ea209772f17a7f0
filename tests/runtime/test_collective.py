"""The collective data plane (hetsync.runtime.collective): the pure pieces,
and the reducer on a real gloo group (tests/runtime/collective_ranks.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from hetsync.driver import policy_context
from hetsync.errors import BadInput, PolicyError
from hetsync.ledger import HeldPush
from hetsync.policies import make_policy
from hetsync.runtime.collective import check_round, plan_buckets, uses_collective
from hetsync.runtime.launch import LOOPBACK, free_port
from hetsync.scenario import resolve_scenario

RANKS = Path(__file__).with_name("collective_ranks.py")


@given(st.lists(st.integers(1, 50), min_size=1, max_size=30), st.integers(1, 80))
def test_buckets_cover_every_tensor_once_last_first_within_the_cap(sizes, cap):
    buckets = plan_buckets(sizes, cap)
    flat = [i for b in buckets for i in b]
    assert flat == list(reversed(range(len(sizes))))  # (backward's order: the last parameters first)
    for b in buckets:
        assert len(b) == 1 or sum(sizes[i] for i in b) <= cap


def _pushes(samples):
    return {pid: HeldPush(pid, "grad", None, 0, 1, n) for pid, n in enumerate(samples)}


def test_a_round_must_be_the_batch_weighted_mean():
    pushes = _pushes([16, 48])
    check_round("bsp", [(0, 0.25), (1, 0.75)], pushes)  # BSP's and LB-BSP's weights: taken
    with pytest.raises(PolicyError, match="path=ps"):
        check_round("x", [(0, 0.5), (1, 0.5)], pushes)  # equal weights of unequal batches: refused


def test_a_policy_whose_exchanges_are_not_rounds_cannot_take_the_path():
    sc = resolve_scenario("hetero-4", {})
    assert uses_collective("collective", make_policy("bsp", policy_context(sc)))
    assert uses_collective("collective", make_policy("lb-bsp", policy_context(sc)))
    assert uses_collective("collective", make_policy("lb-bsp-static", policy_context(sc)))
    assert uses_collective("collective", make_policy("local-sgd", policy_context(sc)))
    assert uses_collective("collective", make_policy("diloco", policy_context(sc)))
    assert not uses_collective("ps", make_policy("asp", policy_context(sc)))
    for spec in ("asp", "ssp", "backup", "async-local-sgd"):
        with pytest.raises(BadInput, match="cannot use path=collective.*use path=ps"):
            uses_collective("collective", make_policy(spec, policy_context(sc)))


@pytest.mark.dist
@pytest.mark.parametrize("world", [3, 4])  # rank 0 (in no round) and 2 or 3 workers
def test_the_reducer_gives_every_worker_the_weighted_mean_on_a_real_group(world):
    port = free_port()
    env = {**os.environ, "MASTER_ADDR": LOOPBACK, "MASTER_PORT": str(port), "WORLD_SIZE": str(world)}
    env["GLOO_SOCKET_IFNAME"] = "lo"
    procs = [
        subprocess.Popen(
            [sys.executable, str(RANKS)], env={**env, "RANK": str(r)}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        for r in range(world)
    ]
    outs = []
    for p in procs:
        out, _ = p.communicate(timeout=120)
        outs.append(out.decode())
    assert [p.returncode for p in procs] == [0] * world, "\n".join(outs)
    assert all(f"rank {r}: ok" in outs[r] for r in range(1, world))


def test_a_path_a_policy_cannot_use_is_refused_in_one_line_before_anything_starts(tmp_path, capsys):
    from hetsync.cli import main

    out = tmp_path / "out"
    code = main(["run", "-s", "hetero-4", "-p", "bsp,asp", "--path", "collective", "--nproc", "2", "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "asp cannot use path=collective" in err and "use path=ps" in err, err
    assert len(err.splitlines()) == 1 and not out.exists()


@pytest.mark.dist
def test_hetsync_run_trains_the_same_model_on_either_path(tmp_path):
    """BSP on elastic-4-signal (momentum SGD, a step decay, weight decay,
    clipping) for 40 rounds: through rank 0, or reduced among the workers,
    each stepping its copy of the server's optimizer — the same model."""
    from hetsync.cli import main

    models, moved = {}, {}
    for path in ("ps", "collective"):
        out = tmp_path / path
        args = ["run", "-s", "elastic-4-signal", "-p", "bsp", "--nproc", "2", "--path", path, "--no-plots"]
        code = main([*args, "--set", "max_steps=40", "--set", "max_time_s=120", "--out", str(out)])
        assert code == 0
        (run,) = json.loads((out / "summary.json").read_text())
        assert run["path"] == path and run["updates"] == 40 and run["stop_reason"] == "max_steps"
        models[path] = torch.load(out / "model-bsp.pt", weights_only=True)
        moved[path] = run["bytes_sent"]
    diff = max((models["ps"][k] - models["collective"][k]).abs().max().item() for k in models["ps"])
    assert diff <= 1e-5, diff
    # bytes a round moves: ps, a gradient up and a model down per worker (4M with 2 workers); the ring of
    # 2 all-reduces in 2(k−1) = 2 phases, each member sending M/2 (2M in all)
    # (M: the scenario's model_bytes, the size the links are charged for)
    assert moved["ps"] % (40 * 4) == 0 and moved["collective"] == moved["ps"] // 2, moved


def test_a_worker_whose_group_broke_still_gives_the_last_rounds_model_to_fetch():
    """Rank 0's fall-back to path ps fetches the model from a worker; one that
    saw its all-reduce fail first (and left the collective path) answered with
    no model, and the run made no update after the death (hetsync bench faults)."""
    from unittest import mock

    from hetsync.runtime.worker import WorkerProcess
    from hetsync.runtime.worker_state import WorkerState

    w = WorkerProcess.__new__(WorkerProcess)  # (the state FETCH reads, without a process group)
    w.state, w.reducer = WorkerState(), mock.Mock()
    w.collective, w.fell_back = True, False
    w.global_model, w.comm = torch.ones(3), mock.Mock(**{"fetch.return_value": (None, 1.0)})
    w._leave_collective()
    model, weight = w._fetch()
    assert model is w.global_model and weight == 1.0
    w.reducer.abandon.assert_called_once()


class _EndsAsTheSliceRunsOut:
    """A bucket's work that ends between its timed wait running out and the
    look at ``is_completed`` (what gloo did under load in ``hetsync bench
    scale`` at 50M parameters and 4 workers: the wait raised "Operation timed
    out!" and the work had ended by the time it was asked). A real group
    cannot hit that window on purpose, so this stands in for the one work."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error, self.timed_waits, self.waits = error, 0, 0

    def wait(self, timeout=None):  # type: ignore[no-untyped-def]
        if timeout is not None:
            self.timed_waits += 1
            raise RuntimeError("Operation timed out!")
        self.waits += 1
        if self.error is not None:
            raise self.error
        return True

    def is_completed(self) -> bool:
        return True


def test_a_round_that_ends_as_its_wait_slice_runs_out_is_not_taken_for_a_failure():
    import threading

    from hetsync.runtime.collective import wait_round

    work = _EndsAsTheSliceRunsOut()
    wait_round(work, threading.Event())  # (returns: the round is done)
    assert (work.timed_waits, work.waits) == (1, 1)
    failed = _EndsAsTheSliceRunsOut(RuntimeError("Connection closed by peer"))
    with pytest.raises(RuntimeError, match="Connection closed by peer"):
        wait_round(failed, threading.Event())  # (a failed one still raises its own error)
