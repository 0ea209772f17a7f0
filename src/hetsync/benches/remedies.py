"""``hetsync bench remedies``: the staleness remedies and the local-update
policies beside the plain policies on docs/results-real.md's scenarios
(issue 28, item 5).

docs/results-real.md found that on recipes with momentum SGD or AdamW the
asynchronous policies lose to BSP: their stale gradients go through the
server's momentum. hetsync has since grown remedies, options of the policies
that apply stale contributions (:mod:`hetsync.policies.staleness`):

- ``lr_scale=inverse``: a push of staleness τ at the rate × 1/max(1, τ)
  (Zhang, Gupta, Lian, Liu, "Staleness-Aware Async-SGD for Distributed Deep
  Learning", IJCAI 2016);
- ``compensate=0.04``: DC-ASGD's delay compensation g + λ·g⊙g⊙(θ_now − θ_then)
  (Zheng et al., "Asynchronous Stochastic Gradient Descent with Delay
  Compensation", ICML 2017);
- ``momentum=corrected``: the server's SGD momentum lowered by the implicit
  1 − 1/N of N asynchronous workers (Mitliagkas, Zhang, Hadjis, Ré,
  "Asynchrony begets Momentum", Allerton 2016; SGD momentum only, so not on
  ``lm-8``'s AdamW, where the policy refuses it);
- ElasticBSP's two readings of a superstep, ``within=async`` and
  ``within=local`` (Zhao et al., "Elastic Bulk Synchronous Parallel Model for
  Distributed Deep Learning", ICDM 2019);

and policies of local updates: DiLoCo (``diloco:H=10``), asynchronous local
SGD (``async-local-sgd:H=10``: Liu et al., "Asynchronous Local-SGD Training
for Language Modeling", 2024) and streaming DiLoCo (``streaming-diloco``:
Douillard et al., "Streaming DiLoCo with overlapping communication", 2025).

The experiment (:mod:`hetsync.benches.experiment`), declared before any run
and not tuned after (:data:`SCENARIOS`, :data:`SEEDS`, :func:`policies_for`):
the scenarios of docs/results-real.md with their lengths as shipped, each on
seeds 0, 1 and 2 (``wbsp-h1-signal`` too, which docs/results-real.md ran on seed
0 only: it is the costliest),
BSP (the baseline of the paired speed-ups), ASP, SSP(3) and DSSP each plain
and with every remedy, ElasticBSP R=15 in both readings, WBSP plain and with
``lr_scale=inverse``, and the three local-update policies (their inner AdamW
at advise's ``inner_lr`` next to an SGD-tuned rate). On ``lm-8`` (AdamW)
ASP and SSP(3) run once more at the scenario's ``lr`` / N, N the workers
(:data:`PER_SAMPLE_FAIR`): an asynchronous push moves the model lr/N, and
Adam's step does not shrink with the gradient, so at lr each push is a full
step where BSP takes one per N gradients.

Runs go under ``--out`` (``<case>/seed-<s>/``, ``results.json``); the page
``results-remedies.md`` (``remedies.md.in``) and the first seed's metric
plots ``img/remedies-*.png`` under ``--out``, and in ``--docs DIR`` when given.
"""

from __future__ import annotations

import argparse
import shlex
import time
from pathlib import Path
from typing import Any

from hetsync.benches import experiment as ex
from hetsync.benches.common import (
    Row,
    add_output_arguments,
    parse_seeds,
    setup_markdown,
    short_metric,
    split_list,
)
from hetsync.errors import BadInput
from hetsync.outdir import write_json_atomic
from hetsync.scenario import Scenario, add_override_argument, load_scenario

