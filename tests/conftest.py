"""Every test that starts a real process (torch.distributed ranks, torchrun
agents, a `python -m hetsync` child, a process pool) is marked ``dist``:
``make test-fast`` leaves those out, ``make test`` runs them all. The marker
is checked, not trusted: an unmarked test that starts a process fails and
says so. ``make test`` runs the dist tests two files at a time (the longest files
first: :data:`LONGEST_FIRST`), then those also marked ``serial`` (their
assertions rest on measured times) one at a time; ``serial`` without
``dist`` is refused at collection.

Hypothesis runs derandomized by default, so CI and every clone try the same
examples and a red run is reproducible; ``HYPOTHESIS_PROFILE=explore`` draws
fresh ones (and more of them) to hunt for new failures, which then go in as
``@example``s."""

from __future__ import annotations

import multiprocessing.process
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

settings.register_profile("repeatable", derandomize=True, print_blob=True)
settings.register_profile("explore", max_examples=2000, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


def _refuse(nodeid: str):  # type: ignore[no-untyped-def]
    def refuse(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError(
            f"{nodeid} starts a real process: mark it @pytest.mark.dist (make test-fast leaves those out)"
        )

    return refuse


# The longest files of dist tests (a minute or two of real processes each), handed out first: ``make
# test`` gives the dist tests to two workers a file at a time, in this order, so that a long file started
# last does not leave one worker running it alone at the end.
LONGEST_FIRST = (
    "tests/runtime/test_faults.py",
    "tests/test_docs.py",
    "tests/runtime/test_loop.py",
    "tests/runtime/test_resume.py",
)


def pytest_collection_modifyitems(items):  # type: ignore[no-untyped-def]
    for item in items:
        if item.get_closest_marker("serial") is not None and item.get_closest_marker("dist") is None:
            raise pytest.UsageError(f"{item.nodeid} is marked serial but not dist: serial orders the dist tests only")
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))  # (stable: the rest as collected)


@pytest.fixture(autouse=True)
def _processes_only_in_dist_tests(request, monkeypatch):
    if request.node.get_closest_marker("dist") is not None:
        yield
        return
    monkeypatch.setattr(subprocess.Popen, "__init__", _refuse(request.node.nodeid))
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", _refuse(request.node.nodeid))
    yield


@dataclass(frozen=True)
class AutoSwitchRun:
    """``auto`` simulated on examples/stress-midway-8.yaml, shortened: 8
    equal workers, two of them 3x slower from t = 1 s (the example's stress,
    moved up from 10 s), 3 s in all. ``out`` holds ``summary.json`` and its
    trace (read it, write elsewhere); ``progress`` is every (fraction,
    status) the run's progress callback got."""

    out: Path
    run: dict[str, Any]
    progress: list[tuple[float, str]]


@pytest.fixture(scope="session")
def auto_switch_run(tmp_path_factory: pytest.TempPathFactory) -> AutoSwitchRun:
    from hetsync import runner
    from hetsync.scenario import load_scenario

    example = Path(__file__).parent.parent / "examples" / "stress-midway-8.yaml"
    load = {"workers": [6, 7], "period_s": 1000, "on_s": 990, "factor": 3, "random_phase": False, "phase_s": 999}
    scenario = load_scenario(str(example), max_time_s=3.0, background_load=load)
    out = tmp_path_factory.mktemp("auto-switch")
    seen: list[tuple[float, str]] = []
    (run,) = runner.compare(scenario, ["auto"], out, progress=lambda _label, f, status: seen.append((f, status)))
    return AutoSwitchRun(out, run, seen)
