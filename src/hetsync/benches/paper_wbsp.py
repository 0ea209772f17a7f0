"""``hetsync bench paper-wbsp``: the WBSP paper's experiment in the simulator.

Yang, Hu, Liu, Jin, Yeung, You, "WBSP: Addressing stragglers in distributed
machine learning with worker-busy synchronous parallel", Parallel Computing
121 (2024) 103092, make half of the workers slow by sleeping 0.5 / 1.0 /
1.5 s before every step (settings H1 / H2 / H3) and compare WBSP and its
overlapped version with BSP, SSP (s = 40) and ASP. They report that WBSP
spends 91 % of the time computing against 55–72 % for the other methods, and
reaches the target accuracy in up to 60 % less time than the fastest of them.

This benchmark runs the same comparison on the built-in scenarios
``wbsp-h1``, ``wbsp-h2`` and ``wbsp-h3`` and prints, per scenario and
policy, the compute share, the time to the target accuracy, the final
accuracy and the time to target relative to the fastest baseline (BSP, SSP,
ASP: every policy that is not WBSP). It writes the runs under ``--out``
(``summary.json``, traces and plots per scenario, and ``results.json``) and,
unless told otherwise, ``docs/results-wbsp.md`` with the plots copied to
``docs/img/wbsp-*.png``. Every figure is measured in the run that prints it.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

from hetsync import report
from hetsync.benches.common import Row
from hetsync.errors import BadInput
from hetsync.runner import compare, write_json_atomic
from hetsync.scenario import Scenario, load_scenario, parse_override

NAME = "paper-wbsp"
HELP = "WBSP paper set-up H1-H3: BSP, SSP(s=40), ASP, WBSP, WBSP-overlap; compute share and time to accuracy"

SCENARIOS = ("wbsp-h1", "wbsp-h2", "wbsp-h3")
POLICIES = ("bsp", "ssp:s=40", "asp", "wbsp", "wbsp-overlap")
CANDIDATES = frozenset({"wbsp", "wbsp-overlap"})  # every other policy is a baseline
QUICK_MAX_TIME_S = 30.0

PAPER_COMPUTE_SHARE_WBSP = 0.91
PAPER_COMPUTE_SHARE_OTHERS = (0.55, 0.72)
PAPER_TTA_REDUCTION = 0.60  # "up to 60 % lower than the fastest baseline"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="runs/paper-wbsp", help="output folder (default: runs/paper-wbsp)")
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK_MAX_TIME_S:g} virtual seconds per run instead of the scenario's; writes no docs unless --docs",
    )
    p.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated (default: %(default)s)")
    p.add_argument("--policies", default=",".join(POLICIES), help="comma-separated (default: %(default)s)")
    p.add_argument("--seeds", default="0", help="comma-separated seeds; several give medians (default: 0)")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a key of every scenario, e.g. --set workers=4 (repeatable)",
    )
    p.add_argument("--docs", default=None, metavar="DIR", help="write results-wbsp.md and img/ here (default: docs)")
    p.add_argument("--no-docs", action="store_true", help="write no docs")


def run(args: argparse.Namespace) -> list[Row]:
    overrides = dict(parse_override(o) for o in args.overrides)
    if args.quick:
        overrides.setdefault("max_time_s", QUICK_MAX_TIME_S)
    names = _split(args.scenarios, "--scenarios")
    specs = _split(args.policies, "--policies")
    seeds = _seeds(args.seeds)
    docs = None if args.no_docs else Path(args.docs) if args.docs else None if args.quick else Path("docs")
    results = bench_paper_wbsp(names, specs, seeds, Path(args.out), overrides=overrides)
    if docs is not None:
        write_docs(results, docs, command=_command(args))
    return rows_of(results)


def _command(args: argparse.Namespace) -> str:
    """The command line that reproduces this run (options left at their defaults omitted)."""
    parts = ["hetsync", "bench", NAME]
    if args.quick:
        parts.append("--quick")
    for option, value, default in (
        ("--scenarios", args.scenarios, ",".join(SCENARIOS)),
        ("--policies", args.policies, ",".join(POLICIES)),
        ("--seeds", args.seeds, "0"),
    ):
        if value != default:
            parts += [option, value]
    for o in args.overrides:
        parts += ["--set", o]
    return " ".join(shlex.quote(p) for p in parts)


def _split(text: str, option: str) -> list[str]:
    items = [s.strip() for s in text.split(",") if s.strip()]
    if not items:
        raise BadInput(f"{option} must name at least one item")
    return items


def _seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in _split(text, "--seeds")]
    except ValueError:
        raise BadInput(f"--seeds must be comma-separated integers, got {text!r}") from None
    if len(set(seeds)) != len(seeds):
        raise BadInput(f"--seeds lists a seed twice: {text!r}")
    return seeds


# ------------------------------------------------------------------ running
def bench_paper_wbsp(
    names: list[str],
    specs: list[str],
    seeds: list[int],
    out: Path,
    *,
    overrides: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Run every policy on every scenario and seed; return one record per scenario."""
    con = report.terminal_console()
    overrides = overrides or {}
    for name in names:  # validate every scenario before the first run
        load_scenario(name, **overrides)
    clock = [time.perf_counter()]

    def done(s: dict[str, Any]) -> None:
        now = time.perf_counter()
        tta = s["time_to_target_s"]
        con.print(
            f"  {s['scenario']} seed {s['seed']} · {s['label']}: compute {100 * s['compute_share']:.1f}%, "
            f"TTA {'—' if tta is None else f'{tta:g} s'}, final acc {s['final_accuracy']:.3f} "
            f"({now - clock[0]:.1f} s real)"
        )
        clock[0] = now

    results = []
    for name in names:
        runs_by_seed: dict[int, list[dict[str, Any]]] = {}
        for seed in seeds:
            sc = load_scenario(name, **{**overrides, "seed": seed})
            where = _run_dir(out, sc.name, seed, seeds)
            clock[0] = time.perf_counter()
            runs = compare(sc, specs, where, on_result=done)
            report.plot_accuracy(runs, where / "accuracy.png")
            report.plot_shares(runs, where / "shares.png")
            con.print(report.summary_table(runs))
            runs_by_seed[seed] = runs
        results.append(_aggregate(sc, runs_by_seed, out))
    write_json_atomic(out / "results.json", results)
    return results


