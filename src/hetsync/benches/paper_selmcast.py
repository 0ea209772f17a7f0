"""``hetsync bench paper-selmcast``: SELMCAST (Luo et al., IEEE Trans.
Services Computing 2024) against the peer-to-peer baselines.

Every policy of the scenario list — ``p2p-allreduce``, ``p2p-random`` (exactly
p random receivers) and ``selmcast`` (bandwidth-aware receivers, at least p) —
under BSP rounds and under SSP, on ``p2p-bw`` (16 workers, 100 Mb/s to 10 Gb/s
links, traffic switching on half of them) and on its homogeneous control: per
policy the receivers per sender, exchange, round, compute share and time to
target, then SELMCAST's ratios to the baselines under the same rounds, which
is what the paper claims (shorter synchronization, a larger average p,
faster training). ``--runtime`` runs the comparison on real processes (4
workers, throttled links); ``--windows`` sweeps SELMCAST's SSP planning
window; ``--floors`` measures its fairness floor on label-skewed and iid
shards under both mixings (:mod:`hetsync.benches.selmcast_floors`) and
writes ``results-p2p-mixing.md`` too. The page is ``results-selmcast.md``
(``paper_selmcast.md.in``, with the floor section and the mixing page).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from hetsync import report
from hetsync.benches import experiment as ex
from hetsync.benches import plots
from hetsync.benches import selmcast_floors as floors_study
from hetsync.benches.common import (
    Row,
    mean_or_none,
    parse_numbers,
    scenario_setup,
    setup_markdown,
    target_of,
    target_text,
)
from hetsync.benches.experiment import Col
from hetsync.benches.selmcast_floors import point_columns, progress
from hetsync.runner import write_json_atomic
from hetsync.scenario import load_scenario, scenario_from_dict

NAME = "paper-selmcast"

SCENARIOS = ("p2p-bw", "p2p-homogeneous")
TIMELINE_S = 60.0  # window of the timelines (simulator)
RUNTIME_TIMELINE_S = 8.0  # real steps are short: a shorter window
TIMELINE_POLICIES = ("p2p-random", "selmcast")
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
    p.add_argument(
        "--runtime",
        action="store_true",
        help="also run on real processes: 4 workers on p2p-bw with throttled links (about 6 min)",
    )


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
        plot_exchange(runs, where / "exchange.png", title=f"peer-to-peer exchanges · {sc.name}")

    return plots.case_plots(
        baselines=None, timelines=TIMELINE_POLICIES, timeline_s=window_s, max_workers=16, more=exchanges
    )


def bench_scenario(exp: ex.Experiment, case: ex.Case, out: Path) -> dict[str, Any]:
    """Every policy on one scenario and every seed (simulator); one record."""
    sc, runs_by_seed = exp.run_case(case, out, progress=progress, after=_draw(TIMELINE_S))
    where = exp.folder(out, case, exp.seeds[-1])  # the plots the page shows: the last seed's
    return {**_aggregate(sc.name, "sim", runs_by_seed, where), "setup": scenario_setup(sc)}


def bench_runtime(specs: list[str] | None, out: Path) -> dict[str, Any]:
    """The comparison on real processes with throttled links (rank 0 coordinates)."""
    raw = {**load_scenario(RUNTIME_SCENARIO).source, **RUNTIME_OVERRIDES, "name": f"{RUNTIME_SCENARIO}-runtime"}
    sc = scenario_from_dict(raw)
    specs = specs or list(sc.policies)
    timeout_s = 120 + 3 * len(specs) * (sc.max_time_s or 60)
    runs = ex.run_real(raw, out, timeout_s=timeout_s, specs=specs, throttle=True)
    _draw(RUNTIME_TIMELINE_S)(runs, out, sc)
    return {**_aggregate(sc.name, "dist", {sc.seed: runs}, out), "setup": scenario_setup(sc)}


def bench_windows(windows: list[float], exp: ex.Experiment, out: Path) -> dict[str, Any]:
    """SELMCAST under ssp with each planning window, and p2p-random, on
    ``WINDOW_SCENARIO`` for every seed (simulator); means over seeds per window."""
    sweep = ex.Experiment(
        cases=(ex.Case(key="", scenario=WINDOW_SCENARIO),),
        policies=(WINDOW_BASELINE, *(f"selmcast:sync=ssp:p=2:window_s={w:g}" for w in windows)),
        seeds=exp.seeds,
        overrides=exp.overrides,
        seed_dirs=False,
    )
    sc, runs_by_seed = sweep.run_case(sweep.cases[0], out, progress=progress)
    base_label, *labels = ex.labels_of(runs_by_seed)
    base = {"label": base_label, **_point(ex.by_label(runs_by_seed, base_label))}
    points = []
    for w, label in zip(windows, labels, strict=True):
        point = {"label": label, **_point(ex.by_label(runs_by_seed, label)), "window_s": w}
        points.append(point | _ratios(point, base, RATIOS[1], RATIOS[3]))
    first = next(iter(runs_by_seed.values()))[0]
    return {"scenario": sc.name, "seeds": sorted(runs_by_seed), "baseline": base, "windows": points, **target_of(first)}


def _point(rs: list[dict[str, Any]]) -> dict[str, Any]:
    """A policy's runs over the seeds: the means of the figures and of the time per step not computing."""
    return ex.seed_means(rs, floors_study.METRICS, sync_s=mean_or_none([sync_per_step_s(r) for r in rs]))


