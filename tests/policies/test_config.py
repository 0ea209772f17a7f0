"""Typed policy configs (policies/config.py): parsing, validation and the
listing all derive from the dataclass fields."""

from __future__ import annotations

import typing
from dataclasses import FrozenInstanceError, dataclass

import pytest

from hetsync.errors import BadInput
from hetsync.policies import REGISTRY, make_policy
from hetsync.policies.base import Policy, PolicyConfig, param
from hetsync.policies.config import INT_PARAM_MAX, config_params, config_values, parse_config
from hetsync.policies.diloco import DiLoCoConfig
from hetsync.policies.lb_bsp import LBBSPConfig
from hetsync.policies.ssp import SSPConfig
from tests.policies.helpers import ctx


@dataclass(frozen=True, kw_only=True)
class KnobsConfig(PolicyConfig):
    k: int = param(2, help="an integer knob", ge=1, le=5)
    rate: float = param(0.5, help="a rate", gt=0.0, lt=1.0)
    mode: str = param("fast", help="how", choices=("fast", "safe"))
    note: str = param("", help="free text")


def parse(**given: object) -> KnobsConfig:
    return parse_config("knobs", KnobsConfig, given, workers=4)


@pytest.mark.parametrize("name", list(REGISTRY))
def test_every_policy_declares_its_config_and_reads_it_typed(name):
    cls = REGISTRY[name]
    hints = typing.get_type_hints(cls)
    assert hints["config"] is cls.config_class, f"{name}: annotate config: {cls.config_class.__name__}"
    p = make_policy(name, ctx(4))
    assert type(p.config) is cls.config_class
    assert p.config == cls.config_class()  # the defaults pass their own bounds
    for spec in config_params(cls.config_class):
        assert spec.help and spec.describe().startswith(f"{spec.name}={spec.default}  {spec.help}")


def test_strings_are_typed_and_defaults_filled():
    cfg = parse(k="3", rate="0.25", mode=" SAFE ")
    assert (cfg.k, cfg.rate, cfg.mode, cfg.note) == (3, 0.25, "safe", "")  # choices ignore case and spaces
    assert config_values(cfg) == {"k": 3, "rate": 0.25, "mode": "safe", "note": ""}
    with pytest.raises(FrozenInstanceError):
        cfg.k = 4  # type: ignore[misc]


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"q": 1}, "policy 'knobs' has no parameter 'q' (parameters: k, rate, mode, note)"),
        ({"k": "x"}, "policy 'knobs' parameter 'k' must be an integer in [1, 5], got 'x'"),
        ({"k": 2.5}, "policy 'knobs' parameter 'k' must be an integer, got 2.5"),
        ({"k": float("inf")}, "policy 'knobs' parameter 'k' must be an integer in [1, 5], got inf"),
        ({"k": 0}, "policy 'knobs' parameter 'k' must be >= 1, got 0"),
        ({"k": 6}, "policy 'knobs' parameter 'k' must be <= 5, got 6"),
        ({"rate": "0"}, "policy 'knobs' parameter 'rate' must be > 0, got 0.0"),
        ({"rate": 1}, "policy 'knobs' parameter 'rate' must be < 1, got 1.0"),
        ({"rate": "nan"}, "policy 'knobs' parameter 'rate' must be a finite number, got nan"),
        ({"mode": "slow"}, "policy 'knobs' parameter 'mode' must be one of fast, safe, got 'slow'"),
    ],
)
def test_bad_values_name_the_policy_the_parameter_and_what_is_allowed(given, message):
    with pytest.raises(BadInput) as e:
        parse(**given)
    assert str(e.value) == message


def test_integers_are_bounded_alone_and_times_the_workers():
    with pytest.raises(BadInput, match=f"'s' must be <= {INT_PARAM_MAX}, got 10001"):
        parse_config("ssp", SSPConfig, {"s": "10001"})
    with pytest.raises(BadInput, match="'s' = 5000 is too large for 4000 workers"):
        parse_config("ssp", SSPConfig, {"s": "5000"}, workers=4000)


def test_a_config_built_in_code_is_checked_too():
    with pytest.raises(BadInput, match="parameter 's' must be >= 0, got -1"):
        SSPConfig(s=-1)
    with pytest.raises(BadInput, match="parameter 's' must be an integer"):
        SSPConfig(s="3")  # type: ignore[arg-type]
    assert DiLoCoConfig(outer_lr=1).outer_lr == 1.0 and isinstance(DiLoCoConfig(outer_lr=1).outer_lr, float)


