import json

from hetsync.benches import async_local_sgd as bench
from hetsync.cli import main
from hetsync.scenario import load_scenario


def test_declared_policies_give_the_inner_adamw_a_small_rate_next_to_an_sgd_tuned_lr():
    sgd = bench.policies_for(load_scenario("default"))
    assert "diloco:H=10:inner_lr=0.01" in sgd and "async-local-sgd:H=10:inner_lr=0.01" in sgd
    assert "local-sgd:H=4" in sgd and sgd[0] == "bsp"
    assert bench.policies_for(load_scenario("lm-8")) == bench.POLICIES  # AdamW scenario: its own lr


def test_better_needs_as_many_seeds_at_the_target_a_faster_mean_and_no_worse_final_metric():
    def agg(reached, speedup, final, sd=0.01):
        return {"reached": reached, "speedup_vs_bsp_mean": speedup, "final_metric_mean": final, "final_metric_sd": sd}

    assert bench.better(agg(3, 1.5, 0.95), agg(3, 1.2, 0.95), minimize=False)
    assert not bench.better(agg(3, 1.1, 0.95), agg(3, 1.2, 0.95), minimize=False)  # slower
    assert not bench.better(agg(2, 2.0, 0.95), agg(3, 1.2, 0.95), minimize=False)  # fewer seeds reached it
    assert not bench.better(agg(3, 1.5, 0.90), agg(3, 1.2, 0.95), minimize=False)  # less accurate
    assert bench.better(agg(1, 1.0, 2.9), agg(0, None, 3.0), minimize=True)  # perplexity: lower is better
    assert not bench.better(agg(3, 1.5, 3.5), agg(3, 1.2, 3.0), minimize=True)
    assert bench.better(None, agg(3, 1.2, 0.95), minimize=False) is None


def test_bench_short_run_writes_results_and_the_page(tmp_path, capsys):
    out, docs, rows = tmp_path / "runs", tmp_path / "docs", tmp_path / "rows.json"
    argv = ["bench", "async-local-sgd", "--scenarios", "default", "--seeds", "3"]
    argv += ["--set", "max_time_s=0.5", "--set", "workload=digits-logreg", "--set", "workers=4"]
    argv += ["--out", str(out), "--docs", str(docs), "--json", str(rows)]
    assert main(argv) == 0
    assert "hetsync bench async-local-sgd" in capsys.readouterr().out
    cells = {(r.get("policy"), r["metric"]): r for r in json.loads(rows.read_text())}
    assert ("async-local-sgd(H=10,inner_lr=0.01)", "speed-up over diloco") in cells
    assert cells[("diloco(H=10,inner_lr=0.01)", "speed-up over diloco")]["value"] == 1.0
    results = json.loads((out / "results.json").read_text())
    (case,) = results["cases"]
    assert case["scenario"] == "default" and case["seeds"] == [3]
    labels = [a["label"] for a in case["aggregate"]]
    assert labels[:4] == ["bsp", "local-sgd(H=4)", "diloco(H=10,inner_lr=0.01)", "async-local-sgd(H=10,inner_lr=0.01)"]
    assert len(labels) == len(bench.POLICIES)
    alsgd = case["aggregate"][3]
    assert alsgd["wait_share_mean"] < 0.05  # no barrier
    doc = (docs / bench.DOC_NAME).read_text()
    assert "| `async-local-sgd(H=10,inner_lr=0.01)` |" in doc and "--seeds 3" in doc
    assert "| learning job | `digits-logreg`" in doc
    assert (docs / "img" / "alsgd-default-accuracy.png").is_file()
    assert (out / bench.DOC_NAME).read_text() == doc
