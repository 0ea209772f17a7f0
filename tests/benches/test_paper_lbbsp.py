import json

from hetsync.benches.paper_lbbsp import short_label
from hetsync.cli import main


def test_bench_paper_lbbsp_short_run_prints_rows_and_writes_json_doc_and_plots(tmp_path, capsys):
    out, docs, path = tmp_path / "runs", tmp_path / "docs", tmp_path / "rows.json"
    argv = ["bench", "paper-lbbsp", "--seeds", "0", "--set", "max_time_s=0.6", "--set", "workload=digits-logreg"]
    argv += ["--out", str(out), "--docs", str(docs), "--json", str(path)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "hetsync bench paper-lbbsp" in printed and "lb-bsp(variant=cpu)" in printed
    rows = {r["metric"]: r for r in json.loads(path.read_text())}
    assert "lbbsp-cpu lb-bsp(variant=cpu): samples per second" in rows
    assert "lbbsp-gpu lb-bsp(variant=gpu,max_batch=caps): compute share" in rows
    assert "lbbsp-cpu lb-bsp(variant=cpu): wait share, jitter 0" in rows  # the noise-free diagnosis ran
    results = json.loads((out / "results.json").read_text())
    assert [r["scenario"] for r in results["scenarios"]] == ["lbbsp-cpu", "lbbsp-gpu"]
    cpu = results["scenarios"][0]
    lb = next(a for a in cpu["aggregate"] if a["label"] == "lb-bsp(variant=cpu)")
    assert lb["loaded_batch_on"] is not None and lb["move_early"] is not None
    assert results["runtime"] is None
    doc = (docs / "results-lbbsp.md").read_text()
    assert "54%" in doc and "| `lb-bsp-static` |" in doc and "--seeds 0" in doc
    for name in ("lbbsp-cpu-batches.png", "lbbsp-gpu-batches.png", "lbbsp-cpu-accuracy.png"):
        assert (docs / "img" / name).stat().st_size > 0, name


def test_bench_paper_lbbsp_bad_input_exits_2(capsys):
    assert main(["bench", "paper-lbbsp", "--seeds", "0,x", "--no-docs"]) == 2
    assert "--seeds" in capsys.readouterr().err
    assert main(["bench", "paper-lbbsp", "--scenarios", "nope", "--no-docs"]) == 2


def test_short_label():
    assert short_label("lb-bsp(variant=gpu,max_batch=512/512/256/256)") == "lb-bsp(variant=gpu,max_batch=caps)"
    assert short_label("lb-bsp(variant=cpu,max_batch=64)") == "lb-bsp(variant=cpu,max_batch=64)"
