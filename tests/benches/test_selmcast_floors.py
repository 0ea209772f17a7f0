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


def _study(paper_equal: float, paper_push: float, least0: float) -> dict:
    """A two-floor study on the skewed scenario: p2p-random at 0.80 (equal) and 0.78 (push-sum);
    the paper's SELMCAST (floor 0) at the given finals; floor 1 at 0.82 everywhere."""
    cases = []
    for mix in fl.MIXINGS:
        rows = []
        for sync in ("bsp", "ssp"):
            base = 0.80 if mix == "equal" else 0.78
            paper = paper_equal if mix == "equal" else paper_push
            rows.append(_row("p2p-random", sync, None, base - 0.01, 0.0, 1.0))
            rows.append(_row("selmcast", sync, 0.0, paper - 0.01, paper - base, 1.3) | {"least_served": least0})
            rows.append(
                _row("selmcast", sync, 1.0, 0.81, 0.82 - base, 1.1) | {"mean_round_s": 2.5 if sync == "ssp" else 2.0}
            )
            rows[-2]["most_served"] = 12.0
        cases.append({"scenario": "p2p-bw-skew", "mixing": mix, "rows": rows})
    return {"seeds": [0, 1], "floors": [0.0, 1.0], "cases": cases, **TARGET}


def test_the_floor_claims_are_checked_on_the_run_and_the_page_says_what_it_found():
    from hetsync.benches import paper_selmcast

    worse = fl.floor_claims(_study(0.75, 0.60, 0.0))  # push-sum hurts everyone, SELMCAST most; it loses to random
    assert (worse["push_sum_worse"], worse["push_sum_pairs"]) == (4, 4)
    assert worse["most_dropped"].startswith("selmcast") and (worse["paper_lost"], worse["cells"]) == (4, 4)
    assert worse["least"] == {0.0: 0.0, 1.0: 1.0} and worse["fed"] == 1.0 and worse["most"][0.0] == 12.0
    assert worse["round"]["ssp"] == {0.0: 2.0, 1.0: 2.5} and worse["round"]["bsp"] == {0.0: 2.0, 1.0: 2.0}
    better = fl.floor_claims(_study(0.85, 0.86, 0.5))  # the opposite: push-sum helps SELMCAST, which beats random
    assert better["push_sum_worse"] == 2 and better["most_dropped"].startswith("p2p-random")
    assert better["paper_lost"] == 0
    page = paper_selmcast.render_mixing(_study(0.75, 0.60, 0.0), command="hetsync bench paper-selmcast")
    assert "push-sum made\nevery policy less accurate,\nSELMCAST most" in page
    assert "lost to random receivers under both mixings" in page and "some slow workers receive none" in page
    assert "round time under SSP (2.5 s against 2.0 s" in page
    first = page
    page = paper_selmcast.render_mixing(_study(0.85, 0.86, 0.5), command="hetsync bench paper-selmcast")
    assert "2 of the 4 policies less accurate (not all of them)" in page and "`p2p-random(sync=" in page
    assert "did not lose to random receivers under either mixing" in page and "receive none" not in page
    assert worse["same_rounds"] and "came out the same\nin both modes" in first
    study = _study(0.75, 0.60, 0.0)
    study["cases"][1]["rows"][0]["mean_round_s"] = 3.0  # a round that differs under push-sum
    assert not fl.floor_claims(study)["same_rounds"]
    assert "differ between the mixings" in paper_selmcast.render_mixing(study, command="x")
    assert fl.floor_claims({**_fair(), "cases": []}) is None  # no skewed scenario: no claims