def _ratios(mine: dict[str, Any], base: dict[str, Any], *ratios: tuple[str, str, str, bool]) -> dict[str, Any]:
    """SELMCAST's ``ratios`` (of :data:`RATIOS`) to a baseline."""
    return {key: ex.ratio(*((mine[f], base[f]) if up else (base[f], mine[f]))) for _, key, f, up in ratios}


def _aggregate(scenario: str, driver: str, runs_by_seed: ex.RunsBySeed, where: Path) -> dict[str, Any]:
    """Means over seeds per policy label; ratios of selmcast to each baseline per sync."""
    policies = {}
    for label in ex.labels_of(runs_by_seed):
        rs = ex.by_label(runs_by_seed, label)
        policies[label] = {"policy": rs[0]["policy"], "sync": rs[0]["params"]["sync"], **_point(rs)}

    def pick(policy: str, sync: str) -> dict[str, Any] | None:
        return next((p for p in policies.values() if p["policy"] == policy and p["sync"] == sync), None)

    ratios = {
        f"{sync}: selmcast vs {base}": _ratios(sel, other, *RATIOS)
        for sync in ("bsp", "ssp")
        for base in ("p2p-random", "p2p-allreduce")
        if (sel := pick("selmcast", sync)) is not None and (other := pick(base, sync)) is not None
    }
    first = next(iter(runs_by_seed.values()))[0]
    return {
        "scenario": scenario,
        "driver": driver,
        "seeds": sorted(runs_by_seed),
        "policies": policies,
        "ratios": ratios,
        **target_of(first),
        "dir": str(where),
    }


def sync_per_step_s(run: dict[str, Any]) -> float:
    """Time a worker spends not computing, per step, averaged over workers:
    what a round's synchronization costs, under BSP and SSP alike."""
    pw = run["per_worker"]
    per = [(run["wall_time_s"] - c) / k for c, k in zip(pw["compute_s"], pw["steps"], strict=True) if k]
    return sum(per) / len(per)


# --------------------------------------------------------------------- rows
def _policy_columns(res: dict[str, Any]) -> list[Col]:
    """A scenario's table: per policy receivers, exchange, sync per step, round,
    compute share (%), time to target, final metric."""
    col = point_columns(res)
    return [col[name] for name in ("policy", "receivers", "exchange", "sync", "round", "compute", "tta", "final")]


def _window_columns(sweep: dict[str, Any]) -> list[Col]:
    """The window sweep: per window (and the baseline) receivers, their ratio to
    random's, exchange, round, time to target (and its ratio), final metric."""
    col = point_columns(sweep)
    return [
        col["policy"],
        Col("window", lambda p: "—" if "window_s" not in p else f"{p['window_s']:g} s"),
        col["receivers"],
        Col(
            "vs random",
            lambda p: ex.fmt_x(p.get("receivers_ratio", 1.0)),
            row=lambda p: (
                {"metric": "receivers vs random", "value": p["receivers_ratio"], "unit": "x"}
                if "receivers_ratio" in p
                else None
            ),
        ),
        col["exchange"],
        col["sync"]._replace(metric=None),
        col["round"],
        col["tta"]._replace(shown=None),
        Col("faster to target", lambda p: ex.fmt_x(p.get("tta_speedup", 1.0))),
        col["final"]._replace(shown=None),
    ]


def rows_of(results: list[dict[str, Any]]) -> list[Row]:
    """Per scenario a table (:func:`_policy_columns`); then SELMCAST's ratios to
    each baseline as a table of their own."""
    rows: list[Row] = []
    for res in results:
        seeds = res["seeds"]
        where = f"{res['scenario']} ({res['driver']}), seed{'s' if len(seeds) > 1 else ''} "
        where += ",".join(map(str, seeds)) + (" (means)" if len(seeds) > 1 else "")
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


# -------------------------------------------------------------------- plots
def plot_exchange(runs: list[dict[str, Any]], path: Path, *, title: str) -> Path:
    """Two bar panels per policy: receivers per sender, mean exchange time."""
    from matplotlib.figure import Figure

    labels = [r["label"] for r in runs]
    colors = report._label_colors(runs)
    fig = Figure(figsize=(11, 3.6), layout="constrained")
    left, right = fig.subplots(1, 2)
    y = range(len(runs))
    left.barh(y, [r["mean_receivers"] for r in runs], color=colors)
    left.set_xlabel("receivers per sender (achieved)")
    right.barh(y, [r["mean_exchange_s"] or 0.0 for r in runs], color=colors)
    right.set_xlabel("mean exchange time (s)")
    for ax in (left, right):
        ax.set_yticks(list(y), labels if ax is left else [""] * len(runs), fontsize=8)
        ax.invert_yaxis()
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    fig.suptitle(title, x=0.01, ha="left")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


