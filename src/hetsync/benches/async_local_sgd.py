"""``hetsync bench async-local-sgd``: asynchronous local SGD (Liu et al. 2024)
against BSP, local SGD and DiLoCo in the simulator (issue 28, item 3).

Liu, Chhaparia, Douillard, Kale, Rusu, Shen, Szlam, Ranzato, "Asynchronous
Local-SGD Training for Language Modeling" (arXiv:2401.09135, 2024) report
that asynchronous local SGD with Dynamic Local Updates and the delayed
Nesterov outer update matches synchronous local SGD (DiLoCo) in perplexity
per update and beats it in wall-clock time on heterogeneous workers.

The experiment (:mod:`hetsync.benches.experiment`), declared here before any
run and not tuned after: the scenarios as shipped (``lm-8``: the default
cluster training a small transformer with AdamW; ``default``: the same
cluster on digits with plain SGD), seeds 0, 1, 2, and per scenario
(:func:`policies_for`) BSP (the baseline), ``local-sgd:H=4``,
``diloco:H=10``, ``async-local-sgd:H=10`` (the paper's method: DyLU, delayed
Nesterov with N = the workers, DiLoCo's outer 0.7 / 0.9 and inner AdamW),
and three ablations of it: ``dylu=off`` (H steps for every worker),
``momentum_period=1`` (Nesterov at every arrival: the naive asynchronous
outer step the paper's DN replaces) and ``outer_momentum=0:outer_lr=1``
(no outer momentum: each delta added with weight 1/N, plain asynchronous
model averaging). On SGD-tuned scenarios DiLoCo's and asynchronous local
SGD's inner AdamW take ``inner_lr=0.01``, as ``hetsync advise`` gives DiLoCo
(:data:`hetsync.advise.DILOCO_SGD_INNER_LR`); on AdamW scenarios the
scenario's ``lr``.

Runs go under ``--out`` (``<scenario>/seed-<s>/``, ``results.json``); the
page ``results-async-local-sgd.md`` (``async_local_sgd.md.in``) and the first
seed's metric plots ``img/alsgd-*.png`` under ``--out``, and in ``--docs DIR``
when given.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from hetsync import report
from hetsync.benches import experiment as ex
from hetsync.benches.common import Row, add_output_arguments, parse_seeds, setup_markdown, split_list
from hetsync.runner import write_json_atomic
from hetsync.scenario import Scenario, add_override_argument, load_scenario

NAME = "async-local-sgd"
DOC_NAME = "results-async-local-sgd.md"
IMG_PREFIX = "alsgd"
SCENARIOS = ("lm-8", "default")
SEEDS = "0,1,2"
BASELINE = "bsp"
SYNC_PEER = "diloco"  # the synchronous counterpart: same optimizers, a barrier per round
POLICIES = (
    "bsp",
    "local-sgd:H=4",
    "diloco:H=10",
    "async-local-sgd:H=10",
    "async-local-sgd:H=10:dylu=off",
    "async-local-sgd:H=10:momentum_period=1",
    "async-local-sgd:H=10:outer_momentum=0:outer_lr=1",
)
"""The policies of every scenario, declared before any run (inner AdamW rates: :func:`policies_for`)."""
DEFAULTS = {"scenarios": ",".join(SCENARIOS), "seeds": SEEDS}
MEANS = ex.POLICY_MEANS
KEPT = ex.KEPT


def policies_for(sc: Scenario) -> tuple[str, ...]:
    """:data:`POLICIES` for this scenario: next to an SGD-tuned ``lr`` the
    inner AdamW of DiLoCo and asynchronous local SGD takes advise's small rate
    (:func:`hetsync.benches.experiment.inner_adamw_specs`)."""
    return ex.inner_adamw_specs(sc, POLICIES)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scenarios", default=DEFAULTS["scenarios"], help="comma-separated (default: %(default)s)")
    p.add_argument("--seeds", default=SEEDS, help="comma-separated seeds (default: %(default)s)")
    add_override_argument(p, "max_time_s=10")
    add_output_arguments(p, NAME, DOC_NAME)


def run(args: argparse.Namespace) -> list[Row]:
    overrides = ex.overrides_of(args)
    seeds = tuple(parse_seeds(args.seeds))
    experiments = []
    for name in split_list(args.scenarios, "--scenarios"):
        sc = load_scenario(name, **overrides)  # (a bad name or key fails before the first run)
        case = ex.Case(key=Path(name).stem, scenario=name)
        experiments.append(
            ex.Experiment(cases=(case,), policies=policies_for(sc), seeds=seeds, overrides=overrides, baseline=BASELINE)
        )
    command = ex.command_line(NAME, args, list(DEFAULTS.items()))
    results = bench_async_local_sgd(experiments, Path(args.out))
    ex.publish(args, lambda where: write_doc(results, where, Path(args.out), command))
    return rows(results)


# ------------------------------------------------------------------ running
def bench_async_local_sgd(experiments: list[ex.Experiment], out: Path) -> dict[str, Any]:
    """Every experiment's case; the records in ``out/results.json``."""
    t0 = time.perf_counter()
    cases = [case_result(exp, out) for exp in experiments]
    results = {"cases": cases, "host_time_s": time.perf_counter() - t0}
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "results.json", results)
    return results


