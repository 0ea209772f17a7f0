"""The driver core (hetsync.driver.core): one set of command checks, the
step budget, and each data-plane fact as one trace record, its counters and
the policy's event — what the simulator and the runtime server both call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hetsync.driver.core import DriverCore, eval_interval_s, policy_context, policy_labels, policy_specs
from hetsync.errors import BadInput, PolicyError
from hetsync.ledger import HeldPush, Ledger
from hetsync.policies import make_policy
from hetsync.policies.base import (
    AllReduce,
    AllReduceDone,
    Apply,
    Command,
    Compute,
    ComputeDone,
    Drop,
    Fragment,
    ModelArrived,
    Multicast,
    Pull,
    PullDone,
    Push,
    PushArrived,
    SetTimer,
    WorkerLeft,
)
from hetsync.sim.engine import Simulation
from hetsync.trace import TraceWriter
from hetsync.workloads import make_workload
from tests.sim.conftest import make_scenario


def core_for(spec: str, tmp_path: Path | None = None, **overrides: object) -> DriverCore:
    sc = make_scenario(**overrides)
    policy = make_policy(spec, policy_context(sc))
    trace = TraceWriter(tmp_path / "t.jsonl" if tmp_path is not None else None)
    ledger = Ledger(policy, make_workload(sc.job.workload), None, trace)
    return DriverCore(policy, ledger, sc)


def records(core: DriverCore, tmp_path: Path) -> list[dict]:
    core.trace.close()
    return [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]


# ------------------------------------------------------------------ commands
@pytest.mark.parametrize(
    ("spec", "cmd", "message"),
    [
        ("bsp", Compute(worker=4, batch_size=8), "bsp: Compute names worker 4, not in 0..3"),
        ("bsp", Pull(worker=-1), "Pull names worker -1, not in 0..3"),
        ("bsp", Push(worker=7, kind="grad"), "Push names worker 7"),
        ("bsp", Multicast(worker=0, receivers=(1,)), "Multicast is a peer-to-peer command; set topology = 'p2p'"),
        ("bsp", AllReduce(workers=(0, 1)), "AllReduce is a peer-to-peer command"),
        ("p2p-random", Push(worker=0, kind="grad"), r"Push in a peer-to-peer run \(there is no server\)"),
        ("p2p-random", Pull(worker=0), "Pull in a peer-to-peer run"),
        ("p2p-random", Multicast(worker=0, receivers=(1, 9)), "Multicast names worker 9, not in 0..3"),
        ("p2p-random", AllReduce(workers=(2,)), r"AllReduce needs at least 2 workers, got \(2,\)"),
        ("bsp", "not a command", "unknown command 'not a command'"),
    ],
)
def test_every_bad_command_is_refused_with_one_message(spec: str, cmd: Command, message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        core_for(spec).check(cmd)


def test_good_commands_pass() -> None:
    core = core_for("bsp")
    for cmd in (
        Compute(worker=3, batch_size=8),
        Pull(worker=0),
        Push(worker=1, kind="delta"),
        Apply(contributions=((0, 1.0),), lr=0.1),
        Drop(push_ids=(0,), reason="late"),
        SetTimer(at_s=1.0, tag="x"),
    ):
        core.check(cmd)
    p2p = core_for("p2p-random")
    p2p.check(Multicast(worker=0, receivers=(1, 2)))
    p2p.check(AllReduce(workers=(0, 3)))


def test_an_allreduce_of_a_computing_worker_is_refused() -> None:
    core = core_for("p2p-random")
    assert core.start_step(Compute(worker=1, batch_size=8, local_lr=0.1))
    with pytest.raises(PolicyError, match="AllReduce includes worker 1, which is computing"):
        core.check(AllReduce(workers=(0, 1)))


def test_a_step_is_refused_while_computing_without_local_lr_in_p2p_and_above_the_memory_cap() -> None:
    core = core_for("bsp")
    assert core.start_step(Compute(worker=0, batch_size=8))
    with pytest.raises(PolicyError, match="bsp: worker 0 is already computing"):
        core.start_step(Compute(worker=0, batch_size=8))
    with pytest.raises(PolicyError, match="peer-to-peer steps must set Compute.local_lr"):
        core_for("p2p-random").start_step(Compute(worker=0, batch_size=8))
    with pytest.raises(PolicyError, match="bsp: Compute names worker 4, not in 0..3"):
        core.start_step(Compute(worker=4, batch_size=8))  # a Pull's then: checked as it starts
    capped = core_for("bsp", max_batch=[32, 32, 64, 64])
    with pytest.raises(PolicyError, match="worker 1 asked for batch 33 above its memory cap max_batch=32"):
        capped.start_step(Compute(worker=1, batch_size=33))
    assert capped.start_step(Compute(worker=2, batch_size=64))


def test_the_step_budget_is_max_steps_per_worker_and_counts_started_steps() -> None:
    core = core_for("bsp", workers=2, max_steps=2)
    assert core.budget == 4
    for k in range(4):
        w = k % 2
        assert core.start_step(Compute(worker=w, batch_size=8))
        core.computing.discard(w)
    assert core.spent() and core.ledger.started_steps == 4
    assert not core.start_step(Compute(worker=0, batch_size=8))  # the worker stays idle
    assert core.ledger.started_steps == 4 and not core.computing


# --------------------------------------------------------------------- facts
def test_each_fact_writes_its_record_counts_and_returns_the_event(tmp_path: Path) -> None:
    core = core_for("bsp", tmp_path)
    led = core.ledger
    core.started(0.0, model_nbytes=100, scenario=make_scenario(), driver="dist")
    assert core.start_step(Compute(worker=1, batch_size=8))
    done = core.computed(1, start_s=0.5, end_s=1.5, now_s=1.6, step=0, batch_size=8, base_version=0, replaced=True)
    assert done == ComputeDone(
        now_s=1.6, worker=1, step=0, batch_size=8, base_version=0, duration_s=1.0, uplink_Bps=float("inf")
    )
    assert 1 not in core.computing and (led.steps, led.samples, led.dropped_steps) == (1, 8, 1)
    push_id = led.hold(HeldPush(1, "grad", None, 0, 1, 8))
    arrived = core.push_arrived(push_id, start_s=1.5, now_s=2.0, nbytes=100)
    assert arrived == PushArrived(
        now_s=2.0, worker=1, push_id=push_id, kind="grad", base_version=0, steps=1, samples=8, server_version=0
    )
    pulled = core.pulled(1, start_s=2.0, end_s=2.5, now_s=2.6, version=0, nbytes=100, overwritten=2)
    assert pulled == PullDone(now_s=2.6, worker=1, version=0)
    assert led.bytes_sent == 200 and led.dropped_steps == 3
    assert led.worker_bytes == [0, 200]  # per worker: what crossed its link
    assert core.left(2, 3.0, "connection lost") == WorkerLeft(now_s=3.0, worker=2)
    assert led.left == [{"worker": 2, "t": 3.0, "reason": "connection lost"}]
    core.ended(3.0, "drained")
    recs = records(core, tmp_path)
    assert [(r["ev"], r.get("reason")) for r in recs] == [
        ("start", None),
        ("drop", "overwritten"),  # the replaced gradient, before its step's record
        ("compute", None),
        ("push", None),
        ("drop", "overwritten"),  # local steps the pull replaced, before the pull's record
        ("pull", None),
        ("left", "connection lost"),
        ("end", "drained"),
    ]
    assert recs[0] == {
        "t": 0.0,
        "ev": "start",
        "workers": 4,
        "policy": "bsp",
        "scenario": "test",
        "seed": 0,
        "model_nbytes": 100,
        "driver": "dist",
    }
    assert recs[2] == {"t": 0.5, "ev": "compute", "w": 1, "end": 1.5, "step": 0, "batch": 8, "base": 0}
    assert recs[3] == {"t": 1.5, "ev": "push", "w": 1, "end": 2.0, "id": 0, "kind": "grad", "nbytes": 100, "steps": 1}


def test_peer_to_peer_facts_count_exchanges_and_updates(tmp_path: Path) -> None:
    core = core_for("p2p-random", tmp_path)
    core.stats.multicast(2)
    assert core.copy_arrived(0, 2, start_s=1.0, end_s=1.5, now_s=1.6, nbytes=10) == ModelArrived(
        now_s=1.6, worker=2, sender=0
    )
    core.exchange_done(1.0, 1.6)
    core.stats.allreduce(2)
    for w in (0, 1):
        core.reduced(w, start_s=2.0, end_s=3.0, nbytes=10, members=2)
    assert core.allreduce_done((0, 1), start_s=2.0, now_s=3.0) == AllReduceDone(now_s=3.0, workers=(0, 1))
    assert core.ledger.version == 2 and core.ledger.bytes_sent == 10  # ring bytes are the driver's to count
    # per worker: a copy at both ends; a ring of 2 sends and receives 2(k − 1) = 2 chunks of 5 bytes each
    assert core.ledger.worker_bytes == [10 + 20, 20, 10]
    summary = core.p2p_summary(4.0)
    assert summary["multicasts"] == 1 + 2 and summary["mean_exchange_s"] == pytest.approx((0.6 + 1.0) / 2)
    assert [r["ev"] for r in records(core, tmp_path)] == ["send", "allreduce", "allreduce"]
    assert core_for("bsp").p2p_summary(4.0) == {}


# ----------------------------------------------------------------- schedules
def test_the_evaluation_interval_has_one_rule_and_one_fallback() -> None:
    assert eval_interval_s(make_scenario(eval_every_s=0.3)) == 0.3
    assert eval_interval_s(make_scenario(max_steps=None, max_time_s=8.0)) == 8.0 / 40
    sc = make_scenario(max_steps=40, slowdown=[1, 1, 1, 2])  # slowest step: 2 x 16 x 1 ms
    assert eval_interval_s(sc) == pytest.approx(40 * 0.032 / 40)
    assert eval_interval_s(sc, floor_s=0.5) == 0.5  # the runtime's floor applies to the fallback only
    assert eval_interval_s(make_scenario(max_steps=None, max_time_s=8.0), floor_s=0.5) == 8.0 / 40


def test_progress_is_the_larger_of_time_and_budget_spent() -> None:
    core = core_for("bsp", workers=2, max_steps=5, max_time_s=10.0)
    assert core.fraction(2.0) == pytest.approx(0.2)
    core.ledger.started_steps = 6
    assert core.fraction(2.0) == pytest.approx(0.6)
    assert core.fraction(20.0) == 1.0


def test_policy_specs_and_labels() -> None:
    sc = make_scenario(policies=["bsp", "asp"])
    assert policy_specs(None, sc) == ["bsp", "asp"]
    assert policy_specs(" ssp:s=2, ,bsp", sc) == ["ssp:s=2", "bsp"]
    assert policy_labels(sc, ["bsp", "asp"]) == ["bsp", "asp"]
    with pytest.raises(BadInput, match="appears twice"):
        policy_labels(sc, ["bsp", "bsp"])


def test_real_processes_refuse_a_simulator_only_policy_before_anything_starts() -> None:
    sc = make_scenario()
    spec = "tests.userpolicy.halfsync:SimulatorOnly"
    assert policy_labels(sc, [spec]) == ["halfsync-sim(quorum=0.5)"]
    with pytest.raises(BadInput, match=rf"^policy '{spec}' is simulator only for now"):
        policy_labels(sc, ["bsp", spec], driver="dist")
    # every built-in policy runs on real processes
    assert policy_labels(sc, ["bsp", "streaming-diloco:bits=8"], driver="dist") == [
        "bsp",
        "streaming-diloco(H=10,P=2,tau=1,bits=8)",
    ]


def test_auto_turning_to_local_sgd_hands_its_workers_the_schedule_s_clock() -> None:
    """A scheduled run that switches from BSP to local SGD midway: each
    worker's local steps go on at the server's clock (samples applied in
    global batches), not from 0, so the schedule is not started over."""
    spec = "auto:candidates=bsp+local-sgd:window=4:h=2"
    # slow links: each round's two transfers outweigh its step, local SGD's case
    scheduled = make_scenario(
        schedule={"name": "step", "milestones": [10], "gamma": 0.1}, bandwidth_Bps=[2.6e4] * 4, max_steps=40
    )
    assert policy_labels(scheduled, ["bsp", spec], driver="dist") == [
        "bsp",
        "auto(candidates=bsp+local-sgd,window=4,h=2)",
    ]
    sim = Simulation(scheduled, spec)
    sim.run()
    (switch,) = [s for s in sim.policy.switches if s["to"] == "local-sgd"]  # type: ignore[attr-defined]
    led = sim.ledger
    server_clock = led.applied_samples / led.global_batch
    assert switch["t"] > 0 and server_clock > 4  # some BSP rounds, then some of local SGD's
    for w in sim.workers:  # a worker is at most one round's H = 2 local steps (+ one unbooked) past the server
        assert server_clock <= w.model.local_clock <= server_clock + 3


def test_fragment_transfers_name_their_range_and_width(tmp_path: Path) -> None:
    core = core_for("streaming-diloco", tmp_path)
    fragment = Fragment(lo=4, hi=10, bits=4)
    push_id = core.ledger.hold(HeldPush(0, "delta", None, 0, 3, 24, fragment=fragment))
    core.push_arrived(push_id, start_s=1.0, now_s=1.5, nbytes=7)
    core.pulled(0, start_s=2.0, end_s=2.5, now_s=2.5, version=1, nbytes=7, overwritten=0, fragment=fragment)
    push, pull = records(core, tmp_path)
    assert push == {
        "t": 1.0, "ev": "push", "w": 0, "end": 1.5, "id": 0, "kind": "delta", "nbytes": 7, "steps": 3,
        "frag": [4, 10], "bits": 4,
    }  # fmt: skip
    assert pull == {"t": 2.0, "ev": "pull", "w": 0, "end": 2.5, "version": 1, "nbytes": 7, "frag": [4, 10], "bits": 4}
    assert core.ledger.worker_bytes == [14]


# ------------------------------------------------- the simulator goes through it
class _Bad:
    """A policy that gives one bad command at the start."""

    name = label = "bad"
    topology = "ps"
    values: dict = {}

    def __init__(self, cmd: Command) -> None:
        self.cmd = cmd

    def start(self, now_s: float) -> list[Command]:
        return [self.cmd]

    def on_event(self, event: object) -> list[Command]:
        return []


@pytest.mark.parametrize(
    ("cmd", "message"),
    [
        (Compute(worker=9, batch_size=8), "bad: Compute names worker 9, not in 0..3"),
        (Multicast(worker=0, receivers=(1,)), "bad: Multicast is a peer-to-peer command"),
        (Compute(worker=0, batch_size=65), "bad: worker 0 asked for batch 65 above its memory cap max_batch=64"),
    ],
)
def test_the_simulator_refuses_with_the_core_messages(cmd: Command, message: str) -> None:
    sim = Simulation(make_scenario(max_batch=64), "bsp", math=False)
    sim.policy = sim.core.policy = _Bad(cmd)  # type: ignore[assignment]
    sim.core.label = "bad"
    with pytest.raises(PolicyError, match=message):
        sim.run()


@pytest.mark.parametrize(
    ("cmd", "message"),
    [
        (Compute(worker=0, batch_size=8, merge=True), "worker 0 is told to merge, and no fragment pull has arrived"),
        (Push(worker=0, kind="delta", fragment=Fragment(lo=0, hi=651)), r"\[0, 651\) is beyond the model's 650 values"),
        (Pull(worker=0, fragment=Fragment(lo=600, hi=700)), r"\[600, 700\) is beyond the model's 650 values"),
    ],
)
def test_the_simulator_refuses_fragments_it_cannot_move(cmd: Command, message: str) -> None:
    sim = Simulation(make_scenario(), "bsp")  # digits-logreg: 650 values
    sim.policy = sim.core.policy = _Bad(cmd)  # type: ignore[assignment]
    with pytest.raises(PolicyError, match=message):
        sim.run()
