"""Forecasts in processes of their own, for rank 0 (``auto:forecast=on``):
rank 0 must not wait for a forecast while its workers train, nor import the
simulator, so each ``Forecast`` runs as ``python -m hetsync.sim.forecast_job``
in a folder of its own (the request pickled in, the answer pickled out), and
the server's loop collects the answers of those that have ended.
"""

from __future__ import annotations

import dataclasses
import pickle
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from hetsync.policies.base import Forecast, ForecastDone

JOB_MODULE = "hetsync.sim.forecast_job"


@dataclasses.dataclass
class _Job:
    proc: subprocess.Popen[bytes]
    folder: Path
    ask: int


class ForecastJobs:
    """The forecasts running beside one run: :meth:`start` one, take the
    :meth:`answers` of those that have ended, :meth:`close` the rest."""

    def __init__(self) -> None:
        self.jobs: list[_Job] = []

    def __bool__(self) -> bool:
        return bool(self.jobs)

    def start(self, scenario: Any, cmd: Forecast, theta: torch.Tensor | None, now_s: float) -> None:
        """Start ``cmd``'s forecast from ``theta`` (the global model now)."""
        folder = Path(tempfile.mkdtemp(prefix="hetsync-forecast-"))
        request = {
            "scenario": scenario,
            "cmd": cmd,
            "theta": theta.detach().cpu().numpy() if theta is not None else None,
            "now_s": now_s,
        }
        with (folder / "request.pkl").open("wb") as f:
            pickle.dump(request, f)
        argv = [sys.executable, "-m", JOB_MODULE, str(folder / "request.pkl"), str(folder / "answer.pkl")]
        with (folder / "stderr.txt").open("wb") as log:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log)
        self.jobs.append(_Job(proc, folder, cmd.ask))

    def answers(self, now_s: float) -> list[ForecastDone]:
        """The answers of the forecasts that have ended, at ``now_s``; a
        process that wrote none answers without scores, with its last error line."""
        out = []
        for job in [j for j in self.jobs if j.proc.poll() is not None]:
            self.jobs.remove(job)
            try:
                with (job.folder / "answer.pkl").open("rb") as f:
                    done = dataclasses.replace(pickle.load(f), now_s=now_s)
            except OSError:
                tail = (job.folder / "stderr.txt").read_text(errors="replace").strip().splitlines()[-1:]
                why = f"the forecast process exited {job.proc.returncode}" + (f": {tail[0]}" if tail else "")
                done = ForecastDone(now_s=now_s, ask=job.ask, why=why)
            shutil.rmtree(job.folder, ignore_errors=True)
            out.append(done)
        return out

    def close(self) -> None:
        """The run is over: the forecasts still running are stopped, every folder removed."""
        for job in self.jobs:
            if job.proc.poll() is None:
                job.proc.kill()
                job.proc.wait()
            shutil.rmtree(job.folder, ignore_errors=True)
        self.jobs.clear()
