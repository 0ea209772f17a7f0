import re

import hypothesis
import hypothesis.strategies as st
import pytest

from hetsync.errors import BadInput
from hetsync.scenario import Cluster, Scenario, StopRule, load_scenario, scenario_from_dict


def test_with_workers_resolves_generators_again():
    sc = load_scenario("wbsp-h1")  # delay_s: {workers: half, value: 0.5} on 8 workers
    assert sc.cluster.delay_s == (0, 0, 0, 0, 0.5, 0.5, 0.5, 0.5)
    assert sc.with_workers(4).cluster.delay_s == (0, 0, 0.5, 0.5)  # still half of them
    lin = scenario_from_dict({"workers": 5, "max_steps": 1, "slowdown": {"linspace": [1, 3]}})
    assert lin.with_workers(3).cluster.slowdown == (1.0, 2.0, 3.0)


def test_with_workers_cycles_explicit_lists():
    sc = scenario_from_dict({"workers": 3, "max_steps": 1, "slowdown": [1, 2, 3]})
    assert sc.with_workers(5).cluster.slowdown == (1, 2, 3, 1, 2)
    assert sc.with_workers(2).cluster.slowdown == (1, 2)


def test_per_worker_forms_and_errors_name_the_key():
    sc = scenario_from_dict({"workers": 4, "max_steps": 1, "slowdown": {"cycle": [1, 2]}, "bandwidth_Bps": "1.25e8"})
    assert sc.cluster.slowdown == (1, 2, 1, 2) and sc.cluster.bandwidth_Bps == (1.25e8,) * 4
    with pytest.raises(BadInput, match="'slowdown'"):
        scenario_from_dict({"workers": 4, "max_steps": 1, "slowdown": [1, 2]})
    with pytest.raises(BadInput, match="'source'"):
        scenario_from_dict({"workers": 4, "max_steps": 1, "source": {}})
    with pytest.raises(BadInput, match="half"):
        scenario_from_dict({"workers": 4, "max_steps": 1, "delay_s": {"workers": "most", "value": 1}})


def test_every_builtin_loads():
    from hetsync.scenario import builtin_scenarios

    for name in builtin_scenarios():
        assert load_scenario(name).cluster.workers >= 1


def test_a_workers_override_fits_the_files_lists_instead_of_refusing_them():
    sc = load_scenario("p2p-bw", workers=6)  # explicit link_load workers up to 14, bandwidth cycle
    assert sc.cluster.link_load is not None and sc.cluster.link_load.workers == (1, 2, 5)
    assert sc.cluster.bandwidth_Bps == (1.25e7, 3.125e7, 1.25e8, 1.25e9, 1.25e7, 3.125e7)
    assert load_scenario("default", workers=4).cluster.slowdown == (1.0, 1.0, 1.0, 1.25)  # an explicit list, cut
    # a list given with the new size is taken as given
    assert load_scenario("default", workers=3, slowdown=[1, 2, 3]).cluster.slowdown == (1.0, 2.0, 3.0)


def test_step_costs_accept_measured_and_other_words_are_errors_naming_the_key():
    from hetsync.scenario import StepToMeasure, parse_override

    sc = load_scenario("default", **dict([parse_override("per_sample_s=measured")]))
    assert sc.timing.step == StepToMeasure(fixed_s=0.02, per_sample_s=None) and not sc.timing.resolved
    assert (sc.setting("fixed_s"), sc.setting("per_sample_s")) == (0.02, "measured")
    sc = scenario_from_dict({"workers": 2, "max_steps": 1, "fixed_s": "measured"})
    assert sc.timing.step == StepToMeasure(fixed_s=None, per_sample_s=0.001)
    assert sc.timing.step.to_measure == ("fixed_s",) and sc.to_dict()["fixed_s"] == "measured"
    assert load_scenario("default").timing.resolved
    for key in ("per_sample_s", "fixed_s"):
        with pytest.raises(BadInput, match=f"'{key}' must be int or float or 'measured', got 'fast'"):
            scenario_from_dict({"workers": 2, "max_steps": 1, key: "fast"})
        with pytest.raises(BadInput, match=f"'{key}'"):
            scenario_from_dict({"workers": 2, "max_steps": 1, key: -1})


