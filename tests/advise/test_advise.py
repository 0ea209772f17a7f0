"""hetsync advise: candidates, ranking, the reason sentence, and the command end to end."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from hetsync import advise
from hetsync.advise import Candidate, Features
from hetsync.cli import main
from hetsync.driver.advised import advised_start
from hetsync.errors import BadInput
from hetsync.policies import REGISTRY
from hetsync.scenario import load_scenario

TINY = """\
name: tiny
workers: 4
workload: digits-mlp
batch_size: 32
lr: 0.5
target_accuracy: 0.8
max_time_s: 3
eval_every_s: 0.25
fixed_s: 0.02
per_sample_s: 0.001
slowdown: [1, 1, 1, 3]
bandwidth_Bps: 1.25e9
latency_s: 0.0005
model_bytes: 1000000
"""


# ------------------------------------------------------------ candidates
def specs_of(cands):
    return [c.spec for c in cands if c.path == "ps"]


def test_default_grid_covers_every_policy_within_32():
    sc = load_scenario("default")
    cands, skipped = advise.candidates(sc, paths=("ps",))
    assert cands[0].spec == "bsp"
    assert 15 <= len(cands) <= 32
    assert len({c.label for c in cands}) == len(cands)
    # every policy but those real processes cannot run yet (nothing to advise on a real cluster)
    assert {c.policy for c in cands} == {name for name, cls in REGISTRY.items() if not cls.simulator_only}
    assert [c.params["s"] for c in cands if c.policy == "ssp"] == [1, 3, 8, 3]
    # the staleness remedies that helped or may help (docs/results-remedies.md) are candidates too
    assert {"asp:lr_scale=inverse", "asp:compensate=0.04", "ssp:s=3:lr_scale=inverse"} <= set(specs_of(cands))
    assert "elastic-bsp:R=15:within=local" in specs_of(cands)
    assert [c.params["H"] for c in cands if c.policy == "local-sgd"] == [2, 4, 8]
    # the SGD-tuned demo gets DiLoCo's inner AdamW at a small rate
    assert all(
        c.params["inner_lr"] == advise.DILOCO_SGD_INNER_LR
        for c in cands
        if c.policy in ("diloco", "streaming-diloco", "async-local-sgd")
    )
    # a CPU cluster: no GPU-curve LB-BSP, and it says why
    assert [s for s, _ in skipped] == ["lb-bsp:variant=gpu"]
    assert "cpu" in skipped[0][1]


def test_a_policy_whose_exchanges_are_rounds_is_weighed_on_the_collective_path_too():
    """The ranking names the path as well as the policy: every candidate
    whose rounds the collective path can reduce comes again on it, right
    after itself; the reference stays BSP on the parameter-server path."""
    from hetsync.driver import policy_context
    from hetsync.policies import make_policy

    sc = load_scenario("default")
    ps, _ = advise.candidates(sc, paths=("ps",))
    both, _ = advise.candidates(sc)
    assert [c for c in both if c.path == "ps"] == ps
    assert len({c.label for c in both}) == len({c.choice for c in both}) == len(both)
    for i, c in enumerate(both):
        if c.path == "collective":
            twin = both[i - 1]
            assert (twin.spec, twin.path, c.label, c.run_label) == (
                c.spec,
                "ps",
                f"{twin.label}@collective",
                twin.label,
            )
            assert advise.split_choice(c.choice) == (c.spec, "collective", 1)
    can = {c.spec for c in ps if make_policy(c.spec, policy_context(sc)).collective}
    assert {c.spec for c in both if c.path == "collective"} == can and {"bsp", "local-sgd:H=4"} <= can
    assert "asp" not in can
    assert [c.choice for c in both if c.is_reference] == ["bsp"]
    # a profiled script's cluster (the user's own loop): gradient rounds only
    script = load_scenario("default", script={"path": "/x/train.py", "args": []})
    on_loop = {c.policy for c in advise.candidates(script)[0] if c.path == "collective"}
    assert "bsp" in on_loop and not on_loop & {"local-sgd", "diloco"}
    with pytest.raises(BadInput, match="path"):
        advise.candidates(sc, paths=("ps", "carrier-pigeon"))


def test_sharded_servers_are_weighed_when_asked_for_the_policies_the_shards_can_carry():
    sc = load_scenario("default")
    cands, _ = advise.candidates(sc, ["bsp", "asp", "p2p-random:p=2", "asp:compensate=0.04"], servers=(1, 2, 4))
    choices = [c.choice for c in cands]
    assert choices[:4] == ["bsp", "bsp@collective", "bsp@servers=2", "bsp@servers=4"], choices
    assert {"asp@servers=2", "asp@servers=4"} <= set(choices)
    # p2p: no server holds a model; delay compensation: the base models would be split
    assert not [c for c in choices if "servers" in c and ("p2p" in c or "compensate" in c)], choices
    four = next(c for c in cands if c.choice == "asp@servers=4")
    assert (four.servers, four.path, four.label, four.run_label) == (4, "ps", "asp@servers=4", "asp")
    assert not four.is_reference and advise.split_choice(four.choice) == ("asp", "ps", 4)
    assert "4 sharded servers" in advise.mechanism(four, advise.features(sc, 1000))
    # clipping by the global norm: no shard sees the whole gradient; a user's own loop: never sharded
    clipped = advise.candidates(load_scenario("elastic-4-signal"), ["asp"], servers=(2,))[0]
    assert [c.choice for c in clipped if c.servers > 1] == []
    script = load_scenario("default", script={"path": "/x/train.py", "args": []})
    assert [c for c in advise.candidates(script, ["asp"], servers=(2,))[0] if c.servers > 1] == []
    assert advise.paths_clause(cands) == " (1 on the collective path, 6 on sharded servers)"  # asp: plain and lr_scale
    assert advise.paths_clause([c for c in cands if c.choice == c.spec]) == ""
    assert advise.parse_servers("2,4") == (1, 2, 4) and advise.parse_servers("1") == (1,)
    for bad in ("0", "x", "65"):
        with pytest.raises(BadInput, match="--servers takes server counts in 1..64"):
            advise.parse_servers(bad)


def test_the_reference_is_bsp_through_rank_0_even_when_bsp_on_the_collective_path_ranks_above_it():
    sc = load_scenario("default")
    cands = [c for c in advise.candidates(sc, ["bsp", "asp"])[0] if c.spec in ("bsp", "asp")]  # (not the remedies)
    assert [c.choice for c in cands] == ["bsp", "bsp@collective", "asp"]
    runs = {"bsp": [3.0, 3.0, 3.5], "bsp@collective": [2.0, 2.5, 2.5], "asp": [4.0, 4.0, 4.0]}
    entries = [
        (c, [{"time_to_target_s": t, "final_metric": 0.95, "wall_time_s": 10.0} for t in runs[c.choice]]) for c in cands
    ]
    ranked = advise.rank(entries)
    assert [r.label for r in ranked] == ["bsp@collective", "bsp", "asp"]
    feats = advise.features(sc, 1000)
    rec = advise.recommend(ranked, feats, target="accuracy ≥ 0.9")
    assert rec.label == "bsp@collective" and rec.path == "collective" and rec.verdict == "switch", rec
    assert rec.speedup == pytest.approx(3.0 / 2.5)
    assert "all-reduced among the workers" in rec.reason


def test_applicability_follows_the_cluster():
    four = load_scenario("default", workers=4)
    cands, skipped = advise.candidates(four)
    assert "p2p-random:p=4" in dict(skipped) and "p2p-random:p=2" in specs_of(cands)
    assert "backup:b=2" in specs_of(cands)
    three, _ = advise.candidates(load_scenario("default", workers=3))
    assert "backup:b=1" in specs_of(three) and "backup:b=2" not in specs_of(three)
    gpu, gpu_skipped = advise.candidates(load_scenario("lbbsp-gpu"))
    assert "lb-bsp:variant=gpu" in specs_of(gpu)
    assert "lb-bsp:variant=cpu:predictor=ewma" in dict(gpu_skipped)
    one, one_skipped = advise.candidates(load_scenario("default", workers=1))
    assert specs_of(one) == ["bsp"] and len(one_skipped) >= 20


def test_policies_restrict_the_grid_and_bsp_always_runs():
    sc = load_scenario("default")
    cands, _ = advise.candidates(sc, ["ssp", "asp"])
    assert specs_of(cands) == [
        *("bsp", "ssp:s=1", "ssp:s=3", "ssp:s=8", "ssp:s=3:lr_scale=inverse"),
        *("asp", "asp:lr_scale=inverse", "asp:compensate=0.04"),
    ]
    cands, _ = advise.candidates(sc, ["ssp:s=5", "ssp", "bsp"])
    assert [c.label for c in cands] == [
        *("bsp", "bsp@collective", "ssp(s=5)", "ssp(s=1)", "ssp(s=3)", "ssp(s=8)", "ssp(s=3,lr_scale=inverse)")
    ]
    with pytest.raises(BadInput, match="'nope'"):
        advise.candidates(sc, ["nope"])
    with pytest.raises(BadInput, match="'b'"):  # an explicit spec that cannot apply is refused, not skipped
        advise.candidates(sc, ["backup:b=8"])


# --------------------------------------------------------------- ranking
def cand(name, **params):
    spec = name + "".join(f":{k}={v}" for k, v in params.items())
    label = name + (f"({','.join(f'{k}={v}' for k, v in params.items())})" if params else "")
    return Candidate(spec=spec, label=label, policy=name, params=params)


def runs(ttas, finals=None, limit=30.0):
    finals = finals or [0.95] * len(ttas)
    return [
        {"seed": k, "time_to_target_s": t, "final_metric": f, "wall_time_s": limit, "wait_share": 0.3}
        for k, (t, f) in enumerate(zip(ttas, finals, strict=True))
    ]


def test_reached_ranks_before_not_reached_and_unreached_by_final_metric():
    ranked = advise.rank(
        [
            (cand("bsp"), runs([10, 11, 12])),
            (cand("asp"), runs([None, None, 4], [0.97, 0.97, 0.97])),  # median not reached, despite one fast seed
            (cand("ssp", s=3), runs([5, 6, None])),  # one seed missed: median still reached
            (cand("ssp", s=1), runs([None, None, None], [0.90, 0.91, 0.92])),
        ]
    )
    assert [r.label for r in ranked] == ["ssp(s=3)", "bsp", "asp", "ssp(s=1)"]
    assert [r.rank for r in ranked] == [1, 2, 3, 4]
    assert ranked[0].median_tta_s == 6 and ranked[0].reached == 2 and ranked[0].max_tta_s == float("inf")
    assert advise.seed_range(ranked[0]) == "5.0–>30.0"
    assert advise.seed_range(ranked[3]) == "not reached"
    # for a metric to minimize, the lower final value ranks first
    low = advise.rank(
        [(cand("bsp"), runs([None], [3.0])), (cand("asp"), runs([None], [2.0]))],
        direction="min",
    )
    assert [r.label for r in low] == ["asp", "bsp"]


def test_ties_go_to_the_narrower_spread_then_the_final_metric_then_the_simpler_policy():
    ranked = advise.rank(
        [
            (cand("bsp"), runs([8, 9, 10], [0.95] * 3)),
            (cand("asp"), runs([8, 9, 14], [0.99] * 3)),  # same median, worse worst case
            (cand("ssp", s=3), runs([8, 9, 10], [0.96] * 3)),  # same median and spread, better final
            (cand("ssp", s=8), runs([8, 9, 10], [0.95] * 3)),  # a full tie with bsp: bsp came first
        ]
    )
    assert [r.label for r in ranked] == ["ssp(s=3)", "bsp", "ssp(s=8)", "asp"]


def test_failed_runs_rank_last_and_say_so():
    ranked = advise.rank(
        [
            (cand("asp"), [{"seed": 0, "error": "DeadlockError: stalled"}]),
            (cand("bsp"), runs([None], [0.1])),
        ]
    )
    assert [r.label for r in ranked] == ["bsp", "asp"]
    assert ranked[1].failed and advise.seed_range(ranked[1]) == "failed"


def test_speedup_spread_and_significance():
    base = advise.rank([(cand("bsp"), runs([10, 12, 14]))])[0]
    fast = advise.rank([(cand("asp"), runs([5, 6, 8]))])[0]
    close = advise.rank([(cand("ssp", s=3), runs([9, 11, 13]))])[0]
    gain, span = advise.speedup(fast, base)
    assert gain == pytest.approx(2.0)
    assert span == pytest.approx((14 / 8, 2.0))  # seed by seed: 10/5, 12/6, 14/8
    assert advise.significant(fast, base)  # every seed beat every BSP seed
    assert not advise.significant(close, base)


# ----------------------------------------------------------------- reason
def feats(**kw):
    base = dict(workers=8, step_s=(0.05,) * 8, model_bytes=1_000_000, transfer_s=0.002, link_Bps=(1.25e9,) * 8)
    return Features(**{**base, **kw})


def test_reason_names_one_straggler_and_a_fast_network():
    f = feats(step_s=(0.05,) * 7 + (0.15,))
    text = advise.reason(f, cand("lb-bsp", variant="cpu"), bsp_wait=0.4, verdict="switch")
    assert text.startswith("One worker is 3.0× slower than the others")
    assert "communication is only 4% of a step" in text
    assert "BSP leaves workers waiting 40%" in text
    assert text.endswith("lb-bsp(variant=cpu) gives the slower workers smaller batches so every round ends together.")
    assert ". " not in text  # one sentence


def test_reason_names_a_slow_network():
    f = feats(transfer_s=0.1, jitter=0.05)
    text = advise.reason(f, cand("local-sgd", H=8), bsp_wait=0.03, bsp_comm=0.6, verdict="switch")
    assert "the 8 workers are equally fast with about 5% per-step noise" in text.lower()
    assert "moving the model takes 2.0× as long as a step" in text
    assert "BSP waits only 3% but communicates 60% of the time" in text
    assert "8× fewer barriers and transfers" in text


def test_reason_for_transient_stragglers_and_a_spread():
    f = feats(workers=16, step_s=(0.05,) * 16, straggler_prob=0.05, straggler_factor=6.0)
    text = advise.reason(f, cand("backup", b=2), bsp_wait=0.5, verdict="switch")
    assert "5% of steps are 6× slower, which stalls 56% of BSP rounds of 16 workers" in text
    assert "first 14 gradients" in text
    spread = feats(workers=4, step_s=(0.01, 0.02, 0.03, 0.04))
    assert advise.compute_clause(spread) == "step times range from 10 ms to 40 ms across the 4 workers"


def test_reason_when_bsp_wins_or_nothing_reaches_the_target():
    f = feats()
    text = advise.reason(f, cand("bsp"), bsp_wait=0.02, verdict="bsp")
    assert text.startswith("The 8 workers are equally fast") and "no alternative beats BSP" in text
    assert "came closest" in advise.reason(f, cand("asp"), bsp_wait=None, verdict="none")


def test_recommend_verdicts():
    f = feats()
    bsp_first = advise.rank([(cand("bsp"), runs([5, 5, 6])), (cand("asp"), runs([6, 7, 7]))])
    assert advise.recommend(bsp_first, f, target="accuracy ≥ 0.9").verdict == "bsp"
    overlap = advise.rank([(cand("bsp"), runs([8, 10, 12])), (cand("asp"), runs([7, 9, 11]))])
    rec = advise.recommend(overlap, f, target="accuracy ≥ 0.9")
    assert rec.verdict == "not-significant" and rec.label == "asp"
    assert "not significant" in rec.headline and rec.speedup == pytest.approx(10 / 9)
    clear = advise.rank([(cand("bsp"), runs([10, 11, 12])), (cand("asp"), runs([5, 5, 6]))])
    rec = advise.recommend(clear, f, target="accuracy ≥ 0.9")
    assert rec.verdict == "switch" and rec.headline.startswith("use asp: predicted 2.20× faster")
    none = advise.rank([(cand("bsp"), runs([None] * 3, [0.5] * 3)), (cand("asp"), runs([None] * 3, [0.6] * 3))])
    rec = advise.recommend(none, f, target="accuracy ≥ 0.9", limit_s=30)
    assert rec.verdict == "none" and rec.label == "asp" and "no candidate reached" in rec.headline


# ------------------------------------------------------------- end to end
@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    return str(path)


@pytest.mark.dist  # on a loaded machine the first run is slow enough for advise to start its process pool
def test_advise_end_to_end(tmp_path, tiny, capsys):
    out = tmp_path / "adv"
    argv = ["advise", "-s", tiny, "--seeds", "2", "--policies", "asp,ssp:s=3,lb-bsp-static", "-o", str(out)]
    assert main(argv) == 0
    shown = capsys.readouterr().out
    advice = json.loads((out / "advice.json").read_text())
    ranking = advice["ranking"]
    assert [r["label"] for r in ranking] and {r["label"] for r in ranking} == {
        "bsp",
        "bsp@collective",  # (the policies whose exchanges are rounds, on either path)
        "asp",
        "asp(lr_scale=inverse)",  # (asp's grid: its staleness remedies)
        "asp(compensate=0.04)",
        "ssp(s=3)",
        "lb-bsp-static",
        "lb-bsp-static@collective",
    }
    assert advice["recommendation"]["label"] == ranking[0]["label"]
    assert advice["seeds"] == [0, 1] and all(len(r["time_to_target_s"]) == 2 for r in ranking)
    assert advice["features"]["slow_workers"] == [3]
    assert "recommendation:" in shown and "why:" in shown
    # its last line: auto started from this advice (its best candidate here: BSP), held until the cluster changes
    assert f"-p auto:start={out}" in " ".join(shown.split())
    advised = advised_start(f"auto:start={out}")
    assert advised is not None and advised.spec == "auto:start=bsp:keep_start=until-change"
    top_row = next(line for line in shown.splitlines() if line.startswith("│ 1 │"))
    assert f" {ranking[0]['label']} " in top_row
    # summary.json: the seed-0 runs, ranked, as compare writes them; only seed 0 keeps traces
    runs = json.loads((out / "summary.json").read_text())
    assert [r["label"] for r in runs] == [r["label"] for r in ranking]
    assert all(r["seed"] == 0 and (out / r["trace"]).stat().st_size > 0 for r in runs)
    assert {r["label"]: r["path"] for r in runs}["bsp@collective"] == "collective"
    assert {r["label"]: r["path"] for r in runs}["bsp"] == "ps"
    assert len(list(out.glob("trace-*.jsonl"))) == len(ranking)  # (one per candidate)
    assert (out / "advice-tta.png").read_bytes()[:4] == b"\x89PNG"
    page = (out / "advice.html").read_text()
    assert "Recommendation:" in page and "data:image/png;base64," in page and "lb-bsp-static" in page
    assert main(["report", str(out), "--no-plots"]) == 0


@pytest.mark.dist
def test_parallel_runs_match_serial_runs(tmp_path, tiny):
    base = load_scenario(tiny)
    sc = replace(base, stop=replace(base.stop, max_time_s=1.0))
    cands, _ = advise.candidates(sc, ["asp"])
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    serial = advise.simulate(sc, cands, (0, 1), tmp_path / "a", jobs=1)
    parallel = advise.simulate(sc, cands, (0, 1), tmp_path / "b", jobs=2, pool_min_work_s=0)
    assert serial.keys() == parallel.keys()
    for key in serial:
        for field in ("time_to_target_s", "final_metric", "steps", "updates"):
            assert serial[key][field] == parallel[key][field], (key, field)
    assert (tmp_path / "a" / "trace-asp.jsonl").read_bytes() == (tmp_path / "b" / "trace-asp.jsonl").read_bytes()


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--policies", "bsp,nope"], "'nope'"),
        (["--seeds", "0"], "--seeds"),
        (["--policies", ","], "--policies"),
        (["--jobs", "0"], "--jobs"),
        (["--seeds", "2", "--verify-seeds", "3"], "--verify-seeds must be an integer in 1..2"),
        (["--verify-seeds", "0"], "--verify-seeds"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_leaves_the_folder(tmp_path, tiny, capsys, extra, needle):
    out = tmp_path / "adv"
    out.mkdir()
    (out / "summary.json").write_text("[]")
    assert main(["advise", "-s", tiny, "-o", str(out), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err and needle in err, err
    assert (out / "summary.json").read_text() == "[]"


# ----------------------------------------------------------------- --verify
VERIFY = """\
name: verify-tiny
workers: 2
workload: digits-mlp
batch_size: 32
lr: 0.5
target_accuracy: 0.8
max_time_s: 1.5
eval_every_s: 0.25
fixed_s: 0.004
per_sample_s: 0.0
delay_s: [0.0, 0.012]
bandwidth_Bps: 1.25e9
latency_s: 0.0005
"""


@pytest.mark.dist
def test_verify_runs_the_shortlist_for_real_and_sets_prediction_against_measurement(tmp_path, capsys):
    path = tmp_path / "verify.yaml"
    path.write_text(VERIFY)
    out = tmp_path / "adv"
    assert main(["advise", "-s", str(path), "--seeds", "1", "-p", "asp", "--verify", "-o", str(out)]) == 0
    shown = capsys.readouterr().out
    advice = json.loads((out / "advice.json").read_text())
    v = advice["verification"]
    assert [r["spec"] for r in v["runs"]] == advice["shortlist"] and "bsp" in advice["shortlist"]
    ranking = {r["label"]: r for r in advice["ranking"]}
    real = {r["label"]: r for r in json.loads((out / "verify" / "summary.json").read_text())}
    for row in v["runs"]:
        # the prediction is the simulator's figure, the measurement the real run's, each as its own file says
        assert row["predicted_time_to_target_s"] == ranking[row["label"]]["median_time_to_target_s"]
        assert row["measured_samples_per_s"] == real[row["label"]]["samples_per_s"] > 0
        assert real[row["label"]]["driver"] == "dist"
        assert row["recommended"] == (row["label"] == advice["recommendation"]["label"])
    assert v["verdict"].startswith("verify: ") and v["verdict"] in shown
    assert "TTA measured (s)" in shown
    assert "Verified on real processes" in (out / "advice.html").read_text()


@pytest.mark.dist
def test_verify_runs_each_path_of_the_shortlist_as_it_was_simulated(tmp_path):
    """asp and asp on 2 sharded servers tie in the simulator (the server's
    link is no bottleneck here), so both are shortlisted with BSP: the
    sharded one runs with its model on 2 servers, in verify/servers-2/, and
    verify/summary.json gathers all three under advise's labels."""
    path = tmp_path / "verify.yaml"
    path.write_text(VERIFY)
    out = tmp_path / "adv"
    argv = ["advise", "-s", str(path), "--seeds", "1", "-p", "asp", "--paths", "ps", "--servers", "2", "--verify"]
    assert main([*argv, "-o", str(out), "--no-plots"]) == 0
    advice = json.loads((out / "advice.json").read_text())
    assert "asp@servers=2" in advice["shortlist"] and "bsp" in advice["shortlist"], advice["shortlist"]
    (sharded,) = json.loads((out / "verify" / "servers-2" / "summary.json").read_text())
    assert sharded["servers"] == 2 and sharded["label"] == "asp" and sharded["samples_per_s"] > 0
    gathered = {r["label"]: r for r in json.loads((out / "verify" / "summary.json").read_text())}
    labels = {r["choice"]: r["label"] for r in advice["ranking"]}
    assert set(gathered) == {labels[c] for c in advice["shortlist"]}, (set(gathered), advice["shortlist"])
    assert gathered["asp@servers=2"]["servers"] == 2 and (out / "verify" / gathered["asp@servers=2"]["trace"]).is_file()
    row = next(r for r in advice["verification"]["runs"] if r["spec"] == "asp@servers=2")
    assert row["measured_samples_per_s"] == sharded["samples_per_s"]


