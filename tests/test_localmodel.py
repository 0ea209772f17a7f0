import pytest
import torch

from hetsync.localmodel import LocalModel, push_sum_mix, weighted_average
from hetsync.optim import Stepper
from hetsync.recipe import OptimizerConfig, ScheduleConfig


def test_delta_carries_the_local_steps_and_the_reference_moves():
    m = LocalModel(torch.zeros(3), version=4)
    m.finish_step(torch.ones(3), batch=8, base=4, local_lr=0.5)
    m.finish_step(torch.ones(3), batch=8, base=4, local_lr=0.5)
    p = m.take_push("delta")
    assert torch.equal(p.payload, torch.full((3,), -1.0))
    assert (p.steps, p.samples, p.base_version) == (2, 16, 4)
    assert torch.equal(m.take_push("delta").payload, torch.zeros(3))  # nothing new since


def test_a_step_given_a_clock_takes_the_schedule_there_and_counts_on_from_it():
    step_at = ScheduleConfig(name="step", milestones=(10.0,), gamma=0.1)  # lr × 0.1 from clock 10
    m = LocalModel(torch.zeros(1), stepper=Stepper(OptimizerConfig(), step_at, None))
    m.finish_step(torch.ones(1), batch=8, base=0, local_lr=1.0)  # clock 0: the full rate
    assert m.local.item() == pytest.approx(-1.0) and m.local_clock == 1
    m.finish_step(torch.ones(1), batch=8, base=0, local_lr=1.0, clock=9.5)  # handed over: the schedule's rate at 9.5
    m.finish_step(torch.ones(1), batch=8, base=0, local_lr=1.0)  # and 10.5 after it
    assert m.local.item() == pytest.approx(-2.1) and m.local_clock == pytest.approx(11.5)


def test_a_step_begun_before_a_pull_reports_the_older_base():
    m = LocalModel(torch.zeros(3), version=1)
    assert m.load(torch.ones(3), version=2) == 0
    m.finish_step(torch.ones(3), batch=4, base=1, local_lr=0.1)  # started on version 1
    assert m.take_push("delta").base_version == 1


def test_pull_overwrites_unpushed_local_steps_and_reports_them():
    m = LocalModel(torch.zeros(2))
    m.finish_step(torch.ones(2), batch=4, base=0, local_lr=0.1)
    assert m.load(torch.ones(2), version=1) == 1
    assert m.take_push("delta").steps == 0


def test_a_fragment_delta_is_measured_from_the_global_values_last_merged():
    m = LocalModel(torch.zeros(4), version=0)
    m.finish_step(torch.ones(4), batch=8, base=0, local_lr=0.5)  # local = -0.5 everywhere
    p = m.take_fragment(2, 4)
    assert torch.equal(p.payload, torch.full((2,), -0.5)) and (p.steps, p.samples, p.kind) == (1, 8, "delta")
    m.finish_step(torch.ones(4), batch=8, base=0, local_lr=0.5)  # local = -1.0: an overlapped step
    assert torch.equal(m.take_fragment(2, 4).payload, torch.full((2,), -1.0))  # ref untouched by a push
    # the merge: keep half of the local values, take the global ones as the reference; no step is lost
    m.merge_fragment(2, 4, torch.tensor([1.0, 3.0]), keep=0.5, version=7)
    assert torch.equal(m.local, torch.tensor([-1.0, -1.0, 0.0, 1.0])) and m.base_version == 7
    assert torch.equal(m.ref, torch.tensor([0.0, 0.0, 1.0, 3.0]))
    assert torch.equal(m.take_fragment(2, 4).payload, torch.tensor([-1.0, -2.0]))
    m.merge_fragment(0, 2, torch.tensor([5.0, 6.0]), keep=0.0, version=8)  # keep 0: the global values exactly
    assert torch.equal(m.local[:2], torch.tensor([5.0, 6.0]))


def test_a_merge_makes_new_tensors():
    shared = torch.zeros(3)
    m = LocalModel(shared)
    m.merge_fragment(0, 1, torch.ones(1), keep=0.0, version=1)
    assert torch.equal(shared, torch.zeros(3))  # a model handed out by the server stays as it was
    counting = LocalModel(None)
    counting.finish_step(None, batch=4, base=0, local_lr=0.1)
    assert counting.take_fragment(0, 1).payload is None and counting.take_fragment(0, 1).steps == 0
    counting.merge_fragment(0, 1, None, keep=0.5, version=2)
    assert counting.base_version == 2


def test_gradient_replaced_before_push_is_reported():
    m = LocalModel(torch.zeros(2))
    assert m.finish_step(torch.ones(2), batch=4, base=0, local_lr=None) == 0
    assert m.finish_step(torch.ones(2), batch=4, base=0, local_lr=None) == 1
    p = m.take_push("grad")
    assert p.steps == 1


