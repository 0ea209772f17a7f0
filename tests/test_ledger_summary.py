"""Ledger.evaluate and Ledger.summary with named metrics: the eval record,
the target's direction, and the accuracy aliases."""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from hetsync.ledger import Ledger
from hetsync.policies.config import PolicyConfig
from hetsync.scenario import scenario_from_dict
from hetsync.sim.engine import Simulation
from hetsync.trace import TraceWriter
from tests.sim.conftest import make_scenario


class ScriptedWorkload:
    """Reports the next scripted metrics at every evaluation."""

    name = "scripted-lm"
    metrics = {"loss": "min", "perplexity": "min", "accuracy": "max"}

    def __init__(self, evals: list[dict[str, float]]) -> None:
        self.evals = list(evals)

    def evaluate_metrics(self, params: torch.Tensor) -> dict[str, float]:
        values = self.evals.pop(0)
        return {"accuracy": values["accuracy"], "perplexity": values["perplexity"], "loss": values["loss"]}


def _ledger(evals: list[dict[str, float]], trace_path=None) -> Ledger:
    policy = SimpleNamespace(name="bsp", label="bsp", config=PolicyConfig())
    return Ledger(policy, ScriptedWorkload(evals), torch.zeros(3), TraceWriter(trace_path))  # type: ignore[arg-type]


def _summary(ledger: Ledger, **target: Any) -> dict[str, Any]:
    sc = scenario_from_dict({"name": "s", "workers": 1, "max_steps": 1, **target})
    return ledger.summary(
        scenario=sc,
        driver="sim",
        wall_s=3.0,
        compute_s=[1.0],
        comm_s=[0.0],
        worker_steps=[1],
        host_s=0.0,
        stop_reason="max_steps",
        trace_name=None,
    )


EVALS = [
    {"loss": 4.0, "perplexity": 54.6, "accuracy": 0.1},
    {"loss": 3.5, "perplexity": 33.1, "accuracy": 0.3},
    {"loss": 3.6, "perplexity": 36.6, "accuracy": 0.35},
    {"loss": 3.8, "perplexity": 44.7, "accuracy": 0.2},
]


def test_eval_records_hold_every_metric_in_the_workloads_order(tmp_path):
    led = _ledger(EVALS[:2], tmp_path / "t.jsonl")
    led.evaluate(0.0)
    led.evaluate(0.0)  # the same instant is evaluated once
    led.evaluate(1.0)
    led.trace.close()
    lines = (tmp_path / "t.jsonl").read_text().splitlines()
    assert [list(json.loads(line)) for line in lines] == [["t", "ev", "loss", "perplexity", "accuracy", "version"]] * 2
    assert led.curve == [[0.0, 4.0, 54.6, 0.1], [1.0, 3.5, 33.1, 0.3]]


def test_summary_for_a_metric_to_minimize():
    led = _ledger(EVALS)
    for t in range(4):
        led.evaluate(float(t))
    s = _summary(led, target={"metric": "perplexity", "value": 40})
    assert (s["target_metric"], s["target_value"], s["target_direction"]) == ("perplexity", 40.0, "min")
    assert s["time_to_target_s"] == 1.0  # the first evaluation at or below the target
    assert s["final_metric"] == 44.7 and s["best_metric"] == 33.1
    assert s["metric_curve"] == [[0.0, 54.6], [1.0, 33.1], [2.0, 36.6], [3.0, 44.7]]
    assert s["final_metrics"] == {"loss": 3.8, "perplexity": 44.7, "accuracy": 0.2}
    assert not s.keys() & {"target_accuracy", "final_accuracy", "best_accuracy", "accuracy_curve"}


def test_a_value_equal_to_the_target_reaches_it_and_unreached_is_none():
    led = _ledger(EVALS)
    for t in range(4):
        led.evaluate(float(t))
    assert _summary(led, target={"metric": "loss", "value": 3.6})["time_to_target_s"] == 1.0
    assert _summary(led, target={"metric": "loss", "value": 3.0})["time_to_target_s"] is None
    # a direction given in the scenario wins over the workload's
    s = _summary(led, target={"metric": "loss", "value": 3.9, "direction": "max"})
    assert (s["target_direction"], s["time_to_target_s"], s["best_metric"]) == ("max", 0.0, 4.0)