def test_an_unresolved_measured_cost_is_an_error_where_numbers_are_needed():
    from hetsync.scenario import StepCost

    sc = scenario_from_dict({"workers": 2, "max_steps": 1, "per_sample_s": "measured"})
    with pytest.raises(BadInput, match=r"per_sample_s is 'measured' and not measured yet.*resolve_measured"):
        sc.nominal_step_s(0, 32)
    resolved = sc.with_step_cost(StepCost(fixed_s=0.0, per_sample_s=0.5, measured=("per_sample_s",)))
    assert (resolved.step_cost.fixed_s, resolved.step_cost.per_sample_s) == (0.0, 0.5)
    assert resolved.nominal_step_s(0, 4) == 2.0
    assert resolved.with_step_cost(StepCost(fixed_s=9.0, per_sample_s=9.0)) is resolved  # resolved once
    assert sc.with_workers(3).setting("per_sample_s") == "measured"
    assert resolved.with_workers(3).step_cost == resolved.step_cost
    assert resolved.to_dict()["per_sample_s"] == 0.5 and resolved.source["per_sample_s"] == 0.5


# ------------------------------------------------------------------ target
def _target_scenario(**keys):
    return scenario_from_dict({"workers": 2, "max_steps": 3, **keys})


def test_target_mapping_shorthand_and_default():
    sc = _target_scenario(target={"metric": "perplexity", "value": 40})
    assert (sc.stop.target.metric, sc.stop.target.value, sc.stop.target.direction) == ("perplexity", 40.0, None)
    assert sc.stop.target.accuracy is None
    sc = _target_scenario(target={"metric": "loss", "value": "3e-1", "direction": "min"})
    assert (sc.stop.target.metric, sc.stop.target.value, sc.stop.target.direction) == ("loss", 0.3, "min")
    sc = _target_scenario(target_accuracy=0.93)
    assert (sc.stop.target.metric, sc.stop.target.value, sc.stop.target.direction) == ("accuracy", 0.93, None)
    assert sc.stop.target.accuracy == 0.93
    sc = _target_scenario()
    assert (sc.stop.target.metric, sc.stop.target.value) == ("accuracy", 0.9)
    # to_dict gives the key that sets it, and reads back the same
    target = _target_scenario(target={"metric": "loss", "value": 1}).to_dict()["target"]
    assert target == {"metric": "loss", "value": 1.0}
    assert _target_scenario(target=target).stop.target.metric == "loss"


@pytest.mark.parametrize(
    ("keys", "needle"),
    [
        ({"target": {"metric": "loss", "value": 1}, "target_accuracy": 0.9}, "'target' and 'target_accuracy'"),
        ({"target": {"metric": "loss", "value": 1, "direction": "up"}}, "'target.direction'"),
        ({"target": {"metric": "loss", "value": "low"}}, "'target.value'"),
        ({"target": {"metric": "loss", "value": True}}, "'target.value'"),
        ({"target": {"metric": "loss", "value": float("nan")}}, "'target.value'"),
        ({"target": {"metric": "loss"}}, "'target.value' is required"),
        ({"target": {"value": 1}}, "'target.metric' is required"),
        ({"target": {"metric": 3, "value": 1}}, "'target.metric'"),
        ({"target": {"metric": "loss", "value": 1, "goal": 2}}, "'target.goal'"),
        ({"target": 0.9}, "'target'"),
        ({"target": {"metric": "accuracy", "value": 1.5}}, "'target.value'"),
        ({"target_accuracy": 1.5}, "'target_accuracy'"),
        ({"target_accuracy": "high"}, "'target_accuracy'"),
    ],
)
def test_target_errors_name_the_key(keys, needle):
    with pytest.raises(BadInput, match=needle.replace("(", r"\(")):
        _target_scenario(**keys)


def test_a_target_override_replaces_the_files_target_accuracy():
    sc = load_scenario("default", target={"metric": "loss", "value": 0.3})  # default.yaml has target_accuracy
    assert (sc.stop.target.metric, sc.stop.target.value) == ("loss", 0.3)
    sc = load_scenario("default", target_accuracy=0.5)
    assert (sc.stop.target.metric, sc.stop.target.value) == ("accuracy", 0.5)