def _run_dir(out: Path, scenario: str, seed: int, seeds: list[int]) -> Path:
    return out / scenario / f"seed-{seed}" if len(seeds) > 1 else out / scenario


def _median(values: list[float]) -> float:
    return float(statistics.median(values))


def _aggregate(sc: Scenario, runs_by_seed: dict[int, list[dict[str, Any]]], out: Path) -> dict[str, Any]:
    """Per policy: mean shares and accuracy, median time to target and ratio over the seeds."""
    seeds = sorted(runs_by_seed)
    fastest: dict[int, tuple[str, float] | None] = {}
    for seed, runs in runs_by_seed.items():
        reached = [(r["label"], r["time_to_target_s"]) for r in runs if r["policy"] not in CANDIDATES]
        reached = [(label, t) for label, t in reached if t is not None]
        fastest[seed] = min(reached, key=lambda lt: lt[1]) if reached else None
    policies = []
    for i, first in enumerate(runs_by_seed[seeds[0]]):
        per_seed = [runs_by_seed[s][i] for s in seeds]
        ttas = [r["time_to_target_s"] for r in per_seed]
        ratios = []
        for s, r in zip(seeds, per_seed, strict=True):
            base = fastest[s]
            ratios.append(r["time_to_target_s"] / base[1] if base and r["time_to_target_s"] is not None else None)
        all_reached = all(t is not None for t in ttas)
        all_ratios = all(x is not None for x in ratios)
        policies.append(
            {
                "policy": first["policy"],
                "label": first["label"],
                "baseline": first["policy"] not in CANDIDATES,
                "compute_share": statistics.fmean(r["compute_share"] for r in per_seed),
                "comm_share": statistics.fmean(r["comm_share"] for r in per_seed),
                "wait_share": statistics.fmean(r["wait_share"] for r in per_seed),
                "time_to_target_s": _median(ttas) if all_reached else None,  # type: ignore[arg-type]
                "reached": sum(t is not None for t in ttas),
                "tta_vs_fastest_baseline": _median(ratios) if all_ratios else None,  # type: ignore[arg-type]
                "final_accuracy": statistics.fmean(r["final_accuracy"] for r in per_seed),
                "steps": statistics.fmean(r["steps"] for r in per_seed),
                "dropped_steps": statistics.fmean(r["dropped_steps"] for r in per_seed),
                "updates": statistics.fmean(r["updates"] for r in per_seed),
                "max_staleness": max(r["max_staleness"] for r in per_seed),
                "per_seed": [
                    {
                        "seed": s,
                        "time_to_target_s": r["time_to_target_s"],
                        "tta_vs_fastest_baseline": x,
                        "compute_share": r["compute_share"],
                        "final_accuracy": r["final_accuracy"],
                        "host_time_s": r["host_time_s"],
                    }
                    for s, r, x in zip(seeds, per_seed, ratios, strict=True)
                ],
            }
        )
    where = _run_dir(out, sc.name, seeds[0], seeds)
    return {
        "scenario": sc.name,
        "description": sc.description,
        "workers": sc.workers,
        "delay_s": max(sc.delay_s),
        "target_accuracy": sc.target_accuracy,
        "max_time_s": sc.max_time_s,
        "seeds": seeds,
        "fastest_baseline": {s: (f[0] if f else None) for s, f in fastest.items()},
        "host_time_s": sum(r["host_time_s"] for runs in runs_by_seed.values() for r in runs),
        "plots": {"accuracy": str(where / "accuracy.png"), "shares": str(where / "shares.png")},
        "policies": policies,
    }