# ------------------------------------------------------------- push-sum mixing
def _round(models: list[LocalModel], sends: dict[int, list[int]]) -> None:
    """One exchange: every sender splits its weight and sends its model;
    then every receiver mixes what it got."""
    inbox: dict[int, list] = {i: [] for i in range(len(models))}
    for s, receivers in sends.items():
        share = models[s].split_weight(len(receivers))
        for r in receivers:
            inbox[r].append((models[s].local, share))
    for i, got in inbox.items():
        models[i].mix(got)


def _pushsum_average(models: list[LocalModel]) -> torch.Tensor:
    return weighted_average([m.local for m in models], [m.weight for m in models])


def test_mixing_weights_sum_to_one_per_receiver():
    # basis vectors as models: the mixed model is the vector of mixing weights
    eye = torch.eye(4, dtype=torch.float64)
    mixed, weight = push_sum_mix(eye[0], 0.25, [(eye[1], 0.5), (eye[2], 1 / 3), (eye[3], 0.125)])
    total = 0.25 + 0.5 + 1 / 3 + 0.125
    assert weight == pytest.approx(total)
    assert mixed.sum().item() == pytest.approx(1.0, abs=1e-15)
    assert mixed.tolist() == pytest.approx([0.25 / total, 0.5 / total, (1 / 3) / total, 0.125 / total])


def test_a_round_with_unequal_fan_out_keeps_the_weighted_average():
    torch.manual_seed(0)
    n = 5
    start = [torch.randn(6, dtype=torch.float64) for _ in range(n)]
    models = [LocalModel(x.clone(), push_sum=True) for x in start]
    before = _pushsum_average(models)
    # worker 0 (a fast sender) multicasts to everyone, the others to one peer each
    sends = {0: [1, 2, 3, 4], 1: [0], 2: [0], 3: [1], 4: [2]}
    _round(models, sends)
    _round(models, {0: [3, 4], 4: [0, 1, 2]})
    assert sum(m.weight for m in models) == pytest.approx(n)  # every copy arrived: no mass lost
    torch.testing.assert_close(_pushsum_average(models), before, rtol=0, atol=1e-12)
    # the equal-weight average of old would have moved toward worker 0's model
    got: dict[int, list[torch.Tensor]] = {i: [] for i in range(n)}
    for s, receivers in sends.items():
        for r in receivers:
            got[r].append(start[s])
    equal = [(start[i] + sum(got[i])) / (1 + len(got[i])) for i in range(n)]
    assert (torch.stack(equal).mean(dim=0) - torch.stack(start).mean(dim=0)).abs().max() > 1e-3


def test_equal_fan_out_gives_exactly_the_equal_weight_average():
    # every sender to 2 receivers, every receiver 2 copies: weights stay 1
    torch.manual_seed(1)
    xs = [torch.randn(7) for _ in range(5)]
    models = [LocalModel(x, push_sum=True) for x in xs]
    _round(models, {i: [(i + 1) % 5, (i + 2) % 5] for i in range(5)})
    for i, m in enumerate(models):
        assert m.weight == 1.0
        expected = xs[i]  # the old equal-weight mix: own + the copies in arrival order, / count
        for s in sorted([(i - 2) % 5, (i - 1) % 5]):
            expected = expected + xs[s]
        assert torch.equal(m.local, expected / 3)


def test_weights_move_without_math_and_bad_weights_are_refused():
    m = LocalModel(None, push_sum=True)
    assert m.split_weight(3) == 0.25 and m.weight == 0.25
    m.mix([(None, 0.5), (None, 0.25)])
    assert m.weight == 1.0
    with pytest.raises(ValueError, match="at least one receiver"):
        m.split_weight(0)
    with pytest.raises(ValueError, match="weight must be > 0"):
        push_sum_mix(torch.zeros(2), 1.0, [(torch.ones(2), 0.0)])


def test_an_allreduce_gives_the_weighted_average_and_the_mean_weight():
    xs = [torch.tensor([0.0]), torch.tensor([3.0])]
    weights = [0.5, 1.0]
    assert weighted_average(xs, weights).item() == pytest.approx(2.0)
    assert torch.equal(weighted_average(xs, [1.0, 1.0]), torch.stack(xs).mean(dim=0))
    m = LocalModel(xs[0])
    m.replace(torch.tensor([2.0]), 0.75)
    assert m.weight == 0.75


def test_equal_mixing_is_the_default_and_keeps_every_weight_at_one():
    """p2p_mixing: equal (the default): the equal-weight average of its own
    and the copies, whatever the fan-out; the weights never move."""
    xs = [torch.tensor([0.0]), torch.tensor([3.0]), torch.tensor([6.0])]
    models = [LocalModel(x) for x in xs]
    _round(models, {0: [1, 2], 1: [2]})  # unequal fan-out
    assert [m.weight for m in models] == [1.0, 1.0, 1.0]
    assert models[1].local.item() == 1.5 and models[2].local.item() == 3.0  # (6 + 0 + 3) / 3
