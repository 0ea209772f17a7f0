"""Which workers owe the runtime server a report, since when, and who has
been silent too long: a worker that stays alive but silent longer than
``timeout_s`` while it owes a report is declared gone (a dead one is seen
at once, as a connection reset: :mod:`hetsync.runtime.server`)."""

from __future__ import annotations


class Watchdog:
    def __init__(self, workers: int, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.outstanding = [0] * workers  # commands sent, not yet reported
        self.owed_since_s = [0.0] * workers  # when the oldest unreported command was sent

    def owe(self, worker: int, now_s: float) -> None:
        """A command was sent for which ``worker`` owes one report."""
        if self.outstanding[worker] == 0:
            self.owed_since_s[worker] = now_s
        self.outstanding[worker] += 1

    def paid(self, worker: int, now_s: float) -> None:
        """A report owed by ``worker`` came in (or is forgiven)."""
        self.outstanding[worker] = max(0, self.outstanding[worker] - 1)
        self.owed_since_s[worker] = now_s

    def forgive(self, worker: int) -> None:
        """``worker`` is gone: it owes nothing any more."""
        self.outstanding[worker] = 0

    def busy(self, alive: set[int]) -> bool:
        """Some live worker owes a report (the run is not idle)."""
        return any(self.outstanding[w] for w in alive)

    def overdue(self, alive: set[int], now_s: float) -> list[int]:
        """The live workers that have owed a report for longer than ``timeout_s``."""
        return [w for w in sorted(alive) if self.outstanding[w] and now_s - self.owed_since_s[w] > self.timeout_s]