def rows_of(results: list[dict[str, Any]]) -> list[Row]:
    """The printed and ``--json`` rows: four figures per scenario and policy."""
    rows: list[Row] = []
    for res in results:
        for p in res["policies"]:
            setting = f"{res['scenario']}, {p['label']}"
            keys = {"scenario": res["scenario"], "policy": p["label"]}
            rows.append({"metric": "compute share", "value": 100 * p["compute_share"], "unit": "%", "setting": setting, **keys})
            if p["time_to_target_s"] is not None:
                rows.append(
                    {
                        "metric": f"time to accuracy {res['target_accuracy']:g}",
                        "value": p["time_to_target_s"],
                        "unit": "s (virtual)",
                        "setting": setting,
                        **keys,
                    }
                )
            else:
                rows.append(
                    {
                        "metric": f"accuracy {res['target_accuracy']:g} not reached in",
                        "value": res["max_time_s"],
                        "unit": "s (virtual)",
                        "setting": setting,
                        **keys,
                    }
                )
            rows.append({"metric": "final accuracy", "value": p["final_accuracy"], "unit": "", "setting": setting, **keys})
            if p["tta_vs_fastest_baseline"] is not None:
                rows.append(
                    {
                        "metric": "TTA / fastest baseline's",
                        "value": p["tta_vs_fastest_baseline"],
                        "unit": "ratio",
                        "setting": setting,
                        **keys,
                    }
                )
    return rows


# --------------------------------------------------------------------- docs
def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def _secs(x: float | None) -> str:
    return "—" if x is None else f"{x:.0f}" if x >= 100 else f"{x:.1f}"


def _span(values: list[float]) -> str:
    if not values:
        return "—"
    lo, hi = min(values), max(values)
    return f"{100 * lo:.0f}%" if round(100 * lo) == round(100 * hi) else f"{100 * lo:.0f}–{100 * hi:.0f}%"


def _img_name(scenario: str, kind: str) -> str:
    stem = report.safe_name(scenario)
    return f"{stem if stem.startswith('wbsp') else 'wbsp-' + stem}-{kind}.png"


def write_docs(results: list[dict[str, Any]], docs: Path, *, command: str) -> Path:
    """Write ``results-wbsp.md`` and copy the plots to ``img/wbsp-*.png``."""
    img = docs / "img"
    img.mkdir(parents=True, exist_ok=True)
    for res in results:
        for kind in ("accuracy", "shares"):
            shutil.copyfile(res["plots"][kind], img / _img_name(res["scenario"], kind))
    path = docs / "results-wbsp.md"
    path.write_text(render_markdown(results, command=command))
    return path


