"""A simulator trace's fingerprint, the same on every CPU: what the digest
tests (test_trace_digests, test_golden_trace) compare against traces recorded
before a change.

A trace is virtual times, events, ids and byte counts — exact, whatever the
machine — plus the ``eval`` records' metrics, which torch computes with the
machine's vector instructions: their last bits differ between CPUs (seen: an
AMD EPYC with AVX2 against the machine the first digests were recorded on;
on one machine, ``ATEN_CPU_CAPABILITY=default`` against ``avx2`` moved them
by up to 1.8e-7 relative, and nothing else). So the fingerprint is

* ``structure``: the sha256 of the trace's bytes with every eval record's
  metric values replaced by null (its time, keys, key order and version
  kept), which must not change by one byte;
* ``metrics``: the eval records' metric values, which must match within
  :data:`METRIC_RTOL`.

Recording (after a change that means to alter a trace, with the code before
it to check that only the intended cases move)::

    .venv/bin/python -m tests.sim.fingerprint      # rewrites tests/sim/trace_fingerprints.json
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

FINGERPRINTS = Path(__file__).with_name("trace_fingerprints.json")
METRIC_RTOL = 1e-5
"""Metrics' tolerance: 50x what the instruction set moved them by (1.8e-7), far below what a change of the math moves."""
_KEPT = ("t", "ev", "version")  # an eval record's fields that are not metrics


def fingerprint(trace: bytes) -> dict[str, Any]:
    """``{"structure": sha256, "metrics": [[value, ...] per eval record]}``."""
    lines, metrics = [], []
    for line in trace.splitlines():
        record = json.loads(line)
        if record["ev"] == "eval":  # (by the record's kind, not a substring of its text)
            metrics.append([v for k, v in record.items() if k not in _KEPT])
            line = json.dumps({k: (v if k in _KEPT else None) for k, v in record.items()}, separators=(",", ":"))
            line = line.encode()
        lines.append(line)
    return {"structure": hashlib.sha256(b"\n".join(lines)).hexdigest(), "metrics": metrics}


def recorded(case: str) -> dict[str, Any]:
    return json.loads(FINGERPRINTS.read_text())[case]


def mismatch(found: dict[str, Any], want: dict[str, Any]) -> str | None:
    """Why ``found`` is not ``want`` (None: it is)."""
    if found["structure"] != want["structure"]:
        return f"the trace's events changed: structure {found['structure'][:12]} != {want['structure'][:12]}"
    if len(found["metrics"]) != len(want["metrics"]):
        return f"{len(found['metrics'])} eval records, recorded {len(want['metrics'])}"
    for i, (got, exp) in enumerate(zip(found["metrics"], want["metrics"], strict=True)):
        for a, b in zip(got, exp, strict=True):
            same = a == b or (
                a is not None and b is not None and math.isclose(a, b, rel_tol=METRIC_RTOL, abs_tol=1e-12)
            )
            if not same:
                return f"eval record {i}: metrics {got} != recorded {exp} (rel tolerance {METRIC_RTOL})"
    return None


def _record_all() -> dict[str, Any]:  # pragma: no cover - run by hand, see the module docstring
    import tempfile

    from hetsync.cli import main
    from hetsync.scenario import load_scenario
    from hetsync.sim.engine import Simulation
    from tests.sim.test_golden_trace import GOLDEN_ARGV
    from tests.sim.test_trace_digests import CASES

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.jsonl"
        for scenario, spec in CASES:
            Simulation(load_scenario(scenario, max_time_s=3.0), spec, trace_path=path).run()
            out[f"{scenario} {spec}"] = fingerprint(path.read_bytes())
        assert main([*GOLDEN_ARGV, "-o", tmp]) == 0
        out["golden default bsp 5s"] = fingerprint((Path(tmp) / "trace-bsp.jsonl").read_bytes())
    return out


if __name__ == "__main__":  # pragma: no cover
    found = _record_all()
    FINGERPRINTS.write_text("{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in found.items()) + "\n}\n")
