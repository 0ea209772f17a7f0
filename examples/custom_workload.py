"""Compare synchronization policies on your own model, in the simulator.

Wraps an ordinary ``torch.nn.Module`` and a labelled dataset as a hetsync
workload, then simulates BSP, ASP and SSP on an 8-worker heterogeneous
cluster defined inline, and writes the usual summary, traces and plots.

    .venv/bin/python examples/custom_workload.py --out runs/custom
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from sklearn.datasets import make_moons
from torch import nn

from hetsync import report
from hetsync.runner import write_json_atomic
from hetsync.scenario import scenario_from_dict
from hetsync.sim.engine import Simulation
from hetsync.workloads import from_module


def build_workload():
    x, y = make_moons(n_samples=4000, noise=0.2, random_state=0)
    x, y = torch.tensor(x, dtype=torch.float32), torch.tensor(y)
    model = nn.Sequential(nn.Linear(2, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 2))
    return from_module("moons-mlp", model, train=(x[:3200], y[:3200]), test=(x[3200:], y[3200:]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/custom"))
    parser.add_argument("--max-time-s", type=float, default=20.0)
    args = parser.parse_args()

    scenario = scenario_from_dict(
        {
            "name": "moons-8",
            "workers": 8,
            "batch_size": 32,
            "lr": 0.5,
            "target_accuracy": 0.9,
            "max_time_s": args.max_time_s,
            "per_sample_s": 0.001,
            "fixed_s": 0.01,
            "slowdown": {"linspace": [1.0, 4.0]},  # worker 7 is 4x slower than worker 0
            "jitter": 0.2,
            "bandwidth_Bps": 1.25e8,
            "model_bytes": 2_000_000,
        }
    )
    workload = build_workload()
    args.out.mkdir(parents=True, exist_ok=True)
    runs = []
    for policy in ["bsp", "asp", "ssp:s=2"]:
        trace = args.out / f"trace-{report.safe_name(policy)}.jsonl"
        runs.append(Simulation(scenario, policy, trace_path=trace, workload=workload).run().summary)
    write_json_atomic(args.out / "summary.json", runs)
    report.terminal_console().print(report.summary_table(runs))
    for path in report.write_report(runs, args.out):
        print("wrote", path)


if __name__ == "__main__":
    main()
