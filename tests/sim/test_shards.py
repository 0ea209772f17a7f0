"""Sharded servers in the simulator (``Simulation(servers=S)``, hetsync.driver.shards):
S server nodes, each with the server's link; a push is one flow into each, a
pull one out of each, done when all are. The math is unchanged, the bytes
counted too; what the runtime refuses is refused with the same line."""

from __future__ import annotations

import json

import pytest
import torch

from hetsync.cli import main
from hetsync.driver.shards import shard_ranges
from hetsync.errors import BadInput
from hetsync.scenario import resolve_scenario
from hetsync.sim.engine import Simulation, simulate
from tests.sim.conftest import make_scenario


def _finite_links(**keys):
    """Workers' links 10x the server's: a star whose hub is the bottleneck."""
    return make_scenario(bandwidth_Bps=1e8, server_bandwidth_Bps=1e7, model_bytes=1_000_000, **keys)


@pytest.mark.parametrize("servers", [2, 4])
def test_bsp_trains_the_same_model_and_is_no_slower_on_sharded_servers(servers):
    sc = _finite_links(max_steps=40)
    one = simulate(sc, "bsp")
    many = simulate(sc, "bsp", servers=servers)
    assert many.summary["steps"] == one.summary["steps"] and many.summary["updates"] == one.summary["updates"]
    assert torch.allclose(many.params, one.params, rtol=0, atol=1e-6)
    assert many.summary["final_accuracy"] == pytest.approx(one.summary["final_accuracy"], abs=1e-9)
    assert many.summary["bytes_sent"] == one.summary["bytes_sent"]  # the model's bytes per push and pull, as before
    assert many.summary["wall_time_s"] <= one.summary["wall_time_s"]
    assert many.summary["servers"] == servers and "servers" not in one.summary  # (one server: as before)


def test_an_asynchronous_policy_bound_by_the_servers_link_speeds_up_with_four_shards():
    """8 ASP workers on links 10x the server's, a model that takes 0.1 s on
    the server's link alone and steps of 10 ms: one server moves a push or
    a model at a time's worth of bytes; four move four times as many."""
    sc = _finite_links(workers=8, max_steps=40, per_sample_s=0.0, fixed_s=0.01)
    runs = {s: simulate(sc, "asp", servers=s, math=False).summary for s in (1, 4)}
    rate = {s: r["updates"] / r["wall_time_s"] for s, r in runs.items()}
    assert runs[1]["updates"] == runs[4]["updates"] == 8 * 40
    assert rate[4] / rate[1] > 2.5, rate  # (3.6 when written: virtual time, deterministic)
    assert runs[4]["bytes_sent"] == runs[1]["bytes_sent"]


def test_a_push_is_one_flow_per_shard_of_the_models_bytes(tmp_path):
    """One worker, one step, free compute: the push and the pull each cross
    the server's link as S flows in parallel, of each range's share of the
    bytes — the push lasts the largest share over the server's link."""
    nbytes, bw = 1_000_003, 1e6
    sc = make_scenario(workers=1, max_steps=1, bandwidth_Bps=1e12, server_bandwidth_Bps=bw, model_bytes=nbytes)
    trace = tmp_path / "t.jsonl"
    sim = Simulation(sc, "asp", servers=3, trace_path=trace, math=False)
    sim.run()
    n = sim.workload.n_params
    shares = [nbytes * hi // n - nbytes * lo // n for lo, hi in shard_ranges(n, 3)]
    assert sum(shares) == nbytes
    push = next(r for r in map(json.loads, trace.read_text().splitlines()) if r["ev"] == "push")
    assert push["end"] - push["t"] == pytest.approx(max(shares) / bw)


@pytest.mark.parametrize(
    ("scenario", "spec", "keys", "message"),
    [
        ({}, "asp", {"servers": 0}, r"--servers must be an integer in \[1, 64\], got 0"),
        ({}, "asp", {"servers": 65}, r"--servers must be an integer in \[1, 64\], got 65"),
        ({}, "bsp", {"servers": 2, "path": "collective"}, "--servers 2: the collective path holds no model"),
        ({"clip_norm": 1.0}, "asp", {"servers": 2}, "--servers 2: clip_norm clips by the whole gradient's norm"),
        ({}, "asp:compensate=0.04", {"servers": 2}, "compensates delays against models the shards would split"),
        ({}, "p2p-random", {"servers": 4}, r"--servers 4: p2p-random\(sync=bsp,p=2\) is peer to peer"),
    ],
)
def test_what_shards_cannot_carry_is_refused_in_one_line(scenario, spec, keys, message):
    with pytest.raises(BadInput, match=message) as e:
        Simulation(make_scenario(**scenario), spec, math=False, **keys)
    assert "\n" not in str(e.value)


def test_hetsync_simulate_runs_asp_on_two_sharded_servers(tmp_path, capsys):
    out = tmp_path / "o"
    argv = ["simulate", "-p", "asp", "--servers", "2", "--set", "max_steps=40", "--no-plots", "-o", str(out)]
    assert main(argv) == 0, capsys.readouterr().err
    (run,) = json.loads((out / "summary.json").read_text())
    assert run["servers"] == 2 and run["steps"] == 40 * run["workers"]


def test_hetsync_compare_refuses_what_shards_cannot_carry_before_any_run(tmp_path, capsys):
    out = tmp_path / "o"
    argv = ["compare", "-p", "bsp", "--path", "collective", "--servers", "2", "-o", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--servers 2: the collective path holds no model" in err, err
    assert not (out / "summary.json").exists()


def test_the_runtime_names_are_the_driver_cores():
    from hetsync.driver import shards as core
    from hetsync.runtime import shards as runtime

    for name in ("check_servers", "shard_ranges", "server_rank", "MAX_SERVERS"):
        assert getattr(runtime, name) is getattr(core, name)
    assert resolve_scenario("hetero-4", {}).cluster.workers == 4  # (a built-in scenario the CLI tests use)


def test_fragment_pushes_and_pulls_go_to_the_servers_holding_their_ranges():
    """Streaming DiLoCo's fragments: one flow per server whose range a
    fragment overlaps; the bytes counted are the fragments' as before."""
    sc = _finite_links(max_steps=40)
    one, three = (simulate(sc, "streaming-diloco", servers=s, math=False).summary for s in (1, 3))
    assert three["updates"] == one["updates"] and three["bytes_sent"] == one["bytes_sent"]
    assert three["wall_time_s"] < one["wall_time_s"]
