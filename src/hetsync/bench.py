"""``hetsync bench``: measured figures, printed as a table (and JSON).

Every ratio is measured side by side in one run on this machine; nothing
here asserts a threshold, the figures are reported as they come out.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from hetsync.scenario import load_scenario
from hetsync.sim.engine import Simulation

Row = dict[str, Any]


def bench_sim(scenario_name: str = "large-1024", policy: str = "asp", *, max_steps: int | None = None) -> list[Row]:
    """Simulator speed: steps/s and run-time/math-time with real math, then
    events/s with the math switched off (trace written in both, as in normal use)."""
    overrides = {"max_steps": max_steps} if max_steps is not None else {}
    scenario = load_scenario(scenario_name, **overrides)
    with tempfile.TemporaryDirectory() as tmp:
        real = Simulation(scenario, policy, trace_path=Path(tmp) / "trace.jsonl").run().summary
        bare = Simulation(scenario, policy, trace_path=Path(tmp) / "trace-nomath.jsonl", math=False).run().summary
    ratio = real["host_time_s"] / real["math_time_s"] if real["math_time_s"] > 0 else float("inf")
    where = f"{scenario.name}, {policy}, {scenario.workers} workers"
    return [
        {"metric": "gradient steps simulated per second", "value": real["steps"] / real["host_time_s"], "unit": "steps/s", "setting": where},
        {"metric": "run time / gradient-math time", "value": ratio, "unit": "ratio", "setting": f"{where} (target <= 1.5)"},
        {"metric": "gradient math per step", "value": 1e6 * real["math_time_s"] / real["steps"], "unit": "us", "setting": where},
        {"metric": "bookkeeping per step", "value": 1e6 * (real["host_time_s"] - real["math_time_s"]) / real["steps"], "unit": "us", "setting": f"{where}, incl. evaluation and trace"},
        {"metric": "events per second, math off", "value": bare["events"] / bare["host_time_s"], "unit": "events/s", "setting": where},
        {"metric": "steps simulated", "value": real["steps"], "unit": "steps", "setting": where},
        {"metric": "run time with math", "value": real["host_time_s"], "unit": "s", "setting": where},
    ]


def print_rows(rows: list[Row], *, title: str) -> None:
    from rich.table import Table

    from hetsync.report import terminal_console

    table = Table(title=title)
    for col, justify in (("metric", "left"), ("value", "right"), ("unit", "left"), ("setting", "left")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for r in rows:
        v = r["value"]
        shown = f"{v:,.0f}" if isinstance(v, (int, float)) and abs(v) >= 1000 else f"{v:.3g}"
        table.add_row(r["metric"], shown, r["unit"], r["setting"])
    terminal_console().print(table)


def write_rows(rows: list[Row], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows, indent=1) + "\n")
