"""SELMCAST's fairness floor (``hetsync bench paper-selmcast --floors``), and
the figures of a point of every SELMCAST comparison (its columns, its progress line).

The study: ``selmcast:floor=f`` for each floor and ``p2p-random``, under BSP and
SSP rounds, on label-skewed (``p2p-bw-skew``) and iid (``p2p-bw``) shards under
both mixings (``p2p_mixing``), for every seed: per case and policy the final
metric of each seed and their mean, round, receivers per sender, time to target,
the copies per round of the least- and the most-served worker, ratios to
p2p-random under the same rounds. It writes the floor section of
``results-selmcast.md`` and the page ``results-p2p-mixing.md``.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from hetsync.benches import experiment as ex
from hetsync.benches import plots
from hetsync.benches.common import Row, fmt_metric, seeds_setting, short_metric, target_of, target_text
from hetsync.benches.experiment import Col
from hetsync.trace import iter_records

SCENARIOS = ("p2p-bw-skew", "p2p-bw")
FLOORS = (0.0, 0.5, 1.0)
MIXINGS = ("equal", "push-sum")
P = 2  # receivers per sender the study asks for
METRICS = ("mean_receivers", "mean_exchange_s", "mean_round_s", "compute_share", "time_to_target_s", "final_metric")
"""The figures of a point averaged over the seeds, per policy."""


# ------------------------------------------------------------------ a point's figures
def progress(s: dict[str, Any]) -> str:
    """A run's progress figures: receivers per sender, exchange, compute share, time to target."""
    return (
        f"receivers/sender {s['mean_receivers']:.2f}, exchange {ex.fmt_secs(s['mean_exchange_s'])}, "
        f"compute {100 * s['compute_share']:.1f}%, TTA {ex.fmt_secs(s['time_to_target_s'])}"
    )


def point_columns(target: dict[str, Any]) -> dict[str, Col]:
    """The columns of a point (a policy's means over the seeds), by name."""
    metric = target["target_metric"]
    final = partial(fmt_metric, metric)
    return {
        "policy": Col("policy", lambda p: p["label"]),
        "receivers": ex.key_col("receivers / sender", "mean_receivers", "{:.2f}".format, "receivers per sender"),
        "exchange": ex.key_col("exchange", "mean_exchange_s", ex.fmt_secs, "mean exchange", "s"),
        "sync": ex.key_col("sync / step", "sync_s", ex.fmt_secs, "sync per step", "s"),
        "round": ex.key_col("round", "mean_round_s", ex.fmt_secs, "mean round", "s"),
        "compute": ex.share_col("compute", "compute_share", "compute share"),
        "tta": ex.seed_tta_col("time to target", target),
        "final": ex.key_col(f"final {short_metric(metric)}", "final_metric", final, f"final {metric}", shown=True),
    }


# ------------------------------------------------------------------ running
def served_copies(r: dict[str, Any], where: Path, _sc: Any) -> dict[str, float | None]:
    """Copies per round of the least- and the most-served worker (its trace's ``send``
    records; a round: one multicast per worker)."""
    got = [0] * r["workers"]
    for rec in iter_records(where / r["trace"], kinds="send"):
        got[int(rec["to"])] += 1
    rounds = r["multicasts"] / r["workers"] if r["multicasts"] else 0.0
    return {"least_served": min(got) / rounds if rounds else None, "most_served": max(got) / rounds if rounds else None}


