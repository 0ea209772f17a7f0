"""A 1-D signal classification data set in the spirit of MNIST-1D (Greydanus 2020).

Ten fixed class templates, each a piecewise-linear shape of 12 points, are
turned into samples of 40 points by MNIST-1D's recipe (re-implemented here
with numpy, and with templates of our own): zero-pad the template at a random
place, stretch the padded signal to 72 points, scale it, shift it circularly,
fill the padding with smooth (correlated) noise, add white noise, add a random
linear ramp (shear), and resample to 40 points. Where the pattern sits, how
tall it is and the background it floats on all vary, so a model must find a
shape anywhere in the signal: a convolutional network does this much better
than an MLP, which is what makes the task useful for comparing how
synchronization affects different models (the real MNIST-1D reports about 68 %
test accuracy for an MLP and 94 % for a small CNN).

Everything is generated from ``data_seed`` alone; nothing is downloaded.
"""

from __future__ import annotations

import numpy as np

TEMPLATE_LEN = 12
"""Points per class template."""

SIGNAL_LEN = 40
"""Points per generated sample."""

N_CLASSES = 10

_PADDING = (36, 60)
"""Inclusive range of zero padding added around a template before stretching."""

_STRETCHED_LEN = TEMPLATE_LEN + _PADDING[1]
"""Length every padded template is stretched (linearly interpolated) to."""

_SCALE = 0.4
"""Amplitude factor drawn uniformly from ``1 ± _SCALE / 2``."""

_MAX_SHIFT = 48
"""Circular shifts are drawn from ``[0, _MAX_SHIFT)`` points of the stretched signal."""

_SMOOTH_SIGMA = 2.0
"""Width (in points) of the Gaussian kernel that makes the correlated noise smooth."""

_RAW_TEMPLATES = np.array(
    [
        [0, 1, 2, 2.5, 3, 3, 3, 3, 2.5, 2, 1, 0],  # 0: plateau
        [3, 1, 1, 1.4, 1.8, 2.2, 2.6, 3, 3.4, 3.8, 3, 3],  # 1: dip, then a slow climb
        [3, 4, 4.5, 4.5, 4, 3.25, 2.75, 2, 1.5, 1.5, 2, 3],  # 2: high then low (S)
        [0, 2, 3, 2, 0.5, 0, 0.5, 2, 3, 2, 0.5, 0],  # 3: two bumps
        [0, 0, 0, 0.5, 1, 3, 3, 3, 3, 3, 3, 3],  # 4: step up
        [3, 3, 3, 3, 3, 3, 1, 0.5, 0, 0, 0, 0],  # 5: step down
        [0, 0.3, 0.6, 0.9, 1.2, 1.5, 1.8, 2.1, 2.4, 2.7, 3, 3.3],  # 6: ramp
        [0, 1.5, 3, 0, 1.5, 3, 0, 1.5, 3, 0, 1.5, 3],  # 7: sawtooth
        [3, 2, 1, 0, 1, 2, 3, 2, 1, 0, 1, 2],  # 8: zigzag (W)
        [1, 1, 1, 1, 1, 4, 0, 1, 1, 1, 1, 1],  # 9: spike and notch
    ]
)


def templates() -> np.ndarray:
    """The ten class templates ``[10, 12]``, each shifted and scaled to zero mean, unit std."""
    t = _RAW_TEMPLATES - _RAW_TEMPLATES.mean(axis=1, keepdims=True)
    return t / t.std(axis=1, keepdims=True)


def _resample(x: np.ndarray, length: int) -> np.ndarray:
    """Rows of ``x`` linearly interpolated to ``length`` points (ends kept)."""
    old = np.linspace(0.0, 1.0, x.shape[1])
    new = np.linspace(0.0, 1.0, length)
    return np.stack([np.interp(new, old, row) for row in x])


def _smooth(noise: np.ndarray, sigma: float) -> np.ndarray:
    """Rows of ``noise`` convolved with a normalised Gaussian kernel (edges reflected)."""
    radius = int(4 * sigma + 0.5)
    offsets = np.arange(-radius, radius + 1)
    kernel = np.exp(-0.5 * (offsets / sigma) ** 2)
    kernel /= kernel.sum()
    padded = np.pad(noise, ((0, 0), (radius, radius)), mode="reflect")
    return np.stack([np.convolve(row, kernel, mode="valid") for row in padded])


def generate(
    n_samples: int, corr_noise: float, iid_noise: float, shear: float, data_seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """``n_samples`` signals ``[n, 40]`` (float32) and their labels ``[n]`` (int64).

    Classes are balanced (their counts differ by at most one) and shuffled.
    ``corr_noise`` is the standard deviation of the white noise that, smoothed,
    fills the padding; ``iid_noise`` that of the white noise added everywhere;
    ``shear`` the range of the linear ramp's slope (``U[-shear/2, shear/2]``
    over the signal). All randomness comes from ``data_seed``.
    """
    rng = np.random.default_rng(np.random.SeedSequence(data_seed))
    labels = rng.permutation(np.arange(n_samples) % N_CLASSES)
    shapes = templates()[labels]

    stretched = np.empty((n_samples, _STRETCHED_LEN))
    pattern = np.empty((n_samples, _STRETCHED_LEN), dtype=bool)
    pads = rng.integers(_PADDING[0], _PADDING[1] + 1, size=n_samples)
    lefts = (rng.random(n_samples) * (pads + 1)).astype(np.int64)
    for i, (shape, pad, left) in enumerate(zip(shapes, pads, lefts, strict=True)):
        padded = np.zeros(TEMPLATE_LEN + pad)
        padded[left : left + TEMPLATE_LEN] = shape
        inside = np.zeros(TEMPLATE_LEN + pad)
        inside[left : left + TEMPLATE_LEN] = 1.0
        stretched[i] = _resample(padded[None], _STRETCHED_LEN)[0]
        pattern[i] = _resample(inside[None], _STRETCHED_LEN)[0] > 0.5

    x = stretched * (1.0 + _SCALE * (rng.random((n_samples, 1)) - 0.5))
    shifts = rng.integers(0, _MAX_SHIFT, size=n_samples)
    columns = (np.arange(_STRETCHED_LEN) - shifts[:, None]) % _STRETCHED_LEN
    x = np.take_along_axis(x, columns, axis=1)
    pattern = np.take_along_axis(pattern, columns, axis=1)
    background = _smooth(corr_noise * rng.standard_normal(x.shape), _SMOOTH_SIGMA)
    x = np.where(pattern, x, background)
    x = x + iid_noise * rng.standard_normal(x.shape)
    slopes = shear * (rng.random((n_samples, 1)) - 0.5)
    x = x - slopes * np.linspace(-0.5, 0.5, _STRETCHED_LEN)
    x = _resample(x, SIGNAL_LEN)
    return x.astype(np.float32), labels.astype(np.int64)
