"""hetsync.loop: a user's own training script (model, DataLoader, AdamW,
schedule) under every policy, as real processes (hetsync launch, or plain DDP under
one torchrun agent; gloo on loopback). The script is tests/runtime/loop_train.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch

from hetsync.cli import main
from hetsync.errors import BadInput
from hetsync.policies import REGISTRY
from hetsync.runtime.launch import (
    LOOPBACK,
    _environment,
    agent_command,
    free_port,
    launch,
    launcher_reason,
    server_log_tail,
)

pytestmark = pytest.mark.dist  # starts real processes: make test-fast leaves it out

SCRIPT = Path(__file__).with_name("loop_train.py")
FAULTS = Path(__file__).with_name("loop_faults.py")  # every worker goes wrong its own way


def launched(out: Path, policy: str, steps: int, *extra: str, nproc: int = 2, path: str = "ps") -> list[dict]:
    env = {"HETSYNC_PATH": path}  # (hetsync launch --path)
    code = launch(nproc, [policy, str(out), str(steps), *extra], out, timeout_s=240, script=str(SCRIPT), env=env)
    assert code == 0, server_log_tail(out)
    return json.loads((out / "summary.json").read_text())


def ddp(out: Path, steps: int, nproc: int = 2) -> dict[str, torch.Tensor]:
    """The same script under plain DDP (one torchrun agent, loopback rendezvous)."""
    cmd = agent_command(
        0, 1, LOOPBACK, free_port(), ["ddp", str(out), str(steps)], nproc_per_node=nproc, script=str(SCRIPT)
    )
    done = subprocess.run(cmd, env=_environment(LOOPBACK), capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return torch.load(out / "ddp.pt", weights_only=True)


DDP_STEPS = 20  # the StepLR halves the lr at 5, 10, 15: the server must follow the workers' schedule


@pytest.fixture(scope="module")
def ddp_reference(tmp_path_factory) -> dict[str, torch.Tensor]:
    """DDP's model after DDP_STEPS steps of the script: one torchrun launch for every test that compares with it."""
    return ddp(tmp_path_factory.mktemp("ddp"), DDP_STEPS)


@pytest.mark.parametrize("path", ["ps", "collective"])
def test_bsp_in_your_loop_equals_ddp_with_adamw_and_a_schedule(tmp_path, path, ddp_reference):
    steps = DDP_STEPS
    runs = launched(tmp_path, "bsp", steps, path=path)
    ours = torch.load(tmp_path / "model-bsp.pt", weights_only=True)  # a state_dict, loadable as is
    reference = ddp_reference
    assert sorted(ours) == sorted(reference)
    assert max((ours[k] - reference[k]).abs().max().item() for k in ours) <= 1e-5
    import sys

    sys.path.insert(0, str(SCRIPT.parent))
    from loop_train import Net, build

    net = Net()
    net.load_state_dict(ours)
    start, _, _ = build()
    moved = max((net.state_dict()[k] - start.state_dict()[k]).abs().max().item() for k in ours if "frozen" not in k)
    assert moved > 0.05  # trained, and the frozen layer was left alone:
    assert torch.equal(ours["frozen.weight"], start.state_dict()["frozen.weight"])
    (run,) = runs
    assert run["path"] == path and run["path_fallback"] is None
    assert run["steps"] == 2 * steps and run["updates"] == steps and run["stop_reason"] == "no workers left"
    assert [x["reason"] for x in run["workers_left"]] == ["its training loop ended"] * 2
    assert run["final_metrics"]["accuracy"] > 0.5


@pytest.mark.parametrize("path", ["ps", "collective"])
def test_a_loop_stopped_and_resumed_from_its_checkpoint_equals_ddp_run_through(tmp_path, ddp_reference, path):
    """BSP for 8 steps with checkpoints, then a new launch with resume=True to
    step 20: the server's AdamW moments (on the collective path each
    worker's own AdamW's, saved beside the checkpoint), the model and the
    version come back from the checkpoint, the script fast-forwards its
    schedule by ``sync.first_step`` and ``sync.loader`` skips the samples
    already drawn, so the result is DDP's 20 uninterrupted steps."""
    ckpt = tmp_path / "ckpt"
    (run,) = launched(tmp_path, "bsp", 8, "-", str(ckpt), path=path)
    assert run["updates"] == 8 and (ckpt / "ckpt-bsp.pt").is_file()
    if path == "collective":
        assert sorted(f.name for f in ckpt.glob("*.worker-*.pt")) == [f"ckpt-bsp.worker-{w}.pt" for w in range(2)]
    (run,) = launched(tmp_path, "bsp", DDP_STEPS, "-", str(ckpt), "resume", path=path)
    assert run["resumed_from"].get("fresh", []) == [], run["resumed_from"]
    assert run["resumed_from"]["steps"] == 16 and run["resumed_from"]["version"] == 8
    assert run["resumed_from"]["trace"] == "continued"  # hetsync launch set the first run's trace aside
    records = [json.loads(line) for line in (tmp_path / run["trace"]).read_text().splitlines()]
    assert sum(r["ev"] == "resume" for r in records) == 1
    assert sum(r["ev"] == "apply" for r in records) == 20
    assert run["updates"] == 20 and run["stop_reason"] == "no workers left"
    ours = torch.load(tmp_path / "model-bsp.pt", weights_only=True)
    assert max((ours[k] - ddp_reference[k]).abs().max().item() for k in ours) <= 1e-5


