"""The layering of docs/architecture.md §8, checked on the source (with ``ast``, nothing
is imported):

- the policy core (policies/, algos/) imports only the standard library,
  numpy and itself — no torch, no I/O libraries — so a policy can be tested
  with scripted events and run by any driver;
- the drivers share what they share through the driver core (driver/):
  nothing under sim/ imports the runtime, nothing under runtime/ imports the
  simulator, and the runtime's server and its peer-to-peer worker side do
  not import each other;
- the cores (policies/, algos/, driver/) and the runtime import nothing from
  the command line, the reports (report/), the advice (advise/: profile,
  advise, verify), the runner or the benches: writing a report after a run
  is its caller's job;
- the reports import nothing from the advice: advise's page builds on the
  comparison's, not the other way round;
- the run summary's type and reader (summary.py) imports only the standard
  library and hetsync.errors: the launcher, the runtime, the benches and the
  reports all read summaries with it, and reading one loads no torch, no
  plotting;
- no import cycle among hetsync's modules.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "hetsync"
ALLOWED_THIRD_PARTY = {"numpy"}
ALLOWED_OWN = ("hetsync.policies", "hetsync.algos", "hetsync.errors")
CORE_FILES = sorted((SRC / "policies").glob("*.py")) + sorted((SRC / "algos").glob("*.py"))
CALLERS = ("hetsync.cli", "hetsync.report", "hetsync.advise", "hetsync.runner", "hetsync.benches")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def _under_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(path: Path, *, type_checking: bool = True) -> set[str]:
    """Every module ``path`` imports, at any depth (inside functions too),
    as written: ``from a import b`` gives ``a.b`` when that is a hetsync
    module, else ``a``. ``type_checking=False`` leaves out what is imported
    under ``if TYPE_CHECKING:``."""
    tree = ast.parse(path.read_text())
    skipped: set[int] = set()
    if not type_checking:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and _under_type_checking(node):
                skipped.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, up level - 1
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                names.add(full if full in MODULES else base)
    return names


def own(name: str) -> str | None:
    """The hetsync module an import names (``hetsync.policies.base.Apply`` ->
    ``hetsync.policies.base``), or None for a third-party one."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def files_under(folder: str) -> list[Path]:
    return sorted((SRC / folder).rglob("*.py"))


# ---------------------------------------------------------------- the policy core
@pytest.mark.parametrize("path", CORE_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_core_imports_only_stdlib_and_numpy(path):
    for name in imports(path):
        top = name.split(".")[0]
        if top in sys.stdlib_module_names or top in ALLOWED_THIRD_PARTY or name == "__future__":
            continue
        assert name.startswith(ALLOWED_OWN), f"{path.name} imports {name}: the policy core may not"


def test_the_run_summary_imports_only_the_standard_library():
    for name in imports(SRC / "summary.py"):
        top = name.split(".")[0]
        if top in sys.stdlib_module_names or name == "__future__":
            continue
        assert name == "hetsync.errors", f"summary.py imports {name}: it may import the standard library only"


def test_the_rule_is_checked_on_something():
    assert len(CORE_FILES) >= 8
    assert len(files_under("runtime")) >= 8 and len(files_under("sim")) >= 3 and len(files_under("driver")) >= 2


# -------------------------------------------------------------------- the drivers
def _offending(folder: str, forbidden: tuple[str, ...], *, except_files: tuple[str, ...] = ()) -> list[str]:
    bad = []
    for path in files_under(folder):
        if path.name in except_files:
            continue
        for name in sorted(imports(path)):
            if name.startswith(forbidden):
                bad.append(f"{path.relative_to(SRC)} imports {name}")
    return bad


def test_the_simulator_and_the_runtime_do_not_import_each_other():
    assert _offending("sim", ("hetsync.runtime",)) == []
    assert _offending("runtime", ("hetsync.sim",)) == []


def test_the_server_and_the_peer_to_peer_worker_side_do_not_import_each_other():
    p2p, server = SRC / "runtime" / "p2p.py", SRC / "runtime" / "server.py"
    assert "hetsync.runtime.server" not in imports(p2p)
    assert "hetsync.runtime.p2p" not in imports(server)
    assert "hetsync.runtime.server" not in imports(SRC / "runtime" / "coordinator.py")  # it talks to its host


@pytest.mark.parametrize("folder", ["policies", "algos", "driver"])
def test_the_cores_import_no_caller(folder):
    assert _offending(folder, CALLERS) == []


def test_the_runtime_leaves_reports_to_its_callers():
    # __main__.py is the runtime's command line (python -m hetsync.runtime):
    # a caller of the runtime, as hetsync.cli is, and imported by nothing
    assert _offending("runtime", CALLERS, except_files=("__main__.py",)) == []
    assert not any("hetsync.runtime.__main__" in imports(p) for p in MODULES.values())


def test_the_reports_leave_the_advice_to_advise():
    assert _offending("report", ("hetsync.advise",)) == []
    assert len(files_under("report")) >= 5 and len(files_under("advise")) >= 8


# ------------------------------------------------------------------------ cycles
def import_graph() -> dict[str, set[str]]:
    """hetsync module -> the hetsync modules it imports. Imports inside
    functions count (a lazy import is still a dependency; none is exempt).
    Imports under ``if TYPE_CHECKING:`` do not: they never run, they only
    name types for the checker (``limits`` names ``Scenario`` that way)."""
    graph = {}
    for name, path in MODULES.items():
        deps = {own(n) for n in imports(path, type_checking=False)}
        graph[name] = {d for d in deps if d is not None and d != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle():
    graph = import_graph()
    found = cycles(graph)
    edges = [f"{a} -> {b}" for cycle in found for a in cycle for b in sorted(graph[a]) if b in cycle]
    assert found == [], f"import cycles {found}; their imports: {edges}"


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert "hetsync.runtime.server" in import_graph()["hetsync.runtime.process"]  # lazy imports are edges
