"""``hetsync bench auto``: ``-p auto`` against every fixed candidate on
clusters that change while they train, and on two that do not (issue 31,
item 5) — in the simulator.

Declared here before any run and not tuned after. The base is the built-in
``homogeneous-8`` (8 equal workers, light noise, 1 Gb/s links; BSP reaches
its accuracy target at 8.5 s on seed 0). Every change starts at
``CHANGE_S`` = 4 s, half of that: what happens after it decides the time to
target. The cases:

- ``stress``: a stress tool makes workers 6 and 7 three times slower
  (``background_load``);
- ``link``: workers 6's and 7's links drop to a tenth (``link_load``);
- ``lost``: worker 7 leaves for good (``membership``);
- ``even``: ``homogeneous-8`` as shipped (static);
- ``hetero``: ``hetero-4`` as shipped (static; slow workers by fixed delays).

Policies: auto (its defaults: BSP first, then among BSP, LB-BSP, backup
workers with b = 1 and local SGD with H = 4) and each of its candidates
fixed (``--auto SPEC`` runs another auto in its place: a start, a set of
candidates). Seeds 0, 1, 2.

The issue's targets, checked per case by :func:`verdict` on the mean time to
target (a policy that misses the target on a seed has no mean): on a static
cluster auto within 5% of the best fixed policy; on a changing one ahead of
every fixed policy by at least 15% (each fixed one's time at least 1.15×
auto's). Every run's switches (the summary's ``policy_notes``) are kept.
Runs go under ``--out`` (``<case>/seed-<s>/``), with ``results.json`` and
the markdown tables (``auto.md``) that ``docs/results-auto.md`` quotes.

``--real`` adds the ``stress`` change on real processes (:data:`REAL`: 4
workers whose steps are paced as the scenario models them, two of them three
times slower from 4 s; 20 s a policy, seed 0), as ``hetsync run --nproc 4``
runs it: one scenario on real processes, as the issue asks (``--set`` and
``--quick`` do not apply to it).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from hetsync.benches import experiment as ex
from hetsync.benches.common import Row, add_output_arguments, parse_seeds, split_list
from hetsync.policies.auto import ASYNCHRONOUS, CANDIDATES, candidate_specs
from hetsync.runner import write_json_atomic

NAME = "auto"
POLICIES = ("bsp", "lb-bsp", "backup:b=1", "local-sgd:H=4", "auto")
FIXED = POLICIES[:-1]
SEEDS = "0,1,2"
CHANGE_S = 4.0
_FROM_CHANGE = {"period_s": 1000.0, "on_s": 1000.0 - CHANGE_S, "random_phase": False, "phase_s": 1000.0 - CHANGE_S}
CASES = {
    "stress": ("homogeneous-8", {"background_load": {"workers": [6, 7], "factor": 3, **_FROM_CHANGE}}),
    "link": ("homogeneous-8", {"link_load": {"workers": [6, 7], "factor": 10, **_FROM_CHANGE}}),
    "lost": ("homogeneous-8", {"membership": [{"worker": 7, "leave_s": CHANGE_S}]}),
    "even": ("homogeneous-8", {}),
    "hetero": ("hetero-4", {}),
}
"""case: (scenario, overrides), declared before any run."""
STATIC = ("even", "hetero")
REAL = {
    "name": "auto-real-stress-4",
    "description": "4 equal workers (homogeneous-8's step and links); from 4 s workers 2 and 3 three times slower",
    "workers": 4,
    "workload": "digits-mlp",
    "batch_size": 32,
    "lr": 0.5,
    "target_accuracy": 0.93,
    "max_time_s": 20,
    "seed": 0,
    "runtime_timing": "modelled",
    "fixed_s": 0.02,
    "per_sample_s": 0.001,
    "jitter": 0.05,
    "background_load": {"workers": [2, 3], "factor": 3, **_FROM_CHANGE},
}
"""The real-process case (``--real``), declared before any run."""
STATIC_WITHIN = 1.05  # auto's time to target at most this times the best fixed policy's
CHANGING_AHEAD = 1.15  # every fixed policy's time to target at least this times auto's
DEFAULTS = {"cases": ",".join(CASES), "seeds": SEEDS}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cases", default=DEFAULTS["cases"], help="comma-separated, of %(default)s")
    p.add_argument("--seeds", default=SEEDS, help="comma-separated seeds (default: %(default)s)")
    p.add_argument("--jobs", type=int, default=1, help="seeds run at once, each in a process (default: 1)")
    p.add_argument("--real", action="store_true", help="also the stress change on real processes (4 workers, 20 s)")
    p.add_argument(
        "--auto",
        default="auto",
        metavar="SPEC",
        help="auto as this spec (e.g. auto:candidates=bsp+lb-bsp+backup; default: %(default)s)",
    )
    ex.add_quick_argument(p, 2.0)
    from hetsync.scenario import add_override_argument

    add_override_argument(p, "max_time_s=10")
    add_output_arguments(p, NAME, "auto.md")


def run(args: argparse.Namespace) -> list[Row]:
    from hetsync.errors import BadInput

    names = split_list(args.cases, "--cases")
    unknown = [n for n in names if n not in CASES]
    if unknown:
        raise BadInput(f"--cases: unknown case {unknown[0]!r}; the cases are {', '.join(CASES)}")
    if args.jobs < 1:
        raise BadInput(f"--jobs must be >= 1, got {args.jobs}")
    overrides = ex.overrides_of(args, quick_max_time_s=2.0)
    if args.auto.split(":")[0].strip() != "auto":
        raise BadInput(f"--auto: give a spec of policy auto (auto:key=value:...), got {args.auto!r}")
    from hetsync.driver.advised import advised_start

    advised = advised_start(args.auto)  # (auto:start=ADVICE: its start read from that advice, once)
    if advised is not None:
        print(f"note: {advised.said}")
    spec = args.auto if advised is None else advised.spec
    policies = (*fixed_for(spec), spec)
    exp = ex.Experiment(
        cases=tuple(ex.Case(key=n, scenario=CASES[n][0], overrides=CASES[n][1]) for n in names),
        seeds=tuple(parse_seeds(args.seeds)),
        policies=policies,
        overrides=overrides,
        baseline="bsp",
    )
    exp.validate()  # (a bad key fails before the first run)
    out = Path(args.out)
    t0 = time.perf_counter()
    done = ex.run_cases([(exp, c) for c in exp.cases], out, jobs=args.jobs)
    fixed = policies[:-1]
    cases = [case_result(case.key, sc, per_seed, fixed) for case, (sc, per_seed) in zip(exp.cases, done, strict=True)]
    if args.real:
        from hetsync.scenario import scenario_from_dict

        runs = ex.run_real(REAL, out / "real", timeout_s=600, specs=policies)
        cases.append(case_result("real", scenario_from_dict(dict(REAL)), {0: runs}, fixed))
    results = {"cases": cases, "host_time_s": time.perf_counter() - t0}
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "results.json", results)
    command = ex.command_line(NAME, args, add_arguments)
    ex.publish(args, lambda where: (where / "auto.md").write_text(page(results, command), encoding="utf-8"))
    return ex.results_rows(results, columns)


def fixed_for(spec: str) -> tuple[str, ...]:
    """The policies auto given by ``spec`` is measured against: every one of
    auto's synchronous candidates (whether or not ``spec`` narrows them), and
    asp and ssp where ``spec`` names them, each fixed with
    auto's own settings (its backup's b, its local SGD's H). The default auto
    gives :data:`FIXED`; ``auto:h=8`` (an advised start, say) has local SGD
    with H = 8 run fixed in place of H = 4."""
    from hetsync.driver import policy_context
    from hetsync.policies import make_policy
    from hetsync.scenario import load_scenario

    auto = make_policy(spec, policy_context(load_scenario(CASES["even"][0])))
    specs = candidate_specs(auto.config)
    named = auto.candidates  # (asp and ssp only where auto may take them)
    return tuple(specs[name] for name in CANDIDATES if name not in ASYNCHRONOUS or name in named)


def case_result(key: str, sc: Any, per_seed: ex.RunsBySeed, fixed: tuple[str, ...] = FIXED) -> dict[str, Any]:
    aggregates = [
        ex.aggregate(label, per_seed, baseline="bsp", keys=ex.POLICY_MEANS) for label in ex.labels_of(per_seed)
    ]
    keep = (*ex.KEPT, "policy_notes", "dropped_steps", "applied_steps")
    record = ex.case_record(sc, per_seed, aggregates=aggregates, keep=lambda r: ex.lite(r, keep), calm=[])
    named = f"{key}: {sc.name}"  # (three cases share homogeneous-8)
    return record | {
        "scenario": named,
        "case": key,
        "static": key in STATIC,
        "verdict": verdict(key, aggregates, fixed),
    }


def verdict(key: str, aggregates: list[dict[str, Any]], fixed: tuple[str, ...] = FIXED) -> dict[str, Any]:
    """Against the issue's target for this case: ``auto_s`` and ``best_fixed_s``
    (mean times to target of auto and of the ``fixed`` policies; None where a
    seed missed it), the ratio of the best fixed one's to auto's, and ``met``
    (None: a time is missing)."""
    by = {a["policy"]: a for a in aggregates}
    auto = by["auto"]["tta_mean_s"] if by["auto"]["reached"] == by["auto"]["seeds"] else None
    times = [a["tta_mean_s"] if a["reached"] == a["seeds"] else None for a in (by[p.split(":")[0]] for p in fixed)]
    reached = [t for t in times if t is not None]
    best = min(reached, default=None)
    ratio = None if auto is None or best is None else best / auto
    if key in STATIC:
        met = None if ratio is None else ratio >= 1 / STATIC_WITHIN
    else:
        met = None if auto is None else (ratio is None or ratio >= CHANGING_AHEAD)
    return {"auto_s": auto, "best_fixed_s": best, "best_over_auto": ratio, "met": met}


def columns(res: dict[str, Any]) -> list[ex.Col]:
    col = ex.case_columns(res, baseline="bsp")
    return [
        ex.Col("policy", lambda a: f"`{a['label']}`"),
        *(col[name] for name in ("tta", "reached", "speedup", "final")),
        ex.key_col("samples/s", "samples_per_s_mean", lambda v: ex.fmt_num(v, ".0f"), "samples/s"),
        *(col[name] for name in ("compute", "wait")),
    ]


def switches(res: dict[str, Any]) -> list[str]:
    """auto's switches, seed by seed, in words."""
    lines = []
    for seed, runs in res["runs"].items():
        notes = [n for r in runs if r["policy"] == "auto" for n in r.get("policy_notes") or [] if n["what"] == "switch"]
        said = ", ".join(f"{n['detail']['from']} → {n['detail']['to']} at {n['t']:.2f} s" for n in notes)
        lines.append(f"- seed {seed}: {said or 'no switch'}")
    return lines


