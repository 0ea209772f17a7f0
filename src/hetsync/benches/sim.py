"""``hetsync bench sim``: how fast the simulator is, and what its bookkeeping
costs next to the real gradient math it runs."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from hetsync.benches.common import Row
from hetsync.scenario import load_scenario
from hetsync.sim.engine import Simulation

NAME = "sim"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scenario", default="large-1024")
    p.add_argument("--policy", default="asp")
    p.add_argument("--max-steps", type=int, default=None, help="override max_steps (per worker)")


def run(args: argparse.Namespace) -> list[Row]:
    return bench_sim(args.scenario, args.policy, max_steps=args.max_steps)


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
        {
            "metric": "gradient steps simulated per second",
            "value": real["steps"] / real["host_time_s"],
            "unit": "steps/s",
            "setting": where,
        },
        {
            "metric": "run time / gradient-math time",
            "value": ratio,
            "unit": "ratio",
            "setting": f"{where} (target <= 1.5)",
        },
        {
            "metric": "gradient math per step",
            "value": 1e6 * real["math_time_s"] / real["steps"],
            "unit": "us",
            "setting": where,
        },
        {
            "metric": "bookkeeping per step",
            "value": 1e6 * (real["host_time_s"] - real["math_time_s"]) / real["steps"],
            "unit": "us",
            "setting": f"{where}, incl. evaluation and trace",
        },
        {
            "metric": "events per second, math off",
            "value": bare["events"] / bare["host_time_s"],
            "unit": "events/s",
            "setting": where,
        },
        {"metric": "steps simulated", "value": real["steps"], "unit": "steps", "setting": where},
        {"metric": "run time with math", "value": real["host_time_s"], "unit": "s", "setting": where},
    ]
