import json

import pytest

from hetsync.errors import BadInput
from hetsync.policies import make_policy
from hetsync.policies.base import Apply, Compute, ComputeDone, Pull, Push, WorkerLeaving, WorkerLeft
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


# ----------------------------------------------------------- within=local
def local(w, push=None, lr=0.1):
    return Compute(worker=w, batch_size=8, local_lr=lr, push=push)


def stepped(w: int, t: float, duration_s: float) -> ComputeDone:
    """Worker w's local step of ``duration_s`` (as the driver timed it) ended at t."""
    return ComputeDone(now_s=t, worker=w, step=0, batch_size=8, base_version=0, duration_s=duration_s)


def local_first_superstep(p: ElasticBSP, t0: float = 1.0, t1: float = 3.0):
    """Both workers take their one measuring local step (t0 and t1 long) and push its delta."""
    assert p.start(0.0) == [local(0, "delta", p.ctx.lr), local(1, "delta", p.ctx.lr)]
    assert p.on_event(stepped(0, t0, t0)) == []  # the quota's last step pushed itself: wait
    assert p.on_event(stepped(1, t1, t1)) == []
    a = arrived(0, t=t0 + 0.01, kind="delta")
    assert p.on_event(a) == []  # the barrier waits for every live worker's delta
    b = arrived(1, t=t1 + 0.01, kind="delta")
    return a, b, p.on_event(b)


def test_within_local_first_superstep_aggregates_the_deltas_then_zipline_sets_quotas():
    p = ElasticBSP(ctx(2, lr=0.3), R=5, within="local")
    a, b, cmds = local_first_superstep(p)
    # one delta each, equal samples: their mean; everyone pulls it and starts its next superstep on arrival
    assert cmds[0] == Apply(contributions=((a.push_id, 0.5), (b.push_id, 0.5)))
    # barrier at 3.01, intervals 1 and 3: predicted ends w0 4.01, 5.01, 6.01 and w1 6.01: they meet there
    assert p.last_quota == {0: 3, 1: 1} and p.supersteps == 1
    assert cmds[1:] == [Pull(worker=0, then=local(0, lr=0.3)), Pull(worker=1, then=local(1, "delta", 0.3))]


def test_within_local_workers_step_locally_and_deltas_are_weighted_by_samples():
    p = ElasticBSP(ctx(2, lr=0.3), R=5, within="local")
    local_first_superstep(p)
    assert p.on_event(pulled(0, t=3.1)) == [] and p.on_event(pulled(1, t=3.1)) == []  # (Pull.then started them)
    assert p.on_event(stepped(0, 4.0, 0.9)) == [local(0, lr=0.3)]  # local steps, no push, no pull
    assert p.on_event(stepped(0, 4.9, 0.9)) == [local(0, "delta", 0.3)]  # the third of its quota pushes the delta
    assert p.on_event(stepped(0, 5.9, 1.0)) == []
    assert p.on_event(stepped(1, 6.2, 3.1)) == []
    a = arrived(0, t=5.95, kind="delta", steps=3, samples=24)
    assert p.on_event(a) == []
    b = arrived(1, t=6.25, kind="delta", steps=1, samples=8)
    cmds = p.on_event(b)
    assert cmds[0] == Apply(contributions=((a.push_id, 0.75), (b.push_id, 0.25)))  # 24 and 8 of 32 samples
    # intervals: each worker's last local step as the driver timed it (not the server's clock)
    assert p.interval_s == pytest.approx([1.0, 3.1])
    assert p.last_quota == {0: 3, 1: 1} and p.supersteps == 2  # 6.25 + 3·1.0 = 9.25 vs 6.25 + 3.1 = 9.35


def test_within_local_R_1_is_bsp_one_local_step_each():
    p = ElasticBSP(ctx(3), R=1, within="local")
    assert p.start(0.0) == [local(w, "delta") for w in range(3)]
    for k in range(3):
        pushes = [arrived(w, t=5.0 * k + w + 1.0, kind="delta") for w in range(3)]
        assert p.on_event(pushes[0]) == [] and p.on_event(pushes[1]) == []
        cmds = p.on_event(pushes[2])
        assert cmds[0] == Apply(contributions=tuple((x.push_id, 1 / 3) for x in pushes))
        assert cmds[1:] == [Pull(worker=w, then=local(w, "delta")) for w in range(3)]


