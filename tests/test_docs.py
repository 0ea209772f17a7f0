"""The commands in README.md and docs/guide/*.md work, and their links lead
somewhere (issue 29, item 4).

Every fenced ```sh or ```bash block is read line by line (a trailing ``\\``
continues a line, ``#`` starts a comment, ``VAR=value`` before a command is
its environment). Each command is **parsed** by the tool's own parser —
``hetsync ...`` by :func:`hetsync.cli.build_parser`, with every scenario it
names loaded with its ``--set`` overrides and every policy spec built by
hetsync's policy parser; ``torchrun ...`` by torchrun's own parser, its
``-m hetsync.runtime`` arguments by the runtime's; a script (``python
examples/x.py``, ``hetsync launch``, ``hetsync profile --script``) must
exist, and the policies and scenario it is given must resolve; ``make T``
must be a Makefile target, whose hetsync command is parsed too; ``cat > FILE
<<'EOF'`` writes FILE for the commands after it. ``$ hetsync ...`` lines in
any other block (recorded output) are parsed as well.

Then every block **runs**, unless a comment on the line before its fence
says otherwise:

- ``<!-- not run: REASON -->`` — cannot run here (two machines, a GPU, your
  own files, minutes of benchmark); parsed only, and counted;
- ``<!-- run by: tests/FILE.py::test_name -->`` — another test runs it,
  shortened; that test must exist and name the block's scripts.

A block runs in a fresh folder (``examples/`` and ``tests/`` linked in), its
commands in order, each shortened by options the command line has (a
simulation gets ``--set max_time_s=0.5``, a real run 1 s, a profile one
second of steps, an example script one epoch: :func:`shortened`). ``hetsync``
commands run in this process (the real ones' ranks forked by its one kept
zygote), the others (``torchrun``, a script) as processes; a block with a command that starts
real processes (``run``, ``launch``, ``profile``, ``advise --verify``,
``compare --runtime dist``, ``torchrun``, an example script) runs under
``@pytest.mark.dist``. A command an earlier block already ran or had run
(README.md first, then the guide pages by name) is not run again, unless a
later command of its block reads what it writes.

Links: every relative link and image in those pages names a file that
exists, and a ``#heading`` one of that page's headings (GitHub's anchors).
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs" / "guide").glob("*.md"))]
BIN = Path(sys.executable).parent
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
MARKER = re.compile(r"^<!--\s*(not run|run by):\s*(.*?)\s*-->$")
HEREDOC = re.compile(r"^cat > (\S+) <<'(\w+)'\s*$")
ENV = re.compile(r"^[A-Z_][A-Z0-9_]*=")
# names in not-run blocks that stand for the reader's own files
PLACEHOLDERS = {"train.py", "train:workload"}
# how each example script is shortened (its own options), when the command does not set them
SCRIPT_SHORT = {
    "own_loop_cnn.py": ("--epochs", "1"),
    "own_loop_lm.py": ("--epochs", "1"),
    "own_job_gru.py": ("--epochs", "1"),
    "ddp_balanced_batches.py": ("--steps", "10"),
    "torchrun_custom_model.py": ("--max-time-s", "3"),
    "custom_workload.py": ("--max-time-s", "3"),
}
TIMEOUT_S = 300
ADVISED = re.compile(r":start=(?!(bsp|lb-bsp|backup|local-sgd)(:|$))[^:]+")  # auto:start=ADVICE (a folder, a file)


# ------------------------------------------------------------------ reading the pages
@dataclass
class Command:
    tokens: list[str]  # the command, environment assignments taken off
    line: int
    env: dict[str, str] = field(default_factory=dict)
    heredoc: str | None = None  # cat > tokens[2] <<'EOF': the text written
    transcript: bool = False  # a "$ hetsync ..." line of recorded output

    @property
    def tool(self) -> str:
        return "cat" if self.heredoc is not None else Path(self.tokens[0]).name

    @property
    def key(self) -> tuple[Any, ...]:
        return (self.tool, tuple(self.tokens[1:]), tuple(sorted(self.env.items())), self.heredoc)

    def __str__(self) -> str:
        return " ".join(self.tokens) if self.heredoc is None else f"cat > {self.tokens[2]} <<'EOF'"


@dataclass
class Block:
    doc: Path
    line: int  # of the opening fence
    lang: str
    text: list[str]
    marker: tuple[str, str] | None  # ("not run", reason) or ("run by", "tests/x.py::test_y")
    commands: list[Command]

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"

    @property
    def shell(self) -> bool:
        return self.lang in ("sh", "bash")


def shell_commands(lines: list[str], first_line: int) -> list[Command]:
    out: list[Command] = []
    i = 0
    while i < len(lines):
        line, at = lines[i], first_line + i
        i += 1
        heredoc = HEREDOC.match(line)
        if heredoc:
            end = lines.index(heredoc[2], i)
            out.append(Command(["cat", ">", heredoc[1]], at, heredoc="\n".join(lines[i:end]) + "\n"))
            i = end + 1
            continue
        while line.endswith("\\"):
            line = line[:-1] + " " + lines[i]
            i += 1
        tokens = shlex.split(line, comments=True)
        while tokens:
            part = tokens[: tokens.index("&&")] if "&&" in tokens else tokens
            tokens = tokens[len(part) + 1 :]
            env = {}
            while part and ENV.match(part[0]):
                key, _, value = part.pop(0).partition("=")
                env[key] = value
            assert part, f"line {at}: an environment with no command"
            out.append(Command(part, at, env))
    return out


def read_blocks(doc: Path) -> list[Block]:
    lines = doc.read_text().splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, lang = i, m[2]
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
        body = lines[start + 1 : end]
        prev = next((lines[j].strip() for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        marker = MARKER.match(prev)
        assert marker or not prev.startswith("<!--"), f"{doc.name}:{start}: unknown marker {prev!r}"
        if lang in ("sh", "bash"):
            commands = shell_commands(body, start + 2)
        else:
            commands = [
                Command(shlex.split(t[2:], comments=True), start + 2 + k, transcript=True)
                for k, t in enumerate(body)
                if t.startswith("$ hetsync ")
            ]
        blocks.append(Block(doc, start + 1, lang, body, (marker[1], marker[2]) if marker else None, commands))
        i = end + 1
    return blocks


BLOCKS = [b for doc in DOCS for b in read_blocks(doc)]
SHELL = [b for b in BLOCKS if b.shell]
WITH_COMMANDS = [b for b in BLOCKS if b.commands]


# ------------------------------------------------------- what a command does (cheap)
@dataclass
class Shape:
    """What running a command involves, read from its arguments alone
    (hetsync's argparse, no torch): enough to plan the runs at collection."""

    real: bool = False  # starts real processes
    inprocess: bool = False  # runs in this process (hetsync.cli.main)
    outs: list[str] = field(default_factory=list)  # folders it writes
    reads: list[str] = field(default_factory=list)  # paths an earlier command of the block may write
    scripts: list[str] = field(default_factory=list)  # scripts it runs (file names)
    cannot: str | None = None  # why it cannot run here


def norm(path: object) -> str:
    return os.path.normpath(str(path))


def under(path: str, folders: list[str]) -> bool:
    path = norm(path)
    return any(path == f or path.startswith(f + os.sep) for f in folders)


def option(args: list[str], *names: str) -> str | None:
    """The value of the last ``--name X`` or ``--name=X`` in a script's arguments."""
    found = None
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                found = args[i + 1]
            elif arg.startswith(name + "="):
                found = arg.split("=", 1)[1]
    return found


def torchrun_script(tokens: list[str]) -> tuple[bool, str, list[str]]:
    """(``-m``?, the script or module, its arguments) of a torchrun command:
    its own options are all ``--name=value`` in these pages (torchrun's parser
    checks them in :func:`resolve`)."""
    rest = tokens[1:]
    while rest and rest[0].startswith("-") and rest[0] != "-m":
        rest = rest[1:]
    if rest[:1] == ["-m"]:
        return True, rest[1], rest[2:]
    return False, rest[0], rest[1:]


def shape(cmd: Command) -> Shape:
    tool, tokens = cmd.tool, cmd.tokens
    if tool == "cat":
        return Shape(inprocess=True)
    if tool == "make":
        return Shape(real=True, cannot="make installs into .venv (and make test runs the whole suite)")
    if tool in ("python", "python3"):
        out = option(tokens[2:], "--out")
        return Shape(real=True, outs=[norm(out)] if out else [], scripts=[Path(tokens[1]).name])
    if tool == "torchrun":
        module, script, args = torchrun_script(tokens)
        nodes = option(tokens[1:], "--nnodes") or "1"
        out = option(args, "--out")
        return Shape(
            real=True,
            outs=[norm(out)] if out else [],
            scripts=[] if module else [Path(script).name],
            cannot=None if nodes == "1" else f"--nnodes={nodes}: one torchrun agent per node, started apart",
        )
    if tool != "hetsync":
        raise AssertionError(f"{cmd}: test_docs.py does not know {tool!r}: teach it, or write the command otherwise")
    from hetsync.cli import build_parser

    if tokens[1:2] == ["bench"]:
        return Shape(real=True, cannot="a bench takes minutes")
    args = build_parser().parse_args(tokens[1:])
    outs = [norm(args.out)] if getattr(args, "out", None) else []
    command = args.command
    if command in ("policies", "scenarios"):
        return Shape(inprocess=True)
    if command == "report":
        return Shape(inprocess=True, reads=[str(args.dir)])
    if command == "launch":
        return Shape(real=True, outs=outs, scripts=[Path(args.script).name])
    if command == "profile":
        real = args.from_raw is None
        scripts = [Path(args.script).name] if args.script else []
        reads = [str(x) for x in (args.scenario, args.emulate, args.from_raw) if x]
        return Shape(real=real, inprocess=not real, outs=outs, reads=reads, scripts=scripts)
    real = command == "run" or getattr(args, "runtime", "sim") == "dist" or bool(getattr(args, "verify", False))
    return Shape(real=real, inprocess=not real, outs=outs, reads=[args.scenario])


# ------------------------------------------------- every name in a command (thorough)
class Context:
    """The block's folder (the files its heredocs wrote), what the commands
    before this one wrote, and whether names may be placeholders."""

    def __init__(self, folder: Path, *, placeholders: bool, transcript: bool = False) -> None:
        self.folder = folder
        self.outs: list[str] = []
        self.placeholders = placeholders
        self.transcript = transcript

    def file(self, name: str, what: str) -> Path | None:
        for base in (self.folder, ROOT):
            if (base / name).exists():
                return base / name
        if under(name, self.outs) or self.transcript or (self.placeholders and name in PLACEHOLDERS):
            return None
        raise AssertionError(f"{what} {name!r} does not exist (nor does an earlier command of the block write it)")


def load_scenario(name: str | None, overrides: list[str], ctx: Context, seed: int | None = None) -> Any:
    """The scenario as the command would load it (its --set overrides applied),
    or None where it is written by an earlier command or is a placeholder."""
    from hetsync.scenario import builtin_scenarios, load_scenario, parse_override

    values = dict(parse_override(o) for o in overrides)
    if seed is not None:
        values["seed"] = seed
    if name is None:
        return None
    if name in builtin_scenarios():
        return load_scenario(name, **values)
    path = ctx.file(name, "scenario")
    return None if path is None else load_scenario(str(path), **values)


def check_policies(specs: list[str], scenario: Any, *, real: bool, workers: int | None = None) -> None:
    """Each spec built by hetsync's policy parser, against the scenario's job where there is one."""
    from hetsync.driver import policy_labels
    from hetsync.policies import PolicyContext, make_policy

    specs = [ADVISED.sub(":start=bsp", s) for s in specs]  # (an advice an earlier command writes: read when run)
    if scenario is not None:
        policy_labels(scenario, specs, driver="dist" if real else "sim")
        return
    for spec in specs:
        make_policy(spec, PolicyContext(workers=workers or 4, batch_size=32, lr=0.1))


def split_specs(text: str | None) -> list[str]:
    return [s.strip() for s in (text or "").split(",") if s.strip()]


def check_script(script: str, args: list[str], ctx: Context, *, workers: int | None) -> None:
    """A training script, and the scenario and policies its arguments name."""
    ctx.file(script, "script")
    scenario = None
    named = option(args, "--scenario")
    if named not in (None, "none"):
        scenario = load_scenario(named, [], ctx)
        if scenario is not None and workers is not None and workers != scenario.cluster.workers:
            scenario = None  # the launcher fits the scenario to its workers: check the specs on their own
    check_policies(split_specs(option(args, "--policy", "--policies")), scenario, real=True, workers=workers)


def resolve_hetsync(argv: list[str], ctx: Context) -> None:
    from hetsync.cli import build_parser
    from hetsync.workloads import workload_function

    bench = argv[1] if len(argv) > 1 and argv[0] == "bench" else None
    args = build_parser(bench).parse_args(argv)
    command = args.command
    if command == "report":
        ctx.file(str(args.dir), "folder")
    elif command == "launch":
        check_script(args.script, args.script_args, ctx, workers=args.nproc)
    elif command == "profile":
        load_scenario(args.scenario, [], ctx)
        load_scenario(args.emulate, [], ctx)
        if args.script is not None:
            check_script(str(args.script), args.script_args, ctx, workers=args.nproc)
        if args.workload is not None and not (ctx.placeholders and args.workload in PLACEHOLDERS):
            workload_function(args.workload)
        if args.from_raw is not None:
            ctx.file(str(args.from_raw), "raw profile")
    elif command in ("compare", "simulate", "run", "advise"):
        scenario = load_scenario(args.scenario, args.overrides, ctx, args.seed)
        specs = split_specs(args.policy if command == "simulate" else args.policies)
        if scenario is not None and command != "advise":
            specs = specs or list(scenario.job.policies)
        real = command == "run" or getattr(args, "runtime", "sim") == "dist"
        check_policies(specs, scenario, real=real)


def resolve(cmd: Command, ctx: Context) -> None:
    """Parse one command with its tool's parser and resolve every name in it:
    AssertionError, or hetsync's BadInput naming what is wrong."""
    tool = cmd.tool
    if tool == "cat":
        path = ctx.folder / cmd.tokens[2]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(cmd.heredoc or "")
    elif tool == "hetsync":
        resolve_hetsync(cmd.tokens[1:], ctx)
    elif tool == "torchrun":
        from torch.distributed.run import get_args_parser

        args = get_args_parser().parse_args(cmd.tokens[1:])
        if args.module:
            assert args.training_script == "hetsync.runtime", f"torchrun -m {args.training_script}: teach test_docs.py"
            from hetsync.runtime.__main__ import build_parser

            rargs = build_parser().parse_args(args.training_script_args)
            scenario = load_scenario(rargs.scenario, getattr(rargs, "overrides", []), ctx)
            check_policies(split_specs(rargs.policies), scenario, real=True)
        else:
            nproc = str(args.nproc_per_node)
            check_script(
                args.training_script,
                args.training_script_args,
                ctx,
                workers=int(nproc) - 1 if nproc.isdigit() else None,
            )
    elif tool in ("python", "python3"):
        assert cmd.tokens[1] != "-m", f"python -m ...: teach test_docs.py ({cmd})"
        check_script(cmd.tokens[1], cmd.tokens[2:], ctx, workers=None)
    elif tool == "make":
        makefile = (ROOT / "Makefile").read_text()
        for target in cmd.tokens[1:]:
            recipe = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)*)", makefile, re.M)
            assert recipe, f"make {target}: no such target in the Makefile"
            for line in recipe[1].splitlines():
                if "$(BIN)/hetsync " in line:
                    resolve_hetsync(shlex.split(line.split("$(BIN)/hetsync ", 1)[1]), ctx)
    else:
        raise AssertionError(f"{cmd}: test_docs.py does not know {tool!r}")


