"""Checkpoints checked before a run resumes from them.

``hetsync run --resume`` reads each policy's checkpoint in the command line,
before any process is launched, and refuses (BadInput, exit status 2, one
line) one that cannot be read (corrupt, truncated, holding pickled objects),
that lacks a field or holds a value no run saves (a NaN clock, a negative
version, a model of the wrong shape or with non-finite entries), or that
another run saved (another scenario, workload, worker count, seed or
policy). The server loads the same files again and can call
:func:`check_state` on what it loaded.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch

from hetsync.errors import BadInput
from hetsync.outdir import safe_name

CHECKPOINT_FORMAT = 2  # the server's checkpoints: 2 = with the accounting, the workers' books and the trace length

# what a resumed run reads unconditionally, and the type each must have
REQUIRED: dict[str, type | tuple[type, ...]] = {
    "theta": torch.Tensor,
    "version": int,
    "elapsed_s": (int, float),
    "steps": int,
    "policy_state": dict,
}


def checkpoint_path(checkpoint_dir: Path, label: str) -> Path:
    """Where the server keeps the checkpoint of the run labelled ``label``."""
    return checkpoint_dir / f"ckpt-{safe_name(label)}.pt"


def worker_state_path(checkpoint_dir: Path, label: str, worker: int) -> Path:
    """Where worker ``worker`` keeps the optimizer state of its local steps
    (on its own machine: the same folder name as the server's)."""
    return checkpoint_dir / f"ckpt-{safe_name(label)}.worker-{worker}.pt"


def read_checkpoint(path: Path) -> dict[str, Any]:
    """The checkpoint at ``path`` as the server loads it (tensors and plain
    data only); BadInput if it cannot be read or is not a mapping."""
    try:
        state = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as e:  # truncated, corrupt, not a torch file, or pickled objects
        raise BadInput(
            f"checkpoint {str(path)!r} cannot be read ({type(e).__name__}): it is corrupt, truncated, holds "
            "pickled objects or is not a hetsync checkpoint; remove it to start that policy afresh"
        ) from None
    if not isinstance(state, dict):
        raise BadInput(f"checkpoint {str(path)!r} holds a {type(state).__name__}, not a hetsync checkpoint")
    return state


def check_state(path: Path, state: dict[str, Any], theta: torch.Tensor | None = None) -> None:
    """Every field a resumed run reads is there and sane; ``theta`` (the
    workload's initial model), when given, fixes the model's shape."""
    where = f"checkpoint {str(path)!r}"
    for key, types in REQUIRED.items():
        if key not in state:
            raise BadInput(f"{where} lacks the field {key!r}: it is damaged or not a hetsync checkpoint")
        value = state[key]
        if isinstance(value, bool) or not isinstance(value, types):
            raise BadInput(f"{where}: field {key!r} is a {type(value).__name__}, which no hetsync run saves")
    if not math.isfinite(state["elapsed_s"]) or state["elapsed_s"] < 0:
        raise BadInput(f"{where}: its clock 'elapsed_s' is {state['elapsed_s']!r}, not a time >= 0")
    for key in ("version", "steps"):
        if state[key] < 0:
            raise BadInput(f"{where}: field {key!r} is {state[key]!r}, not a count >= 0")
    model = state["theta"]
    if theta is not None and (model.shape != theta.shape or model.dtype != theta.dtype):
        raise BadInput(
            f"{where} holds a model of shape {tuple(model.shape)} ({model.dtype}), this workload's is "
            f"{tuple(theta.shape)} ({theta.dtype}): it was saved by another workload"
        )
    if model.is_floating_point() and not bool(torch.isfinite(model).all()):
        raise BadInput(f"{where} holds a model with NaN or infinite parameters (the run diverged): start afresh")
    curve = state.get("curve", [])
    if not isinstance(curve, list):
        raise BadInput(f"{where}: its evaluation curve is a {type(curve).__name__}, not a list")
    for row in curve:
        if not (isinstance(row, (list, tuple)) and row and isinstance(row[0], (int, float)) and math.isfinite(row[0])):
            raise BadInput(f"{where}: its evaluation curve holds {row!r}, not [time, value, ...]")


def identity(scenario: Any, workload: Any, label: str, workers: int) -> dict[str, Any]:
    """What a checkpoint must share with the run that resumes it (the
    fields the server's checkpoints record under ``identity``)."""
    return {
        "scenario": scenario.name,
        "workload": workload.name,
        "workload_args": json.dumps(scenario.job.workload_args, sort_keys=True, default=str),
        "workers": workers,
        "seed": scenario.job.seed,
        "policy": label,
        "n_params": workload.n_params,
    }


def check_format(path: Path, state: dict[str, Any]) -> None:
    """The checkpoint is of the format this hetsync's server writes."""
    if state.get("format") != CHECKPOINT_FORMAT:
        raise BadInput(
            f"checkpoint {str(path)!r} is not a hetsync checkpoint of format {CHECKPOINT_FORMAT} (format "
            f"{state.get('format')!r}): resume from one this version wrote, or drop --resume to start afresh"
        )


def check_identity(path: Path, state: dict[str, Any], ours: dict[str, Any]) -> None:
    """Refuse a checkpoint another run saved. Fields the checkpoint does not
    record are not compared; a checkpoint of an older format records at least
    its scenario and policy."""
    saved = state.get("identity")
    if not isinstance(saved, dict):
        saved = {k: state[k] for k in ("scenario", "policy") if k in state}
    for key, value in ours.items():
        if key in saved and saved[key] != value:
            raise BadInput(
                f"checkpoint {str(path)!r} belongs to another run: its {key} is {saved[key]!r}, "
                f"this run's is {value!r} (resume with the command that saved it, or use another --checkpoint-dir)"
            )


def check_resume(checkpoint_dir: Path, *, scenario: Any, labels: list[str], workload: Any, workers: int) -> list[str]:
    """Before launching ``hetsync run --resume``: the folder exists and holds
    a checkpoint for at least one of the policies, and each one there can be
    resumed by this run. Returns the labels that will start afresh (no
    checkpoint)."""
    if not checkpoint_dir.is_dir():
        raise BadInput(
            f"--resume: the checkpoint folder {str(checkpoint_dir)!r} does not exist; "
            "drop --resume to start afresh, or name the --checkpoint-dir of the run to continue"
        )
    paths = {label: checkpoint_path(checkpoint_dir, label) for label in labels}
    found = {label: p for label, p in paths.items() if p.is_file()}
    if not found:
        names = ", ".join(p.name for p in paths.values())
        raise BadInput(
            f"--resume: {str(checkpoint_dir)!r} holds no checkpoint of these policies ({names}); "
            "drop --resume to start afresh"
        )
    theta = workload.init_params(scenario.job.seed)
    for label, path in found.items():
        state = read_checkpoint(path)
        check_format(path, state)
        check_identity(path, state, identity(scenario, workload, label, workers))
        check_state(path, state, theta)
    return [label for label in labels if label not in found]
