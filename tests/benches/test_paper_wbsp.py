"""Smoke test of ``hetsync bench paper-wbsp`` on a tiny run, and its arithmetic."""

from __future__ import annotations

import json

import pytest

from hetsync.benches import BENCHES, paper_wbsp
from hetsync.benches.common import scenario_setup
from hetsync.cli import main
from hetsync.scenario import load_scenario

LABELS = ["bsp", "ssp(s=40)", "asp", "wbsp", "wbsp-overlap"]


def test_tiny_run_prints_rows_writes_json_results_and_its_page_under_out_only(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a bench writes into ./docs only when asked (--docs)
    out, rows_json = tmp_path / "out", tmp_path / "rows.json"
    argv = ["bench", "paper-wbsp", "--out", str(out), "--json", str(rows_json)]
    argv += ["--scenarios", "wbsp-h1", "--comm-sweep", "1.6e7"]
    argv += ["--set", "max_time_s=1.5", "--set", "workers=4", "--set", "eval_every_s=0.5"]
    assert main(argv) == 0
    assert "paper-wbsp" in BENCHES
    assert not (tmp_path / "docs").exists()
    rows = json.loads(rows_json.read_text())
    for scenario in ["wbsp-h1", "wbsp-h2-model-16000000B"]:
        mine = [r for r in rows if r["case"] == scenario]
        assert [r["policy"] for r in mine if r["metric"] == "compute share"] == LABELS
        assert all(r["unit"] == "%" for r in mine if r["metric"].endswith("share"))
        assert len([r for r in mine if r["metric"] == "final accuracy"]) == 5
        assert len([r for r in mine if r["metric"] == "time to accuracy 0.95"]) == 5  # reached or not
        for r in mine:  # a number, or None with the text a table shows instead
            assert isinstance(r["value"], (int, float)) or r["value"] is None, r
        assert (out / scenario / "summary.json").is_file()
    for kind in ("accuracy-zoom", "accuracy", "shares"):  # no zoom of a 1.5 s run: it would be the whole plot again
        assert (out / "img" / f"wbsp-h1-{kind}.png").exists() == (kind != "accuracy-zoom")
    assert not (out / "wbsp-h1" / "accuracy-zoom.png").exists()
    results = json.loads((out / "results.json").read_text())
    assert [r["scenario"] for r in results] == ["wbsp-h1", "wbsp-h2"]
    assert [r["sweep"] for r in results] == [False, True]
    assert results[-1]["model_bytes"] == 16_000_000
    assert [p["label"] for p in results[0]["aggregate"]] == LABELS
    assert [p["baseline"] for p in results[0]["aggregate"]] == [True, True, True, False, False]
    assert (out / "img" / "wbsp-h1-timeline-wbsp-overlap.png").is_file()
    text = (out / "results-wbsp.md").read_text()
    assert "| wbsp-overlap |" in text and "91%" in text and "60%" in text
    assert "hetsync bench paper-wbsp --scenarios wbsp-h1 --comm-sweep 1.6e7 --set max_time_s=1.5" in text
    assert "| 16 MB | 128 ms |" in text  # the sweep table
    # the set-up describes the scenario that ran: digits-cnn at lr 0.5 on 4 workers, 1.5 s
    assert "| learning job | CIFAR-10 CNN" in text and "`digits-cnn` (3,818 parameters), batch 32 per worker" in text
    assert "plain SGD, lr 0.5; schedule constant; no clipping" in text and "1.5 virtual seconds per run" in text
    assert "| cluster | " in text and "| 4 simulated workers and a parameter server |" in text
    printed = capsys.readouterr().out
    assert "wbsp-h1 seed 0 · wbsp-overlap" in printed
    assert "compute share (%)" in printed and "± 0.000" not in printed  # one table: policy x metric


def test_the_set_up_follows_the_scenario_signal_variant():
    sc = load_scenario("wbsp-h3-signal")
    res = {
        **{"scenario": sc.name, "case": sc.name, "description": "", "setup": scenario_setup(sc), "aggregate": []},
        **{"target_metric": "accuracy", "target_value": 0.95, "target_direction": "max", "max_time_s": 750.0},
        **{"eval_every_s": 5.0, "seeds": [0], "fastest_baseline": {}, "plots": {}, "timelines": {}},
        **{"sweep": False, "host_time_s": 0.0},
    }
    page = paper_wbsp.render_markdown([res], command="hetsync bench paper-wbsp")
    table = page.split("## Set-up")[1].split("\n## ")[0]
    assert "`signal1d-cnn` (8,010 parameters)" in table and "digits" not in table.split("| here |")[1]
    assert "SGD, momentum 0.9, weight decay 0.0005, lr 0.1" in table and "step decay ×0.1 at steps 300, 450" in table
    assert "gradient clipping at norm 5" in table and "workers 4–7 sleep 1.5 s per step" in table
    assert "750 virtual seconds per run" in table


@pytest.mark.parametrize("name", ["wbsp-h1-signal", "wbsp-h2-signal", "wbsp-h3-signal"])
def test_the_signal_variants_keep_the_cluster_and_the_recipe(name):
    sc, base, ref = load_scenario(name), load_scenario(name.removesuffix("-signal")), load_scenario("wbsp-h1-signal")
    assert (
        sc.job.workload == "signal1d-cnn"
        and sc.cluster.delay_s == base.cluster.delay_s
        and sc.job.policies == base.job.policies
    )
    assert (sc.timing.step, sc.cluster.bandwidth_Bps, sc.job.model_bytes, sc.timing.runtime_timing) == (
        base.timing.step,
        base.cluster.bandwidth_Bps,
        base.job.model_bytes,
        base.timing.runtime_timing,
    )
    assert (sc.job.lr, sc.job.optimizer, sc.job.schedule, sc.job.clip_norm) == (
        ref.job.lr,
        ref.job.optimizer,
        ref.job.schedule,
        ref.job.clip_norm,
    )


@pytest.mark.parametrize("name", paper_wbsp.SCENARIOS)
def test_the_scenarios_are_the_papers_settings(name):
    sc = load_scenario(name)
    delay = {"wbsp-h1": 0.5, "wbsp-h2": 1.0, "wbsp-h3": 1.5}[name]
    assert sc.cluster.delay_s == (0.0,) * 4 + (delay,) * 4  # half of the workers sleep
    assert sc.job.workload == "digits-cnn" and sc.job.policies == paper_wbsp.POLICIES
    assert sc.timing.runtime_timing == "modelled"  # real processes keep the paper's 0.1 s steps and 32 ms transfers


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
    res = paper_wbsp.case_result(paper_wbsp.Case(key="h1", scenario="wbsp-h1"), sc, runs, tmp_path)
    by = {p["label"]: p for p in res["aggregate"]}
    assert res["fastest_baseline"] == {0: "asp", 1: "bsp", 2: "asp"}
    assert by["wbsp"]["tta_vs_fastest_median"] == pytest.approx(2.0)  # median of 0.5, 2.0, 2.0
    assert by["wbsp"]["tta_vs_fastest_mean"] == pytest.approx(1.5) and by["wbsp"]["speedup_pairs"] == 3
    assert by["wbsp"]["tta_median_s"] == 6.0
    assert by["bsp"]["tta_median_s"] is None and by["bsp"]["reached"] == 2
    assert by["wbsp-overlap"]["tta_vs_fastest_median"] is None  # not reached with seed 0
    rows = paper_wbsp.rows_of([res])
    assert [r["metric"] for r in rows if r["policy"] == "bsp"] == [
        "time to accuracy 0.95",
        "TTA ÷ fastest baseline's",
        "final accuracy",
        "compute share",
        "comm share",
        "wait share",
        "max staleness",
    ]
    tta = next(r for r in rows if r["policy"] == "bsp")
    assert tta["value"] is None and tta["shown"] == "not in 150 s (2/3 seeds)"


def test_bad_options_name_themselves():
    assert main(["bench", "paper-wbsp", "--seeds", "0,x", "--no-docs"]) == 2
    assert main(["bench", "paper-wbsp", "--scenarios", "nope", "--no-docs"]) == 2


def test_a_loss_target_labels_the_rows_and_table_with_its_metric(tmp_path):
    sc = load_scenario("wbsp-h1", target={"metric": "loss", "value": 0.3})
    target = {"target_metric": "loss", "target_value": 0.3, "target_direction": "min"}
    runs = {0: [_run("bsp", None) | target | {"final_metric": 0.4567}, _run("wbsp", 3.0) | target]}
    res = paper_wbsp.case_result(paper_wbsp.Case(key="h1", scenario="wbsp-h1"), sc, runs, tmp_path)
    assert (res["target_metric"], res["target_value"], res["target_direction"]) == ("loss", 0.3, "min")
    rows = paper_wbsp.rows_of([res])
    assert [r["metric"] for r in rows if r["policy"] == "bsp"][:3] == [
        "time to loss ≤ 0.3",
        "TTA ÷ fastest baseline's",
        "final loss",
    ]
    assert "time to loss ≤ 0.3" in [r["metric"] for r in rows if r["policy"] == "wbsp"]
    table = "\n".join(paper_wbsp._results_table(res))
    assert "| final loss |" in table and "| 0.4567 |" in table
