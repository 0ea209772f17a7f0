"""WBSP-overlap — the optimized WBSP of Yang, Hu, Liu, Jin, Yeung, You,
"WBSP: Addressing stragglers in distributed machine learning with worker-busy
synchronous parallel", Parallel Computing 121 (2024) 103092, in which each
worker computes and communicates in parallel (authors' code: one thread
trains, one pushes deltas and loads the pulled model).

The server is plain WBSP (``wbsp.py``): deltas are held per round, weighted
1/N and applied when every live worker has pushed in the round; the worker
whose push completes the round is its slowest; every worker is then flagged
and learns it in the reply to its next push. Late deltas, including the ones
a flagged worker pushes before it pulls, go to the next round. Local steps
use ``lr``; deltas are weighted 1/N.

The worker side differs:

- Compute never stops: every finished step immediately starts the next one
  (local SGD at ``lr`` on the live model): the steps are
  ``Compute(continuous=True)``, so on real processes the next step does not
  wait for a word from the server either.
- A background channel pushes deltas, at most one push in flight per worker:
  a finished step is pushed at once if the channel is idle; when a push is
  answered, whatever accumulated meanwhile (possibly several steps, as one
  delta) is pushed next. An idle channel with nothing to send stays idle.
- When the reply to a push says "flagged", the worker pushes whatever has
  accumulated and starts the pull at the same instant (the push goes up and
  the pull comes down, so they do not share a link direction). Every step
  finished before the pull starts is thereby kept, and the channel keeps
  pushing while the pull is in flight. When the new global model arrives it
  replaces the live model: steps finished after the last push started are
  overwritten, and the driver counts them as dropped. A step in progress at
  that moment finishes on the new model (its gradient, computed on the old
  one, is applied to the loaded model) — as when the authors' two threads
  share one model. Pushing first costs nothing here, while pulling first
  would lose every step of the push in flight. In the simulator the push
  sent with the pull and the pull itself take equally long on symmetric
  links, and transfers that land at the same instant are delivered in start
  order, so the push is answered first and the steps finished meanwhile are
  pushed just before the new model lands: on such links no step is lost. On
  a slower uplink the pull lands first and those steps are dropped.
- A flag that arrives while a pull is already in flight is served at the
  first push reply after that pull lands.
- A worker that joins waits for the open round to close, as under WBSP, then
  pulls that close's version and trains nonstop from it.

The authors' training thread (``wk_pcc_v2.py``) starts no new step while a
pull is in progress, so it idles for the download but loses at most the step
in progress; this policy follows docs/architecture.md §4 (the worker trains
continuously), which hides the download as well at the price of a few
dropped steps — the summary's ``dropped_steps`` shows how many.

Optimizer state (hetsync.recipe): each worker's optimizer (the scenario's
``optimizer``, or ``local_optimizer``) takes the local steps and keeps its
state across pulls — a pull replaces the parameters, not the momentum or Adam
moments, which describe the worker's own data stream and would restart from
zero if reset. The server steps on the averaged pseudo-gradient with
``outer_optimizer`` (default plain SGD at 1.0: plain averaging), whose state
lives on the server.
"""

from __future__ import annotations

from hetsync.policies.base import (
    Command,
    Compute,
    ComputeDone,
    Event,
    PolicyContext,
    Pull,
    PullDone,
    Push,
    PushArrived,
    WorkerJoined,
    WorkerLeft,
)
from hetsync.policies.wbsp import WBSP


class WBSPOverlap(WBSP):
    name = "wbsp-overlap"
    summary = "WBSP with compute and communication in parallel: train nonstop, push/pull in the background"

    def __init__(self, ctx: PolicyContext, **params: object) -> None:
        super().__init__(ctx, **params)
        # mirrors the driver: steps finished since the worker's last push or pull
        self.unpushed = [0] * self.n
        self.pushing = [False] * self.n
        self.pulling = [False] * self.n

    def _compute(self, w: int) -> Compute:
        return Compute(worker=w, batch_size=self.ctx.batch_size, local_lr=self.ctx.lr, continuous=True)

    def _push(self, w: int) -> Push:
        self.pushing[w] = True
        self.unpushed[w] = 0
        return Push(worker=w, kind="delta")

    def on_event(self, event: Event) -> list[Command]:
        if isinstance(event, ComputeDone):
            w = event.worker
            self.unpushed[w] += 1  # (the next step is already under way: continuous)
            return [] if self.pushing[w] else [self._push(w)]
        if isinstance(event, PushArrived):
            w = event.worker
            self.pushing[w] = False
            commands = self._receive(event)
            pull = w in self.flagged and not self.pulling[w]
            if self.unpushed[w]:
                commands.append(self._push(w))
            if pull:
                self.flagged.discard(w)
                self.pulling[w] = True
                commands.append(Pull(worker=w))
            return commands
        if isinstance(event, PullDone):
            w = event.worker
            self.pulling[w] = False
            self.unpushed[w] = 0  # the driver overwrote them (counted as dropped)
            return []
        if isinstance(event, WorkerLeft):
            self._reset_channel(event.worker)
            return self._leave(event.worker)
        if isinstance(event, WorkerJoined):
            return self._join(event.worker)
        return []

    def _reset_channel(self, w: int) -> None:
        """Forget ``w``'s channel: it left (its pushes and pull in flight went with it) or is back."""
        self.unpushed[w] = 0
        self.pushing[w] = self.pulling[w] = False

    def _join(self, w: int) -> list[Command]:
        self._reset_channel(w)
        return super()._join(w)

    def _rejoin(self, w: int) -> list[Command]:
        """The joiner pulls the close's version and trains nonstop from it."""
        self.pulling[w] = True
        return [Pull(worker=w, then=self._compute(w))]