def test_accuracy_targets_keep_the_old_fields_as_aliases():
    led = _ledger(EVALS)
    for t in range(4):
        led.evaluate(float(t))
    s = _summary(led, target_accuracy=0.3)
    assert (s["target_metric"], s["target_direction"]) == ("accuracy", "max")
    assert s["target_accuracy"] == s["target_value"] == 0.3
    assert s["time_to_target_s"] == 1.0
    assert s["final_accuracy"] == s["final_metric"] == 0.2
    assert s["best_accuracy"] == s["best_metric"] == 0.35
    assert s["accuracy_curve"] == s["metric_curve"] == [[0.0, 0.1], [1.0, 0.3], [2.0, 0.35], [3.0, 0.2]]


def test_no_evaluation_gives_nulls():
    s = _summary(_ledger([]), target={"metric": "loss", "value": 1})
    assert s["time_to_target_s"] is None and s["final_metric"] is None and s["best_metric"] is None
    assert s["final_metrics"] is None and s["metric_curve"] == []


def test_a_simulation_with_a_loss_target():
    sc = make_scenario(target={"metric": "loss", "value": 1.8}, max_steps=40, eval_every_s=0.05)
    s = Simulation(sc, "bsp").run().summary
    assert (s["target_metric"], s["target_direction"]) == ("loss", "min")
    losses = [v for _, v in s["metric_curve"]]
    assert losses[0] > 1.8 and s["best_metric"] == min(losses) <= 1.8
    assert s["time_to_target_s"] == next(t for t, v in s["metric_curve"] if v <= 1.8)
    assert s["final_metrics"]["loss"] == s["final_metric"] and "accuracy" in s["final_metrics"]
    assert "final_accuracy" not in s


def test_a_metric_the_workload_does_not_report_is_refused_before_running():
    from hetsync.errors import BadInput

    sc = make_scenario(target={"metric": "perplexity", "value": 40})
    with pytest.raises(BadInput, match=r"'target.metric': workload 'digits-logreg' reports accuracy, loss"):
        Simulation(sc, "bsp")


def test_a_diverged_model_is_recorded_as_null_not_a_crash(tmp_path):
    """A loss of inf or NaN (a diverged model) cannot go into JSON: the eval
    records and the curve hold null, the summary says when it diverged."""
    from rich.console import Console

    from hetsync.report import summary_table

    sc = make_scenario(
        workload="signal1d-mlp", target={"metric": "loss", "value": 0.5}, max_steps=30, eval_every_s=0.05, lr=1000.0
    )
    trace = tmp_path / "t.jsonl"
    s = Simulation(sc, "bsp", trace_path=trace).run().summary
    assert s["diverged_at_s"] is not None
    assert s["final_metric"] is None and s["time_to_target_s"] is None
    assert all(v is None for t, v in s["metric_curve"] if t >= s["diverged_at_s"])
    json.dumps(s, allow_nan=False)  # what summary.json needs
    evals = [json.loads(line) for line in trace.read_text().splitlines() if '"eval"' in line]
    assert evals[-1]["loss"] is None
    console = Console(width=200, record=True)
    console.print(summary_table([s]))
    assert "diverged" in console.export_text()


def test_a_worker_that_left_counts_until_it_left_not_as_waiting_after():
    """Worker 0's own loop ended at 2 s of a 10 s run: its 8 s after are
    neither work nor waiting, so the shares are of 2 + 10 worker-seconds."""
    ledger = _ledger([])
    ledger.left.append({"worker": 0, "t": 2.0, "reason": "its training loop ended"})
    sc = scenario_from_dict({"name": "s", "workers": 2, "max_steps": 1})
    s = ledger.summary(
        scenario=sc,
        driver="dist",
        wall_s=10.0,
        compute_s=[1.5, 6.0],
        comm_s=[0.5, 1.0],
        worker_steps=[3, 3],
        host_s=0.0,
        stop_reason="no workers left",
        trace_name=None,
    )
    assert s["per_worker"]["wait_s"] == [0.0, 3.0]
    assert s["compute_share"] == pytest.approx(7.5 / 12) and s["comm_share"] == pytest.approx(1.5 / 12)
    assert s["wait_share"] == pytest.approx(3.0 / 12)


