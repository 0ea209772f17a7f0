import pytest
from hypothesis import given
from hypothesis import strategies as st

from hetsync.algos.dssp import dssp_extra_iterations


def brute(tf, i_f, ts, i_s, r_max):
    gaps = [abs(tf + r * i_f - (ts + i_s)) for r in range(r_max + 1)]
    return gaps.index(min(gaps))


def test_hand_examples():
    # fast pushed at 4 every 1 s; slow pushed at 3 every 3 s -> next at 6: two more
    assert dssp_extra_iterations(4.0, 1.0, 3.0, 3.0, 12) == 2
    # capped at r_max
    assert dssp_extra_iterations(0.0, 1.0, 0.0, 100.0, 12) == 12
    # slow push due before the fast one could push again: stop now
    assert dssp_extra_iterations(4.0, 1.0, 3.0, 1.2, 12) == 0
    # equally close at r=1 (t=5) and r=2 (t=6) from 5.5: the smaller r
    assert dssp_extra_iterations(4.0, 1.0, 3.0, 2.5, 12) == 1
    assert dssp_extra_iterations(4.0, 0.0, 3.0, 9.0, 12) == 0
    assert dssp_extra_iterations(4.0, 1.0, 3.0, 9.0, 0) == 0


def test_bad_input():
    with pytest.raises(ValueError, match="r_max"):
        dssp_extra_iterations(0.0, 1.0, 0.0, 1.0, -1)
    with pytest.raises(ValueError, match="intervals"):
        dssp_extra_iterations(0.0, -1.0, 0.0, 1.0, 3)
    with pytest.raises(ValueError, match="slow_last_push_s"):
        dssp_extra_iterations(0.0, 1.0, float("nan"), 1.0, 3)


@given(
    tf=st.integers(0, 20),
    i_f=st.integers(0, 6),
    ts=st.integers(0, 20),
    i_s=st.integers(0, 30),
    r_max=st.integers(0, 15),
    scale=st.sampled_from([1.0, 0.1, 0.25]),
)
def test_matches_brute_force_including_ties(tf, i_f, ts, i_s, r_max, scale):
    args = (tf * scale, i_f * scale, ts * scale, i_s * scale, r_max)
    assert dssp_extra_iterations(*args) == brute(*args)
