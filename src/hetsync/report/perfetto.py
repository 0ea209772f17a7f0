"""The runs' event traces as one Chrome trace-event file that ui.perfetto.dev
and chrome://tracing open: ``trace.json``.

A PNG timeline shows the first dozen steps; this file holds every record, so
a run can be explored to its end. It reads what the drivers wrote (the
summary records and the ``trace-<label>.jsonl`` files, see
``docs/formats.md``); nothing is simulated.

Layout, in the JSON Object Format of the Trace Event Format
(https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU):

* one *process* per run (``pid`` = its position in ``summary.json`` + 1),
  named after its label;
* thread ``server`` (``tid`` 0, which Perfetto reads as the ``pid``, making
  it the process's main thread; ``exchanges`` peer to peer): an instant
  event per global model update (``apply``; a finished exchange peer to
  peer), per ``drop``, per worker that ``left`` or ``joined``, per ``resume``
  and per policy ``note`` (auto's switch: ``policy bsp → lb-bsp``, the
  note's detail as its args), and a counter track per evaluated metric;
* per worker ``w``: thread ``w<w>`` holds its ``compute`` steps (args: step,
  batch, base version) and its ``wait`` gaps (time neither computing nor
  communicating, as the summary's ``wait_share`` counts it), back to back;
  a gap after its last recorded step is ``wait or unfinished``, since
  a trace records an interval when it ends and a step still going when the
  run stopped is not in it;
  thread ``w<w> net`` holds its transfers: ``push``, ``pull``, ``join`` (a
  joiner's download of the model, the simulator's membership), and peer to
  peer ``send →k``, ``receive ←k`` and ``allreduce``. Transfers that overlap
  (a multicast to several receivers, WBSP-overlap's push beside a pull) go
  to further lanes ``w<w> net 2``, ``net 3``, ..., so the events of any one
  thread never overlap and every viewer draws them as they are.

Complete events (``"ph": "X"``) carry ``ts`` and ``dur`` in microseconds of
the run's clock (virtual in the simulator), rounded to the nanosecond, so
the nanosecond integers Perfetto's importer makes of them keep back-to-back
events touching, never overlapping. Only the first ``max_workers`` workers
of each run are exported; the process name says when a run had more.

What the file says about itself (the clock, the scenario) is under the
top-level ``metadata`` key, which both viewers show (Perfetto as
``json_metadata.*`` in its trace info; ``otherData`` it would drop). There
is no ``displayTimeUnit``: Perfetto ignores it and flags it in its import
stats, and chrome://tracing's default is the same.
"""

from __future__ import annotations

import heapq
import json
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from hetsync.trace import iter_records, metrics

__all__ = ["MAX_WORKERS", "chrome_events", "lanes", "wait_gaps", "write_chrome_trace"]

MAX_WORKERS = 64
"""Workers exported per run by default (a 1024-worker run would make a file no viewer opens)."""

_US = 1e6
_SERVER_TID = 0
_TID_STRIDE = 1000  # worker w: compute and wait on tid (w + 1) * 1000, transfer lanes on the tids after it
_TAIL = "wait or unfinished"
_TAIL_WHY = "after the worker's last recorded step: the trace records a step when it ends"
_EXTRA = _TID_STRIDE // 2  # ... and overlapping compute steps, should a trace have any, from + 500 on


def _us(seconds: float) -> float:
    return round(seconds * _US, 3)


def lanes(intervals: Iterable[tuple[float, float]]) -> list[int]:
    """Give each ``(start, end)`` interval a lane so that intervals of one
    lane never overlap (touching is fine); returns the lane of each, in
    input order. Greedy by start time: an interval takes the lowest lane
    free at its start, which uses as few lanes as the most intervals open at
    once."""
    items = sorted(enumerate(intervals), key=lambda it: (it[1][0], it[1][1], it[0]))
    out = [0] * len(items)
    busy: list[tuple[float, int]] = []  # heap of (end, lane) of lanes in use
    free: list[int] = []  # heap of free lanes
    used = 0
    for index, (start, end) in items:
        while busy and busy[0][0] <= start:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            lane = heapq.heappop(free)
        else:
            lane, used = used, used + 1
        out[index] = lane
        heapq.heappush(busy, (end, lane))
    return out


def wait_gaps(busy: Iterable[tuple[float, float]], start: float, end: float) -> list[tuple[float, float]]:
    """The parts of ``[start, end]`` that no ``(start, end)`` interval of
    ``busy`` covers, in order."""
    gaps = []
    cursor = start
    for s, e in sorted(busy):
        if s > cursor:
            gaps.append((cursor, min(s, end)))
        cursor = max(cursor, e)
        if cursor >= end:
            break
    if cursor < end:
        gaps.append((cursor, end))
    return [(s, e) for s, e in gaps if e > s]


