"""The fairness-floor study's tables and rows, from a small record (the runs are in test_paper_selmcast)."""

from __future__ import annotations

from hetsync.benches import selmcast_floors as fl

TARGET = {"target_metric": "accuracy", "target_value": 0.9, "target_direction": "max"}


def _row(policy: str, sync: str, floor: float | None, final: float, gain: float, round_speedup: float) -> dict:
    label = f"{policy}(sync={sync}" + ("" if floor is None else f",floor={floor:g}") + ")"
    return {
        "label": label,
        "policy": policy,
        "sync": sync,
        "floor": floor,
        "finals": [final, final + 0.02],
        "mean_receivers": 2.0,
        "mean_exchange_s": 1.0,
        "mean_round_s": 2.0,
        "compute_share": 0.5,
        "time_to_target_s": None,
        "final_metric": final + 0.01,
        "least_served": 1.0 if floor else None,
        "most_served": 3.0 if floor else None,
        "reached": 0,
        "seeds": 2,
        "metric_gain": gain,
        "round_speedup": round_speedup,
        "receivers_ratio": 1.0,
    }


def _fair() -> dict:
    rows = [
        _row("p2p-random", "bsp", None, 0.6, 0.0, 1.0),
        _row("selmcast", "bsp", 1.0, 0.62, 0.02, 1.25),
        _row("p2p-random", "ssp", None, 0.6, 0.0, 1.0),
        _row("selmcast", "ssp", 1.0, 0.55, -0.05, 0.8),
    ]
    cases = [{"scenario": "p2p-bw-skew", "mixing": mix, "rows": rows} for mix in fl.MIXINGS]
    return {"seeds": [0, 1], "floors": [1.0], "cases": cases, **TARGET}


def test_rows_give_the_floor_figures_per_case_and_policy_in_the_table_order():
    rows = fl.floor_rows(_fair())
    mine = [r for r in rows if r["policy"] == "selmcast(sync=bsp,floor=1)" and "mixing equal" in r["setting"]]
    assert [r["metric"] for r in mine] == [
        "final accuracy",
        "final accuracy vs random",
        "mean round",
        "receivers per sender",
        "least served, copies/round",
        "most served, copies/round",
    ]
    assert [r["value"] for r in mine] == [0.63, 0.02, 2.0, 2.0, 1.0, 3.0]
    assert mine[0]["setting"] == "p2p-bw-skew (sim), mixing equal, seeds 0,1 (means)"
    assert fl.floor_rows(None) == []


def test_the_gain_table_counts_the_cells_where_a_floor_is_at_least_random():
    values = fl.floor_values(_fair())
    assert "| floor=1 | +0.020 | -0.050 | +0.020 | -0.050 | 2 of 4 | 1.25× / 0.80× |" in values["gains"]
    table = values["tables"]
    assert "| policy | mixing | final acc, seeds 0 / 1 | mean | vs random |" in table
    assert "| selmcast(sync=ssp,floor=1) | push-sum | 0.550 / 0.570 | **0.560** | -0.050 |" in table
    assert "| p2p-random(sync=bsp) | equal | 0.600 / 0.620 | **0.610** | — |" in table
    assert values["seeds"] == "0, 1" and values["target"] == "accuracy 0.9"


def test_short_labels_name_the_floor_and_the_papers_choice():
    assert fl._short_label("selmcast(sync=bsp,p=2,bandwidth=worst,floor=0.5)") == "selmcast floor=0.5"
    assert fl._short_label("selmcast(sync=bsp,p=2,bandwidth=worst)") == "selmcast floor=0 (paper)"
    assert fl._short_label("p2p-random(sync=ssp,s=3,p=2)") == "p2p-random"