def resolve_block(block: Block, folder: Path) -> None:
    ctx = Context(folder, placeholders=block.marker is not None, transcript=not block.shell)
    for cmd in block.commands:
        resolve(cmd, ctx)
        ctx.outs += shape(cmd).outs


# ---------------------------------------------------------------------- the plan
@dataclass
class Plan:
    block: Block
    shapes: list[Shape]
    run: list[int] = field(default_factory=list)  # the commands that run here
    covered: list[tuple[str, str]] = field(default_factory=list)  # (command, the block that runs it)

    @property
    def real(self) -> bool:
        return any(self.shapes[i].real for i in self.run)

    @property
    def runs(self) -> bool:
        return any(self.block.commands[i].tool != "cat" for i in self.run)


def plan() -> list[Plan]:
    """Which commands of which blocks run here: those of unmarked blocks that
    no earlier block runs (or has run), and those a later running command of
    their block reads the output of."""
    covered: dict[tuple[Any, ...], str] = {}
    plans = []
    for block in SHELL:
        p = Plan(block, [shape(c) for c in block.commands])
        plans.append(p)
        if block.marker is None:
            needed: set[int] = set()
            for i in range(len(block.commands) - 1, -1, -1):
                cmd, outs = block.commands[i], p.shapes[i].outs
                read_later = any(under(r, outs) for j in needed for r in p.shapes[j].reads)
                if cmd.key not in covered or read_later or cmd.tool == "cat":
                    needed.add(i)
            p.run = sorted(needed)
            p.covered = [(str(c), covered[c.key]) for i, c in enumerate(block.commands) if i not in needed]
        if block.marker is None or block.marker[0] == "run by":
            for cmd in block.commands:
                covered.setdefault(cmd.key, block.where)
    return plans


