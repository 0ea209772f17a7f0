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

    def update(self, now_s: float, fraction: float, status: Callable[[float], str]) -> None:
        """Write the fraction done (0..1) and ``status(now_s)`` (``12.0 s · 340
        steps · 4 workers · accuracy 0.912``); print it if a line is due."""
        text = status(now_s)
        tmp = self.path.with_name(".progress.tmp")
        state = {"label": self.label, "run": self.run_index, "fraction": fraction, "status": text}
        tmp.write_text(json.dumps(state))
        os.replace(tmp, self.path)
        if self.lines and now_s - self._last_line_s >= PROGRESS_LINE_S:
            self._last_line_s = now_s
            print(f"hetsync: {self.label}  {text}", flush=True)
