import json

from hetsync.benches import experiment as ex
from hetsync.benches.paper_lbbsp import short_label
from hetsync.cli import main


def test_bench_paper_lbbsp_short_run_prints_rows_and_writes_json_doc_and_plots(tmp_path, capsys):
    out, docs, path = tmp_path / "runs", tmp_path / "docs", tmp_path / "rows.json"
    argv = ["bench", "paper-lbbsp", "--seeds", "0", "--set", "max_time_s=0.6", "--set", "workload=digits-logreg"]
    argv += ["--out", str(out), "--docs", str(docs), "--json", str(path)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "hetsync bench paper-lbbsp" in printed and "lb-bsp(variant=cpu)" in printed
    rows = json.loads(path.read_text())
    cells = {(r.get("scenario"), r.get("policy"), r["metric"]): r for r in rows if "without" not in r["setting"]}
    assert ("lbbsp-cpu", "lb-bsp(variant=cpu)", "samples/s") in cells
    assert cells[("lbbsp-gpu", "lb-bsp(variant=gpu,max_batch=caps)", "compute share")]["unit"] == "%"
    assert cells[("lbbsp-cpu", "bsp", "final accuracy")]["shown"].count("±") == 0  # one seed: the value alone
    calm = [r for r in rows if "without step-time noise" in r["setting"] and r["metric"] == "wait share"]
    assert "lb-bsp(variant=cpu)" in [r["policy"] for r in calm]  # the noise-free diagnosis ran
    assert "samples/s ÷ bsp's" in printed and "± 0.000" not in printed
    results = json.loads((out / "results.json").read_text())
    assert [r["scenario"] for r in results["scenarios"]] == ["lbbsp-cpu", "lbbsp-gpu"]
    cpu = results["scenarios"][0]
    lb = next(a for a in cpu["aggregate"] if a["label"] == "lb-bsp(variant=cpu)")
    assert lb["loaded_batch_on"] is not None and lb["move_early"] is not None
    assert results["runtime"] is None
    doc = (docs / "results-lbbsp.md").read_text()
    assert "54%" in doc and "| `lb-bsp-static` |" in doc and "--seeds 0" in doc
    assert "± 0.000" not in doc and "| learning job | `digits-logreg`" in doc
    for name in ("lbbsp-cpu-batches.png", "lbbsp-gpu-batches.png", "lbbsp-cpu-accuracy.png"):
        assert (docs / "img" / name).stat().st_size > 0, name
        assert (out / "img" / name).stat().st_size > 0, name  # the page and its plots are under --out too
    assert (out / "results-lbbsp.md").read_text() == doc


def test_bench_paper_lbbsp_bad_input_exits_2(capsys):
    assert main(["bench", "paper-lbbsp", "--seeds", "0,x", "--no-docs"]) == 2
    assert "--seeds" in capsys.readouterr().err
    assert main(["bench", "paper-lbbsp", "--scenarios", "nope", "--no-docs"]) == 2


def test_short_label():
    assert short_label("lb-bsp(variant=gpu,max_batch=512/512/256/256)") == "lb-bsp(variant=gpu,max_batch=caps)"
    assert short_label("lb-bsp(variant=cpu,max_batch=64)") == "lb-bsp(variant=cpu,max_batch=64)"


def test_the_gpu_signal_variant_keeps_the_cluster_and_takes_the_signal_recipe():
    from hetsync.scenario import load_scenario

    sc, base, ref = load_scenario("lbbsp-gpu-signal"), load_scenario("lbbsp-gpu"), load_scenario("lbbsp-cpu-signal")
    assert sc.job.workload == "signal1d-cnn" and sc.job.policies == base.job.policies and sc.timing.device == "gpu"
    for key in ("workers", "batch_size", "fixed_s", "per_sample_s", "slowdown", "saturation_batch", "max_batch"):
        assert sc.setting(key) == base.setting(key), key
    assert (sc.cluster.bandwidth_Bps, sc.cluster.server_bandwidth_Bps, sc.job.model_bytes) == (
        base.cluster.bandwidth_Bps,
        base.cluster.server_bandwidth_Bps,
        base.job.model_bytes,
    )
    assert (sc.job.lr, sc.job.optimizer, sc.job.clip_norm, sc.job.schedule.gamma) == (
        ref.job.lr,
        ref.job.optimizer,
        ref.job.clip_norm,
        0.1,
    )


def test_the_runtime_section_reports_the_batches_the_workers_computed():
    from hetsync.benches import paper_lbbsp

    bsp = {"label": "bsp", "rounds_per_s": 3.21, "compute_share": 0.5, "wait_share": 0.25, "distinct_batches": [64]}
    lb = {"label": "lb-bsp", "rounds_per_s": 4.5, "compute_share": 0.7, "wait_share": 0.1}
    lb["distinct_batches"] = list(range(20, 120, 10))
    rt = {
        "scenario": {**paper_lbbsp.RUNTIME_SCENARIO, "max_time_s": 6.0},
        "host_time_s": 41.0,
        "runs": [bsp | {"batches": {}}, lb | {"batches": {"loaded_batch_on": 31.5, "loaded_batch_off": 80.25}}],
    }
    results = {"host_time_s": 50.0, "seeds": [0], "scenarios": [], "runtime": rt}
    plots = {"runtime:batches": "img/lbbsp-runtime-batches.png"}
    page = ex.fill_page(paper_lbbsp.PAGE, paper_lbbsp.page_values(results, plots), command="hetsync bench paper-lbbsp")
    text = page[page.index("## On real processes") : page.index("## What the numbers say")]
    assert "## On real processes" in text and "(period 6 s, on for 3 s)" in text and "6 s per policy (41 s" in text
    assert "| `bsp` | 3.21 | 50.0% | 25.0% | — | 64 |" in text
    assert "| `lb-bsp` | 4.5 | 70.0% | 10.0% | 31.5 / 80.2 | 10 sizes, 20–110 |" in text
    assert text.rstrip().endswith("![runtime batch sizes](img/lbbsp-runtime-batches.png)")
