"""The server's messages in the simulator: ``server_s_per_message`` (the
server handles one message at a time, in order) and ``control_latency``
(commands and reports travel ``latency_s``), against hand-computed runs;
both off, the simulator is as before."""

from __future__ import annotations

import json

import pytest

from hetsync.errors import BadInput
from hetsync.scenario import scenario_from_dict
from hetsync.sim.engine import simulate

STEP_S = 0.01  # every step: fixed 10 ms, no noise


def cluster(**keys):
    raw = {
        "workers": 4,
        "workload": "digits-mlp",
        "batch_size": 8,
        "max_steps": 2,
        "fixed_s": STEP_S,
        "per_sample_s": 0.0,
        "bandwidth_Bps": float("inf"),
        "latency_s": 0.0,
        "policies": ["bsp"],
    }
    return scenario_from_dict(raw | keys)


def records(path, ev):
    return [r for r in map(json.loads, path.read_text().splitlines()) if r["ev"] == ev]


def test_a_bsp_round_queues_its_pushes_and_pulls_at_the_server(tmp_path):
    """4 workers, free links, server time S per message. The server sends
    the 4 start commands one at a time (at S, 2S, 3S, 4S); delays of 3S, 2S,
    S, 0 make the 4 steps end together at T = 4S + 10 ms. The server then
    handles the 4 pushes one after the other (T+S .. T+4S), applies when the
    4th is handled, and sends the 4 models one at a time (T+5S .. T+8S):
    the last worker starts its second step 2k·S = 8S after T, where a free
    server lets all 4 start at T."""
    s = 0.001
    delays = [3 * s, 2 * s, s, 0.0]
    t = 4 * s + STEP_S
    trace = tmp_path / "t.jsonl"
    simulate(cluster(server_s_per_message=s, delay_s=delays), "bsp", trace_path=trace, math=False)
    first = sorted(r["t"] for r in records(trace, "compute") if r["step"] == 0)
    assert first == pytest.approx([s, 2 * s, 3 * s, 4 * s])
    pushes = sorted(records(trace, "push"), key=lambda r: r["end"])[:4]
    assert [p["t"] for p in pushes] == pytest.approx([t] * 4)
    assert [p["end"] for p in pushes] == pytest.approx([t + i * s for i in (1, 2, 3, 4)])
    assert records(trace, "apply")[0]["t"] == pytest.approx(t + 4 * s)
    pulls = sorted(records(trace, "pull"), key=lambda r: r["t"])[:4]
    assert [p["t"] for p in pulls] == pytest.approx([t + i * s for i in (5, 6, 7, 8)])
    second = sorted(r["t"] for r in records(trace, "compute") if r["step"] == 1)
    assert second == pytest.approx([t + i * s for i in (5, 6, 7, 8)])
    # a free server: the steps start at 0, end at 10 ms + delay, and the second ones start when the last has ended
    free = tmp_path / "free.jsonl"
    simulate(cluster(delay_s=delays), "bsp", trace_path=free, math=False)
    assert sorted(r["t"] for r in records(free, "compute") if r["step"] == 1) == pytest.approx([STEP_S + 3 * s] * 4)


def test_control_latency_charges_every_command_and_report_one_latency(tmp_path):
    """WBSP, one worker, free links, latency L. The start command travels L;
    after the step (T) its report travels L, the server's push command L,
    the push L; that push closes the round, so the model comes back (L),
    the pull's report goes to the server (L) and the next step command
    comes (L): the second step starts at L + T + 6L. Without
    control_latency the push and the pull alone: T + 2L."""
    lat = 0.002
    sc = cluster(workers=1, latency_s=lat, control_latency=True)
    trace = tmp_path / "t.jsonl"
    simulate(sc, "wbsp", trace_path=trace, math=False)
    starts = [r["t"] for r in records(trace, "compute")]
    assert starts == pytest.approx([lat, lat + STEP_S + 6 * lat])
    plain = tmp_path / "plain.jsonl"
    simulate(cluster(workers=1, latency_s=lat), "wbsp", trace_path=plain, math=False)
    assert [r["t"] for r in records(plain, "compute")] == pytest.approx([0.0, STEP_S + 2 * lat])


def test_both_off_is_the_simulator_as_before(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    simulate(cluster(max_steps=5), "asp", trace_path=a)
    simulate(cluster(max_steps=5, server_s_per_message=0.0, control_latency=False), "asp", trace_path=b)
    assert a.read_bytes() == b.read_bytes()


@pytest.mark.parametrize("policy", ["p2p-allreduce", "p2p-random"])
def test_peer_to_peer_runs_have_no_server_so_the_keys_change_nothing(tmp_path, policy):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    simulate(cluster(max_steps=5, latency_s=0.001), policy, trace_path=a)
    keyed = cluster(max_steps=5, latency_s=0.001, server_s_per_message=0.01, control_latency=True)
    simulate(keyed, policy, trace_path=b)
    assert a.read_bytes() == b.read_bytes()


@pytest.mark.parametrize(
    "key, value",
    [
        ("server_s_per_message", -0.001),
        ("server_s_per_message", float("inf")),
        ("server_s_per_message", "fast"),
        ("control_latency", "yes"),
        ("control_latency", 1),
    ],
)
def test_bad_values_name_the_key(key, value):
    with pytest.raises(BadInput, match=f"'{key}'"):
        cluster(**{key: value})


def test_asp_with_many_fast_workers_saturates_the_server():
    """16 workers of 1 ms steps on free links would make 16,000 ASP updates a
    second; a server that spends S = 0.5 ms on each message, two per update
    (the push in, the model out), makes at most 1 / (2S) = 1,000."""
    s, run_s = 0.0005, 0.5
    sc = cluster(workers=16, fixed_s=0.001, max_steps=None, max_time_s=run_s, server_s_per_message=s)
    updates = simulate(sc, "asp", math=False).summary["updates"]
    assert 0.95 * run_s / (2 * s) <= updates <= run_s / (2 * s)
    free = simulate(cluster(workers=16, fixed_s=0.001, max_steps=None, max_time_s=run_s), "asp", math=False)
    assert free.summary["updates"] > 10 * updates