@pytest.mark.parametrize("workers, needle", [(1, "at least 2 worker processes"), (65, "at most 64")])
def test_verify_refuses_what_it_cannot_start_before_simulating(tmp_path, tiny, capsys, workers, needle):
    out = tmp_path / "adv"
    argv = ["advise", "-s", tiny, "--set", f"workers={workers}", "--verify", "-o", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and needle in err, err
    assert not out.exists()


def test_noise_stragglers_and_load_weigh_by_the_base_share_of_a_step():
    # a profiled cluster: a 0.5 ms gradient and a 10 ms delay; the noise of the base barely moves a step
    sc = load_scenario(
        "hetero-4",
        fixed_s=0.0005,
        per_sample_s=0.0,
        delay_s=[0.01] * 4,
        jitter=0.8,
        straggler_prob=0.05,
        straggler_factor=11.0,
    )
    f = advise.features(sc, 1000)
    share = 0.0005 / 0.0105
    assert f.jitter == pytest.approx(0.8 * share) and f.straggler_factor == pytest.approx(1 + 10 * share)
    plain = advise.features(replace(sc, cluster=replace(sc.cluster, delay_s=(0.0,) * 4)), 1000)
    assert plain.jitter == 0.8 and plain.straggler_factor == 11.0


def test_the_measured_time_to_target_is_the_median_over_real_seeds_a_miss_counting_as_infinitely_slow():
    from hetsync.advise import median_reached

    assert median_reached([1.0, 3.0, 2.0]) == 2.0
    assert median_reached([1.0, None, 2.0]) == 2.0
    assert median_reached([1.0, None, None]) is None
    assert median_reached([]) is None


def test_each_real_seed_runs_in_its_own_folder_with_its_seed(tmp_path):
    from hetsync.advise import Verification, verify_args
    from hetsync.advise.verification import _seeded

    config = verify_args("transient-4", ["max_time_s=4"], None, ["bsp"], tmp_path / "verify")
    # transient-4 is played with its modelled timing: paced and throttled
    assert config.process.emulation(config.load_scenario()) == (True, True)
    seeded = _seeded(config, 2)
    assert seeded.overrides == {"max_time_s": 4, "seed": 2}
    assert seeded.process.out == tmp_path / "verify" / "seed-2"
    assert seeded.process.emulation(seeded.load_scenario()) == (True, True)
    assert Verification(rows=(), folder="verify", elapsed_s=0.0, seeds=(0, 1)).run_folders == [
        "verify/seed-0",
        "verify/seed-1",
    ]
    assert Verification(rows=(), folder="verify", elapsed_s=0.0).run_folders == ["verify"]


# ------------------------------------------------ your own model (issue 26)
ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]
TINYNET = str(ROOT / "tests" / "userworkload" / "tinynet.py")


