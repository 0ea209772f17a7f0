"""The terminal console every command prints through. It imports only rich,
so listings (``hetsync policies``, ``hetsync scenarios``) start in well
under a second; :mod:`hetsync.report` re-exports it."""

from __future__ import annotations

from rich.console import Console


def terminal_console() -> Console:
    """A rich console; piped output (``make demo`` into a log, CI) gets a width the tables fit in."""
    console = Console()
    return console if console.is_terminal else Console(width=180)
