import pytest

from hetsync.algos.dylu import dylu_steps, ema, fastest


def test_steps_are_proportional_to_speed_floored_at_least_one_at_most_h():
    assert dylu_steps(1.0, 1.0, 10) == 10  # the fastest runs H
    assert dylu_steps(2.0, 1.0, 10) == 5
    assert dylu_steps(3.0, 1.0, 10) == 3  # ⌊10/3⌋
    assert dylu_steps(100.0, 1.0, 10) == 1  # at least one step
    assert dylu_steps(0.5, 1.0, 10) == 10  # (a stale "fastest": never more than H)
    assert dylu_steps(0.3, 0.1, 3) == 1 and dylu_steps(0.1, 0.1, 3) == 3  # no rounding down at equal speed


def test_unknown_or_zero_step_times_give_h():
    assert dylu_steps(None, 1.0, 7) == 7
    assert dylu_steps(1.0, None, 7) == 7
    assert dylu_steps(0.0, 0.0, 7) == 7
    with pytest.raises(ValueError, match="H"):
        dylu_steps(1.0, 1.0, 0)


def test_ema_starts_at_the_first_sample_then_moves_by_alpha():
    assert ema(None, 2.0, 0.2) == 2.0
    assert ema(2.0, 7.0, 0.2) == pytest.approx(3.0)
    assert ema(2.0, 7.0, 1.0) == 7.0
    with pytest.raises(ValueError, match="alpha"):
        ema(1.0, 1.0, 0.0)


def test_fastest_ignores_unmeasured_workers():
    assert fastest([None, 3.0, 1.5, None]) == 1.5
    assert fastest([None, None]) is None
