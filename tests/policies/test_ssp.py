import pytest

from hetsync.errors import BadInput
from hetsync.policies.base import Apply, Compute, Pull, WorkerLeft
from hetsync.policies.ssp import SSP
from tests.policies.helpers import arrived, ctx


def pull(w):
    return Pull(worker=w, then=Compute(worker=w, batch_size=8, push="grad"))


def test_fast_worker_blocks_at_bound_and_is_released_by_slowest():
    p = SSP(ctx(2), s=1)
    # worker 0 finishes step 0: clock 1, slowest 0, gap 1 <= s: may pull and go on
    cmds = p.on_event(arrived(0))
    assert isinstance(cmds[0], Apply) and cmds[1:] == [pull(0)]
    # worker 0 finishes step 1: clock 2, gap 2 > s: blocked (only the apply)
    cmds = p.on_event(arrived(0))
    assert len(cmds) == 1 and isinstance(cmds[0], Apply)
    # worker 1 finishes step 0: slowest becomes 1, worker 0 (clock 2) released, worker 1 too
    cmds = p.on_event(arrived(1))
    assert cmds[1:] == [pull(0), pull(1)]


def test_s_zero_is_lockstep():
    p = SSP(ctx(3), s=0)
    assert p.on_event(arrived(0))[1:] == []
    assert p.on_event(arrived(1))[1:] == []
    assert p.on_event(arrived(2))[1:] == [pull(0), pull(1), pull(2)]


def test_departed_worker_no_longer_holds_others():
    p = SSP(ctx(2), s=0)
    p.on_event(arrived(0))
    assert p.on_event(WorkerLeft(now_s=3.0, worker=1)) == [pull(0)]


def test_bad_parameter_names_it():
    with pytest.raises(BadInput, match="'s'"):
        SSP(ctx(2), s=-1)
    with pytest.raises(BadInput, match="'t'"):
        SSP(ctx(2), t=1)
