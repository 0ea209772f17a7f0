"""A runtime run's checkpoint file: writing it atomically, reading it back
(refused unless it is this version's format, sane, and saved by a run of
this scenario, workload, worker count, seed and policy — the CLI checks the
same before launching: :mod:`hetsync.runtime.checkpoint_check`), and where a
resumed run's trace goes on. What a checkpoint holds is the run's to say
(:meth:`hetsync.runtime.server._Run.checkpoint_state`)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from hetsync.errors import BadInput
from hetsync.runtime import checkpoint_check
from hetsync.runtime.checkpoint_check import CHECKPOINT_FORMAT


class Checkpointer:
    """The checkpoint of one run at ``path`` (None: the run keeps none);
    ``identity`` is what it must share with a run that resumes it."""

    def __init__(self, path: Path | None, identity: dict[str, Any], workers: int) -> None:
        self.path = path
        self.identity = identity
        self.workers = workers

    def saved(self) -> bool:
        return self.path is not None and self.path.exists()

    def save(self, state: dict[str, Any]) -> None:
        """Write ``state`` (with the format and the identity) so that a crash
        leaves the old checkpoint or the new one, never a torn one."""
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        torch.save({"format": CHECKPOINT_FORMAT, "identity": self.identity, **state}, tmp)
        os.replace(tmp, self.path)

    def load(self, theta: torch.Tensor | None) -> dict[str, Any]:
        """The checkpoint, refused (BadInput) unless this format, sane, this
        run's, and with the run's accounting (``theta``: the model it must fit)."""
        path = self.path
        assert path is not None
        state = checkpoint_check.read_checkpoint(path)
        checkpoint_check.check_format(path, state)
        checkpoint_check.check_identity(path, state, self.identity)
        checkpoint_check.check_state(path, state, theta)
        ledger, peers, p2p, trace_bytes = (state.get(k) for k in ("ledger", "peers", "p2p", "trace_bytes"))
        if not (
            isinstance(ledger, dict)
            and isinstance(peers, list)
            and len(peers) == self.workers
            and isinstance(p2p, dict)
            and isinstance(trace_bytes, int)
            and trace_bytes >= 0
        ):
            raise BadInput(f"checkpoint {str(path)!r} lacks the run's accounting: it is damaged")
        return state


def trace_resume_point(path: Path | None, label: str, nbytes: int) -> tuple[int | None, str]:
    """Where a resumed run continues its trace at ``path``: at ``nbytes`` (what
    the trace held at the checkpoint; later records are cut), or nowhere — a
    new trace — when the one in the output folder is not that run's. Returns
    the offset (or None) and a note for the summary."""
    if path is None:
        return None, "none"
    kept = path.with_name(path.name + ".partial")  # an interrupted run's trace, set aside
    if not path.exists() and kept.exists():
        os.replace(kept, path)
    try:
        with path.open("rb") as fh:
            first = json.loads(fh.readline() or b"{}")
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, nbytes - 1))
            last = fh.read(1)
    except (OSError, ValueError):
        return None, f"new: no readable trace at {path.name} to continue"
    if first.get("ev") != "start" or first.get("policy") != label:
        return None, f"new: {path.name} is not this run's trace"
    if size < nbytes or last != b"\n":
        return None, f"new: {path.name} is shorter than at the checkpoint ({size} < {nbytes} bytes)"
    return nbytes, "continued"
