"""The comparison table: one row per run, in the terminal, the markdown page and the HTML page.

:data:`COLUMNS` (key, header, unit, format, footnote of each column) is the
one definition all three use; :func:`summary_table` builds the terminal's
``rich`` table, and the pages (:mod:`.pages`) write the same cells.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from rich.table import Table
from rich.text import Text

from hetsync.report.common import (
    _MISSING,
    _distinct,
    _final_cell,
    _final_header,
    _finite,
    _fmt_int,
    _fmt_rate,
    _fmt_seconds,
    _fmt_share,
    _targets_text,
)

FOOTNOTE_MARKS = "†‡§¶"  # the footnoted columns' marks, in the columns' order
CAPTION = f"{_MISSING} = not reached / not applicable; shares are of N × wall time"
LEFT_CAPTION = "; a worker that left counts until it left"  # (its own loop ended, or it died)


@dataclass(frozen=True)
class Column:
    """One column of the comparison table, the same in the terminal table
    (rich), the markdown page and the HTML report.

    ``key`` is the summary field it shows, ``fmt`` turns that field's value
    into the cell, ``unit`` goes into the header (``TTA (s)``), ``footnote``
    (if any) is written under the table, marked in the header (``†``, then
    ``‡``, ... in the columns' order), and ``best`` highlights the smallest
    value (bold green)."""

    key: str
    title: str
    fmt: Callable[[Any], str] = str
    unit: str = ""
    footnote: str = ""
    best: bool = False
    align: Literal["left", "right"] = "right"

    def header(self, runs: Sequence[dict[str, Any]]) -> str:
        """The header without its footnote mark."""
        return f"{self.title} ({self.unit})" if self.unit else self.title

    def cell(self, runs: Sequence[dict[str, Any]], run: dict[str, Any]) -> str:
        return self.fmt(run.get(self.key))


@dataclass(frozen=True)
class _FinalColumn(Column):
    """The target metric at the last evaluation: its header names the metric
    (``final acc``, ``final ppl``); with mixed metrics each cell says which."""

    def header(self, runs: Sequence[dict[str, Any]]) -> str:
        return _final_header(runs)

    def cell(self, runs: Sequence[dict[str, Any]], run: dict[str, Any]) -> str:
        return _final_cell(runs, run)


COLUMNS: tuple[Column, ...] = (
    Column("label", "run", lambda v: "?" if v is None else str(v), align="left"),
    Column("time_to_target_s", "TTA", _fmt_seconds, unit="s", best=True),
    _FinalColumn("final_metric", "final"),
    Column("compute_share", "compute", _fmt_share),
    Column("comm_share", "comm", _fmt_share),
    Column("wait_share", "wait", _fmt_share),
    Column("samples_per_s", "samples/s", _fmt_rate),
    Column("steps", "steps", _fmt_int),
    Column("updates", "updates", _fmt_int),
    Column("dropped_steps", "dropped", _fmt_int),
    Column(
        "max_staleness",
        "max stale",
        _fmt_int,
        footnote="max stale: how many model versions (updates) old a contribution was when applied; "
        "SSP's bound s counts steps, not versions, so max stale can exceed s",
    ),
    Column("wall_time_s", "wall", _fmt_seconds, unit="s"),
)
"""The comparison's columns, in order: the one definition every page uses."""


@dataclass(frozen=True)
class _Grid:
    """The table's text: a header per column (with its footnote mark), a row
    of cells per run, the cells to highlight as ``(row, column)``, and each
    column's footnote as written under the table ("" for none)."""

    columns: tuple[Column, ...]
    headers: list[str]
    rows: list[list[str]]
    best: frozenset[tuple[int, int]]
    footnotes: list[str]
    caption: str = CAPTION

    @property
    def notes(self) -> list[str]:
        return [note for note in self.footnotes if note]


def _grid(runs: Sequence[dict[str, Any]]) -> _Grid:
    columns = COLUMNS
    marks = iter(FOOTNOTE_MARKS)
    footnotes = [f"{next(marks)} {c.footnote}" if c.footnote else "" for c in columns]
    best = set()
    for j, column in enumerate(columns):
        if column.best:
            values = [r.get(column.key) for r in runs]
            low = min((v for v in values if _finite(v)), default=None)
            best |= {(i, j) for i, v in enumerate(values) if low is not None and v == low}
    return _Grid(
        columns=tuple(columns),
        headers=[c.header(runs) + note[:1] for c, note in zip(columns, footnotes, strict=True)],
        rows=[[c.cell(runs, r) for c in columns] for r in runs],
        best=frozenset(best),
        footnotes=footnotes,
        caption=CAPTION + (LEFT_CAPTION if any(r.get("workers_left") for r in runs) else ""),
    )


_NO_RUNS = _grid([])
STALE_HEADER, STALE_NOTE = next(
    (h, note) for h, note in zip(_NO_RUNS.headers, _NO_RUNS.footnotes, strict=True) if h.startswith("max stale")
)
"""The max stale column's header and its footnote, as every page writes them."""


def summary_table(runs: list[dict[str, Any]]) -> Table:
    """Return a table with one row per run summary record.

    The best (smallest) time to target is bold green; ``—`` marks a value
    that does not apply, e.g. a run that never reached the target. Every
    string is taken literally (never read as rich markup): labels and
    scenario names come from users' files.
    """
    grid = _grid(runs)
    table = Table(
        title=Text(
            f"{_distinct(runs, 'scenario')} · {_distinct(runs, 'workers')} workers · target {_targets_text(runs)}"
        ),
        caption="\n".join([grid.caption, *grid.notes]),
        header_style="bold",
    )
    for column, header in zip(grid.columns, grid.headers, strict=True):
        if column.align == "left":  # the run's label folds onto more lines when the terminal is narrow
            table.add_column(Text(header), overflow="fold")
        else:  # ... so that no number is cut short
            table.add_column(Text(header), justify="right", no_wrap=True)
    for i, cells in enumerate(grid.rows):
        texts = [Text(c) for c in cells]
        for j, text in enumerate(texts):
            if (i, j) in grid.best:
                text.stylize("bold green")
        table.add_row(*texts)
    return table