NAME = "remedies"
DOC_NAME = "results-remedies.md"
IMG_PREFIX = "remedies"
SCENARIOS = ("lm-8", "wbsp-h1-signal", "elastic-4-signal", "lbbsp-cpu-signal", "lbbsp-gpu-signal")
SEEDS = "0,1,2"
SEEDS_OF: dict[str, tuple[int, ...]] = {}
"""Scenarios declared on fewer seeds (of ``--seeds``): none (issue 28 asks for 3 seeds each)."""
BASELINE = "bsp"
REMEDIES = (":lr_scale=inverse", ":compensate=0.04", ":momentum=corrected")
"""Each asynchronous family's remedies; ``momentum=corrected`` on SGD-momentum scenarios only."""
STALE = ("asp", "ssp:s=3", "dssp")
POLICIES = (
    "bsp",
    *(spec + remedy for spec in STALE for remedy in ("", *REMEDIES)),
    "elastic-bsp:R=15:within=async",
    "elastic-bsp:R=15:within=local",
    "wbsp",
    "wbsp:lr_scale=inverse",
    "diloco:H=10",
    "async-local-sgd:H=10",
    "streaming-diloco",
)
"""The policies of every scenario, declared before any run (:func:`policies_for` adapts them)."""
LAST = ("lm-8",)
"""The costliest scenarios: among the second (third...) seeds, theirs run last. Seeds run in
rounds (every scenario's first, then every second...), so were the time to run out, every
scenario has whole seeds."""
PER_SAMPLE_FAIR = {"lm-8": ("asp", "ssp:s=3")}
"""Scenarios (AdamW) whose ASP and SSP run again at lr / N: these policies, in a case of their own."""
FAIR_SUFFIX = "lr/N"
DEFAULTS = {"scenarios": ",".join(SCENARIOS), "seeds": SEEDS}


def policies_for(sc: Scenario) -> tuple[str, ...]:
    """:data:`POLICIES` for this scenario: ``momentum=corrected`` only next to
    SGD momentum; the local-update policies' inner AdamW at advise's rate next
    to an SGD-tuned ``lr`` (:func:`hetsync.benches.experiment.inner_adamw_specs`)."""
    sgd_momentum = sc.job.optimizer.name == "sgd" and sc.job.optimizer.momentum > 0
    specs = [spec for spec in POLICIES if sgd_momentum or "momentum=corrected" not in spec]
    return ex.inner_adamw_specs(sc, specs)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scenarios", default=DEFAULTS["scenarios"], help="comma-separated (default: %(default)s)")
    p.add_argument("--seeds", default=SEEDS, help="comma-separated seeds (default: %(default)s)")
    p.add_argument("--jobs", type=int, default=2, help="processes running seeds at once (default: %(default)s)")
    p.add_argument("--resume", action="store_true", help="keep the runs an interrupted bench left under --out")
    p.add_argument(
        "--seeds-of",
        action="append",
        default=[],
        metavar="SCENARIO=SEEDS",
        help="run a scenario on only these of its seeds, e.g. lm-8=0 (repeatable; the page says what was cut)",
    )
    add_override_argument(p, "max_time_s=10")
    add_output_arguments(p, NAME, DOC_NAME)


def run(args: argparse.Namespace) -> list[Row]:
    overrides = ex.overrides_of(args)
    seeds = tuple(parse_seeds(args.seeds))
    cut = dict(_seeds_of(text) for text in args.seeds_of)
    cases: list[tuple[ex.Experiment, ex.Case]] = []
    declared: dict[str, list[int]] = {}
    for name in split_list(args.scenarios, "--scenarios"):
        sc = load_scenario(name, **overrides)  # (a bad name or key fails before the first run)
        key = Path(name).stem
        own = tuple(s for s in seeds if s in SEEDS_OF.get(key, seeds)) or seeds
        declared[key] = list(own)
        own = tuple(s for s in own if s in cut.get(key, own)) or own
        case = ex.Case(key=key, scenario=name)
        exp = ex.Experiment(cases=(case,), seeds=own, policies=policies_for(sc), overrides=overrides, baseline=BASELINE)
        cases.append((exp, case))
        if key in PER_SAMPLE_FAIR:
            fair = ex.Case(key=f"{key}-lr-over-n", scenario=name, overrides={"lr": sc.job.lr / sc.cluster.workers})
            cases.append(
                (ex.Experiment(cases=(fair,), seeds=own, policies=PER_SAMPLE_FAIR[key], overrides=overrides), fair)
            )
    how = ("jobs", "resume", "seeds_of")  # how it runs, not what: not part of the page's command (--seeds-of: added)
    command = ex.command_line(NAME, args, [o for o in ex.options_of(add_arguments) if o[0] not in how])
    command += "".join(f" --seeds-of {shlex.quote(text)}" for text in args.seeds_of)
    results = bench_remedies(cases, Path(args.out), jobs=args.jobs, resume=args.resume)
    results["command"] = command
    results["declared_seeds"] = declared
    results["resumed"] = bool(args.resume)
    write_json_atomic(Path(args.out) / "results.json", results)
    ex.publish(args, lambda where: write_doc(results, where))
    return rows(results)


