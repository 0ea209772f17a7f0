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
covers all senders of the round at once; under ``sync=ssp`` it is made for
one sender when its step ends, with the coordinator's estimate of the
backlog still on every link.

Optimizer state: each worker keeps its own (``optimizer``/``local_optimizer``) across
exchanges, which average parameters only (see p2p_base).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from hetsync.algos.selmcast import select_receivers
from hetsync.policies.base import Command, ComputeDone, Event, PolicyContext, param, state_list
from hetsync.policies.p2p_base import MulticastConfig, PeerPolicy


@dataclass(frozen=True, kw_only=True)
class SelmcastConfig(MulticastConfig):
    bandwidth: str = param(
        "worst",
        help="plan on each link's latest reported bandwidth, or the worst it has reported",
        choices=("latest", "worst"),
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

    def on_event(self, event: Event) -> list[Command]:
        if isinstance(event, ComputeDone):
            w = event.worker
            first = self.worst_up_Bps[w] == math.inf
            self.worst_up_Bps[w] = event.uplink_Bps if first else min(self.worst_up_Bps[w], event.uplink_Bps)
            first = self.worst_down_Bps[w] == math.inf
            self.worst_down_Bps[w] = event.downlink_Bps if first else min(self.worst_down_Bps[w], event.downlink_Bps)
        return super().on_event(event)

    # checkpoints: the worst bandwidth each link has reported (None: none yet)
    def state_dict(self) -> dict[str, Any]:
        return {
            "worst_up_Bps": [None if math.isinf(x) else x for x in self.worst_up_Bps],
            "worst_down_Bps": [None if math.isinf(x) else x for x in self.worst_down_Bps],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key in ("worst_up_Bps", "worst_down_Bps"):
            values = state_list(self.name, state, key, self.n)
            setattr(self, key, [math.inf if x is None else float(x) for x in values])

    def receivers(self, senders: list[int], now_s: float) -> dict[int, tuple[int, ...]]:
        p = min(self.config.p, len(self.alive) - 1)
        busy_up, busy_down = self.busy_s(now_s)
        nbytes = float(max(self.ctx.model_bytes, 1))
        if self.config.bandwidth == "worst":
            up, down = self.worst_up_Bps, self.worst_down_Bps
        else:
            up, down = self.uplink_Bps, self.downlink_Bps
        plan = select_receivers(
            up, down, nbytes, p, senders=senders, eligible=sorted(self.alive), busy_up_s=busy_up, busy_down_s=busy_down
        )
        return {i: plan[i] for i in senders}
