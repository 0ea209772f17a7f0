"""``auto:forecast=on`` on real processes (issue 31, item 1): rank 0 runs
the forecast in a process of its own (``python -m hetsync.sim.forecast_job``)
while the workers train, and the answer reaches the policy when it ends."""

from __future__ import annotations

import math

import pytest
import yaml

from hetsync.cli import main
from hetsync.summary import read_summary

pytestmark = pytest.mark.dist

SCENARIO = {
    "name": "forecast-real",
    "workers": 2,
    "workload": "digits-logreg",
    "batch_size": 16,
    "lr": 0.5,
    "runtime_timing": "modelled",  # (steps last what the scenario says: worker 1 three times longer)
    "fixed_s": 0.005,
    "per_sample_s": 0.001,
    "slowdown": [1, 3],
    "max_time_s": 8,
    "target_accuracy": 0.99,
    "seed": 0,
}


def test_a_forecast_runs_beside_the_workers_and_its_answer_reaches_the_policy(tmp_path):
    path = tmp_path / "forecast-real.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    out = tmp_path / "out"
    spec = "auto:candidates=bsp+lb-bsp:window=4:forecast=on"
    assert main(["run", "-s", str(path), "--nproc", "2", "-p", spec, "--out", str(out), "--no-plots"]) == 0
    (run,) = read_summary(out / "summary.json")
    answers = [n for n in run["policy_notes"] if n["what"] == "forecast"]
    assert answers, run["policy_notes"]  # answered before the run's 8 s were up
    losses = answers[0]["detail"]["losses"]
    assert set(losses) == {"bsp", "lb-bsp"} and all(
        len(v) == 2 and all(math.isfinite(x) for x in v) for v in losses.values()
    )
    switches = [n for n in run["policy_notes"] if n["what"] == "switch"]
    if answers[0]["detail"]["chosen"] == "lb-bsp":  # chosen: switched at the next round close, losses on record
        assert switches[0]["detail"]["forecast"] == answers[0]["detail"] and switches[0]["t"] >= answers[0]["t"]
    else:
        assert not switches or switches[0]["t"] > answers[0]["t"]
    assert run["applied_steps"] + run["dropped_steps"] <= run["steps"]
    assert run["outstanding_steps"] <= 2  # (the two workers' steps in flight when the time ran out)
