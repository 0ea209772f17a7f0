"""A worker's link to rank 0: the world group, or a pairwise session.

Every worker that starts with the job talks to rank 0 over the static world
group (:class:`WorldLink`, rank ``w + 1``), as it always has. A worker that
comes back after its process died (issue 30 item 2, docs/membership.md)
cannot enter that group again: gloo's world is fixed when it forms. It
opens a **pairwise session** instead (:class:`SessionLink`): a two-member
gloo group, rank 0 the server and rank 1 the worker, built over its own
prefix of the TCPStore rank 0 already hosts
(``hetsync/session/{w}/{epoch}``), without touching the world group — the
shape torchft's parameter server gives each client. Measured here (torch
2.13 CPU, loopback): the group forms in 0.05-0.3 s, and a receive from a
peer whose process dies fails within milliseconds (``Connection closed by
peer``), as a world-group receive from a named rank does.

The protocol: the restarted worker connects a store client, writes
``hetsync/join/{w}`` = its epoch (1, 2, …: how many times it came back)
and builds its side of the session (:func:`join_session`); on rank 0 a
:class:`JoinWatcher` thread polls those keys, builds the server's side for
each new epoch, and hands the session to the server (which starts a
receiver on it and tells its loop). The channel (:class:`~hetsync.runtime.protocol.Channel`)
and the sends of both sides go through a link, whichever it is.

A user's own loop comes back the same way (``hetsync launch
--max-worker-restarts``: :func:`hetsync.runtime.process.come_back`), and so does a
worker that joins a job started with ``--nproc-max`` later (``hetsync launch
--join OUT``, epoch 1): the server counted it from the start, absent
(:func:`absent_at_start`), and it has no rank in the world group.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

import torch
import torch.distributed as dist

from hetsync.runtime.config import REJOIN_ENV

if TYPE_CHECKING:
    from hetsync.runtime.config import ProcessOptions
    from hetsync.scenario import Scenario

SESSION_TIMEOUT = timedelta(days=1)  # as the world group's: a worker waits for commands as long as the server takes
POLL_S = 0.05  # how often rank 0 looks for workers that came back
TAG = 0  # the control stream's tag (as on the world group)


def join_key(worker: int) -> str:
    return f"hetsync/join/{worker}"


def session_prefix(worker: int, epoch: int) -> str:
    return f"hetsync/session/{worker}/{epoch}"


class Link(Protocol):
    """Where a worker's messages to and from rank 0 go."""

    def send(self, t: torch.Tensor) -> None: ...
    def isend(self, t: torch.Tensor) -> Any: ...  # a Work: is_completed(), wait()
    def recv(self, t: torch.Tensor) -> None: ...


@dataclass(frozen=True, slots=True)
class WorldLink:
    """The static world group: the peer is rank ``rank``."""

    rank: int

    def send(self, t: torch.Tensor) -> None:
        dist.send(t, dst=self.rank)

    def isend(self, t: torch.Tensor) -> Any:
        return dist.isend(t, dst=self.rank)

    def recv(self, t: torch.Tensor) -> None:
        dist.recv(t, src=self.rank)


@dataclass(frozen=True, slots=True)
class SessionLink:
    """A pairwise session: a two-member gloo group; the peer is its other rank."""

    pg: Any  # torch.distributed.ProcessGroupGloo
    peer: int  # 1 on the server's side, 0 on the worker's
    epoch: int

    def send(self, t: torch.Tensor) -> None:
        self.pg.send([t], self.peer, TAG).wait()

    def isend(self, t: torch.Tensor) -> Any:
        return self.pg.send([t], self.peer, TAG)

    def recv(self, t: torch.Tensor) -> None:
        self.pg.recv([t], self.peer, TAG).wait()


@dataclass(frozen=True, slots=True)
class Rejoined:
    """A worker came back: its session, when it announced itself (``time.time()``), and the session's set-up time."""

    link: SessionLink
    came: float
    setup_s: float