def test_a_worker_that_left_before_a_resume_and_came_back_counts_the_whole_run():
    before = _ledger([])
    before.left.append({"worker": 0, "t": 2.0, "reason": "connection lost"})
    state = before.state_dict()
    ledger = _ledger([])
    ledger.load_state_dict(state, 4.0)  # the run goes on at 4 s with every worker
    sc = scenario_from_dict({"name": "s", "workers": 2, "max_steps": 1})
    s = ledger.summary(
        scenario=sc,
        driver="dist",
        wall_s=10.0,
        compute_s=[5.0, 5.0],
        comm_s=[0.0, 0.0],
        worker_steps=[3, 3],
        host_s=0.0,
        stop_reason="max_time",
        trace_name=None,
    )
    assert s["workers_left"] == [{"worker": 0, "t": 2.0, "reason": "connection lost"}]  # (its history stays)
    assert s["wait_share"] == pytest.approx(0.5) and s["per_worker"]["wait_s"] == [5.0, 5.0]


# ------------------------------------------------------------ fragments (Streaming DiLoCo)
def _fragment_ledger(outer: dict[str, Any] | None) -> Ledger:
    from hetsync.optim import Stepper
    from hetsync.recipe import ScheduleConfig, parse_optimizer

    policy = SimpleNamespace(name="streaming-diloco", label="sd", config=PolicyConfig())
    stepper = Stepper(parse_optimizer("outer", outer, outer=True), ScheduleConfig(), None) if outer else None
    return Ledger(policy, ScriptedWorkload([]), torch.zeros(6), TraceWriter(None), outer=stepper)  # type: ignore[arg-type]


def _hold(ledger: Ledger, worker: int, values: list[float], fragment: Any) -> int:
    from hetsync.ledger import HeldPush

    return ledger.hold(HeldPush(worker, "delta", torch.tensor(values), 0, 1, 8, fragment=fragment))


def test_a_fragment_apply_moves_that_range_only_through_its_own_outer_state():
    from hetsync.policies.base import Apply, Fragment

    head, tail = Fragment(lo=0, hi=2), Fragment(lo=2, hi=6)
    plain = _fragment_ledger(None)  # plain outer SGD at 1: the mean delta is added
    ids = (_hold(plain, 0, [1.0, 2.0], head), _hold(plain, 1, [3.0, 4.0], head))
    plain.apply(Apply(contributions=((ids[0], 0.5), (ids[1], 0.5))), 1.0)
    assert plain.theta.tolist() == [2.0, 3.0, 0, 0, 0, 0] and plain.version == 1

    nesterov = _fragment_ledger({"name": "sgd", "lr": 0.5, "momentum": 0.9, "nesterov": True})
    for _ in range(2):  # the tail's momentum builds over its own steps...
        nesterov.apply(Apply(contributions=((_hold(nesterov, 0, [1.0] * 4, tail), 1.0),)), 1.0)
    # Nesterov: m1 = g, θ1 = θ0 − lr(g + βm1); m2 = βm1 + g, θ2 = θ1 − lr(g + βm2); g = −1
    after_two = -0.5 * ((-1) + 0.9 * (-1)) - 0.5 * ((-1) + 0.9 * (-1.9))
    assert nesterov.theta[2:].tolist() == pytest.approx([after_two] * 4)
    nesterov.apply(Apply(contributions=((_hold(nesterov, 0, [1.0, 1.0], head), 1.0),)), 1.0)
    # ...and the head's first step starts from no momentum, the tail untouched
    assert nesterov.theta[:2].tolist() == pytest.approx([0.5 * 1.9] * 2)
    assert nesterov.theta[2:].tolist() == pytest.approx([after_two] * 4)
    assert sorted(nesterov._fragment_outer) == [(0, 2), (2, 6)]


def test_a_fragment_apply_carries_its_mean_at_the_fragment_width():
    from hetsync.policies.base import Apply, Fragment

    ledger = _fragment_ledger(None)
    four = Fragment(lo=0, hi=3, bits=4)
    ledger.apply(Apply(contributions=((_hold(ledger, 0, [7.0, 0.4, 3.2], four), 1.0),)), 1.0)
    assert ledger.theta[:3].tolist() == [7.0, 0.0, 3.0]  # 15 levels of 1.0 each: 0.4 and 3.2 round


