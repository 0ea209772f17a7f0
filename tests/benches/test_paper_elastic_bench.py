import json

from hetsync.cli import main


def test_bench_paper_elastic_short_run_prints_rows_and_writes_json_and_doc(tmp_path, capsys):
    out, docs, path = tmp_path / "runs", tmp_path / "docs", tmp_path / "rows.json"
    argv = ["bench", "paper-elastic", "--policies", "bsp,asp,elastic-bsp:R=4", "--seeds", "0,1", "--readings", "none"]
    argv += ["--set", "max_time_s=1.5", "--set", "workload=digits-logreg"]
    argv += ["--out", str(out), "--docs", str(docs), "--json", str(path)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "hetsync bench paper-elastic" in printed and "elastic-bsp(R=4)" in printed
    assert "within=local" not in printed  # --readings none: no second experiment
    rows = json.loads(path.read_text())
    cells = {(r.get("policy"), r["metric"]): r for r in rows}
    assert ("elastic-bsp(R=4)", "final accuracy") in cells and cells[("bsp", "compute share")]["unit"] == "%"
    assert " ± " in cells[("bsp", "final accuracy")]["shown"]  # two seeds: mean ± sd
    calm = [r for r in rows if "without step-time noise" in r["setting"] and r["metric"] == "wait share"]
    assert "elastic-bsp(R=4)" in [r["policy"] for r in calm]  # the noise-free diagnosis ran
    assert "speed-up over bsp" in printed and "compute share (%)" in printed  # policy x metric tables
    results = json.loads((out / "results.json").read_text())
    assert results["seeds"] == [0, 1] and len(results["aggregate"]) == 3
    counted = {r["label"]: (r["barriers"], r["updates"]) for r in results["runs"]["0"]}  # from the traces
    assert counted["bsp"][0] > 0 and counted["asp"][0] == 0, counted
    assert (out / "seed-0" / "summary.json").is_file() and (out / "seed-1" / "accuracy.png").is_file()
    doc = (docs / "results-elastic.md").read_text()
    assert "| `elastic-bsp(R=4)` |" in doc and "1.77×" in doc and "--seeds 0,1" in doc
    assert (docs / "img" / "elastic-accuracy.png").is_file() and (docs / "img" / "elastic-shares.png").is_file()
    assert "| learning job | `digits-logreg`" in doc and "1.5 virtual seconds per run" in doc  # what ran
    assert "Two readings of a superstep" not in doc and "--readings none" in doc
    page = (out / "results-elastic.md").read_text()  # the page is always written under --out too
    assert page == doc and (out / "img" / "elastic-accuracy.png").is_file()


def test_bench_paper_elastic_bad_seeds_exit_2(capsys):
    assert main(["bench", "paper-elastic", "--seeds", "0,x", "--no-docs"]) == 2
    assert "--seeds" in capsys.readouterr().err


def test_bench_paper_elastic_runs_both_readings_of_a_superstep_and_judges_the_claims(tmp_path, capsys):
    out, docs = tmp_path / "runs", tmp_path / "docs"
    argv = ["bench", "paper-elastic", "--policies", "bsp", "--seeds", "0,1", "--no-diagnosis"]
    argv += ["--readings", "elastic-4", "--set", "max_time_s=1.5", "--set", "workload=digits-logreg"]
    argv += ["--out", str(out), "--docs", str(docs)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "two readings of a superstep: elastic-4" in printed and "elastic-bsp(R=60,within=local)" in printed
    results = json.loads((out / "results.json").read_text())
    (reading,) = results["readings"]
    assert reading["scenario"] == "elastic-4" and reading["seeds"] == [0, 1]
    by_label = {a["label"]: a for a in reading["aggregate"]}
    assert list(by_label) == [
        "bsp",
        "elastic-bsp(R=15)",
        "elastic-bsp(R=15,within=local)",
        "elastic-bsp(R=60)",
        "elastic-bsp(R=60,within=local)",
    ]
    assert [by_label[k]["within"] for k in by_label] == [None, "async", "local", "async", "local"]
    assert by_label["bsp"]["faster"] is None and by_label["bsp"]["thr_vs_bsp"] == 1.0
    assert all(isinstance(a["faster"], bool) and isinstance(a["accurate"], bool) for a in list(by_label.values())[1:])
    # the local reading pushes once per superstep: fewer updates than steps, none stale
    local = [r for r in reading["runs"]["0"] if r["label"] == "elastic-bsp(R=15,within=local)"][0]
    assert local["updates"] < local["steps"] and local["max_staleness"] == 0
    assert (out / "readings" / "elastic-4" / "seed-1" / "summary.json").is_file()
    doc = (docs / "results-elastic.md").read_text()
    assert "## Two readings of a superstep" in doc and "| `elastic-bsp(R=60,within=local)` | local |" in doc
    assert "(img/elastic-readings-elastic-4-accuracy.png)" in doc
    assert (docs / "img" / "elastic-readings-elastic-4-accuracy.png").is_file()
    assert "--readings elastic-4" in doc  # the page's command names what differs from the defaults


def test_claims_are_judged_as_declared_before_the_runs():
    from hetsync.benches.paper_elastic import claims

    bsp = {"policy": "bsp", "reached": 3, "final_metric_mean": 0.920, "final_metric_sd": 0.007}

    def agg(speedup, reached, final):
        return {"policy": "elastic-bsp", "speedup_vs_bsp_mean": speedup, "reached": reached, "final_metric_mean": final}

    assert claims(bsp, bsp) == {"faster": None, "accurate": None}
    assert claims(agg(1.57, 3, 0.908), bsp) == {"faster": True, "accurate": False}  # below 0.920 - 0.007
    assert claims(agg(1.2, 3, 0.914), bsp) == {"faster": True, "accurate": True}  # within BSP's sd
    assert claims(agg(1.0, 1, 0.696), bsp) == {"faster": False, "accurate": False}  # not faster, fewer seeds
    assert claims(agg(1.5, 2, 0.95), bsp)["faster"] is False  # missed a seed BSP reached the target on
    never = bsp | {"reached": 0}
    assert claims(agg(None, 2, 0.9), never)["faster"] is True  # reached it where BSP never did
    assert claims(agg(None, 0, 0.9), never)["faster"] is False
    assert claims(agg(1.2, 3, 40.0), bsp | {"final_metric_mean": 41.0, "final_metric_sd": 2.0}, maximize=False)[
        "accurate"
    ]  # a metric to minimize (perplexity): at most BSP's mean plus its sd