@dataclass
class _Run:
    """What one trace holds, for the workers exported."""

    workers: int | None = None
    end_s: float = 0.0
    computes: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    transfers: dict[int, list[tuple[float, float, str, dict[str, Any]]]] = field(default_factory=dict)
    instants: list[dict[str, Any]] = field(default_factory=list)
    counters: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    # (sender, start) -> last arrival of a multicast; sender -1: an all-reduce
    multicasts: dict[tuple[int, float], float] = field(default_factory=dict)
    p2p: bool = False

    def transfer(self, w: int, t: float, end: float, name: str, args: dict[str, Any]) -> None:
        self.transfers.setdefault(w, []).append((t, end, name, args))


def _read(trace: Path, max_workers: int) -> _Run:
    run = _Run()
    for rec in iter_records(trace):
        kind, t = rec.get("ev"), float(rec.get("t", 0.0))
        run.end_s = max(run.end_s, t, float(rec.get("end", t)))
        if kind == "start":
            run.workers = rec.get("workers")
        elif kind == "end":
            run.end_s = float(rec.get("wall_time_s", t))
        elif kind == "compute":
            if rec["w"] < max_workers:
                run.computes.setdefault(rec["w"], []).append(rec)
        elif kind in ("push", "pull"):
            if rec["w"] < max_workers:
                keys = ("id", "kind", "steps", "nbytes") if kind == "push" else ("version", "nbytes")
                run.transfer(rec["w"], t, rec["end"], kind, {k: rec[k] for k in keys if k in rec})
        elif kind == "send":
            run.p2p = True
            key = (rec["w"], t)
            run.multicasts[key] = max(run.multicasts.get(key, rec["end"]), rec["end"])
            if rec["w"] < max_workers:
                run.transfer(rec["w"], t, rec["end"], f"send →{rec['to']}", {"nbytes": rec.get("nbytes")})
            if rec["to"] < max_workers:
                run.transfer(rec["to"], t, rec["end"], f"receive ←{rec['w']}", {"nbytes": rec.get("nbytes")})
        elif kind == "allreduce":
            run.p2p = True
            if rec["w"] < max_workers:
                args = {"nbytes": rec.get("nbytes"), "members": rec.get("workers")}
                run.transfer(rec["w"], t, rec["end"], "allreduce", args)
            key = (-1, t)  # one all-reduce: its members start together
            run.multicasts[key] = max(run.multicasts.get(key, rec["end"]), rec["end"])
        elif kind == "apply":
            staleness = rec.get("staleness") or [0]
            args = {
                "version": rec.get("version"),
                "contributions": len(rec.get("ids") or []),
                "max staleness": max(staleness),
            }
            run.instants.append({"t": t, "name": f"update v{rec.get('version')}", "args": args})
        elif kind == "drop":
            args = {"reason": rec.get("reason"), "steps": rec.get("steps"), "w": rec.get("w")}
            run.instants.append({"t": t, "name": f"drop ({rec.get('reason')})", "args": args})
        elif kind == "joined":  # (the simulator's membership) its download, and an instant when it came
            if rec["w"] < max_workers:
                run.transfer(
                    rec["w"], t, rec["end"], "join", {"version": rec.get("version"), "nbytes": rec.get("nbytes")}
                )
            run.instants.append(
                {"t": t, "name": f"worker {rec.get('w')} joined", "args": {"version": rec.get("version")}}
            )
        elif kind in ("left", "resume"):
            args = {k: v for k, v in rec.items() if k not in ("t", "ev")}
            run.instants.append(
                {"t": t, "name": f"worker {rec.get('w')} left" if kind == "left" else "resume", "args": args}
            )
        elif kind == "note":  # the policy's (auto's switch: "policy bsp → lb-bsp", its gain and cause in args)
            detail = rec.get("detail") if isinstance(rec.get("detail"), dict) else {}
            switch = rec.get("what") == "switch" and "from" in detail and "to" in detail
            name = f"policy {detail['from']} → {detail['to']}" if switch else f"note: {rec.get('what')}"
            run.instants.append({"t": t, "name": name, "args": detail})
        elif kind == "eval":
            values = {k: float(v) for k, v in metrics(rec).items() if isinstance(v, int | float) and math.isfinite(v)}
            if values:
                run.counters.append((t, values))
    run.instants += [
        {"t": end, "name": "exchange done", "args": {"sender": sender} if sender >= 0 else {"all-reduce": True}}
        for (sender, _), end in run.multicasts.items()
    ]
    return run


def _meta(pid: int, tid: int | None, name: str, value: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "name": name,
        "ph": "M",
        "pid": pid,
        "args": {"name" if name.endswith("name") else "sort_index": value},
    }
    if tid is not None:
        event["tid"] = tid
    return event


def _complete(
    pid: int, tid: int, name: str, start: float, end: float, cat: str, args: dict[str, Any] | None = None
) -> dict[str, Any]:
    event: dict[str, Any] = {
        "name": name,
        "cat": cat,
        "ph": "X",
        "pid": pid,
        "tid": tid,
        "ts": _us(start),
        "dur": max(0.0, _us(end) - _us(start)),
    }
    if args:
        event["args"] = args
    return event


