"""A user's training loop whose workers come back or join late, for
tests/runtime/test_rejoin_loop.py (issue 30 item 2, docs/membership.md):
it trains until the run's time is up (``sync.done``), as a loop that may
be started again must, and goes on where hetsync says its data and its
schedule are (``sync.loader``, ``sync.fast_forward``, ``sync.first_step``).

    hetsync launch --nproc 2 --max-worker-restarts 1 --out OUT loop_rejoin.py POLICY OUT SECONDS [KILL_WORKER]
    hetsync launch --nproc 2 --nproc-max 3 --out OUT loop_rejoin.py POLICY OUT SECONDS
    hetsync launch --join OUT loop_rejoin.py POLICY OUT SECONDS   (one more worker, while the job runs)

Worker KILL_WORKER kills itself (SIGKILL) before its 4th step, in its
first life only (one that came back begins at ``sync.first_step`` > 0). Each life of a
worker writes ``OUT/life-<worker>-<pid>.json``: where its loop began
(``first_step``, ``drawn_before``) and how many steps it took.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import TensorDataset

import hetsync

KILL_AT = 3  # the step (counted from the run's start) before which KILL_WORKER dies
STEP_S = 0.02  # each step sleeps this long besides its compute: a few hundred steps, cores left for the rest


def main(policy: str, out: str, seconds: float, kill_worker: int | None) -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2400, 10, generator=g)
    y = (x @ torch.randn(10, 3, generator=g)).argmax(1)
    train, xt, yt = TensorDataset(x[:2000], y[:2000]), x[2000:], y[2000:]

    def evaluate(model: nn.Module) -> dict[str, float]:
        return {"accuracy": (model(xt).argmax(1) == yt).float().mean().item()}

    sync = hetsync.init(policy, evaluate=evaluate, batch_size=16, max_time_s=seconds, plots=False)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 24), nn.Tanh(), nn.Linear(24, 3))
    opt = sync.optimizer(model, torch.optim.AdamW(model.parameters(), lr=0.01))
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=50, gamma=0.8)
    sync.fast_forward(sched)  # a worker that came back: its schedule goes on where its steps are
    taken = first = sync.first_step
    while not sync.done:
        for xb, yb in sync.loader(train):  # (a worker that came back: after the samples it had drawn)
            if sync.worker == kill_worker and first == 0 and taken == KILL_AT:
                os.kill(os.getpid(), signal.SIGKILL)  # dies mid-run; the launcher starts it again
            nn.functional.cross_entropy(model(xb), yb).backward()
            opt.step()
            opt.zero_grad()
            sched.step()
            taken += 1
            time.sleep(STEP_S)
            if sync.done:
                break
    life = {"worker": sync.worker, "first_step": first, "drawn_before": sync.drawn_before, "taken": taken - first}
    Path(out, f"life-{sync.worker}-{os.getpid()}.json").write_text(json.dumps(life))
    sync.finish()


if __name__ == "__main__":
    kill = int(sys.argv[4]) if len(sys.argv) > 4 else None
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]), kill)
