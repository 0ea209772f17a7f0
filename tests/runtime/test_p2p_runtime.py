"""Peer-to-peer policies on the runtime: real processes, models moving worker
to worker over gloo, rank 0 only coordinating (hetsync.runtime.p2p).

Each launch costs about half a minute of start-up on a 2-core machine, so
the policies of one test share a launch and the runs are short.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
import torch

from hetsync.cli import main
from hetsync.report import safe_name
from hetsync.runtime.coordinator import measure
from hetsync.runtime.launch import launch, server_log_tail
from hetsync.runtime.p2p import book_slot
from hetsync.scenario import load_scenario
from hetsync.sim.engine import simulate
from hetsync.workloads import make_workload

pytestmark = pytest.mark.dist  # starts real processes: make test-fast leaves it out

P2P_SPECS = [f"{name}:sync={sync}" for name in ("p2p-allreduce", "p2p-random", "selmcast") for sync in ("bsp", "ssp")]
UNEQUAL = "p2p-random:sync=bsp:p=1"  # one random receiver each: unequal fan-in, so push-sum weights differ
FAST = {"jitter": "0", "max_time_s": "null"}
STEPS = 20


def overrides(**values: str) -> list[str]:
    out = []
    for key, value in {**FAST, **values}.items():
        out += ["--set", f"{key}={value}"]
    return out


def traced(out: Path, run: dict, ev: str) -> list[dict]:
    lines = (out / run["trace"]).read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["ev"] == ev]


@pytest.fixture(scope="module")
def p2p_runs(tmp_path_factory) -> tuple[Path, list[dict]]:
    """Every p2p policy under bsp and ssp, a parameter-server policy, and
    p2p-random with one receiver per sender, in one ``hetsync run`` on 3 workers."""
    out = tmp_path_factory.mktemp("p2p")
    # push-sum mixing: its weights travel in the copy headers (equal mixing, the default, is
    # what the other runtime runs use); every weight stays 1 under all-reduce and equal fan-out
    argv = [
        "run",
        "--nproc",
        "3",
        "--scenario",
        "homogeneous-8",
        *overrides(max_steps=str(STEPS), p2p_mixing="push-sum"),
    ]
    argv += ["--policies", ",".join([*P2P_SPECS, "bsp", UNEQUAL]), "--no-plots", "--out", str(out)]
    assert main(argv) == 0, server_log_tail(out)
    return out, json.loads((out / "summary.json").read_text())


def test_every_p2p_policy_runs_to_completion(p2p_runs):
    out, runs = p2p_runs
    assert [r["policy"] for r in runs] == [s.split(":")[0] for s in P2P_SPECS] + ["bsp", "p2p-random"]
    for r in runs[:-2]:
        label = r["label"]
        assert r["driver"] == "dist" and r["workers"] == 3 and r["stop_reason"] == "max_steps", label
        assert r["steps"] == 3 * STEPS and r["applied_steps"] == r["steps"] and r["outstanding_steps"] == 0, label
        assert r["topology"] == "p2p" and r["multicasts"] > 0 and r["updates"] > 0, label
        if r["policy"] == "p2p-allreduce":
            assert r["mean_receivers"] == 2.0, label
        else:
            assert r["mean_receivers"] >= r["params"]["p"], label
        assert 0 < r["mean_exchange_s"] < r["wall_time_s"], label
        assert r["mean_round_s"] == pytest.approx(r["wall_time_s"] / STEPS), label
        assert 0.0 < r["compute_share"] < 1.0 and 0.0 < r["comm_share"] < 1.0, label
        assert abs(r["compute_share"] + r["comm_share"] + r["wait_share"] - 1) < 1e-6, label
        assert r["final_accuracy"] > 0.5, label  # the average of the workers' models learned
        # the data plane: copies worker to worker, or one all-reduce record per member
        if r["allreduces"]:
            assert len(traced(out, r, "allreduce")) == 3 * r["allreduces"], label
        else:
            sends = traced(out, r, "send")
            assert len(sends) == pytest.approx(r["multicasts"] * r["mean_receivers"]), label
            assert all(s["w"] != s["to"] and s["end"] >= s["t"] for s in sends), label
    ps = runs[-2]  # the parameter-server run on the same workers, after the p2p ones
    assert ps["stop_reason"] == "max_steps" and ps["updates"] == STEPS and "topology" not in ps


def test_p2p_allreduce_bsp_equals_the_simulator(p2p_runs):
    """Both average exactly after every round, so the runtime's ring
    all-reduce must land on the simulator's model."""
    out, runs = p2p_runs
    run = next(r for r in runs if r["label"] == "p2p-allreduce(sync=bsp)")
    saved = torch.load(out / f"model-{safe_name(run['label'])}.pt", weights_only=True)  # a state_dict
    sc = load_scenario("homogeneous-8", jitter=0, max_time_s=None, max_steps=STEPS, p2p_mixing="push-sum").with_workers(
        3
    )
    sim = simulate(sc, "p2p-allreduce:sync=bsp")
    module = make_workload(sc.job.workload, **sc.job.workload_args).module_with(torch.zeros_like(sim.params))
    module.load_state_dict(saved)
    ours = torch.cat([p.detach().reshape(-1) for p in module.parameters() if p.requires_grad])
    assert run["allreduces"] == sim.summary["allreduces"] == STEPS
    assert (ours - sim.params).abs().max().item() <= 1e-5
    assert ours.abs().max().item() > 0.1  # a trained model, not two zero vectors


