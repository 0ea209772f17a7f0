"""How far a runtime run is, for whoever watches it: ``progress.json`` in the
output folder (``hetsync run`` draws its bar from it) and, under plain
torchrun, a line on the terminal every ``PROGRESS_LINE_S``."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

PROGRESS_LINE_S = 5.0  # how often a progress line is printed, when it is


class Progress:
    def __init__(self, out_dir: Path, label: str, run_index: int, *, lines: bool) -> None:
        self.path = out_dir / "progress.json"
        self.label = label
        self.run_index = run_index
        self.lines = lines
        self._last_line_s = 0.0  # the last progress line printed

    def update(self, now_s: float, fraction: float, line: Callable[[float], str]) -> None:
        """Write the fraction done (0..1); print ``line(now_s)`` if a line is due."""
        tmp = self.path.with_name(".progress.tmp")
        tmp.write_text(json.dumps({"label": self.label, "run": self.run_index, "fraction": fraction}))
        os.replace(tmp, self.path)
        if self.lines and now_s - self._last_line_s >= PROGRESS_LINE_S:
            self._last_line_s = now_s
            print(line(now_s), flush=True)
