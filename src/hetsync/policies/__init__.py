"""Policy registry: every synchronization model hetsync knows, by name.

A new policy is one file in this package and one line in ``_CLASSES``.
"""

from __future__ import annotations

from typing import Any

from hetsync.errors import BadInput
from hetsync.policies.asp import ASP
from hetsync.policies.backup import BackupWorkers
from hetsync.policies.base import Policy, PolicyContext
from hetsync.policies.bsp import BSP
from hetsync.policies.diloco import DiLoCo
from hetsync.policies.dssp import DSSP
from hetsync.policies.elastic_bsp import ElasticBSP
from hetsync.policies.lb_bsp import LBBSP
from hetsync.policies.lb_bsp_static import LBBSPStatic
from hetsync.policies.local_sgd import LocalSGD
from hetsync.policies.p2p_allreduce import P2PAllReduce
from hetsync.policies.p2p_random import P2PRandom
from hetsync.policies.selmcast import Selmcast
from hetsync.policies.ssp import SSP
from hetsync.policies.wbsp import WBSP
from hetsync.policies.wbsp_overlap import WBSPOverlap

_CLASSES: tuple[type[Policy], ...] = (
    BSP,
    ASP,
    SSP,
    LocalSGD,
    DiLoCo,
    BackupWorkers,
    WBSP,
    WBSPOverlap,
    DSSP,
    ElasticBSP,
    LBBSP,
    LBBSPStatic,
    P2PAllReduce,
    P2PRandom,
    Selmcast,
)
REGISTRY: dict[str, type[Policy]] = {cls.name: cls for cls in _CLASSES}


def parse_policy_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """``"ssp:s=3"`` → ``("ssp", {"s": "3"})``; values are typed by the policy."""
    name, *assignments = spec.strip().split(":")
    params: dict[str, Any] = {}
    for item in assignments:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise BadInput(f"policy spec {spec!r}: expected NAME:key=value, got {item!r}")
        params[key.strip()] = value.strip()
    return name.strip(), params


def policy_class(name: str) -> type[Policy]:
    try:
        return REGISTRY[name]
    except KeyError:
        raise BadInput(f"unknown policy {name!r} (known: {', '.join(REGISTRY)})") from None


def make_policy(spec: str, ctx: PolicyContext, **overrides: Any) -> Policy:
    name, params = parse_policy_spec(spec)
    params.update(overrides)
    return policy_class(name)(ctx, **params)


__all__ = ["REGISTRY", "Policy", "PolicyContext", "make_policy", "parse_policy_spec", "policy_class"]
