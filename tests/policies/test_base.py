"""The round-close helpers of policies/base.py (used by bsp, local-sgd,
backup and the balanced BSPs)."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from hetsync.policies import base
from hetsync.policies.base import Apply, Compute, Pull, apply_and_pull, everyone_pushed
from tests.policies.helpers import arrived


def test_a_round_closes_once_every_live_worker_has_pushed():
    assert not everyone_pushed([], set())  # nothing to apply
    a, b = arrived(0), arrived(1)
    assert not everyone_pushed([a], {0, 1})
    assert everyone_pushed([a, b], {0, 1})
    assert everyone_pushed([a, b], {1})  # a worker that left keeps its push in the round


def test_apply_and_pull_weights_by_samples_and_chains_the_next_steps():
    pushes = [arrived(0, samples=30), arrived(2, samples=10)]
    steps = [Compute(worker=w, batch_size=8, push="grad") for w in (0, 2)]
    cmds = apply_and_pull(pushes, lr=0.1, next_steps=steps)
    ids = [p.push_id for p in pushes]
    assert cmds == [
        Apply(contributions=((ids[0], 0.75), (ids[1], 0.25)), lr=0.1),
        Pull(worker=0, then=steps[0]),
        Pull(worker=2, then=steps[1]),
    ]


def test_apply_and_pull_with_equal_weights_averages_deltas():
    pushes = [arrived(w, samples=8 * (w + 1), kind="delta") for w in range(4)]
    (apply,) = apply_and_pull(pushes, equal_weights=True)
    assert apply == Apply(contributions=tuple((p.push_id, 0.25) for p in pushes), lr=0.0)


def test_events_and_commands_keep_the_dataclass_init_semantics():
    """base._quick_init replaces the frozen dataclasses' __init__ (for speed): same keyword-only
    signature with the fields' defaults, checks still run, instances still frozen and comparable."""
    for cls in base.EVENT_TYPES + base.COMMAND_TYPES:
        params = list(inspect.signature(cls).parameters.values())
        fields = dataclasses.fields(cls)
        assert [p.name for p in params] == [f.name for f in fields], cls
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params), cls
        assert [p.default for p in params] == [
            inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default for f in fields
        ], cls
    done = base.ComputeDone(now_s=1.0, worker=2, step=3, batch_size=8, base_version=4, duration_s=0.5)
    assert (done.load, done.uplink_Bps) == (1.0, float("inf"))
    assert done == base.ComputeDone(now_s=1.0, worker=2, step=3, batch_size=8, base_version=4, duration_s=0.5)
    assert hash(done) == hash(dataclasses.replace(done))
    assert repr(done).startswith("ComputeDone(now_s=1.0, worker=2, step=3")
    with pytest.raises(dataclasses.FrozenInstanceError):
        done.worker = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        base.ComputeDone(1.0, 2, 3, 8, 4, 0.5)  # type: ignore[misc]  # keyword-only
    with pytest.raises(TypeError):
        base.PullDone(now_s=1.0, worker=2)  # type: ignore[call-arg]  # version missing
    with pytest.raises(ValueError, match="batch_size"):
        base.Compute(worker=0, batch_size=0)  # __post_init__ still runs
    with pytest.raises(ValueError, match="then"):
        base.Pull(worker=1, then=base.Compute(worker=2, batch_size=1))