def _seeds_of(text: str) -> tuple[str, tuple[int, ...]]:
    """``lm-8=0,1`` -> ``("lm-8", (0, 1))`` (``--seeds-of``)."""
    key, sep, seeds = text.partition("=")
    if not sep or not key:
        raise BadInput(f"--seeds-of wants SCENARIO=SEEDS, e.g. lm-8=0,1; got {text!r}")
    return key, tuple(parse_seeds(seeds))


# ------------------------------------------------------------------ running
def bench_remedies(
    cases: list[tuple[ex.Experiment, ex.Case]], out: Path, *, jobs: int, resume: bool = False
) -> dict[str, Any]:
    """Every case's seeds (``jobs`` at once); a record per scenario, the runs
    at lr / N merged into their scenario's, labelled ``… lr/N``."""
    t0 = time.perf_counter()
    seeds_of = {case.key: exp.seeds for exp, case in cases}

    def order(case: ex.Case, seed: int) -> tuple[int, bool]:
        """Every scenario's first seed, then every second one...; :data:`LAST` last among them."""
        i = seeds_of[case.key].index(seed)
        return i, i > 0 and case.key.removesuffix("-lr-over-n") in LAST

    ran = ex.run_cases(cases, out, jobs=jobs, resume=resume, order=order)
    records: list[tuple[ex.Experiment, Scenario, ex.RunsBySeed, ex.Case]] = []
    for (exp, case), (sc, per_seed) in zip(cases, ran, strict=True):
        if case.key.endswith("-lr-over-n"):
            for seed, runs in per_seed.items():
                records[-1][2][seed] += [r | {"label": f"{r['label']} {FAIR_SUFFIX}"} for r in runs]
            continue
        records.append((exp, sc, per_seed, case))
    out_cases = [case_result(exp, sc, per_seed, case) for exp, sc, per_seed, case in records]
    return {"cases": out_cases, "host_time_s": time.perf_counter() - t0}


def case_result(exp: ex.Experiment, sc: Scenario, per_seed: ex.RunsBySeed, case: ex.Case) -> dict[str, Any]:
    """One scenario: its case record, each policy's aggregate with its paired speed-up over BSP."""
    aggregates = [
        ex.aggregate(label, per_seed, baseline=BASELINE, keys=ex.POLICY_MEANS, speedup="speedup_vs_bsp")
        for label in ex.labels_of(per_seed)
    ]
    record = ex.case_record(sc, per_seed, aggregates=aggregates, keep=lambda r: ex.lite(r, ex.KEPT), calm=[])
    return record | {"case": case.key, "policies": list(exp.policies or ())}


# ------------------------------------------------------------------ tables
def columns(res: dict[str, Any]) -> list[ex.Col]:
    """Per policy: time to target, seeds that reached it (page), paired
    speed-up over BSP, final metric, throughput, mean staleness."""
    col = ex.case_columns(res, baseline=BASELINE, speedup="speedup_vs_bsp")
    return [
        ex.Col("policy", lambda a: f"`{a['label']}`"),
        *(col[name] for name in ("tta", "reached", "speedup", "final")),
        ex.key_col("samples/s", "samples_per_s_mean", lambda v: ex.fmt_num(v, ".0f"), "samples/s"),
        ex.key_col(
            "mean staleness (versions)", "mean_staleness", lambda v: ex.fmt_num(v, ".2f"), "mean staleness", "versions"
        ),
    ]


def rows(results: dict[str, Any]) -> list[Row]:
    return ex.results_rows(results, columns)


# --------------------------------------------------------------------- page
PAGE = ex.page_blocks(__file__, "remedies.md.in")["page"]
"""The page (Jinja2): its prose, and the paragraphs that depend on the outcome."""