def test_push_sum_with_unequal_fan_in_equals_the_simulator(p2p_runs):
    """One random receiver per sender: some workers get two copies a round,
    some none, so the push-sum weights differ. The weights travel in the
    copy headers, and the final model is the weighted average of the fetched
    models: the runtime must land on the simulator's model."""
    out, runs = p2p_runs
    run = runs[-1]
    saved = torch.load(out / f"model-{safe_name(run['label'])}.pt", weights_only=True)
    sc = load_scenario("homogeneous-8", jitter=0, max_time_s=None, max_steps=STEPS, p2p_mixing="push-sum").with_workers(
        3
    )
    sim = simulate(sc, UNEQUAL)
    module = make_workload(sc.job.workload, **sc.job.workload_args).module_with(torch.zeros_like(sim.params))
    module.load_state_dict(saved)
    ours = torch.cat([p.detach().reshape(-1) for p in module.parameters() if p.requires_grad])
    sends = traced(out, run, "send")
    assert len({s["to"] for s in sends}) == 3 and len(sends) == 3 * STEPS
    fan_in = defaultdict(int)
    for s in sends:
        fan_in[s["to"]] += 1
    assert max(fan_in.values()) > min(fan_in.values())  # unequal: equal weights would not reproduce it
    assert (ours - sim.params).abs().max().item() <= 1e-5
    assert ours.abs().max().item() > 0.1


@pytest.mark.serial  # transfers timed against the links' rates
def test_throttled_exchanges_follow_the_links(tmp_path):
    """Slow links (2 MB/s) on workers 0 and 1, fast ones (20 MB/s) on 2 and 3;
    a copy is 150 kB: 75 ms through a slow link, 7.5 ms through a fast one."""
    nbytes, slow, fast = 150_000, 2e6, 2e7
    bw = [slow, slow, fast, fast]
    args = ["--scenario", "homogeneous-8", *overrides(workers="4", max_steps="3", model_bytes=str(nbytes))]
    args += ["--set", f"bandwidth_Bps={json.dumps(bw)}", "--throttle", "--no-plots"]
    args += ["--policies", "p2p-random:sync=bsp,p2p-allreduce:sync=bsp", "--out", str(tmp_path)]
    assert launch(4, args, tmp_path, timeout_s=300) == 0, server_log_tail(tmp_path)
    gossip, ring = json.loads((tmp_path / "summary.json").read_text())

    multicasts = defaultdict(list)
    for s in traced(tmp_path, gossip, "send"):
        multicasts[(s["w"], s["t"])].append(s)
    assert len(multicasts) == 4 * 3
    fast_copies = []
    for (w, t), copies in multicasts.items():
        ends = sorted(c["end"] for c in copies)
        up_s = nbytes / bw[w]
        # the copies leave the uplink one after another: k copies take k·bytes/uplink
        assert ends[-1] - t >= 0.95 * len(copies) * up_s, copies
        for c in copies:  # and none arrives before the slower of its two links allows
            assert c["end"] - t >= 0.95 * nbytes / min(bw[w], bw[c["to"]]), c
            if bw[w] == bw[c["to"]] == fast:
                fast_copies.append(c["end"] - t)
        assert ends[-1] - t <= len(copies) * up_s + 3 * nbytes / slow + 0.15, copies
    if fast_copies:  # fast to fast: far below a slow link's 75 ms
        assert sum(fast_copies) / len(fast_copies) < 0.04, fast_copies

    # the ring 0 → 1 → 2 → 3 → 0: every phase waits for a 37.5 kB chunk through a
    # slow link (18.75 ms); 2·(4 − 1) = 6 phases
    phase_s = nbytes / 4 / slow
    records = traced(tmp_path, ring, "allreduce")
    assert len(records) == 4 * ring["allreduces"] > 0
    for r in records:
        assert 0.95 * 6 * phase_s <= r["end"] - r["t"] <= 6 * phase_s + 0.15, r
    assert ring["comm_share"] > ring["compute_share"]  # the links dominate here


