import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from hetsync.algos.quantize import (
    decode,
    dequantize,
    encode,
    fragment_nbytes,
    levels,
    payload_nbytes,
    quantize,
    roundtrip,
)

FLOATS = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False, width=32)


@settings(max_examples=300, deadline=None)
@given(x=hnp.arrays(np.float32, st.integers(1, 300), elements=FLOATS), bits=st.sampled_from([8, 4]))
def test_the_round_trip_error_is_bounded_by_half_the_scale(x, bits):
    q, scale = quantize(x, bits)
    top = levels(bits)
    assert scale == pytest.approx(float(np.max(np.abs(x.astype(np.float64)))) / top)
    assert q.dtype == np.int8 and np.all(np.abs(q.astype(int)) <= top)
    back = roundtrip(x, bits)
    assert back.dtype == np.float32 and back.shape == x.shape
    assert np.array_equal(back, dequantize(q, scale))
    err = np.abs(back.astype(np.float64) - x.astype(np.float64))
    # scale/2 from rounding to the grid, plus float32's rounding of the value read back
    bound = scale / 2 + np.abs(x.astype(np.float64)) * 2.0**-23
    assert np.all(err <= bound * (1 + 1e-9) + 1e-30), (err - bound).max()
    # the largest magnitude is on the grid: it comes back (to float32 rounding)
    i = int(np.argmax(np.abs(x)))
    assert back[i] == pytest.approx(float(x[i]), rel=2.0**-22, abs=1e-30)


@given(x=hnp.arrays(np.float32, st.integers(0, 50), elements=FLOATS))
def test_32_bits_travel_unchanged(x):
    assert np.array_equal(roundtrip(x, 32), x)


def test_levels_and_edge_cases():
    assert levels(8) == 127 and levels(4) == 7
    with pytest.raises(ValueError, match="bits"):
        levels(32)
    q, scale = quantize(np.zeros(5, np.float32), 4)
    assert scale == 0.0 and not q.any()
    assert np.array_equal(roundtrip(np.zeros(5, np.float32), 4), np.zeros(5, np.float32))
    assert roundtrip(np.zeros(0, np.float32), 8).shape == (0,)
    # 4 bits: 15 levels; a value under half a level of the largest rounds to zero
    assert np.array_equal(roundtrip(np.array([7.0, 0.4, -0.6, 3.2], np.float32), 4), [7.0, 0.0, -1.0, 3.0])
    # a diverged delta (inf or NaN) has no scale: it travels as it is
    bad = np.array([1.0, np.inf, -2.0], np.float32)
    assert np.array_equal(roundtrip(bad, 8), bad)
    nan = np.array([np.nan, 1.0], np.float32)
    assert np.isnan(roundtrip(nan, 4)[0]) and roundtrip(nan, 4)[1] == 1.0


def test_payload_bytes_count_the_width_and_the_scale():
    assert payload_nbytes(1000, 32) == 4000
    assert payload_nbytes(1000, 8) == 1000 + 4
    assert payload_nbytes(1000, 4) == 500 + 4
    assert payload_nbytes(7, 4) == 4 + 4  # ⌈3.5⌉
    assert payload_nbytes(0, 32) == 0
    with pytest.raises(ValueError, match="bits"):
        payload_nbytes(10, 16)


def test_fragment_bytes_are_its_share_of_the_declared_model():
    # at the real size (4 bytes a value) a fragment is its payload
    assert fragment_nbytes(4 * 4810, 4810, 0, 4096, 32) == payload_nbytes(4096, 32)
    assert fragment_nbytes(4 * 4810, 4810, 4096, 4810, 4) == payload_nbytes(714, 4)
    # a scenario declaring 4 MB for the same model: the whole at 32 bits is exactly that
    assert fragment_nbytes(4_000_000, 4810, 0, 4810, 32) == 4_000_000
    halves = [fragment_nbytes(4_000_000, 4810, lo, hi, 32) for lo, hi in [(0, 2405), (2405, 4810)]]
    assert halves == [2_000_000, 2_000_000]
    assert fragment_nbytes(4_000_000, 4810, 0, 4810, 4) == 500_000 + 4
    assert fragment_nbytes(4_000_000, 4810, 0, 4810, 8) == 1_000_000 + 4
    with pytest.raises(ValueError, match="range"):
        fragment_nbytes(400, 100, 50, 101, 32)


@settings(max_examples=300, deadline=None)
@given(x=hnp.arrays(np.float32, st.integers(0, 301), elements=FLOATS), bits=st.sampled_from([32, 8, 4]))
def test_the_bytes_on_the_wire_read_back_to_the_round_trip(x, bits):
    message = encode(x, bits)
    assert message.dtype == np.uint8 and message.size == payload_nbytes(x.size, bits)
    back = decode(message, x.size, bits)
    assert back.dtype == np.float32 and np.array_equal(back, roundtrip(x, bits))


def test_a_message_that_is_not_finite_travels_unscaled_and_a_wrong_length_is_refused():
    bad = np.array([1.0, np.inf, np.nan], np.float32)
    for bits in (8, 4):
        back = decode(encode(bad, bits), 3, bits)
        assert back[0] == 1.0 and back[1] == np.inf and np.isnan(back[2])
    # 4 bits: two values a byte, the first in the low half (q + 8)
    assert list(encode(np.array([7.0, -7.0, 1.0], np.float32), 4)[4:]) == [15 | (1 << 4), 9 | (8 << 4)]
    with pytest.raises(ValueError, match="bytes"):
        decode(encode(np.ones(10, np.float32), 4), 12, 4)
    with pytest.raises(ValueError, match="bytes"):
        decode(np.zeros(7, np.uint8), 2, 32)
