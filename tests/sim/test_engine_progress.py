"""The simulator's progress callback (hetsync.sim.engine): the fraction done
and, for a policy that switches, the policy in force, learnt from its notes."""

from __future__ import annotations

from pathlib import Path

from hetsync.report.switches import run_switches


def test_after_auto_s_switch_the_progress_names_the_policy_in_force(auto_switch_run):
    run, seen = auto_switch_run.run, auto_switch_run.progress
    t = run_switches(run)[0]["t"]
    max_time_s = 3.0  # (the fixture's run)
    assert seen and all(0.0 <= f <= 1.0 for f, _ in seen)
    assert any(f * max_time_s > t for f, _ in seen)  # (a report after the switch, to check)
    for f, status in seen:  # (each report at the virtual time f × max_time_s, after that time's event)
        assert status == ("auto→lb-bsp" if f * max_time_s >= t - 1e-9 else "")


def test_a_policy_that_never_switches_has_no_status():
    from hetsync.scenario import load_scenario
    from hetsync.sim.engine import simulate

    example = Path(__file__).resolve().parents[2] / "examples" / "stress-midway-8.yaml"
    seen: list[str] = []
    simulate(load_scenario(str(example), max_time_s=3.0), "bsp", progress=lambda _f, status: seen.append(status))
    assert seen and set(seen) == {""}
