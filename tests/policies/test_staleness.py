"""Staleness remedies as policy options (hetsync.policies.staleness): the
spec, its errors, and what each policy writes into its Apply commands."""

from __future__ import annotations

import pytest

from hetsync.errors import BadInput
from hetsync.policies import REGISTRY, make_policy
from hetsync.policies.base import Apply, Policy, PushArrived, WorkerLeft
from hetsync.policies.config import config_params
from hetsync.policies.staleness import StalePushes
from tests.policies.helpers import ctx

STALE_PUSHES = ["asp", "ssp", "dssp", "elastic-bsp"]  # apply each gradient push on arrival
DELTAS = ["wbsp", "wbsp-overlap"]


def push(w: int, base: int, server: int | None, push_id: int = 7, kind: str = "grad") -> PushArrived:
    return PushArrived(
        now_s=1.0,
        worker=w,
        push_id=push_id,
        kind=kind,  # type: ignore[arg-type]
        base_version=base,
        steps=1,
        samples=8,
        server_version=server,
    )


def the_apply(policy: Policy, event: PushArrived) -> Apply:
    applies = [c for c in policy.on_event(event) if isinstance(c, Apply)]
    assert len(applies) == 1, applies
    return applies[0]


# ------------------------------------------------------------------- specs
def test_the_policies_that_apply_stale_contributions_offer_the_remedies() -> None:
    for name in STALE_PUSHES:
        names = [p.name for p in config_params(REGISTRY[name].config_class)]
        assert names[-3:] == ["lr_scale", "compensate", "momentum"], name  # after the policy's own
    for name in DELTAS:
        assert [p.name for p in config_params(REGISTRY[name].config_class)] == ["lr_scale"], name
    for name in ("bsp", "backup", "lb-bsp", "local-sgd", "diloco", "selmcast"):  # nothing stale to remedy
        assert "lr_scale" not in [p.name for p in config_params(REGISTRY[name].config_class)], name


@pytest.mark.parametrize(
    ("spec", "label"),
    [
        ("asp", "asp"),  # off by default, and the labels of before
        ("ssp", "ssp(s=3)"),
        ("dssp", "dssp(s_L=3,r_max=12)"),
        ("elastic-bsp", "elastic-bsp(R=15)"),
        ("wbsp", "wbsp"),
        ("asp:lr_scale=inverse", "asp(lr_scale=inverse)"),
        ("asp:compensate=0.04", "asp(compensate=0.04)"),
        ("ssp:s=3:momentum=corrected", "ssp(s=3,momentum=corrected)"),
        ("ssp:momentum=CORRECTED:lr_scale=sqrt", "ssp(s=3,lr_scale=sqrt,momentum=corrected)"),
        ("elastic-bsp:R=60:compensate=0.1:lr_scale=inverse", "elastic-bsp(R=60,lr_scale=inverse,compensate=0.1)"),
        ("wbsp-overlap:lr_scale=inverse", "wbsp-overlap(lr_scale=inverse)"),
    ],
)
def test_specs_and_labels(spec: str, label: str) -> None:
    assert make_policy(spec, ctx(4)).label == label


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            "asp:lr_scale=cube",
            "policy 'asp' parameter 'lr_scale' must be one of none, inverse, sqrt, zhang, got 'cube'",
        ),
        ("ssp:compensate=-0.1", "policy 'ssp' parameter 'compensate' must be >= 0, got -0.1"),
        ("dssp:compensate=lots", "policy 'dssp' parameter 'compensate' must be a number >= 0, got 'lots'"),
        ("elastic-bsp:compensate=inf", "policy 'elastic-bsp' parameter 'compensate' must be a finite number"),
        (
            "asp:momentum=nesterov",
            "policy 'asp' parameter 'momentum' must be one of scenario, corrected, got 'nesterov'",
        ),
        ("wbsp:compensate=0.04", "policy 'wbsp' has no parameter 'compensate' (parameters: lr_scale)"),
        ("bsp:lr_scale=inverse", "policy 'bsp' has no parameter 'lr_scale'"),
    ],
)
def test_bad_remedies_are_refused_naming_the_field(spec: str, message: str) -> None:
    with pytest.raises(BadInput) as e:
        make_policy(spec, ctx(4))
    assert message in str(e.value)


def test_apply_refuses_bad_annotations() -> None:
    with pytest.raises(ValueError, match="Apply.compensate must be a finite number >= 0, got -1"):
        Apply(contributions=((0, 1.0),), compensate=-1)
    with pytest.raises(ValueError, match=r"Apply.implicit_momentum must be in \[0, 1\), got 1.0"):
        Apply(contributions=((0, 1.0),), implicit_momentum=1.0)


def test_a_push_knows_its_staleness_when_the_driver_says_the_version() -> None:
    assert push(0, base=3, server=10).staleness == 7
    assert push(0, base=3, server=3).staleness == 0
    assert push(0, base=3, server=None).staleness == 0  # not told (scripted events): treated as fresh


