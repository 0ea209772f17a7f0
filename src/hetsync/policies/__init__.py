"""Policy registry: every synchronization model hetsync knows, by name.

A new policy is one file in this package and one line in ``_CLASSES``. A
policy of your own, outside hetsync, is named ``package.module:Class`` on
every command, or registered by your package under the ``hetsync.policies``
entry-point group (``[project.entry-points."hetsync.policies"]
quorum = "mypkg.quorum:Quorum"``); ``hetsync.testing.check_policy`` runs
the contract on it.
"""

from __future__ import annotations

from typing import Any

from hetsync.errors import BadInput
from hetsync.policies.asp import ASP
from hetsync.policies.async_local_sgd import AsyncLocalSGD
from hetsync.policies.auto import Auto
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
from hetsync.policies.streaming_diloco import StreamingDiLoCo
from hetsync.policies.wbsp import WBSP
from hetsync.policies.wbsp_overlap import WBSPOverlap

_CLASSES: tuple[type[Policy], ...] = (
    BSP,
    ASP,
    SSP,
    LocalSGD,
    DiLoCo,
    StreamingDiLoCo,
    AsyncLocalSGD,
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
    Auto,
)
REGISTRY: dict[str, type[Policy]] = {cls.name: cls for cls in _CLASSES}


ENTRY_POINT_GROUP = "hetsync.policies"  # a package's policies: name = "module:Class"


def parse_policy_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """``"ssp:s=3"`` → ``("ssp", {"s": "3"})``; values are typed by the policy.
    A policy of your own is named ``package.module:Class`` (``"mypkg.q:Quorum:k=2"``)."""
    name, *assignments = spec.strip().split(":")
    if "." in name and assignments and "=" not in assignments[0]:
        name = f"{name}:{assignments.pop(0)}"
    params: dict[str, Any] = {}
    for item in assignments:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise BadInput(f"policy spec {spec!r}: expected NAME:key=value, got {item!r}")
        if key.strip() in params:
            raise BadInput(f"policy spec {spec!r}: parameter {key.strip()!r} is given twice: keep one")
        params[key.strip()] = value.strip()
    return name.strip(), params


def policy_class(name: str) -> type[Policy]:
    """A built-in policy, one an installed package registers under the
    ``hetsync.policies`` entry-point group, or ``module:Class``."""
    if name in REGISTRY:
        return REGISTRY[name]
    if ":" in name:
        return _import_policy(name, name)
    target = _entry_points().get(name)
    if target is not None:
        return _import_policy(name, target)
    known = [*REGISTRY, *_entry_points()]
    raise BadInput(f"unknown policy {name!r} (known: {', '.join(known)}; a policy of your own: package.module:Class)")


def _entry_points() -> dict[str, str]:
    from importlib.metadata import entry_points

    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}


def _import_policy(name: str, target: str) -> type[Policy]:
    """The class ``target`` (``module:Class``) names. Its module runs as it is
    imported: an import that fails, raises or calls ``sys.exit`` is refused
    in one line (the module is the user's input)."""
    import importlib
    import os
    import sys

    module_name, _, attr = target.partition(":")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())  # (python -m puts the current folder on the path; a console script does not)
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except ImportError as e:
        raise BadInput(f"policy {name!r}: cannot import module {module_name!r} ({e})") from None
    except AttributeError:
        raise BadInput(f"policy {name!r}: module {module_name!r} has no {attr!r}") from None
    except SystemExit as e:
        raise BadInput(f"policy {name!r}: importing {module_name} called sys.exit({e.code!r})") from None
    except Exception as e:
        raise BadInput(f"policy {name!r}: importing {module_name} raised {_first_line(e)}") from e
    if not (isinstance(obj, type) and issubclass(obj, Policy)):
        raise BadInput(f"policy {name!r}: {target} is not a hetsync.policies.base.Policy subclass")
    if not isinstance(getattr(obj, "name", None), str):
        raise BadInput(f"policy {name!r}: {target} needs a class attribute name = '...'")
    return obj


def _first_line(e: BaseException) -> str:
    """``KeyError: 'x'``: an exception in one line of at most 200 characters (the traceback chains it)."""
    text = str(e).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(e).__name__}: {first if len(first) <= 200 else first[:200] + '…'}"


def make_policy(spec: str, ctx: PolicyContext, **overrides: Any) -> Policy:
    name, params = parse_policy_spec(spec)
    params.update(overrides)
    cls = policy_class(name)
    if cls.__module__.startswith("hetsync."):
        return cls(ctx, **params)
    try:  # a policy of your own: what its constructor raises is refused in one line
        return cls(ctx, **params)
    except BadInput:
        raise
    except SystemExit as e:
        raise BadInput(f"policy {name!r}: creating it called sys.exit({e.code!r})") from None
    except Exception as e:
        raise BadInput(f"policy {name!r}: creating it raised {_first_line(e)}") from e


__all__ = ["REGISTRY", "Policy", "PolicyContext", "make_policy", "parse_policy_spec", "policy_class"]
