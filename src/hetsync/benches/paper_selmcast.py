"""``hetsync bench paper-selmcast``: SELMCAST (Luo et al., IEEE Trans.
Services Computing 2024) against the peer-to-peer baselines.

Every policy of the scenario list (``p2p-allreduce``, ``p2p-random``: exactly
p random receivers, ``selmcast``: bandwidth-aware receivers, at least p) under
BSP and SSP rounds on ``p2p-bw`` (16 workers, 100 Mb/s to 10 Gb/s links,
traffic switching on half of them) and its homogeneous control: per policy
receivers per sender, exchange, round, compute share and time to target, then
SELMCAST's ratios to the baselines under the same rounds, the paper's claims.
``--runtime``: on real processes (4 workers, throttled links); ``--windows``:
SELMCAST's SSP planning window; ``--floors``: its fairness floor
(:mod:`hetsync.benches.selmcast_floors`, also ``results-p2p-mixing.md``). The
page is ``results-selmcast.md`` (``paper_selmcast.md.in``).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from hetsync import report
from hetsync.benches import experiment as ex
from hetsync.benches import plots
from hetsync.benches import selmcast_floors as floors_study
from hetsync.benches.common import (
    Row,
    machine_text,
    mean_or_none,
    parse_numbers,
    scenario_setup,
    seeds_setting,
    target_of,
)
from hetsync.runner import write_json_atomic
from hetsync.scenario import load_scenario, scenario_from_dict

NAME = "paper-selmcast"

SCENARIOS = ("p2p-bw", "p2p-homogeneous")
TIMELINE_S = 60.0  # window of the timelines (simulator)
RUNTIME_TIMELINE_S = 8.0  # real steps are short: a shorter window
TIMELINE_POLICIES = ("p2p-random", "selmcast")
# the exchange plot: a bar per policy for each of these figures
EXCHANGE = [("mean_receivers", "receivers per sender (achieved)"), ("mean_exchange_s", "mean exchange time (s)")]
# the ssp planning-window sweep: selmcast's window_s values against p2p-random, same rounds
WINDOW_SCENARIO = "p2p-bw"
WINDOWS_S = (0.0, 0.01, 0.05, 0.3)
WINDOW_BASELINE = "p2p-random:sync=ssp:p=2"
# the runtime comparison: 4 real workers, slow links throttled, a smaller model
RUNTIME_SCENARIO = "p2p-bw"
RUNTIME_OVERRIDES: dict[str, Any] = {
    "workers": 4,
    "model_bytes": 4_000_000,  # 0.32 s per copy at 100 Mb/s, 3 ms at 10 Gb/s
    "delay_s": 0.1,  # real steps take about 1 ms: make them 0.1 s
    "max_time_s": 60,
    "eval_every_s": 2,
    "link_load": {"workers": [1, 2], "period_s": 20, "on_s": 10, "factor": 4},
}
OPTIONS = ex.Options(
    bench=NAME, page="results-selmcast.md", scenarios=SCENARIOS, set_example="workers=8", quick_max_time_s=120.0
)
RATIOS = (
    ("sync shorter", "sync_speedup", "sync_s", False),
    ("receivers", "receivers_ratio", "mean_receivers", True),
    ("round shorter", "round_speedup", "mean_round_s", False),
    ("faster to target", "tta_speedup", "time_to_target_s", False),
)
"""SELMCAST's ratios to a baseline under the same rounds, the paper's claims: (name, key, figure,
whether SELMCAST's figure is the numerator; else the baseline's is, a speed-up)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    OPTIONS.add_arguments(p)
    p.add_argument(
        "--windows",
        default=",".join(f"{w:g}" for w in WINDOWS_S),
        help=f"selmcast's ssp window_s values to sweep on {WINDOW_SCENARIO}; 'none' skips (default: %(default)s)",
    )
    p.add_argument(
        "--floors",
        default=",".join(f"{f:g}" for f in floors_study.FLOORS),
        help=f"selmcast's floor values to compare on {', '.join(floors_study.SCENARIOS)} under both mixings; "
        "'none' skips (default: %(default)s)",
    )
    real = "also run on real processes: 4 workers on p2p-bw with throttled links (about 6 min)"
    p.add_argument("--runtime", action="store_true", help=real)


