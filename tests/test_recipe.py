"""Training-recipe configs: parsing errors name the key; schedules by formula."""

import math

import pytest

from hetsync.errors import BadInput
from hetsync.recipe import OptimizerConfig, ScheduleConfig, parse_clip_norm, parse_optimizer, parse_schedule


def test_default_is_plain_sgd():
    assert parse_optimizer("optimizer", None).plain
    assert parse_optimizer("optimizer", "sgd").plain
    assert not parse_optimizer("optimizer", {"name": "sgd", "momentum": 0.9}).plain
    assert not parse_optimizer("optimizer", "adamw").plain
    assert not parse_optimizer("outer_optimizer", {"lr": 0.7}, outer=True).plain


def test_optimizer_fields():
    cfg = parse_optimizer("optimizer", {"name": "adamw", "betas": [0.9, 0.95], "eps": "1e-6", "weight_decay": 0.1})
    assert cfg == OptimizerConfig(name="adamw", betas=(0.9, 0.95), eps=1e-6, weight_decay=0.1)
    sgd = parse_optimizer("local_optimizer", {"momentum": 0.9, "nesterov": True})
    assert (sgd.name, sgd.momentum, sgd.nesterov) == ("sgd", 0.9, True)


@pytest.mark.parametrize(
    "raw, key",
    [
        ({"name": "adam"}, "optimizer.name"),
        ({"name": "sgd", "momentum": -0.1}, "optimizer.momentum"),
        ({"name": "sgd", "momentum": 1.0}, "optimizer.momentum"),
        ({"name": "sgd", "nesterov": True}, "optimizer.nesterov"),
        ({"name": "sgd", "betas": [0.9, 0.99]}, "optimizer.betas"),
        ({"name": "adamw", "momentum": 0.9}, "optimizer.momentum"),
        ({"name": "adamw", "betas": [0.9]}, "optimizer.betas"),
        ({"name": "adamw", "eps": 0}, "optimizer.eps"),
        ({"weight_decay": "lots"}, "optimizer.weight_decay"),
        ({"lr": 0.1}, "optimizer.lr"),
        ({"bogus": 0.1}, "optimizer.bogus"),
        (42, "optimizer"),
    ],
)
def test_bad_optimizer_names_the_key(raw, key):
    with pytest.raises(BadInput, match=f"'{key}'"):
        parse_optimizer("optimizer", raw)


def test_step_schedule_decays_at_milestones():
    s = parse_schedule("schedule", {"name": "step", "milestones": [100, 200], "gamma": 0.1})
    assert [s.factor(t) for t in (0, 99.9, 100, 199, 200, 1e9)] == pytest.approx([1, 1, 0.1, 0.1, 0.01, 0.01])


def test_cosine_schedule_warms_up_then_decays():
    s = parse_schedule("schedule", {"name": "cosine", "warmup_steps": 10, "total_steps": 110, "min_factor": 0.1})
    assert s.factor(0) == pytest.approx(0.1)
    assert s.factor(9) == pytest.approx(1.0)
    assert s.factor(10) == pytest.approx(1.0)
    assert s.factor(60) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert s.factor(110) == pytest.approx(0.1)
    assert s.factor(500) == pytest.approx(0.1)
    values = [s.factor(t) for t in range(10, 111)]
    assert all(a >= b for a, b in zip(values, values[1:], strict=False))


def test_constant_schedule_is_one():
    assert ScheduleConfig().factor(12345) == 1.0


@pytest.mark.parametrize(
    "raw, key",
    [
        ({"name": "linear"}, "schedule.name"),
        ({"name": "step"}, "schedule.milestones"),
        ({"name": "step", "milestones": [200, 100]}, "schedule.milestones"),
        ({"name": "step", "milestones": [100, 100]}, "schedule.milestones"),
        ({"name": "step", "milestones": [10], "gamma": 2}, "schedule.gamma"),
        ({"name": "cosine"}, "schedule.total_steps"),
        ({"name": "cosine", "total_steps": 5, "warmup_steps": 10}, "schedule.total_steps"),
        ({"name": "cosine", "total_steps": 5, "warmup_steps": -1}, "schedule.warmup_steps"),
        ({"name": "cosine", "total_steps": 5, "milestones": [1]}, "schedule.milestones"),
        ({"name": "step", "milestones": [1], "total_steps": 5}, "schedule.total_steps"),
    ],
)
def test_bad_schedule_names_the_key(raw, key):
    with pytest.raises(BadInput, match=f"'{key}'"):
        parse_schedule("schedule", raw)


def test_clip_norm():
    assert parse_clip_norm(None) is None
    assert parse_clip_norm(1) == 1.0
    for bad in (0, -1, "x", True):
        with pytest.raises(BadInput, match="'clip_norm'"):
            parse_clip_norm(bad)


def test_only_the_outer_optimizer_has_an_lr():
    assert parse_optimizer("outer_optimizer", {"lr": 0.7, "momentum": 0.9}, outer=True).lr == 0.7
    for bad in (-1, 0):
        with pytest.raises(BadInput, match="'outer_optimizer.lr'"):
            parse_optimizer("outer_optimizer", {"lr": bad}, outer=True)