def test_a_workload_of_your_own_is_named_module_function(monkeypatch):
    from hetsync.workloads import Workload, make_workload

    monkeypatch.syspath_prepend(str(ROOT))  # an installed package, or the current folder
    wl = make_workload("tests.userworkload.tinynet:workload")
    assert isinstance(wl, Workload) and wl.name == "tinynet" and wl.metrics["accuracy"] == "max"
    small = make_workload(f"{TINYNET}:workload", hidden=4)  # a file, with the scenario's workload_args
    assert small.n_params < wl.n_params


@pytest.mark.parametrize(
    "ref, args, needle",
    [
        ("no_such_module_xyz:workload", {}, "cannot import module 'no_such_module_xyz'"),
        (f"{TINYNET}:nope", {}, "has no function 'nope'"),
        ("/no/such/file.py:workload", {}, "no such file"),
        (f"{TINYNET}:rings", {}, "not a hetsync Workload"),
        (f"{TINYNET}:workload", {"depth": 3}, "cannot take workload_args ['depth']"),
        (":workload", {}, "module:function"),
    ],
)
def test_a_bad_workload_reference_says_what_is_wrong(ref, args, needle):
    from hetsync.workloads import make_workload

    with pytest.raises(BadInput, match=__import__("re").escape(needle)):
        make_workload(ref, **args)


