import json

from hetsync.cli import main


def test_bench_paper_elastic_short_run_prints_rows_and_writes_json_and_doc(tmp_path, capsys):
    out, docs, path = tmp_path / "runs", tmp_path / "docs", tmp_path / "rows.json"
    argv = ["bench", "paper-elastic", "--policies", "bsp,asp,elastic-bsp:R=4", "--seeds", "0,1"]
    argv += ["--set", "max_time_s=1.5", "--set", "workload=digits-logreg"]
    argv += ["--out", str(out), "--docs", str(docs), "--json", str(path)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "hetsync bench paper-elastic" in printed and "elastic-bsp(R=4)" in printed
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
    page = (out / "results-elastic.md").read_text()  # the page is always written under --out too
    assert page == doc and (out / "img" / "elastic-accuracy.png").is_file()


def test_bench_paper_elastic_bad_seeds_exit_2(capsys):
    assert main(["bench", "paper-elastic", "--seeds", "0,x", "--no-docs"]) == 2
    assert "--seeds" in capsys.readouterr().err