def bench_floors(floors: list[float], exp: ex.Experiment, out: Path) -> dict[str, Any]:
    """The study (the module's docstring) under ``out``, with ``exp``'s seeds and overrides."""
    selmcast = [f"selmcast:{{}}p={P}:floor={f:g}" for f in floors]
    specs = [spec.format(sync) for sync in ("", "sync=ssp:") for spec in (f"p2p-random:{{}}p={P}", *selmcast)]
    cases = [c for name in SCENARIOS for c in ex.override_cases(name, "p2p_mixing", MIXINGS, name=str)]
    study = replace(exp, cases=tuple(cases), policies=tuple(specs), seed_dirs=True)
    records: list[dict[str, Any]] = []
    target: dict[str, Any] = {}
    for case in study.cases:
        _sc, runs_by_seed = study.run_case(case, out, progress=progress, figures=served_copies)
        rows = ex.label_means(
            runs_by_seed,
            (*METRICS, "least_served", "most_served"),
            sync=lambda rs: rs[0]["params"]["sync"],
            floor=lambda rs: rs[0]["params"].get("floor") if rs[0]["policy"] == "selmcast" else None,
            finals=lambda rs: [r["final_metric"] for r in rs],
        )
        for row in rows:
            base = next(b for b in rows if b["policy"] == "p2p-random" and b["sync"] == row["sync"])
            row["metric_gain"] = row["final_metric"] - base["final_metric"]
            row["round_speedup"] = ex.ratio(base["mean_round_s"], row["mean_round_s"])
            row["receivers_ratio"] = ex.ratio(row["mean_receivers"], base["mean_receivers"])
        records.append({"scenario": case.scenario, "mixing": case.overrides["p2p_mixing"], "rows": rows})
        target = target or target_of(next(iter(runs_by_seed.values()))[0])
    return {"seeds": list(exp.seeds), "floors": floors, "cases": records, **target}


# ------------------------------------------------------------------ tables
def _columns(fair: dict[str, Any]) -> list[Col]:
    """The floor table: per mixing and policy the final metric of each seed, its
    mean and gain over p2p-random, round and its ratio, receivers per sender,
    least/most served, time to target; the rows: those figures but the seeds'."""
    metric, col = fair["target_metric"], point_columns(fair)
    finals = f"final {short_metric(metric)}, seeds {' / '.join(map(str, fair['seeds']))}"

    def served(p: dict[str, Any]) -> str:
        return f"{p['least_served']:.2f} / {p['most_served']:.2f}" if p["least_served"] is not None else "—"

    def gain(p: dict[str, Any]) -> str:
        return "—" if p["policy"] == "p2p-random" else f"{p['metric_gain']:+.3f}"

    return [
        col["policy"],
        ex.key_col("mixing", "mixing", str),
        Col(finals, lambda p: " / ".join(fmt_metric(metric, v) for v in p["finals"])),
        Col("mean", lambda p: f"**{fmt_metric(metric, p['final_metric'])}**", f"final {metric}", "final_metric"),
        Col("vs random", gain, f"final {metric} vs random", "metric_gain"),
        col["round"],
        ex.key_col("round shorter", "round_speedup", ex.fmt_x),
        col["receivers"],
        Col("least / most served", served, "least served, copies/round", "least_served"),
        Col(None, metric="most served, copies/round", value="most_served"),
        col["tta"]._replace(metric=None),
    ]


def floor_rows(fair: dict[str, Any] | None) -> list[Row]:
    """The printed and ``--json`` rows: per case a table, per policy a line."""
    if fair is None:
        return []
    rows: list[Row] = []
    for case in fair["cases"]:
        setting = seeds_setting(f"{case['scenario']} (sim), mixing {case['mixing']}", fair["seeds"], " (means)")
        rows += ex.table_rows(case["rows"], _columns(fair), setting=setting, scenario=case["scenario"])
    return rows


def _gain_table(fair: dict[str, Any], scenario: str) -> list[str]:
    """Per selmcast floor (a line), its mean final metric minus p2p-random's in
    each (mixing, rounds) cell of ``scenario``, in how many cells it is at least
    random's, and its round ratio under each rounds."""
    cases = [c for c in fair["cases"] if c["scenario"] == scenario]
    cells = [(c["mixing"], sync) for c in cases for sync in ("bsp", "ssp")]
    lines = []
    for floor in fair["floors"]:
        mine = [(c["mixing"], p) for c in cases for p in c["rows"] if p["policy"] == "selmcast"]
        ps = {(mixing, p["sync"]): p for mixing, p in mine if (p["floor"] or 0.0) == floor}
        rounds = {sync: p["round_speedup"] for (_, sync), p in ps.items()}
        lines.append({"floor": floor, "cells": ps, "rounds": rounds})

    def gain(cell: tuple[str, str]) -> Col:
        return Col(f"{cell[0]}, {cell[1]}", lambda f: f"{f['cells'][cell]['metric_gain']:+.3f}")

    def at_least(f: dict[str, Any]) -> str:
        return f"{sum(f['cells'][c]['metric_gain'] >= 0 for c in cells)} of {len(cells)}"

    def round_ratios(f: dict[str, Any]) -> str:
        return " / ".join(ex.fmt_x(f["rounds"].get(s)) for s in ("bsp", "ssp"))

    name = Col("selmcast", lambda f: "floor=0 (paper)" if f["floor"] == 0 else f"floor={f['floor']:g}")
    ends = [Col("at least random's", at_least), Col("round shorter (bsp / ssp)", round_ratios)]
    columns = [name, *map(gain, cells), *ends]
    return ex.aggregate_table(lines, columns, left=1)


