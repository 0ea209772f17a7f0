"""p2p-random — each sender multicasts to exactly p receivers drawn uniformly
at random, ignoring bandwidth: the state of the art SELMCAST (Luo et al.,
IEEE Trans. Services Computing 2024) improves on, as in Epidemic Learning
(de Vos et al., NeurIPS 2023: every node sends to s random others and
averages what it receives). Training converges as long as every worker keeps
taking part; a larger p converges faster. With fewer than p + 1 live workers
each sends to all the others.

Optimizer state: each worker keeps its own (``optimizer``/``local_optimizer``) across
exchanges, which average parameters only (see p2p_base).
"""

from __future__ import annotations

from typing import Any

from hetsync.algos.selmcast import random_receivers
from hetsync.policies.p2p_base import MulticastConfig, PeerPolicy


class P2PRandom(PeerPolicy):
    name = "p2p-random"
    summary = "peer to peer: each sender picks exactly p random receivers"
    config_class = MulticastConfig
    config: MulticastConfig

    # checkpoints: the random stream, so the resumed run draws the receivers it would have drawn
    def state_dict(self) -> dict[str, Any]:
        return {"rng": dict(self.ctx.rng.bit_generator.state)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.ctx.rng.bit_generator.state = state["rng"]

    def receivers(self, senders: list[int], now_s: float) -> dict[int, tuple[int, ...]]:
        p = min(self.config.p, len(self.alive) - 1)
        plan = random_receivers(self.n, p, self.ctx.rng, senders=senders, eligible=sorted(self.alive))
        return {i: plan[i] for i in senders}
