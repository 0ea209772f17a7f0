"""A real worker's background communication: lanes beside the compute thread,
and the books of how its time was spent.

The optimized WBSP of Yang et al. (Parallel Computing 121 (2024) 103092) runs
communication beside computation: the authors' worker has one thread that
trains and one that pushes deltas and loads the pulled model. A runtime
worker (:mod:`hetsync.runtime.worker`) does the same with two lanes, one per
link direction: standalone pushes go up the uplink lane and standalone pulls
come down the downlink lane while the main thread computes, so a push and a
pull can be in flight at once, as in the simulator's network (a push and a
pull do not share a link direction).

:class:`BusyClock` books a worker's time the way the simulator does: while a
step is in progress the time is computation, whatever else happens; while no
step is but a transfer is in flight it is communication; otherwise the
worker waits. A transfer hidden behind computation therefore costs nothing,
which is the point of overlapping.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable


class BusyClock:
    """Computation first, then communication (thread-safe). Times are the
    run's seconds; a transfer may be booked as starting a little in the past
    (when its command was sent), never before the last booked instant."""

    def __init__(self, now_s: float = 0.0) -> None:
        self._lock = threading.Lock()
        self.computing = False
        self.transfers = 0
        self._since_s = now_s
        self._comm_s = 0.0

    def _settle(self, now_s: float) -> None:
        if now_s <= self._since_s:
            return
        if not self.computing and self.transfers:
            self._comm_s += now_s - self._since_s
        self._since_s = now_s

    def compute(self, busy: bool, now_s: float) -> None:
        """A step starts (``busy``) or ends at ``now_s``."""
        with self._lock:
            self._settle(now_s)
            self.computing = busy

    def transfer(self, started: bool, now_s: float) -> None:
        """A transfer starts (``started``) or ends at ``now_s``."""
        with self._lock:
            self._settle(now_s)
            self.transfers += 1 if started else -1
            if self.transfers < 0:
                raise RuntimeError("BusyClock: a transfer ended that never started")

    def take_comm_s(self, now_s: float) -> float:
        """Communication time no step overlapped, since the previous take."""
        with self._lock:
            self._settle(now_s)
            out, self._comm_s = self._comm_s, 0.0
            return out


class Lane:
    """One background thread running jobs in order (a link direction of a
    worker). A job that raises hands the error to ``on_error`` (the worker
    stops on it) and the lane stops taking jobs."""

    def __init__(self, name: str, on_error: Callable[[BaseException], None], clock: Callable[[], float]) -> None:
        self.name = name
        self._jobs: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._on_error = on_error
        self._clock = clock
        self.free_since_s = clock()  # when the lane finished its previous job
        self._backlog = 0  # jobs submitted, not finished
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, daemon=True, name=name)
        self._thread.start()

    def submit(self, job: Callable[[], None]) -> None:
        with self._changed:
            self._backlog += 1
        self._jobs.put(job)

    def wait_below(self, jobs: int) -> None:
        """Wait until fewer than ``jobs`` jobs are waiting or running."""
        with self._changed:
            while self._backlog >= jobs:
                self._changed.wait()

    def drain(self) -> None:
        """Wait until every job submitted so far has finished."""
        self.wait_below(1)

    def close(self) -> None:
        self._jobs.put(None)

    def _run(self) -> None:
        failed = False
        while True:
            job = self._jobs.get()
            try:
                if job is None:
                    return
                if not failed:
                    job()
                    self.free_since_s = self._clock()
            except BaseException as e:  # noqa: BLE001 — the worker decides what a lost link means
                failed = True
                self._on_error(e)
            finally:
                if job is not None:
                    with self._changed:
                        self._backlog -= 1
                        self._changed.notify_all()