def test_advise_simulates_your_model_and_says_when_a_builtin_stands_in(tmp_path, capsys):
    """A cluster file that names ``workload: file.py:function`` is simulated
    with that model's real gradients; one that names no workload learns the
    built-in digits-mlp, and advise says so plainly."""
    own = tmp_path / "own.yaml"
    own.write_text(TINY.replace("workload: digits-mlp", f"workload: {TINYNET}:workload"))
    argv = ["advise", "-p", "asp", "--seeds", "1", "--jobs", "1", "--set", "max_time_s=0.5", "--no-plots"]
    assert main([*argv, "-s", str(own), "-o", str(tmp_path / "a")]) == 0
    shown = capsys.readouterr().out
    advice = json.loads((tmp_path / "a" / "advice.json").read_text())
    assert advice["workload"] == f"{TINYNET}:workload" and advice["workload_note"] is None
    assert "names no workload" not in shown
    first_eval = next(json.loads(line) for line in (tmp_path / "a" / "trace-bsp.jsonl").open() if '"eval"' in line)
    assert 0.5 < first_eval["loss"] < 1.0  # two rings' classes at chance (ln 2), not digits' ten (ln 10 = 2.3)
    stand_in = tmp_path / "stand-in.yaml"
    stand_in.write_text(TINY.replace("workload: digits-mlp\n", ""))
    assert main([*argv, "-s", str(stand_in), "-o", str(tmp_path / "b")]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "names no workload: the simulator learns the built-in digits-mlp in place of your model" in shown
    assert json.loads((tmp_path / "b" / "advice.json").read_text())["workload_note"].startswith("tiny names no")


def test_unknown_paths_are_refused_in_one_line_before_the_folder_is_touched(tmp_path, capsys):
    out = tmp_path / "adv"
    assert main(["advise", "-s", "default", "--paths", "ps,pigeon", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--paths takes ps and collective" in err and err.count("\n") == 1 and not out.exists(), err
    assert advise.parse_paths("collective") == ("ps", "collective") and advise.parse_paths("ps") == ("ps",)
    from hetsync.driver.paths import PATHS

    assert advise.PATHS == PATHS
