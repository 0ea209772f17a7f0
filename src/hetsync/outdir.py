"""A run's output folder: what hetsync writes there, and how it never loses a result.

Rules (issue 30, "nothing lost, ever"):

- Every input is checked before :func:`begin` is called; :func:`begin`
  itself refuses, before it moves anything, a folder holding files whose
  names hetsync writes but that hetsync did not record as its own (the
  user's ``accuracy.png``, ``logs/mine.log``), and a run whose inputs (a
  scenario file, a summary it reads) are among the results it would replace.
- An earlier run's results are *set aside* (renamed into ``previous-run/``),
  never deleted, until the new run has finished: :meth:`Replacing.finish`
  drops them after a run that finished, keeps them beside the new results
  after a run that was interrupted or failed with results of its own, and
  puts them back after a run that failed before writing any result (its
  partial output then waits in ``failed-run/``).
- Only files that hetsync wrote and recorded in the folder's manifest
  (``.hetsync-manifest.json``) are ever moved or replaced, and of those only
  the ones named as results (:func:`hetsync_writes`): a checkpoint folder
  kept inside ``--out`` stays where it is for ``--resume``. A run that was
  killed before it could record its files left a manifest that says so
  (state ``running``, with the files that were there before it): every file
  that appeared since is that run's.

:func:`write_json_atomic` replaces a file so that a crash or a power loss
leaves either the old or the new content, never a torn one. A run that was
interrupted keeps its partial trace under :func:`partial_name`, which no
report reads as a finished run.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hetsync.errors import BadInput

SUMMARY = "summary.json"
MANIFEST = ".hetsync-manifest.json"
PREVIOUS = "previous-run"
"""Where an earlier run's results wait while a newer run goes on."""
FAILED = "failed-run"
"""Where a run that failed before writing any result leaves what it wrote,
when the earlier results it had set aside are put back."""
RESULTS = (SUMMARY, "advice.json", "profile.json")
"""A run that wrote one of these has results of its own worth keeping."""
FILES = (
    SUMMARY,
    SUMMARY + ".tmp",
    "progress.json",
    "exit-status.json",
    "run-config.json",
    "ddp.json",
    "ddp.log",
    "report.md",
    "report.html",
    "trace.json",
    "trace.json.tmp",
    "advice.json",
    "advice.json.tmp",
    "advice.html",
    "advice-tta.png",
    "ddp-model.pt",
    "cluster.yaml",
    "profile.json",
    "profile.md",
    "profile.html",
    "profile.png",
    "profile.log",
    "profile.log.zygote",  # (what the profile job's zygote said: hetsync.runtime.zygote)
    "raw.json",
    "server-trace.jsonl",
    MANIFEST,
)
"""Files of a run folder that hetsync writes, by exact name."""
PATTERNS = (
    "trace-*.jsonl",
    "trace-*.jsonl.partial",
    "timeline-*.png",
    "shares.png",
    "accuracy.png",
    "metrics.png",
    "model-*.pt",
)
"""Files hetsync writes, by pattern (the plot of another target metric is
named by the caller: ``begin(also=...)``)."""
LOGS = "logs"
DIRS = (LOGS, "verify", PREVIOUS, FAILED)
"""Folders whose every file hetsync may write."""
ATTEMPT_LOGS = "logs-attempt-*"
"""The logs of a job's earlier attempts, kept when its server died and it
was restarted (``--max-restarts``: :func:`hetsync.runtime.launch.with_restarts`)."""
PARTIAL_SUFFIX = ".partial"
MAX_FILES = 100_000
"""A folder holding more files than this is not a run folder: refused."""


def safe_name(label: str) -> str:
    """Return a file-name fragment for a run label.

    The rule: lowercase the label; keep ASCII letters, digits, ``.`` and
    ``_``; replace every run of other characters (``-`` included) by a single
    ``-``; strip ``-`` from both ends. A label with nothing left becomes
    ``run``. Examples: ``ssp(s=3)`` -> ``ssp-s-3``,
    ``Local SGD (H=4, avg)`` -> ``local-sgd-h-4-avg``, ``bsp`` -> ``bsp``.
    """
    name = re.sub(r"[^a-z0-9._]+", "-", label.lower()).strip("-")
    return name or "run"


def partial_name(trace: Path) -> Path:
    """Where an interrupted run's trace is kept: ``trace-x.jsonl.partial``."""
    return trace.with_name(trace.name + PARTIAL_SUFFIX)


def hetsync_writes(rel: str, also: Iterable[str] = ()) -> bool:
    """Whether hetsync may write the file at ``rel`` (a path relative to the
    run folder, with ``/``): a name in :data:`FILES`, a :data:`PATTERNS`
    match, ``also`` (names the caller adds), or anything under :data:`DIRS`."""
    head, _, rest = rel.partition("/")
    if rest:
        return head in DIRS or fnmatch.fnmatch(head, ATTEMPT_LOGS)
    return rel in FILES or rel in set(also) or any(fnmatch.fnmatch(rel, p) for p in PATTERNS)