def test_target_direction_comes_from_the_workload_unless_given():
    metrics = {"accuracy": "max", "loss": "min"}
    assert _target_scenario(target={"metric": "loss", "value": 1}).stop.target.direction_for("w", metrics) == "min"
    assert _target_scenario().stop.target.direction_for("w", metrics) == "max"
    sc = _target_scenario(target={"metric": "loss", "value": 1, "direction": "max"})
    assert sc.stop.target.direction_for("w", metrics) == "max"
    with pytest.raises(
        BadInput, match=r"^scenario key 'target.metric': workload 'w' reports accuracy, loss; got 'ppl'$"
    ):
        _target_scenario(target={"metric": "ppl", "value": 1}).stop.target.direction_for("w", metrics)
    with pytest.raises(BadInput, match="'target.direction' is required"):
        _target_scenario(target={"metric": "f1", "value": 1}).stop.target.direction_for("w", {"f1": None})


def test_another_worker_count_says_what_it_changed():
    sc = load_scenario("default", workers=3)  # an explicit 8-entry slowdown list
    assert sc.notes == (
        "scenario 'default' has 8 workers, running 3: slowdown keeps its first 3 values and drops "
        "[1.25, 1.5, 2.0, 2.5, 3.0]",
    )
    assert sc.with_workers(4).notes == (*sc.notes, "scenario 'default' has 3 workers, running 4")  # [1, 1, 1]
    assert load_scenario("default", workers=16).notes == (
        "scenario 'default' has 8 workers, running 16: slowdown repeats its 8 values over 16 workers",
    )
    assert load_scenario("p2p-bw", workers=6).notes == (
        "scenario 'p2p-bw' has 16 workers, running 6: link_load drops workers [6, 9, 10, 13, 14]",
    )
    # nothing cut: no change to report but the count; the same count: no note at all
    assert load_scenario("wbsp-h1").with_workers(4).notes == ("scenario 'wbsp-h1' has 8 workers, running 4",)
    assert load_scenario("default").notes == () and load_scenario("default", workers=8).notes == ()
    # a list given with the new size is as written
    assert load_scenario("default", workers=3, slowdown=[1, 2, 3]).notes == (
        "scenario 'default' has 8 workers, running 3",
    )
    # a scenario built in code (no source mapping) says the same
    built = scenario_from_dict({"workers": 4, "max_steps": 1, "slowdown": [1, 1, 1, 4]})
    plain = Scenario(
        name="code",
        cluster=Cluster(workers=4, slowdown=(1, 1, 1, 4), delay_s=(0,) * 4, bandwidth_Bps=(1e9,) * 4),
        stop=StopRule(max_steps=1),
    )
    assert plain.with_workers(3).notes == (
        "scenario 'code' has 4 workers, running 3: slowdown keeps its first 3 values and drops [4]",
    )
    assert "notes" not in built.to_dict()


def test_notes_are_not_a_scenario_key():
    with pytest.raises(BadInput, match="unknown scenario key 'notes'"):
        scenario_from_dict({"workers": 2, "max_steps": 1, "notes": ["x"]})


@pytest.mark.parametrize(
    "key, value, needle",
    [
        ("lr", float("inf"), "'lr' must be a finite number in (0, 1000]"),
        ("lr", float("nan"), "'lr'"),
        ("jitter", 1e300, "'jitter' must be a finite number in [0, 10]"),
        ("latency_s", float("inf"), "'latency_s'"),
        ("straggler_factor", float("inf"), "'straggler_factor'"),
        ("fixed_s", float("inf"), "'fixed_s'"),
        ("slowdown", float("inf"), "'slowdown[0]'"),
        ("delay_s", [0, float("nan")], "'delay_s[1]'"),
        ("bandwidth_Bps", 1e-300, "'bandwidth_Bps[0]' must be a number in [1, inf]"),
        ("server_bandwidth_Bps", float("nan"), "'server_bandwidth_Bps'"),
        ("saturation_batch", float("inf"), "'saturation_batch[0]' must be a whole number"),
        ("max_batch", 10**7, "'max_batch[0]'"),
        ("workers", 10**12, "'workers' must be in 1..10000"),
        ("batch_size", 10**12, "'batch_size' must be in 1..1000000"),
        ("seed", -1, "'seed' must be in 0..4294967295"),
        ("seed", 2**32, "'seed'"),
        ("model_bytes", 10**29, "'model_bytes'"),
        ("max_steps", 10**12, "'max_steps'"),
        ("max_time_s", 1e300, "'max_time_s'"),
        ("eval_every_s", 1e-9, "'eval_every_s'"),
        ("slowdown", {"linspace": ["a", "b"]}, "'slowdown.linspace[0]' must be a finite number, got 'a'"),
        ("slowdown", {"uniform": [1, float("inf")]}, "'slowdown.uniform[1]'"),
        ("background_load", {"period_s": float("inf"), "on_s": 1, "factor": 2}, "'background_load.period_s'"),
        ("link_load", {"period_s": 2, "on_s": 1, "factor": 1e300}, "'link_load.factor'"),
    ],
)
def test_values_out_of_their_range_are_errors_naming_the_key(key, value, needle):
    with pytest.raises(BadInput) as err:
        scenario_from_dict({"workers": 2, "max_time_s": 10, key: value})
    assert needle in str(err.value)


