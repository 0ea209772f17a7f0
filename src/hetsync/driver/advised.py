"""auto's start from an advice: ``-p auto:start=runs/advise``.

Issue 31 has ``auto`` start "with a safe policy (BSP, or the recommendation
of a given cluster.yaml)". The recommendation of a profiled cluster is what
``hetsync advise -s cluster.yaml`` writes into ``advice.json``: every
candidate it simulated, ranked by time to target. So auto's ``start`` takes,
besides a candidate's name, that file or the folder advise wrote it in; this
module turns such a spec into the plain one (``auto:start=local-sgd:h=8``)
before any policy is made, once, where the run is set up (the CLI, the API,
``hetsync.init``): the policy core reads no files.

The start is the best-ranked entry of the advice that auto can run as one of
its candidates: on the parameter-server path with one server (auto's only
path), of a policy among auto's ``candidates``, with the settings auto gives
it (BSP; LB-BSP with its defaults; backup workers with some ``b``; local SGD
with some ``H`` at most half auto's ``window``) and agreeing with an ``h`` or
``b`` the spec names. Its ``b`` or ``H`` becomes auto's. An entry that never
reached the target on any seed is not taken: BSP, auto's safe start, is.
What advise recommends overall may be a policy auto does not switch among
(DiLoCo, on the bench's homogeneous-8); the sentence :func:`advised_start`
returns says so, and which rank the start had.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hetsync.errors import BadInput
from hetsync.policies.auto import ASYNCHRONOUS, CANDIDATES, DEFAULT_CANDIDATES, AutoConfig
from hetsync.policies.config import PolicyConfig, config_params
from hetsync.policies.lb_bsp import LBBSPConfig

ADVICE = "advice.json"  # what hetsync advise writes (hetsync.advise.pages)


@dataclass(frozen=True)
class AdvisedStart:
    spec: str  # the auto spec, its start (and h or b) taken from the advice
    said: str  # one sentence: what it starts on, and why


def resolve_specs(specs: list[str]) -> tuple[list[str], list[str]]:
    """Each spec with an advised start resolved (:func:`advised_start`), and
    the sentences that say what each such start is."""
    out, said = [], []
    for spec in specs:
        advised = advised_start(spec)
        out.append(spec if advised is None else advised.spec)
        if advised is not None:
            said.append(advised.said)
    return out, said


def advised_start(spec: str) -> AdvisedStart | None:
    """``auto:start=PATH...`` resolved from the advice at PATH (an
    ``advice.json`` or the folder that holds one); None for any other spec.
    A PATH that holds no advice, or an advice with no entry auto can start
    on, is refused in one line."""
    from hetsync.policies import parse_policy_spec

    name, params = parse_policy_spec(spec)
    start = params.get("start")
    if name != "auto" or start is None or start.lower() in CANDIDATES:
        return None
    advice = _load(start)
    names = [s.strip().lower() for s in str(params.get("candidates", DEFAULT_CANDIDATES)).split("+") if s.strip()]
    names = [s for s in names if s not in ASYNCHRONOUS]  # (auto starts on a policy whose convergence is BSP's)
    window = _int_param(params, "window", int(_defaults(AutoConfig)["window"]))
    given = {k: _int_param(params, k, 0) for k in ("h", "b") if k in params}
    ranking = advice.get("ranking")
    if not isinstance(ranking, list):
        raise BadInput(f"policy 'auto' parameter 'start': {start} has no 'ranking' list: is it hetsync advise's?")
    for entry in ranking:
        carried = _carried(entry, names, window, given)
        if carried is None:
            continue
        policy, extra = carried
        keep = str(params.get("keep_start", "until-change"))  # (the advice weighed convergence: held by default)
        if not entry.get("reached"):
            policy, extra, keep = "bsp", {}, str(params.get("keep_start", "no"))
            why = f"its best candidate in {start}, {entry.get('label')}, never reached the target: BSP, the safe start"
        else:
            why = f"rank {entry.get('rank')} of {len(ranking)} in {start}, the best of the policies auto switches among"
        top = ranking[0] if ranking else {}
        if top is not entry and top.get("label"):
            where = f"@{top['path']}" if top.get("path") not in (None, "ps") else ""
            why += f" (advise recommends {top['label']}{where}, which auto does not run)"
        if keep == "until-change":
            why += "; held there until the cluster changes (keep_start=until-change)"
        rest = {k: v for k, v in params.items() if k not in ("start", "keep_start", *extra)}
        parts = [f"{k}={v}" for k, v in {**rest, "start": policy, **extra, "keep_start": keep}.items()]
        label = policy + (f"({', '.join(f'{k}={v}' for k, v in extra.items())})" if extra else "")
        return AdvisedStart(spec="auto:" + ":".join(parts), said=f"auto starts on {label}: {why}")
    raise BadInput(
        f"policy 'auto' parameter 'start': no entry of {start} is one auto can start on "
        f"(of {'+'.join(names)} on path ps with one server, LB-BSP with its defaults"
        + (f", {', '.join(f'{k}={v}' for k, v in given.items())}" if given else "")
        + "); give start=bsp or another candidate"
    )


def _load(start: str) -> dict[str, Any]:
    path = Path(start)
    file = path / ADVICE if path.is_dir() else path
    if not file.is_file():
        raise BadInput(
            f"policy 'auto' parameter 'start' ({start}) must be one of "
            f"{', '.join(c for c in CANDIDATES if c not in ASYNCHRONOUS)} or an advice: "
            f"the {ADVICE} hetsync advise wrote, or its folder (hetsync advise -s cluster.yaml -o FOLDER)"
        )
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise BadInput(f"policy 'auto' parameter 'start': cannot read {file} as JSON ({e})") from None
    if not isinstance(data, dict):
        raise BadInput(f"policy 'auto' parameter 'start': {file} is not an advice (a JSON object with a 'ranking')")
    return data


def _defaults(config_class: type[PolicyConfig]) -> dict[str, Any]:
    """Each parameter's default, as the config declares it."""
    return {p.name: p.default for p in config_params(config_class)}


def _int_param(params: dict[str, Any], key: str, default: int) -> int:
    value = params.get(key, default)
    try:
        return int(value)
    except (TypeError, ValueError):
        raise BadInput(f"policy 'auto' parameter {key!r} must be an integer, got {value!r}") from None


def _carried(entry: Any, names: list[str], window: int, given: dict[str, int]) -> tuple[str, dict[str, int]] | None:
    """(auto's start, the parameters it takes from the entry) when auto can
    run this advice entry as one of its candidates; None when it cannot."""
    if not isinstance(entry, dict) or entry.get("path", "ps") != "ps" or int(entry.get("servers", 1)) != 1:
        return None
    policy = entry.get("policy")
    params = entry.get("params") or {}
    if policy not in names or not isinstance(params, dict):
        return None
    if policy == "bsp":
        return policy, {}
    if policy == "lb-bsp":
        defaults = _defaults(LBBSPConfig)
        differs = any(k in defaults and v != defaults[k] for k, v in params.items())
        return None if differs else (policy, {})  # (auto's LB-BSP: its defaults)
    key, value = ("h", params.get("H")) if policy == "local-sgd" else ("b", params.get("b"))
    if not isinstance(value, int) or (key in given and given[key] != value):
        return None
    if key == "h" and 2 * value > window:
        return None  # (auto replays local SGD's rounds of h steps from its window)
    return policy, {key: value}
