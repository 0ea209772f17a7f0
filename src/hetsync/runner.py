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

from hetsync.driver import policy_context, policy_labels
from hetsync.driver import policy_specs as policy_specs  # (hetsync.runner.policy_specs for its callers)
from hetsync.driver.paths import check_path, uses_collective
from hetsync.driver.shards import check_servers
from hetsync.errors import BadInput
from hetsync.outdir import partial_name, safe_name, write_json_atomic
from hetsync.policies import make_policy, parse_policy_spec
from hetsync.scenario import Scenario
from hetsync.sim.engine import Simulation
from hetsync.steptime import resolve_measured
from hetsync.workloads import Workload, make_workload

Progress = Callable[[str, float, str], None]  # (label, fraction done, status: the policy in force)


def reporter(
    out_dir: Path, *, plots: bool = True, command: str | None = None
) -> Callable[[list[dict[str, Any]]], None]:
    """What a caller of the runtime does with the runs' summaries once rank 0
    has them (``run_process``'s ``on_finished``): the plots unless ``plots``
    is false (with ``command``, also ``report.html`` and ``trace.json``
    naming it), then the table on the terminal."""

    def finish(runs: list[dict[str, Any]]) -> None:
        from hetsync import report  # (here: matplotlib costs each rank that never reports 1 s of CPU)

        if plots and command is not None:
            report.write_outputs(runs, out_dir, command=command)
        elif plots:
            report.write_report(runs, out_dir)
        report.terminal_console().print(report.summary_table(runs))

    return finish


def compare(
    scenario: Scenario,
    specs: Sequence[str],
    out_dir: Path,
    *,
    progress: Progress | None = None,
    on_result: Callable[[dict[str, Any]], None] | None = None,
    workload: Workload | None = None,
    path: str = "ps",
    servers: int = 1,
) -> list[dict[str, Any]]:
    """Simulate each policy spec on the scenario (on ``workload``, else the
    scenario's), the data ``path`` (hetsync.driver.paths; a policy that
    cannot use it is refused before any run starts) and ``servers`` sharded
    servers (hetsync.driver.shards; refused likewise); returns the summary records."""
    if not specs:
        raise BadInput("no policies to compare: pass --policies or list them under 'policies' in the scenario")
    for spec in specs:
        parse_policy_spec(spec)
    labels = policy_labels(scenario, specs)
    if check_path(path) != "ps":
        for spec in specs:
            uses_collective(path, make_policy(spec, policy_context(scenario)))
    if servers != 1:
        policies = [make_policy(spec, policy_context(scenario)) for spec in specs]
        check_servers(servers, scenario, policies, path=path, driver="sim")
    out_dir.mkdir(parents=True, exist_ok=True)
    if workload is None:
        workload = make_workload(scenario.job.workload, **scenario.job.workload_args)
    # `measured` step costs: timed once, here, so every policy is charged the same figures
    scenario = resolve_measured(scenario, workload)
    runs: list[dict[str, Any]] = []
    for spec, label in zip(specs, labels, strict=True):
        trace = out_dir / f"trace-{safe_name(label)}.jsonl"
        tick = (lambda f, status, _l=label: progress(_l, f, status)) if progress is not None else None
        try:
            result = Simulation(
                scenario, spec, trace_path=trace, progress=tick, workload=workload, path=path, servers=servers
            ).run()
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
