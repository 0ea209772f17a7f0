import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsync.algos.zipline import full_gridscan, gridscan, predict_push_times, spread_of, zipline, zipline_heap

ALGOS = [zipline, zipline_heap, gridscan, full_gridscan]


def enumerate_all(times: np.ndarray) -> np.ndarray:
    """The tie rule as written: smallest (spread, hi, choice) over all R^n choices."""
    n, R = times.shape
    best = None
    for cols in itertools.product(range(R), repeat=n):
        v = times[np.arange(n), list(cols)]
        key = (float(v.max() - v.min()), float(v.max()), tuple(c + 1 for c in cols))
        if best is None or key < best:
            best = key
    return np.array(best[2])


@pytest.mark.parametrize("algo", ALGOS)
def test_hand_example_aligns_fast_and_slow(algo):
    # a worker pushing every 1 s and one every 3 s (last pushes at 0): 3 s and 3 s meet
    times = predict_push_times(np.array([0.0, 0.0]), np.array([1.0, 3.0]), 5)
    assert algo(times).tolist() == [3, 1]


@pytest.mark.parametrize("algo", ALGOS)
def test_hand_example_smallest_spread_wins_over_earliest(algo):
    times = np.array([[1.0, 4.0, 7.2], [2.5, 7.0, 9.0], [3.0, 7.1, 8.0]])
    # (1, 2.5, 3) has spread 2; (7.2, 7.0, 7.1) has spread 0.2
    assert algo(times).tolist() == [3, 2, 2]
    assert spread_of(times, algo(times)) == (7.0, 7.2)


@pytest.mark.parametrize("algo", ALGOS)
def test_ties_go_to_the_earliest_barrier_then_the_earliest_iterations(algo):
    # spread 0 at t=2 and at t=4: the earlier barrier wins
    times = np.array([[2.0, 4.0], [2.0, 4.0]])
    assert algo(times).tolist() == [1, 1]
    # equal spread 1 at hi=3 ([2,3]) and at hi=5 ([4,5]): hi=3 wins
    times = np.array([[2.0, 5.0], [3.0, 4.0]])
    assert algo(times).tolist() == [1, 1]
    # duplicate points inside the window: each worker takes its earliest one
    times = np.array([[1.0, 1.0, 1.0], [0.0, 1.0, 1.0]])
    assert algo(times).tolist() == [1, 2]


@pytest.mark.parametrize("algo", ALGOS)
def test_single_worker_and_single_column(algo):
    assert algo(np.array([[3.0, 4.0, 5.0]])).tolist() == [1]
    assert algo(np.array([[3.0], [1.0], [2.0]])).tolist() == [1, 1, 1]


@pytest.mark.parametrize("algo", ALGOS)
def test_infeasible_starts_are_skipped(algo):
    # worker 1's last point is 2: no window may start after it
    times = np.array([[0.0, 2.9, 3.0], [1.0, 2.0, 2.0]])
    assert algo(times).tolist() == [2, 2]


@pytest.mark.parametrize("algo", ALGOS)
def test_bad_input_is_refused(algo):
    with pytest.raises(ValueError, match="sorted"):
        algo(np.array([[2.0, 1.0]]))
    with pytest.raises(ValueError, match="2-D"):
        algo(np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="finite"):
        algo(np.array([[1.0, np.nan]]))


def test_predict_push_times():
    times = predict_push_times(np.array([1.0, 0.5]), np.array([2.0, 0.0]), 3)
    assert times.tolist() == [[3.0, 5.0, 7.0], [0.5, 0.5, 0.5]]
    with pytest.raises(ValueError, match="R"):
        predict_push_times(np.array([1.0]), np.array([1.0]), 0)
    with pytest.raises(ValueError, match="interval_s"):
        predict_push_times(np.array([1.0]), np.array([-1.0]), 2)


@st.composite
def tied_times(draw, max_n=8, max_r=8):
    n = draw(st.integers(1, max_n))
    r = draw(st.integers(1, max_r))
    hi = draw(st.sampled_from([2, 5, 12]))  # small ranges: ties everywhere
    rows = [sorted(draw(st.lists(st.integers(0, hi), min_size=r, max_size=r))) for _ in range(n)]
    scale = draw(st.sampled_from([1.0, 0.1, 1e-3]))
    offset = draw(st.sampled_from([0.0, 0.7, 1e6]))
    return np.array(rows, dtype=np.float64) * scale + offset


@settings(max_examples=300, deadline=None)
@given(times=tied_times())
def test_all_algorithms_agree(times):
    expected = full_gridscan(times)
    for algo in (zipline, zipline_heap, gridscan):
        assert algo(times).tolist() == expected.tolist(), algo.__name__


@settings(max_examples=150, deadline=None)
@given(times=tied_times(max_n=4, max_r=4))
def test_matches_the_definition_by_enumeration(times):
    assert zipline(times).tolist() == enumerate_all(times).tolist()


@settings(max_examples=50, deadline=None)
@given(
    last=st.lists(st.floats(0, 10), min_size=1, max_size=8),
    data=st.data(),
)
def test_predicted_rows_agree(last, data):
    n = len(last)
    intervals = data.draw(st.lists(st.floats(0.1, 4), min_size=n, max_size=n))
    times = predict_push_times(np.array(last), np.array(intervals), data.draw(st.integers(1, 20)))
    assert zipline(times).tolist() == full_gridscan(times).tolist() == zipline_heap(times).tolist()
