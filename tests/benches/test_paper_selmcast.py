"""Smoke test of ``hetsync bench paper-selmcast`` on a tiny run, and its arithmetic."""

from __future__ import annotations

import json

import pytest

from hetsync.benches import BENCHES, paper_selmcast
from hetsync.benches import experiment as ex
from hetsync.cli import main
from hetsync.scenario import load_scenario


def test_tiny_run_prints_rows_writes_results_and_docs(tmp_path, capsys):
    out, docs, rows_json = tmp_path / "out", tmp_path / "docs", tmp_path / "rows.json"
    argv = ["bench", "paper-selmcast", "--out", str(out), "--docs", str(docs), "--json", str(rows_json)]
    argv += ["--policies", "p2p-random,selmcast,selmcast:sync=ssp,p2p-random:sync=ssp"]
    argv += ["--set", "workers=6", "--set", "max_time_s=60", "--set", "model_bytes=20000000", "--windows", "0,0.05"]
    argv += ["--floors", "none"]
    assert main(argv) == 0
    assert "paper-selmcast" in BENCHES
    results = json.loads((out / "results.json").read_text())
    assert [r["scenario"] for r in results] == ["p2p-bw", "p2p-homogeneous"]
    for res in results:
        assert set(res["ratios"]) == {"bsp: selmcast vs p2p-random", "ssp: selmcast vs p2p-random"}
        pols = res["policies"]
        assert pols["p2p-random(sync=bsp,p=2)"]["mean_receivers"] == 2
        assert pols["selmcast(sync=bsp,p=2,bandwidth=worst,floor=1.0)"]["mean_receivers"] >= 2
        for name, r in res["ratios"].items():
            sync = name.split(":")[0]
            sel = next(p for p in pols.values() if p["policy"] == "selmcast" and p["sync"] == sync)
            rnd = next(p for p in pols.values() if p["policy"] == "p2p-random" and p["sync"] == sync)
            assert r["receivers_ratio"] == pytest.approx(sel["mean_receivers"] / rnd["mean_receivers"])
            assert r["sync_speedup"] == pytest.approx(rnd["sync_s"] / sel["sync_s"])
    rows = json.loads(rows_json.read_text())
    assert any(r["policy"] == "bsp: selmcast vs p2p-random" and r["metric"] == "receivers" for r in rows)
    assert all(r["unit"] == "%" for r in rows if r["metric"] == "compute share")
    assert (out / "results-selmcast.md").read_text() == (docs / "results-selmcast.md").read_text()
    assert (out / "img" / "selmcast-p2p-bw-sim-exchange.png").stat().st_size > 0  # plots under --out too
    text = (docs / "results-selmcast.md").read_text()
    assert "| ssp: selmcast vs p2p-random |" in text and "## p2p-bw (simulator, seeds 0)" in text
    for kind in ("accuracy", "exchange", "shares"):
        assert (docs / "img" / f"selmcast-p2p-bw-sim-{kind}.png").stat().st_size > 0
    assert "p2p-bw seed 0 · selmcast(sync=bsp" in capsys.readouterr().out
    # the ssp window sweep: p2p-random, then selmcast at each window, ratios to random's receivers
    sweep = json.loads((out / "windows.json").read_text())
    assert sweep["baseline"]["label"] == "p2p-random(sync=ssp,s=3,p=2)"
    assert [p["window_s"] for p in sweep["windows"]] == [0.0, 0.05]
    assert sweep["windows"][1]["label"] == "selmcast(sync=ssp,s=3,p=2,bandwidth=worst,window_s=0.05,floor=1.0)"
    for p in sweep["windows"]:
        assert p["receivers_ratio"] == pytest.approx(p["mean_receivers"] / sweep["baseline"]["mean_receivers"])
    assert "## SSP planning window (p2p-bw, simulator, seeds 0)" in text
    assert "| selmcast(sync=ssp,s=3,p=2,bandwidth=worst,window_s=0.05,floor=1.0) | 0.05 s |" in text
    assert any(r["metric"] == "receivers vs random" for r in rows)