def chrome_events(
    trace_path: str | Path, *, pid: int, label: str, max_workers: int = MAX_WORKERS
) -> Iterator[dict[str, Any]]:
    """The trace-event dicts of one run: metadata, then the server thread,
    then each worker's compute/wait thread and transfer lanes."""
    run = _read(Path(trace_path), max_workers)
    shown = sorted(set(run.computes) | set(run.transfers))
    name = label
    if run.workers and run.workers > max_workers:
        name = f"{label} (workers 0–{max_workers - 1} of {run.workers})"
    yield _meta(pid, None, "process_name", name)
    yield _meta(pid, None, "process_sort_index", pid)
    yield _meta(pid, _SERVER_TID, "thread_name", "exchanges" if run.p2p else "server")
    yield _meta(pid, _SERVER_TID, "thread_sort_index", _SERVER_TID)
    for instant in sorted(run.instants, key=lambda i: i["t"]):
        yield {
            "name": instant["name"],
            "cat": "update",
            "ph": "i",
            "s": "t",
            "pid": pid,
            "tid": _SERVER_TID,
            "ts": _us(instant["t"]),
            "args": instant["args"],
        }
    # Perfetto names a counter track "<name> <arg key>" (Chrome's viewer, one
    # track per name with a series per key): "eval accuracy", "eval loss".
    for t, values in run.counters:
        for metric, value in values.items():
            yield {
                "name": "eval",
                "cat": "eval",
                "ph": "C",
                "pid": pid,
                "tid": _SERVER_TID,
                "ts": _us(t),
                "args": {metric: value},
            }
    for w in shown:
        tid = (w + 1) * _TID_STRIDE
        computes = run.computes.get(w, [])
        transfers = run.transfers.get(w, [])
        yield _meta(pid, tid, "thread_name", f"w{w}")
        yield _meta(pid, tid, "thread_sort_index", tid)
        busy = [(float(c["t"]), float(c["end"])) for c in computes] + [(s, e) for s, e, _, _ in transfers]
        steps = [(float(c["t"]), float(c["end"]), c) for c in computes]
        # a worker computes one step at a time: further lanes only if a trace says otherwise
        compute_lanes = lanes((s, e) for s, e, _ in steps)
        for lane in sorted(set(compute_lanes) - {0}):
            yield _meta(pid, tid + _EXTRA + lane, "thread_name", f"w{w} compute {lane + 1}")
            yield _meta(pid, tid + _EXTRA + lane, "thread_sort_index", tid + _EXTRA + lane)
        for (start, end, c), lane in zip(steps, compute_lanes, strict=True):
            args = {k: c[k] for k in ("step", "batch", "base") if k in c}
            yield _complete(pid, tid + (_EXTRA + lane if lane else 0), "compute", start, end, "compute", args)
        last = max((e for _, e, _ in steps), default=0.0)
        for start, end in wait_gaps(busy, 0.0, run.end_s):
            if start >= last:  # the trace records an interval when it ends: a step still going is not in it
                yield _complete(pid, tid, _TAIL, start, end, "wait", {"why": _TAIL_WHY})
            else:
                yield _complete(pid, tid, "wait", start, end, "wait")
        transfer_lanes = lanes((s, e) for s, e, _, _ in transfers)
        for lane in sorted(set(transfer_lanes)):
            yield _meta(pid, tid + 1 + lane, "thread_name", f"w{w} net" + (f" {lane + 1}" if lane else ""))
            yield _meta(pid, tid + 1 + lane, "thread_sort_index", tid + 1 + lane)
        for (start, end, name_, args), lane in zip(transfers, transfer_lanes, strict=True):
            cat = name_.split()[0]
            yield _complete(pid, tid + 1 + lane, name_, start, end, cat, args)


def _write_events(out: IO[str], events: Iterable[dict[str, Any]], first: bool) -> bool:
    for event in events:
        out.write(("" if first else ",\n") + json.dumps(event, separators=(",", ":"), ensure_ascii=False))
        first = False
    return first


def write_chrome_trace(
    runs: Sequence[dict[str, Any]], out_dir: str | Path, path: str | Path, *, max_workers: int = MAX_WORKERS
) -> Path | None:
    """Write ``trace.json`` for the runs whose ``trace`` (relative to
    ``out_dir``) exists; returns its path, or None when no run has a trace.
    Events are streamed to a temporary file renamed at the end, so a reader
    never sees half a file."""
    out, target = Path(out_dir), Path(path)
    traced = [(i, r) for i, r in enumerate(runs) if r.get("trace") and (out / r["trace"]).is_file()]
    if not traced:
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    virtual = all(r.get("driver") == "sim" for _, r in traced)
    metadata = {
        "generator": "hetsync",
        "clock": "virtual seconds of the simulator" if virtual else "seconds since the run started",
        "scenario": ", ".join(dict.fromkeys(str(r.get("scenario")) for _, r in traced)),
        "max_workers": max_workers,
    }
    with tmp.open("w", encoding="utf-8") as f:
        f.write('{"metadata":' + json.dumps(metadata, ensure_ascii=False) + ',"traceEvents":[\n')
        first = True
        for i, run in traced:
            events = chrome_events(
                out / run["trace"], pid=i + 1, label=str(run.get("label", "?")), max_workers=max_workers
            )
            first = _write_events(f, events, first)
        f.write("\n]}\n")
    tmp.replace(target)
    return target