def _claims(results: list[dict[str, Any]]) -> list[str]:
    """The paper's two claims beside what this run measured."""
    shares: dict[str, list[float]] = {}
    others: list[float] = []
    reductions: dict[str, list[str]] = {}
    for res in results:
        for p in res["policies"]:
            if p["baseline"]:
                others.append(p["compute_share"])
            else:
                shares.setdefault(p["label"], []).append(p["compute_share"])
                ratio = p["tta_vs_fastest_baseline"]
                shown = "—" if ratio is None else f"{100 * (1 - ratio):+.0f}%".replace("+", "−", 1) if ratio < 1 else f"+{100 * (ratio - 1):.0f}%"
                reductions.setdefault(p["label"], []).append(f"{res['scenario']} {shown}")
    measured_share = "; ".join(f"{label} {_span(v)}" for label, v in shares.items())
    measured_tta = "; ".join(f"{label}: {', '.join(v)}" for label, v in reductions.items())
    lo, hi = PAPER_COMPUTE_SHARE_OTHERS
    return [
        "| claim (paper) | measured here |",
        "|---|---|",
        f"| WBSP computes {100 * PAPER_COMPUTE_SHARE_WBSP:.0f}% of the time | {measured_share} |",
        f"| the other methods {100 * lo:.0f}–{100 * hi:.0f}% | {_span(others)} |",
        f"| time to accuracy up to {100 * PAPER_TTA_REDUCTION:.0f}% lower than the fastest baseline"
        f" | time to accuracy vs the fastest baseline (− = faster): {measured_tta} |",
    ]


def render_markdown(results: list[dict[str, Any]], *, command: str) -> str:
    seeds = results[0]["seeds"] if results else [0]
    host = sum(r["host_time_s"] for r in results)
    lines = [
        "# WBSP in the simulator: the paper's H1–H3 experiment",
        "",
        "Yang, Hu, Liu, Jin, Yeung, You, *WBSP: Addressing stragglers in distributed machine learning",
        "with worker-busy synchronous parallel*, Parallel Computing 121 (2024) 103092. Written by",
        f"`{command}` ({host:.0f} s of run time; seed{'s' if len(seeds) > 1 else ''} "
        f"{', '.join(map(str, seeds))}{'; medians over seeds' if len(seeds) > 1 else ''}).",
        "Shares are of N × wall time; a run's wall time is virtual. TTA is the first evaluation",
        "(every `eval_every_s`) at which the global model reached the target accuracy.",
        "",
    ]
    for res in results:
        lines += [
            f"## {res['scenario']}: {res['description']}",
            "",
            f"Target accuracy {res['target_accuracy']:g}, {res['max_time_s']:g} virtual seconds per run; "
            f"fastest baseline: {', '.join(sorted({str(v) for v in res['fastest_baseline'].values()}))}.",
            "",
            "| policy | compute | comm | wait | TTA (s) | TTA vs fastest baseline | final acc | steps | dropped | updates | max stale |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for p in res["policies"]:
            ratio = p["tta_vs_fastest_baseline"]
            lines.append(
                f"| {p['label']} | {_pct(p['compute_share'])} | {_pct(p['comm_share'])} | {_pct(p['wait_share'])} "
                f"| {_secs(p['time_to_target_s'])} | {'—' if ratio is None else f'{ratio:.2f}'} "
                f"| {p['final_accuracy']:.3f} | {p['steps']:,.0f} | {p['dropped_steps']:,.0f} "
                f"| {p['updates']:,.0f} | {p['max_staleness']} |"
            )
        acc, shares = _img_name(res["scenario"], "accuracy"), _img_name(res["scenario"], "shares")
        lines += ["", f"![accuracy, {res['scenario']}](img/{acc})", f"![shares, {res['scenario']}](img/{shares})", ""]
    lines += ["## The paper's claims beside the measurements", "", *_claims(results), ""]
    lines += [WHY.strip(), ""]
    return "\n".join(lines)


WHY = """
## Reading the figures

(filled in below)
"""
