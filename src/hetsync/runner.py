"""Run several policies on one scenario and write the comparison to a folder.

``summary.json`` is rewritten after every finished run (atomically), so a
crash or Ctrl-C in the fifth run leaves the first four on disk; the
interrupted run's trace is renamed ``trace-<label>.jsonl.partial`` so that
nothing reads it as a finished run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from hetsync.errors import BadInput
from hetsync.outdir import partial_name, write_json_atomic
from hetsync.policies import make_policy, parse_policy_spec
from hetsync.report import safe_name
from hetsync.scenario import Scenario
from hetsync.sim.engine import Simulation, policy_context
from hetsync.workloads import Workload, make_workload

Progress = Callable[[str, float], None]


def policy_specs(text: str | None, scenario: Scenario) -> list[str]:
    """``--policies a,b:k=v`` as a list, or the scenario's own list without it."""
    return [s.strip() for s in text.split(",") if s.strip()] if text else list(scenario.policies)


def policy_labels(scenario: Scenario, specs: Sequence[str]) -> list[str]:
    """Validate the specs up front (before any run starts) and return labels."""
    ctx = policy_context(scenario)
    labels = [make_policy(spec, ctx).label for spec in specs]
    seen: set[str] = set()
    for spec, label in zip(specs, labels, strict=True):
        if label in seen:
            raise BadInput(f"policy {spec!r} appears twice in the comparison (as {label})")
        seen.add(label)
    return labels


def compare(
    scenario: Scenario,
    specs: Sequence[str],
    out_dir: Path,
    *,
    progress: Progress | None = None,
    on_result: Callable[[dict[str, Any]], None] | None = None,
    workload: Workload | None = None,
) -> list[dict[str, Any]]:
    """Simulate each policy spec on the scenario (on ``workload``, else the
    scenario's); returns the summary records."""
    if not specs:
        raise BadInput("no policies to compare: pass --policies or list them under 'policies' in the scenario")
    for spec in specs:
        parse_policy_spec(spec)
    labels = policy_labels(scenario, specs)
    out_dir.mkdir(parents=True, exist_ok=True)
    if workload is None:
        workload = make_workload(scenario.workload, **scenario.workload_args)
    runs: list[dict[str, Any]] = []
    for spec, label in zip(specs, labels, strict=True):
        trace = out_dir / f"trace-{safe_name(label)}.jsonl"
        tick = (lambda f, _l=label: progress(_l, f)) if progress is not None else None
        try:
            result = Simulation(scenario, spec, trace_path=trace, progress=tick, workload=workload).run()
        except BaseException:  # Ctrl-C or a crash: the partial trace is not a run
            if trace.exists():
                trace.replace(partial_name(trace))
            raise
        runs.append(result.summary)
        if result.params is not None:  # the final global model, as the module's state_dict
            torch.save(workload.state_dict_with(result.params), out_dir / f"model-{safe_name(label)}.pt")
        write_json_atomic(out_dir / "summary.json", runs)
        if on_result is not None:
            on_result(result.summary)
    return runs
