"""Reports on finished runs: a terminal table, PNG charts, pages and a Perfetto trace.

Everything here reads what the drivers wrote (see ``docs/formats.md``): the
summary records of ``summary.json`` (a list of dicts) and the JSON-lines event
traces. Nothing is simulated.

* :mod:`.table`: :func:`summary_table` builds a ``rich`` table, one row per
  run; its columns (key, header, unit, format, footnote) are
  :data:`COLUMNS`, which the markdown and HTML pages use too.
* :mod:`.plots`: :func:`plot_metric` (the target metric against time;
  ``plot_accuracy`` is the same function), :func:`plot_shares` and
  :func:`plot_timeline` each write one PNG; :func:`write_report` writes all
  of them for a comparison. :func:`timeline_window` is the time window
  :func:`plot_timeline` shows by default; :func:`timeline_names` names each
  run's timeline file.
* :mod:`.pages`: :func:`write_markdown` and :func:`write_html` write the
  comparison as a page (the HTML one self-contained, with every plot
  inlined); :func:`write_outputs` writes everything a comparison writes
  beside its runs.
* :mod:`.switches`: :func:`switch_lines`, what a policy that switches
  (``auto``) did and why, one line per switch of each run's notes.
* :mod:`.perfetto` writes the whole traces for ui.perfetto.dev
  (``trace.json``).
* :mod:`.common`: what they all read from a run's record;
  :func:`metric_plot_name` names the metric plot's file: ``accuracy`` for
  accuracy targets, the metric's name otherwise.

:func:`safe_name` (a run label as a file-name fragment, from
:mod:`hetsync.outdir`), :func:`check_summary` (from :mod:`hetsync.summary`)
and :func:`terminal_console` (from :mod:`hetsync.console`) are re-exported
for the report's callers.
"""

from hetsync.console import terminal_console
from hetsync.outdir import safe_name
from hetsync.report.common import metric_plot_name
from hetsync.report.pages import write_html, write_markdown, write_outputs
from hetsync.report.plots import (
    COMPUTE_COLOR,
    DPI,
    PULL_COLOR,
    PUSH_COLOR,
    SMALL_MULTIPLES_MIN,
    TIMELINE_STEPS,
    WAIT_COLOR,
    plot_accuracy,
    plot_metric,
    plot_shares,
    plot_timeline,
    timeline_names,
    timeline_window,
    write_report,
)
from hetsync.report.switches import switch_lines
from hetsync.report.table import (
    CAPTION,
    COLUMNS,
    FOOTNOTE_MARKS,
    LEFT_CAPTION,
    STALE_HEADER,
    STALE_NOTE,
    Column,
    summary_table,
)
from hetsync.summary import check_summary

__all__ = [
    "CAPTION",
    "COLUMNS",
    "COMPUTE_COLOR",
    "DPI",
    "FOOTNOTE_MARKS",
    "LEFT_CAPTION",
    "PULL_COLOR",
    "PUSH_COLOR",
    "SMALL_MULTIPLES_MIN",
    "STALE_HEADER",
    "STALE_NOTE",
    "TIMELINE_STEPS",
    "WAIT_COLOR",
    "Column",
    "check_summary",
    "metric_plot_name",
    "plot_accuracy",
    "plot_metric",
    "plot_shares",
    "plot_timeline",
    "safe_name",
    "summary_table",
    "switch_lines",
    "terminal_console",
    "timeline_names",
    "timeline_window",
    "write_html",
    "write_markdown",
    "write_outputs",
    "write_report",
]
