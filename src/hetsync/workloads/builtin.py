"""Built-in workloads: small classification problems that need no download.

Data come from scikit-learn (the bundled 8x8 digits, or a generated problem),
with a stratified 20 % test split fixed by ``data_seed``; the run seed only
affects initialisation and sharding (:meth:`Workload.init_params`,
:meth:`Workload.make_shards`). Loaded splits are cached per process, so
building a workload many times costs one load; treat their tensors as
read-only.

Each builder validates its arguments and raises
:class:`hetsync.errors.BadInput` naming the bad one. The first line of each
builder's docstring is its summary in the registry.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Callable

import numpy as np
import torch
from sklearn.datasets import load_digits, make_classification
from sklearn.model_selection import train_test_split
from torch import Tensor, nn

from hetsync.errors import BadInput
from hetsync.workloads.base import Workload, _check_int

Split = tuple[Tensor, Tensor, Tensor, Tensor]
"""``(train_x, train_y, test_x, test_y)``."""

_TEST_FRACTION = 0.2


def _split(x: np.ndarray, y: np.ndarray, data_seed: int) -> Split:
    """Stratified train/test split as float32 inputs and int64 labels."""
    train_x, test_x, train_y, test_y = train_test_split(
        x, y, test_size=_TEST_FRACTION, stratify=y, random_state=data_seed
    )
    return (
        torch.from_numpy(np.ascontiguousarray(train_x, dtype=np.float32)),
        torch.from_numpy(np.ascontiguousarray(train_y, dtype=np.int64)),
        torch.from_numpy(np.ascontiguousarray(test_x, dtype=np.float32)),
        torch.from_numpy(np.ascontiguousarray(test_y, dtype=np.int64)),
    )


@functools.lru_cache(maxsize=8)
def _digits(data_seed: int) -> Split:
    """scikit-learn's 8x8 digits (1797 samples), pixels scaled to [0, 1], flat [n, 64]."""
    digits = load_digits()
    return _split(digits.data / 16.0, digits.target, data_seed)


@functools.lru_cache(maxsize=8)
def _classification(
    n_samples: int, n_features: int, n_informative: int, n_classes: int, class_sep: float, data_seed: int
) -> Split:
    """``make_classification`` data, standardised with the training split's statistics."""
    x, y = make_classification(
        n_samples=n_samples,
        n_features=n_features,
        n_informative=n_informative,
        n_redundant=0,
        n_classes=n_classes,
        flip_y=0.0,
        class_sep=class_sep,
        random_state=data_seed,
    )
    train_x, train_y, test_x, test_y = _split(x, y, data_seed)
    mean = train_x.mean(dim=0)
    std = train_x.std(dim=0).clamp_min(1e-12)
    return (train_x - mean) / std, train_y, (test_x - mean) / std, test_y


def _model(build: Callable[[], nn.Module]) -> nn.Module:
    """Build a template module without touching the global torch RNG."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return build()


def _mlp(n_in: int, hidden: int, n_out: int) -> nn.Module:
    return _model(lambda: nn.Sequential(nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, n_out)))


def digits_logreg(data_seed: int = 0) -> Workload:
    """8x8 digits, multinomial logistic regression (linear 64->10)."""
    data_seed = _check_int("data_seed", data_seed, 0)
    return Workload(
        "digits-logreg",
        _model(lambda: nn.Linear(64, 10)),
        *_digits(data_seed),
        description="sklearn digits (8x8, 10 classes, pixels/16), linear 64->10, cross-entropy",
    )


def digits_mlp(hidden: int = 64, data_seed: int = 0) -> Workload:
    """8x8 digits, MLP 64->hidden->10 with ReLU."""
    hidden = _check_int("hidden", hidden, 1)
    data_seed = _check_int("data_seed", data_seed, 0)
    return Workload(
        "digits-mlp",
        _mlp(64, hidden, 10),
        *_digits(data_seed),
        description=f"sklearn digits (8x8, 10 classes, pixels/16), MLP 64->{hidden}->10 ReLU, cross-entropy",
    )


def digits_cnn(data_seed: int = 0) -> Workload:
    """8x8 digits as [1, 8, 8] images, small CNN (two 3x3 convs, max-pool, linear)."""
    data_seed = _check_int("data_seed", data_seed, 0)
    train_x, train_y, test_x, test_y = _digits(data_seed)
    model = _model(
        lambda: nn.Sequential(
            nn.Conv2d(1, 8, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(16 * 4 * 4, 10),
        )
    )
    return Workload(
        "digits-cnn",
        model,
        train_x.view(-1, 1, 8, 8),
        train_y,
        test_x.view(-1, 1, 8, 8),
        test_y,
        description=(
            "sklearn digits as [1, 8, 8] images (pixels/16); Conv2d(1,8,3,pad=1)-ReLU-MaxPool2d(2) "
            "-> Conv2d(8,16,3,pad=1)-ReLU -> flatten(16*4*4) -> Linear(256,10), cross-entropy"
        ),
    )


def synthetic(
    n_samples: int = 20000,
    n_features: int = 32,
    n_informative: int = 16,
    n_classes: int = 4,
    hidden: int = 64,
    class_sep: float = 1.0,
    data_seed: int = 0,
) -> Workload:
    """Generated classification problem (sklearn make_classification), MLP."""
    n_classes = _check_int("n_classes", n_classes, 2)
    n_samples = _check_int("n_samples", n_samples, 5 * n_classes)
    n_features = _check_int("n_features", n_features, 1)
    n_informative = _check_int("n_informative", n_informative, 1)
    if n_informative > n_features:
        raise BadInput(f"n_informative ({n_informative}) must be <= n_features ({n_features})")
    if 2 * n_classes > 2**n_informative:
        raise BadInput(
            f"n_informative={n_informative} is too small for n_classes={n_classes}: "
            "make_classification needs 2 * n_classes <= 2 ** n_informative"
        )
    hidden = _check_int("hidden", hidden, 1)
    if isinstance(class_sep, bool) or not isinstance(class_sep, numbers.Real):
        raise BadInput(f"class_sep must be a positive number, got {class_sep!r}")
    class_sep = float(class_sep)
    if not (math.isfinite(class_sep) and class_sep > 0):
        raise BadInput(f"class_sep must be a positive number, got {class_sep}")
    data_seed = _check_int("data_seed", data_seed, 0)
    split = _classification(n_samples, n_features, n_informative, n_classes, class_sep, data_seed)
    return Workload(
        "synthetic",
        _mlp(n_features, hidden, n_classes),
        *split,
        description=(
            f"make_classification: {n_samples} samples, {n_features} features "
            f"({n_informative} informative, rest noise), {n_classes} classes, "
            f"class_sep={class_sep}, standardised; MLP {n_features}->{hidden}->{n_classes} ReLU, "
            "cross-entropy"
        ),
    )