# --------------------------------------------------- what the Apply carries
@pytest.mark.parametrize("name", STALE_PUSHES)
def test_off_by_default_the_apply_is_the_one_of_before(name: str) -> None:
    p = make_policy(name, ctx(4, lr=0.2))
    p.start(0.0)
    apply = the_apply(p, push(0, base=0, server=12))
    assert apply == Apply(contributions=((7, 0.25),), lr=0.2)
    assert not p.needs_base_models()


@pytest.mark.parametrize("name", STALE_PUSHES)
@pytest.mark.parametrize(("rule", "staleness", "factor"), [("inverse", 8, 1 / 8), ("sqrt", 4, 0.5), ("inverse", 0, 1)])
def test_lr_scale_scales_the_rate_of_the_push_by_its_staleness(
    name: str, rule: str, staleness: int, factor: float
) -> None:
    p = make_policy(f"{name}:lr_scale={rule}", ctx(4, lr=0.2))
    p.start(0.0)
    apply = the_apply(p, push(0, base=5, server=5 + staleness))
    assert apply.contributions == ((7, 0.25),)  # the weight is the policy's; the rate carries the factor
    assert apply.lr == pytest.approx(0.2 * factor)
    assert (apply.compensate, apply.implicit_momentum) == (0.0, 0.0)


@pytest.mark.parametrize("name", STALE_PUSHES)
@pytest.mark.parametrize(("staleness", "moved"), [(0, 1.0), (2, 0.5), (8, 1 / 8)])
def test_zhangs_rule_moves_a_push_at_the_rate_over_its_staleness(name: str, staleness: int, moved: float) -> None:
    """``lr_scale=zhang``: the paper's α₀/τ in place of the 1/N share — weight × rate = lr/max(1, τ)."""
    p = make_policy(f"{name}:lr_scale=zhang", ctx(4, lr=0.2))
    p.start(0.0)
    apply = the_apply(p, push(0, base=5, server=5 + staleness))
    ((_, weight),) = apply.contributions
    assert weight * apply.lr == pytest.approx(0.2 * moved)


@pytest.mark.parametrize("name", DELTAS)
def test_zhangs_rule_is_for_gradient_pushes(name: str) -> None:
    with pytest.raises(BadInput, match="lr_scale' must be one of none, inverse, sqrt, got 'zhang'"):
        make_policy(f"{name}:lr_scale=zhang", ctx(4))


@pytest.mark.parametrize("name", STALE_PUSHES)
def test_compensate_asks_the_server_for_the_base_models_and_annotates_the_apply(name: str) -> None:
    p = make_policy(f"{name}:compensate=0.04", ctx(4, lr=0.2))
    assert isinstance(p, StalePushes) and p.needs_base_models()
    p.start(0.0)
    apply = the_apply(p, push(0, base=0, server=3))
    assert (apply.compensate, apply.lr, apply.implicit_momentum) == (0.04, 0.2, 0.0)


@pytest.mark.parametrize("name", STALE_PUSHES)
def test_momentum_corrected_announces_the_implicit_momentum_of_n_workers(name: str) -> None:
    p = make_policy(f"{name}:momentum=corrected", ctx(4))
    p.start(0.0)
    apply = the_apply(p, push(0, base=0, server=3))
    assert apply.implicit_momentum == pytest.approx(0.75)  # 1 − 1/4
    assert not p.needs_base_models()


def test_momentum_corrected_counts_the_live_workers() -> None:
    p = make_policy("ssp:momentum=corrected", ctx(4))
    p.start(0.0)
    p.on_event(WorkerLeft(now_s=0.5, worker=3))
    assert the_apply(p, push(0, base=0, server=1)).implicit_momentum == pytest.approx(2 / 3)


@pytest.mark.parametrize("name", DELTAS)
def test_wbsp_scales_a_late_deltas_weight_by_its_staleness(name: str) -> None:
    n = 2
    plain, scaled = make_policy(name, ctx(n)), make_policy(f"{name}:lr_scale=inverse", ctx(n))
    for p in (plain, scaled):
        p.start(0.0)
    # worker 0 pushes a delta two versions old, worker 1 a fresh one: that closes the round
    events = [push(0, base=3, server=5, push_id=1, kind="delta"), push(1, base=5, server=5, push_id=2, kind="delta")]
    applies = [[c for e in events for c in p.on_event(e) if isinstance(c, Apply)] for p in (plain, scaled)]
    assert applies[0] == [Apply(contributions=((1, 0.5), (2, 0.5)))]
    assert applies[1] == [Apply(contributions=((1, 0.25), (2, 0.5)))]  # 1/N × 1/max(1, 2), 1/N × 1


def test_wbsp_late_deltas_of_one_round_keep_their_weight() -> None:
    p = make_policy("wbsp:lr_scale=inverse", ctx(2))
    p.start(0.0)
    events = [push(0, base=4, server=5, push_id=1, kind="delta"), push(1, base=5, server=5, push_id=2, kind="delta")]
    applies = [c for e in events for c in p.on_event(e) if isinstance(c, Apply)]
    assert applies == [Apply(contributions=((1, 0.5), (2, 0.5)))]  # τ = 1: 1/max(1, 1) = 1