PLANS = plan()
RUNS = [p for p in PLANS if p.runs]


# --------------------------------------------------------------------------- tests
@pytest.mark.parametrize("block", WITH_COMMANDS, ids=lambda b: b.where)
def test_block_parses(block, tmp_path, monkeypatch):
    """Every command parses with its tool's own parser, and every scenario,
    policy, workload, script and target it names exists."""
    monkeypatch.chdir(tmp_path)
    resolve_block(block, tmp_path)


def test_every_block_runs_or_says_why_not():
    """A block that cannot run here says why; one that another test runs
    names a test that exists and runs its scripts; a block that is not
    marked can run here (no bench, no second machine, no make)."""
    for p in PLANS:
        block = p.block
        if block.marker is None:
            cannot = [f"{c}: {s.cannot}" for c, s in zip(block.commands, p.shapes, strict=True) if s.cannot]
            assert not cannot, f"{block.where}: {cannot}: mark the block <!-- not run: REASON -->"
            continue
        kind, text = block.marker
        assert len(text) > 10, f"{block.where}: say why ({kind}: {text!r})"
        if kind == "run by":
            path, _, name = text.partition("::")
            source = (ROOT / path).read_text()
            assert re.search(rf"^def {re.escape(name)}\(", source, re.M), f"{block.where}: no {name} in {path}"
            for script in {s for shape_ in p.shapes for s in shape_.scripts}:
                assert script in source, f"{block.where}: {path} never runs {script}"


