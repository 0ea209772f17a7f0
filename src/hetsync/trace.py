"""JSON-lines event trace, the same for every driver (docs/formats.md).

The simulator writes virtual times; nothing host-dependent goes into a
trace, so the same scenario and seed give a byte-identical file.

* :class:`TraceWriter` writes one (the drivers and the ledger).
* The schema: :data:`Kind` (the values of ``ev``), one TypedDict per kind
  (:class:`ComputeRecord`, ...; :data:`Record` is any of them), :data:`SCHEMA`
  and :func:`schema_error` to check a record against it.
* The reader every consumer uses: :func:`iter_records` streams a trace
  filtered by kind, worker and time (tolerating a cut last line and reading
  an interrupted run's ``.partial`` file when asked); :func:`read_trace`
  and :func:`first_record` are shorthands.

Usage::

    from hetsync.trace import iter_records

    for rec in iter_records(out / "trace-bsp.jsonl", kinds={"compute"}, workers=range(4), until_s=10.0):
        print(rec["w"], rec["end"] - rec["t"])
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Container, Iterable, Iterator
from json import encoder as _json_encoder
from pathlib import Path
from typing import IO, Any, Literal, TypedDict, get_args

from hetsync.errors import BadInput
from hetsync.outdir import partial_name

_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
_dumps = _ENCODER.encode
# The C encoder that JSONEncoder.encode builds on every call, built once and
# without the check for circular references (a record is a flat dict): the
# same text, a quarter cheaper.
_c_make_encoder = getattr(_json_encoder, "c_make_encoder", None)
if _c_make_encoder is not None:
    _c_encode = _c_make_encoder(
        None, _ENCODER.default, _json_encoder.encode_basestring_ascii, None, ":", ",", False, False, False
    )

    def _encode_record(record: dict[str, Any]) -> str:
        return "".join(_c_encode(record, 0))

else:  # pragma: no cover - CPython always has the C encoder
    _encode_record = _dumps

_BATCH = 256  # records held before they are encoded and written together


class TraceWriter:
    """Appends one JSON object per line; ``None`` path writes nothing.

    Records are encoded and written in batches: encoding many records in one
    go runs on warm caches, where encoding each as it comes would run after
    the simulator's gradient math has evicted them (about twice the cost).
    So a record must not be changed after ``write``, and one that cannot be
    encoded (NaN, an unknown type) raises at the latest from ``close``.
    """

    def __init__(self, path: Path | None, *, resume_at: int | None = None) -> None:
        """``resume_at``: continue the trace already at ``path`` (a resumed
        run), cut to its first ``resume_at`` bytes (what it held when the
        checkpoint was saved), instead of starting a new file."""
        self.path = path
        self._fh: IO[str] | None = None
        self._records: list[dict[str, Any]] = []
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            if resume_at is None:
                self._fh = path.open("w", buffering=1 << 20)
            else:
                os.truncate(path, resume_at)
                self._fh = path.open("a", buffering=1 << 20)

    @property
    def enabled(self) -> bool:
        return self._fh is not None

    def write(self, record: dict[str, Any]) -> None:
        if self._fh is not None:
            records = self._records
            records.append(record)
            if len(records) >= _BATCH:
                self._flush_records()

    def _flush_records(self) -> None:
        """Encode and write the records held; the first that fails raises after the others are written."""
        records = self._records
        if not records or self._fh is None:
            return
        self._records = []
        lines = []
        error: Exception | None = None
        for record in records:
            try:
                lines.append(_encode_record(record))
            except (TypeError, ValueError, RecursionError) as exc:
                error = error or exc
        if lines:
            lines.append("")  # the last line's newline
            self._fh.write("\n".join(lines))
        if error is not None:
            raise error

    def flush(self) -> int:
        """Write the records held and hand them to the operating system;
        returns the trace's length in bytes (0 without a file). A checkpoint
        records it: a resumed run cuts the trace back to it."""
        if self._fh is None:
            return 0
        self._flush_records()
        self._fh.flush()
        return self._fh.tell()

    def close(self, *, sync: bool = False) -> None:
        """Write what is held and close; ``sync``: and make it durable (fsync)."""
        if self._fh is not None:
            try:
                self._flush_records()
                if sync:
                    self._fh.flush()
                    os.fsync(self._fh.fileno())
            finally:
                self._fh.close()
                self._fh = None

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------------------
# the schema: what each kind of record carries (docs/formats.md, "Trace")
#
# Derived from what the writers emit: the simulator (sim/engine.py), the
# runtime server and its peer-to-peer part (runtime/server.py, p2p.py) and
# the ledger both drivers share (ledger.py). Every record starts with ``t``
# (seconds since the run started; virtual in the simulator) and ``ev``.
# Records are plain dicts: the TypedDicts below type them, they do not wrap
# them. A key only some records of a kind carry is declared in a subclass
# with ``total=False`` (``NotRequired`` needs Python 3.11, and is not seen
# under ``from __future__ import annotations`` before 3.12).

Kind = Literal[
    "start",
    "compute",
    "push",
    "pull",
    "apply",
    "drop",
    "send",
    "allreduce",
    "eval",
    "left",
    "joined",
    "note",
    "resume",
    "end",
]
"""The kinds of trace record, the values of ``ev``."""

KINDS: frozenset[str] = frozenset(get_args(Kind))

INTERVAL_KINDS: frozenset[str] = frozenset({"compute", "push", "pull", "send", "allreduce"})
"""Records of a worker ``w`` over ``[t, end]``, written when the interval ends
(so lines are not sorted by ``t``)."""


class _Start(TypedDict):
    t: float
    ev: Literal["start"]
    workers: int
    policy: str  # the run's label, e.g. ``ssp(s=3)``
    scenario: str
    seed: int
    model_nbytes: int


class StartRecord(_Start, total=False):
    """First line of a trace."""

    driver: str  # ``dist`` on the runtime
    path: str  # the simulator on path ``collective`` (hetsync.driver.paths); absent: ``ps``


class ComputeRecord(TypedDict):
    """Worker ``w`` computed its step ``step`` (0-based) on ``batch`` samples of global version ``base``."""

    t: float
    ev: Literal["compute"]
    w: int
    end: float
    step: int
    batch: int
    base: int


class PushRecord(TypedDict):
    """Upload of push ``id`` from worker ``w`` to the server, carrying ``steps`` local steps."""

    t: float
    ev: Literal["push"]
    w: int
    end: float
    id: int
    kind: str  # ``grad`` or ``delta``
    nbytes: int
    steps: int


class PullRecord(TypedDict):
    """Download of global version ``version`` by worker ``w``."""

    t: float
    ev: Literal["pull"]
    w: int
    end: float
    version: int
    nbytes: int


class ApplyRecord(TypedDict):
    """The server produced ``version`` from the pushes ``ids`` (one weight and staleness each)."""

    t: float
    ev: Literal["apply"]
    version: int
    ids: list[int]
    weights: list[float]
    staleness: list[int]


class _Drop(TypedDict):
    t: float
    ev: Literal["drop"]
    ids: list[int]
    steps: int
    reason: str


class DropRecord(_Drop, total=False):
    """Pushes ``ids`` discarded (``reason`` from the policy), or worker ``w``'s
    local work replaced (``overwritten``), or work in progress at a checkpoint
    a run resumed from (``restart``)."""

    w: int  # with reason ``overwritten``


class SendRecord(TypedDict):
    """(p2p) A copy of worker ``w``'s model to worker ``to``."""

    t: float
    ev: Literal["send"]
    w: int
    to: int
    end: float
    nbytes: int


