"""The data paths both drivers share (hetsync.driver.paths): which paths
exist, which policies may take the collective one, and what an Apply on it
must be (the batch-weighted mean of its round's pushes)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from hetsync.driver import paths
from hetsync.driver.core import policy_context
from hetsync.errors import BadInput, PolicyError
from hetsync.policies import make_policy
from tests.sim.conftest import make_scenario


def test_the_paths_and_a_bad_one():
    assert paths.PATHS == ("ps", "collective")
    assert [paths.check_path(p) for p in paths.PATHS] == ["ps", "collective"]
    with pytest.raises(BadInput, match="path must be one of ps, collective, got 'ring'"):
        paths.check_path("ring")


@pytest.mark.parametrize(
    ("spec", "can"),
    [
        ("bsp", True),
        ("lb-bsp", True),
        ("local-sgd", True),
        ("diloco", True),
        ("asp", False),
        ("ssp:s=3", False),
        ("p2p-allreduce", False),
        ("async-local-sgd", False),
    ],
)
def test_which_policies_may_take_the_collective_path(spec, can):
    policy = make_policy(spec, policy_context(make_scenario()))
    assert paths.uses_collective("ps", policy) is False  # ps: every policy, nothing to check
    if can:
        assert paths.uses_collective("collective", policy) is True
    else:
        with pytest.raises(BadInput) as e:
            paths.uses_collective("collective", policy)
        assert f"{policy.label} cannot use path=collective" in str(e.value) and "use path=ps" in str(e.value)
        assert "\n" not in str(e.value)


def test_an_apply_on_the_collective_path_is_the_batch_weighted_mean():
    pushes = {1: SimpleNamespace(kind="grad", samples=10), 2: SimpleNamespace(kind="grad", samples=30)}
    paths.check_round("bsp", [(1, 0.25), (2, 0.75)], pushes)
    paths.check_round("bsp", [(7, 1.0)], pushes)  # an unknown push: the ledger names it
    with pytest.raises(PolicyError, match=r"weights push 1 0\.5.*batch-weighted mean \(0\.25\); run it with path=ps"):
        paths.check_round("bsp", [(1, 0.5), (2, 0.5)], pushes)


def test_an_apply_of_deltas_on_the_collective_path_is_their_equal_weight_mean():
    """Local SGD's and DiLoCo's rounds: every delta 1/k, whatever its samples."""
    pushes = {1: SimpleNamespace(kind="delta", samples=10), 2: SimpleNamespace(kind="delta", samples=30)}
    paths.check_round("local-sgd", [(1, 0.5), (2, 0.5)], pushes)
    with pytest.raises(PolicyError, match=r"weights push 1 0\.25.*equal-weight mean.*\(0\.5\); run it with path=ps"):
        paths.check_round("x", [(1, 0.25), (2, 0.75)], pushes)
    pushes[2] = SimpleNamespace(kind="grad", samples=30)
    with pytest.raises(PolicyError, match="mixes gradient and delta pushes"):
        paths.check_round("x", [(1, 0.5), (2, 0.5)], pushes)


def test_the_runtime_imports_the_same_pieces():
    collective = pytest.importorskip("hetsync.runtime.collective")
    for name in ("PATHS", "check_path", "uses_collective", "check_round"):
        assert getattr(collective, name) is getattr(paths, name), name