# (as test_runtime's: a SIGKILLed worker's connection resets at once; the loop wakes at its time limit)
def test_killed_worker_does_not_hang_a_p2p_run(tmp_path):
    # 6 s: after the death is noticed (by 3.5 s) the two left have time for rings even on a loaded machine
    args = ["--scenario", "homogeneous-8", *overrides(max_time_s="6"), "--no-plots", "--out", str(tmp_path)]
    args += ["--policies", "p2p-allreduce:sync=bsp,selmcast:sync=ssp"]
    args += ["--kill-worker", "1", "--kill-at-s", "1.5", "--worker-timeout-s", "5"]
    try:  # (a hang: the ranks' stacks, which the launcher asked for, say where they wait)
        code = launch(3, args, tmp_path, timeout_s=150)
    except TimeoutError as e:
        logs = sorted((tmp_path / "logs").glob("rank-*.log"))
        pytest.fail(f"{e}\n" + "\n".join(f"== {p.name}\n{p.read_text()[-6000:]}" for p in logs))
    assert code == 0, server_log_tail(tmp_path)
    ring, gossip = json.loads((tmp_path / "summary.json").read_text())
    assert [x["worker"] for x in ring["workers_left"]] == [1]
    assert 1.5 <= ring["workers_left"][0]["t"] < 3.5  # noticed promptly
    assert ring["stop_reason"] == "max_time" and ring["wall_time_s"] == pytest.approx(6.0, abs=0.5)
    steps = ring["per_worker"]["steps"]
    assert steps[0] > steps[1] and steps[2] > steps[1]  # the others went on without it
    late = [r for r in traced(tmp_path, ring, "allreduce") if r["t"] > ring["workers_left"][0]["t"]]
    assert late and all(r["workers"] == 2 for r in late)  # rings of the two left
    # the next policy starts without the dead worker and finishes too
    assert gossip["workers_left"][0]["worker"] == 1 and gossip["stop_reason"] == "max_time"
    assert gossip["steps"] > 0 and gossip["per_worker"]["steps"][1] == 0


def test_link_slots_and_interval_measure():
    busy: list[tuple[float, float]] = []
    assert book_slot(busy, 1.0, 0.5) == 1.0
    assert book_slot(busy, 0.0, 0.5) == 0.0  # an earlier gap is still free
    assert book_slot(busy, 0.2, 0.5) == 0.5  # does not fit before 0.5: waits for the slot
    assert book_slot(busy, 0.6, 0.3) == 1.5  # the gap 0.5–1.0 is taken now
    assert busy == [(0.0, 0.5), (0.5, 1.0), (1.0, 1.5), (1.5, 1.8)]
    # comm time is the time in flight while not computing
    assert measure([(0, 2), (1, 3)], [(0.5, 1.0), (2.5, 5)], 0, 10) == pytest.approx(2.0)
    assert measure([(0, 2)], [], 1, 10) == pytest.approx(1.0)
