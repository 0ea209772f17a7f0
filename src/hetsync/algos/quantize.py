"""Low-precision outer gradients on the wire: a real quantize / dequantize
round trip, and the bytes it takes.

Streaming DiLoCo (Douillard et al., "Streaming DiLoCo with overlapping
communication: Towards a Distributed Free Lunch", arXiv:2501.18512, 2025)
sends its outer gradients (a fragment's model delta) in 4 bits and reports no
loss; the accumulation and the outer step stay in 32-bit floats. The paper
uses the 4-bit float E3M0 (a sign and three exponent bits: ± powers of two).
hetsync uses **uniform symmetric integers** instead, because their error has
a simple bound that a test can check:

- one float32 scale per message (per fragment): s = max|x| / L with
  L = 2^(bits−1) − 1 (127 for 8 bits, 7 for 4 bits);
- each value becomes the integer q = round(x / s) in [−L, L] (round half to
  even, deterministic) and is read back as q·s;
- so |x − q·s| ≤ s / 2 for every value (plus float32 rounding of the
  result), and the largest magnitude is exact.

Uniform 4-bit has 15 levels, so values much smaller than the largest round
to zero; E3M0 keeps them, as powers of two, at a larger relative error on
big ones. Which one loses less on a given model is an empirical question the
simulator can answer for uniform integers only.

A message of n values at b < 32 bits takes ⌈n·b/8⌉ bytes plus the 4-byte
scale; at 32 bits, 4·n bytes and no scale (:func:`payload_nbytes`). The scale
is a float32 (:func:`quantize` rounds it so), so the message that
:func:`encode` packs — the scale, then the integers, two to a byte at 4 bits
— is read back by :func:`decode` to exactly :func:`roundtrip`'s values: the
real processes send those bytes, the simulator counts them. A
simulated model may be declared larger than the workload's real vector
(the scenario's ``model_bytes``): :func:`fragment_nbytes` scales a fragment's
share of it.
"""

from __future__ import annotations

import numpy as np

BITS = (32, 8, 4)
"""Widths a message may travel at: full float32, or uniform integers."""
SCALE_BYTES = 4
"""One float32 scale per quantized message."""


def levels(bits: int) -> int:
    """L: the largest integer magnitude at ``bits`` (127 at 8, 7 at 4)."""
    if bits not in BITS or bits == 32:
        raise ValueError(f"bits must be 8 or 4 to quantize, got {bits!r}")
    return (1 << (bits - 1)) - 1


def quantize(x: np.ndarray, bits: int) -> tuple[np.ndarray, float]:
    """The integers and the scale of ``x`` at ``bits`` (8 or 4): q = round(x / s),
    s = max|x| / L rounded to float32 (the width it travels at). All zeros (or
    empty, or too small for a float32 scale) give scale 0 and zeros; a value
    that is not finite gives scale inf and no integers (nothing can scale it:
    see :func:`roundtrip`)."""
    top = levels(bits)
    values = np.asarray(x, dtype=np.float64)
    if values.size == 0:
        return np.zeros(0, dtype=np.int8), 0.0
    peak = float(np.max(np.abs(values)))
    if not np.isfinite(peak):
        return np.zeros(0, dtype=np.int8), float("inf")
    if peak == 0.0:
        return np.zeros(values.shape, dtype=np.int8), 0.0
    scale = float(np.float32(peak / top))
    if scale == 0.0:  # (every value below float32's smallest scale: they all round to zero)
        return np.zeros(values.shape, dtype=np.int8), 0.0
    q = np.clip(np.rint(values / scale), -top, top).astype(np.int8)
    return q, scale


def dequantize(q: np.ndarray, scale: float) -> np.ndarray:
    """The float32 values integers ``q`` at ``scale`` stand for: q·s."""
    return (np.asarray(q, dtype=np.float64) * scale).astype(np.float32)


def roundtrip(x: np.ndarray, bits: int) -> np.ndarray:
    """``x`` as it arrives after travelling at ``bits``: unchanged (float32) at
    32, else quantized and read back, each value within scale / 2 of ``x``.
    A message holding a value that is not finite (a diverged model's delta)
    travels as it is: no scale can represent it."""
    values = np.asarray(x, dtype=np.float32)
    if bits == 32:
        return values
    q, scale = quantize(values, bits)
    if not np.isfinite(scale):
        return values
    return dequantize(q, scale).reshape(values.shape)


