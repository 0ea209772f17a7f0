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
shards under both mixings and writes ``results-p2p-mixing.md`` too. The
page is ``results-selmcast.md`` (``paper_selmcast.md.in``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from hetsync import report
from hetsync.benches import experiment as ex
from hetsync.benches import plots
from hetsync.benches.common import (
    Row,
    add_output_arguments,
    fmt_metric,
    mean_or_none,
    parse_numbers,
    parse_seeds,
    scenario_setup,
    setup_markdown,
    short_metric,
    split_list,
    target_text,
)
from hetsync.runner import write_json_atomic
from hetsync.scenario import add_override_argument, load_scenario, scenario_from_dict

NAME = "paper-selmcast"

SCENARIOS = ("p2p-bw", "p2p-homogeneous")
QUICK_MAX_TIME_S = 120.0
TIMELINE_S = 60.0  # window of the timelines (simulator)
RUNTIME_TIMELINE_S = 8.0  # real steps are short: a shorter window
TIMELINE_POLICIES = ("p2p-random", "selmcast")
# the ssp planning-window sweep: selmcast's window_s values against p2p-random, same rounds
WINDOW_SCENARIO = "p2p-bw"
WINDOWS_S = (0.0, 0.01, 0.05, 0.3)
WINDOW_BASELINE = "p2p-random:sync=ssp:p=2"
# the fairness floor: selmcast's floor on label-skewed and iid shards, both mixings, against p2p-random
FLOOR_SCENARIOS = ("p2p-bw-skew", "p2p-bw")
FLOORS = (0.0, 0.5, 1.0)
MIXINGS = ("equal", "push-sum")
FLOOR_BASELINES = {"bsp": "p2p-random:p=2", "ssp": "p2p-random:sync=ssp:p=2"}
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
DEFAULTS = {
    "quick": False,
    "scenarios": ",".join(SCENARIOS),
    "policies": None,
    "seeds": "0",
    "windows": ",".join(f"{w:g}" for w in WINDOWS_S),
    "floors": ",".join(f"{f:g}" for f in FLOORS),
    "runtime": False,
}
"""The options' defaults; the page's command names those that differ."""
METRICS = ("mean_receivers", "mean_exchange_s", "mean_round_s", "compute_share", "time_to_target_s", "final_metric")
"""The figures averaged over the seeds, per policy."""
FIGURES = (
    ("receivers per sender", "mean_receivers", ""),
    ("mean exchange", "mean_exchange_s", "s"),
    ("sync per step", "sync_s", "s"),
    ("mean round", "mean_round_s", "s"),
)
RATIOS = (
    ("sync shorter", "sync_speedup"),
    ("receivers", "receivers_ratio"),
    ("round shorter", "round_speedup"),
    ("faster to target", "tta_speedup"),
)
"""SELMCAST's ratios to a baseline under the same rounds: the paper's claims (name, key)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_output_arguments(p, NAME, "results-selmcast.md", quick=True)
    ex.add_quick_argument(p, QUICK_MAX_TIME_S)
    p.add_argument("--scenarios", default=DEFAULTS["scenarios"], help="comma-separated (default: %(default)s)")
    p.add_argument("--policies", default=None, help="comma-separated specs (default: each scenario's list)")
    p.add_argument("--seeds", default="0", help="comma-separated seeds; several give means (default: 0)")
    p.add_argument(
        "--windows",
        default=DEFAULTS["windows"],
        help=f"selmcast's ssp window_s values to sweep on {WINDOW_SCENARIO}; 'none' skips (default: %(default)s)",
    )
    p.add_argument(
        "--floors",
        default=DEFAULTS["floors"],
        help=f"selmcast's floor values to compare on {', '.join(FLOOR_SCENARIOS)} under both mixings; "
        "'none' skips (default: %(default)s)",
    )
    add_override_argument(p, "workers=8")
    p.add_argument(
        "--runtime",
        action="store_true",
        help="also run on real processes: 4 workers on p2p-bw with throttled links (about 6 min)",
    )


def run(args: argparse.Namespace) -> list[Row]:
    overrides = ex.overrides_of(args, QUICK_MAX_TIME_S)
    scenarios = split_list(args.scenarios, "--scenarios")
    exp = ex.Experiment(
        cases=tuple(ex.Case(key=Path(name).stem, scenario=name) for name in scenarios),
        policies=tuple(split_list(args.policies, "--policies")) if args.policies else None,
        seeds=tuple(parse_seeds(args.seeds)),
        overrides=overrides,
        seed_dirs=False,
    )
    exp.validate()  # every scenario before the first run
    out = Path(args.out)
    windows = parse_numbers(
        args.windows,
        "--windows",
        what="a number of seconds",
        example="e.g. 0,0.01,0.05",
        ok=lambda w: w >= 0 and w != float("inf"),
        bound="finite and >= 0",
    )
    floors = parse_numbers(
        args.floors,
        "--floors",
        what="a number",
        example="fractions of p, e.g. 0,0.5,1",
        ok=lambda f: 0 <= f <= 1,
        bound="in [0, 1] (a fraction of p)",
    )
    results = [bench_scenario(exp, case, out) for case in exp.cases]
    sweep = bench_windows(windows, exp, out / "windows") if windows else None
    fair = bench_floors(floors, exp, out / "floors") if floors else None
    if args.runtime:
        results.append(bench_runtime(list(exp.policies) if exp.policies else None, out / "runtime"))
    for name, data in (("results", results), ("windows", sweep), ("floors", fair)):
        if data is not None:
            write_json_atomic(out / f"{name}.json", data)
    command = ex.command_line(NAME, args, list(DEFAULTS.items()))
    ex.publish(args, lambda where: write_docs(results, where, command=command, sweep=sweep, floors=fair))
    return rows_of(results) + window_rows(sweep) + floor_rows(fair)


# ------------------------------------------------------------------ running
def _progress(s: dict[str, Any]) -> str:
    return (
        f"receivers/sender {s['mean_receivers']:.2f}, exchange {ex.fmt_secs(s['mean_exchange_s'])}, "
        f"compute {100 * s['compute_share']:.1f}%, TTA {ex.fmt_secs(s['time_to_target_s'])}"
    )


def _draw(window_s: float) -> Any:
    """A seed's plots: metric, shares, exchanges, and the timelines of the first ``window_s``."""

    def exchanges(runs: list[dict[str, Any]], where: Path, sc: Any) -> None:
        plot_exchange(runs, where / "exchange.png", title=f"peer-to-peer exchanges · {sc.name}")

    return plots.case_plots(
        baselines=None, timelines=TIMELINE_POLICIES, timeline_s=window_s, max_workers=16, more=exchanges
    )


def bench_scenario(exp: ex.Experiment, case: ex.Case, out: Path) -> dict[str, Any]:
    """Every policy on one scenario and every seed (simulator); one record."""
    sc, runs_by_seed = exp.run_case(case, out, progress=_progress, after=_draw(TIMELINE_S))
    where = exp.folder(out, case, exp.seeds[-1])  # the plots the page shows: the last seed's
    return {**_aggregate(sc.name, "sim", runs_by_seed, where), "setup": scenario_setup(sc)}


def bench_runtime(specs: list[str] | None, out: Path) -> dict[str, Any]:
    """The comparison on real processes with throttled links (rank 0 coordinates)."""
    raw = {**load_scenario(RUNTIME_SCENARIO).source, **RUNTIME_OVERRIDES, "name": f"{RUNTIME_SCENARIO}-runtime"}
    sc = scenario_from_dict(raw)
    specs = specs or list(sc.policies)
    report.terminal_console().print(
        f"  runtime: {sc.workers} workers + coordinator, throttled links, {len(specs)} policies, "
        f"{sc.max_time_s:g} s each"
    )
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
    sc, runs_by_seed = sweep.run_case(sweep.cases[0], out, progress=_progress)
    base_label, *labels = ex.labels_of(runs_by_seed)
    base = {"label": base_label, **_point(ex.by_label(runs_by_seed, base_label))}
    points = []
    for w, label in zip(windows, labels, strict=True):
        point = {"label": label, **_point(ex.by_label(runs_by_seed, label)), "window_s": w}
        point["receivers_ratio"] = ex.ratio(point["mean_receivers"], base["mean_receivers"])
        point["tta_speedup"] = ex.ratio(base["time_to_target_s"], point["time_to_target_s"])
        points.append(point)
    first = next(iter(runs_by_seed.values()))[0]
    return {
        "scenario": sc.name,
        "seeds": sorted(runs_by_seed),
        "baseline": base,
        "windows": points,
        **_target(first),
    }


def copies_in(run: dict[str, Any], where: Path) -> list[int]:
    """Copies each worker received in a run (its trace's ``send`` records)."""
    from hetsync.trace import iter_records

    got = [0] * run["workers"]
    for rec in iter_records(where / run["trace"], kinds="send"):
        got[int(rec["to"])] += 1
    return got


def bench_floors(floors: list[float], exp: ex.Experiment, out: Path) -> dict[str, Any]:
    """SELMCAST with each floor and p2p-random, under BSP and SSP, on every
    scenario of ``FLOOR_SCENARIOS`` under both mixings, for every seed
    (simulator). Per case and policy: the final metric of each seed and their
    mean, round, receivers per sender, time to target, and the copies per
    round of the least- and the most-served worker (a round being one
    multicast per worker); ratios to p2p-random under the same rounds."""
    ssp = {"bsp": "", "ssp": "sync=ssp:"}
    specs = [
        spec
        for sync in ("bsp", "ssp")
        for spec in (FLOOR_BASELINES[sync], *(f"selmcast:{ssp[sync]}p=2:floor={f:g}" for f in floors))
    ]
    sweep = ex.Experiment(
        cases=tuple(
            ex.Case(key=f"{name}-{mix}", scenario=name, overrides={"p2p_mixing": mix})
            for name in FLOOR_SCENARIOS
            for mix in MIXINGS
        ),
        policies=tuple(specs),
        seeds=exp.seeds,
        overrides=exp.overrides,
        seed_dirs=True,
    )

    def count(runs: list[dict[str, Any]], where: Path, _sc: Any) -> None:
        for r in runs:
            got = copies_in(r, where)
            rounds = r["multicasts"] / r["workers"] if r["multicasts"] else 0.0
            r["least_served"] = min(got) / rounds if rounds else None
            r["most_served"] = max(got) / rounds if rounds else None

    cases, target = [], {}
    for case in sweep.cases:
        _sc, runs_by_seed = sweep.run_case(case, out, progress=_progress, after=count)
        rows = []
        for label in ex.labels_of(runs_by_seed):
            rs = ex.by_label(runs_by_seed, label)
            target = target or _target(rs[0])
            rows.append(
                {
                    "label": label,
                    "policy": rs[0]["policy"],
                    "sync": rs[0]["params"]["sync"],
                    "floor": rs[0]["params"].get("floor") if rs[0]["policy"] == "selmcast" else None,
                    "finals": [r["final_metric"] for r in rs],
                    **_point(rs, (*METRICS, "least_served", "most_served"), sync_s=False),
                }
            )
        for row in rows:
            base = next(b for b in rows if b["policy"] == "p2p-random" and b["sync"] == row["sync"])
            row["metric_gain"] = row["final_metric"] - base["final_metric"]
            row["round_speedup"] = ex.ratio(base["mean_round_s"], row["mean_round_s"])
            row["receivers_ratio"] = ex.ratio(row["mean_receivers"], base["mean_receivers"])
        cases.append({"scenario": case.scenario, "mixing": case.overrides["p2p_mixing"], "rows": rows})
    return {"seeds": list(exp.seeds), "floors": floors, "cases": cases, **target}


def _point(rs: list[dict[str, Any]], metrics: tuple[str, ...] = METRICS, *, sync_s: bool = True) -> dict[str, Any]:
    """A policy's runs over the seeds: the means of ``metrics`` (and of the
    time per step not computing), and how many seeds reached the target."""
    synced = {"sync_s": mean_or_none([sync_per_step_s(r) for r in rs])} if sync_s else {}
    return {
        **ex.means(rs, {m: m for m in metrics}),
        **synced,
        "reached": sum(r["time_to_target_s"] is not None for r in rs),
        "seeds": len(rs),
    }


def _target(run: dict[str, Any]) -> dict[str, Any]:
    return {k: run[k] for k in ("target_metric", "target_value", "target_direction")}


def _aggregate(scenario: str, driver: str, runs_by_seed: ex.RunsBySeed, where: Path) -> dict[str, Any]:
    """Means over seeds per policy label; ratios of selmcast to each baseline per sync."""
    policies = {}
    for label in ex.labels_of(runs_by_seed):
        rs = ex.by_label(runs_by_seed, label)
        policies[label] = {"policy": rs[0]["policy"], "sync": rs[0]["params"]["sync"], **_point(rs)}
    ratios = {}
    for sync in ("bsp", "ssp"):
        sel = _pick(policies, "selmcast", sync)
        for base in ("p2p-random", "p2p-allreduce"):
            other = _pick(policies, base, sync)
            if sel is None or other is None:
                continue
            ratios[f"{sync}: selmcast vs {base}"] = {
                "sync_speedup": ex.ratio(other["sync_s"], sel["sync_s"]),
                "receivers_ratio": ex.ratio(sel["mean_receivers"], other["mean_receivers"]),
                "round_speedup": ex.ratio(other["mean_round_s"], sel["mean_round_s"]),
                "tta_speedup": ex.ratio(other["time_to_target_s"], sel["time_to_target_s"]),
            }
    return {
        "scenario": scenario,
        "driver": driver,
        "seeds": sorted(runs_by_seed),
        "policies": policies,
        "ratios": ratios,
        **_target(next(iter(runs_by_seed.values()))[0]),
        "dir": str(where),
    }


def sync_per_step_s(run: dict[str, Any]) -> float:
    """Time a worker spends not computing, per step, averaged over workers:
    what a round's synchronization costs, under BSP and SSP alike."""
    pw = run["per_worker"]
    per = [(run["wall_time_s"] - c) / k for c, k in zip(pw["compute_s"], pw["steps"], strict=True) if k]
    return sum(per) / len(per)


def _pick(policies: dict[str, dict[str, Any]], policy: str, sync: str) -> dict[str, Any] | None:
    return next((p for p in policies.values() if p["policy"] == policy and p["sync"] == sync), None)


# --------------------------------------------------------------------- rows
def rows_of(results: list[dict[str, Any]]) -> list[Row]:
    """Per scenario a table, per policy a line (receivers, exchange, sync per
    step, round, compute share in %, time to target, final metric); then
    SELMCAST's ratios to each baseline as a table of their own."""
    rows: list[Row] = []
    for res in results:
        seeds = res["seeds"]
        where = f"{res['scenario']} ({res['driver']}), seed{'s' if len(seeds) > 1 else ''} "
        where += ",".join(map(str, seeds)) + (" (means)" if len(seeds) > 1 else "")
        metric = res["target_metric"]
        for label, p in res["policies"].items():
            keys = {"policy": label, "setting": where, "scenario": res["scenario"]}
            rows += ex.figure_rows(p, FIGURES, keys) + ex.share_rows({"compute": p["compute_share"]}, keys)
            tta, all_reached = p["time_to_target_s"], p["reached"] == p["seeds"]
            shown = (
                "not reached" if tta is None else None if all_reached else f"{tta:.3g} ({p['reached']}/{p['seeds']})"
            )
            rows.append({"metric": f"time to {target_text(res)}", "value": tta, "unit": "s", "shown": shown, **keys})
            final = fmt_metric(metric, p["final_metric"])
            rows.append({"metric": f"final {metric}", "value": p["final_metric"], "unit": "", "shown": final, **keys})
        for name, r in res["ratios"].items():
            keys = {"policy": name, "setting": f"{where}: ratios", "scenario": res["scenario"]}
            rows += ex.figure_rows(r, [(what, key, "x") for what, key in RATIOS], keys)
    return rows


def window_rows(sweep: dict[str, Any] | None) -> list[Row]:
    """The window sweep: per window (and the baseline) receivers, their ratio
    to random's, exchange, round, time to target, final metric."""
    if sweep is None:
        return []
    rows: list[Row] = []
    setting = f"{sweep['scenario']} (sim), ssp window sweep, seeds {','.join(map(str, sweep['seeds']))}"
    for p in [sweep["baseline"], *sweep["windows"]]:
        keys = {"policy": p["label"], "setting": setting, "scenario": sweep["scenario"]}
        figures = [FIGURES[0], *([("receivers vs random", "receivers_ratio", "x")] if "receivers_ratio" in p else [])]
        figures += [FIGURES[1], FIGURES[3], (f"time to {target_text(sweep)}", "time_to_target_s", "s")]
        rows += ex.figure_rows(p, [*figures, (f"final {sweep['target_metric']}", "final_metric", "")], keys)
    return rows


def floor_rows(fair: dict[str, Any] | None) -> list[Row]:
    """The floor comparison: per case and policy the mean final metric, its
    gain over p2p-random, round, receivers per sender, least/most served."""
    if fair is None:
        return []
    rows: list[Row] = []
    metric = fair["target_metric"]
    figures = [(f"final {metric}", "final_metric", ""), (f"final {metric} vs random", "metric_gain", "")]
    figures += [FIGURES[3], FIGURES[0], ("least served, copies/round", "least_served", "")]
    figures += [("most served, copies/round", "most_served", "")]
    for case in fair["cases"]:
        setting = (
            f"{case['scenario']} (sim), mixing {case['mixing']}, seeds {','.join(map(str, fair['seeds']))} (means)"
        )
        for p in case["rows"]:
            rows += ex.figure_rows(p, figures, {"policy": p["label"], "setting": setting, "scenario": case["scenario"]})
    return rows


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


def plot_floors(fair: dict[str, Any], path: Path) -> Path:
    """Small multiples, one panel per scenario and rounds: mean final metric
    per policy, a bar per mixing, with each seed as a dot."""
    from matplotlib.figure import Figure

    scenarios = list(dict.fromkeys(c["scenario"] for c in fair["cases"]))
    fig = Figure(figsize=(12, 3.2 * len(scenarios)), layout="constrained")
    axes = fig.subplots(len(scenarios), 2, squeeze=False)
    colors = {"equal": "tab:blue", "push-sum": "tab:orange"}
    for row, name in enumerate(scenarios):
        for col, sync in enumerate(("bsp", "ssp")):
            ax = axes[row][col]
            cases = [c for c in fair["cases"] if c["scenario"] == name]
            labels = [p["label"] for p in cases[0]["rows"] if p["sync"] == sync]
            for k, case in enumerate(cases):
                ps = [p for p in case["rows"] if p["sync"] == sync]
                y = [i + (k - 0.5) * 0.38 for i in range(len(ps))]
                ax.barh(
                    y,
                    [p["final_metric"] for p in ps],
                    height=0.36,
                    color=colors.get(case["mixing"]),
                    label=case["mixing"],
                )
                for yi, p in zip(y, ps, strict=True):
                    ax.plot(p["finals"], [yi] * len(p["finals"]), "k.", markersize=4)
                base = next(p["final_metric"] for p in ps if p["policy"] == "p2p-random")
                ax.axvline(base, color=colors.get(case["mixing"]), linestyle="--", linewidth=0.8)
            ax.set_yticks(range(len(labels)), [_short_label(x) for x in labels], fontsize=8)
            ax.invert_yaxis()
            lo = min(min(p["finals"]) for c in cases for p in c["rows"])
            ax.set_xlim(max(0.0, lo - 0.05), 1.0)
            ax.set_xlabel(f"final {short_metric(fair['target_metric'])} (equal time)")
            ax.set_title(f"{name} · {sync}", fontsize=10, loc="left")
            for side in ("top", "right"):
                ax.spines[side].set_visible(False)
            if row == 0 and col == 1:
                ax.legend(fontsize=8, loc="lower right")
    fig.suptitle(
        "SELMCAST's fairness floor vs random receivers; dots: seeds, dashed: p2p-random's mean",
        x=0.01,
        ha="left",
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def _short_label(label: str) -> str:
    """``selmcast(sync=bsp,p=2,bandwidth=worst,floor=0.5)`` → ``selmcast floor=0.5``."""
    name, _, rest = label.partition("(")
    floor = next((part for part in rest.rstrip(")").split(",") if part.startswith("floor=")), None)
    if name == "selmcast":
        return f"selmcast {floor or 'floor=0 (paper)'}"
    return name


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
        plot_floors(floors, docs / "img" / "selmcast-floors.png")
        (docs / "results-p2p-mixing.md").write_text(render_mixing(floors, command=command))
    return path


def _tta(p: dict[str, Any]) -> str:
    reached = "" if p["reached"] == p["seeds"] else f" ({p['reached']}/{p['seeds']})"
    return f"{ex.fmt_secs(p['time_to_target_s'])}{reached}"


def _columns(*names: str, metric: str = "accuracy") -> list[ex.Column]:
    """The page tables' columns, by name."""
    columns: dict[str, ex.Column] = {
        "policy": ("policy", lambda p: p["label"]),
        "receivers": ("receivers / sender", lambda p: f"{p['mean_receivers']:.2f}"),
        "exchange": ("exchange", lambda p: ex.fmt_secs(p["mean_exchange_s"])),
        "sync": ("sync / step", lambda p: ex.fmt_secs(p["sync_s"])),
        "round": ("round", lambda p: ex.fmt_secs(p["mean_round_s"])),
        "tta": ("time to target", _tta),
        "final": (f"final {short_metric(metric)}", lambda p: fmt_metric(metric, p["final_metric"])),
    }
    return [columns[name] for name in names]


def _policy_table(res: dict[str, Any]) -> list[str]:
    columns = _columns("policy", "receivers", "exchange", "sync", "round")
    columns += [("compute share", lambda p: ex.pct_cell(p["compute_share"])), *_columns("tta")]
    columns += _columns("final", metric=res["target_metric"])
    return ex.aggregate_table([{"label": k, **p} for k, p in res["policies"].items()], columns, left=1)


def _ratio_table(res: dict[str, Any]) -> list[str]:
    lines = [[name, *(ex.fmt_x(r[key]) for _, key in RATIOS)] for name, r in res["ratios"].items()]
    return ex.md_table(["comparison", *(what for what, _ in RATIOS)], lines, left=1) if lines else []


def _section(res: dict[str, Any]) -> str:
    several = len(res["seeds"]) > 1
    shown = Path(res["dir"]).name.replace("seed-", "seed ")
    return ex.fill_page(
        PAGE["section"],
        scenario=res["scenario"],
        driver="simulator" if res["driver"] == "sim" else "real processes",
        seeds=", ".join(map(str, res["seeds"])),
        target=target_text(res),
        seed_note=f"Means over seeds; TTA over the seeds that reached it; the plots show {shown}."
        if several
        else "One seed: each figure is that run's.",
        setup=setup_markdown([res["setup"]] if res.get("setup") else []),
        table=_policy_table(res),
        ratios=_ratio_table(res),
        curve=_curve(res),
        img_curve=_img(res, _curve(res)),
        img_exchange=_img(res, "exchange"),
        img_shares=_img(res, "shares"),
        timelines=[f"![{p.stem}](img/{_img(res, p.stem)})" for p in _timelines(Path(res["dir"]))],
    )


def _windows_section(sweep: dict[str, Any] | None) -> str:
    if sweep is None:
        return ""
    columns = [*_columns("policy"), ("window", lambda p: "—" if "window_s" not in p else f"{p['window_s']:g} s")]
    columns += [*_columns("receivers"), ("vs random", lambda p: ex.fmt_x(p.get("receivers_ratio", 1.0)))]
    columns += [*_columns("exchange", "sync", "round", "tta")]
    columns += [("faster to target", lambda p: ex.fmt_x(p.get("tta_speedup", 1.0)))]
    columns += _columns("final", metric=sweep["target_metric"])
    return ex.fill_page(
        PAGE["windows"],
        scenario=sweep["scenario"],
        seeds=", ".join(map(str, sweep["seeds"])),
        target=target_text(sweep),
        table=ex.aggregate_table([sweep["baseline"], *sweep["windows"]], columns, left=1),
    )


def _floor_table(fair: dict[str, Any], scenario: str) -> list[str]:
    """One line per mixing and policy of ``scenario``: the final metric of
    each seed, its mean and gain over p2p-random, round and its ratio,
    receivers per sender, least/most served, time to target."""
    metric = fair["target_metric"]
    seeds = " / ".join(map(str, fair["seeds"]))

    def served(p: dict[str, Any]) -> str:
        return f"{p['least_served']:.2f} / {p['most_served']:.2f}" if p["least_served"] is not None else "—"

    columns = [*_columns("policy"), ("mixing", lambda p: p["mixing"])]
    columns += [
        (
            f"final {short_metric(metric)}, seeds {seeds}",
            lambda p: " / ".join(fmt_metric(metric, v) for v in p["finals"]),
        ),
        ("mean", lambda p: f"**{fmt_metric(metric, p['final_metric'])}**"),
        ("vs random", lambda p: "—" if p["policy"] == "p2p-random" else f"{p['metric_gain']:+.3f}"),
        *_columns("round"),
        ("round shorter", lambda p: ex.fmt_x(p["round_speedup"])),
        *_columns("receivers"),
        ("least / most served", served),
        *_columns("tta"),
    ]
    lines = [{**p, "mixing": c["mixing"]} for c in fair["cases"] if c["scenario"] == scenario for p in c["rows"]]
    return ex.aggregate_table(lines, columns, left=3)


def _gain_table(fair: dict[str, Any], scenario: str) -> list[str]:
    """Per selmcast floor, its mean final metric minus p2p-random's in each
    (mixing, rounds) cell of ``scenario``, its round ratio, and in how many
    cells it is at least random's."""
    cases = [c for c in fair["cases"] if c["scenario"] == scenario]
    cells = [(c["mixing"], sync) for c in cases for sync in ("bsp", "ssp")]
    header = ["selmcast", *(f"{mix}, {sync}" for mix, sync in cells), "at least random's", "round shorter (bsp / ssp)"]
    lines = []
    for floor in fair["floors"]:
        row, rounds = {}, {}
        for c in cases:
            for p in c["rows"]:
                if p["policy"] == "selmcast" and (p["floor"] or 0.0) == floor:
                    row[(c["mixing"], p["sync"])] = p["metric_gain"]
                    rounds[p["sync"]] = p["round_speedup"]
        lines.append(
            [
                "floor=0 (paper)" if floor == 0 else f"floor={floor:g}",
                *(f"{row[cell]:+.3f}" for cell in cells),
                f"{sum(row[cell] >= 0 for cell in cells)} of {len(cells)}",
                f"{ex.fmt_x(rounds.get('bsp'))} / {ex.fmt_x(rounds.get('ssp'))}",
            ]
        )
    return ex.md_table(header, lines, left=1)


def _floor_values(fair: dict[str, Any]) -> dict[str, str]:
    """The floor section's and the mixing page's figures: gains and tables per scenario."""
    scenarios = dict.fromkeys(c["scenario"] for c in fair["cases"])
    return {
        "seeds": ", ".join(map(str, fair["seeds"])),
        "target": target_text(fair),
        "gains": "\n\n".join(f"*{name}*\n\n" + "\n".join(_gain_table(fair, name)) for name in scenarios),
        "tables": "\n\n".join(f"**{name}**\n\n" + "\n".join(_floor_table(fair, name)) for name in scenarios),
    }


def render_mixing(fair: dict[str, Any], *, command: str) -> str:
    """``results-p2p-mixing.md``: equal vs push-sum mixing on skewed shards, before and after the floor."""
    return ex.fill_page(PAGE["mixing"], _floor_values(fair), command=command, date=time.strftime("%Y-%m-%d"))


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

    floor_section = (
        ""
        if floors is None
        else ex.fill_page(PAGE["floors"], _floor_values(floors), floors=", ".join(f"{f:g}" for f in floors["floors"]))
    )
    return ex.fill_page(
        PAGE["page"],
        command=command,
        date=time.strftime("%Y-%m-%d"),
        machine=f"{platform.machine()}, {_cpus()} CPUs, torch {torch.__version__}",
        sections="\n".join(_section(res) for res in results),
        windows=_windows_section(sweep),
        floors=floor_section,
    )
