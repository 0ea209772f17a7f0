"""The policy contract, for your own policy: what every hetsync policy keeps.

``check_policy("mypkg.quorum:Quorum")`` simulates the policy (without the
gradient math) on generated clusters — random worker speeds, noise,
stragglers, slow or fast links — and raises :class:`ContractError` naming
the cluster and the broken rule, else returns the summaries. The rules:

- the run finishes (no deadlock) and spends its whole step budget;
- every computed step is applied, explicitly dropped (a ``drop`` record), or
  still in flight at the stop — and those add up exactly; nothing is applied
  twice;
- the policy's own barrier holds: when a worker starts its step c, every
  worker has finished at least c − ``step_gap_bound()`` steps;
- peer to peer: a sender never sends to itself, and every exchange finishes;
- compute, communication and waiting shares add up to 1.

hetsync's own tests run the same checks (``tests/test_contract.py``).
"""

from __future__ import annotations

import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from hetsync.errors import DeadlockError, PolicyError
from hetsync.scenario import Scenario, scenario_from_dict
from hetsync.sim.engine import Simulation
from hetsync.steptime import resolve_measured
from hetsync.trace import read_trace


class ContractError(AssertionError):
    """A policy broke a rule of the contract (the message says which, where)."""


def random_cluster(rng: np.random.Generator) -> Scenario:
    """A small generated cluster: 3–7 workers 1–6× slower than the fastest,
    noise, stragglers, sometimes slow links, a budget of 1–12 steps each."""
    n = int(rng.integers(3, 8))
    raw: dict[str, Any] = {
        "name": "contract",
        "workers": n,
        "workload": "digits-logreg",
        "batch_size": 8,
        "max_steps": int(rng.integers(1, 13)),
        "seed": int(rng.integers(0, 2**16)),
        "fixed_s": 0.001,
        "per_sample_s": 0.001,
        "slowdown": [float(x) for x in rng.uniform(1.0, 6.0, n)],
        "jitter": float(rng.choice([0.0, 0.2, 0.8])),
        "straggler_prob": float(rng.choice([0.0, 0.2])),
        "straggler_factor": 5.0,
        "latency_s": float(rng.choice([0.0, 0.001])),
    }
    if rng.integers(0, 3):  # mostly slow links: transfers overlap steps and each other
        raw["bandwidth_Bps"] = [float(x) for x in rng.uniform(1e5, 1e7, n)]
        raw["model_bytes"] = 20_000
    return scenario_from_dict(raw)


def check_policy(spec: str, clusters: int = 12, seed: int = 0) -> list[dict[str, Any]]:
    """Run :func:`check_contract` for ``spec`` on ``clusters`` generated clusters."""
    rng = np.random.default_rng(seed)
    return [check_contract(spec, random_cluster(rng)) for _ in range(clusters)]


def check_contract(spec: str, scenario: Scenario, *, drains: bool = False) -> dict[str, Any]:
    """Simulate ``spec`` on ``scenario`` (which must set ``max_steps``) and
    check the contract; ``drains``: nothing may be left in flight at the end
    (true of policies that stop cleanly, such as BSP). Returns the summary."""
    if scenario.stop.max_steps is None:
        raise ValueError("check_contract needs a scenario with max_steps (the budget it must spend)")
    scenario = resolve_measured(scenario)  # (a `measured` step cost: timed here, as for any simulation)
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "t.jsonl"
        sim = Simulation(scenario, spec, trace_path=trace, math=False)
        slowdown = [round(x, 3) for x in scenario.cluster.slowdown]
        cluster = f"{scenario.cluster.workers} workers (slowdown {slowdown}, seed {scenario.job.seed})"
        try:
            s = sim.run().summary
        except (DeadlockError, PolicyError) as e:  # stalled, or a command no driver can execute
            raise ContractError(f"on {cluster}: {e}") from e
        records = read_trace(trace)
    n = scenario.cluster.workers
    where = f"{s['label']} on {cluster}"

    def rule(ok: bool, what: str) -> None:
        if not ok:
            raise ContractError(f"{where}: {what}")

    rule(
        s["steps"] == scenario.stop.max_steps * n,
        f"stalled: {s['steps']} of {scenario.stop.max_steps * n} steps computed",
    )
    rule(
        s["steps"] == s["applied_steps"] + s["dropped_steps"] + s["outstanding_steps"],
        f"steps {s['steps']} != applied {s['applied_steps']} + dropped {s['dropped_steps']} "
        f"+ outstanding {s['outstanding_steps']}",
    )
    rule(s["outstanding_steps"] >= 0, "negative outstanding steps")
    if drains:
        rule(s["outstanding_steps"] == 0, f"{s['outstanding_steps']} steps left in flight by a draining policy")
    detail = s.get("outstanding_detail") or {}
    rule(sum(detail.values()) == s["outstanding_steps"], f"steps in flight not accounted for: {detail}")
    dropped = sum(r["steps"] for r in records if r["ev"] == "drop")
    rule(dropped == s["dropped_steps"], f"{s['dropped_steps'] - dropped} steps dropped without a drop record")
    applied = [i for r in records if r["ev"] == "apply" for i in r["ids"]]
    rule(len(applied) == len(set(applied)), "a push applied twice")
    bound = sim.policy.step_gap_bound()
    if bound is not None:
        check_step_gaps(records, n, bound, where)
    if s.get("topology") == "p2p":
        sends = [r for r in records if r["ev"] == "send"]
        rule(all(r["w"] != r["to"] for r in sends), "a worker sent its model to itself")
        if s["allreduces"]:
            rule(s["updates"] == s["allreduces"], "an all-reduce never finished")
        else:
            rule(s["updates"] == s["multicasts"], "a multicast never finished")
            rule(len(sends) == round(s["mean_receivers"] * s["multicasts"]), "a copy sent never arrived")
    shares = s["compute_share"] + s["comm_share"] + s["wait_share"]
    rule(abs(shares - 1.0) < 1e-9, f"compute + comm + wait shares = {shares}, not 1")
    return s


def check_step_gaps(records: list[dict[str, Any]], n: int, bound: int, where: str) -> None:
    """When a worker starts its step c, every worker has finished ≥ c − ``bound``
    steps (``records``: a trace's); ContractError naming ``where`` otherwise."""
    computes = [r for r in records if r["ev"] == "compute"]
    ends: dict[int, list[float]] = defaultdict(list)
    for r in computes:
        ends[r["w"]].append(r["end"])
    for r in computes:
        finished = [sum(1 for e in ends[u] if e <= r["t"]) for u in range(n)]
        if r["step"] - min(finished) > bound:
            raise ContractError(
                f"{where}: worker {r['w']} started step {r['step']} at t={r['t']:.4g} while a worker had "
                f"finished {min(finished)} (bound {bound})"
            )
