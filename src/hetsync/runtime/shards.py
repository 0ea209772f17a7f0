"""Sharded servers: the global model split into S shards held by S processes.

On the parameter-server path one Python process receives every push and sends
every model; at 12M–50M parameters that process, not the network, bounds an
asynchronous policy (ASP, SSP, DSSP, ElasticBSP's pushes, WBSP's pushes),
whose exchanges are not rounds the collective path can reduce. With
``--servers S`` the flat model is cut into S contiguous ranges
(:func:`shard_ranges`, in :mod:`hetsync.driver.shards` with the refusals, shared
with the simulator): rank 0 holds the first and still runs the policy, the
ledger and every command (the control plane: small messages); ranks N+1 …
N+S−1 (after the N workers) hold the others and only store, apply and send
their range, as BytePS's summation servers and ps-lite's key ranges do:

- a worker's push sends range 0 with its report to rank 0 and range k to
  server k, from the thread that sends its reports, so every server sees
  each worker's pushes in the order rank 0 does: the n-th push of worker w
  is ``(w, n)`` everywhere (:meth:`ShardClient.apply` names them so);
- when the policy applies pushes, rank 0 applies range 0 (the ledger) and
  tells every server to apply the same pushes with the same weights,
  learning rate and optimizer (its own copy over its range: the scenario's
  optimizer for gradients, the policy's outer one for deltas — both act
  element by element, so S optimizers over S ranges take the step one
  would take over the whole);
- a pull sends range 0 with the command, and rank 0 tells every server to
  send its range to that worker; the worker, which posts those receives as
  it reads the command (in command order), assembles the model;
- to evaluate or save, rank 0 fetches every range: each server answers in
  the order it was told to apply, so the model is the one at rank 0's version.

What cannot be split is refused before any process starts
(:func:`check_servers`): gradient clipping by the global norm (no server sees
the whole gradient), delay compensation (the base models would be split
too), peer-to-peer policies and the collective path (no server holds a
model), and a user's own training loop (its optimizer lives in the module).

A checkpoint holds the whole model and the whole optimizer states, as an
unsharded run's does: rank 0 fetches every range and every server's
optimizer states (:meth:`ShardClient.states`) and joins them
(:func:`join_states`: the optimizers act element by element); a resumed run
hands each server its ranges of both (:meth:`ShardClient.load_states`), so
it may even resume with another number of servers.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from hetsync.driver.shards import MAX_SERVERS as MAX_SERVERS  # (moved to the driver core; imported from here too)
from hetsync.driver.shards import check_servers as check_servers
from hetsync.driver.shards import server_rank as server_rank
from hetsync.driver.shards import shard_ranges as shard_ranges
from hetsync.ledger import update_model

HDR = 8  # float64 slots of a control message from rank 0 to a server
S_RESET, S_APPLY, S_DROP, S_PULL, S_FETCH, S_EXIT, S_STATE, S_LOAD = 1, 2, 3, 4, 5, 6, 7, 8
KIND_CODES = {"grad": 1.0, "delta": 2.0}
KIND_NAMES = {1: "grad", 2: "delta"}
SLICE_WAIT_S = 60.0  # a push slice that has not come this long after rank 0 applied it: counted as zero


def _header(kind: int, *values: float) -> torch.Tensor:
    hdr = torch.zeros(HDR, dtype=torch.float64)
    hdr[0] = kind
    for i, v in enumerate(values, start=1):
        hdr[i] = v
    return hdr


def _per_element(value: Any, n: int) -> bool:
    """Whether an optimizer's state entry holds one value per element of an
    ``n``-element flat model (momentum, Adam's moments), not a scalar (its step)."""
    return isinstance(value, torch.Tensor) and value.dim() >= 1 and value.numel() == n


def join_states(parts: Sequence[dict[str, Any]], sizes: Sequence[int]) -> dict[str, Any]:
    """One optimizer state over the whole flat model from the states of the
    optimizers over its ranges (``sizes``, in order): the optimizers act
    element by element, so each per-element entry is its ranges' end to end
    and the rest (the step count, the settings) is the same everywhere — the
    first range's. {} while none has any."""
    if not any(parts):
        return {}
    first = parts[0]
    joined = {**first, "state": {}}
    for key, entry in first.get("state", {}).items():
        joined["state"][key] = {
            name: torch.cat([part["state"][key][name] for part in parts]) if _per_element(value, sizes[0]) else value
            for name, value in entry.items()
        }
    return joined


def slice_state(state: dict[str, Any], lo: int, hi: int, n: int) -> dict[str, Any]:
    """The part of an optimizer state over an ``n``-element flat model that an
    optimizer over its range [lo, hi) holds (:func:`join_states` undone)."""
    if not state:
        return {}
    return {
        **state,
        "state": {
            key: {name: value[lo:hi].clone() if _per_element(value, n) else value for name, value in entry.items()}
            for key, entry in state.get("state", {}).items()
        },
    }


def unfinished(
    sends: list[tuple[Any, Any]], *, wait: bool = False, limit_s: float | None = None
) -> list[tuple[Any, Any]]:
    """The (send, what it keeps alive) pairs still in flight; ``wait``: wait for
    each first (a receiver that died ends its send with an error, which its
    own receive reports), so none are. Given ``limit_s`` the wait ends then
    and the sends a live but stuck receiver has not taken stay with a waiter
    thread (which keeps them alive): the caller goes on without them. (A
    gloo send is ``is_completed()`` only once waited on, and a wait with a
    timeout closes its connection: hence the thread.)"""
    if wait and limit_s is not None:
        waiter = threading.Thread(target=unfinished, args=(sends,), kwargs={"wait": True}, daemon=True)
        waiter.start()
        waiter.join(limit_s)
        return []
    keep = []
    for work, kept in sends:
        if wait:
            try:
                work.wait()
            except Exception:
                continue
        elif not work.is_completed():
            keep.append((work, kept))
    return keep


class ShardClient:
    """Rank 0's side: the control messages to servers 1 … S−1."""

    def __init__(self, ranges: list[tuple[int, int]], workers: int) -> None:
        self.ranges = ranges
        self.workers = workers
        self._sends: list[tuple[Any, tuple[torch.Tensor, ...]]] = []

    @property
    def others(self) -> range:
        return range(1, len(self.ranges))

    def _post(self, k: int, *tensors: torch.Tensor) -> None:
        dst = server_rank(k, self.workers)
        for t in tensors:
            self._sends.append((dist.isend(t, dst=dst), tensors))
        self.reap()

    def reap(self, wait: bool = False) -> None:
        self._sends = unfinished(self._sends, wait=wait)

    def reset(self, run: int, version: int, theta: torch.Tensor, floors: Sequence[int]) -> None:
        """A run starts from ``theta`` (the whole model) at ``version``; each
        worker's pushes from now on are numbered from ``floors[w]``."""
        for k in self.others:
            lo, hi = self.ranges[k]
            hdr = _header(S_RESET, run, version, len(floors))
            self._post(k, hdr, torch.tensor(list(floors), dtype=torch.float64), theta[lo:hi].contiguous())

    def apply(self, kind: str, lr: float, implicit_momentum: float, parts: Sequence[tuple[int, int, float]]) -> None:
        """Apply the pushes ``parts`` ((worker, its push number, weight))."""
        listed = torch.tensor([x for part in parts for x in part], dtype=torch.float64)
        for k in self.others:
            self._post(k, _header(S_APPLY, KIND_CODES[kind], lr, implicit_momentum, len(parts)), listed)

    def drop(self, keys: Sequence[tuple[int, int]]) -> None:
        listed = torch.tensor([x for key in keys for x in key], dtype=torch.float64)
        for k in self.others:
            self._post(k, _header(S_DROP, len(keys)), listed)

    def pull(self, worker: int) -> None:
        """Every server sends its range to ``worker`` (as its pull's rest)."""
        for k in self.others:
            self._post(k, _header(S_PULL, worker))

    def fetch(self) -> list[torch.Tensor]:
        """Every server's range as of the last command it was sent."""
        for k in self.others:
            self._post(k, _header(S_FETCH))
        out = []
        for k in self.others:
            lo, hi = self.ranges[k]
            buf = torch.empty(hi - lo)
            dist.recv(buf, src=server_rank(k, self.workers))
            out.append(buf)
        return out

    def states(self) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """Every server's optimizer states (the scenario's, the policy's outer
        one) over its range, as of the last command it was sent."""
        for k in self.others:
            self._post(k, _header(S_STATE))
        out = []
        for k in self.others:
            got: list[Any] = [None, None]
            dist.recv_object_list(got, src=server_rank(k, self.workers))
            out.append((got[0], got[1]))
        return out

    def load_states(self, optimizer_state: dict[str, Any], outer_state: dict[str, Any]) -> None:
        """A resumed run: every server's optimizers go on from their ranges of
        the checkpoint's (whole-model) states (after :meth:`reset`)."""
        n = self.ranges[-1][1]
        for k in self.others:
            lo, hi = self.ranges[k]
            self._post(k, _header(S_LOAD))
            parts = [slice_state(optimizer_state, lo, hi, n), slice_state(outer_state, lo, hi, n)]
            dist.send_object_list(parts, dst=server_rank(k, self.workers))

    def exit(self) -> None:
        for k in self.others:
            self._post(k, _header(S_EXIT))
        self.reap(wait=True)


def split_push(payload: torch.Tensor, ranges: list[tuple[int, int]], workers: int) -> tuple[torch.Tensor, list[Any]]:
    """A worker's push: range 0 (for rank 0, with the report) and the sends of the others, started."""
    works = []
    for k in range(1, len(ranges)):
        lo, hi = ranges[k]
        works.append((dist.isend(payload[lo:hi].contiguous(), dst=server_rank(k, workers)), payload))
    lo, hi = ranges[0]
    return payload[lo:hi].contiguous(), works


class PendingModel:
    """A pull's model while its ranges 1 … S−1 are on their way (receives
    posted as the command was read); :meth:`whole` waits and assembles it."""

    def __init__(self, first: torch.Tensor, ranges: list[tuple[int, int]], workers: int) -> None:
        self.first = first
        self.bufs = [torch.empty(hi - lo) for lo, hi in ranges[1:]]
        self.works = [dist.irecv(buf, src=server_rank(k, workers)) for k, buf in enumerate(self.bufs, start=1)]

    def whole(self) -> torch.Tensor:
        for work in self.works:
            work.wait()
        return torch.cat([self.first, *self.bufs])


class ShardServer:
    """Server k (k ≥ 1): holds range k of the model, applies pushes to it
    and sends it, as rank 0 says (module docstring)."""

    def __init__(self, k: int, ranges: list[tuple[int, int]], workers: int, scenario: Any, specs: list[str]) -> None:
        self.k = k
        self.lo, self.hi = ranges[k]
        self.workers = workers
        self.sc = scenario
        self.specs = specs
        self.theta: torch.Tensor | None = None
        self.stepper: Any = None
        self.outer: Any = None
        self.slices: dict[tuple[int, int], torch.Tensor] = {}
        self.seq = [0] * workers  # the number the next push of each worker gets
        self.floors = [0] * workers  # pushes numbered below a run's floor belong to an earlier run
        self.dropped: set[tuple[int, int]] = set()  # pushes dropped before their slice came
        self.cv = threading.Condition()
        self._sends: list[tuple[Any, torch.Tensor]] = []

    def serve(self) -> None:
        for w in range(self.workers):
            threading.Thread(target=self._receive, args=(w,), daemon=True, name=f"shard-rx-{w}").start()
        while True:
            hdr = torch.empty(HDR, dtype=torch.float64)
            dist.recv(hdr, src=0)
            kind = int(hdr[0])
            if kind == S_EXIT:
                self._reap(wait=True)
                return
            if kind == S_RESET:
                self._reset(int(hdr[1]), int(hdr[2]), int(hdr[3]))
            elif kind == S_APPLY:
                self._apply(KIND_NAMES[int(hdr[1])], float(hdr[2]), float(hdr[3]), int(hdr[4]))
            elif kind == S_DROP:
                for key in self._keys(int(hdr[1]), 2):
                    self._take(key, wait=False)
            elif kind == S_PULL:
                assert self.theta is not None
                self._sends.append((dist.isend(self.theta, dst=1 + int(hdr[1])), self.theta))
            elif kind == S_FETCH:
                assert self.theta is not None
                dist.send(self.theta, dst=0)
            elif kind == S_STATE:
                dist.send_object_list([self.stepper.state_dict(), self.outer.state_dict()], dst=0)
            elif kind == S_LOAD:
                got: list[Any] = [None, None]
                dist.recv_object_list(got, src=0)
                self.stepper.load_state_dict(got[0])
                self.outer.load_state_dict(got[1])
            else:
                raise ValueError(f"server {self.k}: unknown control message {kind}")
            self._reap()

    def _receive(self, w: int) -> None:
        """Worker ``w``'s push slices, numbered in the order they come."""
        while True:
            buf = torch.empty(self.hi - self.lo)
            try:
                dist.recv(buf, src=1 + w)
            except Exception:  # the worker is gone; rank 0 sees it too
                return
            with self.cv:
                n = self.seq[w]
                self.seq[w] += 1
                if n >= self.floors[w] and (w, n) not in self.dropped:
                    self.slices[(w, n)] = buf
                self.dropped.discard((w, n))
                self.cv.notify_all()

    def _keys(self, n: int, width: int) -> list[tuple[int, int]]:
        buf = torch.empty(n * width, dtype=torch.float64)
        dist.recv(buf, src=0)
        values = [int(x) for x in buf.tolist()]
        return [(values[i], values[i + 1]) for i in range(0, len(values), width)]

    def _reset(self, run: int, version: int, n_floors: int) -> None:
        from hetsync.driver import policy_context
        from hetsync.optim import gradient_stepper, outer_stepper
        from hetsync.policies import make_policy

        floors = torch.empty(n_floors, dtype=torch.float64)
        dist.recv(floors, src=0)
        theta = torch.empty(self.hi - self.lo)
        dist.recv(theta, src=0)
        self.theta = theta
        with self.cv:
            self.floors = [int(x) for x in floors.tolist()]
            self.slices = {key: s for key, s in self.slices.items() if key[1] >= self.floors[key[0]]}
            self.dropped.clear()
        policy = make_policy(self.specs[run], policy_context(self.sc))
        self.stepper, self.outer = gradient_stepper(self.sc), outer_stepper(self.sc, policy)

    def _take(self, key: tuple[int, int], *, wait: bool = True) -> torch.Tensor | None:
        """The slice of push ``key``, once it has come (None: it did not, or ``wait`` is off and it has not yet)."""
        deadline = time.monotonic() + SLICE_WAIT_S
        with self.cv:
            while wait and key not in self.slices and self.seq[key[0]] <= key[1]:
                left = deadline - time.monotonic()
                if left <= 0:
                    print(f"server {self.k}: push {key} never came; applied as zero", file=sys.stderr, flush=True)
                    return None
                self.cv.wait(left)
            if not wait and key not in self.slices and self.seq[key[0]] <= key[1]:
                self.dropped.add(key)  # (dropped before it came)
            return self.slices.pop(key, None)

    def _apply(self, kind: str, lr: float, implicit_momentum: float, n: int) -> None:
        buf = torch.empty(n * 3, dtype=torch.float64)
        dist.recv(buf, src=0)
        values = buf.tolist()
        parts = [(self._take((int(values[i]), int(values[i + 1]))), values[i + 2]) for i in range(0, len(values), 3)]
        assert self.theta is not None
        new = update_model(
            self.theta, [(p, kind, w) for p, w in parts], lr, self.stepper, self.outer, implicit_momentum
        )
        if new is not None:
            self.theta = new

    def _reap(self, wait: bool = False) -> None:
        self._sends = unfinished(self._sends, wait=wait)
