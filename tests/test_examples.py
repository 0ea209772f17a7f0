"""The examples in examples/ run as documented (shortened)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.dist
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


@pytest.mark.dist
def test_own_loop_example_runs_as_the_readme_launches_it_and_saves_a_loadable_state_dict(tmp_path):
    """README: hetsync launch --nproc 3 --out runs/own-cnn examples/own_loop_cnn.py --policy wbsp (shortened)."""
    import torch

    sys.path.insert(0, str(ROOT / "examples"))
    from own_loop_cnn import SignalCNN

    cmd = [str(Path(sys.executable).with_name("hetsync")), "launch", "--nproc", "2", "--out", str(tmp_path)]
    cmd += [str(ROOT / "examples" / "own_loop_cnn.py"), "--policy", "wbsp", "--epochs", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run,) = json.loads((tmp_path / "summary.json").read_text())
    assert run["label"] == "wbsp" and run["workers"] == 2 and run["stop_reason"] == "no workers left"
    model = SignalCNN()
    model.load_state_dict(torch.load(tmp_path / "model-wbsp.pt", weights_only=True))
    assert (tmp_path / "trace-wbsp.jsonl").stat().st_size > 0 and (tmp_path / "report.html").exists()


def test_own_loop_example_refuses_a_gpu_torch_cannot_see(monkeypatch):
    """--device cuda on a machine without one: one line (hetsync launch prints it, exit 2), not a CUDA traceback."""
    import torch

    from hetsync.errors import BadInput

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    sys.path.insert(0, str(ROOT / "examples"))
    import own_loop_cnn

    monkeypatch.setattr(sys, "argv", ["own_loop_cnn.py", "--device", "cuda"])
    with pytest.raises(BadInput, match="--device cuda: torch sees no CUDA device here"):
        own_loop_cnn.main()


@pytest.mark.dist
def test_the_gru_job_runs_under_hetsync_launch_and_is_a_workload_for_the_simulator(tmp_path):
    """docs/own-job.md: examples/own_job_gru.py under hetsync launch (shortened), and its workload() by path."""
    from hetsync.workloads import make_workload

    cmd = [str(Path(sys.executable).with_name("hetsync")), "launch", "--nproc", "2", "--out", str(tmp_path)]
    cmd += [str(ROOT / "examples" / "own_job_gru.py"), "--policy", "bsp", "--epochs", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run,) = json.loads((tmp_path / "summary.json").read_text())
    assert run["label"] == "bsp" and run["workers"] == 2
    steps = [json.loads((tmp_path / f"steps-rank-{r}.json").read_text())["steps"] for r in (1, 2)]
    assert steps == [140, 140]  # 4,500 sequences per worker, 32 a step, the short last batch dropped
    workload = make_workload(f"{ROOT / 'examples' / 'own_job_gru.py'}:workload")
    assert workload.name == "gru-bigrams" and workload.model_nbytes == 78_864