def test_evaluations_per_run_are_bounded():
    assert scenario_from_dict({"workers": 2, "max_time_s": 100, "eval_every_s": 0.001}).stop.eval_every_s == 0.001
    with pytest.raises(BadInput, match=r"'eval_every_s' must be >= max_time_s / 100000 = 0\.01"):
        scenario_from_dict({"workers": 2, "max_time_s": 1000, "eval_every_s": 0.001})


def test_bounds_leave_every_builtin_and_its_large_settings_alone():
    from hetsync.scenario import builtin_scenarios

    for name in builtin_scenarios():
        sc = load_scenario(name)
        assert sc.with_workers(10_240).cluster.workers == 10_240  # the size a 10k-worker study needs
    sc = load_scenario("default", workers=100_000, batch_size=1_000_000, seed=2**32 - 1, model_bytes=10**13)
    assert (sc.cluster.workers, sc.job.batch_size, sc.job.seed, sc.job.model_bytes) == (
        100_000,
        1_000_000,
        2**32 - 1,
        10**13,
    )
    with pytest.raises(BadInput, match=r"cannot run with 100001 workers \(1\.\.100000\)"):
        load_scenario("default").with_workers(100_001)


# ------------------------------------------------------------------ sections
def test_flat_keys_land_in_their_sections():
    from hetsync.scenario import Job, StepCost, Target, Timing

    sc = scenario_from_dict(
        {
            "name": "s",
            "workers": 3,
            "slowdown": [1, 2, 3],
            "latency_s": 0.001,
            "server_s_per_message": 0.0002,
            "workload": "digits-logreg",
            "batch_size": 8,
            "lr": 0.05,
            "seed": 7,
            "model_bytes": 1000,
            "policies": ["bsp"],
            "max_time_s": 5,
            "eval_every_s": 0.5,
            "target": {"metric": "loss", "value": 0.3, "direction": "min"},
            "device": "gpu",
            "fixed_s": 0.01,
            "per_sample_s": 0.002,
            "jitter": 0.1,
            "runtime_timing": "modelled",
        }
    )
    assert sc.cluster == Cluster(
        workers=3,
        slowdown=(1.0, 2.0, 3.0),
        delay_s=(0.0,) * 3,
        bandwidth_Bps=(float("inf"),) * 3,
        latency_s=0.001,
        server_s_per_message=0.0002,
    )
    assert sc.job == Job(workload="digits-logreg", batch_size=8, lr=0.05, seed=7, model_bytes=1000, policies=("bsp",))
    assert sc.stop == StopRule(
        target=Target(metric="loss", value=0.3, direction="min"), max_time_s=5.0, eval_every_s=0.5
    )
    assert sc.timing == Timing(
        device="gpu", step=StepCost(fixed_s=0.01, per_sample_s=0.002), jitter=0.1, runtime_timing="modelled"
    )
    # and back: the flat keys, as a file writes them
    flat = sc.to_dict()
    assert (flat["workers"], flat["batch_size"], flat["max_time_s"], flat["per_sample_s"]) == (3, 8, 5.0, 0.002)
    assert flat["target"] == {"metric": "loss", "value": 0.3, "direction": "min"}
    assert not {"cluster", "job", "stop", "timing", "step", "source", "notes"} & flat.keys()
    assert all(sc.setting(k) == v for k, v in flat.items() if not isinstance(v, (dict, list)))
    assert sc.setting("target") == sc.stop.target and sc.setting("optimizer") == sc.job.optimizer


