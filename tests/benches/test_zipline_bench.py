import json

from hetsync.cli import main


def test_bench_zipline_prints_rows_and_writes_json(tmp_path, capsys):
    path = tmp_path / "zipline.json"
    assert main(["bench", "zipline", "--n", "3,6", "--R", "4,8", "--repeats", "2", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "hetsync bench zipline" in out and "full-gridscan" in out and "n=6 R=8 (s)" in out  # algorithm x cell
    rows = json.loads(path.read_text())
    cells = {(r["policy"], r["metric"]) for r in rows}
    for algo in ("zipline", "zipline-heap", "gridscan", "full-gridscan"):
        assert {(algo, f"n={n} R={r}") for n in (3, 6) for r in (4, 8)} <= cells
    assert all(r["value"] > 0 and r["unit"] in ("s", "x") for r in rows)
    assert sum(1 for r in rows if r["policy"] == "zipline speed-up over full-gridscan") == 4


def test_bench_zipline_skips_cells_over_budget(tmp_path):
    path = tmp_path / "zipline.json"
    assert main(["bench", "zipline", "--n", "4,40", "--R", "5", "--budget-s", "1e-12", "--json", str(path)]) == 0
    rows = json.loads(path.read_text())
    skipped = [r for r in rows if r.get("skipped")]
    # the first cell runs (nothing to estimate from); the larger one is estimated and skipped
    assert skipped and all(r["metric"] == "n=40 R=5" and r["value"] is None for r in skipped)
    assert all(r["shown"].startswith("skipped (est.") and r["estimate_s"] > 0 for r in skipped)


def test_bench_zipline_bad_arguments_exit_2(capsys):
    assert main(["bench", "zipline", "--n", "0"]) == 2
    assert main(["bench", "zipline", "--budget-s", "-1"]) == 2
    assert "budget" in capsys.readouterr().err
