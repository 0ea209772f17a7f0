"""Policies' checkpoint state (``state_dict`` / ``load_state_dict``): plain
JSON data, and a policy restored from it decides as the one it was saved
from (runtime ``--resume``; issue 14, item 2).

Each policy first learns from a short simulated run on a heterogeneous
cluster (no model math), then its state goes through JSON into a fresh
policy of the same spec.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from hetsync.algos.zipline import predict_push_times, zipline
from hetsync.driver import policy_context
from hetsync.policies import REGISTRY, make_policy
from hetsync.policies.base import Drop, PushArrived
from hetsync.scenario import scenario_from_dict
from hetsync.sim.engine import Simulation

SPECS = [*REGISTRY, "lb-bsp:variant=gpu", "lb-bsp:predictor=ewma", "selmcast:sync=ssp", "p2p-random:sync=ssp"]
SPECS += ["elastic-bsp:within=local", "async-local-sgd:dylu=off"]
# policies that learn something a restart must not forget
LEARNS = {
    "auto",
    "backup",
    "dssp",
    "elastic-bsp",
    "lb-bsp",
    "lb-bsp-static",
    "p2p-random",
    "selmcast",
    "wbsp",
    "wbsp-overlap",
}
LEARNS |= {"async-local-sgd"}

SCENARIO = scenario_from_dict(
    {
        "name": "state",
        "workers": 4,
        "workload": "digits-logreg",
        "batch_size": 16,
        "max_steps": 40,
        "seed": 3,
        "fixed_s": 0.002,
        "per_sample_s": 0.001,
        "slowdown": [1.0, 1.5, 2.0, 3.0],
        "jitter": 0.2,
        "latency_s": 0.001,
        "bandwidth_Bps": [1e6, 2e6, 4e6, 8e6],
        "model_bytes": 20_000,
        "background_load": {"workers": [1], "factor": 2.0, "period_s": 0.3, "on_s": 0.1},
    }
)


def learned(spec: str):
    """The policy of a finished simulated run (it has seen ~160 steps)."""
    sim = Simulation(SCENARIO, spec, math=False)
    sim.run()
    return sim.policy


def restored(spec: str, state: dict):
    policy = make_policy(spec, policy_context(SCENARIO, 20_000))
    policy.load_state_dict(json.loads(json.dumps(state, allow_nan=False)))
    return policy


@pytest.mark.parametrize("spec", SPECS)
def test_state_is_plain_json_and_round_trips(spec):
    policy = learned(spec)
    state = policy.state_dict()
    text = json.dumps(state, allow_nan=False)  # numbers, strings, None, lists, dicts: no objects, no NaN
    assert json.loads(text) == state  # no tuples, no integer keys
    assert restored(spec, state).state_dict() == state
    assert bool(state) == (policy.name in LEARNS), spec
    # a fresh policy's state loads too (a checkpoint saved before anything was learned)
    fresh = make_policy(spec, policy_context(SCENARIO, 20_000))
    assert restored(spec, fresh.state_dict()).state_dict() == fresh.state_dict()


@pytest.mark.parametrize("spec", ["lb-bsp", "lb-bsp:variant=gpu", "lb-bsp:predictor=ewma", "lb-bsp-static"])
def test_lb_bsp_sizes_batches_as_before_the_restart(spec):
    a = learned(spec)
    b = restored(spec, a.state_dict())
    workers = list(range(SCENARIO.cluster.workers))
    assert b.batch == a.batch
    assert [c.batch_size for c in b.start(10.0)] == [a.batch[w] for w in workers]  # the batches it had learned
    for _ in range(3):  # the next barriers (the gpu variant's damper moves on too)
        assert b._allocate(workers) == a._allocate(workers)
    assert len(set(a.batch.values())) > 1  # it had learned something: unequal batches


@pytest.mark.parametrize("predictor", ["rls", "ewma"])
def test_lb_bsp_predictors_are_restored(predictor):
    spec = f"lb-bsp:predictor={predictor}"
    a = learned(spec)
    b = restored(spec, a.state_dict())
    workers = list(range(SCENARIO.cluster.workers))
    assert b.manager.predicted_speeds(workers) == a.manager.predicted_speeds(workers)
    assert all(s is not None for s in b.manager.predicted_speeds(workers))


def test_elastic_bsp_plans_its_first_superstep_from_the_learned_intervals():
    a = learned("elastic-bsp")
    b = restored("elastic-bsp", a.state_dict())
    assert b.interval_s == a.interval_s and b.supersteps == a.supersteps > 0
    # what a would choose at a barrier now is what b starts with (not a one-iteration superstep)
    a.at_barrier = set(a.alive)
    a._maybe_barrier(100.0)
    assert b.quota == a.quota
    times = predict_push_times(np.zeros(4), np.array(a.interval_s), a.R)
    assert b.quota == zipline(times).tolist() and max(b.quota) > 1


def test_dssp_keeps_its_measured_intervals_and_statistics():
    a = learned("dssp")
    b = restored("dssp", a.state_dict())
    assert b.interval_s == a.interval_s and None not in b.interval_s
    assert b.grant_counts == a.grant_counts
    assert b.clock == [0] * 4  # a restart is a synchronization point: the clocks start again


def test_backup_workers_still_drop_gradients_of_an_older_version():
    a = learned("backup")
    b = restored("backup", a.state_dict())
    assert b.version == a.version > 0
    late = PushArrived(now_s=1.0, worker=0, push_id=99, kind="grad", base_version=b.version - 1, steps=1, samples=16)
    assert isinstance(b.on_event(late)[0], Drop)


@pytest.mark.parametrize("spec", ["wbsp", "wbsp-overlap"])
def test_wbsp_keeps_its_rounds(spec):
    a = learned(spec)
    b = restored(spec, a.state_dict())
    assert b.version == a.version > 0 and b.closers == a.closers


@pytest.mark.parametrize("spec", ["selmcast", "p2p-random"])
def test_peer_to_peer_plans_the_receivers_it_would_have(spec):
    a = learned(spec)
    b = restored(spec, a.state_dict())
    senders = list(range(SCENARIO.cluster.workers))
    for _ in range(3):  # p2p-random: the random stream goes on where it was
        assert b.receivers(senders, 1e6) == a.receivers(senders, 1e6)


def test_a_state_of_another_worker_count_is_refused():
    state = learned("lb-bsp").state_dict()
    other = SCENARIO.with_workers(3)
    policy = make_policy("lb-bsp", policy_context(other))
    with pytest.raises(ValueError, match="comm_s"):
        policy.load_state_dict(state)


def test_async_local_sgd_sizes_its_windows_from_the_learned_speeds():
    a = learned("async-local-sgd")
    b = restored("async-local-sgd", a.state_dict())
    workers = range(SCENARIO.cluster.workers)
    assert b.step_s == a.step_s and None not in b.step_s
    assert [b.steps_for(w) for w in workers] == [a.steps_for(w) for w in workers]
    assert len({b.steps_for(w) for w in workers}) > 1  # it had learned something: unequal windows