def test_the_saved_and_evaluated_model_holds_the_workers_batchnorm_statistics(tmp_path):
    """Only the workers' forward passes move BatchNorm's running statistics;
    rank 0 never trains. The server averages the workers' last ones (floats;
    ``num_batches_tracked``: the largest) into the model it saves."""
    steps = 12
    (run,) = launched(tmp_path, "asp", steps, "bn")
    ours = torch.load(tmp_path / "model-asp.pt", weights_only=True)
    workers = [torch.load(tmp_path / f"buffers-{w}.pt", weights_only=True) for w in range(2)]
    for key in ("norm.running_mean", "norm.running_var"):
        assert torch.allclose(ours[key], (workers[0][key] + workers[1][key]) / 2, atol=1e-6), key
    assert not torch.allclose(ours["norm.running_var"], torch.ones(24))  # not BatchNorm's initial statistics
    assert ours["norm.num_batches_tracked"].item() == steps
    assert run["final_metrics"]["accuracy"] > 0.4


def test_the_server_goes_on_serving_while_your_evaluate_runs_and_says_what_evaluating_cost(tmp_path):
    """Issue 26: a 1-s evaluate every 0.2 s held BSP's server (10 steps in
    20 s). The run's first evaluation waits until worker 0 has made 6 steps
    (and fails after 30 s): only a server that serves while it evaluates
    gets there. Its cost is in the summary, with a warning: evaluations
    slower than the interval are skipped, not queued."""
    steps = 12
    (run,) = launched(tmp_path, "bsp", steps, "slow-eval")
    assert run["stop_reason"] == "no workers left" and run["steps"] == 2 * steps
    records = [json.loads(line) for line in (tmp_path / run["trace"]).read_text().splitlines()]
    assert [r["version"] for r in records if r["ev"] == "eval"][0] == 0  # the one that waited for the steps
    assert run["eval_beside"] is True and run["evals_skipped"] >= 0
    assert 0 < run["eval_time_s"] <= run["wall_time_s"]  # (the time an evaluation ran during the run)
    assert run["eval_share"] == pytest.approx(run["eval_time_s"] / run["wall_time_s"])
    assert "longer than eval_every_s=0.2 s" in run["eval_warning"]  # (each evaluation takes 1 s)


def test_resume_without_its_checkpoint_is_refused_before_any_process_group(tmp_path, monkeypatch):
    import hetsync

    monkeypatch.setenv("RANK", "0")  # rank 0 holds the checkpoint (workers may be on other machines)
    monkeypatch.setenv("WORLD_SIZE", "3")
    with pytest.raises(BadInput, match="needs checkpoint_dir="):
        hetsync.init("bsp", resume=True)
    with pytest.raises(BadInput, match=r"ckpt-ssp-s-2\.pt' does not exist .*drop resume=True"):
        hetsync.init("ssp:s=2", checkpoint_dir=tmp_path, resume=True)


def test_a_simulator_only_policy_is_refused_before_any_process_group(monkeypatch):
    import hetsync

    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "3")
    spec = "tests.userpolicy.halfsync:SimulatorOnly"
    with pytest.raises(BadInput, match=f"policy '{spec}' is simulator only for now"):
        hetsync.init(spec)


