"""The trace of the built-in ``default`` scenario does not change: its events
not by one byte, its metrics not beyond the last bits that differ between CPUs.

Features that leave the default settings alone (named metrics and targets,
optimizers, schedules) must leave its trace alone: same events, same order,
same floats, same key order. It was pinned as the sha256 of the trace that

    hetsync simulate -s default -p bsp --set max_time_s=5 --no-plots

wrote before named metrics existed, computed on a pristine checkout of commit
58e5411 (``git worktree add``, run with ``PYTHONPATH=<worktree>/src``) with
torch 2.13.0+cpu on x86_64; the full 30 s run of ``bsp`` and ``asp`` was
byte-identical before and after as well.

The ``eval`` records hold losses computed by torch on the CPU: another torch
build or instruction set changes their last digits (on an AMD EPYC with
AVX2, a few 1e-8). So the digest became a fingerprint (:mod:`tests.sim.fingerprint`):
the events byte for byte, the metrics within 1e-5, recorded with commit
b69b02e on that machine, where the trace is byte-identical to the code after
it.
"""

from __future__ import annotations

from hetsync.cli import main
from tests.sim.fingerprint import fingerprint, mismatch, recorded

GOLDEN_ARGV = ["simulate", "-s", "default", "-p", "bsp", "--set", "max_time_s=5", "--no-plots"]


def test_default_scenario_trace_is_byte_identical(tmp_path, capsys):
    assert main([*GOLDEN_ARGV, "-o", str(tmp_path)]) == 0
    capsys.readouterr()
    trace = (tmp_path / "trace-bsp.jsonl").read_bytes()
    first_eval = next(line for line in trace.splitlines() if b'"ev":"eval"' in line)
    # the eval record of a classifier keeps its keys and their order
    assert first_eval.startswith(b'{"t":0.0,"ev":"eval","accuracy":') and b',"loss":' in first_eval
    assert first_eval.endswith(b',"version":0}')
    problem = mismatch(fingerprint(trace), recorded("golden default bsp 5s"))
    assert problem is None, problem
