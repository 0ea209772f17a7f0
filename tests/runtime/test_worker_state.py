"""The worker's side of the protocol (hetsync.runtime.worker_state): each
command's action, the continuous step, the collective path's zero-weight
orders. Sans IO: no process, no tensor."""

from __future__ import annotations

import pytest

from hetsync.runtime import protocol as P
from hetsync.runtime import worker_state as ws
from hetsync.runtime.worker_state import WorkerState

STEP = P.StepOrder(batch_size=32, push_after="grad")
NONSTOP = P.StepOrder(batch_size=32, push_after="grad", continuous=True)
ZERO = P.StepOrder(batch_size=0, push_after="grad")
PUSH = P.WorkCmd(push="grad")
PULL = P.WorkCmd(pull=P.PullOrder(version=3, sent_s=1.0))


@pytest.mark.parametrize(
    "cmd, action",
    [
        (P.ExitCmd(), ws.Exit()),
        (P.StopCmd(), ws.Bye()),
        (P.HaltCmd(), ws.Nothing()),
        (PUSH, ws.Transfers(PUSH)),
        (PULL, ws.Transfers(PULL)),
    ],
)
def test_each_command_asks_for_its_action(cmd, action):
    assert WorkerState().receive(cmd) == action


def test_a_reset_or_a_snapshot_carries_its_command():
    reset = P.ResetCmd(epoch_s=0.0, version=0, run=1, collective=True)
    snapshot = P.SnapshotCmd(version=7, send_model=True)
    assert WorkerState().receive(reset) == ws.Reset(reset)
    assert WorkerState().receive(snapshot) == ws.Snapshot(snapshot)


def test_a_step_comes_after_the_transfers_of_its_command():
    cmd = P.WorkCmd(pull=P.PullOrder(version=3, sent_s=1.0), step=STEP)
    assert WorkerState().receive(cmd) == ws.Step(cmd, STEP)


def test_a_continuous_step_goes_on_until_a_command_that_is_not_work():
    state = WorkerState()
    assert state.again() is None
    state.receive(P.WorkCmd(step=NONSTOP))
    assert state.again() == NONSTOP
    state.receive(PUSH)  # a standalone transfer beside it (a lane's, or the main thread's) leaves it going
    assert state.again() == NONSTOP
    assert state.receive(P.HaltCmd()) == ws.Nothing()
    assert state.again() is None


def test_another_step_replaces_the_continuous_one():
    state = WorkerState()
    state.receive(P.WorkCmd(step=NONSTOP))
    state.receive(P.WorkCmd(step=STEP))  # not continuous: after it, wait for the next command
    assert state.again() is None


@pytest.mark.parametrize("end", [P.StopCmd(), P.ExitCmd(), P.SnapshotCmd(version=1)])
def test_the_run_s_end_ends_the_continuous_step(end):
    state = WorkerState()
    state.receive(P.WorkCmd(step=NONSTOP))
    state.receive(end)
    assert state.again() is None


def test_a_step_of_batch_0_joins_the_round_with_zero_weight_on_the_collective_path_only():
    cmd = P.WorkCmd(step=ZERO)
    state = WorkerState(collective=True)
    assert state.zero_order(cmd) and state.receive(cmd) == ws.ZeroRound()
    state.collective = False  # a model came back: the server left the collective path
    assert not state.zero_order(cmd) and state.receive(cmd) == ws.Step(cmd, ZERO)


def test_a_zero_weight_order_leaves_a_continuous_step_going():
    state = WorkerState(collective=True)
    state.receive(P.WorkCmd(step=NONSTOP))
    assert state.receive(P.WorkCmd(step=ZERO)) == ws.ZeroRound()
    assert state.again() == NONSTOP