def page(results: dict[str, Any], command: str) -> str:
    """The tables ``docs/results-auto.md`` quotes: the targets, then each case."""
    lines = [f"Generated by `{command}`.", ""]
    head = ["case", "kind", "auto's TTA (s)", "best fixed TTA (s)", "best fixed ÷ auto", "target", "met"]
    rows = []
    for res in results["cases"]:
        v = res["verdict"]
        target = f"≥ {1 / STATIC_WITHIN:.3f}" if res["static"] else f"≥ {CHANGING_AHEAD:.2f} (every fixed one)"
        met = {True: "yes", False: "**no**", None: "—"}[v["met"]]
        rows.append(
            [
                res["case"],
                "static" if res["static"] else "changes at 4 s" + (", real processes" if res["case"] == "real" else ""),
                ex.fmt_secs(v["auto_s"]),
                ex.fmt_secs(v["best_fixed_s"]),
                ex.fmt_x(v["best_over_auto"]),
                target,
                met,
            ]
        )
    lines += ex.md_table(head, rows)
    for res in results["cases"]:
        lines += ["", f"### {res['scenario']}", "", *ex.aggregate_table(res["aggregate"], columns(res))]
        lines += ["", "auto's switches:", "", *switches(res)]
    return "\n".join(lines) + "\n"