def test_command_blocks_are_tagged_as_shell():
    """A block of commands without ```sh would go unchecked."""
    starts = ("hetsync ", ".venv/bin/", "torchrun ", "make ", "python ")
    for block in BLOCKS:
        if not block.shell:
            bare = [t for t in block.text if t.startswith(starts)]
            assert not bare, f"{block.where}: commands in a ```{block.lang} block: tag it ```sh ({bare[0]!r})"


def census() -> str:
    marked = Counter(p.block.marker[0] for p in PLANS if p.block.marker)
    repeats = [p for p in PLANS if p.block.marker is None and not p.runs]
    commands = sum(len(p.block.commands) for p in PLANS)
    transcripts = sum(len(b.commands) for b in BLOCKS if not b.shell)
    lines = [
        f"{len(PLANS)} shell blocks, {commands} commands, all parsed; {len(RUNS)} blocks run here "
        f"({sum(1 for p in RUNS if p.real)} of them start real processes: marked dist); "
        f"{len(repeats)} only repeat commands an earlier block runs; {marked['run by']} run by another test; "
        f"{marked['not run']} not run; and {transcripts} recorded '$ hetsync' lines parsed"
    ]
    lines += [f"  {p.block.where}: {p.block.marker[0]}: {p.block.marker[1]}" for p in PLANS if p.block.marker]
    lines += [f"  {p.block.where}: {c} — run by {w}" for p in PLANS for c, w in p.covered]
    return "\n".join(lines)