# --------------------------------------------------------------------- page
PAGE = ex.page_blocks(__file__, "paper_selmcast.md.in")
"""The page, the section repeated per scenario, the window and floor sections, the mixing page."""


def _curve(res: dict[str, Any]) -> str:
    """The metric plot's name: ``accuracy``, or the target's metric."""
    return report.metric_plot_name([res])


def _img(res: dict[str, Any], kind: str) -> str:
    return f"selmcast-{res['scenario']}-{res['driver']}-{kind}.png"


def _timelines(where: Path) -> list[Path]:
    """The bench's timelines (``hetsync run`` draws one for every policy)."""
    names = tuple(f"timeline-{p}" for p in TIMELINE_POLICIES)
    return [png for png in sorted(where.glob("timeline-*.png")) if png.stem.startswith(names)]


def write_docs(
    results: list[dict[str, Any]],
    docs: Path,
    *,
    command: str,
    sweep: dict[str, Any] | None = None,
    floors: dict[str, Any] | None = None,
) -> Path:
    """Write ``results-selmcast.md`` (and, with the floor comparison,
    ``results-p2p-mixing.md``) and copy the plots to ``img/selmcast-*``."""
    for res in results:
        src = Path(res["dir"])
        kinds = [f"{kind}.png" for kind in (_curve(res), "exchange", "shares")] + [p.name for p in _timelines(src)]
        ex.copy_plots(src, docs / "img", {name: _img(res, name.removesuffix(".png")) for name in kinds})
    path = docs / "results-selmcast.md"
    path.write_text(render_markdown(results, command=command, sweep=sweep, floors=floors))
    if floors is not None:
        floors_study.plot_floors(floors, docs / "img" / "selmcast-floors.png")
        (docs / "results-p2p-mixing.md").write_text(render_mixing(floors, command=command))
    return path


def _policy_table(res: dict[str, Any]) -> list[str]:
    first, *figures = _policy_columns(res)
    return ex.aggregate_table([{"label": k, **p} for k, p in res["policies"].items()], [first, *ex.right(*figures)])


def _ratio_columns() -> list[Col]:
    """SELMCAST's ratios to a baseline (:data:`RATIOS`), a line per comparison."""
    return [ex.key_col(what, key, ex.fmt_x, what, "x") for what, key, *_ in RATIOS]


def _ratio_table(res: dict[str, Any]) -> list[str]:
    lines = [{"label": name, **r} for name, r in res["ratios"].items()]
    columns = [ex.key_col("comparison", "label", str), *ex.right(*_ratio_columns())]
    return ex.aggregate_table(lines, columns) if lines else []


def _section(res: dict[str, Any]) -> dict[str, Any]:
    """A scenario's section: its tables and plots."""
    return {
        "res": res,
        "scenario": res["scenario"],
        "target": target_text(res),
        "shown": Path(res["dir"]).name.replace("seed-", "seed "),
        "setup": "\n".join(setup_markdown([res["setup"]] if res.get("setup") else [])),
        "table": "\n".join(_policy_table(res)),
        "ratios": "\n".join(_ratio_table(res)),
        "curve": _curve(res),
        "img_curve": _img(res, _curve(res)),
        "img_exchange": _img(res, "exchange"),
        "img_shares": _img(res, "shares"),
        "timelines": "\n".join(f"![{p.stem}](img/{_img(res, p.stem)})" for p in _timelines(Path(res["dir"]))),
    }


def render_mixing(fair: dict[str, Any], *, command: str) -> str:
    """``results-p2p-mixing.md``: equal vs push-sum mixing on skewed shards, before and after the floor."""
    values = floors_study.floor_values(fair)
    return ex.fill_page(PAGE["mixing"], values, command=command, date=time.strftime("%Y-%m-%d"))


def render_markdown(
    results: list[dict[str, Any]],
    *,
    command: str,
    sweep: dict[str, Any] | None = None,
    floors: dict[str, Any] | None = None,
) -> str:
    import platform

    import torch

    from hetsync.benches.common import _cpus

    first, *rest = _window_columns(sweep) if sweep else [None]

    return ex.fill_page(
        PAGE["page"],
        command=command,
        date=time.strftime("%Y-%m-%d"),
        machine=f"{platform.machine()}, {_cpus()} CPUs, torch {torch.__version__}",
        sections=[_section(res) for res in results],
        sweep=sweep,
        sweep_target=target_text(sweep) if sweep else None,
        sweep_table=ex.aggregate_table([sweep["baseline"], *sweep["windows"]], [first, *ex.right(*rest)])
        if sweep
        else [],
        fair=floors_study.floor_values(floors) if floors else None,
        floors=floors["floors"] if floors else [],
    )
