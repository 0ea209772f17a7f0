"""Train your own torch.nn.Module under hetsync policies, as real processes.

Every process runs this same script; torchrun starts them. Rank 0 becomes the
parameter server and runs the policy, the other ranks are workers. One of
the three workers is made 3x slower, so BSP waits for it and SSP doesn't::

    .venv/bin/torchrun --nproc-per-node=4 examples/torchrun_custom_model.py --out runs/custom-dist

(4 processes: a server and 3 workers.) It writes the usual summary.json,
traces and plots into --out.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from sklearn.datasets import make_moons
from torch import nn

from hetsync.runner import reporter
from hetsync.runtime.process import ProcessOptions, run_process
from hetsync.scenario import scenario_from_dict
from hetsync.workloads import from_module


class MoonsNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(2, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh())
        self.head = nn.Linear(32, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/custom-dist"))
    parser.add_argument("--max-time-s", type=float, default=8.0)
    parser.add_argument("--policies", default="bsp,ssp:s=2")
    args = parser.parse_args()

    x, y = make_moons(n_samples=4000, noise=0.2, random_state=0)
    x, y = torch.tensor(x, dtype=torch.float32), torch.tensor(y)
    workload = from_module("moons-net", MoonsNet(), train=(x[:3200], y[:3200]), test=(x[3200:], y[3200:]))
    scenario = scenario_from_dict(
        {
            "name": "moons-real",
            "workers": 3,
            "batch_size": 32,
            "lr": 0.5,
            "target_accuracy": 0.9,
            "max_time_s": args.max_time_s,
            "slowdown": [1.0, 1.0, 3.0],  # worker 2's steps take 3x as long as they really do
            "delay_s": 0.005,  # and every step 5 ms more, as if the model were bigger
        }
    )
    # rank 0, once the runs have ended: plots into --out and the table
    report = reporter(args.out)
    return run_process(scenario, workload, args.policies.split(","), ProcessOptions(out=args.out), on_finished=report)


if __name__ == "__main__":
    sys.exit(main())
