"""LB-BSP-static — batch sizes from a one-off speed measurement (an ablation).

The ablation for LB-BSP (Chen, Weng, Wang, Li, Li, SoCC 2020, arXiv
1806.02508): the same BSP rounds and samples-weighted gradients as
``lb-bsp``, but the batch sizes are set once. The first ``rounds`` rounds
run an equal split and measure every worker's sample throughput (batch /
compute time, averaged over those rounds) and its communication time; from
then on each worker's batch is fixed by the equal-finish split of
``hetsync.algos.lbbsp.equal_finish_split`` (x_i / v_i + c_i equal, Σ x_i =
X). This is what static load balancing for a heterogeneous but dedicated
cluster does; it cannot follow load that changes during training, which is
what LB-BSP's prediction is for. Comparing the two shows what prediction
buys.

A worker that leaves: the others share X in proportion to their measured
speeds. The memory caps parameter works as in ``lb-bsp``.

Optimizer state (hetsync.recipe): only the server's ``optimizer`` steps (on
every ``Apply``, at ``lr`` times the schedule); its state — momentum, Adam
moments — lives on the server with the global model. Workers take no local
steps, so they hold no optimizer state and a pull replaces parameters only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hetsync.algos.lbbsp import equal_finish_split
from hetsync.policies.base import ComputeDone, PolicyConfig, PolicyContext, param, state_list
from hetsync.policies.lb_bsp import BalancedBSP, max_batch_param


@dataclass(frozen=True, kw_only=True)
class LBBSPStaticConfig(PolicyConfig):
    rounds: int = param(1, help="rounds of equal batches measured before the batch sizes are fixed", ge=1)
    max_batch: str = max_batch_param()


class LBBSPStatic(BalancedBSP):
    name = "lb-bsp-static"
    summary = "BSP with per-worker batch sizes fixed from the first rounds' measured speeds (LB-BSP ablation)"
    config_class = LBBSPStaticConfig
    config: LBBSPStaticConfig

    def __init__(self, ctx: PolicyContext, **params: object) -> None:
        super().__init__(ctx, **params)
        self.samples = [0.0] * self.n
        self.seconds = [0.0] * self.n
        self.fixed: dict[int, int] | None = None

    def state_dict(self) -> dict[str, Any]:
        fixed = None if self.fixed is None else [[w, b] for w, b in sorted(self.fixed.items())]
        return {**super().state_dict(), "samples": list(self.samples), "seconds": list(self.seconds), "fixed": fixed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.samples = [float(x) for x in state_list(self.name, state, "samples", self.n)]
        self.seconds = [float(x) for x in state_list(self.name, state, "seconds", self.n)]
        self.fixed = None if state["fixed"] is None else {int(w): int(b) for w, b in state["fixed"]}

    def _max_batch(self) -> str:
        return self.config.max_batch

    def _observe(self, event: ComputeDone) -> None:
        if self.rounds < self.config.rounds and event.duration_s > 0:
            self.samples[event.worker] += event.batch_size
            self.seconds[event.worker] += event.duration_s

    def _allocate(self, workers: list[int]) -> dict[int, int]:
        if self.rounds < self.config.rounds:
            return self.equal_split(workers)
        if self.fixed is None or set(self.fixed) != set(workers):
            measured = [self.samples[w] / self.seconds[w] for w in workers if self.seconds[w] > 0]
            fill = sum(measured) / len(measured) if measured else 1.0
            speeds = [self.samples[w] / self.seconds[w] if self.seconds[w] > 0 else fill for w in workers]
            caps = None if self.caps is None else [self.caps[w] for w in workers]
            comm = [self.comm_s[w] for w in workers]
            self.fixed = dict(zip(workers, equal_finish_split(speeds, self.total, comm_s=comm, caps=caps), strict=True))
        return dict(self.fixed)
