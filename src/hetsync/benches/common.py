"""Shared by the benchmarks: rows of measured figures, printed and saved."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

Row = dict[str, Any]


def print_rows(rows: list[Row], *, title: str) -> None:
    from rich.table import Table

    from hetsync.report import terminal_console

    table = Table(title=title)
    for col, justify in (("metric", "left"), ("value", "right"), ("unit", "left"), ("setting", "left")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for r in rows:
        v = r["value"]
        shown = f"{v:,.0f}" if isinstance(v, (int, float)) and abs(v) >= 1000 else f"{v:.3g}"
        table.add_row(r["metric"], shown, r["unit"], r["setting"])
    terminal_console().print(table)


def write_rows(rows: list[Row], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows, indent=1) + "\n")
