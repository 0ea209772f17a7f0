"""``hetsync bench runtime --path``: the simulator calibrated from a real
trace on either data path (the bench itself starts processes and is run by
hand; these parts need none)."""

from __future__ import annotations

import json

import pytest

from hetsync.benches import runtime as bench
from hetsync.cli import main
from hetsync.sim.engine import Simulation


def fake_trace(path, n=4):
    """Each worker: two steps of 10·(w+1) ms; pushes of 1 ms, pulls of 5 ms."""
    recs = []
    for w in range(n):
        for step in range(2):
            recs.append(
                {"t": 0.0, "ev": "compute", "w": w, "end": 0.01 * (w + 1), "step": step, "batch": 32, "base": 0}
            )
            recs.append(
                {"t": 1.0, "ev": "push", "w": w, "end": 1.001, "id": 0, "kind": "grad", "nbytes": 1, "steps": 1}
            )
            recs.append({"t": 2.0, "ev": "pull", "w": w, "end": 2.005, "version": 1, "nbytes": 1})
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def test_the_calibrated_latency_on_each_path(tmp_path):
    trace = fake_trace(tmp_path / "t.jsonl")
    ps = bench.calibrated_scenario("hetero-4", trace, 4, 10)
    assert ps.cluster.latency_s == pytest.approx(0.003)  # the mean transfer: a round's push and pull take 2 of them
    assert list(ps.cluster.slowdown) == pytest.approx([0.01, 0.02, 0.03, 0.04])
    coll = bench.calibrated_scenario("hetero-4", trace, 4, 10, path="collective")
    assert coll.cluster.latency_s == pytest.approx((0.001 + 0.005) / 6)  # spread over the ring's 2(4−1) phases
    # (so a simulated round communicates as long on either path: a ring of free links costs its latencies)
    rounds = {
        path: Simulation(sc, "bsp", math=False, path=path).run().summary["wall_time_s"]
        for path, sc in (("ps", ps), ("collective", coll))
    }
    assert rounds["collective"] == pytest.approx(rounds["ps"])


def test_a_policy_that_cannot_take_the_path_is_refused_before_anything_starts(tmp_path, capsys, monkeypatch):
    def no_launch(*args, **kwargs):
        raise AssertionError("launched")

    monkeypatch.setattr(bench, "_launch", no_launch)
    argv = ["bench", "runtime", "--path", "collective", "--policies", "bsp,asp", "--out", str(tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "asp cannot use path=collective" in err and "--path collective" in err, err


def test_every_path_by_default_each_with_its_policies():
    import argparse

    args = argparse.Namespace(path="ps,collective", policies=None, calibrate_scenario="hetero-4", nproc=4)
    assert bench.paths_and_policies(args) == {"ps": ["bsp", "asp", "ssp:s=3"], "collective": ["bsp", "lb-bsp"]}
    args.path, args.policies = "collective", "bsp"
    assert bench.paths_and_policies(args) == {"collective": ["bsp"]}
    args.path = "ps,pigeon"
    with pytest.raises(bench.BadInput, match="--path takes ps and collective"):
        bench.paths_and_policies(args)
    assert bench.server_counts(argparse.Namespace(servers="1,2,2")) == [1, 2]
    for bad in ("0", "x", "", "65"):
        with pytest.raises(bench.BadInput, match="--servers takes server counts in 1..64"):
            bench.server_counts(argparse.Namespace(servers=bad))
