"""A forecast in a process of its own, for a driver that must not wait for
it nor import the simulator (the runtime's rank 0, while its workers train):

    python -m hetsync.sim.forecast_job REQUEST ANSWER

REQUEST is a pickle of ``{"scenario", "cmd", "theta", "now_s"}`` (the
run's scenario, the ``Forecast`` command, the global model as a float32
numpy array, the run's time of the ask); ANSWER receives a pickle of the
``ForecastDone`` (written beside and renamed into place, so a reader never
sees half of one). The workload is built again from the scenario
(:func:`hetsync.workloads.make_workload`); a forecast that fails answers
with no scores and the reason. Exit status 0 whenever an answer was written.
"""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path

import torch

from hetsync.policies.base import ForecastDone
from hetsync.sim import forecast
from hetsync.sim.engine import Simulation
from hetsync.workloads import make_workload


def answer(request: dict) -> ForecastDone:
    """The forecast the request asks for, or an answer without scores that says why not."""
    sc, cmd, now_s = request["scenario"], request["cmd"], request["now_s"]
    try:
        workload = make_workload(sc.job.workload, **sc.job.workload_args)
        theta = torch.from_numpy(request["theta"]) if request["theta"] is not None else None
        return forecast.forecast(sc, workload, theta, cmd, now_s, simulation=Simulation)
    except Exception as e:  # (the run goes on, ranked by throughput; the note says why)
        return ForecastDone(now_s=now_s, ask=cmd.ask, why=f"the forecast failed: {type(e).__name__}: {e}")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m hetsync.sim.forecast_job REQUEST ANSWER", file=sys.stderr)
        return 2
    request_path, answer_path = (Path(a) for a in argv)
    with request_path.open("rb") as f:
        request = pickle.load(f)  # (written by the run that spawned this process, not by a user)
    torch.set_num_threads(1)
    done = answer(request)
    part = answer_path.with_name(answer_path.name + ".part")
    with part.open("wb") as f:
        pickle.dump(done, f)
    os.replace(part, answer_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
