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

The workload the thread evaluates with must not be used by anyone else
meanwhile (a workload is not thread-safe): the server uses its own only to
evaluate, so it hands it over; the own-loop server (``hetsync.init``) calls
the user's ``evaluate`` on the loop instead.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

import torch

Evaluated = tuple[float, dict[str, float], int]  # (time of the copy, metrics, model version)


class BackgroundEvaluator:
    def __init__(self, evaluate: Callable[[torch.Tensor], dict[str, float]]) -> None:
        self._evaluate = evaluate
        self._jobs: queue.Queue[tuple[float, torch.Tensor, int] | None] = queue.Queue()
        self._done: queue.Queue[Evaluated | BaseException] = queue.Queue()
        self.pending = 0  # asked for and not yet collected
        self.last_s: float | None = None  # the time of the last copy asked for
        self._thread = threading.Thread(target=self._serve, name="evaluator", daemon=True)
        self._thread.start()

    def submit(self, now_s: float, model: torch.Tensor, version: int) -> None:
        """Evaluate ``model`` as it is now (it is copied here)."""
        self.pending += 1
        self.last_s = now_s
        self._jobs.put((now_s, model.detach().clone(), version))

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
        self._jobs.put(None)
        self._thread.join(timeout=60)

    def _take(self, item: Evaluated | BaseException) -> Evaluated:
        self.pending -= 1
        if isinstance(item, BaseException):
            raise item
        return item

    def _serve(self) -> None:
        torch.set_num_threads(1)  # (per thread: as the server process)
        while (job := self._jobs.get()) is not None:
            now_s, model, version = job
            try:
                result: Any = (now_s, self._evaluate(model), version)
            except BaseException as error:  # handed to the loop, which raises it there
                result = error
            self._done.put(result)