class AllreduceRecord(TypedDict):
    """(p2p) Worker ``w``'s part in a ring all-reduce of ``workers`` members."""

    t: float
    ev: Literal["allreduce"]
    w: int
    end: float
    nbytes: int
    workers: int


class EvalRecord(TypedDict):
    """Test evaluation of the global model at ``version``. It also holds one
    key per workload metric (``accuracy``, ``loss``, ...; null when not
    finite), which a TypedDict cannot name: read them with :func:`metrics`."""

    t: float
    ev: Literal["eval"]
    version: int


class LeftRecord(TypedDict):
    """Worker ``w`` died or went silent (runtime), or left as the scenario's
    ``membership`` says (simulator)."""

    t: float
    ev: Literal["left"]
    w: int
    reason: str


class JoinedRecord(TypedDict):
    """(``membership``; on real processes also ``--max-worker-restarts``)
    Worker ``w`` came back at ``t`` (real processes: announced itself on its
    new session) and, from ``end``, held the global model of ``version``
    (``nbytes`` downloaded; peer to peer, the live workers' average,
    ``version`` the updates so far); the policy got ``WorkerJoined`` then."""

    t: float
    ev: Literal["joined"]
    w: int
    end: float
    version: int
    nbytes: int


class NoteRecord(TypedDict):
    """What the policy decided that the record should show (its ``Note``
    command; ``auto``'s ``switch``: ``detail`` {from, to, rates})."""

    t: float
    ev: Literal["note"]
    what: str
    detail: dict[str, Any]