def write_doc(results: dict[str, Any], docs: Path) -> Path:
    """``results-remedies.md`` in ``docs`` plus the first seed's metric plot per scenario in ``docs/img``."""
    from hetsync.report.plots import plot_metric

    img: dict[str, str] = {}
    (docs / "img").mkdir(parents=True, exist_ok=True)
    for res in results["cases"]:
        runs = ex.seed_runs_of(res, res["seeds"][0])
        name = f"{IMG_PREFIX}-{res['case']}.png"
        plot_metric(runs, docs / "img" / name)
        img[res["case"]] = f"img/{name}"
    path = docs / DOC_NAME
    values = page_values(results)
    path.write_text(ex.fill_page(PAGE, values, img=img, command=results["command"]), encoding="utf-8")
    return path


def page_values(results: dict[str, Any]) -> dict[str, Any]:
    """What the page reads: per scenario its record, table, set-up and per
    family the plain policy's aggregate beside each remedy's (:func:`case_values`)."""
    cases = [case_values(res) for res in results["cases"]]
    verdicts = [x["verdict"] for c in cases for f in c["families"] for x in f["remedies"]]
    counts = {"runs": len(verdicts), **{v: verdicts.count(v) for v in ("better", "same", "worse")}}
    beat = [(c, a) for c in cases for a in c["beat_bsp"]]
    return {"r": results, "cases": cases, "summary": summary_table(cases), "counts": counts, "beat": beat}


def verdict_cell(c: dict[str, Any] | None, metric: str) -> str:
    """A remedy's verdict against its plain run and the change of the final metric: ``better (+0.081)``."""
    if not c:
        return "—"
    return f"{c['verdict']} ({c['delta']:+.3g})" if c["delta"] is not None else c["verdict"]


def summary_table(cases: list[dict[str, Any]]) -> list[str]:
    """One line per remedy (against its plain run), one column per scenario: the verdict and the final metric's change."""
    lines: list[tuple[str, list[Any]]] = []
    for i, (name, _) in enumerate(FAMILIES):
        for remedy in REMEDIES:
            lines.append(
                (
                    f"{name} + `{remedy[1:]}`",
                    [next((r for r in c["families"][i]["remedies"] if r["name"] == remedy[1:]), None) for c in cases],
                )
            )
        if any(c["families"][i]["fair"] for c in cases):
            lines.append((f"{name} at lr/N (against lr)", [c["families"][i]["fair"] for c in cases]))
    lines.append(("ElasticBSP R=15 `within=local` (against `within=async`)", [c["elastic"] for c in cases]))
    lines.append(("WBSP + `lr_scale=inverse`", [c["wbsp_inv"] for c in cases]))
    for policy in ("diloco", "async-local-sgd", "streaming-diloco"):
        lines.append(
            (
                f"`{policy}` (against BSP)",
                [next((x for x in c["local"] if x["a"]["policy"] == policy), None) for c in cases],
            )
        )
    header = [
        "remedy or policy",
        *(f"{c['case']['scenario']} ({short_metric(c['res']['target_metric'])})" for c in cases),
    ]
    cells = [
        [name, *(verdict_cell(v, c["res"]["target_metric"]) for v, c in zip(vs, cases, strict=True))]
        for name, vs in lines
    ]
    return ex.md_table(header, cells, align=["left"])


FAMILIES = (("ASP", "asp"), ("SSP(3)", "ssp:s=3"), ("DSSP", "dssp"))
"""(name on the page, plain spec) of the families with every remedy."""


