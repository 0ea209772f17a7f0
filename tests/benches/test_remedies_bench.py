import json

import pytest

from hetsync.benches import remedies as bench
from hetsync.cli import main
from hetsync.errors import BadInput
from hetsync.scenario import load_scenario


def test_declared_policies_keep_corrected_momentum_to_sgd_momentum_and_give_inner_adamw_a_small_rate():
    sgd = bench.policies_for(load_scenario("elastic-4-signal"))
    assert "asp:momentum=corrected" in sgd and "dssp:momentum=corrected" in sgd
    assert "diloco:H=10:inner_lr=0.01" in sgd and "streaming-diloco:inner_lr=0.01" in sgd and sgd[0] == "bsp"
    adamw = bench.policies_for(load_scenario("lm-8"))
    assert not any("momentum=corrected" in s for s in adamw)  # AdamW: the policy refuses it
    assert "diloco:H=10" in adamw and "ssp:s=3:compensate=0.04" in adamw
    assert len(sgd) == len(bench.POLICIES) and len(adamw) == len(bench.POLICIES) - 3


def test_bench_short_run_runs_every_declared_policy_and_writes_the_page(tmp_path, capsys):
    out, docs, rows = tmp_path / "runs", tmp_path / "docs", tmp_path / "rows.json"
    argv = ["bench", "remedies", "--scenarios", "lm-8", "--seeds", "3", "--jobs", "1"]
    argv += ["--set", "max_time_s=0.2", "--set", "workers=2"]
    argv += ["--out", str(out), "--docs", str(docs), "--json", str(rows)]
    assert main(argv) == 0
    assert "hetsync bench remedies" in capsys.readouterr().out
    results = json.loads((out / "results.json").read_text())
    (case,) = results["cases"]
    assert case["scenario"] == "lm-8" and case["seeds"] == [3]
    labels = [a["label"] for a in case["aggregate"]]
    declared = bench.policies_for(load_scenario("lm-8"))
    assert case["policies"] == list(declared)
    assert len(labels) == len(declared) + 2  # and ASP, SSP(3) at lr / N
    assert labels[-2:] == ["asp lr/N", "ssp(s=3) lr/N"]
    cells = {(r.get("policy"), r["metric"]): r for r in json.loads(rows.read_text())}
    assert cells[("bsp", "speed-up over bsp")]["value"] == 1.0
    doc = (docs / bench.DOC_NAME).read_text()
    assert "| `asp(lr_scale=inverse)` |" in doc and "| `ssp(s=3) lr/N` |" in doc and "--seeds 3" in doc
    assert (docs / "img" / "remedies-lm-8.png").is_file()
    assert (out / bench.DOC_NAME).read_text() == doc


def test_seeds_of_cuts_a_scenario_to_some_seeds():
    assert bench._seeds_of("lm-8=0,1") == ("lm-8", (0, 1))
    with pytest.raises(BadInput, match="SCENARIO=SEEDS"):
        bench._seeds_of("lm-8")