@pytest.mark.parametrize(
    "build, needle",
    [
        (lambda: Cluster(workers=0), "'workers' must be in 1..10000"),
        (lambda: Cluster(workers=2, slowdown=(1.0,), delay_s=(0, 0), bandwidth_Bps=(1, 1)), "'slowdown' must have one"),
        (lambda: Cluster(workers=1, slowdown=(1.0,), delay_s=(0,), bandwidth_Bps=(1,), latency_s=-1), "'latency_s'"),
        (lambda: StopRule(), "'max_time_s' or max_steps must be set"),
        (lambda: StopRule(max_steps=0), "'max_steps'"),
    ],
)
def test_sections_built_in_code_check_their_values_naming_the_yaml_key(build, needle):
    with pytest.raises(BadInput, match=needle.replace("(", r"\(")):
        build()


@pytest.mark.parametrize(
    "build, needle",
    [
        ("Job(batch_size=0)", "'batch_size'"),
        ("Job(p2p_mixing='mean')", "'p2p_mixing'"),
        ("Job(policies=('nope',))", "nope"),
        ("Target(value=2.0)", "'target.value' must be in (0, 1] for accuracy"),
        ("Target(metric='loss', value=1, direction='up')", "'target.direction'"),
        ("Timing(device='tpu')", "'device'"),
        ("Timing(straggler_prob=2)", "'straggler_prob'"),
        ("StepCost(fixed_s=-1, per_sample_s=0)", "'fixed_s'"),
        ("StepCost(fixed_s=0, per_sample_s=float('inf'))", "'per_sample_s'"),
        ("StepToMeasure(fixed_s=1.0, per_sample_s=1.0)", "figures for both are a StepCost"),
    ],
)
def test_more_sections_check_their_values_naming_the_yaml_key(build, needle):
    from hetsync import scenario as module

    with pytest.raises(BadInput, match=needle.replace("(", r"\(")):
        eval(build, vars(module))


def test_with_workers_changes_the_cluster_alone():
    import dataclasses

    sc = load_scenario("hetero-4")
    seeded = dataclasses.replace(sc, job=dataclasses.replace(sc.job, seed=5))
    fitted = seeded.with_workers(2)
    assert (fitted.job, fitted.stop, fitted.timing) == (seeded.job, seeded.stop, seeded.timing)
    assert fitted.cluster.workers == 2 and len(fitted.cluster.slowdown) == 2


_FLAT = st.fixed_dictionaries(
    {"workers": st.integers(1, 6), "max_steps": st.integers(1, 10_000)},
    optional={
        "slowdown": st.floats(0.1, 10),
        "delay_s": st.lists(st.floats(0, 5), min_size=6, max_size=6),
        "bandwidth_Bps": st.floats(1e6, 1e10),
        "latency_s": st.floats(0, 0.1),
        "server_s_per_message": st.floats(0, 0.01),
        "control_latency": st.booleans(),
        "batch_size": st.integers(1, 512),
        "lr": st.floats(1e-4, 1),
        "seed": st.integers(0, 2**32 - 1),
        "label_skew": st.floats(0, 1),
        "model_bytes": st.integers(0, 10**9),
        "policies": st.lists(st.sampled_from(["bsp", "asp", "ssp:s=2"]), min_size=1, max_size=3),
        "max_time_s": st.floats(1, 1000),
        "target_accuracy": st.floats(0.01, 1),
        "device": st.sampled_from(["cpu", "gpu"]),
        "fixed_s": st.one_of(st.floats(0, 1), st.just("measured")),
        "per_sample_s": st.one_of(st.floats(0, 1), st.just("measured")),
        "jitter": st.floats(0, 1),
        "straggler_prob": st.floats(0, 1),
        "straggler_factor": st.floats(1, 10),
        "runtime_timing": st.sampled_from(["real", "modelled"]),
    },
)
# what to_dict writes in another shape than a file gives it (the recipe's defaults in full, a load's phases)
_NOT_ROUND_TRIPPED = ("optimizer", "outer_optimizer", "schedule", "local_optimizer", "background_load", "link_load")


