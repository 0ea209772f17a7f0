"""Compare synchronization policies on your own model, in the simulator.

Wraps an ordinary ``torch.nn.Module`` and a labelled dataset as a hetsync
workload, then simulates BSP, ASP and SSP on an 8-worker heterogeneous
cluster defined inline with ``hetsync.compare``, which writes what
``hetsync compare`` writes (summary, traces, plots, report.html).

    .venv/bin/python examples/custom_workload.py --out runs/custom
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from sklearn.datasets import make_moons
from torch import nn

import hetsync
from hetsync import report
from hetsync.scenario import scenario_from_dict
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
    runs = hetsync.compare(scenario, ["bsp", "asp", "ssp:s=2"], workload=build_workload(), out=args.out)
    report.terminal_console().print(report.summary_table(runs))
    print(f"wrote {args.out}/: summary.json, traces, plots, trace.json, report.html")


if __name__ == "__main__":
    main()
