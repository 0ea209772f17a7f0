"""Smoke test of ``hetsync bench paper-wbsp`` on a tiny run, and its arithmetic."""

from __future__ import annotations

import json

import pytest

from hetsync.benches import BENCHES, paper_wbsp
from hetsync.cli import main
from hetsync.scenario import load_scenario

LABELS = ["bsp", "ssp(s=40)", "asp", "wbsp", "wbsp-overlap"]


def test_tiny_run_prints_rows_writes_json_results_and_docs(tmp_path, capsys):
    out, docs, rows_json = tmp_path / "out", tmp_path / "docs", tmp_path / "rows.json"
    argv = ["bench", "paper-wbsp", "--out", str(out), "--docs", str(docs), "--json", str(rows_json)]
    argv += ["--scenarios", "wbsp-h1", "--comm-sweep", "1.6e7"]
    argv += ["--set", "max_time_s=1.5", "--set", "workers=4", "--set", "eval_every_s=0.5"]
    assert main(argv) == 0
    assert "paper-wbsp" in BENCHES
    rows = json.loads(rows_json.read_text())
    for scenario in ["wbsp-h1", "wbsp-h2-model-16000000B"]:
        mine = [r for r in rows if r["case"] == scenario]
        assert [r["policy"] for r in mine if r["metric"] == "compute share"] == LABELS
        assert len([r for r in mine if r["metric"] == "final accuracy"]) == 5
        assert len([r for r in mine if "accuracy 0.95" in r["metric"]]) == 5  # reached or not, one row each
        for r in mine:
            assert isinstance(r["value"], (int, float)) and r["unit"] is not None
        assert (out / scenario / "summary.json").is_file()
    for kind in paper_wbsp.PLOTS:
        assert (docs / "img" / f"wbsp-h1-{kind}.png").stat().st_size > 0
    results = json.loads((out / "results.json").read_text())
    assert [r["scenario"] for r in results] == ["wbsp-h1", "wbsp-h2"]
    assert [r["sweep"] for r in results] == [False, True]
    assert results[-1]["model_bytes"] == 16_000_000
    assert [p["label"] for p in results[0]["policies"]] == LABELS
    assert [p["baseline"] for p in results[0]["policies"]] == [True, True, True, False, False]
    assert (docs / "img" / "wbsp-h1-timeline-wbsp-overlap.png").is_file()
    text = (docs / "results-wbsp.md").read_text()
    assert "| wbsp-overlap |" in text and "91%" in text and "60%" in text
    assert "hetsync bench paper-wbsp --scenarios wbsp-h1 --comm-sweep 1.6e7 --set max_time_s=1.5" in text
    assert "| 16 MB | 128 ms |" in text  # the sweep table
    assert "wbsp-h1 seed 0 · wbsp-overlap" in capsys.readouterr().out


@pytest.mark.parametrize("name", paper_wbsp.SCENARIOS)
def test_the_scenarios_are_the_papers_settings(name):
    sc = load_scenario(name)
    delay = {"wbsp-h1": 0.5, "wbsp-h2": 1.0, "wbsp-h3": 1.5}[name]
    assert sc.delay_s == (0.0,) * 4 + (delay,) * 4  # half of the workers sleep
    assert sc.workload == "digits-cnn" and sc.policies == paper_wbsp.POLICIES


def _run(label, tta, seed=0, share=0.5):
    return {
        "policy": label.split("(")[0],
        "label": label,
        "time_to_target_s": tta,
        "compute_share": share,
        "comm_share": 0.1,
        "wait_share": 0.4,
        "target_metric": "accuracy",
        "target_value": 0.95,
        "target_direction": "max",
        "final_metric": 0.9,
        "final_accuracy": 0.9,
        "steps": 100,
        "dropped_steps": 0,
        "updates": 10,
        "max_staleness": 1,
        "host_time_s": 1.0,
        "seed": seed,
    }


def test_ratio_is_against_the_fastest_baseline_and_medians_over_seeds(tmp_path):
    sc = load_scenario("wbsp-h1")
    runs = {
        0: [_run("bsp", 10.0), _run("asp", 4.0), _run("wbsp", 2.0), _run("wbsp-overlap", None)],
        1: [_run("bsp", 3.0), _run("asp", 6.0), _run("wbsp", 6.0), _run("wbsp-overlap", 1.5)],
        2: [_run("bsp", None), _run("asp", 5.0), _run("wbsp", 10.0), _run("wbsp-overlap", 2.5)],
    }
    res = paper_wbsp._aggregate(paper_wbsp.Case(key="h1", scenario="wbsp-h1"), sc, runs, tmp_path)
    by = {p["label"]: p for p in res["policies"]}
    assert res["fastest_baseline"] == {0: "asp", 1: "bsp", 2: "asp"}
    assert by["wbsp"]["tta_vs_fastest_baseline"] == pytest.approx(2.0)  # median of 0.5, 2.0, 2.0
    assert by["wbsp"]["time_to_target_s"] == 6.0
    assert by["bsp"]["time_to_target_s"] is None and by["bsp"]["reached"] == 2
    assert by["wbsp-overlap"]["tta_vs_fastest_baseline"] is None  # not reached with seed 0
    rows = paper_wbsp.rows_of([res])
    assert [r["metric"] for r in rows if r["policy"] == "bsp"] == [
        "compute share",
        "accuracy 0.95 not reached in",
        "final accuracy",
    ]


def test_bad_options_name_themselves():
    assert main(["bench", "paper-wbsp", "--seeds", "0,x", "--no-docs"]) == 2
    assert main(["bench", "paper-wbsp", "--scenarios", "nope", "--no-docs"]) == 2


def test_a_loss_target_labels_the_rows_and_table_with_its_metric(tmp_path):
    sc = load_scenario("wbsp-h1", target={"metric": "loss", "value": 0.3})
    target = {"target_metric": "loss", "target_value": 0.3, "target_direction": "min"}
    runs = {0: [_run("bsp", None) | target | {"final_metric": 0.4567}, _run("wbsp", 3.0) | target]}
    res = paper_wbsp._aggregate(paper_wbsp.Case(key="h1", scenario="wbsp-h1"), sc, runs, tmp_path)
    assert (res["target_metric"], res["target_value"], res["target_direction"]) == ("loss", 0.3, "min")
    rows = paper_wbsp.rows_of([res])
    assert [r["metric"] for r in rows if r["policy"] == "bsp"] == [
        "compute share",
        "loss ≤ 0.3 not reached in",
        "final loss",
    ]
    assert "time to loss ≤ 0.3" in [r["metric"] for r in rows if r["policy"] == "wbsp"]
    table = "\n".join(paper_wbsp._results_table(res))
    assert "| final loss |" in table and "| 0.4567 |" in table