@pytest.mark.parametrize(
    "policy", [p if p != "diloco" else "diloco:H=5" for p, cls in REGISTRY.items() if not cls.simulator_only]
)  # (12 steps: a partial round; a simulator-only policy is refused: test_bad_input)
def test_every_policy_trains_your_model_to_the_end_of_your_loop(tmp_path, policy):
    steps = 12
    (run,) = launched(tmp_path, policy, steps)
    assert run["stop_reason"] == "no workers left", run
    assert run["steps"] >= 2 * steps if policy.startswith("lb-bsp") else run["steps"] == 2 * steps
    assert run["updates"] > 0
    if run.get("topology") != "p2p":  # every step the loops took is in the model or booked as dropped:
        assert run["applied_steps"] + run["dropped_steps"] == run["steps"], run  # (none left in flight)
        assert run["outstanding_steps"] == 0, run
    assert run["final_metrics"]["accuracy"] > 0.4  # 3 classes: better than chance after 24 steps
    assert (tmp_path / run["trace"]).stat().st_size > 0
    assert isinstance(torch.load(tmp_path / f"model-{run['trace'][6:-6]}.pt", weights_only=True), dict)


@pytest.mark.parametrize("path", ["ps", "collective"])
def test_a_worker_that_dies_leaves_and_the_others_finish(tmp_path, path):
    # worker 1 is killed at its 4th step: the run goes on without it, and fails (issue 26: loud failures);
    # on the collective path the others' all-reduce fails, and the run goes on through rank 0
    env = {"HETSYNC_PATH": path}
    code = launch(3, ["bsp", str(tmp_path), "12", "1"], tmp_path, timeout_s=240, script=str(SCRIPT), env=env)
    reason = launcher_reason(tmp_path)
    assert code == 1 and reason is not None and reason.startswith("worker 1 (rank 2) failed: "), reason
    assert "\n" not in reason  # the other workers did not fail
    (run,) = json.loads((tmp_path / "summary.json").read_text())
    gone = {x["worker"]: x["reason"] for x in run["workers_left"]}
    assert gone[1].startswith("connection lost")
    assert gone[0] == gone[2] == "its training loop ended"
    assert run["per_worker"]["steps"][0] == run["per_worker"]["steps"][2] == 12
    if path == "collective":
        assert run["path"] == "collective" and run["path_fallback"]["worker"] == 1, run["path_fallback"]
    # (the survivors go on from the model they hold: from the run's first one, as the collective path's
    # fall-back once did, they ended at 0.545)
    assert run["final_metrics"]["accuracy"] > 0.6


def test_init_outside_torchrun_says_how_to_launch(monkeypatch):
    import hetsync

    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(BadInput, match="must run under torchrun or hetsync launch"):
        hetsync.init("bsp")


def test_a_bad_policy_is_refused_before_any_process_group(monkeypatch):
    import hetsync

    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")  # no MASTER_ADDR: forming a group would fail differently
    with pytest.raises(BadInput, match="unknown policy"):
        hetsync.init("nope")
    with pytest.raises(BadInput, match="'max' or 'min'"):
        hetsync.init("bsp", metrics={"bleu": "up"})


def test_launch_refuses_a_missing_script(tmp_path, capsys):
    assert main(["launch", "--out", str(tmp_path), str(tmp_path / "missing.py")]) == 2
    assert "no such script" in capsys.readouterr().err


