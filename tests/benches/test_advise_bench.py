import json

import pytest

from hetsync.benches.advise import held_strictly
from hetsync.cli import main

TINY = """\
description: "2 workers, one 5 ms slower"
workers: 2
workload: digits-mlp
batch_size: 32
lr: 0.5
target_accuracy: 0.9
max_time_s: 3
seed: 0
fixed_s: 0.0
per_sample_s: 0.00001
delay_s: [0.002, 0.007]
bandwidth_Bps: 1.25e8
latency_s: 0.0005
"""


@pytest.mark.dist
def test_bench_advise_quick_profiles_advises_and_verifies_a_tiny_cluster(tmp_path, capsys):
    cluster = tmp_path / "tiny-2.yaml"
    cluster.write_text(TINY)
    rows_path, out = tmp_path / "rows.json", tmp_path / "bench"
    argv = ["bench", "advise", "--quick", "--clusters", str(cluster), "--out", str(out), "--json", str(rows_path)]
    assert main(argv) == 0
    assert "tiny-2 · advise → verify" in capsys.readouterr().out
    rows = json.loads(rows_path.read_text())
    verified = {r["policy"] for r in rows if r["setting"].startswith("tiny-2 · advise")}
    # --quick: asp's grid (plain, lr_scale=inverse, compensate=0.04) and BSP; the top two and BSP run for
    # real (two runs when BSP is among the top two: which ranks where rests on the profile, which load moves)
    shortlist = json.loads((out / "tiny-2" / "advise" / "advice.json").read_text())["shortlist"]
    assert "bsp" in shortlist and len(shortlist) in (2, 3), shortlist
    assert "bsp" in verified and len(verified) == len(shortlist), (verified, shortlist)
    assert all(p.startswith(("asp", "bsp")) for p in verified)
    recovered = [r for r in rows if r["metric"] == "delay injected"]
    assert [r["value"] for r in recovered] == [2.0, 7.0]  # the injected delays, read from the cluster
    res = json.loads((out / "results.json").read_text())["clusters"][0]
    assert (out / "tiny-2" / "profile" / "cluster.yaml").is_file()
    assert (out / "tiny-2" / "advise" / "advice.json").is_file()
    for run in res["runs"]:  # every verified run was measured for real and predicted by the simulator
        assert run["measured_samples_per_s"] > 0 and run["predicted_samples_per_s"] > 0
        assert run["samples_per_s_ratio"] == run["measured_samples_per_s"] / run["predicted_samples_per_s"]
    assert res["held"] is held_strictly(res["runs"])
    page = (out / "results-advise.md").read_text()
    assert "## `tiny-2`" in page and (out / "img" / "advise-tta.png").is_file()


def _run(role, tta):
    return {"role": role, "measured_tta_s": tta}


def test_held_needs_the_recommendation_at_least_as_fast_as_the_runner_up_and_faster_than_bsp():
    assert held_strictly([_run("recommended", 2.0), _run("runner-up", 2.0), _run("BSP", 3.0)]) is True
    assert held_strictly([_run("recommended", 2.1), _run("runner-up", 2.0), _run("BSP", 3.0)]) is False
    assert held_strictly([_run("recommended", 3.0), _run("runner-up", 4.0), _run("BSP", 3.0)]) is False
    assert held_strictly([_run("recommended", None), _run("BSP", 3.0)]) is False
    assert held_strictly([_run("recommended", 2.0), _run("runner-up", None), _run("BSP", 3.0)]) is True
    assert held_strictly([_run("runner-up", 2.0), _run("BSP", 3.0)]) is None


def test_bench_advise_bad_arguments_exit_2_before_anything_runs(tmp_path, capsys):
    assert main(["bench", "advise", "--seeds", "0", "--out", str(tmp_path)]) == 2
    assert "--seeds" in capsys.readouterr().err
    assert main(["bench", "advise", "--clusters", "no-such-cluster", "--out", str(tmp_path)]) == 2
    assert main(["bench", "advise", "--set", "workers=1", "--out", str(tmp_path)]) == 2  # --verify needs 2
    assert "at least 2 worker" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_a_paced_cluster_is_compared_on_its_whole_steps_a_stretched_one_on_its_delays():
    from types import SimpleNamespace

    from hetsync.benches.advise import recovery
    from hetsync.scenario import load_scenario

    prof = SimpleNamespace(
        batch_size=32,
        delay_s=(0.0,) * 4,
        slowdown=(1.0,) * 4,
        bandwidth_Bps=[1.25e8] * 4,
        step_s=lambda w: 0.011,
        straggler_prob=0.05,
        straggler_factor=6.0,
        jitter=0.1,
        fixed_s=0.002,
        per_sample_s=0.00025,
        latency_s=0.001,
        link_latency_s=0.0002,
        exchanges=(),
        server_Bps=None,
        server_s_per_message=0.00025,
    )
    paced = recovery(load_scenario("transient-4"), prof)
    assert paced["compared"] == "step" and paced["paced"]
    assert paced["server_s_per_message_fitted"] == 0.00025
    assert [w["compute_injected_s"] for w in paced["workers"]] == [0.002 + 32 * 0.00025] * 4
    assert paced["workers"][0]["compute_error"] == pytest.approx(0.1)
    stretched = recovery(load_scenario("hetero-4"), prof)
    assert stretched["compared"] == "delay" and [w["compute_injected_s"] for w in stretched["workers"]] == [
        0.01,
        0.02,
        0.03,
        0.04,
    ]


def test_why_not_says_when_the_real_seeds_do_not_tell_the_two_apart():
    from hetsync.benches.advise import _why_not

    def run(label, role, seeds):
        return {
            "label": label,
            "role": role,
            "measured_tta_s": sorted(seeds)[1],
            "measured_tta_seeds_s": seeds,
            "samples_per_s_ratio": 0.95,
            "predicted_wait_share": 0.03,
            "measured_wait_share": 0.03,
        }

    tied = {
        "held": False,
        "runs": [run("asp", "recommended", [1.82, 1.51, 1.72]), run("w", "runner-up", [1.81, 1.52, 1.71])],
    }
    assert "do not resolve" in _why_not(tied)[0] and "0.6% apart" in _why_not(tied)[0]
    apart = {
        "held": False,
        "runs": [run("asp", "recommended", [2.0, 2.1, 2.2]), run("w", "runner-up", [1.5, 1.6, 1.7])],
    }
    assert "do not resolve" not in _why_not(apart)[0]


def test_the_pages_command_names_every_option_that_differs_from_its_default():
    import argparse

    from hetsync.benches import advise as bench

    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    assert bench._argv(p.parse_args([])) == []
    argv = bench._argv(p.parse_args(["--seeds", "4", "--verify-seeds", "2", "--docs", "docs"]))
    assert argv == ["--seeds", "4", "--verify-seeds", "2", "--docs", "docs"]