def test_the_census():
    """Most blocks run; the rest are counted (``pytest -s`` prints the count)."""
    print("\n" + census())
    marked = Counter(p.block.marker[0] for p in PLANS if p.block.marker)
    assert marked["not run"] * 4 <= len(PLANS), "most blocks must run: a not-run marker is not an escape hatch"
    assert sum(1 for p in RUNS if p.block.doc.name == "README.md") >= 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def script_short(script: str, args: list[str]) -> list[str]:
    short = SCRIPT_SHORT.get(Path(script).name)
    return [] if short is None or short[0] in args else list(short)


def shortened(cmd: Command) -> list[str]:
    """The command as it runs here, on a short budget given by options it
    has; what the page gives is kept (a later ``--set`` wins)."""
    from hetsync.cli import build_parser

    tool, tokens = cmd.tool, list(cmd.tokens)
    if tool == "hetsync":
        argv = tokens[1:]
        args = build_parser().parse_args(argv)
        if args.command in ("compare", "simulate", "run", "advise"):
            real = shape(cmd).real
            argv += ["--set", f"max_time_s={1 if real else 0.5}", "--no-plots"]
            if args.command == "advise":
                argv += ["--seeds", "1", "--jobs", "1"]
        elif args.command == "profile" and args.from_raw is None:
            cut = argv.index("--") if "--" in argv else len(argv)
            argv[cut:cut] = ["--compute-s", "1", "--link-reps", "1", "--no-plots"]
        elif args.command == "report":
            argv += ["--no-plots"]
        elif args.command == "launch":
            argv += script_short(args.script, args.script_args)
        return argv
    if tool in ("python", "python3"):
        return [sys.executable, *tokens[1:], *script_short(tokens[1], tokens[2:])]
    if tool == "torchrun":
        _, script, args = torchrun_script(tokens)
        head = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--master-addr=127.0.0.1",
            f"--master-port={free_port()}",
        ]
        return head + tokens[1:] + script_short(script, args)
    raise AssertionError(f"{cmd}: cannot run {tool}")


