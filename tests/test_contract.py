"""Contract every registered policy must keep, under generated clusters
(the rules live in hetsync.testing, which users run on their own policies).

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
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetsync.policies import REGISTRY
from hetsync.sim.engine import Simulation
from hetsync.testing import check_contract, random_cluster

SPECS = [*REGISTRY, "ssp:s=0", "ssp:s=1", "local-sgd:H=1", "local-sgd:H=3", "backup:b=0", "backup:b=2"]
SPECS += ["elastic-bsp:R=1", "elastic-bsp:R=60", "dssp:s_L=0:r_max=2", "dssp:s_L=1:r_max=0"]
SPECS += ["elastic-bsp:within=local", "elastic-bsp:R=1:within=local"]
SPECS += ["diloco:H=1", "diloco:H=3"]
SPECS += [
    "streaming-diloco:H=3:P=1:tau=0",
    "streaming-diloco:H=3:P=2:tau=0:bits=32",
    "streaming-diloco:H=6:P=2:tau=2:bits=8",
]
SPECS += ["streaming-diloco:H=4:P=4:tau=0:split=equal"]
SPECS += ["async-local-sgd:H=1", "async-local-sgd:H=3:dylu=off", "async-local-sgd:H=4:momentum_period=1"]
SPECS += ["p2p-allreduce:sync=ssp:s=1", "p2p-random:sync=ssp:s=0:p=1", "selmcast:sync=ssp", "selmcast:p=1"]
SPECS += ["selmcast:sync=ssp:s=1:window_s=0.5", "selmcast:sync=ssp:p=1:window_s=30"]
# nothing may be left in flight once these drain
DRAINS = {"bsp", "asp", "ssp", "dssp", "elastic-bsp", "p2p-allreduce", "p2p-random", "selmcast"}


def clusters():
    """hetsync.testing's generated clusters (3–7 workers, speeds, noise,
    stragglers, slow links, budgets), each from a seed hypothesis picks."""
    return st.integers(0, 2**32 - 1).map(lambda seed: random_cluster(np.random.default_rng(seed)))


@pytest.mark.parametrize("spec", SPECS)
@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(sc=clusters())
def test_policy_contract(spec, sc):
    # (ElasticBSP's local reading leaves unpushed local steps at the stop, as local SGD does)
    drains = spec.split(":")[0] in DRAINS and "within=local" not in spec
    s = check_contract(spec, sc, drains=drains)  # the rules: hetsync.testing
    n = sc.cluster.workers
    label = s["label"]
    if s["policy"] == "backup":
        with tempfile.TemporaryDirectory() as tmp:
            trace = Path(tmp) / "t.jsonl"
            Simulation(sc, spec, trace_path=trace, math=False).run()
            applies = [r for r in map(json.loads, trace.read_text().splitlines()) if r["ev"] == "apply"]
        for r in applies:
            assert len(r["ids"]) == n - s["params"]["b"], label
            assert set(r["staleness"]) == {0}, label
    if s.get("topology") == "p2p" and "p" in s["params"] and s["multicasts"]:
        assert s["mean_receivers"] >= min(s["params"]["p"], n - 1), label


@settings(max_examples=8, deadline=None)
@given(sc=clusters(), spec=st.sampled_from(SPECS))
def test_real_math_keeps_the_contract_and_learns(sc, spec):
    s = Simulation(sc, spec).run().summary
    assert s["steps"] == s["applied_steps"] + s["dropped_steps"] + s["outstanding_steps"]
    assert 0.0 <= s["final_accuracy"] <= 1.0
