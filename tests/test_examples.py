"""The examples in examples/ run as documented (shortened)."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_custom_workload_example_runs(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "custom_workload.py"), "--out", str(tmp_path), "--max-time-s", "3"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    runs = json.loads((tmp_path / "summary.json").read_text())
    assert [r["label"] for r in runs] == ["bsp", "asp", "ssp(s=2)"]
    assert (tmp_path / "accuracy.png").stat().st_size > 0
