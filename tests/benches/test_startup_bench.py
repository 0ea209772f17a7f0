import json

import pytest

from hetsync.cli import main

FORMS = ("DDP (torchrun)", "hetsync launch (BSP)")


@pytest.mark.dist
def test_bench_startup_quick_runs_ddp_and_hetsync_launch_and_prints_their_ratio(tmp_path, capsys):
    path, runs = tmp_path / "rows.json", tmp_path / "runs"
    assert main(["bench", "startup", "--quick", "--steps", "2", "--out", str(runs), "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "hetsync bench startup" in out and "time to first step" in out and "load average" in out
    rows = json.loads(path.read_text())
    cells = {(r.get("policy"), r["metric"]) for r in rows}
    for form in FORMS:
        assert {(form, "time to first step"), (form, "time to exit"), (form, "÷ DDP's (target ≤ 1.5)")} <= cells
    assert all(r["value"] > 0 for r in rows if r.get("policy"))
    ratios = {r["policy"]: r["value"] for r in rows if r["metric"].startswith("÷")}
    assert ratios[FORMS[0]] == 1.0
    first = {r["policy"]: r["value"] for r in rows if r["metric"] == "time to first step"}
    assert ratios[FORMS[1]] == pytest.approx(first[FORMS[1]] / first[FORMS[0]])
    # each run kept under --out: hetsync's own outputs, both launchers' logs
    assert (runs / "hetsync-0" / "out" / "summary.json").is_file()
    assert (runs / "ddp-0" / "launch.log").is_file()


def test_bench_startup_bad_arguments_exit_2(capsys):
    assert main(["bench", "startup", "--repeats", "0"]) == 2
    assert "--repeats" in capsys.readouterr().err
