import json
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetsync.errors import BadInput
from hetsync.policies import make_policy
from hetsync.policies.base import Apply, Compute, ComputeDone, Pull, PullDone, PushArrived, WorkerLeft
from hetsync.policies.lb_bsp import LBBSP
from hetsync.policies.lb_bsp_static import LBBSPStatic
from hetsync.scenario import scenario_from_dict
from hetsync.sim.engine import Simulation
from hetsync.testing import check_step_gaps
from tests.policies.helpers import arrived, ctx
from tests.test_contract import clusters


def finished(w, batch, duration, t=1.0, load=1.0, step=0):
    return ComputeDone(now_s=t, worker=w, step=step, batch_size=batch, base_version=0, duration_s=duration, load=load)


def play_round(p, durations, loads=None, t0=0.0, step=0):
    """Every worker finishes its current batch after its duration, then its push arrives."""
    loads = loads or [1.0] * len(durations)
    cmds = []
    for w, d in enumerate(durations):
        b = p.batch[w]
        assert p.on_event(finished(w, b, d, t=t0 + d, load=loads[w], step=step)) == []
    for w, d in enumerate(durations):
        cmds += p.on_event(arrived(w, t=t0 + d + 0.001, samples=p.batch[w]))
    return cmds


def next_batches(cmds):
    return {c.worker: c.then.batch_size for c in cmds if isinstance(c, Pull)}


def test_start_is_bsp_with_equal_batches():
    p = LBBSP(ctx(3, batch_size=8))
    assert p.start(0.0) == [Compute(worker=w, batch_size=8, push="grad") for w in range(3)]
    assert p.step_gap_bound() == 0 and p.total == 24


def test_round_applies_samples_weighted_mean_and_resizes_batches():
    p = LBBSP(ctx(3, batch_size=8, lr=0.5))
    p.start(0.0)
    a, b = arrived(0, t=0.1, samples=8), arrived(1, t=0.1, samples=8)
    assert p.on_event(finished(0, 8, 0.1, t=0.1)) == [] and p.on_event(finished(1, 8, 0.1, t=0.1)) == []
    assert p.on_event(finished(2, 8, 0.3, t=0.3)) == []
    assert p.on_event(a) == [] and p.on_event(b) == []
    c = arrived(2, t=0.3, samples=8)
    cmds = p.on_event(c)
    apply = cmds[0]
    assert isinstance(apply, Apply) and apply.lr == 0.5
    assert dict(apply.contributions) == pytest.approx({a.push_id: 1 / 3, b.push_id: 1 / 3, c.push_id: 1 / 3})
    batches = next_batches(cmds[1:])
    assert sum(batches.values()) == 24
    assert batches[2] < batches[0] and batches[2] < batches[1]  # the slow worker gets less
    assert batches == {0: 10, 1: 10, 2: 4}  # throughputs 80, 80, 26.7 samples/s
    assert all(c.then.push == "grad" for c in cmds[1:])


def test_unequal_batches_are_weighted_by_samples():
    p = LBBSP(ctx(2, batch_size=8))
    p.start(0.0)
    a, b = arrived(0, samples=12), arrived(1, samples=4)
    p.on_event(a)
    apply = p.on_event(b)[0]
    assert dict(apply.contributions) == {a.push_id: 0.75, b.push_id: 0.25}


