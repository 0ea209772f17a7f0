"""Contract every registered policy must keep, under generated clusters.

For random worker speeds, noise, stragglers and networks (hypothesis):
- the run finishes (no deadlock) and spends its whole step budget;
- every computed step is applied, explicitly dropped, or still in flight at
  the stop — held at the server, unpushed on its worker, or being computed,
  and those add up exactly — and nothing is in flight at all for the
  policies that drain;
- barriers hold: when a worker starts its step c, every worker has finished
  at least c − bound steps (bound = 0 for BSP, s for SSP, H − 1 for local SGD
  and DiLoCo);
- backup workers apply exactly N − b fresh gradients per round;
- peer-to-peer senders reach at least p receivers, never themselves, and
  every copy sent arrives.
"""

from __future__ import annotations

import json
import tempfile
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetsync.policies import REGISTRY
from hetsync.scenario import scenario_from_dict
from hetsync.sim.engine import Simulation

SPECS = [*REGISTRY, "ssp:s=0", "ssp:s=1", "local-sgd:H=1", "local-sgd:H=3", "backup:b=0", "backup:b=2"]
SPECS += ["elastic-bsp:R=1", "elastic-bsp:R=60", "dssp:s_L=0:r_max=2", "dssp:s_L=1:r_max=0"]
SPECS += ["diloco:H=1", "diloco:H=3"]
SPECS += ["p2p-allreduce:sync=ssp:s=1", "p2p-random:sync=ssp:s=0:p=1", "selmcast:sync=ssp", "selmcast:p=1"]
# nothing may be left in flight once these drain
DRAINS = {"bsp", "asp", "ssp", "dssp", "elastic-bsp", "p2p-allreduce", "p2p-random", "selmcast"}


@st.composite
def clusters(draw):
    n = draw(st.integers(3, 7))
    speeds = draw(st.lists(st.floats(1.0, 6.0), min_size=n, max_size=n))
    raw = {
        "name": "contract",
        "workers": n,
        "workload": "digits-logreg",
        "batch_size": 8,
        "max_steps": draw(st.integers(1, 12)),
        "seed": draw(st.integers(0, 2**16)),
        "fixed_s": 0.001,
        "per_sample_s": 0.001,
        "slowdown": speeds,
        "jitter": draw(st.sampled_from([0.0, 0.2, 0.8])),
        "straggler_prob": draw(st.sampled_from([0.0, 0.2])),
        "straggler_factor": 5.0,
        "latency_s": draw(st.sampled_from([0.0, 0.001])),
    }
    if draw(st.integers(0, 2)):  # mostly slow links: transfers overlap steps and each other
        raw["bandwidth_Bps"] = draw(st.lists(st.floats(1e5, 1e7), min_size=n, max_size=n))
        raw["model_bytes"] = 20_000
    return scenario_from_dict(raw)


def check_step_gaps(records, n, bound, label):
    computes = [r for r in records if r["ev"] == "compute"]
    ends = defaultdict(list)
    for r in computes:
        ends[r["w"]].append(r["end"])
    for r in computes:
        finished = [sum(1 for e in ends[u] if e <= r["t"]) for u in range(n)]
        assert r["step"] - min(finished) <= bound, (label, r, finished)


@pytest.mark.parametrize("spec", SPECS)
@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(sc=clusters())
def test_policy_contract(spec, sc):
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "t.jsonl"
        sim = Simulation(sc, spec, trace_path=trace, math=False)
        s = sim.run().summary
        records = [json.loads(line) for line in trace.read_text().splitlines()]
    n = sc.workers
    label = s["label"]
    assert s["steps"] == sc.max_steps * n, label  # the whole budget was spent: no stall
    assert s["steps"] == s["applied_steps"] + s["dropped_steps"] + s["outstanding_steps"], label
    assert s["outstanding_steps"] >= 0
    if s["policy"] in DRAINS:
        assert s["outstanding_steps"] == 0, label
    # nothing is lost silently: every step in flight at the stop is somewhere
    assert sum(s["outstanding_detail"].values()) == s["outstanding_steps"], (label, s["outstanding_detail"])
    dropped = sum(r["steps"] for r in records if r["ev"] == "drop")
    assert dropped == s["dropped_steps"], label  # every drop is explicit in the trace
    applied_ids = [i for r in records if r["ev"] == "apply" for i in r["ids"]]
    assert len(applied_ids) == len(set(applied_ids)), label  # nothing applied twice
    bound = sim.policy.step_gap_bound()
    if bound is not None:
        check_step_gaps(records, n, bound, label)
    if s["policy"] == "backup":
        for r in (r for r in records if r["ev"] == "apply"):
            assert len(r["ids"]) == n - s["params"]["b"], label
            assert set(r["staleness"]) == {0}, label
    if s.get("topology") == "p2p":
        sends = [r for r in records if r["ev"] == "send"]
        assert all(r["w"] != r["to"] for r in sends), label
        if "p" in s["params"] and s["multicasts"]:
            assert s["mean_receivers"] >= min(s["params"]["p"], n - 1), label
        if s["allreduces"]:
            assert s["updates"] == s["allreduces"], label  # every all-reduce finished
        else:  # every multicast finished, every copy arrived
            assert s["updates"] == s["multicasts"], label
            assert len(sends) == round(s["mean_receivers"] * s["multicasts"]), label
    shares = s["compute_share"] + s["comm_share"] + s["wait_share"]
    assert abs(shares - 1.0) < 1e-9, label


@settings(max_examples=8, deadline=None)
@given(sc=clusters(), spec=st.sampled_from(SPECS))
def test_real_math_keeps_the_contract_and_learns(sc, spec):
    s = Simulation(sc, spec).run().summary
    assert s["steps"] == s["applied_steps"] + s["dropped_steps"] + s["outstanding_steps"]
    assert 0.0 <= s["final_accuracy"] <= 1.0
