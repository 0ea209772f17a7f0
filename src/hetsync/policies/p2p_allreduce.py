"""p2p-allreduce — every worker averages with every other: the peer-to-peer
form of all-reduce data parallelism (PyTorch DDP), the baseline SELMCAST
(Luo et al., IEEE Trans. Services Computing 2024) is measured against.

- ``sync=bsp``: after each round's steps the live workers run a ring
  all-reduce of their models (Patarasuk & Yuan 2009: 2(N−1) phases, each
  moving 1/N of the model from every worker to its ring successor), so every
  worker ends the round with the exact average — with equal batches this is
  synchronous SGD with the batch N·b, like DDP. Its time is set by the
  slowest link in the ring.
- ``sync=ssp``: a collective needs everyone at once, which SSP does not
  have; each worker instead multicasts its model to all the others after its
  step (p = N − 1) and mixes what arrives, within the round gap s.

Optimizer state: each worker keeps its own (``optimizer``/``local_optimizer``) across
exchanges, which average parameters only (see p2p_base).
"""

from __future__ import annotations

from hetsync.policies.base import AllReduce, Command
from hetsync.policies.p2p_base import PeerPolicy


class P2PAllReduce(PeerPolicy):
    name = "p2p-allreduce"
    summary = "peer to peer: everyone averages everyone (ring all-reduce under bsp)"

    def receivers(self, senders: list[int], now_s: float) -> dict[int, tuple[int, ...]]:
        live = sorted(self.alive)
        return {i: tuple(j for j in live if j != i) for i in senders}

    def bsp_exchange(self, senders: list[int], now_s: float) -> list[Command]:
        if len(senders) < 2:
            return []
        self.reducing = tuple(senders)
        return [AllReduce(workers=self.reducing)]