def rejoins(scenario: Scenario, opts: ProcessOptions) -> bool:
    """Whether workers of this run may come back or join (the scenario's
    ``membership`` joins, ``--max-worker-restarts``, ``--nproc-max``)."""
    joins = any(a.join_s is not None for a in scenario.cluster.membership)
    return opts.max_worker_restarts > 0 or opts.joinable > 0 or joins


def absent_at_start(scenario: Scenario, joinable: int = 0) -> list[int]:
    """The workers that start absent (they join later): those the scenario's
    ``membership`` has start so, and the last ``joinable`` ones (``hetsync
    launch --nproc-max``: they have no rank in the world group)."""
    n = scenario.cluster.workers
    late = {a.worker for a in scenario.cluster.membership if a.leave_s is None}
    return sorted(late | set(range(n - joinable, n)))


def as_link(src: int | Link) -> Link:
    """A rank of the world group as a link (links pass through)."""
    return WorldLink(src) if isinstance(src, int) else src


def open_session(store: Any, worker: int, epoch: int, *, server: bool) -> SessionLink:
    """One side of worker ``worker``'s session ``epoch`` (blocks until the other side builds its own)."""
    prefixed = dist.PrefixStore(session_prefix(worker, epoch), store)
    pg = dist.ProcessGroupGloo(prefixed, 0 if server else 1, 2, SESSION_TIMEOUT)
    return SessionLink(pg, 1 if server else 0, epoch)


def store_client(timeout_s: float) -> Any:
    """A client of the store rank 0 hosts (``MASTER_ADDR:MASTER_PORT``)."""
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    return dist.TCPStore(host, port, None, False, timedelta(seconds=timeout_s), wait_for_workers=False)


def join_session(worker: int, epoch: int, timeout_s: float) -> SessionLink:
    """A restarted worker's side: announce epoch ``epoch`` and open its session."""
    store = store_client(timeout_s)
    store.set(join_key(worker), str(epoch))
    return open_session(store, worker, epoch, server=False)


def rejoin_epoch() -> int | None:
    """This process's epoch if the launcher restarted it (``HETSYNC_REJOIN``), else None."""
    raw = os.environ.get(REJOIN_ENV)
    return int(raw) if raw else None


Opened = Callable[[int, SessionLink, float, float], None]
"""What the watcher tells the server: (worker, its session, when it was announced
(``time.time()``), seconds the session took to open)."""


class JoinWatcher:
    """Rank 0's thread that sees restarted workers announce themselves and opens their sessions."""

    def __init__(self, workers: int, on_open: Opened, *, timeout_s: float) -> None:
        self.workers = workers
        self.on_open = on_open
        self.timeout_s = timeout_s
        self.seen = [0] * workers  # each worker's last epoch
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True, name="join-watcher")

    def start(self) -> JoinWatcher:
        self.thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        store = store_client(self.timeout_s)
        keys = [join_key(w) for w in range(self.workers)]
        while not self._stop.wait(POLL_S):
            for w, key in enumerate(keys):
                if not store.check([key]):
                    continue
                epoch = new_epoch(store.get(key), self.seen[w])
                if epoch is None:
                    continue
                self.seen[w] = epoch
                # (on a thread of its own: a worker that dies before building its side would hold it)
                args = (store, w, epoch, time.time())
                threading.Thread(target=self._open, args=args, daemon=True, name=f"session-{w}-{epoch}").start()

    def _open(self, store: Any, w: int, epoch: int, came: float) -> None:
        try:
            link = open_session(store, w, epoch, server=True)
        except Exception as e:  # the worker died while it joined: a later epoch may come
            print(f"hetsync: worker {w}'s session {epoch} failed: {str(e).splitlines()[0][:160]}", flush=True)
            return
        self.on_open(w, link, came, time.time() - came)


def new_epoch(raw: bytes, seen: int) -> int | None:
    """The epoch a join key announces, if later than ``seen``."""
    try:
        epoch = int(raw.decode())
    except ValueError:
        return None
    return epoch if epoch > seen else None