def floor_values(fair: dict[str, Any]) -> dict[str, Any]:
    """The floor section's and the mixing page's figures: gains and tables per
    scenario, and the checks their prose turns on (:func:`floor_claims`)."""
    scenarios = dict.fromkeys(c["scenario"] for c in fair["cases"])

    def table(name: str) -> list[str]:
        lines = [{**p, "mixing": c["mixing"]} for c in fair["cases"] if c["scenario"] == name for p in c["rows"]]
        return ex.aggregate_table(lines, _columns(fair), left=3)

    return {
        "seeds": ", ".join(map(str, fair["seeds"])),
        "n_seeds": len(fair["seeds"]),
        "target": target_text(fair),
        "gains": "\n\n".join(f"*{name}*\n\n" + "\n".join(_gain_table(fair, name)) for name in scenarios),
        "tables": "\n\n".join(f"**{name}**\n\n" + "\n".join(table(name)) for name in scenarios),
        "c": floor_claims(fair),
    }


def floor_claims(fair: dict[str, Any]) -> dict[str, Any] | None:
    """What the prose about the floor says, checked on this run (None without the
    label-skewed scenario). On it: how many of p2p-random's and the paper's
    SELMCAST's (``floor=0``) rows push-sum made less accurate (``push_sum_worse``
    of ``push_sum_pairs``) and which the most (``most_dropped``); in how many
    (mixing, rounds) cells the paper's choice lost to random (``paper_lost`` of
    ``cells``; ``iid_lost`` of ``iid_cells`` on iid shards); per floor the copies
    per round of the least and the most served worker (``least``, ``most``,
    ``ssp_least``: {floor: value}; ``fed``: the least over the floors above 0)
    and the mean round per rounds (``round``: {sync: {floor: s}}); how many of
    SELMCAST's differences to random exceed the spread between seeds
    (``beyond_spread`` of ``compared``); whether round, fan-out and copies per
    worker came out the same under both mixings (``same_rounds``)."""
    flat = [{**p, "mixing": c["mixing"], "scenario": c["scenario"]} for c in fair["cases"] for p in c["rows"]]
    skew = [c["mixing"] for c in fair["cases"] if c["scenario"] == SCENARIOS[0]]  # its mixings, in order
    if not skew:
        return None
    sign = -1.0 if fair.get("target_direction") == "min" else 1.0  # sign × difference > 0: better
    floors = [float(f) for f in fair["floors"]]

    def rows(
        floor: float | None, sync: str | None = None, *, iid: bool = False, mixing: str | None = None
    ) -> list[Any]:
        """SELMCAST's rows with ``floor`` (None: p2p-random's) on the skewed shards (``iid``: the others),
        under ``sync`` and ``mixing`` if given."""
        return [
            p
            for p in flat
            if (p["scenario"] != SCENARIOS[0]) == iid
            and (
                p["policy"] == "p2p-random"
                if floor is None
                else (p["policy"], p["floor"] or 0.0) == ("selmcast", floor)
            )
            and sync in (None, p["sync"])
            and mixing in (None, p["mixing"])
        ]

    finals: dict[str, dict[str, float]] = {}  # label -> mixing -> mean final metric
    for p in rows(None) + rows(0.0):
        finals.setdefault(p["label"], {})[p["mixing"]] = p["final_metric"]
    drops = {k: sign * (v["equal"] - v["push-sum"]) for k, v in finals.items() if {"equal", "push-sum"} <= v.keys()}
    randoms = {(p["mixing"], p["sync"]): p for p in rows(None)}
    selmcast = [p for f in floors for p in rows(f)]

    def beyond(p: dict[str, Any]) -> bool:
        base = randoms[(p["mixing"], p["sync"])]
        spread = max(max(p["finals"]) - min(p["finals"]), max(base["finals"]) - min(base["finals"]))
        return abs(p["metric_gain"]) > spread

    def lost(rs: list[dict[str, Any]]) -> int:
        return sum(sign * p["metric_gain"] < 0 for p in rs)

    def served(key: str, pick: Any, sync: str | None = None) -> dict[float, float]:
        return {f: pick(v) for f in floors if (v := [p[key] for p in rows(f, sync) if p[key] is not None])}

    plans: dict[tuple[str, str], set[tuple[Any, ...]]] = {}  # (scenario, label) -> the plan figures per mixing
    for p in flat:
        figures = (p["mean_round_s"], p["mean_receivers"], p["least_served"], p["most_served"])
        plans.setdefault((p["scenario"], p["label"]), set()).add(figures)
    least, iid = served("least_served", min), rows(0.0, iid=True)
    return {
        "same_rounds": all(len(v) == 1 for v in plans.values()),
        **{"push_sum_worse": sum(d > 0 for d in drops.values()), "push_sum_pairs": len(drops)},
        "most_dropped": max(drops, key=lambda k: drops[k], default=None),
        **{"paper_lost": lost(rows(0.0)), "cells": len(rows(0.0)), "iid_lost": lost(iid), "iid_cells": len(iid)},
        **{"half_lost_bsp": lost(rows(0.5, "bsp")), "half_bsp_cells": len(rows(0.5, "bsp"))},
        **{"least": least, "most": served("most_served", max), "ssp_least": served("least_served", min, "ssp")},
        "fed": min((v for f, v in least.items() if f > 0), default=None),
        "round": {
            sync: {f: p["mean_round_s"] for f in floors for p in rows(f, sync, mixing=skew[0])}
            for sync in ("bsp", "ssp")
        },
        **{"beyond_spread": sum(beyond(p) for p in selmcast), "compared": len(selmcast), "p": P},
    }