def _files(out: Path) -> list[str]:
    """Every file under ``out`` (relative, ``/``-separated), bounded by :data:`MAX_FILES`."""
    found: list[str] = []
    for root, dirs, names in os.walk(out):
        dirs.sort()
        base = Path(root).relative_to(out)
        for name in sorted(names):
            found.append((base / name).as_posix())
        if len(found) > MAX_FILES:
            raise BadInput(
                f"--out {out} holds more than {MAX_FILES:,} files: give each run a folder of its own, e.g. runs/mine"
            )
    return found


def read_manifest(out: Path) -> dict[str, Any] | None:
    """The folder's manifest, or None if it has none (or an unreadable one)."""
    try:
        data = json.loads((out / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _listed(manifest: dict[str, Any] | None, key: str) -> set[str]:
    items = manifest.get(key) if manifest else None
    return {x for x in items if isinstance(x, str)} if isinstance(items, list) else set()


def recorded(out: Path, present: Sequence[str] | None = None) -> list[str]:
    """The files of ``out`` that hetsync wrote, as its manifest records them:
    the files it lists, or, if a run was killed before it could list them
    (state ``running``), every file that was not there when it began."""
    present = _files(out) if present is None else present
    manifest = read_manifest(out)
    if manifest is None:
        return []
    if manifest.get("state") == "running":
        before = _listed(manifest, "before")
        ours = [f for f in present if f not in before]
    else:
        listed = _listed(manifest, "files") | {MANIFEST}
        ours = [f for f in present if f in listed]
    return sorted(set(ours) | ({MANIFEST} & set(present)))


def record(out: Path, paths: Iterable[Path]) -> None:
    """Add ``paths`` (files hetsync wrote in ``out`` outside a run, e.g.
    ``hetsync report`` redrawing the plots) to the folder's manifest."""
    rels = {r for r in (inside(out, p) for p in paths) if r is not None}
    manifest = read_manifest(out) or {"version": 1, "state": "complete", "files": []}
    key = "files" if manifest.get("state") != "running" else None
    if key is None or not rels:
        return  # a run in progress records what it writes when it ends
    write_json_atomic(out / MANIFEST, {**manifest, "files": sorted(_listed(manifest, "files") | rels)})


def _move(out: Path, rels: Iterable[str], dest: Path) -> None:
    """Rename each file ``out/rel`` to ``dest/rel`` and drop the folders it leaves empty."""
    for rel in rels:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(out / rel, target)
        _prune(out, (out / rel).parent)


def _prune(out: Path, folder: Path) -> None:
    while folder != out and folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
        folder = folder.parent


def inside(out: Path, path: Path | str) -> str | None:
    """``path`` relative to ``out`` (``/``-separated), or None if it is not inside it."""
    try:
        return Path(path).resolve().relative_to(out.resolve()).as_posix()
    except ValueError:
        return None


def _show(rels: Sequence[str], n: int = 3) -> str:
    return ", ".join(rels[:n]) + (f" and {len(rels) - n} more" if len(rels) > n else "")


@dataclass
class Replacing:
    """A run writing into ``out``: what was there before it, and where the
    earlier results wait (``aside``) until :meth:`finish` settles them."""

    out: Path
    before: frozenset[str]
    aside: Path | None
    kept: tuple[str, ...] = ()
    also: tuple[str, ...] = ()
    finished: bool = False

    @property
    def set_aside(self) -> int:
        """How many earlier files were set aside."""
        return 0 if self.aside is None else sum(1 for p in self.aside.rglob("*") if p.is_file())

    def _write_manifest(self, state: str, files: Iterable[str]) -> None:
        write_json_atomic(self.out / MANIFEST, {"version": 1, "state": state, "files": sorted(set(files))})

    def new_files(self) -> list[str]:
        """The files this run wrote (everything that was not there when it began)."""
        if not self.out.is_dir():
            return []
        skip = (PREVIOUS + "/",) if self.aside is not None else ()
        return [
            f
            for f in _files(self.out)
            if f not in self.before and f != MANIFEST and not f.startswith(skip) and hetsync_writes(f, self.also)
        ]

    def _aside_files(self) -> list[str]:
        if self.aside is None or not self.aside.is_dir():
            return []
        return [p.relative_to(self.out).as_posix() for p in sorted(self.aside.rglob("*")) if p.is_file()]

    def finish(self, ok: bool, *, keep: bool = False) -> str | None:
        """Settle the folder once the run has ended; returns a line for the
        console, or None when there is nothing to say.

        ``ok``: the run finished — the earlier results are dropped. Else, if
        it wrote results of its own (:data:`RESULTS`) or ``keep`` (an
        interrupted run that ``--resume`` continues), its files stay and the
        earlier results stay in ``previous-run/``; if it wrote none, the
        earlier results are put back and what it wrote goes to ``failed-run/``."""
        if self.finished:
            return None
        self.finished = True
        new = self.new_files()
        mine = set(new) | set(self.kept)
        if ok:
            if self.aside is not None:
                shutil.rmtree(self.aside, ignore_errors=True)
            self._write_manifest("complete", mine)
            return None
        wrote_results = any(f in RESULTS for f in new)
        if self.aside is None or wrote_results or keep:
            mine |= set(self._aside_files())
            self._write_manifest("interrupted" if wrote_results or keep else "failed", mine)
            if self.aside is None:
                return None
            return f"the earlier run's results in {self.out}/ are kept in {self.aside}/"
        return self._put_back(new)

    def _put_back(self, new: list[str]) -> str:
        """Put the earlier results back; what this run wrote goes to ``failed-run/``."""
        assert self.aside is not None
        staging = self.out / f".hetsync-failed-{os.getpid()}"
        _move(self.out, new, staging)
        back = self.out / f".hetsync-restore-{os.getpid()}"  # (the earlier results may hold a previous-run/ too)
        os.replace(self.aside, back)
        earlier = [p.relative_to(back).as_posix() for p in sorted(back.rglob("*")) if p.is_file()]
        _move(back, earlier, self.out)
        shutil.rmtree(back, ignore_errors=True)
        line = f"this run wrote no results: the earlier run's are back in {self.out}/"
        if new:
            shutil.rmtree(self.out / FAILED, ignore_errors=True)  # an older failure's output, superseded
            os.replace(staging, self.out / FAILED)
            manifest = read_manifest(self.out) or {"version": 1, "state": "complete", "files": []}
            files = {f for f in _listed(manifest, "files") if not f.startswith(FAILED + "/")}
            files |= {f"{FAILED}/{f}" for f in new}
            write_json_atomic(self.out / MANIFEST, {**manifest, "files": sorted(files)})
            line += f"; what this run wrote is in {self.out / FAILED}/"
        return line


def begin(
    out: Path,
    *,
    inputs: Iterable[Path | str | None] = (),
    also: Iterable[str] = (),
    stay: Iterable[Path | str | None] = (),
    set_aside: bool = True,
    keep_traces: bool = False,
) -> Replacing:
    """Make ``out`` ready for a new run (called once every input is checked).

    Refuses (:class:`BadInput`, nothing touched) a folder holding files whose
    names hetsync writes that are not recorded as hetsync's, and any of
    ``inputs`` that is among the files the run would replace. Then sets the
    earlier results aside in ``previous-run/`` (unless not ``set_aside``: a
    run that resumes in place, whose earlier files are recorded as its own)
    and records that a run has begun. ``keep_traces``: copy the earlier
    traces back as ``trace-*.jsonl.partial`` (a script under ``hetsync
    launch`` that resumes from a checkpoint continues its trace). ``stay``:
    inputs that live in ``out`` and stay where they are, untouched (``profile
    --from-raw DIR/raw.json -o DIR``)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise BadInput(f"--out {out} is a file, not a folder")
    present = _files(out) if out.is_dir() else []
    staying = {inside(out, p) for p in stay if p is not None} - {None}
    present = [f for f in present if f not in staying]
    extra = tuple(also)
    ours = {f for f in recorded(out, present) if hetsync_writes(f, extra)}  # (checkpoints kept in it stay put)
    theirs = [f for f in present if hetsync_writes(f, extra) and f not in ours]
    if theirs:
        raise BadInput(
            f"--out {out} holds files whose names hetsync writes but that hetsync did not record as its own "
            f"({_show(theirs)}): move them, or choose another --out"
        )
    for given in inputs:
        rel = inside(out, given) if given is not None else None
        if rel is None or rel in staying:
            continue
        if rel in ours or hetsync_writes(rel, extra):
            raise BadInput(
                f"{given} is an input of this run and one of the results it would replace in {out}/: "
                "copy it elsewhere or choose another --out"
            )
    out.mkdir(parents=True, exist_ok=True)
    aside: Path | None = None
    kept: tuple[str, ...] = ()
    if ours and set_aside:
        staging = out / f".hetsync-aside-{os.getpid()}"
        _move(out, sorted(ours), staging)
        aside = out / PREVIOUS
        os.replace(staging, aside)
        if keep_traces:
            for trace in sorted(aside.glob("trace-*.jsonl")):
                shutil.copy2(trace, partial_name(out / trace.name))
    elif ours:
        kept = tuple(sorted(ours - {MANIFEST}))
    before = frozenset(f for f in _files(out) if f != MANIFEST and f not in kept and not f.startswith(PREVIOUS + "/"))
    if keep_traces and aside is not None:
        before = frozenset(f for f in before if not fnmatch.fnmatch(f, "trace-*.jsonl.partial"))
    write_json_atomic(
        out / MANIFEST, {"version": 1, "state": "running", "started": time.time(), "before": sorted(before)}
    )
    return Replacing(out=out, before=before, aside=aside, kept=kept, also=extra)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` through a synced temporary file and
    an atomic rename: the old or the new content survives a crash, never a
    torn file."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as fh:
        fh.write(json.dumps(data, indent=1, allow_nan=False) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)
