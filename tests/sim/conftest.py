from __future__ import annotations

from typing import Any

from hetsync.scenario import Scenario, scenario_from_dict


def make_scenario(**overrides: Any) -> Scenario:
    """A small, fast scenario: free network, fixed step times unless overridden."""
    raw: dict[str, Any] = {
        "name": "test",
        "workers": 4,
        "workload": "digits-logreg",
        "batch_size": 16,
        "lr": 0.1,
        "max_steps": 20,
        "fixed_s": 0.0,
        "per_sample_s": 0.001,
        "policies": ["bsp"],
    }
    raw.update(overrides)
    return scenario_from_dict(raw)
