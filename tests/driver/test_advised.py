"""auto's start from an advice (hetsync.driver.advised): which entry it takes, and what it refuses."""

from __future__ import annotations

import json

import pytest

from hetsync.driver.advised import advised_start, resolve_specs
from hetsync.errors import BadInput


def _entry(rank: int, policy: str, params: dict, *, path: str = "ps", reached: int = 3) -> dict:
    label = policy + (f"({','.join(f'{k}={v}' for k, v in params.items())})" if params else "")
    return {"rank": rank, "policy": policy, "params": params, "label": label, "path": path, "servers": 1,
            "reached": reached}  # fmt: skip


def _advice(tmp_path, *entries: dict) -> str:
    """An advice.json as hetsync advise writes it (the keys this reads), in a folder of its own."""
    folder = tmp_path / "advise"
    folder.mkdir()
    (folder / "advice.json").write_text(json.dumps({"ranking": list(entries)}))
    return str(folder)


RANKING = (
    _entry(1, "diloco", {"H": 5, "inner_lr": 0.01}),
    _entry(2, "local-sgd", {"H": 8}, path="collective"),  # (auto runs on path ps only)
    _entry(3, "local-sgd", {"H": 8}),
    _entry(4, "lb-bsp", {"variant": "cpu", "predictor": "ewma", "lags": 2, "history": 20, "max_batch": ""}),
    _entry(5, "backup", {"b": 2}),
    _entry(6, "local-sgd", {"H": 4}),
    _entry(7, "lb-bsp", {"variant": "cpu", "predictor": "rls", "lags": 2, "history": 20, "max_batch": ""}),
    _entry(8, "bsp", {}),
)


def test_it_starts_on_the_best_ranked_entry_auto_can_run_with_its_h_and_holds_it_until_the_cluster_changes(tmp_path):
    where = _advice(tmp_path, *RANKING)
    advised = advised_start(f"auto:start={where}")
    assert advised is not None and advised.spec == "auto:start=local-sgd:h=8:keep_start=until-change"
    assert "rank 3 of 8" in advised.said and "advise recommends diloco(H=5,inner_lr=0.01)" in advised.said
    # the file itself does too; the spec's other parameters stay; keep_start=no is kept when given
    advised = advised_start(f"auto:margin=0.2:start={where}/advice.json:keep_start=no")
    assert advised is not None and advised.spec == "auto:margin=0.2:start=local-sgd:h=8:keep_start=no"
    assert "held" not in advised.said


@pytest.mark.parametrize(
    ("params", "start"),
    [
        (":h=4", "backup:b=2"),  # an h given: local SGD only with that H (rank 6), and backup ranks above it
        (":candidates=bsp+local-sgd:h=4", "local-sgd:h=4"),
        (":window=12", "backup:b=2"),  # H = 8 needs a window of 16: the next auto can run
        (":candidates=bsp+lb-bsp", "lb-bsp"),  # LB-BSP as auto runs it: its defaults (not predictor=ewma)
        (":candidates=bsp+lb-bsp+backup:b=1", "lb-bsp"),  # b given: backup(b=2) is not it
    ],
)
def test_only_entries_auto_runs_as_one_of_its_candidates_with_the_given_settings_are_taken(tmp_path, params, start):
    advised = advised_start(f"auto{params}:start={_advice(tmp_path, *RANKING)}")
    assert advised is not None and f"start={start}" in advised.spec


def test_a_candidate_that_never_reached_the_target_leaves_bsp_the_safe_start_ranked_as_usual(tmp_path):
    where = _advice(tmp_path, _entry(1, "asp", {}), _entry(2, "local-sgd", {"H": 4}, reached=0), _entry(3, "bsp", {}))
    advised = advised_start(f"auto:start={where}")
    assert advised is not None and advised.spec == "auto:start=bsp:keep_start=no"
    assert "never reached the target" in advised.said


def test_other_specs_pass_unchanged_and_each_advised_one_says_what_it_starts_on(tmp_path):
    where = _advice(tmp_path, *RANKING)
    specs, said = resolve_specs(["bsp", "auto:start=lb-bsp", f"auto:start={where}", "ssp:s=2"])
    assert specs == ["bsp", "auto:start=lb-bsp", "auto:start=local-sgd:h=8:keep_start=until-change", "ssp:s=2"]
    assert len(said) == 1 and said[0].startswith("auto starts on local-sgd(h=8): rank 3 of 8 in ")


@pytest.mark.parametrize(
    ("what", "needle"),
    [
        ("missing", "must be one of bsp, lb-bsp, backup, local-sgd or an advice"),
        ("not-json", "cannot read"),
        ("no-ranking", "has no 'ranking' list"),
        ("nothing-fits", "no entry of"),
    ],
)
def test_a_start_that_is_no_advice_auto_can_use_is_refused_in_one_line(tmp_path, what, needle):
    folder = tmp_path / "advise"
    folder.mkdir()
    file = folder / "advice.json"
    if what == "not-json":
        file.write_text("{")
    elif what == "no-ranking":
        file.write_text(json.dumps({"recommendation": {}}))
    elif what == "nothing-fits":
        file.write_text(json.dumps({"ranking": [_entry(1, "asp", {}), _entry(2, "bsp", {}, path="collective")]}))
    where = folder / "elsewhere" if what == "missing" else folder
    with pytest.raises(BadInput, match=needle) as e:
        advised_start(f"auto:start={where}")
    assert "\n" not in str(e.value)