def case_values(res: dict[str, Any]) -> dict[str, Any]:
    """A scenario's figures: ``bsp``; per family (:data:`FAMILIES`) ``plain``
    and each remedy run with how it compares to the plain run
    (:func:`compare_to`); ElasticBSP's two readings; WBSP plain and scaled;
    the local-update policies; the lr / N runs."""
    agg = res["aggregate"]
    minimize = res["target_direction"] == "min"
    by = {a["label"]: a for a in agg}

    label_of = dict(zip(res["policies"], res["labels"], strict=False))

    def find(spec: str, *, fair: bool = False) -> dict[str, Any] | None:
        """The aggregate of a declared spec (``fair``: its run at lr / N)."""
        label = label_of.get(spec)
        return None if label is None else by.get(f"{label} {FAIR_SUFFIX}" if fair else label)

    families = []
    for name, spec in FAMILIES:
        plain = find(spec)
        remedies = []
        for remedy in REMEDIES:
            a = find(spec + remedy)
            if a is not None and plain is not None:
                remedies.append({"name": remedy[1:], "a": a, **compare_to(a, plain, minimize=minimize)})
        fair = find(spec, fair=True)
        families.append(
            {
                "name": name,
                "spec": spec,
                "plain": plain,
                "remedies": remedies,
                "fair": fair and {"a": fair, **compare_to(fair, plain, minimize=minimize)},
                "helped": [r for r in remedies if r["verdict"] == "better"],
                "hurt": [r for r in remedies if r["verdict"] == "worse"],
            }
        )
    bsp = find(BASELINE)
    elastic_async, elastic_local = find("elastic-bsp:R=15:within=async"), find("elastic-bsp:R=15:within=local")
    wbsp, wbsp_inv = find("wbsp"), find("wbsp:lr_scale=inverse")
    local = [a for a in agg if a["policy"] in ("diloco", "async-local-sgd", "streaming-diloco")]
    everywhere = [a for a in agg if a["reached"] == a["seeds"]]
    key = "final_metric_mean"
    workers, momentum = res["workers"], scenario_momentum(res["scenario"])
    return {
        "res": res,
        "case": ex.case_values(res),
        "workers": workers,
        "momentum": momentum,
        "corrected_momentum": max(0.0, momentum - (1 - 1 / workers)),
        "setup_table": "\n".join(setup_markdown([res["setup"]])),
        "table": "\n".join(ex.aggregate_table(agg, columns(res), left=1)),
        "by": by,
        "minimize": minimize,
        "bsp": bsp,
        "families": families,
        "elastic_async": elastic_async,
        "elastic_local": elastic_local,
        "elastic": elastic_async
        and elastic_local
        and {"a": elastic_local, **compare_to(elastic_local, elastic_async, minimize=minimize)},
        "wbsp": wbsp,
        "wbsp_inv": wbsp_inv and wbsp and {"a": wbsp_inv, **compare_to(wbsp_inv, wbsp, minimize=minimize)},
        "local": [{"a": a, **compare_to(a, bsp, minimize=minimize)} for a in local] if bsp else [],
        "fastest": min(everywhere, key=lambda a: a["tta_mean_s"], default=None),
        "most_accurate": (min if minimize else max)(agg, key=lambda a: a[key]),
        "beat_bsp": [
            a for a in agg if bsp and a is not bsp and compare_to(a, bsp, minimize=minimize)["verdict"] == "better"
        ],
    }


def scenario_momentum(name: str) -> float:
    """The SGD momentum of the scenario a record names (0 for a YAML file no longer there)."""
    try:
        return load_scenario(name).job.optimizer.momentum
    except BadInput:
        return 0.0


def compare_to(a: dict[str, Any], b: dict[str, Any] | None, *, minimize: bool) -> dict[str, Any]:
    """How ``a`` (a remedy) compares to ``b`` (the plain run), declared before
    any run: ``verdict`` ``better`` when :func:`~hetsync.benches.experiment.better`
    holds or its final metric is better by more than ``b``'s sd over the seeds
    (:func:`~hetsync.benches.experiment.final_better`) without reaching the
    target on fewer seeds; ``worse`` the other way round; else ``same``. With
    the final metric's change and the staleness of both."""
    if b is None:
        return {"verdict": "same", "delta": None}
    gain = ex.better(a, b, minimize=minimize) or (
        ex.final_better(a, b, minimize=minimize) and a["reached"] >= b["reached"]
    )
    loss = ex.better(b, a, minimize=minimize) or (
        ex.final_better(b, a, minimize=minimize) and b["reached"] >= a["reached"]
    )
    verdict = "better" if gain and not loss else "worse" if loss and not gain else "same"
    return {"verdict": verdict, "delta": a["final_metric_mean"] - b["final_metric_mean"], "base": b}
