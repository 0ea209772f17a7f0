"""Rank 0's forecasts in processes of their own (hetsync.runtime.forecasts):
a real ``python -m hetsync.sim.forecast_job`` per ask, its answer collected
when it ends, the rest stopped when the run is over. (End to end, on real
processes: docs/results-auto.md, "Forecasts".)"""

from __future__ import annotations

import time

import pytest

from hetsync.policies.base import Forecast
from hetsync.runtime.forecasts import ForecastJobs
from hetsync.workloads import make_workload
from tests.sim.conftest import make_scenario

pytestmark = pytest.mark.dist  # (each forecast is a process)

ASK = Forecast(
    ask=5,
    candidates=("bsp", "lb-bsp"),
    step_s=((0.01, 0.01, 0.01), (0.03, 0.03, 0.03)),
    fixed=(0.0, 0.0),
    horizon_s=0.2,
)


def test_a_forecast_runs_in_a_process_of_its_own_and_its_answer_is_collected_when_it_ends():
    sc = make_scenario(workers=2)
    theta = make_workload(sc.job.workload).init_params(0)
    jobs = ForecastJobs()
    jobs.start(sc, ASK, theta, now_s=1.0)
    folder = jobs.jobs[0].folder
    assert jobs and jobs.answers(1.0) == []  # (not ended yet: a process takes a second or more to start)
    deadline = time.monotonic() + 120
    answers = []
    while not answers and time.monotonic() < deadline:
        time.sleep(0.1)
        answers = jobs.answers(7.5)
    (done,) = answers
    assert done.ask == 5 and done.now_s == 7.5 and [spec for spec, _ in done.scores] == ["bsp", "lb-bsp"]
    assert not jobs and not folder.exists()  # collected: its folder is gone


def test_the_forecasts_still_running_when_the_run_ends_are_stopped_and_their_folders_removed():
    sc = make_scenario(workers=2)
    jobs = ForecastJobs()
    jobs.start(sc, ASK, None, now_s=0.0)
    job = jobs.jobs[0]
    jobs.close()
    assert job.proc.returncode is not None and not job.folder.exists() and not jobs
