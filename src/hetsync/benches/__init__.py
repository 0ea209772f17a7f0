"""``hetsync bench NAME``: one module per benchmark, registered here.

A benchmark module defines ``NAME``, ``add_arguments(parser)`` and
``run(args) -> list[Row]``; rows are printed as a table and, with
``--json FILE``, written as JSON. Every figure is measured in the run that
prints it; nothing here asserts a threshold.

The registry names each bench's module and one-line help without importing
it: the modules import torch and the simulator, which the command line
needs only when a bench runs (``hetsync --help`` stays fast).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from types import ModuleType

HELP: dict[str, str] = {
    "sim": "simulator speed on large-1024 with ASP and BSP: steps/s batched vs unbatched math, run time / math "
    "time, events/s, memory; large-10k wall time and memory",
    "runtime": "runtime vs DDP (time per step, compute share) and simulator vs runtime (wall time)",
    "zipline": "ElasticBSP sync-point search: ZipLine vs GridScan vs FullGridScan seconds over n x R",
    "paper-wbsp": "WBSP paper set-up H1-H3: BSP, SSP(s=40), ASP, WBSP, WBSP-overlap; compute share and time to accuracy",
    "paper-elastic": "ElasticBSP paper set-up: BSP, ASP, SSP(3), DSSP(3,12), ElasticBSP R=15/60/240 on elastic-4, "
    "several seeds; its two readings of a superstep (within=async, within=local) on elastic-4 and elastic-4-signal",
    "paper-lbbsp": "LB-BSP paper set-up: BSP, SSP, ASP, LB-BSP-static and LB-BSP on lbbsp-cpu and lbbsp-gpu, "
    "several seeds",
    "paper-selmcast": "SELMCAST paper set-up: p2p all-reduce, random-p and SELMCAST under BSP and SSP; receivers, "
    "round time, TTA",
    "async-local-sgd": "asynchronous local SGD (Liu et al. 2024: DyLU, delayed Nesterov) vs BSP, local SGD and DiLoCo "
    "on lm-8 and default, 3 seeds, with its ablations",
    "remedies": "the staleness remedies (lr_scale=inverse, DC-ASGD, corrected momentum), ElasticBSP's two "
    "readings, WBSP's scaled deltas, DiLoCo, streaming DiLoCo and asynchronous local SGD beside plain ASP/SSP/DSSP "
    "and BSP on docs/results-real.md's scenarios, 3 seeds",
    "advise": "profile -> advise -> verify on emulated clusters: recovered delays/links, predicted vs measured TTA",
    "startup": "time to the first training step: hetsync launch vs torchrun DDP on the same script, run alternately",
    "scale": "hetsync BSP on each data path (ps, collective) vs DDP on the same model and batch: step time, bytes, "
    "rank 0's CPU; MLPs of 1M/12M/50M parameters and a 20M transformer, 2 and 4 workers",
    "faults": "a fault soak on real processes: every policy family, a user's loop, with workers killed or stopped, "
    "rank 0 killed (checkpoints, --max-restarts) and a link slowed at drawn times; finished, lost, left over, "
    "time to recover, throughput kept",
    "auto": "-p auto against BSP, LB-BSP, backup workers and local SGD fixed, on clusters that change at 4 s (a stress tool, "
    "links a tenth as fast, a worker lost) and two that do not, 3 seeds (simulator)",
    "shards": "ASP through 1, 2 and 4 sharded servers vs BSP on the collective path, 4 equal workers, MLPs of "
    "12M and 50M parameters: samples/s, rank 0's CPU, bytes at the busiest process",
}
"""Each bench's one-line help, in the order ``hetsync bench --help`` lists them."""


def _module_name(name: str) -> str:
    return "hetsync.benches." + name.replace("-", "_")


class _Registry(Mapping[str, ModuleType]):
    """name -> bench module, imported on first access."""

    def __getitem__(self, name: str) -> ModuleType:
        if name not in HELP:
            raise KeyError(name)
        module = importlib.import_module(_module_name(name))
        assert name == module.NAME, (module.NAME, name)
        return module

    def __iter__(self) -> Iterator[str]:
        return iter(HELP)

    def __len__(self) -> int:
        return len(HELP)


BENCHES: Mapping[str, ModuleType] = _Registry()