def test_within_local_a_departed_worker_does_not_hold_the_barrier():
    p = ElasticBSP(ctx(3), within="local")
    p.start(0.0)
    a, b = arrived(0, t=1.0, kind="delta"), arrived(1, t=1.5, kind="delta")
    assert p.on_event(a) == [] and p.on_event(b) == []
    cmds = p.on_event(WorkerLeft(now_s=2.0, worker=2))
    assert cmds[0] == Apply(contributions=((a.push_id, 0.5), (b.push_id, 0.5)))
    assert [(type(c), c.worker, c.then.worker) for c in cmds[1:]] == [(Pull, 0, 0), (Pull, 1, 1)]
    assert p.last_quota.keys() == {0, 1}  # the next superstep is planned for the live workers only


def test_within_local_a_worker_whose_loop_ends_pushes_its_steps_and_is_not_waited_for():
    p = ElasticBSP(ctx(2, lr=0.3), R=5, within="local")
    local_first_superstep(p)  # quotas: w0 3, w1 1
    p.on_event(pulled(0, t=3.1))
    assert p.on_event(stepped(0, 4.0, 0.9)) == [local(0, lr=0.3)]  # one step done, the second given
    assert p.on_event(WorkerLeaving(now_s=4.5, worker=0)) == [Push(worker=0, kind="delta")]  # the step it took
    flushed = arrived(0, t=4.6, kind="delta", samples=8)
    assert p.on_event(flushed) == []
    b = arrived(1, t=6.2, kind="delta", samples=8)
    cmds = p.on_event(b)  # w1's delta closes the superstep with w0's flushed one; only w1 goes on
    assert cmds == [
        Apply(contributions=((flushed.push_id, 0.5), (b.push_id, 0.5))),
        Pull(worker=1, then=local(1, "delta", 0.3)),
    ]
    # a worker whose last step already pushed its delta has nothing more to push
    assert p.on_event(stepped(1, 7.0, 0.8)) == []
    assert p.on_event(WorkerLeaving(now_s=7.1, worker=1)) == []


def test_within_local_refuses_staleness_remedies_and_bad_readings_naming_the_parameter():
    for remedy in ("compensate=0.04", "lr_scale=inverse", "momentum=corrected"):
        key, value = remedy.split("=")
        with pytest.raises(BadInput, match=f"'{key}'.*within=async"):
            ElasticBSP(ctx(2), within="local", **{key: value})
    with pytest.raises(BadInput, match="'within' must be one of async, local"):
        make_policy("elastic-bsp:within=sync", ctx(2))


def test_labels_name_the_reading_only_when_it_is_not_the_default():
    assert make_policy("elastic-bsp", ctx(4)).label == "elastic-bsp(R=15)"
    assert make_policy("elastic-bsp:within=async", ctx(4)).label == "elastic-bsp(R=15)"
    assert make_policy("elastic-bsp:R=60:within=Local", ctx(4)).label == "elastic-bsp(R=60,within=local)"


def test_within_local_in_the_simulator_fast_workers_step_more_and_every_barrier_averages_fresh_deltas(tmp_path):
    sc = make_scenario(workers=3, slowdown=[1.0, 1.0, 3.0], max_steps=30, policies=["elastic-bsp"])
    trace = tmp_path / "t.jsonl"
    s = Simulation(sc, "elastic-bsp:R=8:within=local", trace_path=trace, math=False).run().summary
    steps = s["per_worker"]["steps"]
    assert steps[0] > 2 * steps[2] and steps[1] > 2 * steps[2]
    assert s["steps"] == s["applied_steps"] + s["outstanding_steps"] and s["dropped_steps"] == 0
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    pushes = {r["id"]: r for r in records if r["ev"] == "push"}
    assert {r["kind"] for r in pushes.values()} == {"delta"}
    applies = [r for r in records if r["ev"] == "apply"]
    assert len(applies) >= 5
    for r in applies:  # one delta of each worker, none stale, weighted by the steps (samples) it covers
        assert sorted(pushes[i]["w"] for i in r["ids"]) == [0, 1, 2] and set(r["staleness"]) == {0}
        total = sum(pushes[i]["steps"] for i in r["ids"])
        assert r["weights"] == pytest.approx([pushes[i]["steps"] / total for i in r["ids"]])
    assert any(max(pushes[i]["steps"] for i in r["ids"]) > 1 for r in applies)  # supersteps of several steps
    # workers push once per superstep: far fewer pushes than steps (the async reading pushes every step)
    assert len(pushes) < s["steps"] / 2
    # the barrier pulls hand every worker the same version at one instant
    barriers: dict[float, list[int]] = {}
    for r in records:
        if r["ev"] == "pull":
            barriers.setdefault(r["t"], []).append(r["version"])
    assert all(len(v) == 3 and len(set(v)) == 1 for v in barriers.values())