def test_tiny_floor_comparison_covers_both_scenarios_and_mixings(tmp_path):
    out, docs = tmp_path / "out", tmp_path / "docs"
    argv = ["bench", "paper-selmcast", "--out", str(out), "--docs", str(docs), "--scenarios", "p2p-bw"]
    argv += ["--policies", "p2p-random", "--windows", "none", "--floors", "0,0.5"]
    argv += ["--set", "workers=6", "--set", "max_time_s=40", "--set", "model_bytes=20000000"]
    assert main(argv) == 0
    fair = json.loads((out / "floors.json").read_text())
    assert [(c["scenario"], c["mixing"]) for c in fair["cases"]] == [
        ("p2p-bw-skew", "equal"),
        ("p2p-bw-skew", "push-sum"),
        ("p2p-bw", "equal"),
        ("p2p-bw", "push-sum"),
    ]
    for case in fair["cases"]:
        rows = {(r["policy"], r["sync"], r["floor"]): r for r in case["rows"]}
        assert sorted(rows, key=str) == sorted(
            [(p, s, f) for s in ("bsp", "ssp") for p, f in (("p2p-random", None), ("selmcast", 0), ("selmcast", 0.5))],
            key=str,
        )
        for (_, sync, _), r in rows.items():
            base = rows[("p2p-random", sync, None)]
            assert r["metric_gain"] == pytest.approx(r["final_metric"] - base["final_metric"])
            assert r["round_speedup"] == pytest.approx(base["mean_round_s"] / r["mean_round_s"])
            assert 0 <= r["least_served"] <= r["most_served"]
        # the floor holds through the simulator: under bsp every worker gets a copy every round
        assert rows[("selmcast", "bsp", 0.5)]["least_served"] >= 1
        assert rows[("p2p-random", "bsp", None)]["mean_receivers"] == 2
    text = (docs / "results-selmcast.md").read_text()
    assert "## Fairness floor on label-skewed shards (simulator, seeds 0)" in text
    assert "| selmcast(sync=bsp,p=2,bandwidth=worst,floor=0.5) | push-sum |" in text
    mixing = (docs / "results-p2p-mixing.md").read_text()
    assert "Generated by `hetsync bench paper-selmcast" in mixing and "**p2p-bw-skew**" in mixing
    assert (docs / "img" / "selmcast-floors.png").stat().st_size > 0


@pytest.mark.parametrize("bad", ["x", "-1", "1.5", "0,nan"])
def test_bad_floors_exit_2_naming_the_option(bad, tmp_path, capsys):
    argv = ["bench", "paper-selmcast", "--out", str(tmp_path), "--floors", bad, "--scenarios", "p2p-bw"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--floors" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("bad", ["x", "-1", "inf", "0,nan"])
def test_bad_windows_exit_2_naming_the_option(bad, tmp_path, capsys):
    argv = ["bench", "paper-selmcast", "--out", str(tmp_path), "--windows", bad, "--scenarios", "p2p-bw"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--windows" in err and len(err.strip().splitlines()) == 1


def test_sync_per_step_is_the_time_not_computing_per_step():
    run = {"wall_time_s": 10.0, "per_worker": {"compute_s": [4.0, 8.0], "steps": [2, 4]}}
    assert ex.sync_per_step_s(run) == pytest.approx((6.0 / 2 + 2.0 / 4) / 2)


@pytest.mark.parametrize("name", paper_selmcast.SCENARIOS)
def test_the_scenarios_are_the_issues_settings(name):
    sc = load_scenario(name)
    assert sc.cluster.workers == 16 and sc.job.model_bytes == 100_000_000
    if name == "p2p-bw":
        assert (
            min(sc.cluster.bandwidth_Bps) == 1.25e7 and max(sc.cluster.bandwidth_Bps) == 1.25e9
        )  # 100 Mb/s .. 10 Gb/s
        assert sc.cluster.link_load is not None and len(sc.cluster.link_load.workers) == 8
    else:
        assert set(sc.cluster.bandwidth_Bps) == {1.25e8} and sc.cluster.link_load is None
