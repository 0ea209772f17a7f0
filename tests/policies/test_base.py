"""The round-close helpers of policies/base.py (used by bsp, local-sgd,
backup and the balanced BSPs)."""

from __future__ import annotations

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
