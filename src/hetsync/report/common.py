"""What every part of a report reads from a run's summary record, and how it writes it.

The run's target metric, its direction, its target, final value and curve
(summaries from before metrics had accuracy only: ``target_accuracy``,
``final_accuracy``, ``accuracy_curve``), the cells' number formats, and
:func:`metric_plot_name`. The table (:mod:`.table`), the plots
(:mod:`.plots`) and the pages (:mod:`.pages`) all read runs through these.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from hetsync.outdir import safe_name

_MISSING = "—"


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def _fmt_seconds(value: Any) -> str:
    if not _finite(value):
        return _MISSING
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _fmt_share(value: Any) -> str:
    return f"{100 * value:.1f}%" if _finite(value) else _MISSING


def _fmt_rate(value: Any) -> str:
    if not _finite(value):
        return _MISSING
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.1f}"


def _fmt_int(value: Any) -> str:
    return f"{int(value):,}" if _finite(value) else _MISSING


def _fmt_accuracy(value: Any) -> str:
    return f"{value:.3f}" if _finite(value) else _MISSING


# ---------------------------------------------------------------------------
# the target metric of a run (summaries from before metrics had only accuracy)

_SHORT_METRIC = {"accuracy": "acc", "perplexity": "ppl"}
_MIN_METRICS = frozenset({"loss", "perplexity"})  # the direction when an old record does not say


def _metric(run: dict[str, Any]) -> str:
    return str(run.get("target_metric") or "accuracy")


def _target_value(run: dict[str, Any]) -> Any:
    return run["target_value"] if "target_value" in run else run.get("target_accuracy")


def _direction(run: dict[str, Any]) -> str:
    direction = run.get("target_direction")
    if direction in ("max", "min"):
        return str(direction)
    return "min" if _metric(run) in _MIN_METRICS else "max"


def _final(run: dict[str, Any]) -> Any:
    return run["final_metric"] if "final_metric" in run else run.get("final_accuracy")


def _curve(run: dict[str, Any]) -> list[tuple[float, float]]:
    """The run's (time, target metric) points; a diverged model's null values are left out."""
    points = run.get("metric_curve") if "metric_curve" in run else run.get("accuracy_curve")
    return [(float(t), float(v)) for t, v in points or [] if v is not None]


def _metrics(runs: Sequence[dict[str, Any]]) -> list[str]:
    """The runs' target metrics, each once, in order."""
    return list(dict.fromkeys(_metric(r) for r in runs))


def _fmt_metric(metric: str, value: Any) -> str:
    if metric == "accuracy":
        return _fmt_accuracy(value)
    return f"{value:.4g}" if _finite(value) else _MISSING


def _targets_text(runs: Sequence[dict[str, Any]]) -> str:
    """``accuracy 0.93``, ``perplexity ≤ 40``: the runs' targets (≥ is implied
    for a metric to maximize), each metric once with its distinct values."""
    groups: dict[tuple[str, str], list[str]] = {}
    for r in runs:
        value = _target_value(r)
        if value is not None:
            values = groups.setdefault((_metric(r), _direction(r)), [])
            if str(value) not in values:
                values.append(str(value))
    if not groups:
        return "?"
    return "; ".join(
        f"{metric} {'≤ ' if direction == 'min' else ''}{', '.join(values)}"
        for (metric, direction), values in groups.items()
    )


def _final_header(runs: Sequence[dict[str, Any]]) -> str:
    metrics = _metrics(runs)
    if len(metrics) != 1:
        return "final"
    return f"final {_SHORT_METRIC.get(metrics[0], metrics[0])}"


def _final_cell(runs: Sequence[dict[str, Any]], run: dict[str, Any]) -> str:
    if _final(run) is None and run.get("diverged_at_s") is not None:
        return "diverged"
    cell = _fmt_metric(_metric(run), _final(run))
    if len(_metrics(runs)) > 1 and cell != _MISSING:  # mixed metrics: each value says which
        return f"{_SHORT_METRIC.get(_metric(run), _metric(run))} {cell}"
    return cell


def metric_plot_name(runs: Sequence[dict[str, Any]]) -> str:
    """The stem of the metric plot's file: ``accuracy`` for accuracy targets,
    else the target metric (as :func:`safe_name` writes it); ``metrics`` for
    runs with different target metrics."""
    metrics = _metrics(runs) or ["accuracy"]
    return safe_name(metrics[0]) if len(metrics) == 1 else "metrics"


def _distinct(runs: Sequence[dict[str, Any]], key: str) -> str:
    values = list(dict.fromkeys(str(r.get(key)) for r in runs if r.get(key) is not None))
    return ", ".join(values) if values else "?"
