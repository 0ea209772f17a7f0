"""``hetsync bench NAME``: one module per benchmark, registered here.

A benchmark module defines ``NAME``, ``HELP``, ``add_arguments(parser)`` and
``run(args) -> list[Row]``; rows are printed as a table and, with
``--json FILE``, written as JSON. Every figure is measured in the run that
prints it; nothing here asserts a threshold.
"""

from __future__ import annotations

from types import ModuleType

from hetsync.benches import paper_elastic, paper_lbbsp, paper_selmcast, paper_wbsp, runtime, sim, zipline

BENCHES: dict[str, ModuleType] = {
    m.NAME: m for m in (sim, runtime, zipline, paper_wbsp, paper_elastic, paper_lbbsp, paper_selmcast)
}
