"""The dependency rule of DESIGN.md §1: the policy core (policies/, algos/)
imports only the standard library, numpy and itself — no torch, no I/O
libraries — so a policy can be tested with scripted events and run by any
driver."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "hetsync"
ALLOWED_THIRD_PARTY = {"numpy"}
ALLOWED_OWN = ("hetsync.policies", "hetsync.algos", "hetsync.errors")
CORE_FILES = sorted((SRC / "policies").glob("*.py")) + sorted((SRC / "algos").glob("*.py"))


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", CORE_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_core_imports_only_stdlib_and_numpy(path):
    for name in imported_modules(path):
        top = name.split(".")[0]
        if top in sys.stdlib_module_names or top in ALLOWED_THIRD_PARTY or name == "__future__":
            continue
        assert name.startswith(ALLOWED_OWN), f"{path.name} imports {name}: the policy core may not"


def test_the_rule_is_checked_on_something():
    assert len(CORE_FILES) >= 8
