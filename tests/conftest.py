"""Every test that starts a real process (torch.distributed ranks, torchrun
agents, a `python -m hetsync` child, a process pool) is marked ``dist``:
``make test-fast`` leaves those out, ``make test`` runs them all. The marker
is checked, not trusted: an unmarked test that starts a process fails and
says so."""

from __future__ import annotations

import multiprocessing.process
import subprocess

import pytest


def _refuse(nodeid: str):  # type: ignore[no-untyped-def]
    def refuse(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError(
            f"{nodeid} starts a real process: mark it @pytest.mark.dist (make test-fast leaves those out)"
        )

    return refuse


@pytest.fixture(autouse=True)
def _processes_only_in_dist_tests(request, monkeypatch):
    if request.node.get_closest_marker("dist") is not None:
        yield
        return
    monkeypatch.setattr(subprocess.Popen, "__init__", _refuse(request.node.nodeid))
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", _refuse(request.node.nodeid))
    yield
