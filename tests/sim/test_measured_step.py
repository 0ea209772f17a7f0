"""``per_sample_s: measured``: the simulator charges the workload's own step
cost, timed on this machine, and records the figures in the summary."""

import json

import pytest

from hetsync import steptime
from hetsync.errors import BadInput
from hetsync.runner import compare
from hetsync.sim.engine import Simulation
from tests.sim.conftest import make_scenario


def mean_step_s(summary):
    compute_s = summary["compute_share"] * summary["workers"] * summary["wall_time_s"]
    return compute_s / summary["steps"]


def test_a_measured_run_records_the_figures_it_was_charged():
    sc = steptime.resolve_measured(make_scenario(per_sample_s="measured", fixed_s="measured", max_steps=5))
    sim = Simulation(sc, "bsp")
    s = sim.run().summary
    m = s["measured_step"]
    assert (m["fixed_s"], m["per_sample_s"]) == (sc.step_cost.fixed_s, sc.step_cost.per_sample_s)
    assert [b for b, _ in m["table"]] == [8, 16, 32] and all(t > 0 for _, t in m["table"])
    assert mean_step_s(s) == pytest.approx(sim.sc.nominal_step_s(0, 16))  # equal speeds, no noise
    json.dumps(s, allow_nan=False)
    assert Simulation(make_scenario(max_steps=2), "bsp").run().summary["measured_step"] is None


def test_a_bigger_model_takes_proportionally_longer_virtual_steps():
    # digits-cnn's forward and backward cost ~5-8x digits-logreg's; the
    # margin leaves room for a busy machine
    steps = {}
    for workload in ("digits-logreg", "digits-cnn"):
        sc = steptime.resolve_measured(make_scenario(workload=workload, per_sample_s="measured", fixed_s=0.0))
        s = Simulation(sc, "asp", math=False).run().summary
        steps[workload] = mean_step_s(s)
        assert steps[workload] == pytest.approx(s["measured_step"]["per_sample_s"] * sc.job.batch_size)
    assert steps["digits-cnn"] > 1.5 * steps["digits-logreg"]


def test_every_policy_of_a_comparison_is_charged_the_same_measurement(tmp_path, monkeypatch):
    monkeypatch.setattr(steptime, "_CACHE", {})
    calls = []
    real = steptime.measure_step_times

    def counted(*args, **kwargs):
        calls.append(args[1])
        return real(*args, **kwargs, budget_s=0.05)

    monkeypatch.setattr(steptime, "measure_step_times", counted)
    sc = make_scenario(per_sample_s="measured", max_steps=3)
    runs = compare(sc, ["bsp", "asp", "ssp"], tmp_path)
    assert len(calls) == 1
    assert runs[0]["measured_step"] == runs[1]["measured_step"] == runs[2]["measured_step"] is not None
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk[0]["measured_step"]["table"] == [list(row) for row in runs[0]["measured_step"]["table"]]


def test_the_simulator_times_nothing_and_names_the_fix_for_an_unresolved_cost(monkeypatch):
    def timed(*args, **kwargs):
        raise AssertionError("the simulator's constructor timed the workload")

    monkeypatch.setattr(steptime, "measure_step_times", timed)
    monkeypatch.setattr(steptime, "_CACHE", {})
    with pytest.raises(BadInput, match=r"step cost is 'measured' and not timed yet.*resolve_measured\(scenario\)"):
        Simulation(make_scenario(per_sample_s="measured", max_steps=2), "bsp")


def test_the_runtime_timing_needs_no_numbers():
    # a real worker's compute is real: only slowdowns, noise and delays scale it
    from hetsync.driver.timing import TimingModel

    sc = make_scenario(per_sample_s="measured", fixed_s="measured", slowdown=[1, 2, 3, 4], delay_s=0.5)
    timing = TimingModel(sc)
    assert timing.extra_sleep_s(2, 0.1, 0.0) == pytest.approx(0.1 * 2 + 0.5)