@hypothesis.given(raw=_FLAT)
@hypothesis.settings(max_examples=60, deadline=None)
def test_flat_keys_to_sections_and_back_round_trip(raw):
    if isinstance(raw.get("delay_s"), list):
        raw["delay_s"] = raw["delay_s"][: raw["workers"]]
    sc = scenario_from_dict(raw)
    flat = {k: v for k, v in sc.to_dict().items() if k not in _NOT_ROUND_TRIPPED}
    again = scenario_from_dict(flat)
    assert again == sc
    for key, value in raw.items():
        if key == "target_accuracy":
            assert sc.stop.target.accuracy == value
        elif key == "policies":
            assert sc.job.policies == tuple(value)
        elif isinstance(value, list) or key in ("slowdown", "bandwidth_Bps"):
            expected = value if isinstance(value, list) else [value] * raw["workers"]
            assert list(sc.setting(key)) == expected
        else:
            assert sc.setting(key) == value and flat[key] == value


def test_a_load_with_phase_s_switches_on_at_a_chosen_time_for_good():
    # on while (t + phase) mod period < on_s: phase_s = on_s = P - T turns it on at T, until P
    load = {"workers": [1], "period_s": 1000, "on_s": 1000 - 3.5, "factor": 4, "phase_s": 1000 - 3.5}
    sc = scenario_from_dict({"name": "x", "workers": 2, "max_time_s": 10, "link_load": load})
    assert sc.cluster.link_load is not None
    assert [sc.cluster.link_load.factor_at(1, t) for t in (0.0, 3.4, 3.5, 9.9)] == [1.0, 1.0, 4.0, 4.0]
    assert sc.cluster.link_load.factor_at(0, 5.0) == 1.0
    with pytest.raises(BadInput, match="link_load.phase_s"):
        scenario_from_dict({"name": "x", "workers": 2, "max_time_s": 10, "link_load": {**load, "phase_s": 1000}})


def test_membership_entries_read_as_absences():
    sc = scenario_from_dict(
        {
            "workers": 3,
            "max_steps": 1,
            "membership": [
                {"worker": 1, "leave_s": 1, "join_s": 2.5},
                {"worker": 1, "leave_s": 4},
                {"worker": 2, "join_s": 0.5},
            ],
        }
    )
    a, b, c = sc.cluster.membership
    assert (a.worker, a.leave_s, a.join_s) == (1, 1.0, 2.5)
    assert (b.start_s, b.end_s) == (4.0, float("inf"))  # leaves for good
    assert (c.start_s, c.end_s) == (0.0, 0.5)  # absent at the start
    assert sc.to_dict()["membership"][1] == {"worker": 1, "leave_s": 4.0}
    assert [x.worker for x in sc.with_workers(2).cluster.membership] == [1, 1]  # worker 2 is not in 2 workers


@pytest.mark.parametrize(
    ("entries", "key", "why"),
    [
        ("w1", "'membership'", "must be a list"),
        ([{"worker": 3, "join_s": 1}], "'membership[0].worker'", "0..2"),
        ([{"worker": -1, "join_s": 1}], "'membership[0].worker'", ">= 0"),
        ([{"worker": "a", "join_s": 1}], "'membership[0].worker'", "integer"),
        ([{"leave_s": 1}], "'membership[0].worker'", "required"),
        ([{"worker": 0}], "'membership[0]'", "needs leave_s, join_s or both"),
        ([{"worker": 0, "leave_s": -1}], "'membership[0].leave_s'", r"\[0, "),
        ([{"worker": 0, "join_s": "soon"}], "'membership[0].join_s'", "finite number"),
        ([{"worker": 0, "leave_s": 2, "join_s": 2}], "'membership[0].join_s'", "after leave_s"),
        ([{"worker": 0, "leave_s": 1, "again": 2}], "'membership[0].again'", "unknown"),
        ([{"worker": 0, "leave_s": 1, "join_s": 3}, {"worker": 0, "leave_s": 2}], "'membership[1]'", "overlaps"),
        ([{"worker": 0, "leave_s": 1}, {"worker": 0, "leave_s": 5, "join_s": 6}], "'membership[1]'", "overlaps"),
        ([{"worker": 0, "join_s": 1}, {"worker": 0, "join_s": 3}], "'membership", "absent a second time"),
    ],
)
def test_bad_membership_entries_are_refused_naming_the_key(entries, key, why):
    with pytest.raises(BadInput, match=re.escape(key)) as e:
        scenario_from_dict({"workers": 3, "max_steps": 1, "membership": entries})
    assert e.match(why)