def test_allowed_values_are_described_from_the_bounds():
    specs = {p.name: p for p in config_params(KnobsConfig)}
    assert specs["k"].allowed == "an integer in [1, 5]"
    assert specs["rate"].allowed == "a number in (0, 1)"
    assert specs["mode"].describe() == "mode=fast  how (one of fast, safe)"
    assert specs["note"].describe() == "note=  free text"
    assert config_params(SSPConfig)[0].describe() == "s=3  staleness bound in steps (an integer >= 0)"
    assert [p.name for p in config_params(LBBSPConfig)] == ["variant", "predictor", "lags", "history", "max_batch"]


def test_a_field_not_declared_with_param_is_refused():
    @dataclass(frozen=True, kw_only=True)
    class Loose(PolicyConfig):
        k: int = 3

    with pytest.raises(TypeError, match=r"Loose\.k: declare policy parameters"):
        config_params(Loose)

    class Undecorated(PolicyConfig):
        k: int = param(3, help="a knob")

    with pytest.raises(TypeError, match=r"Undecorated: decorate a policy config with @dataclass"):
        config_params(Undecorated)


class Plain(Policy):
    name = "plain"
    summary = "no parameters"


def test_a_policy_without_a_config_takes_no_parameters():
    p = Plain(ctx(2))
    assert p.label == "plain" and config_values(p.config) == {}
    with pytest.raises(BadInput, match=r"policy 'plain' has no parameter 'k' \(parameters: none\)"):
        Plain(ctx(2), k=1)


@dataclass(frozen=True, kw_only=True)
class WithOptionConfig(PolicyConfig):
    option: str = param("off", help="an option most runs leave off", choices=("off", "on"), quiet=True)
    k: int = param(2, help="the policy's own knob", ge=1)


class WithOption(Policy):
    name = "withoption"
    summary = "a quiet option"
    config_class = WithOptionConfig
    config: WithOptionConfig


def test_a_quiet_parameter_is_listed_last_and_labelled_only_when_set():
    assert [p.name for p in config_params(WithOptionConfig)] == ["k", "option"]
    assert WithOption(ctx(2)).label == "withoption(k=2)"
    assert WithOption(ctx(2), option="on").label == "withoption(k=2,option=on)"
    assert config_values(WithOption(ctx(2)).config) == {"k": 2, "option": "off"}  # the summary's params: all


@dataclass(frozen=True, kw_only=True)
class FanConfig(PolicyConfig):
    p: int = param(2, help="receivers per sender", ge=1, below_workers=True)


def test_a_parameter_counting_workers_is_refused_when_given_as_many_as_the_cluster_has():
    assert parse_config("fan", FanConfig, {"p": "3"}, workers=4).p == 3
    with pytest.raises(
        BadInput, match=r"policy 'fan' parameter 'p' must be < workers, got 4 on 4 workers: give p <= 3"
    ):
        parse_config("fan", FanConfig, {"p": "4"}, workers=4)
    with pytest.raises(BadInput, match=r"got 100 on 2 workers: give p <= 1 or run more workers"):
        parse_config("fan", FanConfig, {"p": 100}, workers=2)
    with pytest.raises(BadInput, match=r"got 1 on 1 workers: run more workers"):  # (p <= 0 is no fix)
        parse_config("fan", FanConfig, {"p": 1}, workers=1)
    assert parse_config("fan", FanConfig, {}, workers=2).p == 2  # the default: the policy fits it to the cluster
    assert config_params(FanConfig)[0].describe() == "p=2  receivers per sender (an integer >= 1, < workers)"


@pytest.mark.parametrize(
    ("spec", "workers", "message"),
    [
        ("p2p-random:p=100", 2, "'p2p-random' parameter 'p' must be < workers, got 100 on 2 workers"),
        ("selmcast:p=4", 4, "'selmcast' parameter 'p' must be < workers, got 4 on 4 workers"),
        ("backup:b=4", 4, "'backup' parameter 'b' must be < workers, got 4 on 4 workers"),
    ],
)
def test_the_policies_bound_their_worker_counts_by_the_cluster(spec, workers, message):
    with pytest.raises(BadInput, match=message):
        make_policy(spec, ctx(workers))
    assert make_policy("p2p-random", ctx(2)).config.p == 2  # (each sender then sends to the one other worker)


def test_a_parameter_given_twice_is_refused():
    from hetsync.policies import parse_policy_spec

    with pytest.raises(BadInput, match=r"policy spec 'ssp:s=3:s=4': parameter 's' is given twice: keep one"):
        parse_policy_spec("ssp:s=3:s=4")
    with pytest.raises(BadInput, match="'s' is given twice"):
        make_policy("ssp:s=3: s =3", ctx(4))
