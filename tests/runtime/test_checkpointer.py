"""A run's checkpoint file (hetsync.runtime.checkpointer), without processes:
written atomically, read back only by the run that saved it, and the point
where a resumed run's trace goes on."""

import pytest
import torch

from hetsync.errors import BadInput
from hetsync.runtime.checkpoint_check import CHECKPOINT_FORMAT
from hetsync.runtime.checkpointer import Checkpointer, trace_resume_point

IDENTITY = {"scenario": "hetero-4", "policy": "bsp", "workers": 2, "seed": 0}


def books(workers: int = 2) -> dict:
    return {
        "theta": torch.ones(3),
        "version": 2,
        "elapsed_s": 1.5,
        "steps": 4,
        "policy_state": {"round": 1},
        "ledger": {"started_steps": 4},
        "peers": [{"steps": 2}] * workers,
        "p2p": {},
        "trace_bytes": 10,
    }


def test_a_saved_checkpoint_loads_back_with_its_format_and_identity(tmp_path):
    path = tmp_path / "ckpts" / "ckpt-bsp.pt"
    ckpt = Checkpointer(path, IDENTITY, workers=2)
    assert not ckpt.saved()
    ckpt.save(books())
    assert ckpt.saved() and [p.name for p in path.parent.iterdir()] == ["ckpt-bsp.pt"]  # no .tmp left
    state = ckpt.load(torch.zeros(3))
    assert state["format"] == CHECKPOINT_FORMAT and state["identity"] == IDENTITY
    assert state["version"] == 2 and torch.equal(state["theta"], torch.ones(3))
    Checkpointer(None, IDENTITY, workers=2).save(books())  # a run without --checkpoint-dir keeps none


def test_a_checkpoint_of_another_run_or_without_its_books_is_refused(tmp_path):
    path = tmp_path / "ckpt-bsp.pt"
    Checkpointer(path, IDENTITY, workers=2).save(books())
    with pytest.raises(BadInput, match="belongs to another run: its seed is 0, this run's is 1"):
        Checkpointer(path, {**IDENTITY, "seed": 1}, workers=2).load(None)
    with pytest.raises(BadInput, match="holds a model of shape"):
        Checkpointer(path, IDENTITY, workers=2).load(torch.zeros(4))
    Checkpointer(path, IDENTITY, workers=2).save({**books(), "peers": [{}]})
    with pytest.raises(BadInput, match="lacks the run's accounting: it is damaged"):
        Checkpointer(path, IDENTITY, workers=2).load(None)


def test_the_trace_goes_on_only_if_it_is_that_runs_and_long_enough(tmp_path):
    path = tmp_path / "trace-bsp.jsonl"
    assert trace_resume_point(None, "bsp", 10) == (None, "none")
    assert trace_resume_point(path, "bsp", 10)[1].startswith("new: no readable trace")
    path.write_text('{"t": 0.0, "ev": "start", "policy": "bsp"}\n{"t": 1.0, "ev": "eval"}\n')
    first = len(path.read_text().splitlines()[0]) + 1
    assert trace_resume_point(path, "bsp", first) == (first, "continued")
    assert trace_resume_point(path, "asp", first)[1] == "new: trace-bsp.jsonl is not this run's trace"
    assert "shorter than at the checkpoint" in trace_resume_point(path, "bsp", 10_000)[1]
    path.rename(tmp_path / "trace-bsp.jsonl.partial")  # an interrupted run's, set aside: taken back
    assert trace_resume_point(path, "bsp", first) == (first, "continued") and path.exists()
