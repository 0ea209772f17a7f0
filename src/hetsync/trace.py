"""JSON-lines event trace, the same for every driver (docs/formats.md).

The simulator writes virtual times; nothing host-dependent goes into a
trace, so the same scenario and seed give a byte-identical file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any

_dumps = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


class TraceWriter:
    """Appends one JSON object per line; ``None`` path writes nothing."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._fh: IO[str] | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = path.open("w", buffering=1 << 20)

    @property
    def enabled(self) -> bool:
        return self._fh is not None

    def write(self, record: dict[str, Any]) -> None:
        if self._fh is not None:
            self._fh.write(_dumps(record))
            self._fh.write("\n")

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_trace(path: Path) -> list[dict[str, Any]]:
    with path.open() as fh:
        return [json.loads(line) for line in fh if line.strip()]