def run(args: argparse.Namespace) -> list[Row]:
    exp = OPTIONS.experiment(args, seed_dirs=False)
    exp.validate()  # every scenario before the first run
    out = Path(args.out)
    seconds = {"what": "a number of seconds", "example": "e.g. 0,0.01,0.05", "bound": "finite and >= 0"}
    windows = parse_numbers(args.windows, "--windows", ok=lambda w: 0 <= w < float("inf"), **seconds)
    fractions = {"what": "a number", "example": "fractions of p, e.g. 0,0.5,1", "bound": "in [0, 1] (a fraction of p)"}
    floors = parse_numbers(args.floors, "--floors", ok=lambda f: 0 <= f <= 1, **fractions)
    results = [bench_scenario(exp, case, out) for case in exp.cases]
    sweep = bench_windows(windows, exp, out / "windows") if windows else None
    fair = floors_study.bench_floors(floors, exp, out / "floors") if floors else None
    if args.runtime:
        results.append(bench_runtime(list(exp.policies) if exp.policies else None, out / "runtime"))
    for name, data in (("results", results), ("windows", sweep), ("floors", fair)):
        if data is not None:
            write_json_atomic(out / f"{name}.json", data)
    command = ex.command_line(NAME, args, add_arguments)
    ex.publish(args, lambda where: write_docs(results, where, command=command, sweep=sweep, floors=fair))
    return rows_of(results) + window_rows(sweep) + floors_study.floor_rows(fair)


# ------------------------------------------------------------------ running
def _draw(window_s: float) -> Any:
    """A seed's plots: metric, shares, exchanges, and the timelines of the first ``window_s``."""

    def exchanges(runs: list[dict[str, Any]], where: Path, sc: Any) -> None:
        plots.plot_run_bars(runs, EXCHANGE, where / "exchange.png", title=f"peer-to-peer exchanges · {sc.name}")

    return plots.case_plots(
        baselines=None, timelines=TIMELINE_POLICIES, timeline_s=window_s, max_workers=16, more=exchanges
    )


def bench_scenario(exp: ex.Experiment, case: ex.Case, out: Path) -> dict[str, Any]:
    """Every policy on one scenario and every seed (simulator); one record."""
    sc, runs_by_seed = exp.run_case(case, out, progress=floors_study.progress, after=_draw(TIMELINE_S))
    where = exp.folder(out, case, exp.seeds[-1])  # the plots the page shows: the last seed's
    return {**_aggregate(sc.name, "sim", runs_by_seed, where), "setup": scenario_setup(sc)}


def bench_runtime(specs: list[str] | None, out: Path) -> dict[str, Any]:
    """The comparison on real processes with throttled links (rank 0 coordinates)."""
    raw = {**load_scenario(RUNTIME_SCENARIO).source, **RUNTIME_OVERRIDES, "name": f"{RUNTIME_SCENARIO}-runtime"}
    sc = scenario_from_dict(raw)
    specs = specs or list(sc.job.policies)
    timeout_s = 120 + 3 * len(specs) * (sc.stop.max_time_s or 60)
    runs = ex.run_real(raw, out, timeout_s=timeout_s, specs=specs, throttle=True)
    _draw(RUNTIME_TIMELINE_S)(runs, out, sc)
    return {**_aggregate(sc.name, "dist", {sc.job.seed: runs}, out), "setup": scenario_setup(sc)}


def bench_windows(windows: list[float], exp: ex.Experiment, out: Path) -> dict[str, Any]:
    """SELMCAST under ssp with each planning window, and p2p-random, on
    ``WINDOW_SCENARIO`` for every seed (simulator); means over seeds per window."""
    specs = (WINDOW_BASELINE, *(f"selmcast:sync=ssp:p=2:window_s={w:g}" for w in windows))
    sweep = replace(exp, cases=(ex.Case(key="", scenario=WINDOW_SCENARIO),), policies=specs, seed_dirs=False)
    sc, runs_by_seed = sweep.run_case(sweep.cases[0], out, progress=floors_study.progress)
    base, *points = _points(runs_by_seed)
    points = [p | {"window_s": w} | _ratios(p, base, *RATIOS[1::2]) for w, p in zip(windows, points, strict=True)]
    first = next(iter(runs_by_seed.values()))[0]
    return {"scenario": sc.name, "seeds": sorted(runs_by_seed), "baseline": base, "windows": points, **target_of(first)}


