"""The launcher starts the ranks at once (issue 26, item 6): ``hetsync
launch`` and ``hetsync run`` import no torch (nor matplotlib, scikit-learn)
before they start them, and what a launched script imports to join the run
(``hetsync.loop``) brings neither matplotlib nor scikit-learn. The seconds
are measured by ``hetsync bench startup``, not here."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hetsync.runtime.launch import rank_command, rank_environment

HEAVY = {"torch", "matplotlib", "sklearn"}


def _imported(*modules: str) -> set[str]:
    """The modules a fresh interpreter holds after importing ``modules``."""
    code = f"import sys, {', '.join(modules)}; print(' '.join(sys.modules))"
    return set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split())


@pytest.mark.dist  # (a fresh interpreter)
def test_the_launcher_imports_no_torch_before_it_starts_the_ranks():
    # what `hetsync launch` and `hetsync run` import up to launch() (cli: _cmd_launch, _cmd_run)
    held = _imported("hetsync.cli", "hetsync.console", "hetsync.outdir", "hetsync.runtime.launch", "rich.progress")
    assert not HEAVY & held


@pytest.mark.dist
def test_a_launched_script_imports_neither_matplotlib_nor_sklearn_to_join():
    held = _imported("hetsync.loop")
    assert "torch" in held and not {"matplotlib", "sklearn"} & held


def test_each_rank_is_started_as_torchrun_starts_one_node_of_one_process():
    assert rank_command(["--config", "c.json"]) == [sys.executable, "-u", "-m", "hetsync.runtime", "--config", "c.json"]
    assert rank_command(["--epochs", "2"], script="train.py") == [sys.executable, "-u", "train.py", "--epochs", "2"]
    env = rank_environment(2, 3, "127.0.0.1", 29500)
    assert {k: env[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK")} == {
        "RANK": "2",
        "WORLD_SIZE": "3",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "GROUP_RANK": "2",
    }
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("127.0.0.1", "29500")