def case_result(exp: ex.Experiment, out: Path) -> dict[str, Any]:
    """One scenario: its case record, each policy's aggregate with its paired
    speed-up over BSP and over DiLoCo (the same seed's runs)."""
    case = exp.cases[0]
    sc, per_seed = exp.run_case(case, out, after=_draw)
    aggregates = []
    for label in ex.labels_of(per_seed):
        a = ex.aggregate(label, per_seed, baseline=BASELINE, keys=MEANS, speedup="speedup_vs_bsp")
        vs_peer = ex.speedup_stats(label, per_seed, SYNC_PEER, "speedup_vs_diloco")
        vs_peer["diloco_pairs"] = vs_peer.pop("speedup_pairs")  # (BSP's pairs keep their key)
        aggregates.append(a | vs_peer)
    record = ex.case_record(sc, per_seed, aggregates=aggregates, keep=lambda r: ex.lite(r, KEPT), calm=[])
    return record | {"case": case.key, "policies": list(exp.policies or ())}


def _draw(runs: list[dict[str, Any]], folder: Path, _sc: Any) -> None:
    report.write_report(runs, folder)


# ------------------------------------------------------------------ tables
def columns(res: dict[str, Any]) -> list[ex.Col]:
    """Per policy: time to target, seeds that reached it (page), paired
    speed-ups over BSP and DiLoCo, final metric, throughput, updates,
    staleness, compute and wait shares."""
    col = ex.case_columns(res, baseline=BASELINE, speedup="speedup_vs_bsp")
    return [
        ex.Col("policy", lambda a: f"`{a['label']}`"),
        *(col[name] for name in ("tta", "reached", "speedup")),
        ex.Col(
            "speed-up vs DiLoCo, mean [range]",
            lambda a: ex.speedup_cell(_vs_peer(a), SYNC_PEER, "speedup_vs_diloco"),
            row=lambda a: ex.speedup_row(_vs_peer(a), baseline=SYNC_PEER, prefix="speedup_vs_diloco", keys={}),
        ),
        col["final"],
        ex.key_col("samples/s", "samples_per_s_mean", _fmt(".0f"), "samples/s"),
        ex.key_col("updates", "updates_mean", _fmt(".0f"), "updates"),
        ex.key_col("mean staleness (versions)", "mean_staleness", _fmt(".2f"), "mean staleness", "versions"),
        *(col[name] for name in ("compute", "wait")),
    ]


def _vs_peer(a: dict[str, Any]) -> dict[str, Any]:
    """The aggregate as the speed-up cells read it, with DiLoCo's pairs."""
    return a | {"speedup_pairs": a["diloco_pairs"]}


def _fmt(spec: str) -> Any:
    return lambda v: ex.fmt_num(v, spec)


def rows(results: dict[str, Any]) -> list[Row]:
    return ex.results_rows(results, columns)


# --------------------------------------------------------------------- page
PAGE = ex.page_blocks(__file__, "async_local_sgd.md.in")["page"]
"""The page (Jinja2): its prose, and the paragraphs that depend on the outcome."""


