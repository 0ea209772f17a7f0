"""The experiment layer of the paper benches: pairing by seed, aggregates, rows, page templates."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import jinja2
import pytest

from hetsync.benches import experiment as ex
from hetsync.errors import BadInput

BENCHES = Path(ex.__file__).parent


def _run(label: str, tta: float | None, *, rate: float = 100.0, final: float = 0.9) -> dict:
    return {
        "label": label,
        "policy": label.split("(")[0],
        "time_to_target_s": tta,
        "samples_per_s": rate,
        "final_metric": final,
        "compute_share": 0.5,
    }


RUNS = {  # seed -> runs; bsp reaches the target on seeds 0 and 1 only
    0: [_run("bsp", 10.0, rate=100.0), _run("asp", 5.0, rate=300.0, final=0.8)],
    1: [_run("bsp", 6.0, rate=120.0), _run("asp", None, rate=240.0, final=0.6)],
    2: [_run("bsp", None, rate=110.0), _run("asp", 4.0, rate=330.0, final=0.7)],
}


def test_speed_ups_are_paired_by_seed_and_skip_seeds_where_either_missed_the_target():
    ratios = ex.paired_ratios(RUNS, "asp", ex.baseline_value("bsp"))
    assert ratios == [2.0, None, None]
    rates = ex.paired_ratios(RUNS, "asp", ex.baseline_value("bsp", "samples_per_s"), key="samples_per_s", inverse=True)
    assert rates == pytest.approx([3.0, 2.0, 3.0])
    stats = ex.speedup_stats("asp", RUNS, "bsp")
    assert stats == {
        "speedup_mean": 2.0,
        "speedup_min": 2.0,
        "speedup_max": 2.0,
        "speedup_pairs": 1,
        "speedup_median": None,  # not every seed has a pair
    }
    # against a figure of each seed's runs, the label's time over it: bsp's 10 and 6 s over 2 s
    over_two = ex.speedup_stats("bsp", RUNS, lambda runs: 2.0, "vs_two", inverse=True)
    assert (over_two["vs_two_mean"], over_two["speedup_pairs"], over_two["vs_two_median"]) == (4.0, 2, None)
    two_seeds = {s: RUNS[s] for s in (0, 1)}
    assert ex.speedup_stats("bsp", two_seeds, lambda runs: 2.0, "vs_two", inverse=True)["vs_two_median"] == 4.0
    assert ex.speedup_stats("bsp", RUNS, "bsp", "speedup_vs_bsp")["speedup_vs_bsp_mean"] == 1.0


def test_seed_aggregates_count_the_seeds_that_reached_the_target():
    runs = ex.by_label(RUNS, "asp")
    assert [r["final_metric"] for r in runs] == [0.8, 0.6, 0.7]
    tta = ex.tta_stats(runs)
    assert tta == {
        "reached": 2,
        "seeds": 3,
        "tta_mean_s": 4.5,
        "tta_min_s": 4.0,
        "tta_max_s": 5.0,
        "tta_median_s": None,
    }
    assert ex.tta_stats([runs[0], runs[2]])["tta_median_s"] == 4.5  # every seed reached it
    assert ex.median_of_all([3.0, 1.0, 2.0]) == 2.0 and ex.median_of_all([1.0, None]) is None
    finals = ex.final_stats(runs)
    assert finals["final_metric_mean"] == pytest.approx(0.7) and finals["final_metric_sd"] == pytest.approx(0.1)
    assert ex.final_stats(runs[:1])["final_metric_sd"] == 0.0
    assert ex.means(runs, {"rate": "samples_per_s", "tta": "time_to_target_s"}) == {"rate": 290.0, "tta": 4.5}
    assert ex.labels_of(RUNS) == ["bsp", "asp"]


def test_rows_show_means_with_ranges_and_seeds_reached_or_the_run_length():
    target = {"target_metric": "accuracy", "target_value": 0.9, "target_direction": "max"}
    keys = {"policy": "asp", "setting": "s"}
    a = {"policy": "asp", **ex.tta_stats(ex.by_label(RUNS, "asp")), **ex.speedup_stats("asp", RUNS, "bsp")}
    row = ex.tta_row(a, target=target, max_time_s=30.0, keys=keys)
    assert (row["metric"], row["value"], row["shown"]) == ("time to accuracy 0.9", 4.5, "4.5 [4–5] (2/3)")
    none = {**a, "tta_mean_s": None, "reached": 0}
    assert ex.tta_row(none, target=target, max_time_s=30.0, keys=keys)["shown"] == "not in 30 s"
    one = {**a, "seeds": 1, "reached": 1}
    assert ex.tta_row(one, target=target, max_time_s=30.0, keys=keys)["shown"] is None
    speed = ex.speedup_row(a, baseline="bsp", keys=keys)
    assert (speed["metric"], speed["value"], speed["shown"]) == ("speed-up over bsp", 2.0, None)  # one pair
    assert ex.speedup_row({**a, "policy": "bsp"}, baseline="bsp", keys=keys)["value"] == 1.0
    assert ex.final_row("accuracy", [0.9, 0.8], 0.85, keys)["shown"] == "0.850 ± 0.071"
    assert ex.col_rows({"compute_share": 0.5}, [ex.share_col("compute", "compute_share")], keys)[0] | {"x": 1} == {
        "metric": "compute share",
        "value": 50.0,
        "unit": "%",
        **keys,
        "x": 1,
    }
    assert ex.speedup_cell({**a, "speedup_pairs": 2}, "bsp") == "2.00× [2–2]"
    assert ex.tta_cell(a) == "4.50 [4–5]" and ex.pct_cell(0.123) == "12.3%"


def test_an_experiment_rejects_repeated_seeds_and_lays_out_its_folders(tmp_path):
    case = ex.Case(key="h1", scenario="wbsp-h1")
    with pytest.raises(BadInput, match="--seeds repeats"):
        ex.Experiment(cases=(case,), seeds=(0, 0))
    with pytest.raises(BadInput, match="--scenarios"):
        ex.Experiment(cases=(), seeds=(0,))
    one = ex.Experiment(cases=(case,), seeds=(3,), seed_dirs=False)
    assert one.folder(tmp_path, case, 3) == tmp_path / "h1"
    several = ex.Experiment(cases=(case, ex.Case(key="", scenario="elastic-4")), seeds=(3, 4), seed_dirs=False)
    assert several.folder(tmp_path, case, 4) == tmp_path / "h1" / "seed-4"
    assert several.folder(tmp_path, several.cases[1], 4) == tmp_path / "seed-4"
    with pytest.raises(BadInput, match="nope"):
        ex.Experiment(cases=(ex.Case(key="x", scenario="nope"),), seeds=(0,)).validate()


def test_the_diagnosis_runs_nothing_when_the_scenario_has_no_noise(tmp_path):
    exp = ex.Experiment(cases=(ex.Case(key="", scenario="elastic-4"),), seeds=(0,), overrides={"jitter": 0.0})
    assert exp.scenario(exp.cases[0], 7).job.seed == 7
    assert exp.calm_runs(exp.cases[0], tmp_path, ("bsp",)) == []
    assert not tmp_path.joinpath("trace-bsp.jsonl").exists()


def test_run_case_runs_every_policy_and_seed_under_its_folder(tmp_path, capsys):
    exp = ex.Experiment(
        cases=(ex.Case(key="c", scenario="elastic-4"),),
        seeds=(0, 1),
        policies=("bsp", "asp"),
        overrides={"max_time_s": 0.3, "workload": "digits-logreg"},
    )
    seen: list[Path] = []
    sc, runs = exp.run_case(exp.cases[0], tmp_path, after=lambda r, where, s: seen.append(where))
    assert sc.job.seed == 1 and list(runs) == [0, 1] and ex.labels_of(runs) == ["bsp", "asp"]
    assert seen == [tmp_path / "c" / "seed-0", tmp_path / "c" / "seed-1"]
    assert (tmp_path / "c" / "seed-1" / "summary.json").is_file()
    assert "elastic-4 seed 1 · asp: TTA" in capsys.readouterr().out


def test_run_cases_resume_keeps_the_runs_a_seed_folder_holds_and_runs_the_others(tmp_path, capsys):
    exp = ex.Experiment(
        cases=(ex.Case(key="c", scenario="elastic-4"),),
        seeds=(0,),
        policies=("bsp", "asp"),
        overrides={"max_time_s": 0.3, "workload": "digits-logreg"},
    )
    ((_, first),) = ex.run_cases([(exp, exp.cases[0])], tmp_path)
    summary = tmp_path / "c" / "seed-0" / "summary.json"
    summary.write_text(json.dumps(json.loads(summary.read_text())[:1]))  # interrupted after bsp
    capsys.readouterr()
    ((_, again),) = ex.run_cases([(exp, exp.cases[0])], tmp_path, resume=True)
    out = capsys.readouterr().out
    assert "1 runs kept" in out and "· bsp:" not in out and "· asp:" in out
    assert [(r["label"], r["final_metric"]) for r in again[0]] == [(r["label"], r["final_metric"]) for r in first[0]]
    assert [r["label"] for r in json.loads(summary.read_text())] == ["bsp", "asp"]


@pytest.mark.dist
def test_run_cases_in_two_processes_gives_what_one_process_gives(tmp_path):
    """Seeds of several cases run in a pool give the same runs, in declared order, as run one by one."""
    exp = ex.Experiment(
        cases=(ex.Case(key="c", scenario="elastic-4"),),
        seeds=(0, 1),
        policies=("bsp", "asp"),
        overrides={"max_time_s": 0.3, "workload": "digits-logreg"},
    )
    other = ex.Case(key="d", scenario="elastic-4", overrides={"lr": 0.05})
    cases = [
        (exp, exp.cases[0]),
        (ex.Experiment(cases=(other,), seeds=(2,), policies=("ssp:s=3",), overrides=exp.overrides), other),
    ]
    seen: list[Path] = []
    pooled = ex.run_cases(cases, tmp_path / "pool", jobs=2, after=lambda r, where, s: seen.append(where))
    alone = ex.run_cases(cases, tmp_path / "alone", jobs=1)
    assert [list(runs) for _, runs in pooled] == [[0, 1], [2]]
    assert seen == [
        tmp_path / "pool" / "c" / "seed-0",
        tmp_path / "pool" / "c" / "seed-1",
        tmp_path / "pool" / "d" / "seed-2",
    ]
    for (sc_p, runs_p), (sc_a, runs_a) in zip(pooled, alone, strict=True):
        assert sc_p == sc_a
        for seed, runs in runs_p.items():
            assert [(r["label"], r["final_metric"], r["updates"]) for r in runs] == [
                (r["label"], r["final_metric"], r["updates"]) for r in runs_a[seed]
            ]


def test_page_templates_fill_named_placeholders_and_refuse_missing_ones(tmp_path):
    text = "# {{ title }}\n\n{{ body }}\n\n\n\n{{ tail }}\n<!-- block: note -->\nnote: {{ what }}\n"
    (tmp_path / "bench.md.in").write_text(text)
    blocks = ex.page_blocks(str(tmp_path / "bench.py"), "bench.md.in")
    assert set(blocks) == {"page", "note"}
    page = ex.fill_page(blocks["page"], title="T", body=["a", "b"], tail="")
    assert page == "# T\n\na\nb\n"  # lists of lines join; blank runs collapse; one final newline
    assert ex.fill_page(blocks["note"], what="x") == "note: x\n"
    with pytest.raises(jinja2.UndefinedError):
        ex.fill_page(blocks["page"], title="T")


def test_page_templates_choose_paragraphs_and_format_figures_with_the_filters(tmp_path):
    text = (
        "{% if r.speedup > 1 %}\nfaster: {{ r.speedup|num('.2f') }}×, wait {{ r.wait|pct(1) }}\n"
        "{% else %}\nnot faster\n{% endif %}\n\n{% for p in r.policies %}{% if not loop.first %}, {% endif %}"
        "`{{ p }}`{% endfor %}; {{ r.acc|metric('accuracy') }}, {{ none|num('.2f') }}\n"
    )
    (tmp_path / "b.md.in").write_text(text)
    page = ex.page_blocks(str(tmp_path / "b.py"), "b.md.in")["page"]
    r = {"speedup": 1.234, "wait": 0.1234, "policies": ["bsp", "asp"], "acc": 0.9312}
    assert ex.fill_page(page, r=r) == "faster: 1.23×, wait 12.3%\n\n`bsp`, `asp`; 0.931, —\n"
    assert ex.fill_page(page, r=r | {"speedup": 0.9}).startswith("not faster\n\n`bsp`")


@pytest.mark.parametrize("name", sorted(p.name for p in BENCHES.glob("*.md.in")))
def test_every_shipped_template_parses(name):
    blocks = ex.page_blocks(str(BENCHES / "x.py"), name)
    assert "page" in blocks
    assert all(isinstance(template, jinja2.Template) for template in blocks.values())


def test_the_command_line_names_the_options_that_differ_from_their_defaults():
    args = argparse.Namespace(quick=True, seeds="0,1", policies="bsp", runtime=False, overrides=["max_time_s=2"])
    options = [("quick", False), ("seeds", "0"), ("policies", "bsp"), ("runtime", False)]
    assert ex.command_line("paper-x", args, options) == "hetsync bench paper-x --quick --seeds 0,1 --set max_time_s=2"


def test_tables_align_their_first_columns_left_and_the_figures_right():
    assert ex.md_table(["a", "b"], [["x", ""]]) == ["| a | b |", "|---|---|", "| x | |"]
    assert ex.md_table(["a", "b", "c"], [], align=["", "right", "left"])[1] == "|---|---:|:---|"
    assert ex.md_table(["a", "b", "c"], [], align=["left"])[1] == "|:---|---|---|"  # the rest: no alignment
    columns = [ex.Col("policy", lambda a: a["label"]), *ex.right(ex.Col("x", lambda a: ex.fmt_x(a["x"])))]
    table = ex.aggregate_table([{"label": "bsp", "x": 1.234}, {"label": "asp", "x": None}], columns)
    assert table == ["| policy | x |", "|---|---:|", "| bsp | 1.23× |", "| asp | — |"]
    plain: list[ex.Column] = [("policy", lambda a: a["label"])]  # a (header, cell) pair: no alignment
    assert ex.aggregate_table([{"label": "bsp"}], plain)[1] == "|---|"
    assert ex.fmt_secs(12.345) == "12.3 s" and ex.fmt_secs(None) == "—"
    assert ex.ratio(3.0, 2.0) == 1.5 and ex.ratio(None, 2.0) is None and ex.ratio(3.0, 0.0) is None


def test_a_case_record_gives_its_runs_finals_and_page_values():
    res = {
        "scenario": "elastic-4",
        "description": "four workers",
        "max_time_s": 30.0,
        "eval_every_s": None,
        "target_metric": "accuracy",
        "target_value": 0.9,
        "seeds": [0, 1],
        "runs": {"0": [_run("bsp", 1.0, final=0.9)], "1": [_run("bsp", 2.0, final=0.8), _run("asp", 1.0)]},
    }
    assert [r["final_metric"] for r in ex.seed_runs(res, "bsp")] == [0.9, 0.8]
    header, cell = ex.finals_column(res)
    assert header == "final acc (± sd)" and cell({"label": "bsp"}) == "0.850 ± 0.071"
    assert cell({"label": "ssp", "final_metric_mean": 0.5}) == "0.500"  # no kept runs: the mean alone
    values = ex.case_values(res)
    assert values["stop"] == "30 virtual seconds per run" and values["target"] == "accuracy 0.9"
    assert values["eval_every"] == "run length / 40"
    assert ex.case_values({**res, "max_time_s": None, "eval_every_s": 2})["stop"] == "runs of max_steps"
    aggregates = [{"policy": "bsp"}, {"policy": "asp"}, {"policy": "ssp"}]
    assert ex.by_policy(aggregates, "ssp", "bsp") == [{"policy": "bsp"}, {"policy": "ssp"}]


def test_quick_sets_the_run_length_unless_given_and_pages_go_under_out_and_docs(tmp_path):
    args = argparse.Namespace(quick=True, overrides=["workers=4"], out=str(tmp_path / "out"), docs=None, no_docs=False)
    assert ex.overrides_of(args, 30.0) == {"workers": 4, "max_time_s": 30.0}
    assert ex.overrides_of(argparse.Namespace(**{**vars(args), "quick": False}), 30.0) == {"workers": 4}
    assert ex.overrides_of(argparse.Namespace(**{**vars(args), "overrides": ["max_time_s=2"]}), 30.0) == {
        "max_time_s": 2
    }
    written: list[Path] = []
    ex.publish(args, written.append)
    assert written == [tmp_path / "out"]
    ex.publish(argparse.Namespace(**{**vars(args), "docs": str(tmp_path / "docs")}), written.append)
    assert written[1:] == [tmp_path / "out", tmp_path / "docs"]
    p = argparse.ArgumentParser()
    ex.add_quick_argument(p, 30.0, ", and more")
    assert p.parse_args(["--quick"]).quick
    assert "30 virtual seconds per run instead of the scenario's, and more" in " ".join(p.format_help().split())


def test_plots_are_copied_from_a_folder_or_by_path_when_they_exist(tmp_path):
    (tmp_path / "a.png").write_bytes(b"png")
    img = tmp_path / "img"
    assert ex.copy_plots(tmp_path, img, {"a.png": "x-a.png", "b.png": "x-b.png"}) == {"a.png": "img/x-a.png"}
    assert ex.copy_plots(None, img, {str(tmp_path / "a.png"): "y.png"}) == {str(tmp_path / "a.png"): "img/y.png"}
    assert (img / "x-a.png").read_bytes() == b"png" and not (img / "x-b.png").exists()


def test_a_column_is_declared_once_for_the_page_and_the_rows():
    columns = [
        ex.Col("policy", lambda a: a["label"]),  # page only: no metric
        ex.Col("rate", lambda a: f"{a['r']:.0f}", "samples/s", "r", align="right"),
        ex.Col(None, metric="twice", value=lambda a: 2 * a["r"], unit="x", shown=lambda a: "two"),  # rows only
        ex.Col(
            "odd", lambda a: "yes", row=lambda a: {"metric": "odd", "value": 1} if a["r"] % 2 else None, align="right"
        ),
    ]
    items = [{"label": "bsp", "r": 3.0}, {"label": "asp", "r": 4.0}]
    assert ex.aggregate_table(items, columns) == [
        "| policy | rate | odd |",
        "|---|---:|---:|",
        "| bsp | 3 | yes |",
        "| asp | 4 | yes |",
    ]
    assert ex.col_rows(items[0], columns, {"policy": "bsp"}) == [
        {"metric": "samples/s", "value": 3.0, "unit": "", "policy": "bsp"},
        {"metric": "twice", "value": 6.0, "unit": "x", "shown": "two", "policy": "bsp"},
        {"metric": "odd", "value": 1, "policy": "bsp"},
    ]
    assert [r["metric"] for r in ex.col_rows(items[1], columns, {})] == ["samples/s", "twice"]  # odd: no row
    rows = ex.table_rows(items, columns[1:2], setting="s")
    assert rows == [
        {"metric": "samples/s", "value": 3.0, "unit": "", "policy": "bsp", "setting": "s"},
        {"metric": "samples/s", "value": 4.0, "unit": "", "policy": "asp", "setting": "s"},
    ]
    assert ex.table_rows(items[:1], columns[1:2], policy=lambda a: a["label"].upper())[0]["policy"] == "BSP"
    rate = ex.key_col("rate", "r", "{:.1f}".format, "samples/s", "1/s", shown=True)
    assert rate.cell(items[0]) == "3.0"
    assert ex.col_rows(items[0], [rate], {}) == [{"metric": "samples/s", "value": 3.0, "unit": "1/s", "shown": "3.0"}]
    assert ex.col_rows(items[0], [ex.key_col(None, "r", str, "rate")], {})[0] == {
        "metric": "rate",
        "value": 3.0,
        "unit": "",
    }


def test_the_case_columns_give_the_rows_and_cells_of_the_shared_figures():
    res = {
        "target_metric": "accuracy",
        "target_value": 0.9,
        "max_time_s": 30.0,
        "seeds": [0, 1, 2],
        "runs": {str(s): runs for s, runs in RUNS.items()},
    }
    a = {
        "policy": "asp",
        "label": "asp",
        **ex.tta_stats(ex.by_label(RUNS, "asp")),
        **ex.speedup_stats("asp", RUNS, "bsp"),
    }
    a |= {"final_metric_mean": 0.7, "compute_share_mean": 0.5, "wait_share_mean": None}
    col = ex.case_columns(res, baseline="bsp")
    keys = {"policy": "asp"}
    rows = ex.col_rows(a, [col[n] for n in ("tta", "reached", "speedup", "final", "compute", "wait")], keys)
    assert rows == [
        ex.tta_row(a, target=res, max_time_s=30.0, keys=keys),
        ex.speedup_row(a, baseline="bsp", keys=keys),
        ex.final_row("accuracy", [0.8, 0.6, 0.7], 0.7, keys),
        {"metric": "compute share", "value": 50.0, "unit": "%", **keys},
        {"metric": "wait share", "value": None, "unit": "%", **keys},
    ]
    page = ex.aggregate_table([a], [col[n] for n in ("tta", "reached", "speedup", "final", "compute", "wait")])
    assert (
        page[0]
        == "| TTA (s), mean [range] | reached | speed-up vs BSP, mean [range] | final acc (± sd) | compute | wait |"
    )
    assert page[2] == "| 4.50 [4–5] | 2/3 | 2.00× | 0.700 ± 0.100 | 50.0% | — |"


def test_seed_means_count_the_seeds_that_reached_the_target():
    runs = ex.by_label(RUNS, "asp")
    got = ex.seed_means(runs, ("samples_per_s", "time_to_target_s"), extra=1)
    assert got == {"samples_per_s": 290.0, "time_to_target_s": 4.5, "extra": 1, "reached": 2, "seeds": 3}
    assert list(got) == ["samples_per_s", "time_to_target_s", "extra", "reached", "seeds"]  # the JSON's order


def test_batch_stats_read_how_the_batches_moved_and_the_loaded_workers_batches(tmp_path):
    from hetsync.scenario import BackgroundLoad
    from hetsync.trace import TraceWriter

    trace = tmp_path / "trace.jsonl"
    writer = TraceWriter(trace)
    writer.write(
        {"t": 0.0, "ev": "start", "workers": 2, "policy": "lb-bsp", "scenario": "x", "seed": 0, "model_nbytes": 1}
    )
    # worker 0: 32, 40, 36 at steps 0, 1, 11 (moves 8 early, 4 later); worker 1: 32, 24 (a move of 8 early)
    for t, w, step, batch in [(0.0, 0, 0, 32), (2.5, 0, 1, 40), (6.0, 0, 11, 36), (0.0, 1, 0, 32), (1.0, 1, 1, 24)]:
        writer.write({"t": t, "ev": "compute", "w": w, "end": t + 0.5, "step": step, "batch": batch, "base": 0})
    writer.close()
    load = BackgroundLoad(workers=(0,), period_s=4.0, on_s=2.0, factor=3.0, phases_s=(0.0,))  # on in [0, 2), [4, 6)
    stats = ex.batch_stats(trace, load)
    assert stats["move_early"] == 8.0 and stats["move_later"] == 4.0 and stats["final"] == [36, 24]
    assert stats["loaded_batch_on"] == 32.0 and stats["loaded_batch_off"] == 38.0  # on at t = 0; off at 2.5, 6
    assert "loaded_batch_on" not in ex.batch_stats(trace)  # no load: no loaded workers
    runs = [{"label": "a", "trace": "trace.jsonl"}]
    ex.add_figures(runs, tmp_path, None, lambda r, folder, sc: {"moves": ex.batch_stats(folder / r["trace"])})  # type: ignore[arg-type]
    assert runs[0]["moves"]["final"] == [36, 24]


def test_a_benchs_shared_options_are_declared_once_and_its_command_derived_from_them(tmp_path):
    options = ex.Options(
        bench="paper-x", page="results-x.md", scenarios=("homogeneous-8",), seeds="0,1", quick_max_time_s=5.0
    )

    def add_arguments(p: argparse.ArgumentParser) -> None:
        options.add_arguments(p)
        p.add_argument("--extra", type=float, default=1.0)

    p = argparse.ArgumentParser()
    add_arguments(p)
    assert [dest for dest, _ in ex.options_of(add_arguments)] == ["quick", "scenarios", "policies", "seeds", "extra"]
    args = p.parse_args(
        ["--out", str(tmp_path), "--quick", "--policies", "bsp,asp", "--extra", "2", "--set", "workers=2"]
    )
    assert ex.command_line("paper-x", args, add_arguments) == (
        "hetsync bench paper-x --quick --policies bsp,asp --extra 2 --set workers=2"
    )
    exp = options.experiment(args, baseline="bsp")
    assert [c.key for c in exp.cases] == ["homogeneous-8"] and exp.policies == ("bsp", "asp")
    assert exp.seeds == (0, 1) and exp.baseline == "bsp"
    assert exp.overrides == {"workers": 2, "max_time_s": 5.0}  # --quick's run length
    assert options.experiment(p.parse_args([])).policies is None  # each scenario's own list
    with pytest.raises(BadInput, match="--seeds"):
        options.experiment(p.parse_args(["--seeds", "0,0"]))


def test_claims_format_a_ratio_of_times_as_a_change_and_shares_as_a_range():
    assert ex.fmt_change(0.43) == "−57%" and ex.fmt_change(1.12) == "+12%" and ex.fmt_change(None) == "—"
    assert ex.fmt_pct_span([0.81, 0.849]) == "81–85%" and ex.fmt_pct_span([1.0, 0.999]) == "100%"
    assert ex.fmt_pct_span([]) == "—"
    page = ex.PAGES.from_string("{{ r|change }} {{ s|pct_span }} {{ x|num('.2f') }}")
    assert ex.fill_page(page, r=0.81, s=[0.5, 0.6], x=None) == "−19% 50–60% —\n"


def test_the_fastest_pick_skips_missing_figures_and_the_shared_ratios_pair_by_seed():
    runs = RUNS[0] + [_run("ssp", None)]
    assert ex.fastest(runs, "time_to_target_s")["label"] == "asp"
    assert ex.fastest(runs, "samples_per_s", largest=True)["label"] == "asp"
    assert ex.fastest([_run("ssp", None)], "time_to_target_s") is None
    agg = ex.aggregate("asp", RUNS, baseline="bsp", keys={}, ratios={"thr_vs_bsp": "samples_per_s"})
    assert agg["thr_vs_bsp"] == pytest.approx((3.0 + 2.0 + 3.0) / 3)  # 300/100, 240/120, 330/110: per seed


def test_page_figures_over_cases_by_policy_spans_and_image_names():
    cases = [
        {"scenario": "a", "aggregate": [{"policy": "bsp", "x": 1.0}, {"policy": "asp", "x": 2.0}]},
        {"scenario": "b", "aggregate": [{"policy": "bsp", "x": 3.0}]},
    ]
    assert [(a["scenario"], a["x"]) for a in ex.all_aggregates(cases)] == [("a", 1.0), ("a", 2.0), ("b", 3.0)]
    assert ex.figure_of(cases[1], "asp", "x") is None and ex.figure_of(cases[0], "asp", "x") == 2.0
    assert ex.fmt_span([0.853, None, 0.81]) == "0.81–0.85" and ex.fmt_span([0.5, 0.5]) == "0.50"
    assert ex.fmt_span([]) == "—"
    assert ex.img_name("wbsp", "wbsp-h1", "shares") == "wbsp-h1-shares.png"
    assert ex.img_name("selmcast", "p2p-bw-sim", "exchange") == "selmcast-p2p-bw-sim-exchange.png"
    text = ex.PAGES.from_string(  # the filters as the templates use them
        '{{ cases|aggregates|selectattr("policy", "eq", "bsp")|map(attribute="x")|num_span(".1f") }}'
    )
    assert text.render(cases=cases) == "1.0–3.0"


def test_a_sweep_over_one_override_and_the_means_per_label():
    cases = ex.override_cases("p2p-bw", "p2p_mixing", ["equal", "push-sum"], name=str, sweep=True)
    assert [(c.key, dict(c.overrides), c.sweep) for c in cases] == [
        ("p2p-bw-equal", {"p2p_mixing": "equal"}, True),
        ("p2p-bw-push-sum", {"p2p_mixing": "push-sum"}, True),
    ]
    means = ex.label_means(RUNS, ["samples_per_s"], final=lambda rs: [r["final_metric"] for r in rs])
    assert [m["label"] for m in means] == ["bsp", "asp"]
    assert means[1]["samples_per_s"] == pytest.approx(290.0) and means[1]["final"] == [0.8, 0.6, 0.7]
    assert (means[1]["reached"], means[1]["seeds"]) == (2, 3)


def test_a_ratio_column_shows_one_for_the_baseline_and_a_row_for_the_others_only():
    col = ex.ratio_col("vs random", "r", "receivers vs random")
    base, other = {"label": "p2p-random"}, {"label": "selmcast", "r": 1.5}
    assert (col.cell(base), col.cell(other)) == ("1.00×", "1.50×")
    rows = ex.table_rows([base, other], [col])
    assert [(r["policy"], r["value"]) for r in rows] == [("selmcast", 1.5)]
    tta = ex.seed_tta_col("TTA", {"target_metric": "accuracy", "target_value": 0.9})
    some = {"time_to_target_s": 2.0, "reached": 2, "seeds": 3}
    assert tta.cell(some) == "2 s (2/3)" and tta.shown(some) == "2 (2/3)"
    assert tta.shown({"time_to_target_s": None, "reached": 0, "seeds": 3}) == "not reached"