@pytest.mark.parametrize(
    "plan",
    [
        # (each command of a real block has TIMEOUT_S: a loaded machine takes minutes over advise --verify)
        pytest.param(
            p, marks=[pytest.mark.dist, pytest.mark.timeout(TIMEOUT_S * len(p.run))] if p.real else [], id=p.block.where
        )
        for p in RUNS
    ],
)
def test_block_runs(plan, tmp_path, monkeypatch, capsys):
    """The block's commands run in order in a fresh folder, shortened, each exiting 0."""
    from hetsync.cli import main

    monkeypatch.chdir(tmp_path)
    for name in ("examples", "tests"):
        (tmp_path / name).symlink_to(ROOT / name)
    block = plan.block
    for i in plan.run:
        cmd = block.commands[i]
        where = f"{block.where}, line {cmd.line}: {cmd}"
        if cmd.tool == "cat":
            (tmp_path / cmd.tokens[2]).write_text(cmd.heredoc or "")
        elif plan.shapes[i].inprocess or cmd.tool == "hetsync":
            # (real runs too: their ranks are forked by this process's kept zygote, which imported torch
            # once for every block, where a `hetsync` child would import it twice for each; the entry
            # point itself, a process of its own, is test_cli.py's)
            for key, value in {**cmd.env, "GLOO_SOCKET_IFNAME": "lo"}.items():
                monkeypatch.setenv(key, value)
            code = main(shortened(cmd))
            out = capsys.readouterr()
            assert code == 0, f"{where}: exit {code}\n{out.out[-3000:]}{out.err[-3000:]}"
        else:
            argv = shortened(cmd)
            if cmd.tool == "hetsync":
                argv = [str(BIN / "hetsync"), *argv]
            env = {**os.environ, **cmd.env, "GLOO_SOCKET_IFNAME": "lo"}
            proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
            assert proc.returncode == 0, f"{where}: exit {proc.returncode}\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}"


# --------------------------------------------------------------------------- links
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", lambda m: m[1] or "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    seen: Counter[str] = Counter()
    found = set()
    inside = False
    for line in doc.read_text().splitlines():
        if FENCE.match(line) or line.strip() == "```":
            inside = not inside
        elif not inside and line.startswith("#"):
            base = slug(line.lstrip("#"))
            found.add(base if not seen[base] else f"{base}-{seen[base]}")
            seen[base] += 1
    return found


def prose(doc: Path) -> str:
    """The page without its code blocks and inline code."""
    text = re.sub(r"^\s*```.*?^\s*```", "", doc.read_text(), flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "", text)


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_relative_links_lead_to_files_and_headings_that_exist(doc):
    broken = []
    for target in LINK.findall(prose(doc)):
        if re.match(r"^[a-z]+:", target):
            continue  # https://, mailto:
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, f"{doc.relative_to(ROOT)}: {broken}"


def test_the_slugs_are_githubs():
    assert slug(" What `make demo` shows") == "what-make-demo-shows"
    assert slug(" Data paths: `--path collective`") == "data-paths---path-collective"
    assert slug(" 6. Contracts other tools rely on") == "6-contracts-other-tools-rely-on"
