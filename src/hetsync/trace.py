"""JSON-lines event trace, the same for every driver (docs/formats.md).

The simulator writes virtual times; nothing host-dependent goes into a
trace, so the same scenario and seed give a byte-identical file.
"""

from __future__ import annotations

import json
import os
from json import encoder as _json_encoder
from pathlib import Path
from typing import IO, Any

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


def read_trace(path: Path) -> list[dict[str, Any]]:
    with path.open() as fh:
        return [json.loads(line) for line in fh if line.strip()]
