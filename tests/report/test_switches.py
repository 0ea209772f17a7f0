"""hetsync.report.switches: what auto did and why, from a real simulated switch (tests/conftest.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

from hetsync.report.switches import describe_switch, run_switches, switch_lines


def test_each_switch_is_one_line_with_its_time_gain_and_cause(auto_switch_run):
    run = auto_switch_run.run
    (note,) = run_switches(run)
    ((heading, (line,)),) = switch_lines([{"label": "bsp", "policy_notes": []}, run])
    assert (
        heading
        == "auto: 1 switch of policy (among bsp, lb-bsp, backup, local-sgd, by measured samples a second (each candidate's "
        "convergence per sample taken as BSP's: local SGD's is only close to it, at a small H))"
    )
    d = note["detail"]
    assert line.startswith(f"{note['t']:.2f} s  bsp → lb-bsp: predicted {d['gain']:.2f}× the samples a second")
    for m in d["moved"]:  # the stressed workers, from and to
        assert f"w{m['w']} {m['from_s']:.3g} → {m['to_s']:.3g} s" in line
    assert f"slowest worker of the last 20 rounds: w{d['slowest'][0]['w']} in {d['slowest'][0]['rounds']}" in line


def test_a_note_from_before_the_cause_says_the_gain_its_rates_give():
    note = {"t": 3.0, "what": "switch", "detail": {"from": "bsp", "to": "backup", "rates": {"bsp": 100, "backup": 150}}}
    assert describe_switch(note) == "3.00 s  bsp → backup: predicted 1.50× the samples a second (100 → 150)"
    assert switch_lines([{"label": "x", "policy_notes": [{"t": 1.0, "what": "other", "detail": {}}]}]) == []


def test_hetsync_report_prints_the_switches_and_the_page_lists_them(auto_switch_run, tmp_path: Path, capsys):
    from hetsync import cli

    out = tmp_path / "out"
    shutil.copytree(auto_switch_run.out, out)
    assert cli.run(["report", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "auto: 1 switch of policy" in printed and "bsp → lb-bsp: predicted" in printed
    page = (out / "report.html").read_text()
    assert (
        "<h2>auto: 1 switch of policy (among bsp, lb-bsp, backup, local-sgd" in page
        and "bsp → lb-bsp: predicted" in page
    )


def test_a_switch_at_the_first_full_window_says_there_was_nothing_earlier_to_compare(auto_switch_run):
    note = run_switches(auto_switch_run.run)[0]
    first = note | {"detail": note["detail"] | {"since_s": note["t"], "moved": [], "moved_count": 0}}
    line = describe_switch(first)
    assert "the cluster as first measured" in line and "moved" not in line
    assert "the cluster as first measured" not in describe_switch(note)


def test_a_switch_a_forecast_chose_says_each_candidates_simulated_loss_lowest_first():
    said = {"metric": "loss", "losses": {"bsp": [0.3, 0.32], "local-sgd": [0.25, 0.26]}, "chosen": "local-sgd"}
    note = {"t": 2.5, "detail": {"from": "bsp", "to": "local-sgd", "gain": 1.7, "forecast": said}}
    assert describe_switch(note).endswith("; forecast loss (mean of 2 seeds): local-sgd 0.255, bsp 0.31")
