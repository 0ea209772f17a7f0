"""The simulator plays the scenario's ``membership``: workers leave (their
work in progress lost as a dead process loses it) and join (the current
global model downloaded, their place in the data kept), and the policy hears
``WorkerLeft`` / ``WorkerJoined``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hetsync.driver import policy_labels
from hetsync.errors import BadInput
from hetsync.policies import REGISTRY
from hetsync.sim.engine import Simulation
from hetsync.summary import check_summary
from hetsync.trace import schema_error
from tests.sim.conftest import make_scenario

JOINING = sorted(name for name, cls in REGISTRY.items() if getattr(cls, "takes_joins", False))
SPECS = [*JOINING, "p2p-allreduce:sync=ssp:s=1", "selmcast:sync=ssp", "elastic-bsp:within=local", "asp:compensate=0.1"]

REJOIN = [{"worker": 1, "leave_s": 0.1, "join_s": 0.3}]  # away from 0.1 s to 0.3 s
LATE = [{"worker": 2, "join_s": 0.2}]  # absent until 0.2 s


def scenario(membership: list[dict[str, Any]], **overrides: Any):
    raw = {
        "workers": 4,
        "max_steps": 30,
        "slowdown": [1.0, 1.5, 1.0, 2.0],
        "bandwidth_Bps": 2e7,
        "model_bytes": 40_000,
        "membership": membership,
    }
    return make_scenario(**{**raw, **overrides})


def run(sc, spec: str, tmp_path: Path, **kwargs: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    trace = tmp_path / f"{spec.replace(':', '_')}.jsonl"
    s = Simulation(sc, spec, trace_path=trace, **kwargs).run().summary
    return s, [json.loads(line) for line in trace.read_text().splitlines()]


def computes(records: list[dict[str, Any]], w: int) -> list[dict[str, Any]]:
    return [r for r in records if r["ev"] == "compute" and r["w"] == w]


@pytest.mark.parametrize("membership", [REJOIN, LATE], ids=["rejoin", "late"])
@pytest.mark.parametrize("spec", SPECS)
def test_every_policy_runs_a_leave_and_a_join_to_the_end_with_every_step_accounted(spec, membership, tmp_path):
    s, records = run(scenario(membership), spec, tmp_path)
    w, join_s = membership[0]["worker"], membership[0]["join_s"]
    leave_s = membership[0].get("leave_s", 0.0)
    assert s["stop_reason"] == "max_steps"
    assert s["steps"] == s["applied_steps"] + s["dropped_steps"] + s["outstanding_steps"]
    assert sum(s["outstanding_detail"].values()) == s["outstanding_steps"]
    assert s["steps"] <= 30 * 4
    mine = computes(records, w)
    assert not [r for r in mine if leave_s <= r["t"] < join_s or leave_s < r["end"] <= join_s]  # none while away
    assert [r for r in mine if r["t"] >= join_s], "the joined worker computed nothing after its join"
    assert [(j["worker"], j["t"]) for j in s["workers_joined"]] == [(w, join_s)]
    assert [x["worker"] for x in s["workers_left"]] == [w]


def test_bsp_applies_rounds_without_the_absent_worker_and_with_it_after(tmp_path):
    s, records = run(scenario(REJOIN), "bsp", tmp_path)
    applies = [r for r in records if r["ev"] == "apply"]
    pushes = {r["id"]: r["w"] for r in records if r["ev"] == "push"}
    joined = next(r for r in records if r["ev"] == "joined")
    during = [a for a in applies if 0.1 < a["t"] <= joined["end"]]
    after = [a for a in applies if a["t"] > joined["end"] + 0.05]
    assert during and after
    assert all(1 not in {pushes[i] for i in a["ids"]} and len(a["ids"]) == 3 for a in during)
    assert all({pushes[i] for i in a["ids"]} == {0, 1, 2, 3} for a in after[:-1])  # (the last may be cut by the budget)


def test_a_join_is_in_the_trace_and_the_summary_with_its_download(tmp_path):
    s, records = run(scenario(REJOIN), "asp", tmp_path)
    (rec,) = [r for r in records if r["ev"] == "joined"]
    assert rec["w"] == 1 and rec["t"] == 0.3 and rec["nbytes"] == 40_000
    assert rec["end"] == pytest.approx(0.3 + 40_000 / 2e7, rel=1e-6)  # the model on the worker's link
    assert s["workers_joined"] == [{"worker": 1, "t": 0.3, "ready_s": rec["end"]}]
    (left,) = [r for r in records if r["ev"] == "left"]
    assert left["w"] == 1 and left["t"] == 0.1 and left["reason"] == "membership"
    assert min(r["t"] for r in computes(records, 1) if r["t"] >= 0.3) == pytest.approx(rec["end"])
    assert [schema_error(r) for r in records if schema_error(r)] == []  # the joined record is in the schema
    check_summary(json.loads(json.dumps([s])), "summary.json")  # and workers_joined in the summary's


def test_a_late_worker_is_absent_from_the_start(tmp_path):
    s, records = run(scenario(LATE), "ssp", tmp_path)
    assert s["workers_left"] == [{"worker": 2, "t": 0.0, "reason": "absent at the start"}]
    assert min(r["t"] for r in computes(records, 2)) >= 0.2


def test_the_joined_worker_goes_on_in_its_data_where_it_was():
    sim = Simulation(scenario(REJOIN), "asp")
    shard = sim.shards[1]
    drawn: list[tuple[float, list[int]]] = []
    draw = shard.next_index

    def recording(batch_size: int):
        rows = draw(batch_size)
        drawn.append((sim.now, [int(i) for i in rows]))
        return rows

    shard.next_index = recording  # type: ignore[method-assign]
    sim.run()
    before = [rows for t, rows in drawn if t < 0.3]
    after = [rows for t, rows in drawn if t >= 0.3]
    assert before and after
    assert after[0] != before[0]  # not from the start of its shard again: where it was
    seen = [i for rows in before for i in rows]
    assert not set(after[0]) & set(seen[-len(after[0]) :])  # (a fresh permutation's next rows, or the same epoch's)


def test_a_leaver_s_work_in_progress_is_lost_and_counted(tmp_path):
    # local SGD keeps its steps on the worker until the H-th: a leave mid-round loses them
    s, _ = run(scenario([{"worker": 1, "leave_s": 0.05}]), "local-sgd:H=4", tmp_path)
    assert s["outstanding_detail"]["lost"] > 0
    assert s["steps"] == s["applied_steps"] + s["dropped_steps"] + s["outstanding_steps"]


def test_the_time_away_is_not_in_the_worker_s_shares(tmp_path):
    s, _ = run(scenario([{"worker": 1, "leave_s": 0.0, "join_s": 0.2}]), "asp", tmp_path)
    away = 0.2
    total = 4 * s["wall_time_s"] - away
    busy = sum(s["per_worker"]["compute_s"]) + sum(s["per_worker"]["comm_s"]) + sum(s["per_worker"]["wait_s"])
    assert busy == pytest.approx(total)


def test_the_same_seed_gives_the_same_trace(tmp_path):
    sc = scenario([*REJOIN, *LATE])
    a = tmp_path / "a.jsonl"
    b = tmp_path / "b.jsonl"
    Simulation(sc, "ssp", trace_path=a).run()
    Simulation(sc, "ssp", trace_path=b).run()
    assert a.read_bytes() == b.read_bytes()


def test_every_worker_gone_for_good_ends_the_run():
    sc = scenario([{"worker": w, "leave_s": 0.05} for w in range(4)])
    s = Simulation(sc, "bsp").run().summary
    assert s["stop_reason"] == "no workers left" and s["wall_time_s"] == pytest.approx(0.05)


def test_a_run_with_nobody_left_waits_for_a_join():
    sc = scenario([{"worker": w, "leave_s": 0.05} for w in range(3)] + [{"worker": 3, "leave_s": 0.05, "join_s": 1.0}])
    s = Simulation(sc, "bsp").run().summary
    assert s["stop_reason"] == "max_steps" and s["wall_time_s"] > 1.0


def test_a_policy_that_takes_no_joins_is_refused_in_one_line():
    sc = scenario(REJOIN)
    with pytest.raises(BadInput, match="cannot take a worker that joins") as e:
        Simulation(sc, "streaming-diloco")
    assert "\n" not in str(e.value)
    with pytest.raises(BadInput, match="cannot take a worker that joins"):
        policy_labels(sc, ["bsp", "streaming-diloco"])
    Simulation(scenario([{"worker": 1, "leave_s": 0.1}]), "streaming-diloco")  # leaving alone is fine


def test_membership_on_real_processes_and_on_the_collective_path():
    sc = scenario(REJOIN)
    assert policy_labels(sc, ["bsp"], driver="dist") == ["bsp"]  # (a worker that comes back: hetsync run)
    assert policy_labels(scenario(LATE), ["bsp"], driver="dist") == ["bsp"]  # (it leaves the group as it forms)
    with pytest.raises(BadInput, match="peer to peer"):
        policy_labels(sc, ["p2p-random"], driver="dist")
    with pytest.raises(BadInput, match="own .*hetsync launch"):
        policy_labels(sc, ["bsp"], driver="loop")
    with pytest.raises(BadInput, match="path=collective"):
        Simulation(sc, "bsp", path="collective")


@pytest.mark.parametrize("spec", ["bsp", "asp", "local-sgd:H=2"])
def test_membership_works_with_sharded_servers_and_the_server_s_messages(spec, tmp_path):
    sc = scenario([*REJOIN, *LATE], server_s_per_message=0.0005, control_latency=True, latency_s=0.001)
    for servers in (1, 2):
        s, records = run(sc, spec, tmp_path, servers=servers)
        assert s["stop_reason"] == "max_steps"
        assert s["steps"] == s["applied_steps"] + s["dropped_steps"] + s["outstanding_steps"]
        assert len(s["workers_joined"]) == 2
