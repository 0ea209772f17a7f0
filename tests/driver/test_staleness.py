"""Staleness remedies on the server side both drivers share (hetsync.ledger,
hetsync.optim, hetsync.driver.core): delay compensation and the momentum
correction by hand, the models kept for compensation and their bound, and
simulator runs in which each option changes what is applied."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from hetsync.driver.core import policy_context, policy_labels
from hetsync.errors import BadInput
from hetsync.ledger import HeldPush, Ledger
from hetsync.optim import Stepper
from hetsync.policies import make_policy
from hetsync.policies.base import Apply
from hetsync.recipe import OptimizerConfig, ScheduleConfig
from hetsync.sim.engine import Simulation
from hetsync.trace import TraceWriter
from hetsync.workloads import make_workload
from tests.sim.conftest import make_scenario


def ledger_for(spec: str, theta: torch.Tensor, *, workers: int = 2, stepper: Stepper | None = None) -> Ledger:
    sc = make_scenario(workers=workers)
    policy = make_policy(spec, policy_context(sc))
    return Ledger(policy, make_workload(sc.job.workload), theta, TraceWriter(None), stepper=stepper)


def grad_push(worker: int, grad: list[float], base: int) -> HeldPush:
    return HeldPush(worker, "grad", torch.tensor(grad, dtype=torch.float64), base, 1, 8)


# ------------------------------------------------------ delay compensation
def test_delay_compensation_by_hand() -> None:
    theta0 = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    led = ledger_for("asp:compensate=2.0", theta0)
    assert led.keeps_bases and led.kept_versions == [0]  # both workers start on version 0
    a = led.hold(grad_push(0, [1.0, 1.0, 1.0], base=0))
    led.apply(Apply(contributions=((a, 0.5),), lr=0.1, compensate=2.0), 1.0)
    theta1 = torch.tensor([0.95, 1.95, 2.95], dtype=torch.float64)  # fresh: θ0 − 0.1·0.5·g, no correction
    torch.testing.assert_close(led.theta, theta1)
    model, version = led.send_model(0)  # worker 0 pulls version 1
    assert version == 1 and model is led.theta
    led.model_arrived(0, 1)
    assert led.kept_versions == [0, 1]  # worker 1 still computes on version 0
    # worker 1's gradient was computed on θ0 and lands on θ1 (staleness 1):
    # g + λ·g⊙g⊙(θ1 − θ0) = [2, −1, .5] + 2·[4, 1, .25]·(−.05) = [1.6, −1.1, .475]
    b = led.hold(grad_push(1, [2.0, -1.0, 0.5], base=0))
    led.apply(Apply(contributions=((b, 0.5),), lr=0.1, compensate=2.0), 2.0)
    want = theta1 - 0.05 * torch.tensor([1.6, -1.1, 0.475], dtype=torch.float64)  # [.87, 2.005, 2.92625]
    torch.testing.assert_close(led.theta, want)
    plain = theta1 - 0.05 * torch.tensor([2.0, -1.0, 0.5], dtype=torch.float64)
    assert not torch.allclose(led.theta, plain)  # the correction did something
    led.send_model(1)
    led.model_arrived(1, 2)
    assert led.kept_versions == [1, 2]  # nobody computes on version 0 any more: dropped
    assert led.uncompensated == 0


def test_without_compensation_the_server_keeps_no_models() -> None:
    led = ledger_for("asp", torch.zeros(3))
    assert not led.keeps_bases
    led.send_model(0)
    led.model_arrived(0, 0)
    assert led.kept_versions == [] and led.max_kept_models == 0


def test_a_gradient_whose_base_was_not_kept_is_applied_uncompensated() -> None:
    led = ledger_for("asp:compensate=1.0", torch.zeros(2, dtype=torch.float64))
    a = led.hold(grad_push(0, [1.0, 1.0], base=0))
    led.apply(Apply(contributions=((a, 1.0),), lr=1.0, compensate=1.0), 1.0)
    b = led.hold(grad_push(1, [1.0, 2.0], base=-3))  # a model this server never handed out
    led.apply(Apply(contributions=((b, 1.0),), lr=1.0, compensate=1.0), 2.0)
    torch.testing.assert_close(led.theta, torch.tensor([-2.0, -3.0], dtype=torch.float64))
    assert led.uncompensated == 1


def test_the_models_kept_are_bounded_by_two_per_worker() -> None:
    n = 3
    led = ledger_for("asp:compensate=0.1", torch.zeros(4), workers=n)
    gen = torch.Generator().manual_seed(0)
    holding = [0] * n
    for k in range(60):
        w = k % n if k % 7 else (k * 5) % n
        push_id = led.hold(HeldPush(w, "grad", torch.randn(4, generator=gen), holding[w], 1, 8))
        led.apply(Apply(contributions=((push_id, 1 / n),), lr=0.1, compensate=0.1), float(k))
        _, version = led.send_model(w)
        if k % 5:  # most pulls land before the next push; some are still on their way
            led.model_arrived(w, version)
            holding[w] = version
        else:
            led.send_model(w)  # a second pull in flight
            for v in (version, version):
                led.model_arrived(w, v)
            holding[w] = version
        assert len(led.kept_versions) <= 2 * n
    assert 0 < led.max_kept_models <= 2 * n
    for w in range(n):
        led.forget_worker(w)
    assert led.kept_versions == []


# --------------------------------------------------------- momentum correction
def test_momentum_corrected_by_hand() -> None:
    stepper = Stepper(OptimizerConfig(momentum=0.9), ScheduleConfig(), None)
    led = ledger_for("asp:momentum=corrected", torch.zeros(2), stepper=stepper)
    for g in ([1.0, 0.0], [0.0, 1.0]):
        push_id = led.hold(HeldPush(0, "grad", torch.tensor(g), 0, 1, 8))
        led.apply(Apply(contributions=((push_id, 1.0),), lr=0.1, implicit_momentum=0.75), 0.0)
    # heavy ball at momentum max(0, 0.9 − 0.75) = 0.15: v1 = g1, θ1 = −.1·v1; v2 = .15·v1 + g2, θ2 = θ1 − .1·v2
    torch.testing.assert_close(led.theta, torch.tensor([-0.115, -0.1]))
    assert stepper.state_dict()["param_groups"][0]["momentum"] == pytest.approx(0.15)


def test_momentum_corrected_needs_an_sgd_server() -> None:
    stepper = Stepper(OptimizerConfig(name="adamw"), ScheduleConfig(), None)
    led = ledger_for("asp:momentum=corrected", torch.zeros(2), stepper=stepper)
    push_id = led.hold(HeldPush(0, "grad", torch.ones(2), 0, 1, 8))
    with pytest.raises(BadInput, match="momentum=corrected lowers an SGD server's momentum; .* adamw"):
        led.apply(Apply(contributions=((push_id, 1.0),), lr=0.1, implicit_momentum=0.75), 0.0)
    sc = make_scenario(optimizer={"name": "adamw"})
    with pytest.raises(BadInput, match=r"policy 'asp:momentum=corrected': momentum=corrected .* optimizer is adamw"):
        policy_labels(sc, ["asp:momentum=corrected"])  # before any run starts
    assert policy_labels(sc, ["asp:lr_scale=inverse"]) == ["asp(lr_scale=inverse)"]


# ------------------------------------------------------ in the simulator
def stale_scenario(**overrides: Any) -> Any:
    # one worker 4× slower than the others: its pushes land several versions late
    return make_scenario(workers=4, slowdown=[1.0, 1.0, 1.0, 4.0], max_steps=12, seed=1, **overrides)


def watch_applies(sim: Simulation) -> list[dict[str, Any]]:
    """Every single-push Apply of the run: staleness, weight, lr, the gradient,
    the model before and after, and the model the gradient was computed on."""
    led = sim.ledger
    assert led.theta is not None
    models = {led.version: led.theta}  # version -> the global model (never modified in place)
    seen: list[dict[str, Any]] = []
    apply = led.apply

    def watched(cmd: Apply, now_s: float) -> None:
        ((push_id, weight),) = cmd.contributions
        rec = led.pushes[push_id]
        before, base = led.theta, rec.base_version
        entry = {"tau": led.version - base, "w": weight, "lr": cmd.lr, "g": rec.payload.clone(), "before": before}
        apply(cmd, now_s)
        models[led.version] = led.theta
        seen.append({**entry, "after": led.theta, "then": models[base]})

    led.apply = watched  # type: ignore[method-assign]
    return seen


@pytest.mark.parametrize(("rule", "factor"), [("none", lambda t: 1.0), ("inverse", lambda t: 1 / max(1, t))])
def test_lr_scale_inverse_applies_stale_pushes_with_smaller_steps(rule: str, factor: Any) -> None:
    sc = stale_scenario()
    sim = Simulation(sc, f"asp:lr_scale={rule}")
    seen = watch_applies(sim)
    sim.run()
    assert max(a["tau"] for a in seen) >= 3  # the scenario does make stale pushes
    for a in seen:
        # plain SGD: the step is lr·w·g, so its length over the unscaled one is the factor applied
        step = (a["after"] - a["before"]).norm().item()
        unscaled = sc.job.lr * a["w"] * a["g"].norm().item()
        assert step / unscaled == pytest.approx(factor(a["tau"]), rel=1e-4), a["tau"]


def test_compensate_applies_the_dc_asgd_gradient_in_the_simulator(tmp_path: Path) -> None:
    lam = 0.5
    sim = Simulation(stale_scenario(), f"asp:compensate={lam}", trace_path=tmp_path / "t.jsonl")
    seen = watch_applies(sim)
    summary = sim.run().summary
    corrected = 0
    for a in seen:
        g, now, then = a["g"], a["before"], a["then"]
        want = now - a["lr"] * a["w"] * (g + lam * g * g * (now - then))
        torch.testing.assert_close(a["after"], want, rtol=1e-5, atol=1e-6)
        correction = (lam * g * g * (now - then)).abs().max().item()
        corrected += correction > 1e-6
    assert corrected >= 5  # stale pushes were really corrected, not only fresh ones applied
    assert summary["uncompensated"] == 0
    assert 1 <= summary["max_kept_models"] <= 2 * 4
    recs = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert all(r["compensate"] == lam for r in recs if r["ev"] == "apply")


def test_momentum_corrected_lowers_the_servers_momentum_in_the_simulator(tmp_path: Path) -> None:
    sc = stale_scenario(optimizer={"name": "sgd", "momentum": 0.9})
    runs = {}
    for spec in ("asp", "asp:momentum=corrected"):
        sim = Simulation(sc, spec, trace_path=tmp_path / f"{spec}.jsonl")
        runs[spec] = sim.run().params
        group = sim.ledger.stepper.state_dict()["param_groups"][0]
        assert group["momentum"] == pytest.approx(0.9 if spec == "asp" else 0.15)  # 0.9 − (1 − 1/4)
    assert not torch.allclose(runs["asp"], runs["asp:momentum=corrected"])
    recs = [json.loads(x) for x in (tmp_path / "asp:momentum=corrected.jsonl").read_text().splitlines()]
    assert {r["implicit_momentum"] for r in recs if r["ev"] == "apply"} == {0.75}