def _points(runs_by_seed: ex.RunsBySeed) -> list[dict[str, Any]]:
    """Per policy (label) its rounds, the means over the seeds of its figures and of the time per step not computing."""
    return ex.label_means(
        runs_by_seed,
        floors_study.METRICS,
        sync=lambda rs: rs[0]["params"]["sync"],
        sync_s=lambda rs: mean_or_none([ex.sync_per_step_s(r) for r in rs]),
    )


def _ratios(mine: dict[str, Any], base: dict[str, Any], *ratios: tuple[str, str, str, bool]) -> dict[str, Any]:
    """SELMCAST's ``ratios`` (of :data:`RATIOS`) to a baseline."""
    return {key: ex.ratio(*((mine[f], base[f]) if up else (base[f], mine[f]))) for _, key, f, up in ratios}


def _aggregate(scenario: str, driver: str, runs_by_seed: ex.RunsBySeed, where: Path) -> dict[str, Any]:
    """Means over seeds per policy label; ratios of selmcast to each baseline per sync."""
    policies = {p.pop("label"): p for p in _points(runs_by_seed)}

    def pick(policy: str, sync: str) -> dict[str, Any] | None:
        return next((p for p in policies.values() if (p["policy"], p["sync"]) == (policy, sync)), None)

    ratios = {
        f"{sync}: selmcast vs {base}": _ratios(sel, other, *RATIOS)
        for sync in ("bsp", "ssp")
        for base in ("p2p-random", "p2p-allreduce")
        if (sel := pick("selmcast", sync)) is not None and (other := pick(base, sync)) is not None
    }
    first, seeds = next(iter(runs_by_seed.values()))[0], sorted(runs_by_seed)
    record = {"scenario": scenario, "driver": driver, "seeds": seeds, "policies": policies, "ratios": ratios}
    return record | target_of(first) | {"dir": str(where)}


# --------------------------------------------------------------------- rows
def _policy_columns(res: dict[str, Any]) -> list[ex.Col]:
    """A scenario's table: per policy receivers, exchange, sync per step, round,
    compute share (%), time to target, final metric."""
    col = floors_study.point_columns(res)
    return [col[name] for name in ("policy", "receivers", "exchange", "sync", "round", "compute", "tta", "final")]


def _window_columns(sweep: dict[str, Any]) -> list[ex.Col]:
    """The window sweep: per window (and the baseline) receivers, their ratio to
    random's, exchange, round, time to target (and its ratio), final metric."""
    col = floors_study.point_columns(sweep)
    return [
        col["policy"],
        ex.Col("window", lambda p: "—" if "window_s" not in p else f"{p['window_s']:g} s"),
        col["receivers"],
        ex.ratio_col("vs random", "receivers_ratio", "receivers vs random"),
        col["exchange"],
        col["sync"]._replace(metric=None),
        col["round"],
        col["tta"]._replace(shown=None),
        ex.ratio_col("faster to target", "tta_speedup"),
        col["final"]._replace(shown=None),
    ]


def rows_of(results: list[dict[str, Any]]) -> list[Row]:
    """Per scenario a table (:func:`_policy_columns`); then SELMCAST's ratios to
    each baseline as a table of their own."""
    rows: list[Row] = []
    for res in results:
        where = seeds_setting(f"{res['scenario']} ({res['driver']})", res["seeds"], " (means)")
        policies = [{"label": label, **p} for label, p in res["policies"].items()]
        rows += ex.table_rows(policies, _policy_columns(res), setting=where, scenario=res["scenario"])
        ratios = [{"label": name, **r} for name, r in res["ratios"].items()]
        rows += ex.table_rows(ratios, _ratio_columns(), setting=f"{where}: ratios", scenario=res["scenario"])
    return rows