# ---------------------------------------------- loud failures (issue 26, item 3)
@pytest.fixture(scope="module")
def faulty(tmp_path_factory) -> tuple[int, str, Path]:
    """One ``hetsync launch --nproc 3`` of loop_faults.py, whose three workers
    each fail their own way: its exit status, its console (whitespace
    collapsed: rich wraps long lines) and its output folder."""
    import sys

    out = tmp_path_factory.mktemp("faults")
    cmd = [str(Path(sys.executable).with_name("hetsync")), "launch", "--nproc", "3", "--out", str(out), str(FAULTS)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    return proc.returncode, " ".join((proc.stdout + proc.stderr).split()), out


def test_a_worker_that_raises_fails_the_run_and_the_console_names_it_and_its_error(faulty):
    """Worker 0's OneCycleLR steps past its end (the ValueError a worker that
    LB-BSP gives smaller batches meets); any exception takes this path. The
    run went on without it; its results are kept, with the reason per worker."""
    code, console, out = faulty
    assert code == 1, console
    assert "worker 0 (rank 1) failed: ValueError: Tried to step 5 times." in console, console
    (run,) = json.loads((out / "summary.json").read_text())
    assert {x["worker"] for x in run["workers_left"]} == {0, 1, 2} and run["steps"] > 0


def test_a_worker_that_never_calls_finish_fails_the_run_and_the_console_names_it(faulty):
    code, console, _ = faulty
    assert code == 1, console
    assert "worker 1 (rank 2) failed: the script ended without calling sync.finish()" in console, console


def test_a_collective_after_sync_optimizer_is_refused_at_once_instead_of_hanging(faulty):
    """Rank 0 joins no collective: worker 2's dist.all_gather_object would
    hang until the server dropped it (worker_timeout_s=60)."""
    code, console, out = faulty
    assert code == 1, console
    assert "worker 2 (rank 3) failed: BadInput: dist.all_gather_object() after sync.optimizer would hang" in console
    (run,) = json.loads((out / "summary.json").read_text())
    assert run["wall_time_s"] < 30


def test_a_default_sampler_splits_over_the_workers_and_a_second_step_without_backward_is_warned_once(faulty):
    _, _, out = faulty
    for worker in range(3):
        log = (out / "logs" / f"rank-{worker + 1}.log").read_text()
        assert f"worker {worker}: sampler {worker} of 3, 200 samples" in log  # not 150 of 4: all the data
        assert log.count("warning: opt.step() was called again without a backward() in between") == 1, log


def test_on_the_collective_path_loops_may_end_unevenly_under_lb_bsp(tmp_path):
    """LB-BSP gives the workers different batches; worker 1's loop ends 4
    steps before worker 0's. The workers' group needs every member in every
    round: worker 1 joins the rounds it does not compute with zero weight
    until the run ends, and nobody hangs."""
    (run,) = launched(tmp_path, "lb-bsp", 12, "uneven", path="collective")
    assert run["path"] == "collective" and run["path_fallback"] is None
    assert run["per_worker"]["steps"] == [12, 8], run["per_worker"]
    assert run["stop_reason"] == "no workers left" and run["outstanding_steps"] == 0
    assert run["applied_steps"] + run["dropped_steps"] == run["steps"]
    assert run["final_metrics"]["accuracy"] > 0.4


@pytest.mark.parametrize("policy", ["local-sgd:H=4", "diloco:H=4"])
def test_local_rounds_in_your_loop_end_alike_on_either_path_and_resumed(tmp_path, policy):
    """Local SGD and DiLoCo in a user's loop: on the collective path the
    workers all-reduce each round's model deltas and take the outer step
    (plain averaging; DiLoCo's Nesterov) themselves, as rank 0 does on the
    parameter-server path: the same rounds, the same model. Stopped after
    two rounds with checkpoints and resumed, the collective run ends there
    too: each worker saved its AdamW's and its outer optimizer's state."""
    models = {}
    for path in ("ps", "collective"):
        (run,) = launched(tmp_path / path, policy, 12, path=path)
        assert run["path"] == path and run["path_fallback"] is None
        assert run["updates"] == 3 and run["applied_steps"] == run["steps"] == 24, run  # 3 rounds of 4 steps
        (saved,) = (tmp_path / path).glob("model-*.pt")
        models[path] = torch.load(saved, weights_only=True)
    out, ckpt = tmp_path / "resumed", tmp_path / "ckpt"
    (run,) = launched(out, policy, 8, "-", str(ckpt), path="collective")
    assert run["updates"] == 2 and len(list(ckpt.glob("*.worker-*.pt"))) == 2
    (run,) = launched(out, policy, 12, "-", str(ckpt), "resume", path="collective")
    assert run["resumed_from"]["version"] == 2 and run["resumed_from"].get("fresh", []) == [], run["resumed_from"]
    assert run["updates"] == 3
    (saved,) = out.glob("model-*.pt")
    models["resumed"] = torch.load(saved, weights_only=True)
    ps = models["ps"]
    for other in ("collective", "resumed"):
        assert max((ps[k] - models[other][k]).abs().max().item() for k in ps) <= 1e-5, other
    start, _, _ = _build()
    assert max((ps[k] - start.state_dict()[k]).abs().max().item() for k in ps) > 0.01  # (it trained)


def _build():  # type: ignore[no-untyped-def]
    import sys

    sys.path.insert(0, str(SCRIPT.parent))
    from loop_train import build

    return build()


def test_gradient_accumulation_on_the_collective_path_fails_loudly(tmp_path):
    """Two backward passes per opt.step(): the first has started the buckets'
    all-reduces, so the second would change gradients already reduced."""
    env = {"HETSYNC_PATH": "collective"}
    code = launch(2, ["bsp", str(tmp_path), "6", "accumulate"], tmp_path, timeout_s=240, script=str(SCRIPT), env=env)
    reason = launcher_reason(tmp_path)
    assert code == 1 and reason is not None and "gradient accumulation" in reason and "path='ps'" in reason, reason