def test_each_fragments_outer_state_goes_into_a_checkpoint_and_comes_back():
    """A resumed Streaming DiLoCo run goes on with each fragment's momentum:
    a ledger loaded from the states steps exactly as the one that saved them."""
    from hetsync.policies.base import Apply, Fragment

    nesterov = {"name": "sgd", "lr": 0.5, "momentum": 0.9, "nesterov": True}
    head, tail = Fragment(lo=0, hi=2), Fragment(lo=2, hi=6)
    first = _fragment_ledger(nesterov)
    for fragment, values in ((head, [1.0, -2.0]), (tail, [0.5] * 4), (head, [3.0, 1.0])):
        first.apply(Apply(contributions=((_hold(first, 0, values, fragment), 1.0),)), 1.0)
    saved = copy.deepcopy(first.fragment_states())  # (as torch.save writes it: no tensor shared)
    assert [(lo, hi) for lo, hi, _ in saved] == [(0, 2), (2, 6)]
    second = _fragment_ledger(nesterov)
    second.theta = first.theta.clone()
    second.load_fragment_states(saved)
    fresh = _fragment_ledger(nesterov)
    fresh.theta = first.theta.clone()
    for ledger in (first, second, fresh):
        ledger.apply(Apply(contributions=((_hold(ledger, 0, [1.0, 1.0], head), 1.0),)), 1.0)
    assert torch.equal(second.theta, first.theta)
    assert not torch.equal(fresh.theta, first.theta)  # (without the states the momentum starts again)


def test_an_apply_of_two_fragments_is_refused():
    from hetsync.errors import PolicyError
    from hetsync.policies.base import Apply, Fragment

    ledger = _fragment_ledger(None)
    a = _hold(ledger, 0, [1.0, 1.0], Fragment(lo=0, hi=2))
    b = _hold(ledger, 1, [1.0, 1.0], Fragment(lo=2, hi=4))
    with pytest.raises(PolicyError, match="mixes pushes of different fragments"):
        ledger.apply(Apply(contributions=((a, 0.5), (b, 0.5))), 1.0)


def test_the_summary_has_each_workers_bytes():
    ledger = _ledger(EVALS)
    ledger.count_bytes(0, 100)
    ledger.count_bytes(0, 20)
    s = _summary(ledger)
    assert s["per_worker"]["bytes"] == [120]
    ledger.worker_bytes = []  # a worker that moved nothing: 0
    assert _summary(ledger)["per_worker"]["bytes"] == [0]


def test_a_worker_s_time_in_the_run_leaves_out_its_time_away():
    from hetsync.ledger import away_times

    left = [{"worker": 0, "t": 2.0, "reason": "x"}, {"worker": 0, "t": 7.0, "reason": "x"}, {"worker": 1, "t": 0.0}]
    joined = [{"worker": 0, "t": 5.0}, {"worker": 1, "t": 4.0}]
    # worker 0 away 2..5 and 7..10; worker 1 absent until 4; worker 2 never away
    assert away_times(3, 10.0, left, joined, None) == [4.0, 6.0, 10.0]
    # no joins: until it left, as before joins existed; a leave before a resume does not count
    assert away_times(2, 10.0, [{"worker": 1, "t": 3.0}], [], None) == [10.0, 3.0]
    assert away_times(2, 10.0, [{"worker": 1, "t": 3.0}], [], 5.0) == [10.0, 10.0]


def test_a_checkpoint_keeps_the_workers_that_came_back():
    """A worker that left and came back (hetsync run --max-worker-restarts)
    before a checkpoint is still listed as joined in the resumed run's summary."""
    before = _ledger([])
    before.left.append({"worker": 1, "t": 2.0, "reason": "connection lost"})
    before.joined.append({"worker": 1, "t": 2.5, "ready_s": 2.6})
    ledger = _ledger([])
    ledger.load_state_dict(before.state_dict(), 6.0)
    assert ledger.joined == [{"worker": 1, "t": 2.5, "ready_s": 2.6}] and ledger.left == before.left