class ResumeRecord(TypedDict):
    """(runtime, ``--resume``) The run went on from its checkpoint at ``t``."""

    t: float
    ev: Literal["resume"]
    version: int
    steps: int


class EndRecord(TypedDict):
    """Last line; ``reason`` is ``max_time``, ``max_steps``, ``drained`` or ``no workers left``."""

    t: float
    ev: Literal["end"]
    wall_time_s: float
    reason: str


Record = (
    StartRecord
    | ComputeRecord
    | PushRecord
    | PullRecord
    | ApplyRecord
    | DropRecord
    | SendRecord
    | AllreduceRecord
    | EvalRecord
    | LeftRecord
    | JoinedRecord
    | NoteRecord
    | ResumeRecord
    | EndRecord
)
"""Any trace record; ``rec["ev"] == "compute"`` narrows it for a type checker."""

SCHEMA: dict[str, type] = {
    "start": StartRecord,
    "compute": ComputeRecord,
    "push": PushRecord,
    "pull": PullRecord,
    "apply": ApplyRecord,
    "drop": DropRecord,
    "send": SendRecord,
    "allreduce": AllreduceRecord,
    "eval": EvalRecord,
    "left": LeftRecord,
    "joined": JoinedRecord,
    "note": NoteRecord,
    "resume": ResumeRecord,
    "end": EndRecord,
}
"""Each kind's TypedDict (its ``__required_keys__`` and ``__optional_keys__``)."""


def metrics(record: EvalRecord | dict[str, Any]) -> dict[str, float | None]:
    """The workload metrics an ``eval`` record holds, in the workload's order
    (null: not finite, a diverged model)."""
    return {k: v for k, v in record.items() if k not in ("t", "ev", "version")}  # type: ignore[misc]


def schema_error(record: dict[str, Any]) -> str | None:
    """What is wrong with ``record`` against the schema (None: nothing): an
    unknown kind, a key missing, a key the kind does not carry (an ``eval``
    record's metrics are numbers or null)."""
    kind = record.get("ev")
    if kind not in SCHEMA:
        return f"unknown kind ev={kind!r} (known: {', '.join(sorted(KINDS))})"
    typed: Any = SCHEMA[kind]
    required: frozenset[str] = typed.__required_keys__
    allowed = required | typed.__optional_keys__
    missing = sorted(required - record.keys())
    if missing:
        return f"{kind} record lacks {', '.join(missing)}"
    extra = sorted(record.keys() - allowed)
    if kind == "eval":
        extra = [k for k in extra if not (record[k] is None or isinstance(record[k], int | float))]
    if extra:
        return f"{kind} record has keys its kind does not carry: {', '.join(extra)}"
    return None


# ---------------------------------------------------------------------------
# the reader


class TraceError(BadInput):
    """A trace file has a line that is not a JSON record (not a cut last line: damage)."""


_WORKER_KINDS = INTERVAL_KINDS | {"left", "joined", "drop"}  # records that can belong to a worker ``w``
_EV_RE = re.compile(r'"ev"\s*:\s*"(\w+)"')
_W_RE = re.compile(r'"w"\s*:\s*(\d+)')
_T_RE = re.compile(r'"t"\s*:\s*(-?[0-9][0-9.eE+-]*)')


def resolve(path: str | Path, *, partial: bool = False) -> Path:
    """``path``; with ``partial``, the interrupted run's ``<path>.partial``
    when ``path`` itself does not exist (and it does)."""
    path = Path(path)
    if partial and not path.exists():
        kept = partial_name(path)
        if kept.exists():
            return kept
    return path


