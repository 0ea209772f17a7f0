"""hetsync from Python: the simulator's comparisons as functions.

``hetsync.compare`` and ``hetsync.simulate`` do what the commands of the same
name do — simulate policies on a scenario, with the scenario's workload or
your own (:func:`hetsync.workloads.from_module`) — and write the same files:
``summary.json``, one trace per policy, the plots, ``trace.json`` and
``report.html``. They return the summaries (docs/formats.md)::

    import hetsync
    from hetsync.workloads import from_module

    workload = from_module("mine", model, train=(x, y), test=(xt, yt))
    runs = hetsync.compare("default", ["bsp", "ssp:s=2", "wbsp"], workload=workload, out="runs/mine")
    best = min(runs, key=lambda r: r["time_to_target_s"] or float("inf"))

Your own training loop on real processes is :func:`hetsync.init`
(:mod:`hetsync.loop`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hetsync.errors import BadInput
from hetsync.scenario import Scenario, resolve_scenario
from hetsync.workloads import Workload


def compare(
    scenario: str | Scenario,
    policies: str | Sequence[str] | None = None,
    *,
    workload: Workload | None = None,
    out: str | Path = "runs/compare",
    plots: bool = True,
    **overrides: Any,
) -> list[dict[str, Any]]:
    """Simulate each policy on ``scenario`` (a built-in name, a YAML path or a
    :class:`~hetsync.scenario.Scenario`; ``overrides`` replace its keys, as
    ``--set`` does) and write the comparison into ``out``, whose earlier
    results are set aside until this run finishes, as with the CLI. ``policies``: specs (``"ssp:s=2"``), a comma-separated
    string, or None for the scenario's own list. Returns the summaries, in
    order. Bad input raises :class:`hetsync.errors.BadInput` naming the key."""
    from hetsync import report, runner
    from hetsync.outdir import begin
    from hetsync.workloads import make_workload

    sc = resolve_scenario(scenario, overrides)
    if isinstance(policies, str) or policies is None:
        specs = runner.policy_specs(policies, sc)
    else:
        from hetsync.driver.advised import resolve_specs

        specs = resolve_specs([str(p) for p in policies])[0]  # (auto:start=ADVICE resolved)
    runner.policy_labels(sc, specs)
    if workload is not None and not isinstance(workload, Workload):
        raise BadInput(f"workload must be a hetsync Workload (from_module), got {type(workload).__name__}")
    if workload is None:
        workload = make_workload(sc.job.workload, **sc.job.workload_args)
    sc.stop.target.direction_for(workload.name, workload.metrics)  # every input checked before the folder is touched
    folder = Path(out)
    replacing = begin(folder, also=[f"{report.safe_name(sc.stop.target.metric)}.png"])
    try:
        runs = runner.compare(sc, specs, folder, workload=workload)
        if plots:
            report.write_outputs(runs, folder, command=f"hetsync.compare({sc.name!r}, {specs!r})")
    except BaseException:
        replacing.finish(False)  # the earlier results: kept, or put back if this run wrote none
        raise
    replacing.finish(True)
    return runs


def simulate(
    scenario: str | Scenario,
    policy: str,
    *,
    workload: Workload | None = None,
    out: str | Path = "runs/simulate",
    plots: bool = True,
    **overrides: Any,
) -> dict[str, Any]:
    """One policy on ``scenario``: :func:`compare` with one spec; returns its summary."""
    if not isinstance(policy, str):
        raise BadInput(f"policy must be one spec such as 'ssp:s=2', got {type(policy).__name__}")
    return compare(scenario, [policy], workload=workload, out=out, plots=plots, **overrides)[0]
