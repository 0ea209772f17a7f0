"""The run summary, ``summary.json``, the same for every driver (docs/formats.md).

Both drivers (the simulator and the runtime) write a JSON list with one
object per run; this module types it and is the one way to read it.

* :class:`RunSummary` is one run's record: a TypedDict, so a record stays
  the plain dict the drivers wrote (as trace.py's records do). Readers index
  it (``run["label"]``), ``.get`` what an older or other driver's summary
  may lack, add their own keys (a bench's figures) and hand it to code that
  takes ``dict[str, Any]`` (:func:`as_dicts` says so to the type checker);
  a dataclass would have changed every one of them.
* :func:`policy_phases` and :func:`policy_in_force` read a run's switch
  notes (``policy_notes``, or the trace's ``note`` records): which policy
  was in force when (``auto``'s phases).
* :func:`read_summary` reads a file and checks it: missing, not JSON, not a
  list, a record not an object or a key of the wrong type is
  :class:`~hetsync.errors.BadInput`, one line naming the file, the run
  (number and label) and the key. :func:`check_summary` checks what is
  already parsed; :func:`finished_runs` is the look that never raises
  (the runs that pass, none when the file is missing or unreadable).

What the check holds a record to is what ``hetsync report`` has held it to
since issue 30 (docs/formats.md, "report.html"), now for every key of the
table (``workers_left`` entries with their ``reason`` too): ``label``, the run's name,
is required (every reader indexes it); any other key may be missing (a
summary from before a key existed, or a driver that does not write it:
``runtime only``, ``p2p``) or null (the table's "``null`` where a value does
not apply"), so each is typed ``T | None`` in a ``total=False`` part; when
present and not null its value has the table's type. An integer is a JSON
number with an integral value (``3.0`` passes: a tool that round-trips JSON
through floats writes that). Keys the table does not list are kept: a
bench's figures, ``advise --verify``'s ``script`` and ``folder``, a newer
hetsync's. Nothing here imports beyond the standard library and
``hetsync.errors``: the launcher, the benches and the reports all read it.

Usage::

    from hetsync.summary import read_summary

    for run in read_summary(out / "summary.json"):
        print(run["label"], run.get("time_to_target_s"))
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict, cast

from hetsync.errors import BadInput

__all__ = [
    "KEYS",
    "RunSummary",
    "WorkerJoined",
    "WorkerLeft",
    "as_dicts",
    "check_summary",
    "finished_runs",
    "policy_in_force",
    "policy_phases",
    "read_summary",
]


class WorkerLeft(TypedDict):
    """A worker that died or went silent (``workers_left``); the runtime also
    lists the workers whose own training loop ended first."""

    worker: int
    t: float
    reason: str


class WorkerJoined(TypedDict):
    """A worker that joined the run (``workers_joined``: the scenario's
    ``membership``; on real processes also a worker restarted by
    ``--max-worker-restarts``): it came at ``t`` and held the global model from ``ready_s``."""

    worker: int
    t: float
    ready_s: float


class PolicyNote(TypedDict):
    """What the policy decided that the record should show (``policy_notes``;
    ``auto``'s ``switch``: ``detail`` {from, to, rates, gain, since_s, moved,
    moved_count, rounds, slowest, fixed}, docs/formats.md)."""

    t: float
    what: str
    detail: dict[str, Any]


class _Named(TypedDict):
    label: str  # the policy with its parameters, e.g. ``ssp(s=3)``; unique within a comparison


class RunSummary(_Named, total=False):
    """One run's record of ``summary.json``: the keys of docs/formats.md's
    table, in its order (``label`` is required, see the module's header)."""

    policy: str | None
    params: dict[str, Any] | None
    scenario: str | None
    driver: str | None  # ``sim`` or ``dist``
    seed: int | None
    workers: int | None
    target_metric: str | None
    target_value: float | None
    target_direction: str | None  # ``max`` or ``min``
    time_to_target_s: float | None
    final_metric: float | None
    best_metric: float | None
    final_metrics: dict[str, float | None] | None
    target_accuracy: float | None  # accuracy targets only: the aliases of before named metrics
    final_accuracy: float | None
    best_accuracy: float | None
    wall_time_s: float | None
    compute_share: float | None
    comm_share: float | None
    wait_share: float | None
    samples_per_s: float | None
    steps: int | None
    applied_steps: int | None
    dropped_steps: int | None
    outstanding_steps: int | None
    updates: int | None
    bytes_sent: int | None
    max_staleness: int | None
    mean_staleness: float | None
    max_kept_models: int | None  # delay compensation only
    uncompensated: int | None
    metric_curve: list[list[float | None]] | None  # [t_s, value]; value null where the model diverged
    accuracy_curve: list[list[float | None]] | None
    per_worker: dict[str, Any] | None  # compute_s, comm_s, wait_s, steps, bytes: lists by worker
    host_time_s: float | None
    math_time_s: float | None
    trace: str | None  # a file name beside the summary
    stop_reason: str | None
    workers_left: list[WorkerLeft] | None
    workers_joined: list[WorkerJoined] | None
    policy_notes: list[PolicyNote] | None
    notes: list[str] | None
    outstanding_detail: dict[str, Any] | None  # simulator only
    events: int | None
    eval_time_s: float | None
    eval_share: float | None  # runtime only
    eval_beside: bool | None
    evals_skipped: int | None
    eval_warning: str | None
    path: str | None  # ``ps`` or ``collective``
    path_fallback: dict[str, Any] | None
    servers: int | None
    server_cpu_s: float | None
    batched_calls: int | None
    measured_step: dict[str, Any] | None
    topology: str | None  # peer to peer: ``p2p``, and the keys below
    multicasts: int | None
    allreduces: int | None
    mean_receivers: float | None
    mean_exchange_s: float | None
    mean_round_s: float | None
    diverged_at_s: float | None
    resumed_from: dict[str, Any] | None
    restarts: list[dict[str, Any]] | None  # hetsync run --max-restarts: the server died, the job went on


KEYS: frozenset[str] = RunSummary.__required_keys__ | RunSummary.__optional_keys__
"""Every key docs/formats.md documents (tests/test_summary.py holds the two to each other)."""


# ---------------------------------------------------------------------------
# the check: what a value must be, key by key (RunSummary's annotations, as tests)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_integer(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, float) and value.is_integer())


def _is_point(value: Any) -> bool:
    """``[t_s, value]`` of a curve: a time, then numbers or null (a diverged model)."""
    return (
        isinstance(value, list | tuple)
        and len(value) >= 2
        and _is_number(value[0])
        and all(v is None or _is_number(v) for v in value[1:])
    )


def _is_worker_left(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and _is_integer(value.get("worker"))
        and _is_number(value.get("t"))
        and isinstance(value.get("reason"), str)
    )


def _is_worker_joined(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and _is_integer(value.get("worker"))
        and _is_number(value.get("t"))
        and _is_number(value.get("ready_s"))
    )


_Check = tuple[Callable[[Any], bool], str]
"""Whether a value fits, and what it should be (said when it does not)."""

_TEXT: _Check = (lambda v: isinstance(v, str), "text")
_INT: _Check = (_is_integer, "an integer")
_NUMBER: _Check = (_is_number, "a number")
_BOOL: _Check = (lambda v: isinstance(v, bool), "true or false")
_OBJECT: _Check = (lambda v: isinstance(v, dict), "an object")
_METRICS: _Check = (
    lambda v: isinstance(v, dict) and all(x is None or _is_number(x) for x in v.values()),
    "an object of numbers",
)
# a list's items are checked one by one: the one that does not fit is named
_LISTS: dict[str, tuple[str, _Check]] = {
    "metric_curve": ("a list of [t_s, value]", (_is_point, "[t_s, value]")),
    "accuracy_curve": ("a list of [t_s, value]", (_is_point, "[t_s, value]")),
    "workers_left": ("a list of {worker, t, reason}", (_is_worker_left, "{worker, t, reason}")),
    "workers_joined": ("a list of {worker, t, ready_s}", (_is_worker_joined, "{worker, t, ready_s}")),
    "policy_notes": (
        "a list of {t, what, detail}",
        (lambda v: isinstance(v, dict) and {"t", "what", "detail"} <= set(v), "{t, what, detail}"),
    ),
    "notes": ("a list of text", _TEXT),
    "restarts": ("a list of {after_s, reason}", (lambda v: isinstance(v, dict) and "reason" in v, "{after_s, reason}")),
}
_CHECKS: dict[str, _Check] = {
    **dict.fromkeys(("policy", "scenario", "driver", "target_metric", "target_direction", "trace"), _TEXT),
    **dict.fromkeys(("stop_reason", "eval_warning", "path", "topology"), _TEXT),
    **dict.fromkeys(("seed", "workers", "steps", "applied_steps", "dropped_steps", "outstanding_steps"), _INT),
    **dict.fromkeys(("updates", "bytes_sent", "max_staleness", "max_kept_models", "uncompensated", "events"), _INT),
    **dict.fromkeys(("evals_skipped", "servers", "batched_calls", "multicasts", "allreduces"), _INT),
    **dict.fromkeys(("target_value", "time_to_target_s", "final_metric", "best_metric", "target_accuracy"), _NUMBER),
    **dict.fromkeys(("final_accuracy", "best_accuracy", "wall_time_s", "compute_share", "comm_share"), _NUMBER),
    **dict.fromkeys(("wait_share", "samples_per_s", "mean_staleness", "host_time_s", "math_time_s"), _NUMBER),
    **dict.fromkeys(("eval_time_s", "eval_share", "server_cpu_s", "mean_receivers", "mean_exchange_s"), _NUMBER),
    **dict.fromkeys(("mean_round_s", "diverged_at_s"), _NUMBER),
    "eval_beside": _BOOL,
    "final_metrics": _METRICS,
    **dict.fromkeys(("params", "per_worker", "outstanding_detail", "path_fallback", "measured_step"), _OBJECT),
    "resumed_from": _OBJECT,
}


def _record_problem(run: Any) -> str | None:
    """What is wrong with one record (None: nothing), naming the key."""
    if not isinstance(run, dict):
        return f"is {run!r}, not an object"
    if "label" not in run:
        return "'label' is missing: every run has one, its name"
    label = run["label"]
    if not isinstance(label, str) or not label:
        return f"'label' is {label!r}, not the run's name"
    for key, (fits, what) in _CHECKS.items():
        value = run.get(key)
        if value is not None and not fits(value):
            return f"{key!r} is {value!r}, not {what}"
    for key, (what, (fits, item)) in _LISTS.items():
        value = run.get(key)
        if value is None:
            continue
        if not isinstance(value, list):
            return f"{key!r} is {value!r}, not {what}"
        for x in value:
            if not fits(x):
                return f"{key!r} holds {x!r}, not {item}"
    trace = run.get("trace")
    if isinstance(trace, str) and (not trace or trace in (".", "..") or "/" in trace or "\\" in trace):
        return f"'trace' is {trace!r}, not the name of a file beside the summary"
    return None


def check_summary(runs: Any, source: str | Path) -> list[RunSummary]:
    """``runs`` as parsed from the summary ``source``, checked (see the
    module's header): BadInput naming the run and the key when it is not a
    list of run records as hetsync writes them. Returns ``runs`` itself."""
    if not isinstance(runs, list):
        raise BadInput(f"{source} holds a {type(runs).__name__}, not a list of runs: it is not a hetsync summary")
    for i, run in enumerate(runs, 1):
        problem = _record_problem(run)
        if problem is not None:
            label = run.get("label") if isinstance(run, dict) else None
            name = f" ({label})" if isinstance(label, str) and label else ""
            shown = problem if len(problem) <= 200 else problem[:200] + "…"
            raise BadInput(
                f"{source}: run {i}{name}: {shown}; it is damaged or was not written by hetsync: "
                "run again to rewrite it"
            )
    return runs


def read_summary(path: str | Path) -> list[RunSummary]:
    """The runs of the ``summary.json`` at ``path``, checked; BadInput (one
    line naming the file, and the run and key where one is wrong) when it
    is missing, not JSON or not runs as hetsync writes them."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput(f"{path} is missing: is it in the --out folder of a hetsync run?") from None
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise BadInput(f"{path} cannot be read ({why}): is it the summary.json of a hetsync run?") from None
    try:
        runs = json.loads(text)
    except (ValueError, RecursionError) as exc:  # (nested past Python's limit: no summary either)
        why = f"{exc.msg} at character {exc.pos + 1}" if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise BadInput(
            f"{path} is not JSON ({why}): it is damaged or was not written by hetsync; run again to rewrite it"
        ) from None
    return check_summary(runs, path)


def finished_runs(path: str | Path) -> list[RunSummary]:
    """The runs of ``path`` that pass the check, in order; none when the
    file is missing, unreadable or not a list. Never raises: the look at a
    run that was interrupted or failed, where a summary is a bonus."""
    try:
        runs = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return []
    if not isinstance(runs, list):
        return []
    return [run for run in runs if _record_problem(run) is None]


def as_dicts(runs: list[RunSummary]) -> list[dict[str, Any]]:
    """``runs`` themselves (no copy), typed as the open dicts they are, for
    code that takes a run as ``dict[str, Any]`` (the reports, a bench's
    ``Run``, which adds its figures to it)."""
    return cast("list[dict[str, Any]]", runs)


def _switches(notes: Sequence[Mapping[str, Any]]) -> list[tuple[float, str, str]]:
    """(t, from, to) of each ``switch`` note, in order; a note without a
    time or without text ``from`` and ``to`` is skipped."""
    out = []
    for note in notes:
        detail = note.get("detail")
        if note.get("what") != "switch" or not isinstance(detail, Mapping) or not _is_number(note.get("t")):
            continue
        old, new = detail.get("from"), detail.get("to")
        if isinstance(old, str) and isinstance(new, str):
            out.append((float(note["t"]), old, new))
    return out


def policy_phases(notes: Sequence[Mapping[str, Any]]) -> list[tuple[float, str]]:
    """The policies a run had in force, each with the time it took over:
    ``[(0.0, first's from), (t, to), ...]`` from its ``switch`` notes (a
    note ``what: switch`` whose detail names ``from`` and ``to``: the
    policy left and the one in force from ``t``); ``[]`` when it has none."""
    switches = _switches(notes)
    if not switches:
        return []
    return [(0.0, switches[0][1]), *((t, new) for t, _, new in switches)]


def policy_in_force(name: str, notes: Sequence[Mapping[str, Any]]) -> str:
    """``auto→lb-bsp``: the policy ``name`` and, after it, the one its last
    ``switch`` note put in force; ``""`` before any switch (a driver learns
    it from the notes, never from the policy)."""
    switches = _switches(notes)
    return f"{name}→{switches[-1][2]}" if switches else ""
