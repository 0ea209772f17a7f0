"""What a run had, from its trace, when rank 0 died before writing it.

Rank 0 writes a run's entry of ``summary.json`` when the run ends; the
trace it flushes as it goes (at every evaluation and checkpoint) is all
that is left when it is killed. :func:`summary_from_trace` rebuilds the
entry from the trace — the steps, the updates, the dropped work, the
time, the last evaluation's metrics and the curve of the run's first
metric — marked as interrupted (``stop_reason``) and saying how it was
made (``notes``); :func:`salvage` appends one for each run whose trace
``summary.json`` does not name yet. The launcher calls it (issue 30, item
1), so a killed server leaves its results readable by ``hetsync report``.
Only stdlib and the trace reader: the launcher imports no torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hetsync.errors import BadInput
from hetsync.outdir import write_json_atomic
from hetsync.summary import RunSummary, read_summary
from hetsync.trace import TraceError, iter_records, metrics

INTERRUPTED = "interrupted: the server (rank 0) died"
NOTE = "written by the launcher from the trace: rank 0 died before it wrote this run's summary"


def summary_from_trace(path: Path, reason: str = INTERRUPTED) -> RunSummary | None:
    """The summary entry of the run whose trace is ``path`` (None: no
    ``start`` record, nothing to say). Counts as the ledger does: a step per
    ``compute`` record, an update per ``apply``, dropped steps from
    ``drop`` records; the time is the last moment the trace reached."""
    start: dict[str, Any] | None = None
    steps = updates = dropped = 0
    end_s = 0.0
    curve: list[list[float | None]] = []
    last: dict[str, float | None] = {}
    left: list[dict[str, Any]] = []
    for rec in iter_records(path):
        r: dict[str, Any] = dict(rec)
        kind = r["ev"]
        end_s = max(end_s, float(r.get("end", r["t"])))
        if kind == "start":
            start = r
        elif kind == "compute":
            steps += 1
        elif kind == "apply":
            updates += 1
        elif kind == "drop":
            dropped += int(r["steps"])
        elif kind == "eval":
            last = metrics(r)
            first = next(iter(last.values()), None)
            curve.append([float(r["t"]), first])
        elif kind == "left":
            left.append({"worker": r["w"], "t": r["t"], "reason": r["reason"]})
    if start is None:
        return None
    summary: RunSummary = {
        "label": start["policy"],
        "scenario": start["scenario"],
        "driver": start.get("driver", "sim"),
        "seed": start["seed"],
        "workers": start["workers"],
        "wall_time_s": end_s,
        "steps": steps,
        "updates": updates,
        "dropped_steps": dropped,
        "final_metrics": last or None,
        "metric_curve": curve,
        "trace": path.name,
        "stop_reason": reason,
        "workers_left": left,
        "notes": [NOTE],
    }
    return summary


def salvage(out_dir: Path, reason: str = INTERRUPTED) -> list[str]:
    """Append to ``out_dir/summary.json`` an entry rebuilt from each trace
    there that it does not name yet; returns their labels."""
    summary_path = out_dir / "summary.json"
    runs: list[dict[str, Any]] = []
    if summary_path.is_file():
        try:
            runs = [dict(r) for r in read_summary(summary_path)]
        except (BadInput, OSError):
            return []  # not a summary of hetsync's: not ours to rewrite
    named = {r.get("trace") for r in runs}
    added = []
    for trace in sorted(out_dir.glob("trace-*.jsonl")):
        if trace.name in named:
            continue
        try:
            entry = summary_from_trace(trace, reason)
        except (TraceError, OSError, KeyError, TypeError, ValueError):
            continue  # (not a trace of hetsync's)
        if entry is not None:
            runs.append(dict(entry))
            added.append(entry["label"])
    if added:
        write_json_atomic(summary_path, runs)
    return added