def payload_nbytes(values: int, bits: int) -> int:
    """Bytes of a message of ``values`` numbers at ``bits``: 4 each at 32,
    else ⌈values·bits/8⌉ plus the scale."""
    if bits not in BITS:
        raise ValueError(f"bits must be one of {BITS}, got {bits!r}")
    if values < 0:
        raise ValueError(f"values must be >= 0, got {values!r}")
    if bits == 32:
        return 4 * values
    return -(-values * bits // 8) + SCALE_BYTES


def fragment_nbytes(model_nbytes: int, n_params: int, lo: int, hi: int, bits: int) -> int:
    """Bytes of the range [lo, hi) of an ``n_params``-value model whose float32
    transfer is declared ``model_nbytes`` (a scenario's ``model_bytes``, or
    the real 4·n_params) at ``bits``: its share of the declared size, scaled
    by bits/32, rounded up, plus the scale below 32 bits. At the real size it
    is :func:`payload_nbytes` of hi − lo values; the whole model at 32 bits is
    ``model_nbytes`` exactly."""
    if not 0 <= lo < hi <= n_params:
        raise ValueError(f"fragment [{lo}, {hi}) is not a non-empty range of a {n_params}-value model")
    if bits not in BITS:
        raise ValueError(f"bits must be one of {BITS}, got {bits!r}")
    body = -(-model_nbytes * (hi - lo) * bits // (n_params * 32))
    return body if bits == 32 else body + SCALE_BYTES


def encode(x: np.ndarray, bits: int) -> np.ndarray:
    """The bytes (uint8) of ``x`` travelling at ``bits``: at 32 the float32
    values; at 8 or 4 the float32 scale, then the integers (int8 at 8; at 4
    two to a byte, q + 8 in each half, the first value in the low half).
    :func:`payload_nbytes` long — except a message holding a value that is
    not finite, which travels as an infinite scale and the float32 values
    (:func:`roundtrip` leaves it as it is)."""
    values = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    if bits == 32:
        raw: np.ndarray = values.view(np.uint8).copy()
        return raw
    q, scale = quantize(values, bits)
    head = np.array([scale], dtype=np.float32).view(np.uint8)
    if not np.isfinite(scale):
        return np.concatenate([head, values.view(np.uint8)])
    if bits == 8:
        return np.concatenate([head, q.view(np.uint8)])
    nibbles = (q.astype(np.int16) + 8).astype(np.uint8)
    if nibbles.size % 2:
        nibbles = np.append(nibbles, np.uint8(8))  # (a zero pads the last byte)
    return np.concatenate([head, nibbles[0::2] | (nibbles[1::2] << 4)])


def decode(message: np.ndarray, values: int, bits: int) -> np.ndarray:
    """The ``values`` float32 numbers an :func:`encode`d message stands for;
    ValueError if its length is not what ``values`` at ``bits`` takes."""
    raw = np.ascontiguousarray(message, dtype=np.uint8).reshape(-1)
    if bits == 32:
        if raw.size != 4 * values:
            raise ValueError(f"a 32-bit message of {values} values has {4 * values} bytes, got {raw.size}")
        floats: np.ndarray = raw.view(np.float32).copy()
        return floats
    levels(bits)  # (checks bits)
    if raw.size < SCALE_BYTES:
        raise ValueError(f"a {bits}-bit message starts with its {SCALE_BYTES}-byte scale, got {raw.size} bytes")
    scale = float(raw[:SCALE_BYTES].view(np.float32)[0])
    body = raw[SCALE_BYTES:]
    if not np.isfinite(scale):  # (a value that is not finite: the float32 values follow)
        if body.size != 4 * values:
            raise ValueError(f"an unscaled message of {values} values has {4 * values + SCALE_BYTES} bytes")
        unscaled: np.ndarray = body.view(np.float32).copy()
        return unscaled
    if raw.size != payload_nbytes(values, bits):
        raise ValueError(
            f"a {bits}-bit message of {values} values has {payload_nbytes(values, bits)} bytes, got {raw.size}"
        )
    if bits == 8:
        q = body.view(np.int8)
    else:
        both = np.empty(2 * body.size, dtype=np.int16)
        both[0::2], both[1::2] = body & 0x0F, body >> 4
        q = (both[:values] - 8).astype(np.int8)
    return dequantize(q, scale)
