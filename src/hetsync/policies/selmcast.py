"""SELMCAST — bandwidth-aware selective multicast for peer-to-peer training
(Luo, Fan, Li, Xing, Luo, Yu, IEEE Trans. Services Computing 2024,
doi 10.1109/TSC.2024.3506480).

A coordinator with the global view — every worker's available uplink and
downlink bandwidth, and the transfers it has already put on each link —
chooses each sender's receivers: at least p of them, minimizing the
communication makespan of the exchange, then as many more as fit without
lengthening it (:func:`hetsync.algos.selmcast.select_receivers`). Fast
links therefore carry more copies and slow ones only what they must, which
(i) shortens synchronization, so compute is used more, and (ii) raises the
average number of receivers per sender, so the models mix faster.

Only the abstract of the paper could be read; the cost model (link time =
backlog + copies × model bytes / bandwidth, the bottleneck bound of a fluid
network), the exact-p-then-extras search and the round structure (see
:mod:`hetsync.policies.p2p_base`) are ours. Under ``sync=bsp`` the plan
covers all senders of the round at once. Under ``sync=ssp`` a plan made for
one sender alone is bounded by that sender's uplink, so extra receivers
rarely fit; with ``window_s > 0`` the coordinator, when a step ends and no
window is open, opens one: it holds the senders whose steps end within
``window_s`` (a ``SetTimer``, never a clock) and then plans them together,
with the coordinator's estimate of the backlog still on every link. The
window closes early once no live worker is still computing (nobody else
can join), and a sender waits at most ``window_s`` before its multicast
starts, so rounds lengthen by at most that. ``window_s=0`` plans each
sender alone when its step ends.

Fairness floor (``floor``, ours): choosing by bandwidth alone sends most
copies to the fast downlinks and few or none to slow ones, so the workers
behind fast links dominate every average, and on label-skewed shards the
mixed model suffers (docs/results-p2p-mixing.md). With ``floor = f`` every
live worker receives at least ``f·p`` copies per round: a deficit counter
(:func:`hetsync.algos.selmcast.floor_demand`) owes each worker ``f·p``
copies per n − 1 multicasts by the others, and each plan must deliver the
whole copies owed before bandwidth ranks the rest. Under BSP that is
``f·p`` copies for every worker in every exchange; with ``f = 1`` (the
default) the exactly-p part of the exchange is then p-regular (every worker
receives as many copies as it sends) and the extras come on top. Under SSP
a worker is promoted into the next sender's plan once it is owed a whole
copy. ``floor = 0`` is the paper's bandwidth-only choice.

Optimizer state: each worker keeps its own (``optimizer``/``local_optimizer``) across
exchanges, which average parameters only (see p2p_base).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from hetsync.algos.selmcast import floor_demand, floor_owed, select_receivers
from hetsync.policies.base import (
    Command,
    ComputeDone,
    Event,
    PolicyContext,
    SetTimer,
    TimerFired,
    WorkerLeft,
    param,
    state_list,
)
from hetsync.policies.p2p_base import MulticastConfig, PeerPolicy


@dataclass(frozen=True, kw_only=True)
class SelmcastConfig(MulticastConfig):
    bandwidth: str = param(
        "worst",
        help="plan on each link's latest reported bandwidth, or the worst it has reported",
        choices=("latest", "worst"),
    )
    window_s: float = param(
        0.0,
        help="ssp: wait up to this long after a step ends for other senders, then plan them together (0: alone)",
        ge=0.0,
        le=3600.0,
    )
    floor: float = param(
        1.0,
        help="fairness floor: every live worker receives at least floor*p copies per round (0: bandwidth alone)",
        ge=0.0,
        le=1.0,
    )


class Selmcast(PeerPolicy):
    name = "selmcast"
    summary = "peer to peer: bandwidth-aware receivers, >= p each, more where free"
    config_class = SelmcastConfig
    config: SelmcastConfig

    def __init__(self, ctx: PolicyContext, **params: object) -> None:
        super().__init__(ctx, **params)
        self.worst_up_Bps = [math.inf] * self.n
        self.worst_down_Bps = [math.inf] * self.n
        # ssp planning window: senders held back, and the tag of the open window's timer
        self.window_s = self.config.window_s if self.sync == "ssp" else 0.0
        self.waiting: list[int] = []
        self.windows = 0  # windows opened; the open one's timer carries this count
        self.window_open = False
        # fairness floor: copies each worker is still owed (floor_demand / floor_owed)
        self.owed_copies = [0.0] * self.n

    @property
    def label(self) -> str:
        shown = super().label
        if self.config.floor == 0:  # the paper's choice: labelled as before the floor existed
            shown = shown.replace(",floor=0.0", "")
        if self.sync == "ssp" and self.window_s > 0:
            return shown
        return shown.replace(f",window_s={self.config.window_s!r}", "")

    def on_event(self, event: Event) -> list[Command]:
        if isinstance(event, ComputeDone):
            w = event.worker
            first = self.worst_up_Bps[w] == math.inf
            self.worst_up_Bps[w] = event.uplink_Bps if first else min(self.worst_up_Bps[w], event.uplink_Bps)
            first = self.worst_down_Bps[w] == math.inf
            self.worst_down_Bps[w] = event.downlink_Bps if first else min(self.worst_down_Bps[w], event.downlink_Bps)
        if isinstance(event, TimerFired):
            if self.window_open and event.tag == self._tag():
                return self._close_window(event.now_s)
            return []
        cmds = super().on_event(event)
        if isinstance(event, WorkerLeft) and self.window_open:
            self.waiting = [w for w in self.waiting if w in self.alive]
            if not self.waiting or not self._computing():
                cmds += self._close_window(event.now_s)
        return cmds

    # ------------------------------------------------------- ssp window
    def _tag(self) -> str:
        return f"selmcast-window-{self.windows}"

    def _computing(self) -> set[int]:
        """Live workers whose step may still end (neither held, blocked nor sending)."""
        return self.alive - set(self.waiting) - self.blocked - set(self.out)

    def ssp_step_done(self, w: int, now_s: float) -> list[Command]:
        if self.window_s <= 0:
            return super().ssp_step_done(w, now_s)
        self.waiting.append(w)
        if not self._computing():  # nobody else can join: plan now
            return self._close_window(now_s)
        if self.window_open:
            return []
        self.window_open = True
        self.windows += 1
        return [SetTimer(at_s=now_s + self.window_s, tag=self._tag())]

    def _close_window(self, now_s: float) -> list[Command]:
        senders = sorted(w for w in self.waiting if w in self.alive)
        self.waiting = []
        self.window_open = False  # its timer, if still pending, is ignored when it fires
        return self.ssp_send(senders, now_s) if senders else []

    # checkpoints: the worst bandwidth each link has reported (None: none yet),
    # and the floor's deficit counter
    def state_dict(self) -> dict[str, Any]:
        return {
            "worst_up_Bps": [None if math.isinf(x) else x for x in self.worst_up_Bps],
            "worst_down_Bps": [None if math.isinf(x) else x for x in self.worst_down_Bps],
            "owed_copies": list(self.owed_copies),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key in ("worst_up_Bps", "worst_down_Bps"):
            values = state_list(self.name, state, key, self.n)
            setattr(self, key, [math.inf if x is None else float(x) for x in values])
        if "owed_copies" in state:  # absent from checkpoints written before the floor
            self.owed_copies = [float(x) for x in state_list(self.name, state, "owed_copies", self.n)]

    def receivers(self, senders: list[int], now_s: float) -> dict[int, tuple[int, ...]]:
        p = min(self.config.p, len(self.alive) - 1)
        busy_up, busy_down = self.busy_s(now_s)
        nbytes = float(max(self.ctx.model_bytes, 1))
        if self.config.bandwidth == "worst":
            up, down = self.worst_up_Bps, self.worst_down_Bps
        else:
            up, down = self.uplink_Bps, self.downlink_Bps
        alive = sorted(self.alive)
        need, want = (None, None)
        if self.config.floor > 0:
            need, want = floor_demand(self.owed_copies, self.config.floor * p, p, senders=senders, eligible=alive)
        plan = select_receivers(
            up,
            down,
            nbytes,
            p,
            senders=senders,
            eligible=alive,
            busy_up_s=busy_up,
            busy_down_s=busy_down,
            min_in=need,
        )
        if want is not None:
            self.owed_copies = floor_owed(want, plan, eligible=alive)
        return {i: plan[i] for i in senders}
