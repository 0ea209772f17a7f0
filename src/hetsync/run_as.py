"""A launcher's policy, cluster and job imposed on a user's script: ``HETSYNC_RUN_AS``.

A script under :func:`hetsync.init` names its own policy (``hetsync.init("bsp",
scenario=...)``). ``hetsync advise --verify`` launches that script, unchanged,
once per verified policy (:mod:`hetsync.advise.verify_script`); it sets this
variable, a JSON object, on every rank::

    HETSYNC_RUN_AS='{"policy": "ssp:s=3", "scenario": "runs/adv/verify/emulated.yaml",
                     "job": {"max_time_s": 30, "eval_every_s": 0.5,
                             "target": {"metric": "accuracy", "value": 0.9}},
                     "throttle": true, "by": "hetsync advise --verify"}'

and :func:`impose` (called first thing in :func:`hetsync.init`) runs the
script with that policy in place of its own, on that cluster in place of the
scenario it names (``scenario``: a built-in's name or a YAML path, whose
cluster keys are emulated as ``hetsync.init(scenario=...)`` emulates any;
null: none, the machine as it is), with ``job``'s keys in place of the
script's same keywords (its other keywords stay), and transfers throttled
to the cluster's links when ``throttle``. Rank 0 says so in one line
(``hetsync: note: ...``, in its log), so a run's log never hides that its
policy was not the script's.

The same works by hand: ``HETSYNC_RUN_AS='{"policy": "asp"}' hetsync launch
--nproc 2 train.py`` runs ``train.py`` under ASP with no emulated cluster.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any

from hetsync.errors import BadInput

RUN_AS_ENV = "HETSYNC_RUN_AS"
JOB_KEYS = frozenset({"max_time_s", "max_steps", "eval_every_s", "batch_size", "target", "target_accuracy", "seed"})
"""The job keywords of :func:`hetsync.init` a launcher may impose."""
TARGET_KEYS = frozenset({"target", "target_accuracy"})


@dataclass(frozen=True)
class RunAs:
    """What the launcher imposes on the script's :func:`hetsync.init`."""

    policy: str
    scenario: str | None = None  # the cluster to emulate (a built-in's name or a YAML path); None: none
    job: dict[str, Any] = field(default_factory=dict)
    throttle: bool = False
    by: str = "the launcher"

    def __post_init__(self) -> None:
        if not isinstance(self.policy, str) or not self.policy.strip():
            raise BadInput(f"{RUN_AS_ENV}: 'policy' must be a policy spec such as 'ssp:s=3', got {self.policy!r}")
        if self.scenario is not None and (not isinstance(self.scenario, str) or not self.scenario):
            raise BadInput(f"{RUN_AS_ENV}: 'scenario' must be a scenario name or a YAML path, got {self.scenario!r}")
        if not isinstance(self.job, dict):
            raise BadInput(f"{RUN_AS_ENV}: 'job' must be a mapping of hetsync.init keywords, got {self.job!r}")
        unknown = sorted(set(self.job) - JOB_KEYS)
        if unknown:
            raise BadInput(
                f"{RUN_AS_ENV}: 'job' key {unknown[0]!r} is not imposed (known: {', '.join(sorted(JOB_KEYS))})"
            )
        if not isinstance(self.throttle, bool):
            raise BadInput(f"{RUN_AS_ENV}: 'throttle' must be true or false, got {self.throttle!r}")

    def to_env(self) -> str:
        return json.dumps(
            {
                "policy": self.policy,
                "scenario": self.scenario,
                "job": self.job,
                "throttle": self.throttle,
                "by": self.by,
            }
        )

    @classmethod
    def from_env(cls, text: str) -> RunAs:
        example = '\'{"policy": "bsp"}\''
        try:
            raw = json.loads(text)
        except ValueError:
            raise BadInput(f"{RUN_AS_ENV} must be a JSON object such as {example}") from None
        if not isinstance(raw, dict):
            raise BadInput(f"{RUN_AS_ENV} must be a JSON object such as {example}")
        known = {"policy", "scenario", "job", "throttle", "by"}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise BadInput(f"{RUN_AS_ENV}: unknown key {unknown[0]!r} (known: {', '.join(sorted(known))})")
        if "policy" not in raw:
            raise BadInput(f"{RUN_AS_ENV}: 'policy' is required, e.g. {example}")
        return cls(
            policy=raw["policy"],
            scenario=raw.get("scenario"),
            job=raw.get("job") or {},
            throttle=raw.get("throttle", False),
            by=str(raw.get("by") or "the launcher"),
        )


def from_environ() -> RunAs | None:
    text = os.environ.get(RUN_AS_ENV)
    return RunAs.from_env(text) if text else None


def impose(
    policy: str, scenario: Any, overrides: dict[str, Any], throttle: bool, rank: int
) -> tuple[str, Any, dict[str, Any], bool]:
    """:func:`hetsync.init`'s policy, scenario, keywords and throttle, with
    what ``HETSYNC_RUN_AS`` imposes in their place (unchanged without it);
    rank 0 prints one note saying what replaced what."""
    run_as = from_environ()
    if run_as is None:
        return policy, scenario, overrides, throttle
    kept = {k: v for k, v in overrides.items() if not (k in TARGET_KEYS and run_as.job.keys() & TARGET_KEYS)}
    if rank == 0:
        named = scenario if isinstance(scenario, str) or scenario is None else getattr(scenario, "name", scenario)
        cluster = f"cluster {run_as.scenario}" if run_as.scenario is not None else "no emulated cluster"
        job = ", ".join(f"{k}={v!r}" for k, v in run_as.job.items())
        print(
            f"hetsync: note: {run_as.by} runs this script under {run_as.policy!r} on {cluster}"
            + (f" with {job}" if job else "")
            + f": it replaces the script's hetsync.init({policy!r}, scenario={named!r})",
            file=sys.stderr,
            flush=True,
        )
    return run_as.policy, run_as.scenario, {**kept, **run_as.job}, throttle or run_as.throttle