def window_rows(sweep: dict[str, Any] | None) -> list[Row]:
    """The window sweep's rows (:func:`_window_columns`)."""
    if sweep is None:
        return []
    setting = f"{sweep['scenario']} (sim), ssp window sweep, seeds {','.join(map(str, sweep['seeds']))}"
    points = [sweep["baseline"], *sweep["windows"]]
    return ex.table_rows(points, _window_columns(sweep), setting=setting, scenario=sweep["scenario"])


# --------------------------------------------------------------------- page
Study = dict[str, Any] | None  # the window sweep's or the floor study's record, None when it did not run
PAGE = ex.page_blocks(__file__, "paper_selmcast.md.in")
"""The page, the section repeated per scenario, the window and floor sections, the mixing page."""


def _img(res: dict[str, Any], kind: str) -> str:
    return ex.img_name("selmcast", f"{res['scenario']}-{res['driver']}", kind)


def _kinds(res: dict[str, Any]) -> list[str]:
    """The plots of a scenario's section: the metric curve, exchanges, shares, timelines."""
    timelines = [p.stem for p in plots.timelines_in(Path(res["dir"]), TIMELINE_POLICIES)]
    return [report.metric_plot_name([res]), "exchange", "shares", *timelines]


def write_docs(
    results: list[dict[str, Any]], docs: Path, *, command: str, sweep: Study = None, floors: Study = None
) -> Path:
    """Write ``results-selmcast.md`` (and, with the floor comparison,
    ``results-p2p-mixing.md``) and copy the plots to ``img/selmcast-*``."""
    for res in results:
        ex.copy_plots(Path(res["dir"]), docs / "img", {f"{kind}.png": _img(res, kind) for kind in _kinds(res)})
    path = docs / "results-selmcast.md"
    path.write_text(render_markdown(results, command=command, sweep=sweep, floors=floors))
    if floors is not None:
        floors_study.plot_floors(floors, docs / "img" / "selmcast-floors.png")
        (docs / "results-p2p-mixing.md").write_text(render_mixing(floors, command=command))
    return path


def _ratio_columns() -> list[ex.Col]:
    """SELMCAST's ratios to a baseline (:data:`RATIOS`), a line per comparison."""
    return [ex.key_col(what, key, ex.fmt_x, what, "x") for what, key, *_ in RATIOS]


def _tables(res: dict[str, Any]) -> dict[str, str]:
    """A scenario's tables: its policies, SELMCAST's ratios to the baselines."""
    lines = [{"label": name, **r} for name, r in res["ratios"].items()]
    ratios = ex.aggregate_table(lines, [ex.key_col("comparison", "label", str), *_ratio_columns()], left=1)
    policies = ex.aggregate_table([{"label": k, **p} for k, p in res["policies"].items()], _policy_columns(res), left=1)
    return {"table": "\n".join(policies), "ratios": "\n".join(ratios if lines else [])}


def render_mixing(fair: dict[str, Any], *, command: str) -> str:
    """``results-p2p-mixing.md``: equal vs push-sum mixing on skewed shards, before and after the floor."""
    values = floors_study.floor_values(fair)
    return ex.fill_page(PAGE["mixing"], values, command=command, date=time.strftime("%Y-%m-%d"))


def render_markdown(results: list[dict[str, Any]], *, command: str, sweep: Study = None, floors: Study = None) -> str:
    return ex.fill_page(
        PAGE["page"],
        command=command,
        date=time.strftime("%Y-%m-%d"),
        machine=machine_text(),
        sections=[{"res": res, "kinds": _kinds(res), **_tables(res)} for res in results],
        img=_img,
        sweep=sweep,
        sweep_table=ex.aggregate_table([sweep["baseline"], *sweep["windows"]], _window_columns(sweep), left=1)
        if sweep
        else [],
        fair=floors_study.floor_values(floors) if floors else None,
        floors=floors["floors"] if floors else [],
    )