def write_doc(results: dict[str, Any], docs: Path, out: Path, command: str) -> Path:
    """``results-async-local-sgd.md`` in ``docs`` plus the first seed's metric plot per scenario in ``docs/img``."""
    img: dict[str, str] = {}
    for res in results["cases"]:
        name = f"{report.metric_plot_name([res])}.png"
        copied = ex.copy_plots(
            out / res["case"] / f"seed-{res['seeds'][0]}", docs / "img", {name: f"{IMG_PREFIX}-{res['case']}-{name}"}
        )
        img[res["case"]] = copied.get(name, "")
    path = docs / DOC_NAME
    path.write_text(ex.fill_page(PAGE, page_values(results), img=img, command=command), encoding="utf-8")
    return path


def page_values(results: dict[str, Any]) -> dict[str, Any]:
    """What the page reads: per scenario its record, table, set-up and the
    aggregates its prose names (``bsp``, ``diloco``, ``local``, ``alsgd``: the
    paper's method, and the ablations ``no_dylu``, ``every_arrival``,
    ``no_momentum``), and the checks its paragraphs turn on."""
    return {"r": results, "cases": [case_values(res) for res in results["cases"]]}


def case_values(res: dict[str, Any]) -> dict[str, Any]:
    agg = res["aggregate"]
    by = {a["label"]: a for a in agg}

    def find(policy: str, *, has: str = "", lacks: tuple[str, ...] = ()) -> dict[str, Any] | None:
        return next(
            (a for a in agg if a["policy"] == policy and has in a["label"] and not any(x in a["label"] for x in lacks)),
            None,
        )

    ablations = ("dylu=off", "momentum_period=1", "outer_momentum=0")
    alsgd = find("async-local-sgd", lacks=ablations)
    values = {
        "res": res,
        "case": ex.case_values(res),
        "setup_table": "\n".join(setup_markdown([res["setup"]])),
        "table": "\n".join(ex.aggregate_table(agg, columns(res))),
        "by": by,
        "bsp": find(BASELINE),
        "diloco": find(SYNC_PEER),
        "local": find("local-sgd"),
        "alsgd": alsgd,
        "no_dylu": find("async-local-sgd", has="dylu=off"),
        "every_arrival": find("async-local-sgd", has="momentum_period=1"),
        "no_momentum": find("async-local-sgd", has="outer_momentum=0"),
        "minimize": res["target_direction"] == "min",
    }
    values["verdict"] = verdict(values)
    minimize = values["minimize"]
    asyncs = [a for a in agg if a["policy"] == "async-local-sgd"]
    key = "final_metric_mean"
    best = (min if minimize else max)(asyncs, key=lambda a: a[key], default=None)
    values["best"] = best
    values["best_verdict"] = {k: better(best, values[k], minimize=minimize) for k in ("bsp", "diloco", "local")}
    values["dn_helps"] = final_better(alsgd, values["every_arrival"], minimize=minimize)
    values["dylu_helps"] = final_better(alsgd, values["no_dylu"], minimize=minimize)
    values["momentum_costs"] = final_better(values["no_momentum"], alsgd, minimize=minimize)
    everywhere = [a for a in agg if a["reached"] == a["seeds"]]
    values["fastest"] = min(everywhere, key=lambda a: a["tta_mean_s"], default=None)
    values["most_accurate"] = (min if minimize else max)(agg, key=lambda a: a[key])
    values["plain_fastest"] = bool(values["fastest"] and values["no_momentum"]) and (
        values["fastest"]["label"] == values["no_momentum"]["label"]
    )
    bsp, plain = values["bsp"], values["no_momentum"]
    values["thr_vs_bsp"] = ex.ratio(plain["samples_per_s_mean"], bsp["samples_per_s_mean"]) if plain and bsp else None
    # the method's best metric along its run (mean over the seeds) against its final one
    values["alsgd_best"] = (
        ex.mean_or_none([r["best_metric"] for r in ex.seed_runs(res, alsgd["label"])]) if alsgd else None
    )
    return values


final_better = ex.final_better
better = ex.better


def verdict(v: dict[str, Any]) -> dict[str, bool | None]:
    """Does the paper's method beat each synchronous policy here (:func:`better`)?"""
    return {key: better(v["alsgd"], v[key], minimize=v["minimize"]) for key in ("bsp", "diloco", "local")}
