"""A run's output folder: what hetsync writes there, and writes that last.

Every command that writes results (``compare``, ``simulate``, ``run``)
starts from a clean, consistent folder: :func:`start_clean` removes what an
earlier hetsync run left there (its summary, traces, plots, logs and status
files, recognised by name) and nothing else, so a run that dies before its
first policy finishes cannot leave an older ``summary.json`` beside new
traces. ``--resume`` keeps the folder as it is.

:func:`write_json_atomic` replaces a file so that a crash or a power loss
leaves either the old or the new content, never a torn one. A run that was
interrupted keeps its partial trace under :func:`partial_name`, which no
report reads as a finished run.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from pathlib import Path
from typing import Any

SUMMARY = "summary.json"
FILES = (
    SUMMARY,
    SUMMARY + ".tmp",
    "progress.json",
    "exit-status.json",
    "ddp.json",
    "report.md",
    "report.html",
    "trace.json",
    "trace.json.tmp",
    "advice.json",
    "advice.json.tmp",
    "advice.html",
    "advice-tta.png",
    "ddp-model.pt",
)
"""Files of a run folder that hetsync writes, by exact name."""
PATTERNS = (
    "trace-*.jsonl",
    "trace-*.jsonl.partial",
    "timeline-*.png",
    "shares.png",
    "accuracy.png",
    "metrics.png",
    "model-*.pt",
)
"""Files hetsync writes, by pattern (the metric plot of another metric is
found through the old summary's target metrics)."""
LOGS = "logs"
PARTIAL_SUFFIX = ".partial"


def safe_name(label: str) -> str:
    """Return a file-name fragment for a run label.

    The rule: lowercase the label; keep ASCII letters, digits, ``.`` and
    ``_``; replace every run of other characters (``-`` included) by a single
    ``-``; strip ``-`` from both ends. A label with nothing left becomes
    ``run``. Examples: ``ssp(s=3)`` -> ``ssp-s-3``,
    ``Local SGD (H=4, avg)`` -> ``local-sgd-h-4-avg``, ``bsp`` -> ``bsp``.
    """
    name = re.sub(r"[^a-z0-9._]+", "-", label.lower()).strip("-")
    return name or "run"


def partial_name(trace: Path) -> Path:
    """Where an interrupted run's trace is kept: ``trace-x.jsonl.partial``."""
    return trace.with_name(trace.name + PARTIAL_SUFFIX)


def _previous_metric_plots(out: Path) -> list[Path]:
    try:
        runs = json.loads((out / SUMMARY).read_text())
        metrics = {str(r.get("target_metric")) for r in runs if isinstance(r, dict) and r.get("target_metric")}
    except (OSError, ValueError, TypeError, AttributeError):
        return []
    return [out / f"{safe_name(m)}.png" for m in sorted(metrics)]


def previous_results(out: Path) -> list[Path]:
    """What an earlier hetsync run left in ``out`` (empty if nothing)."""
    if not out.is_dir():
        return []
    found = [out / name for name in FILES if (out / name).is_file()]
    found += _previous_metric_plots(out)
    for pattern in PATTERNS:
        found += sorted(out.glob(pattern))
    logs = out / LOGS
    if logs.is_dir():
        found += sorted(logs.glob("*.log"))
    return [p for p in dict.fromkeys(found) if p.is_file()]


def start_clean(out: Path, *, set_aside_traces: bool = False) -> list[Path]:
    """Remove what an earlier hetsync run left in ``out`` (only files
    hetsync writes; the user's own files stay) and create the folder.
    ``set_aside_traces``: keep each ``trace-*.jsonl`` as its ``.partial``
    instead (a run that resumes from a checkpoint takes it back and goes on;
    ``hetsync launch`` cannot know whether the script will). Returns the
    files removed or set aside."""
    removed = previous_results(out)
    kept = [p for p in removed if set_aside_traces and p.parent == out and fnmatch.fnmatch(p.name, "trace-*.jsonl")]
    for path in removed:
        if path not in kept:
            path.unlink(missing_ok=True)  # (older .partial traces first: the ones set aside replace them)
    for path in kept:
        os.replace(path, partial_name(path))
    logs = out / LOGS
    if logs.is_dir() and not any(logs.iterdir()):
        logs.rmdir()
    out.mkdir(parents=True, exist_ok=True)
    return removed


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` through a synced temporary file and
    an atomic rename: the old or the new content survives a crash, never a
    torn file."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as fh:
        fh.write(json.dumps(data, indent=1, allow_nan=False) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)
