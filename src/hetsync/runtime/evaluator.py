"""Evaluation beside the server loop.

Evaluating the global model on the test split takes the server 50-100 ms on
the digits CNN. Done inside the loop, every evaluation is a pause in which
no report is read and no command is sent: a worker that steps without a
break (WBSP-overlap) waits on the server's backpressure, and a barrier
policy's round lasts that much longer, which the simulator (where an
evaluation costs no time) never shows. :class:`BackgroundEvaluator` takes a
copy of the model as it is at the evaluation time and evaluates it on one
thread of its own; the loop records each result, stamped with the time of
its copy, when it is ready. Results come back in the order they were asked
for. torch releases the interpreter lock inside its operators, so the loop
goes on while the copy is evaluated.

Evaluations that cannot keep up are coalesced, not queued: one asked for
while another runs waits in a single slot, and a newer one replaces it
(``skipped`` counts those), so the thread evaluates the newest model as soon
as the previous evaluation ends, and a slow ``evaluate`` makes the curve
sparser instead of piling up copies of the model. Each result comes with
when its evaluation began and ended (``time.time()``) and the thread's CPU
seconds, which the server reports (``eval_time_s``, ``eval_share``).

The workload the thread evaluates with must not be used by anyone else
meanwhile (a workload is not thread-safe): the server uses its own only to
evaluate, so it hands it over; the own-loop server (``hetsync.init``)
evaluates the user's ``evaluate`` on a copy of the user's module
(:meth:`hetsync.loop.ModuleModel.evaluator`), whose ``snapshot`` also takes
the workers' running statistics at the time of the copy.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

Evaluated = tuple[float, dict[str, float], int]  # (time of the copy, metrics, model version)


@dataclass(frozen=True, slots=True)
class Spent:
    """One evaluation's cost: when it began and ended (``time.time()``) and the CPU seconds its thread used."""

    began: float
    ended: float
    cpu_s: float


class BackgroundEvaluator:
    def __init__(
        self,
        evaluate: Callable[[Any], dict[str, float]],
        *,
        snapshot: Callable[[torch.Tensor], Any] | None = None,
    ) -> None:
        """``evaluate(snapshot(model))`` runs on the thread; ``snapshot`` runs
        in :meth:`submit`, on the caller's thread (default: a copy of the model)."""
        self._evaluate = evaluate
        self._snapshot = snapshot if snapshot is not None else (lambda model: model.detach().clone())
        self._cv = threading.Condition()
        self._next: tuple[float, Any, int] | None = None  # the one slot: asked for, not begun
        self._closed = False
        self._done: queue.Queue[tuple[Evaluated | BaseException, Spent]] = queue.Queue()
        self.pending = 0  # asked for and not yet collected
        self.last_s: float | None = None  # the time of the last copy asked for
        self.skipped = 0  # asked for, then replaced by a newer one before it began
        self.spent: list[Spent] = []  # of the results collected, in order
        self._thread = threading.Thread(target=self._serve, name="evaluator", daemon=True)
        self._thread.start()

    def submit(self, now_s: float, model: torch.Tensor, version: int) -> None:
        """Evaluate ``model`` as it is now (it is copied here); it replaces an
        evaluation asked for before that has not begun yet."""
        self.last_s = now_s
        job = (now_s, self._snapshot(model), version)
        with self._cv:
            if self._next is not None:
                self.skipped += 1
            else:
                self.pending += 1
            self._next = job
            self._cv.notify()

    def ready(self) -> list[Evaluated]:
        """The results finished so far, oldest first (re-raises an evaluation's error)."""
        out = []
        while True:
            try:
                item = self._done.get_nowait()
            except queue.Empty:
                return out
            out.append(self._take(item))

    def drain(self) -> list[Evaluated]:
        """Wait for every result asked for; oldest first."""
        out = []
        while self.pending:
            out.append(self._take(self._done.get()))
        return out

    def close(self) -> None:
        """End the thread once the evaluation it runs, if any, ends; one not begun is dropped."""
        with self._cv:
            self._closed, self._next = True, None
            self._cv.notify()
        self._thread.join(timeout=60)

    def _take(self, item: tuple[Evaluated | BaseException, Spent]) -> Evaluated:
        result, spent = item
        with self._cv:
            self.pending -= 1
        self.spent.append(spent)
        if isinstance(result, BaseException):
            raise result
        return result

    def _serve(self) -> None:
        torch.set_num_threads(1)  # (per thread: as the server process)
        while True:
            with self._cv:
                while self._next is None and not self._closed:
                    self._cv.wait()
                if self._next is None:
                    return
                (now_s, copy, version), self._next = self._next, None
            began, cpu0 = time.time(), time.thread_time()
            try:
                result: Any = (now_s, self._evaluate(copy), version)
            except BaseException as error:  # handed to the loop, which raises it there
                result = error
            self._done.put((result, Spent(began, time.time(), time.thread_time() - cpu0)))
