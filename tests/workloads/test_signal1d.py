"""Tests for hetsync.workloads.signal1d: the MNIST-1D-like signal generator."""

from __future__ import annotations

import numpy as np

from hetsync.workloads import signal1d


def test_templates_are_distinct_and_normalised() -> None:
    t = signal1d.templates()
    assert t.shape == (signal1d.N_CLASSES, signal1d.TEMPLATE_LEN)
    assert np.allclose(t.mean(axis=1), 0) and np.allclose(t.std(axis=1), 1)
    distances = np.linalg.norm(t[:, None] - t[None], axis=2)
    assert distances[~np.eye(len(t), dtype=bool)].min() > 0.5


def test_generate_shapes_classes_and_determinism() -> None:
    x, y = signal1d.generate(503, corr_noise=0.5, iid_noise=0.1, shear=1.0, data_seed=3)
    assert x.shape == (503, signal1d.SIGNAL_LEN) and x.dtype == np.float32
    assert y.shape == (503,) and y.dtype == np.int64
    counts = np.bincount(y, minlength=signal1d.N_CLASSES)
    assert len(counts) == signal1d.N_CLASSES and counts.max() - counts.min() <= 1
    again = signal1d.generate(503, corr_noise=0.5, iid_noise=0.1, shear=1.0, data_seed=3)
    assert np.array_equal(x, again[0]) and np.array_equal(y, again[1])
    other = signal1d.generate(503, corr_noise=0.5, iid_noise=0.1, shear=1.0, data_seed=4)
    assert not np.array_equal(x, other[0])
    assert np.isfinite(x).all()


def test_noise_scales_shape_the_background() -> None:
    clean, labels = signal1d.generate(400, corr_noise=0.0, iid_noise=0.0, shear=0.0, data_seed=0)
    noisy, same_labels = signal1d.generate(400, corr_noise=0.5, iid_noise=0.1, shear=1.0, data_seed=0)
    assert np.array_equal(labels, same_labels)
    # without noise the padding is exactly flat; the pattern covers 12 of 48-72 stretched points
    assert (clean == 0).mean() > 0.3 and (noisy == 0).mean() < 0.01
    assert noisy.std() > clean.std()


def test_classes_differ_on_average() -> None:
    """Without noise or shifts one class is still a family of signals; its mean power spectrum
    (shift-invariant) differs between classes more than between halves of one class."""
    x, y = signal1d.generate(2000, corr_noise=0.0, iid_noise=0.0, shear=0.0, data_seed=1)
    power = np.abs(np.fft.rfft(x, axis=1)) ** 2
    means = np.stack([power[y == c].mean(axis=0) for c in range(signal1d.N_CLASSES)])
    halves = [power[(y == c)][::2].mean(axis=0) - power[(y == c)][1::2].mean(axis=0) for c in range(10)]
    between = min(np.linalg.norm(means[a] - means[b]) for a in range(10) for b in range(a))
    within = max(np.linalg.norm(h) for h in halves)
    assert between > within
