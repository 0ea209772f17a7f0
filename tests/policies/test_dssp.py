import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetsync.errors import BadInput
from hetsync.policies.base import Apply, Compute, Pull, WorkerLeft
from hetsync.policies.dssp import DSSP
from hetsync.sim.engine import Simulation
from hetsync.testing import check_step_gaps
from tests.policies.helpers import arrived, ctx, pulled
from tests.sim.conftest import make_scenario


def pulls(cmds):
    assert isinstance(cmds[0], Apply)
    return cmds[1:]


def test_r_max_zero_is_ssp():
    p = DSSP(ctx(2), s_L=1, r_max=0)
    assert pulls(p.on_event(arrived(0, t=1.0))) == [Pull(worker=0)]
    assert pulls(p.on_event(arrived(0, t=2.0))) == []  # gap 2 > 1: blocked
    assert pulls(p.on_event(arrived(1, t=3.0))) == [Pull(worker=0), Pull(worker=1)]
    assert p.grant_counts == [1]


def test_controller_grants_the_iterations_that_meet_the_slow_push():
    p = DSSP(ctx(2, lr=0.2), s_L=0, r_max=5)
    assert p.start(0.0) == [Compute(worker=0, batch_size=8), Compute(worker=1, batch_size=8)]
    cmds = p.on_event(arrived(0, t=1.0))
    # crossing s_L=0 before the slow worker ever pushed: it is due now, so r = 0, wait
    assert cmds == [Apply(contributions=((cmds[0].contributions[0][0], 0.5),), lr=0.2)]
    assert p.threshold == [0, 0]
    assert pulls(p.on_event(arrived(1, t=3.0))) == [Pull(worker=0), Pull(worker=1)]
    # worker 0 let go at 3, pushes at 4 (interval 1); worker 1 (interval 3) is due at 6: r = 2
    assert pulls(p.on_event(arrived(0, t=4.0))) == [Pull(worker=0)]
    assert p.threshold == [2, 0] and p.grant_counts[2] == 1
    assert pulls(p.on_event(arrived(0, t=5.0))) == [Pull(worker=0)]  # gap 2 <= 2
    assert pulls(p.on_event(arrived(0, t=6.0))) == []  # gap 3: grant spent, wait
    assert pulls(p.on_event(arrived(1, t=6.1))) == [Pull(worker=0), Pull(worker=1)]  # gap 2 again
    assert p.threshold == [2, 0]  # still beyond s_L: the grant holds


def test_grant_ends_when_back_within_the_lower_bound():
    p = DSSP(ctx(2), s_L=0, r_max=5)
    p.start(0.0)
    p.on_event(arrived(0, t=1.0))
    p.on_event(arrived(1, t=3.0))
    p.on_event(arrived(0, t=4.0))  # granted r = 2
    assert p.threshold[0] == 2
    p.on_event(arrived(1, t=4.5))
    p.on_event(arrived(1, t=4.8))  # the slow worker catches up: clocks 2 and 3
    p.on_event(arrived(0, t=5.0))  # clock 3, gap 0
    assert p.threshold[0] == 0


def test_grant_is_capped_at_r_max():
    p = DSSP(ctx(2), s_L=1, r_max=2)
    assert p.step_gap_bound() == 3
    p.start(0.0)
    p.on_event(arrived(1, t=10.0))  # the slow worker: one push every 10 s, next due at 20
    t = 10.0
    while True:  # the fast worker pushes every second for as long as it is let go
        t += 1.0
        if pulls(p.on_event(arrived(0, t=t))) != [Pull(worker=0)]:
            break
    # crossing s_L at t=13, the slow push (20) is 7 steps away: capped at r_max = 2
    assert p.grant_counts == [0, 0, 1]
    assert p.threshold == [3, 1]
    assert t == 15.0 and p.clock[0] - p.clock[1] == 4  # blocked past s_L + r_max


def test_departed_worker_no_longer_holds_others():
    p = DSSP(ctx(2), s_L=0, r_max=0)
    p.on_event(arrived(0))
    assert p.on_event(WorkerLeft(now_s=3.0, worker=1)) == [Pull(worker=0)]
    assert p.on_event(pulled(0)) == [Compute(worker=0, batch_size=8)]


def test_bad_parameters_name_them():
    with pytest.raises(BadInput, match="'s_L'"):
        DSSP(ctx(2), s_L=-1)
    with pytest.raises(BadInput, match="'r_max'"):
        DSSP(ctx(2), r_max=-1)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    slow=st.floats(1.5, 5.0),
    jitter=st.sampled_from([0.0, 0.5]),
    s_L=st.integers(0, 3),
    r_max=st.integers(0, 6),
    seed=st.integers(0, 1000),
)
def test_simulated_step_gap_stays_within_s_L_plus_r_max(tmp_path_factory, slow, jitter, s_L, r_max, seed):
    sc = make_scenario(workers=3, slowdown=[1.0, 1.2, slow], jitter=jitter, max_steps=25, seed=seed)
    trace = tmp_path_factory.mktemp("dssp") / "t.jsonl"
    sim = Simulation(sc, f"dssp:s_L={s_L}:r_max={r_max}", trace_path=trace, math=False)
    s = sim.run().summary
    assert s["outstanding_steps"] == 0 and s["applied_steps"] == s["steps"] == 75
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    check_step_gaps(records, 3, s_L + r_max, s["label"])
    assert s["max_staleness"] <= 3 * (s_L + r_max + 1)