# -------------------------------------------------------------------- plot
def plot_floors(fair: dict[str, Any], path: Path) -> Path:
    """Small multiples (:func:`plots.plot_seed_bars`), a panel per scenario and rounds:
    mean final metric per policy, a bar per mixing, each seed a dot, p2p-random's mean dashed."""

    def panel(name: str, sync: str) -> dict[str, Any]:
        cases = [c for c in fair["cases"] if c["scenario"] == name]
        rows = [[p for p in case["rows"] if p["sync"] == sync] for case in cases]
        groups = [
            {"name": case["mixing"], "means": [p["final_metric"] for p in ps], "seeds": [p["finals"] for p in ps]}
            | {"reference": next(p["final_metric"] for p in ps if p["policy"] == "p2p-random")}
            for case, ps in zip(cases, rows, strict=True)
        ]
        lo = min(min(p["finals"]) for c in cases for p in c["rows"])
        labels = [_short_label(p["label"]) for p in rows[0]]
        return {"title": f"{name} · {sync}", "labels": labels, "groups": groups, "xlim": (max(0.0, lo - 0.05), 1.0)}

    grid = [
        [panel(name, sync) for sync in ("bsp", "ssp")] for name in dict.fromkeys(c["scenario"] for c in fair["cases"])
    ]
    title = "SELMCAST's fairness floor vs random receivers; dots: seeds, dashed: p2p-random's mean"
    xlabel = f"final {short_metric(fair['target_metric'])} (equal time)"
    return plots.plot_seed_bars(grid, path, title=title, xlabel=xlabel)


def _short_label(label: str) -> str:
    """``selmcast(sync=bsp,p=2,bandwidth=worst,floor=0.5)`` → ``selmcast floor=0.5``."""
    name, _, rest = label.partition("(")
    floor = next((part for part in rest.rstrip(")").split(",") if part.startswith("floor=")), None)
    if name == "selmcast":
        return f"selmcast {floor or 'floor=0 (paper)'}"
    return name