def iter_records(
    path: str | Path,
    *,
    kinds: str | Iterable[str] | None = None,
    workers: int | Container[int] | None = None,
    since_s: float | None = None,
    until_s: float | None = None,
    partial: bool = False,
) -> Iterator[Record]:
    """Stream the records of a trace file, in file order, filtered.

    ``kinds``: only records whose ``ev`` is this kind or one of these.
    ``workers``: only records of this worker or these workers (e.g.
    ``range(16)``); records that belong to no
    worker (``start``, ``apply``, ``eval``, most ``drop``, ``resume``,
    ``end``) are kept: combine with ``kinds``. A ``send`` belongs to its
    sender ``w``. ``since_s``/``until_s``: only records that overlap
    ``[since_s, until_s)`` of the run's clock: an interval (``t`` to ``end``)
    when ``t < until_s`` and ``end > since_s``, any other record when
    ``since_s <= t < until_s``. ``partial``: read ``<path>.partial`` when
    ``path`` does not exist (a run interrupted by Ctrl-C).

    A last line cut short (a run that crashed mid-write) is skipped; a damaged
    line elsewhere raises :class:`TraceError` naming the file and line.
    Traces can be hundreds of megabytes: lines are read one at a time and a
    regular-expression look skips most of those the filters reject before
    any JSON is parsed (the checks after parsing decide).
    """
    wanted = None if kinds is None else frozenset((kinds,) if isinstance(kinds, str) else kinds)
    members: Container[int] | None = {workers} if isinstance(workers, int) else workers
    if wanted is not None and not wanted <= KINDS:
        raise ValueError(f"kinds: unknown kind(s) {sorted(wanted - KINDS)}; known: {sorted(KINDS)}")
    source = resolve(path, partial=partial)
    look = wanted is not None or members is not None or until_s is not None
    check = look or since_s is not None
    loads = json.loads
    with source.open(encoding="utf-8", errors="replace") as lines:
        for number, line in enumerate(lines, 1):
            if look and _rejects(line, wanted, members, until_s):
                continue
            try:
                rec = loads(line)
            except ValueError as exc:
                if not line.strip():
                    continue
                if not line.endswith("\n"):  # the last line, cut short: a crashed run
                    return
                why = f"{exc.msg} at character {exc.pos + 1}" if isinstance(exc, json.JSONDecodeError) else str(exc)
                raise TraceError(
                    f"{source}:{number} is not a JSON record ({why}): the trace is damaged; run again to rewrite it"
                ) from None
            if type(rec) is not dict:
                raise TraceError(
                    f"{source}:{number} is not a JSON object: the trace is damaged; run again to rewrite it"
                )
            if not check or _keep(rec, wanted, members, since_s, until_s):
                yield rec  # type: ignore[misc]


def _rejects(line: str, kinds: frozenset[str] | None, workers: Container[int] | None, until_s: float | None) -> bool:
    """The cheap look: whether the filters reject ``line`` for sure (False: parse it and decide)."""
    m = _EV_RE.search(line)
    if m is None:
        return False
    kind = m.group(1)
    if kinds is not None and kind not in kinds:
        return True
    if workers is not None and kind in INTERVAL_KINDS:
        w = _W_RE.search(line)
        if w is not None and int(w.group(1)) not in workers:
            return True
    if until_s is not None:
        t = _T_RE.search(line)
        if t is not None and _float_or(t.group(1), -math.inf) >= until_s:
            return True
    return False


def _keep(
    rec: dict[str, Any],
    kinds: frozenset[str] | None,
    workers: Container[int] | None,
    since_s: float | None,
    until_s: float | None,
) -> bool:
    kind = rec.get("ev")
    if kinds is not None and kind not in kinds:
        return False
    if workers is not None and kind in _WORKER_KINDS and "w" in rec and rec["w"] not in workers:
        return False
    if since_s is None and until_s is None:
        return True
    t = rec["t"]
    if until_s is not None and t >= until_s:
        return False
    if since_s is not None:
        return bool(rec["end"] > since_s) if kind in INTERVAL_KINDS else bool(t >= since_s)
    return True


def _float_or(text: str, default: float) -> float:
    try:
        return float(text)
    except ValueError:
        return default


def first_record(path: str | Path, *, partial: bool = False) -> Record | None:
    """The trace's first record (its ``start``), or None for an empty file."""
    for rec in iter_records(path, partial=partial):
        return rec
    return None


def read_trace(path: str | Path, **filters: Any) -> list[Record]:
    """Every record of the trace, as a list (see :func:`iter_records` for the filters)."""
    return list(iter_records(path, **filters))
