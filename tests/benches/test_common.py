"""The benches' shared layout: policy x metric tables, one share unit, docs only when asked."""

from __future__ import annotations

import argparse

from hetsync.benches.common import (
    add_output_arguments,
    docs_dir,
    markdown_tables,
    pivot,
    scenario_setup,
    setup_cell,
    shown_value,
    target_of,
    target_text,
    with_sd,
)
from hetsync.scenario import load_scenario


def test_rows_pivot_into_one_table_per_setting_with_a_line_per_policy():
    rows = [
        {"policy": "bsp", "metric": "compute share", "value": 51.84, "unit": "%", "setting": "h1"},
        {
            "policy": "bsp",
            "metric": "time to accuracy 0.85",
            "value": None,
            "unit": "s",
            "shown": "not in 300 s",
            "setting": "h1",
        },
        {"policy": "asp", "metric": "compute share", "value": 75.4, "unit": "%", "setting": "h1"},
        {"policy": "asp", "metric": "max staleness", "value": 22, "unit": "versions", "setting": "h1"},
        {"policy": "bsp", "metric": "compute share", "value": 40.0, "unit": "%", "setting": "h2"},
        {"metric": "run time, all runs", "value": 12.5, "unit": "s", "setting": ""},
    ]
    tables, rest = pivot(rows)
    assert [t[0] for t in tables] == ["h1", "h2"]
    group, cols, body = tables[0]
    assert cols == ["policy", "compute share (%)", "time to accuracy 0.85 (s)", "max staleness (versions)"]
    assert body == [["bsp", "51.8", "not in 300 s", ""], ["asp", "75.4", "", "22"]]
    assert [r["metric"] for r in rest] == ["run time, all runs"]
    md = "\n".join(markdown_tables(rows))
    assert "| policy | compute share (%) | time to accuracy 0.85 (s) | max staleness (versions) |" in md
    assert "| bsp | 51.8 | not in 300 s |  |" in md and "| run time, all runs | 12.5 | s |  |" in md


def test_shares_print_as_percent_with_one_decimal_and_none_as_a_dash():
    assert shown_value({"value": 55.0, "unit": "%"}) == "55.0"
    assert shown_value({"value": None, "unit": "s"}) == "—"
    assert shown_value({"value": 1234.5, "unit": ""}) == "1,234"


def test_one_seed_shows_the_value_alone_several_a_spread():
    fmt = "{:.3f}".format
    assert with_sd([0.9181], fmt) == "0.918"
    assert with_sd([0.9, 0.8], fmt) == "0.850 ± 0.071"


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_output_arguments(p, "paper-x", "results-x.md", quick=True)
    return p.parse_args(argv)


def test_no_docs_by_default_docs_only_when_asked():
    assert docs_dir(_args()) is None
    assert str(docs_dir(_args("--docs", "docs/real"))) == "docs/real"
    assert docs_dir(_args("--docs", "docs", "--no-docs")) is None


def test_the_set_up_is_read_from_the_scenario_that_ran():
    setup = scenario_setup(load_scenario("lbbsp-gpu-signal"))
    assert setup["workload"] == "`signal1d-cnn` (8,010 parameters)"
    assert setup["batch"] == "128 per worker (global 1024)"
    assert "SGD, momentum 0.9, weight decay 0.0005, lr 0.1" in setup["recipe"]
    assert "step decay ×0.1 at steps 105, 140" in setup["recipe"] and "clipping at norm 5" in setup["recipe"]
    assert setup["step"].startswith("GPU curve: 7.5 ms flat up to the knee (32–128 samples)")
    assert setup["network"].startswith("10 Gb/s per worker; 40 Gb/s at the server")
    assert setup["duration"] == "12 virtual seconds per run, evaluated every 0.25 s"
    plain = scenario_setup(load_scenario("wbsp-h1", lr=0.3, max_time_s=20))
    assert plain["recipe"] == "plain SGD, lr 0.3; schedule constant; no clipping"
    assert "workers 4–7 sleep 0.5 s per step" in plain["step"] and plain["duration"].startswith("20 virtual")
    assert setup_cell([plain, plain], "batch") == plain["batch"]
    assert setup_cell([plain, setup], "batch").startswith("`wbsp-h1`: 32 per worker")


def test_a_record_names_its_target():
    run = {"target_metric": "loss", "target_value": 0.3, "target_direction": "min", "label": "bsp"}
    assert target_of(run) == {"target_metric": "loss", "target_value": 0.3, "target_direction": "min"}
    assert target_text(target_of(run)) == "loss ≤ 0.3"
