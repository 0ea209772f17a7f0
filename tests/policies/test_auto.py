"""auto: the ranking's pure functions, and switching with scripted events (no driver)."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from hetsync.errors import BadInput
from hetsync.policies.auto import (
    Auto,
    cluster_changed,
    fixed_share,
    gain_quantile,
    predicted_rates,
    rates_of,
    round_overhead_s,
    round_times,
    slowest_counts,
    smoothed,
    switch_moves,
)
from hetsync.policies.base import (
    Apply,
    Compute,
    ComputeDone,
    Drop,
    Forecast,
    ForecastDone,
    Note,
    Pull,
    PushArrived,
    WorkerLeft,
)
from hetsync.report.switches import run_switches
from tests.policies.helpers import ctx

_ids = itertools.count(1000)


def test_a_switch_names_the_workers_whose_smoothed_step_time_moved_largest_change_first():
    assert smoothed(np.array([1.0, 1.0, 2.0])) == pytest.approx(1.3)  # the newest step weighs 0.3
    before = {0: 1.0, 1: 1.0, 2: 1.0, 3: 2.0}
    now = {0: 1.05, 1: 3.0, 2: 0.5, 4: 9.0}  # 0 within 10%; 3 left and 4 joined: not compared
    assert switch_moves(before, now) == [
        {"w": 1, "from_s": 1.0, "to_s": 3.0},
        {"w": 2, "from_s": 1.0, "to_s": 0.5},
    ]
    assert switch_moves(before, before) == []


def test_the_slowest_of_each_replayed_round_is_counted_most_first():
    rounds = np.array([[1.0, 5.0, 1.0, 1.0], [3.0, 1.0, 3.0, 3.0], [2.0, 2.0, 2.0, 2.0]])  # workers 4, 7, 9
    assert slowest_counts([4, 7, 9], rounds) == [{"w": 7, "rounds": 3}, {"w": 4, "rounds": 1}]


def test_a_fitted_fixed_share_is_the_intercepts_share_at_the_common_batch():
    batches = np.array([8, 16, 32])
    assert fixed_share(batches, 0.02 + 0.001 * batches, 16) == pytest.approx(0.02 / (0.02 + 0.016))
    assert fixed_share(np.array([16, 16, 17]), np.array([0.1, 0.1, 0.1]), 16) is None  # batches too alike to tell
    assert fixed_share(batches, 0.04 + 0.0 * batches, 16) == 0.95  # all fixed: capped (LB-BSP needs a batch to move)


def test_backup_is_ranked_as_it_runs_once_workers_have_left_it_no_more_than_b():
    """Backup closes a round with at least one gradient: two workers left of
    three, b = 2, it waits for the faster one (a live run under backup whose
    other workers' loops had ended ranked it and found no backup rate)."""
    steps = np.array([[1.0, 3.0], [2.0, 1.0]])
    samples, times = round_times(steps, np.zeros(2), 8, b=2)["backup"]
    assert samples == 8 and list(times) == [1.0, 1.0]


def test_rates_rank_lb_bsp_first_for_a_slow_worker_whose_time_grows_with_its_batch():
    steps = np.array([[1.0] * 4, [1.0] * 4, [3.0] * 4])  # worker 2 three times slower, every round
    rates = predicted_rates(steps, np.zeros(3), batch_size=8, b=1)
    assert rates["lb-bsp"] == pytest.approx(3 * 8 / (3 / (1 + 1 + 1 / 3)))  # an equal finish: Σ speeds
    assert rates["lb-bsp"] > rates["backup"] > rates["bsp"]
    # the same slow worker, its step all fixed cost (injected delays): LB-BSP can move nothing
    fixed = predicted_rates(steps, np.array([0.0, 0.0, 0.95]), batch_size=8, b=1)
    assert fixed["lb-bsp"] < 1.1 * fixed["bsp"]
    # homogeneous: nothing beats BSP
    even = predicted_rates(np.ones((3, 4)), np.zeros(3), batch_size=8, b=1)
    assert even["lb-bsp"] == pytest.approx(even["bsp"]) and even["backup"] < even["bsp"]


def _two_stragglers(workers: int, rounds: int) -> np.ndarray:
    """Step times (workers x rounds) with two workers three times slower each round, a different pair each time."""
    steps = np.ones((workers, rounds))
    for r in range(rounds):
        steps[[r % workers, (r + 1) % workers], r] = 3.0
    return steps


def test_local_sgd_is_ranked_first_when_the_slow_steps_move_from_worker_to_worker():
    steps = _two_stragglers(4, 8)  # every worker is slow in two of each four steps
    rates = predicted_rates(steps, np.zeros(4), batch_size=8, b=1, h=4)
    # BSP waits 3 a round for 4 batches; local SGD 8 (a worker's 4 steps: 1+1+3+3) for 16 batches
    assert rates["bsp"] == pytest.approx(4 * 8 / 3) and rates["local-sgd"] == pytest.approx(16 * 8 / 8)
    assert rates["lb-bsp"] == pytest.approx(rates["bsp"])  # equal means: nothing to balance
    assert rates["backup"] == pytest.approx(3 * 8 / 3)  # the third to finish is a slow one
    assert max(rates, key=lambda k: rates[k]) == "local-sgd"
    # the same steps, the slow one always worker 3: local SGD waits for it as BSP does, LB-BSP wins
    slow = np.ones((4, 8))
    slow[3] = 3.0
    rates = predicted_rates(slow, np.zeros(4), batch_size=8, b=1, h=4)
    assert rates["local-sgd"] == pytest.approx(rates["bsp"]) and max(rates, key=lambda k: rates[k]) == "lb-bsp"
    # without h there is no local SGD to rank
    assert "local-sgd" not in predicted_rates(steps, np.zeros(4), batch_size=8, b=1)


def test_a_rounds_overhead_is_paid_once_per_round_so_it_favours_local_sgd_as_transfers_grow():
    steps = np.ones((4, 8))  # equal workers: by steps alone local SGD gains nothing
    bare = predicted_rates(steps, np.zeros(4), batch_size=8, b=1, h=4)
    assert bare["local-sgd"] == pytest.approx(bare["bsp"])
    # 1 s of transfers and server a round: BSP's round 2 s for 4 batches, local SGD's 4 + 1 s for 16
    costly = predicted_rates(steps, np.zeros(4), batch_size=8, b=1, h=4, overhead_s=1.0)
    assert costly["bsp"] == pytest.approx(4 * 8 / 2) and costly["local-sgd"] == pytest.approx(16 * 8 / 5)
    assert max(costly, key=lambda k: costly[k]) == "local-sgd"
    # the overhead a round measured: its time less its busiest worker's steps; none from a late backup step
    assert round_overhead_s(0.5, np.array([0.1, 0.3, 0.2])) == pytest.approx(0.2)
    assert round_overhead_s(0.5, np.array([0.1, 0.7])) is None
    assert round_overhead_s(0.5, np.array([])) is None


def test_auto_measures_the_rounds_overhead_from_its_events():
    policy = Auto(ctx(workers=2, batch_size=8), candidates="bsp+local-sgd", window=4, h=2)
    policy.start(0.0)
    t = 0.0
    for r in range(6):  # BSP's rounds: steps of 0.1 and 0.2 s, each round closing 0.35 s after the last
        for w, step_s in ((0, 0.1), (1, 0.2)):
            policy.on_event(_step(w, t + step_s, 8, step_s))
        for w in (0, 1):
            policy.on_event(_push(w, t + 0.35, 8, base=r))
        t += 0.35
    assert policy.overhead_s() == pytest.approx(0.15)


def test_local_sgd_replays_whole_rounds_of_h_steps_and_the_others_the_same_steps():
    steps = np.vstack([np.arange(1.0, 11.0), np.full(10, 4.0)])  # 10 steps: the newest 8 make two rounds of 4
    times = round_times(steps, np.zeros(2), batch_size=8, b=1, h=4)
    samples, local = times["local-sgd"]
    assert samples == 2 * 8 * 4 and list(local) == [3 + 4 + 5 + 6, 7 + 8 + 9 + 10]
    assert list(times["bsp"][1]) == [4, 4, 5, 6, 7, 8, 9, 10]  # the oldest two steps left out for every candidate
    with pytest.raises(ValueError, match="no round"):
        round_times(steps[:, :3], np.zeros(2), batch_size=8, b=1, h=4)


def test_the_bootstrap_guard_pairs_local_sgd_s_rounds_with_the_others_rounds_over_the_same_steps():
    rng = np.random.default_rng(0)
    times = round_times(_two_stragglers(4, 20), np.zeros(4), batch_size=8, b=1, h=4)
    # every block of four steps alike: each draw shows local SGD's gain, exactly 2 / (4 / 3)
    assert gain_quantile(times["bsp"], times["local-sgd"], 0.1, rng) == pytest.approx(1.5)
    assert gain_quantile(times["local-sgd"], times["bsp"], 0.9, rng) == pytest.approx(1 / 1.5)
    # noise alone: local SGD's gain over BSP in the window's draws straddles the margin, so no switch is sure
    noisy = 1.0 + 0.05 * rng.standard_normal((4, 20))
    times = round_times(noisy, np.zeros(4), batch_size=8, b=1, h=4)
    assert 1.0 < gain_quantile(times["bsp"], times["local-sgd"], 0.1, rng) < 1.1


def _step(w: int, t: float, batch: int, seconds: float) -> ComputeDone:
    return ComputeDone(now_s=t, worker=w, step=0, batch_size=batch, base_version=0, duration_s=seconds)


def _push(w: int, t: float, batch: int, base: int = 0) -> PushArrived:
    return PushArrived(now_s=t, worker=w, push_id=next(_ids), kind="grad", base_version=base, steps=1, samples=batch)


def _round(p: Auto, t: float, batches: dict[int, int], seconds: dict[int, float]) -> list:
    """Every worker's step and push, the slowest last; the commands of the round's close."""
    out = []
    for w in sorted(batches, key=lambda w: seconds[w]):
        out += p.on_event(_step(w, t, batches[w], seconds[w]))
        out += p.on_event(_push(w, t, batches[w]))
    return out


def test_a_worker_that_turns_slow_makes_it_switch_from_bsp_to_lb_bsp_at_a_round_close():
    p = Auto(ctx(3, batch_size=8), window=3)
    said, *first = p.start(0.0)
    # BSP's steps, a pair of workers probing a second batch size (the global batch kept: _probe)
    assert [(c.worker, c.push) for c in first] == [(w, "grad") for w in range(3)]
    assert sorted(c.batch_size for c in first) == [7, 8, 9]
    # what it chooses among and by what, said at the start (a user's loop is told so: its report's heading)
    assert isinstance(said, Note) and said.what == "candidates"
    assert said.detail["candidates"] == ["bsp", "lb-bsp", "backup"] and "samples a second" in said.detail["by"]
    for r in range(3):  # homogeneous: stays
        cmds = _round(p, float(r), dict.fromkeys(range(3), 8), dict.fromkeys(range(3), 1.0))
        assert isinstance(cmds[0], Apply) and sum(c.then.batch_size for c in cmds[1:]) == 24
    assert p.current == "bsp" and not p.switches
    for r in range(3, 6):  # worker 2's steps take 3x longer (its time per sample)
        cmds = _round(p, float(r), dict.fromkeys(range(3), 8), {0: 1.0, 1: 1.0, 2: 3.0})
    assert p.current == "lb-bsp" and [(s["from"], s["to"]) for s in p.switches] == [("bsp", "lb-bsp")]
    # the round's Apply stands, and every worker pulls into LB-BSP's first step (an equal split: it learns)
    assert isinstance(cmds[0], Apply) and len(cmds[0].contributions) == 3
    assert [c.worker for c in cmds[1:]] == [0, 1, 2] and all(isinstance(c, Pull) for c in cmds[1:])
    assert sum(c.then.batch_size for c in cmds[1:]) == 24
    assert p.version == 6


def test_held_on_its_start_it_ranks_only_once_the_cluster_changes():
    # the case above (worker 2 slow from the start: LB-BSP's) with keep_start=until-change: the advice the
    # start came from weighed convergence, which the measured ranking cannot, so BSP stands while nothing moves
    p = Auto(ctx(3, batch_size=8), window=3, candidates="bsp+lb-bsp", keep_start="until-change")
    said, *_ = p.start(0.0)
    assert said.detail["held"] == "on the start until the cluster changes"
    for r in range(12):
        _round(p, float(r), dict.fromkeys(range(3), 8), {0: 1.0, 1: 1.0, 2: 3.0})
    assert p.current == "bsp" and not p.switches
    for r in range(12, 18):  # worker 1 turns slow too: the cluster changed, it ranks as usual
        _round(p, float(r), dict.fromkeys(range(3), 8), {0: 1.0, 1: 3.0, 2: 3.0})
    assert [(s["from"], s["to"]) for s in p.switches] == [("bsp", "lb-bsp")]
    assert p.switches[0]["moved"][0]["w"] == 1 and not p.held


def test_a_change_is_a_moved_step_time_a_moved_round_overhead_or_other_live_workers():
    ref = {0: 1.0, 1: 1.0}
    same = {0: np.array([1.0, 1.02, 0.98]), 1: np.array([1.0, 1.0, 1.0])}
    assert not cluster_changed(ref, same, 0.2, 0.21)
    assert not cluster_changed(ref, {**same, 1: np.array([1.2, 0.9, 1.2])}, 0.2, 0.2)  # within the noise
    assert cluster_changed(ref, {**same, 1: np.array([1.0, 2.0, 2.0])}, 0.2, 0.2)  # a step time
    assert cluster_changed(ref, same, 0.2, 0.6)  # the transfers (a link): 0.4 s more on a 1.2-s round
    assert not cluster_changed(ref, same, 0.002, 0.004)  # twice as long, but 2 ms: not a change of the round
    assert not cluster_changed(ref, same, 0.2, 0.6, steps_per_round=8)  # local SGD's round: 8 steps and 0.2 s
    assert cluster_changed(ref, {0: same[0]}, 0.2, 0.2)  # a worker left


def test_a_switch_from_lb_bsp_lists_the_fitted_fixed_shares_that_made_it():
    p = Auto(ctx(3, batch_size=8), window=3)
    p.start(0.0)
    batches = dict.fromkeys(range(3), 8)
    for r in range(12):  # worker 2: 3x per sample (LB-BSP's case), then a delay that no batch changes
        slow = 3.0 * batches[2] / 8 if r < 6 else 3.0
        cmds = _round(p, float(r), batches, {0: batches[0] / 8, 1: batches[1] / 8, 2: slow})
        batches = {c.worker: c.then.batch_size for c in cmds if isinstance(c, Pull)} or batches
    first, second = p.switches
    assert (first["from"], first["to"], first["fixed"]) == ("bsp", "lb-bsp", [])  # one batch size: nothing fitted
    assert first["since_s"] == first["t"] and first["moved"] == []  # it switched on its first full window
    assert (second["from"], second["to"]) == ("lb-bsp", "backup")
    assert second["fixed"] == [{"w": 2, "share": 0.95}]  # all fixed cost (capped); the others' shares are 0
    assert second["slowest"] == [{"w": 2, "rounds": 3}] and second["gain"] > 1.1


def _backup_until_switch(p: Auto, to: str, rounds: int) -> list:
    """Backup's rounds of 3 workers, worker 2 always late (its push arrives after the round closed
    and is dropped as late), until ``p`` switches ``to``; the commands of the round that switched."""
    cmds: list = []
    for r in range(rounds):
        for w in (0, 1):
            p.on_event(_step(w, float(r), 8, 1.0))
            cmds = p.on_event(_push(w, float(r), 8, base=r))
        if p.current == to:
            break
        p.on_event(_step(2, float(r), 8, 1.05))
        late = p.on_event(_push(2, float(r), 8, base=r))
        assert isinstance(late[0], Drop) and late[0].reason == "late"
    return cmds


def test_a_worker_still_computing_for_backup_has_its_push_dropped_and_starts_the_new_policy():
    p = Auto(ctx(3, batch_size=8), start="backup", candidates="bsp+backup", window=2, margin=0.0)
    p.start(0.0)
    cmds = _backup_until_switch(p, "bsp", rounds=3)
    assert p.current == "bsp"  # near-equal workers: BSP applies 3 batches a round, backup 2
    assert [c.worker for c in cmds if isinstance(c, Pull)] == [0, 1] and 2 in p.draining
    # worker 2's step for backup: dropped on arrival, then it pulls into BSP's first step
    assert p.on_event(_step(2, 9.0, 8, 1.0)) == []
    push = _push(2, 9.0, 8, base=0)
    drop, pull = p.on_event(push)
    assert drop == Drop(push_ids=(push.push_id,), reason="policy switch")
    assert pull == Pull(worker=2, then=Compute(worker=2, batch_size=8, push="grad"))
    # BSP's first round then closes with the three
    out = []
    for w in range(3):
        out += p.on_event(_push(w, 10.0, 8, base=p.version))
    assert isinstance(out[0], Apply) and len(out[0].contributions) == 3


def test_a_worker_that_left_is_neither_sized_nor_pulled_by_the_next_policy():
    p = Auto(ctx(3, batch_size=8), window=2)
    p.start(0.0)
    assert p.on_event(WorkerLeft(now_s=0.5, worker=1)) == []
    for r in range(4):
        cmds = _round(p, float(r), {0: 8, 2: 8}, {0: 1.0, 2: 3.0})
        if p.switches:
            break
    assert p.current == "lb-bsp"
    pulls = [c for c in cmds if isinstance(c, Pull)]
    # LB-BSP keeps its global batch (N x 8) and splits it among the live ones
    assert [c.worker for c in pulls] == [0, 2] and sum(c.then.batch_size for c in pulls) == 24


def _local_round(p: Auto, t: float, seconds: dict[int, float], h: int) -> tuple[list, list]:
    """Every worker's H local steps and its delta push, the slowest last: the
    steps the policy gave on the way, and the commands of the round's close."""
    given, out = [], []
    for w in sorted(seconds, key=lambda w: seconds[w]):
        for i in range(h):
            done = ComputeDone(now_s=t, worker=w, step=i, batch_size=8, base_version=p.version, duration_s=seconds[w])
            given += p.on_event(done)
        delta = PushArrived(
            now_s=t, worker=w, push_id=next(_ids), kind="delta", base_version=p.version, steps=h, samples=8 * h
        )
        out = p.on_event(delta)
    return given, out


def test_it_switches_to_local_sgd_and_back_each_at_a_round_close_with_every_worker_handed_over():
    p = Auto(ctx(4, batch_size=8, lr=0.1), candidates="bsp+lb-bsp+local-sgd", window=8, h=4)
    p.start(0.0)
    slow = _two_stragglers(4, 8)  # a different pair slow each round: local SGD's case
    for r in range(8):
        cmds = _round(p, float(r), dict.fromkeys(range(4), 8), {w: float(slow[w, r]) for w in range(4)})
    assert p.current == "local-sgd" and p.switches[-1]["gain"] == pytest.approx(1.5)
    # BSP's last round is applied as it is; every worker pulls into local SGD's first local step
    note, apply, *pulls = cmds
    assert note.what == "switch" and isinstance(apply, Apply) and len(apply.contributions) == 4
    # (each takes the server's schedule clock first: the driver sets it where BSP left it)
    local = Compute(worker=0, batch_size=8, local_lr=0.1, sync_clock=True)
    assert pulls == [Pull(worker=w, then=dataclasses.replace(local, worker=w)) for w in range(4)]
    assert not p.draining and p.version == 8
    # local SGD's rounds: H = 4 local steps a worker (the last pushes its delta), the mean of the deltas
    for r in range(2):  # worker 3 now three times slower, always: LB-BSP's case
        given, cmds = _local_round(p, 10.0 + r, {0: 1.0, 1: 1.0, 2: 1.0, 3: 3.0}, h=4)
        assert [(c.worker, c.push) for c in given] == [
            (w, "delta" if i == 2 else None) for w in range(4) for i in range(3)
        ]
        apply = next(c for c in cmds if isinstance(c, Apply))
        assert [wt for _, wt in apply.contributions] == [0.25] * 4 and apply.lr == 0.0  # (deltas: no lr)
    # the second round (8 steps a worker since the switch: its dwell) closes with the switch to LB-BSP:
    # every worker's 4 local steps are in its delta, applied; then each pulls into LB-BSP's first step
    assert p.current == "lb-bsp" and [(s["from"], s["to"]) for s in p.switches] == [
        ("bsp", "local-sgd"),
        ("local-sgd", "lb-bsp"),
    ]
    note, apply, *pulls = cmds
    assert note.what == "switch" and isinstance(apply, Apply)
    assert [c.worker for c in pulls] == [0, 1, 2, 3] and all(isinstance(c, Pull) for c in pulls)
    assert all(c.then.push == "grad" and c.then.local_lr is None for c in pulls)
    assert sum(c.then.batch_size for c in pulls) == 32  # LB-BSP's global batch, split equally until it learns
    assert not p.draining and p.version == 10
    said = Auto(ctx(4), candidates="bsp+local-sgd").start(0.0)[0]  # what it ranks by says local SGD's is not BSP's
    assert said.what == "candidates" and "local SGD's is only close to it" in said.detail["by"]


def test_a_worker_still_computing_for_backup_has_its_push_dropped_and_pulls_into_local_sgd():
    p = Auto(ctx(3, batch_size=8), start="backup", candidates="backup+local-sgd", window=4, h=2, margin=0.0)
    p.start(0.0)
    cmds = _backup_until_switch(p, "local-sgd", rounds=5)
    assert p.current == "local-sgd"  # near-equal workers: local SGD applies 3 batches a step, backup 2
    first = Compute(worker=0, batch_size=8, local_lr=0.1, sync_clock=True)  # (the server's schedule clock first)
    note, apply, *pulls = cmds  # the round of two closed (backup's), and the switch
    assert note.what == "switch" and isinstance(apply, Apply) and len(apply.contributions) == 2
    assert pulls == [Pull(worker=w, then=dataclasses.replace(first, worker=w)) for w in (0, 1)]
    assert 2 in p.draining
    assert p.on_event(_step(2, 9.0, 8, 1.0)) == []  # its gradient step for backup ends
    push = _push(2, 9.0, 8, base=0)
    drop, pull = p.on_event(push)
    assert drop == Drop(push_ids=(push.push_id,), reason="policy switch")  # counted as every drop is
    assert pull == Pull(worker=2, then=dataclasses.replace(first, worker=2))
    # local SGD's first round closes with all three deltas, worker 2's included
    _, out = _local_round(p, 10.0, dict.fromkeys(range(3), 1.0), h=2)
    assert isinstance(out[0], Apply) and len(out[0].contributions) == 3


def test_local_sgd_s_h_is_checked_naming_it():
    with pytest.raises(BadInput, match="'h'"):
        Auto(ctx(3), h=0)
    with pytest.raises(BadInput, match="'h'"):
        Auto(ctx(3), h=33)
    with pytest.raises(BadInput, match="'h' .*half its window"):
        Auto(ctx(3), candidates="bsp+local-sgd", window=10, h=6)
    # the default set: local SGD among them; a window shorter than two of its rounds leaves it out
    assert Auto(ctx(3)).candidates == ("bsp", "lb-bsp", "backup", "local-sgd")
    assert Auto(ctx(3), window=10, h=6).candidates == ("bsp", "lb-bsp", "backup")
    assert Auto(ctx(3), window=7).candidates == ("bsp", "lb-bsp", "backup")
    assert Auto(ctx(3), candidates="bsp+local-sgd", start="local-sgd").inner.name == "local-sgd"


def test_auto_with_local_sgd_is_refused_on_the_collective_path_in_one_line_naming_the_fix():
    from hetsync.driver.paths import uses_collective

    policy = Auto(ctx(4), candidates="bsp+lb-bsp+local-sgd")
    with pytest.raises(BadInput, match="cannot use path=collective.*use path=ps") as refused:
        uses_collective("collective", policy)
    assert "\n" not in str(refused.value)
    assert uses_collective("ps", policy) is False


def test_bad_candidates_are_refused_naming_the_parameter():
    with pytest.raises(BadInput, match="'candidates'"):
        Auto(ctx(3), candidates="bsp+asp")
    with pytest.raises(BadInput, match="'start'"):
        Auto(ctx(3), candidates="bsp+lb-bsp", start="backup")
    assert "backup" not in Auto(ctx(1)).candidates  # one worker: no backup to keep


def _four_workers(name: str, *, stress_from_s: float, **extra: object):
    """4 equal workers on digits-logreg (1 ms fixed, 1 ms a sample); from ``stress_from_s``
    a stress tool makes workers 2 and 3 three times slower for good."""
    from hetsync.scenario import scenario_from_dict

    on_s = 100 - stress_from_s
    load = {"workers": [2, 3], "period_s": 100, "on_s": on_s, "factor": 3, "random_phase": False, "phase_s": on_s}
    base = {"workers": 4, "workload": "digits-logreg", "batch_size": 16, "seed": 0, "fixed_s": 0.001}
    return scenario_from_dict(
        {"name": name, **base, "per_sample_s": 0.001, "jitter": 0.02, "background_load": load, **extra}
    )


def test_in_the_simulator_a_stress_that_starts_midway_is_answered_by_a_switch_on_record(tmp_path):
    from hetsync.sim.engine import simulate
    from hetsync.trace import read_trace

    # 4 equal workers; from t=1 s a stress tool makes two of them 3x slower
    sc = _four_workers("stress-midway", stress_from_s=1.0, max_time_s=2.0)
    spec = "auto:candidates=bsp+lb-bsp+local-sgd+backup:forecast=on"  # (named: no asp, ssp; see below)
    run = simulate(sc, spec, trace_path=tmp_path / "trace.jsonl").summary
    (note,) = run_switches(run)
    d = note["detail"]
    assert note["what"] == "switch" and d["from"] == "bsp" and d["to"] != "bsp"
    assert 1.0 < note["t"] < 2.0  # within a window (20 rounds of about 51 ms) of the change
    # the throughput ranking proposed it; the forecast (each candidate simulated from the live model on the
    # measured cluster, two seeds) chose the lowest loss, lower than BSP's on every seed
    losses = d["forecast"]["losses"]
    assert set(losses) == {"bsp", "lb-bsp", "backup", "local-sgd"}
    assert d["to"] == min(losses, key=lambda k: sum(losses[k])) and max(losses[d["to"]]) < min(losses["bsp"])
    (asked,) = [n for n in run["policy_notes"] if n["what"] == "forecast"]
    assert asked["t"] < note["t"] and asked["detail"] == d["forecast"]
    assert [r for r in read_trace(tmp_path / "trace.jsonl") if r["ev"] == "note" and r["what"] == "switch"] == [
        {"ev": "note", **note}
    ]
    computing = run["outstanding_detail"]["computing"]  # (steps in flight at the end: not yet counted in steps)
    assert run["steps"] == run["applied_steps"] + run["dropped_steps"] + run["outstanding_steps"] - computing


def test_in_the_simulator_it_hands_over_to_local_sgd_and_back_keeping_every_step_on_the_books(tmp_path):
    from hetsync.sim.engine import simulate
    from hetsync.trace import read_trace

    # 4 equal workers, a step in ten three times longer on a random worker (local SGD's case); from 1.5 s
    # a stress tool makes workers 2 and 3 three times slower for good (LB-BSP's)
    sc = _four_workers(
        "stragglers-then-stress", stress_from_s=1.5, max_time_s=3.0, straggler_prob=0.1, straggler_factor=3
    )
    run = simulate(sc, "auto:candidates=bsp+lb-bsp+local-sgd", trace_path=tmp_path / "trace.jsonl").summary
    switches = run_switches(run)
    assert [(n["detail"]["from"], n["detail"]["to"]) for n in switches] == [
        ("bsp", "local-sgd"),
        ("local-sgd", "lb-bsp"),
    ]
    to_local, to_lb = (n["t"] for n in switches)
    assert to_local < 1.5 < to_lb
    trace = list(read_trace(tmp_path / "trace.jsonl"))
    pushes = {r["id"]: r for r in trace if r["ev"] == "push"}
    applied = [i for r in trace if r["ev"] == "apply" for i in r["ids"]]
    dropped = [i for r in trace if r["ev"] == "drop" for i in r["ids"]]
    # local SGD's pushes (between the switches) are deltas of its H = 4 steps; the others, gradients of one
    kinds = {(r["kind"], r["steps"], to_local < r["t"] <= to_lb) for r in pushes.values()}
    assert kinds == {("grad", 1, False), ("delta", 4, True)}
    # every push applied or dropped once, or held at the end; the trace's steps are the summary's
    assert len(set(applied)) == len(applied) and not set(applied) & set(dropped)
    held = set(pushes) - set(applied) - set(dropped)
    assert len(held) == run["outstanding_detail"]["held"] and all(pushes[i]["t"] > to_lb for i in held)
    assert sum(pushes[i]["steps"] for i in applied) == run["applied_steps"]
    assert sum(r["steps"] for r in trace if r["ev"] == "drop") == run["dropped_steps"]
    assert sum(r["ev"] == "compute" for r in trace) == run["steps"]  # (a step is recorded as it ends)
    computing = run["outstanding_detail"]["computing"]
    assert run["steps"] == run["applied_steps"] + run["dropped_steps"] + run["outstanding_steps"] - computing
    # it learns under each policy: the loss at the end of each phase below the one at its start
    evals = [(r["t"], r["loss"]) for r in trace if r["ev"] == "eval"]
    for start_s, end_s in ((0.0, to_local), (to_local, to_lb), (to_lb, 3.0)):
        phase = [loss for t, loss in evals if start_s <= t <= end_s]
        assert len(phase) >= 3 and phase[-1] < phase[0]


def test_the_stress_example_s_switch_note_says_its_predicted_gain_and_the_change_that_caused_it(auto_switch_run):
    from hetsync.trace import read_trace

    run = auto_switch_run.run
    (note,) = run_switches(run)
    d = note["detail"]
    assert (d["from"], d["to"]) == ("bsp", "lb-bsp") and 1.0 < note["t"] < 1.6  # the stress starts at 1 s
    assert d["gain"] == pytest.approx(d["rates"]["lb-bsp"] / d["rates"]["bsp"], rel=1e-3) and d["gain"] > 1.1
    # the two stressed workers, about 3x slower since the first full window (before the stress)
    assert {m["w"] for m in d["moved"]} == {6, 7} and d["moved_count"] == 2
    assert all(2.0 < m["to_s"] / m["from_s"] < 3.5 for m in d["moved"])
    assert d["since_s"] < 1.0 and d["rounds"] == 20
    assert d["slowest"][0]["w"] in (6, 7) and sum(s["rounds"] for s in d["slowest"]) <= d["rounds"]
    # BSP's probe rounds fitted each worker's fixed share: 0.002 / (0.002 + 0.0005 * 32) = 0.11 in the scenario
    assert d["fixed"] and all(0.0 < f["share"] < 0.4 for f in d["fixed"])
    notes = [r for r in read_trace(auto_switch_run.out / run["trace"]) if r["ev"] == "note"]
    assert [n["what"] for n in notes] == ["candidates", "switch"] and notes[1] == {"ev": "note", **note}


def _bsp_rounds(policy, step_s_by_round, t=0.0):
    """Drive BSP rounds: each worker's step (its time), then every push; the commands of the last."""
    out = []
    for r, steps in enumerate(step_s_by_round):
        for w, step_s in enumerate(steps):
            policy.on_event(_step(w, t + step_s, 8, step_s))
        t += max(steps)
        for w in range(len(steps)):
            out = policy.on_event(_push(w, t, 8, base=r))
    return out


def test_a_change_in_the_newest_half_of_the_window_is_acted_on_before_it_fills_the_window():
    policy = Auto(ctx(workers=2, batch_size=8), candidates="bsp+lb-bsp", window=10)
    policy.start(0.0)
    before, after = [(0.1, 0.1)] * 7, [(0.1, 0.3)] * 3  # worker 1 three times slower from round 8 on
    cmds = _bsp_rounds(policy, before + after)
    (note,) = [c for c in cmds if isinstance(c, Note) and c.what == "switch"]
    assert (note.detail["from"], note.detail["to"]) == ("bsp", "lb-bsp")
    # the whole window, most of it from before the change, predicts a gain under the 10% margin
    steps = np.array([[s[w] for s in before + after] for w in range(2)])
    rates = predicted_rates(steps, np.zeros(2), batch_size=8, b=1)
    assert rates["lb-bsp"] < 1.1 * rates["bsp"]


def _until_forecast(p: Auto) -> list:
    """BSP rounds of 3 workers, worker 2 three times slower from the 4th: the round close that asks."""
    p.start(0.0)
    for r in range(6):
        cmds = _round(p, float(r), dict.fromkeys(range(3), 8), {0: 1.0, 1: 1.0, 2: 3.0 if r >= 3 else 1.0})
        if any(isinstance(c, Forecast) for c in cmds):
            return cmds
    raise AssertionError("no forecast asked")


def test_a_proposed_switch_is_forecast_first_and_the_lowest_loss_is_taken_at_the_next_round_close():
    assert Auto(ctx(3, batch_size=8), window=3, forecast="on").candidates == ("bsp", "lb-bsp", "backup", "asp", "ssp")
    p = Auto(ctx(3, batch_size=8), window=3, forecast="on", candidates="bsp+lb-bsp+backup")
    cmds = _until_forecast(p)
    *round_close, ask = cmds
    assert isinstance(round_close[0], Apply) and all(isinstance(c, Pull) for c in round_close[1:])  # BSP goes on
    assert p.current == "bsp" and not p.switches
    assert ask.candidates == ("bsp", "lb-bsp", "backup:b=1")
    assert ask.step_s == ((1.0,) * 3, (1.0,) * 3, (1.0, 3.0, 3.0)) and ask.fixed == (0.0, 0.0, 0.0)
    assert ask.horizon_s == pytest.approx(2 * 3 * (1.0 + p.overhead_s())) and ask.seeds == 2
    # the forecast: backup's loss the lowest on every seed (not the throughput ranking's LB-BSP)
    scores = (("bsp", (0.9, 0.91)), ("lb-bsp", (0.8, 0.82)), ("backup:b=1", (0.6, 0.7)))
    (said,) = p.on_event(ForecastDone(now_s=6.0, ask=ask.ask, scores=scores))
    assert said.what == "forecast" and said.detail["chosen"] == "backup" and said.detail["proposed"] == "lb-bsp"
    assert p.current == "bsp"  # the switch waits for a round close
    cmds = _round(p, 6.0, dict.fromkeys(range(3), 8), {0: 1.0, 1: 1.0, 2: 3.0})
    assert p.current == "backup" and p.switches[-1]["forecast"]["losses"]["backup"] == [0.6, 0.7]
    assert isinstance(cmds[0], Note) and cmds[0].what == "switch"


def test_a_forecast_that_keeps_the_policy_in_force_or_cannot_tell_it_apart_makes_no_switch():
    p = Auto(ctx(3, batch_size=8), window=3, forecast="on", candidates="bsp+lb-bsp+backup")
    ask = _until_forecast(p)[-1]
    overlap = (("bsp", (0.7, 0.8)), ("lb-bsp", (0.75, 0.9)), ("backup:b=1", (0.65, 0.85)))  # within the seeds
    (said,) = p.on_event(ForecastDone(now_s=6.0, ask=ask.ask, scores=overlap))
    assert said.detail["chosen"] == "bsp"
    for r in range(6, 9):  # it stays, and ranks again only once the dwell has passed
        cmds = _round(p, float(r), dict.fromkeys(range(3), 8), {0: 1.0, 1: 1.0, 2: 3.0})
    assert p.current == "bsp" and any(isinstance(c, Forecast) and c.ask == ask.ask + 1 for c in cmds)
    assert p.on_event(ForecastDone(now_s=9.0, ask=ask.ask, scores=overlap)) == []  # (an old answer: ignored)


def test_a_driver_that_cannot_forecast_leaves_the_throughput_ranking_to_decide():
    p = Auto(ctx(3, batch_size=8), window=3, forecast="on", candidates="bsp+lb-bsp+backup")
    ask = _until_forecast(p)[-1]
    (said,) = p.on_event(ForecastDone(now_s=6.0, ask=ask.ask, why="real processes do not forecast yet"))
    assert said.detail == {"by": "throughput", "why": "real processes do not forecast yet"}
    _round(p, 6.0, dict.fromkeys(range(3), 8), {0: 1.0, 1: 1.0, 2: 3.0})
    assert p.current == "lb-bsp" and "forecast" not in p.switches[-1] and not p.forecasting


def test_asp_s_replayed_rate_is_each_workers_own_steps_and_transfers_summed():
    steps = np.array([[1.0, 1.0], [3.0, 3.0]])  # two workers, one 3x slower
    times = round_times(steps, np.zeros(2), 8, 1, overhead_s=0.5, asynchronous=True)
    rates = rates_of(times)
    assert rates["asp"] == pytest.approx(8 / 1.5 + 8 / 3.5) and rates["ssp"] == rates["asp"]  # (SSP: a bound)
    assert rates["bsp"] == pytest.approx(16 / 3.5)  # every round waits for the slow one
    assert "asp" not in round_times(steps, np.zeros(2), 8, 1)


def test_asp_and_ssp_are_candidates_only_with_forecasts_and_never_the_start():
    with pytest.raises(BadInput, match="add forecast=on"):
        Auto(ctx(3, batch_size=8), candidates="bsp+asp")
    with pytest.raises(BadInput, match="starts on a policy whose convergence per sample is BSP's"):
        Auto(ctx(3, batch_size=8), candidates="bsp+asp", start="asp", forecast="on")
    p = Auto(ctx(3, batch_size=8), candidates="bsp+lb-bsp+asp+ssp", s=2, forecast="on", window=3)
    said, *_ = p.start(0.0)
    assert "only by forecasts" in said.detail["by"]
    assert p._specs(3)["ssp"] == "ssp:s=2"


def test_a_forecast_takes_it_to_asp_and_a_later_switch_drains_asp_s_steps_in_flight():
    p = Auto(ctx(3, batch_size=8), candidates="bsp+lb-bsp+asp", window=3, forecast="on")
    ask = _until_forecast(p)[-1]
    assert set(ask.candidates) == {"bsp", "lb-bsp", "asp"}
    scores = (("bsp", (0.9, 0.91)), ("lb-bsp", (0.8, 0.82)), ("asp", (0.5, 0.55)))
    (said,) = p.on_event(ForecastDone(now_s=6.0, ask=ask.ask, scores=scores))
    assert said.detail["chosen"] == "asp"
    cmds = _round(p, 6.0, dict.fromkeys(range(3), 8), {0: 1.0, 1: 1.0, 2: 3.0})
    assert p.current == "asp" and [c.worker for c in cmds if isinstance(c, Pull)] == [0, 1, 2]
    # ASP: each push applied as it arrives, the worker pulled into its next step; 3 Applies make a round
    measured = list(p.overheads)
    out = p.on_event(_push(0, 7.0, 8, base=p.version))
    assert list(p.overheads) == measured  # (one worker's push closes no round: no round overhead measured)
    assert isinstance(out[0], Apply) and out[1] == Pull(worker=0, then=Compute(worker=0, batch_size=8, push="grad"))
    assert p.since_switch == pytest.approx(1 / 3)
    # out of it: at an Apply, the workers still computing for ASP have their pushes dropped, then pull
    # (a decision as a forecast leaves it: taken at the next Apply once the dwell has passed)
    p.since_switch, p.decided = float(p.dwell), ("bsp", {"bsp": 1.0, "asp": 1.0}, {w: np.ones(3) for w in range(3)})
    cmds = p.on_event(_push(1, 7.5, 8, base=p.version))
    assert p.current == "bsp" and isinstance(cmds[0], Note) and cmds[0].what == "switch"
    assert [c.worker for c in cmds if isinstance(c, Pull)] == [1] and set(p.draining) == {0, 2}
    late = _push(2, 8.0, 8, base=0)
    drop, pull = p.on_event(late)
    assert drop == Drop(push_ids=(late.push_id,), reason="policy switch") and pull.worker == 2


def test_a_driver_that_cannot_forecast_takes_asp_and_ssp_out_of_the_candidates():
    p = Auto(ctx(3, batch_size=8), candidates="bsp+lb-bsp+asp+ssp", window=3, forecast="on")
    ask = _until_forecast(p)[-1]
    assert p.asked is not None and p.asked[1][0] in ("asp", "ssp")  # (never waiting: the highest throughput)
    said, narrowed = p.on_event(ForecastDone(now_s=6.0, ask=ask.ask, why="a user's own loop"))
    assert p.candidates == ("bsp", "lb-bsp") and p.decided is None  # (the proposal was asynchronous: dropped)
    assert narrowed.what == "candidates" and narrowed.detail["candidates"] == ["bsp", "lb-bsp"]
    assert "only by forecasts" not in narrowed.detail["by"]
    for r in range(6, 12):
        _round(p, float(r), dict.fromkeys(range(3), 8), {0: 1.0, 1: 1.0, 2: 3.0})
    assert p.current == "lb-bsp"  # ranked again among the rest


def test_under_bsp_pairs_of_workers_probe_a_second_batch_size_so_a_fixed_delay_is_not_taken_for_lb_bsp_s_case():
    """Worker 2 is slow by a fixed 0.3 s a step (hetero-4's stragglers), which
    no batch size changes. BSP's first rounds split the same global batch
    unevenly between pairs of workers, so each worker's step is measured at
    two sizes: its fixed share is known before the first ranking, and auto
    takes backup (dropping the late gradient), not LB-BSP."""
    p = Auto(ctx(3, batch_size=8), window=20)
    _, *first = p.start(0.0)
    assert sorted(c.batch_size for c in first) == [7, 8, 9]  # one pair probes; the global batch stays 24
    batches = {c.worker: c.batch_size for c in first}
    probed, t = [], 0.0
    for _ in range(30):
        seconds = {w: 0.01 * batches[w] / 8 + (0.3 if w == 2 else 0.0) for w in range(3)}
        t += max(seconds.values())  # (the round closes when its slowest push is in: no time beyond it)
        cmds = _round(p, t, batches, seconds)
        if p.switches:
            break
        batches = {c.worker: c.then.batch_size for c in cmds if isinstance(c, Pull)}
        assert sum(batches.values()) == 24
        probed.append(sorted(batches.values()) != [8, 8, 8])
    assert probed[0] and not probed[-1]  # probes first, then BSP's even split once every share is fitted
    assert p.probed == {0, 1, 2}
    assert p.fixed[2] == pytest.approx(0.95) and p.fixed[0] < 0.05  # (all fixed cost: capped)
    assert [(s["from"], s["to"]) for s in p.switches] == [("bsp", "backup")]


def test_with_forecasts_on_hetero_4_it_takes_asp_which_no_throughput_ranking_could(tmp_path):
    """hetero-4's stragglers are fixed delays: nobody waiting (ASP) is what the
    forecast from the live model finds best (hetsync bench auto: ASP fixed
    reaches the target in 2.0 s, BSP in 3.33 s), and only a forecast may take it."""
    from hetsync.scenario import load_scenario
    from hetsync.sim.engine import simulate

    run = simulate(load_scenario("hetero-4", max_time_s=1.0), "auto:forecast=on").summary
    (switch,) = run_switches(run)
    assert (switch["detail"]["from"], switch["detail"]["to"]) == ("bsp", "asp")
    losses = switch["detail"]["forecast"]["losses"]
    assert set(losses) == {"bsp", "lb-bsp", "backup", "local-sgd", "asp", "ssp"}
    assert max(losses["asp"]) < min(losses["bsp"])
    computing = run["outstanding_detail"]["computing"]  # (every step on the books: applied, dropped or held)
    assert run["steps"] == run["applied_steps"] + run["dropped_steps"] + run["outstanding_steps"] - computing
