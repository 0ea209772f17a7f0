"""SELMCAST's fairness floor (``floor``) in the policy: scripted events, no
driver, no torch. The rounds themselves are tested in test_p2p.py."""

from __future__ import annotations

import math

import pytest

from hetsync.errors import BadInput
from hetsync.policies import make_policy
from hetsync.policies.base import ComputeDone, ModelArrived, Multicast, PolicyContext

FAST, SLOW = 1e9, 1e7
# 8 workers; workers 0 and 4 have a downlink 10x slower than any uplink, so one
# copy to them takes longer than any sender's p copies: bandwidth alone starves them
UP = [1e8, 1e8, 1e8, FAST] * 2
DOWN = [SLOW, 1e8, 1e8, FAST] * 2


def ctx(workers: int = 8) -> PolicyContext:
    return PolicyContext(workers=workers, batch_size=8, lr=0.1, model_bytes=10_000_000)


def done(w: int, t: float) -> ComputeDone:
    return ComputeDone(
        now_s=t, worker=w, step=0, batch_size=8, base_version=0, duration_s=1.0, uplink_Bps=UP[w], downlink_Bps=DOWN[w]
    )


def bsp_rounds(spec: str, rounds: int) -> list[list[int]]:
    """In-degree of every worker in each of ``rounds`` BSP exchanges."""
    pol = make_policy(spec, ctx())
    pol.start(0.0)
    t = 0.0
    out = []
    for _ in range(rounds):
        t += 1.0
        plan = [c for w in range(8) for c in pol.on_event(done(w, t))]
        assert all(isinstance(m, Multicast) for m in plan)
        got = [0] * 8
        for m in plan:
            for j in m.receivers:
                got[j] += 1
        out.append(got)
        t += 100.0  # every copy has landed
        for m in plan:
            for j in m.receivers:
                pol.on_event(ModelArrived(now_s=t, worker=j, sender=m.worker))
    return out


def test_bsp_floor_gives_every_worker_its_copies_in_every_exchange():
    plain = bsp_rounds("selmcast:p=2:floor=0", 3)
    assert all(r[0] == r[4] == 0 for r in plain)  # by bandwidth alone the slow downlinks get none
    for spec, copies in (("selmcast:p=2:floor=0.5", 1), ("selmcast:p=2", 2), ("selmcast:p=3:floor=0.34", 1)):
        for got in bsp_rounds(spec, 3):
            assert min(got) >= copies, spec


def test_ssp_floor_promotes_a_starved_worker_once_it_is_owed_a_copy():
    """One sender at a time: the slow workers are left out until each is owed
    a whole copy (one per 7 multicasts by the others), then sent one."""
    pol = make_policy("selmcast:sync=ssp:s=100:p=2:floor=0.5", ctx())
    pol.start(0.0)
    got = [0] * 8
    t = 0.0
    for r in range(4):
        for w in range(8):
            t += 1.0
            for m in pol.on_event(done(w, t)):
                assert isinstance(m, Multicast)
                for j in m.receivers:
                    got[j] += 1
                    pol.on_event(ModelArrived(now_s=t + 0.5, worker=j, sender=m.worker))
        if r >= 1:
            assert min(got) >= r  # at least one copy per round each
    assert got[0] >= 3 and got[4] >= 3


def test_floor_zero_is_the_paper_and_keeps_its_label():
    assert make_policy("selmcast:floor=0", ctx()).label == "selmcast(sync=bsp,p=2,bandwidth=worst)"
    assert make_policy("selmcast", ctx()).label == "selmcast(sync=bsp,p=2,bandwidth=worst,floor=1.0)"
    assert make_policy("selmcast:sync=ssp:window_s=0.5:floor=0.5", ctx()).label == (
        "selmcast(sync=ssp,s=3,p=2,bandwidth=worst,window_s=0.5,floor=0.5)"
    )


def test_floor_outside_zero_one_is_refused_naming_it():
    with pytest.raises(BadInput, match="'floor' must be <= 1"):
        make_policy("selmcast:floor=2", ctx())
    with pytest.raises(BadInput, match="'floor' must be >= 0"):
        make_policy("selmcast:floor=-0.5", ctx())


def test_the_deficit_counter_is_checkpointed():
    a = make_policy("selmcast:sync=ssp:p=1", ctx())
    a.start(0.0)
    for w in range(5):
        a.on_event(done(w, 1.0 + w))
    state = a.state_dict()
    assert any(x > 0 for x in state["owed_copies"])
    b = make_policy("selmcast:sync=ssp:p=1", ctx())
    b.load_state_dict(state)
    assert b.owed_copies == a.owed_copies
    assert b.receivers([5], 10.0) == a.receivers([5], 10.0)
    # a checkpoint from before the floor existed loads with nothing owed
    old = {k: v for k, v in state.items() if k != "owed_copies"}
    c = make_policy("selmcast:sync=ssp:p=1", ctx())
    c.load_state_dict(old)
    assert c.owed_copies == [0.0] * 8 and not any(math.isnan(x) for x in c.owed_copies)