def test_load_reading_moves_work_before_the_slowdown_is_seen_twice():
    p = LBBSP(ctx(2, batch_size=50))
    p.start(0.0)
    t = 0.0
    for k in range(60):  # worker 1 is loaded 3x in alternate blocks of 5 rounds
        load = 3.0 if (k // 5) % 2 else 1.0
        d1 = p.batch[1] * 0.001 * load
        play_round(p, [p.batch[0] * 0.001, d1], loads=[1.0, load], t0=t, step=k)
        t += 1.0
    # round 59 ran loaded (block 11): the next batches follow that load reading
    assert p.batch[1] < 40


def test_communication_time_is_taken_into_account():
    p = LBBSP(ctx(2, batch_size=50))
    p.start(0.0)
    t = 0.0
    for k in range(4):
        # compute takes 1 ms per sample; worker 1 also spends 40 ms per iteration on its pull and push
        ends = {0: t + p.batch[0] * 0.001, 1: t + 0.04 + p.batch[1] * 0.001}
        for w in (0, 1):
            assert p.on_event(finished(w, p.batch[w], p.batch[w] * 0.001, t=ends[w], step=k)) == []
        for w in sorted(ends, key=ends.get):
            p.on_event(arrived(w, t=ends[w], samples=p.batch[w]))
        # a PullDone carries no timing the policy relies on (the runtime sends it with the push)
        assert p.on_event(PullDone(now_s=t + 1.0, worker=0, version=k + 1)) == []
        t = max(ends.values())
    assert p.comm_s == pytest.approx([0.0, 0.04])
    # equal speeds: x0 / 1000 = x1 / 1000 + 0.04  =>  x0 = 70, x1 = 30
    assert p.batch == {0: 70, 1: 30}


def test_caps_are_respected_and_cycled():
    p = make_policy("lb-bsp:max_batch=20/10", ctx(3, batch_size=10))
    assert p.caps == [20, 10, 20]
    p.start(0.0)
    cmds = play_round(p, [0.01, 0.001, 0.1])  # worker 1 is fastest but capped at 10
    batches = next_batches(cmds)
    assert batches[1] <= 10 and sum(batches.values()) == 30


def test_caps_below_batch_size_start_uneven():
    p = make_policy("lb-bsp-static:max_batch=4/20/20", ctx(3, batch_size=8))
    assert [c.batch_size for c in p.start(0.0)] == [4, 10, 10]


def test_bad_parameters_name_themselves():
    with pytest.raises(BadInput, match="'variant'"):
        make_policy("lb-bsp:variant=tpu", ctx(3))
    with pytest.raises(BadInput, match="'predictor'"):
        make_policy("lb-bsp:predictor=narx", ctx(3))
    with pytest.raises(BadInput, match="'max_batch'"):
        make_policy("lb-bsp:max_batch=64/x", ctx(3))
    with pytest.raises(BadInput, match="'max_batch'"):
        make_policy("lb-bsp:max_batch=2", ctx(3, batch_size=8))  # 3 x 2 < 24
    with pytest.raises(BadInput, match="'history'"):
        make_policy("lb-bsp:history=1", ctx(3))
    with pytest.raises(BadInput, match="'rounds'"):
        make_policy("lb-bsp-static:rounds=0", ctx(3))


def test_labels_show_variant_and_changed_parameters():
    assert make_policy("lb-bsp", ctx(3)).label == "lb-bsp(variant=cpu)"
    assert make_policy("lb-bsp:variant=GPU:max_batch=64", ctx(3)).label == "lb-bsp(variant=gpu,max_batch=64)"
    assert make_policy("lb-bsp:predictor=ewma", ctx(3)).label == "lb-bsp(variant=cpu,predictor=ewma)"
    assert make_policy("lb-bsp-static", ctx(3)).label == "lb-bsp-static"
    assert make_policy("lb-bsp-static:rounds=3", ctx(3)).label == "lb-bsp-static(rounds=3)"


def test_worker_left_closes_round_and_the_rest_share_x():
    p = LBBSP(ctx(3, batch_size=8))
    p.start(0.0)
    for w in range(3):
        p.on_event(finished(w, 8, 0.1))
    p.on_event(arrived(0))
    p.on_event(arrived(1))
    cmds = p.on_event(WorkerLeft(now_s=2.0, worker=2))
    assert isinstance(cmds[0], Apply) and len(cmds[0].contributions) == 2
    assert next_batches(cmds[1:]) == {0: 12, 1: 12}


def test_gpu_variant_learns_flat_then_linear_curves():
    # worker 0: flat 10 ms up to 64 samples then 0.1 ms/sample; worker 1: 2.5x slower, knee at 16
    def t0(b):
        return 0.010 + 0.0001 * max(0, b - 64)

    def t1(b):
        return 2.5 * (0.010 + 0.0001 * max(0, b - 16))

    p = make_policy("lb-bsp:variant=gpu:max_batch=256", ctx(2, batch_size=64))
    p.start(0.0)
    for k in range(30):
        play_round(p, [t0(p.batch[0]), t1(p.batch[1])], t0=float(k), step=k)
    # the optimum: worker 1 no later than its flat 25 ms needs b1 <= 16; worker 0 then takes 112 (14.8 ms):
    # any split with b1 <= 16 finishes at 25 ms, the best possible
    assert max(t0(p.batch[0]), t1(p.batch[1])) == pytest.approx(0.025, rel=0.02)


def test_static_measures_once_then_stays():
    p = LBBSPStatic(ctx(2, batch_size=50))
    p.start(0.0)
    cmds = play_round(p, [0.05, 0.15])
    fixed = next_batches(cmds)
    assert fixed == {0: 75, 1: 25}
    for k in range(1, 5):  # worker 1 becomes fast: static does not notice
        cmds = play_round(p, [p.batch[0] * 0.001, p.batch[1] * 0.0001], t0=float(k), step=k)
        assert next_batches(cmds) == fixed


def test_static_with_several_measuring_rounds():
    p = make_policy("lb-bsp-static:rounds=2", ctx(2, batch_size=50))
    p.start(0.0)
    assert next_batches(play_round(p, [0.05, 0.15])) == {0: 50, 1: 50}
    # 100 samples in 0.1 s against 100 in 0.2 s over the two rounds
    assert next_batches(play_round(p, [0.05, 0.05], t0=1.0, step=1)) == {0: 67, 1: 33}


def _scenario(**extra):
    raw = {
        "name": "lb",
        "workers": 4,
        "workload": "digits-logreg",
        "batch_size": 16,
        "lr": 0.5,
        "max_steps": 30,
        "seed": 3,
        "fixed_s": 0.0,
        "per_sample_s": 0.001,
        "slowdown": [1.0, 1.0, 2.0, 4.0],
    }
    raw.update(extra)
    return scenario_from_dict(raw)


def test_in_the_simulator_lb_bsp_waits_less_than_bsp():
    sc = _scenario(jitter=0.05)
    bsp = Simulation(sc, "bsp").run().summary
    for spec in ("lb-bsp", "lb-bsp:predictor=ewma", "lb-bsp:variant=gpu", "lb-bsp-static"):
        s = Simulation(sc, spec).run().summary
        assert s["wait_share"] < 0.5 * bsp["wait_share"], (spec, s["wait_share"], bsp["wait_share"])
        assert s["steps"] == s["applied_steps"] + s["dropped_steps"] + s["outstanding_steps"]
        assert s["samples_per_s"] > 1.5 * bsp["samples_per_s"]


def test_with_equal_speeds_lb_bsp_is_bsp():
    sc = _scenario(slowdown=1.0)
    bsp = Simulation(sc, "bsp").run()
    lb = Simulation(sc, "lb-bsp").run()
    assert bsp.summary["updates"] == lb.summary["updates"]
    assert torch.equal(bsp.params, lb.params)


def test_gpu_scenario_respects_memory_caps():
    sc = _scenario(
        device="gpu", fixed_s=0.01, saturation_batch=[32, 32, 8, 8], max_batch=[40, 40, 24, 24], slowdown=[1, 1, 3, 3]
    )
    for spec in ("lb-bsp:variant=gpu:max_batch=40/40/24/24", "lb-bsp:max_batch=40/40/24/24"):
        s = Simulation(sc, spec).run().summary  # the timing model refuses a batch above max_batch
        assert s["stop_reason"] == "max_steps"


def test_pull_done_without_a_pull_is_harmless():
    p = LBBSP(ctx(2))
    p.start(0.0)
    assert p.on_event(PullDone(now_s=1.0, worker=0, version=0)) == []
    assert isinstance(arrived(0), PushArrived)


VARIANTS = ["lb-bsp:variant=gpu", "lb-bsp:predictor=ewma", "lb-bsp:lags=1:history=5", "lb-bsp-static:rounds=3"]
VARIANTS += ["lb-bsp:variant=gpu:max_batch=9/40", "lb-bsp:max_batch=12"]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sc=clusters(), spec=st.sampled_from(VARIANTS))
def test_variants_keep_the_contract(sc, spec):
    """tests/test_contract.py runs the registered defaults; these are the other variants."""
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "t.jsonl"
        sim = Simulation(sc, spec, trace_path=trace, math=False)
        s = sim.run().summary
        records = [json.loads(line) for line in trace.read_text().splitlines()]
    n = sc.cluster.workers
    assert s["steps"] == sc.stop.max_steps * n
    assert s["steps"] == s["applied_steps"] + s["dropped_steps"] + s["outstanding_steps"]
    check_step_gaps(records, n, 0, s["label"])
    per_step: dict[int, list[int]] = {}
    for r in records:
        if r["ev"] == "compute":
            per_step.setdefault(r["step"], []).append(r["batch"])
    for batches in per_step.values():
        assert min(batches) >= 1
        if len(batches) == n:  # a full round: the global batch is kept
            assert sum(batches) == n * sc.job.batch_size, (s["label"], batches)


def test_gpu_variant_takes_the_clusters_memory_caps_without_a_parameter(tmp_path):
    import json

    from hetsync.scenario import load_scenario
    from hetsync.sim.engine import Simulation

    sc = load_scenario("lbbsp-gpu", max_time_s=1.0)
    trace = tmp_path / "t.jsonl"
    Simulation(sc, "lb-bsp:variant=gpu", trace_path=trace, math=False).run()
    batches = [json.loads(x) for x in trace.read_text().splitlines()]
    batches = [(r["w"], r["batch"]) for r in batches if r["ev"] == "compute"]
    assert batches and all(b <= sc.cluster.max_batch[w] for w, b in batches)
    assert any(b != sc.job.batch_size for _, b in batches)  # it did re-size
