import pytest
from hypothesis import given
from hypothesis import strategies as st

from hetsync.algos.streaming import due_fragment, fragment_bounds, max_spacing, min_spacing, sync_offsets


def test_offsets_are_p_times_h_over_p_rounded_down():
    assert sync_offsets(100, 4) == (0, 25, 50, 75)
    assert sync_offsets(10, 3) == (0, 3, 6)
    assert sync_offsets(10, 1) == (0,)
    assert (min_spacing(10, 3), max_spacing(10, 3)) == (3, 4)
    assert (min_spacing(10, 1), max_spacing(10, 1)) == (10, 10)
    with pytest.raises(ValueError, match="P"):
        sync_offsets(3, 4)


def test_the_staggered_schedule_of_the_paper():
    # fragment p syncs at t where (t - p*H/P) mod H == 0, t > 0
    H, P = 100, 4
    due = {t: due_fragment(t, H, P) for t in range(0, 301)}
    assert due[0] is None  # nothing done yet
    assert [t for t, p in due.items() if p == 0] == [100, 200, 300]
    assert [t for t, p in due.items() if p == 1] == [25, 125, 225]
    assert [t for t, p in due.items() if p == 3] == [75, 175, 275]
    assert due[26] is None and due[99] is None


@given(H=st.integers(1, 60), P=st.integers(1, 60), horizon=st.integers(1, 400))
def test_each_fragment_syncs_every_h_steps_one_at_a_time(H, P, horizon):
    if P > H:
        return
    syncs: dict[int, list[int]] = {p: [] for p in range(P)}
    for t in range(1, horizon + 1):
        p = due_fragment(t, H, P)  # at most one fragment per step, by construction
        if p is not None:
            syncs[p].append(t)
    for p, ts in syncs.items():
        assert all(b - a == H for a, b in zip(ts, ts[1:], strict=False)), (p, ts)
        assert not ts or ts[0] == (sync_offsets(H, P)[p] or H)
    # consecutive syncs (of any fragments) are between min and max spacing apart
    every = sorted(t for ts in syncs.values() for t in ts)
    gaps = [b - a for a, b in zip(every, every[1:], strict=False)]
    assert all(min_spacing(H, P) <= g <= max_spacing(H, P) for g in gaps)


def test_fragments_on_tensor_boundaries_nearest_to_equal_shares():
    mlp = (4096, 64, 640, 10)  # digits-mlp
    assert fragment_bounds(4810, 2, mlp) == [(0, 4096), (4096, 4810)]
    assert fragment_bounds(4810, 3, mlp) == [(0, 4096), (4096, 4160), (4160, 4810)]
    assert fragment_bounds(4810, 4, mlp) == [(0, 4096), (4096, 4160), (4160, 4800), (4800, 4810)]
    assert fragment_bounds(10, 2, (3, 3, 4)) == [(0, 6), (6, 10)]  # 6 is nearer 5 than 3
    assert fragment_bounds(10, 2, (4, 2, 4)) == [(0, 4), (4, 10)]  # 4 and 6 tie around 5: the lower one
    assert fragment_bounds(10, 1, (3, 3, 4)) == [(0, 10)]
    with pytest.raises(ValueError, match="fewer than P=5"):
        fragment_bounds(4810, 5, mlp)
    with pytest.raises(ValueError, match="add up"):
        fragment_bounds(100, 2, (40, 50))


def test_equal_fragments_without_tensors_or_when_asked():
    assert fragment_bounds(10, 3) == [(0, 3), (3, 6), (6, 10)]
    assert fragment_bounds(4810, 2, (4096, 64, 640, 10), split="equal") == [(0, 2405), (2405, 4810)]
    with pytest.raises(ValueError, match="non-empty"):
        fragment_bounds(2, 3)


@given(sizes=st.lists(st.integers(1, 50), min_size=1, max_size=20), P=st.integers(1, 20))
def test_tensor_fragments_cover_the_model_on_boundaries(sizes, P):
    n = sum(sizes)
    if len(sizes) < P:
        with pytest.raises(ValueError):
            fragment_bounds(n, P, sizes)
        return
    bounds = fragment_bounds(n, P, sizes)
    edges = {0}
    for s in sizes:
        edges.add(max(edges) + s)
    assert len(bounds) == P and bounds[0][0] == 0 and bounds[-1][1] == n
    assert all(lo < hi for lo, hi in bounds)
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:], strict=False))
    assert all(lo in edges and hi in edges for lo, hi in bounds)
