"""hetsync.advise.loop_profile without processes: the settings a profiling run
reads from its environment, and the optimizer wrapper that times the loop."""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn

from hetsync.advise.loop_profile import WARMUP_ROUNDS, ProfileSettings, ProfilingOptimizer, step_sizes
from hetsync.errors import BadInput
from hetsync.scenario import load_scenario


def test_settings_round_trip_through_the_environment():
    s = ProfileSettings(
        out="runs/p", compute_s=2.5, link_reps=3, batch_sizes=(8, 16), emulate="hetero-4", workload="mine:workload"
    )
    assert ProfileSettings.from_env(s.to_env()) == s
    assert ProfileSettings.from_env('{"out": "x"}') == ProfileSettings(out="x")


@pytest.mark.parametrize(
    "text,needle",
    [
        ("not json", "JSON object"),
        ("[1, 2]", "JSON object"),
        ('{"compute_s": 3}', "'out'"),
        ('{"out": "x", "compute_s": 0}', "compute_s"),
        ('{"out": "x", "link_reps": 500}', "link_reps"),
        ('{"out": "x", "batch_sizes": [0, 8]}', "batch_sizes"),
        ('{"out": "x", "seconds": 3}', "unknown key 'seconds'"),
        ('{"out": "x", "workload": "digits-mlp"}', "'workload' must be module:function"),
    ],
)
def test_bad_settings_name_the_key(text, needle):
    with pytest.raises(BadInput, match=needle):
        ProfileSettings.from_env(text)


def test_default_sizes_are_around_the_scenarios_batch():
    sc = load_scenario("hetero-4")
    sizes = step_sizes(ProfileSettings(out="x"), sc)
    assert sc.job.batch_size in sizes and min(sizes) < sc.job.batch_size < max(sizes)
    assert step_sizes(ProfileSettings(out="x", batch_sizes=(32, 8, 8)), sc) == [8, 32]


def test_the_wrapper_steps_the_users_optimizer_cycles_sizes_and_times_each_step():
    model = nn.Linear(4, 2)
    inner = torch.optim.AdamW(model.parameters(), lr=0.1)
    opt = ProfilingOptimizer(inner, 0, [8, 16, 32], compute_s=60.0, timing=None)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)  # schedulers work on the wrapper
    before = model.weight.detach().clone()
    seen = []
    for _ in range(WARMUP_ROUNDS * 3 + 6):
        seen.append(opt.batch_size)
        model(torch.randn(opt.batch_size, 4)).sum().backward()
        time.sleep(0.002)
        opt.step()
        opt.zero_grad()
        sched.step()
    assert seen[:6] == [8, 16, 32, 8, 16, 32]
    assert not torch.equal(before, model.weight)  # the user's optimizer took the steps
    assert inner.param_groups[0]["lr"] < 0.1  # and the schedule reached it
    rows = opt.records()
    assert len(rows) == 6  # the warm-up rounds are not timed
    assert [r[1] for r in rows] == [8, 16, 32, 8, 16, 32]
    assert all(r[2] >= 0.002 and r[3] <= r[2] for r in rows)  # each step covers the loop's own work
    assert [r[0] for r in rows] == sorted(r[0] for r in rows)


def test_done_after_compute_s_and_further_steps_are_not_timed():
    model = nn.Linear(2, 1)
    opt = ProfilingOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), 0, [4], compute_s=0.01, timing=None)
    while not opt.done:
        opt.step()
    n = len(opt.records())
    opt.step()
    assert len(opt.records()) == n


def test_workers_whose_loop_ended_before_the_profile_time_are_named():
    from hetsync.advise.profile import loops_ended_early

    raw = {
        "per_rank": [
            {"rank": 0, "compute": {}},
            {"rank": 1, "compute": {"timed_out": True, "loop_s": 6.0}},
            {"rank": 2, "compute": {"timed_out": False, "loop_s": 2.5}},
        ]
    }
    assert loops_ended_early(raw) == [(1, 2.5)]
    assert loops_ended_early({"per_rank": [{"rank": 1, "compute": {"steps": []}}]}) == []  # the built-in job


def test_the_profile_plays_the_scripts_own_scenario_unless_emulate_names_another(tmp_path):
    """``profile --script`` times the loop as ``hetsync launch`` runs it: the
    scenario the script passes to hetsync.init is emulated (its delays,
    noise, links); ``--emulate`` plays another cluster, mapped to the run's
    worker count; a script that names no scenario runs as it is."""
    from hetsync.advise.loop_profile import Profiler
    from hetsync.loop import _scenario

    script = _scenario("hetero-4", 3, {"batch_size": 32})  # examples/own_loop_cnn.py's, on 3 workers
    own = Profiler(1, script, ProfileSettings(out=str(tmp_path)), tmp_path).emulated
    assert own is not None and own.cluster.delay_s == pytest.approx((0.01, 0.025, 0.04))  # hetero-4's delays, for 3
    other = Profiler(1, script, ProfileSettings(out=str(tmp_path), emulate="slow-links-4"), tmp_path).emulated
    assert other is not None and other.name == "slow-links-4" and other.cluster.workers == 3
    bare = _scenario(None, 3, {})
    assert Profiler(1, bare, ProfileSettings(out=str(tmp_path)), tmp_path).emulated is None


def test_the_users_optimizer_becomes_the_simulators_for_the_users_model():
    from hetsync.advise.loop_profile import optimizer_keys
    from hetsync.recipe import parse_optimizer

    model = nn.Linear(2, 2)
    adamw = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    torch.optim.lr_scheduler.LambdaLR(adamw, lambda s: 0.1)  # a warm-up: the base rate is what counts
    keys = optimizer_keys(adamw)
    assert keys == {
        "lr": 3e-3,
        "optimizer": {"name": "adamw", "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01},
    }
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
    assert optimizer_keys(sgd) == {"lr": 0.1, "optimizer": {"name": "sgd", "momentum": 0.9, "nesterov": True}}
    for keys in (optimizer_keys(adamw), optimizer_keys(sgd)):
        parse_optimizer("optimizer", keys["optimizer"])  # a scenario takes them as they are
    assert optimizer_keys(torch.optim.Adagrad(model.parameters())) is None  # not one a scenario names
