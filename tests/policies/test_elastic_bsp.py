import json

import pytest

from hetsync.errors import BadInput
from hetsync.policies.base import Apply, Compute, Pull, Push, WorkerLeft
from hetsync.policies.elastic_bsp import ElasticBSP
from hetsync.sim.engine import Simulation
from tests.policies.helpers import arrived, ctx, done, pulled
from tests.sim.conftest import make_scenario


def first_superstep(p: ElasticBSP, t0: float = 1.0, t1: float = 3.0):
    """Both workers run their one measuring iteration (intervals t0 and t1)."""
    assert p.start(0.0) == [Compute(worker=0, batch_size=8), Compute(worker=1, batch_size=8)]
    first = p.on_event(arrived(0, t=t0))
    return first, p.on_event(arrived(1, t=t1))


def test_first_superstep_is_one_iteration_then_zipline_sets_quotas():
    p = ElasticBSP(ctx(2, lr=0.4), R=5)
    first, second = first_superstep(p)
    # worker 0 has run its one iteration: its gradient is applied (1/N, lr) and it waits
    assert len(first) == 1 and isinstance(first[0], Apply)
    assert first[0].lr == 0.4 and first[0].contributions[0][1] == 0.5
    # the last arrival closes the barrier: everybody pulls the same model
    assert isinstance(second[0], Apply) and second[1:] == [Pull(worker=0), Pull(worker=1)]
    # barrier at t=3; predicted pushes: w0 4,5,6,7,8 and w1 6,9,12,...: they meet at 6
    assert p.last_quota == {0: 3, 1: 1}
    assert p.supersteps == 1


def test_workers_run_their_quota_asp_style_then_wait():
    p = ElasticBSP(ctx(2), R=5)
    first_superstep(p)
    assert p.on_event(pulled(0, t=3.1)) == [Compute(worker=0, batch_size=8)]
    assert p.on_event(done(0, t=3.9)) == [Push(worker=0, kind="grad")]
    for t in (4.0, 5.0):  # two of its three iterations: applied on arrival, pull and go on
        cmds = p.on_event(arrived(0, t=t))
        assert isinstance(cmds[0], Apply) and cmds[1:] == [Pull(worker=0)]
    assert len(p.on_event(arrived(0, t=6.0))) == 1  # third: it waits at the barrier
    cmds = p.on_event(arrived(1, t=6.2))  # the slow worker's one iteration closes it
    assert isinstance(cmds[0], Apply) and cmds[1:] == [Pull(worker=0), Pull(worker=1)]
    # intervals measured from each release: w0 1.0 (last one), w1 3.2
    assert p.interval_s == pytest.approx([1.0, 3.2])
    assert p.last_quota == {0: 3, 1: 1}  # 6.2 + 3·1.0 = 9.2 vs 6.2 + 3.2 = 9.4
    assert p.supersteps == 2


def test_look_ahead_limits_the_quota():
    p = ElasticBSP(ctx(2), R=2)
    first_superstep(p, t0=1.0, t1=10.0)
    # w0 predicted at 11, 12; w1 at 20, 30: the closest pair is (12, 20)
    assert p.last_quota == {0: 2, 1: 1}


def test_R_1_is_lockstep():
    p = ElasticBSP(ctx(3), R=1)
    p.start(0.0)
    for k in range(3):
        assert len(p.on_event(arrived(0, t=5.0 * k + 1.0))) == 1
        assert len(p.on_event(arrived(1, t=5.0 * k + 2.0))) == 1
        assert p.on_event(arrived(2, t=5.0 * k + 5.0))[1:] == [Pull(worker=w) for w in range(3)]
        assert p.last_quota == {0: 1, 1: 1, 2: 1}


def test_departed_worker_no_longer_holds_the_barrier():
    p = ElasticBSP(ctx(3))
    p.start(0.0)
    p.on_event(arrived(0, t=1.0))
    p.on_event(arrived(1, t=1.5))
    assert p.on_event(WorkerLeft(now_s=2.0, worker=2)) == [Pull(worker=0), Pull(worker=1)]
    # a late push of the departed worker is still applied, and changes nothing else
    cmds = p.on_event(arrived(2, t=2.5))
    assert len(cmds) == 1 and isinstance(cmds[0], Apply)


def test_bad_parameter_names_it():
    with pytest.raises(BadInput, match="'R'"):
        ElasticBSP(ctx(2), R=0)


def test_in_the_simulator_fast_workers_fill_the_barrier_wait(tmp_path):
    sc = make_scenario(workers=3, slowdown=[1.0, 1.0, 3.0], max_steps=30, policies=["elastic-bsp"])
    trace = tmp_path / "t.jsonl"
    s = Simulation(sc, "elastic-bsp:R=8", trace_path=trace, math=False).run().summary
    bsp = Simulation(sc, "bsp", math=False).run().summary
    steps = s["per_worker"]["steps"]
    assert steps[0] > 2 * steps[2] and steps[1] > 2 * steps[2]
    assert s["outstanding_steps"] == 0 and s["applied_steps"] == s["steps"]
    assert s["compute_share"] > bsp["compute_share"] + 0.2
    # barrier pulls (all three workers pull at one instant) hand everyone the same version
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    barriers: dict[float, list[int]] = {}
    for r in records:
        if r["ev"] == "pull":
            barriers.setdefault(r["t"], []).append(r["version"])
    barriers = {t: v for t, v in barriers.items() if len(v) == 3}
    assert len(barriers) >= 5
    assert all(len(set(v)) == 1 for v in barriers.values())
