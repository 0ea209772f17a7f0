import sys

import pytest

from hetsync.errors import BadInput
from hetsync.policies import REGISTRY, make_policy, parse_policy_spec
from tests.policies.helpers import ctx


def test_every_policy_documented_and_constructible():
    for name, cls in REGISTRY.items():
        assert cls.summary and len(cls.summary) < 100
        header = sys.modules[cls.__module__].__doc__ or ""
        assert len(header) > 200, f"{name}: the file header must explain the policy and cite its source"
        assert any(ch.isdigit() for ch in header), f"{name}: the header should cite a paper with its year"
        p = make_policy(name, ctx(4))
        assert p.start(0.0), name


def test_spec_parsing_and_labels():
    assert parse_policy_spec("ssp:s=3") == ("ssp", {"s": "3"})
    assert make_policy("ssp:s=3", ctx()).label == "ssp(s=3)"
    assert make_policy("bsp", ctx()).label == "bsp"


def test_unknown_policy_names_it():
    with pytest.raises(BadInput, match="'nope'"):
        make_policy("nope", ctx())
    with pytest.raises(BadInput, match="expected NAME:key=value"):
        parse_policy_spec("ssp:s")
