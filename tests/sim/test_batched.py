"""Batched gradient math in the simulator: steps in flight evaluated together
give the parameters and the trace of one gradient call per step."""

from __future__ import annotations

import json

import pytest
import torch

from hetsync.sim.batch import GradientBatcher
from hetsync.sim.engine import Simulation
from hetsync.workloads import make_workload
from tests.sim.conftest import make_scenario

# heterogeneous speeds and noise, so steps overlap unevenly and batches mix
# models of different versions
HETERO = {
    "workers": 6,
    "workload": "digits-mlp",
    "batch_size": 16,
    "lr": 0.2,
    "max_steps": 12,
    "fixed_s": 0.01,
    "slowdown": [1.0, 1.3, 1.7, 2.2, 3.0, 4.0],
    "jitter": 0.2,
    "bandwidth_Bps": 1e8,
    "latency_s": 0.001,
    "seed": 4,
}


def _records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _without_metrics(records):
    """The trace with evaluation values left out: they are float results of the
    math, compared with a tolerance instead."""
    return [{k: v for k, v in r.items() if r["ev"] != "eval" or k in ("t", "ev", "version")} for r in records]


@pytest.mark.parametrize("spec", ["bsp", "asp", "ssp:s=2", "wbsp", "p2p-random:p=2", "lb-bsp"])
def test_batched_and_unbatched_give_the_same_parameters_and_trace(spec, tmp_path):
    sc = make_scenario(**HETERO)
    one = Simulation(sc, spec, trace_path=tmp_path / "one.jsonl", batch_math=False).run()
    many = Simulation(sc, spec, trace_path=tmp_path / "many.jsonl").run()
    diff = (one.params - many.params).abs().max().item()
    assert diff <= 1e-6, diff
    # the comparison is not vacuous: the model moved, and steps really were batched
    assert (one.params - make_workload("digits-mlp").init_params(4)).abs().max().item() > 1e-2
    assert one.summary["batched_calls"] == 0
    assert 0 < many.summary["batched_calls"] < many.summary["steps"]
    a, b = _records(tmp_path / "one.jsonl"), _records(tmp_path / "many.jsonl")
    assert _without_metrics(a) == _without_metrics(b)
    for ra, rb in zip(a, b, strict=True):
        if ra["ev"] == "eval":
            assert ra["loss"] == pytest.approx(rb["loss"], abs=1e-5)


def test_batched_runs_are_deterministic():
    sc = make_scenario(**HETERO)
    first = Simulation(sc, "asp").run().params
    assert torch.equal(first, Simulation(sc, "asp").run().params)


def test_a_model_vmap_cannot_batch_falls_back_to_one_call_per_step():
    sc = make_scenario(**{**HETERO, "workload": "signal1d-cnn", "workload_args": {"batchnorm": True, "n_samples": 400}})
    sim = Simulation(sc, "asp")
    assert sim.batcher is None
    assert "BatchNorm1d" in (sim.workload.batch_blocker or "")
    result = sim.run()
    assert result.summary["batched_calls"] == 0
    assert torch.equal(result.params, Simulation(sc, "asp", batch_math=False).run().params)


def test_math_off_needs_no_batcher():
    sim = Simulation(make_scenario(**HETERO), "asp", math=False)
    assert sim.batcher is None
    assert sim.run().summary["batched_calls"] == 0


# ------------------------------------------------------------- the batcher
def _wl():
    return make_workload("digits-mlp", hidden=16)


def test_batcher_groups_batch_sizes_and_chunks():
    wl = _wl()
    shards = wl.make_shards(5, 0)
    base = wl.init_params(0)
    batcher = GradientBatcher(wl, max_group=2)
    owed = {}
    for i, b in enumerate([8, 8, 4, 8, 4]):  # two batch shapes, one group larger than max_group
        params = base + 0.01 * i
        x, y = shards[i].next_batch(b)
        batcher.submit(i, params, x, y)
        owed[i] = wl.gradient(params, x, y)[0]
    assert len(batcher) == 5
    first = batcher.take(3)
    assert len(batcher) == 0 and batcher.evaluated == 5
    assert batcher.calls == 3  # [8, 8] [8] [4, 4]
    assert (first - owed[3]).abs().max().item() <= 1e-6
    for i in (0, 1, 2, 4):
        assert (batcher.take(i) - owed[i]).abs().max().item() <= 1e-6


def test_batcher_refuses_a_second_step_and_an_unknown_worker():
    wl = _wl()
    x, y = wl.make_shards(1, 0)[0].next_batch(4)
    batcher = GradientBatcher(wl)
    batcher.submit(0, wl.init_params(0), x, y)
    with pytest.raises(ValueError, match="worker 0"):
        batcher.submit(0, wl.init_params(0), x, y)
    with pytest.raises(KeyError, match="worker 7"):
        batcher.take(7)


def test_batcher_max_group_is_validated():
    from hetsync.errors import BadInput

    with pytest.raises(BadInput, match="max_group"):
        GradientBatcher(_wl(), max_group=0)


def test_batcher_rows_of_the_training_split_give_the_batches_gradients_bit_for_bit():
    """submit_rows gathers a group's samples in one take: the same gradients,
    to the bit, as the batches submitted as tensors (and as one call each)."""
    wl = _wl()
    shards = wl.make_shards(4, 0)
    base = wl.init_params(0)
    by_rows, by_tensors = GradientBatcher(wl), GradientBatcher(wl)
    singles = {}
    for i, shard in enumerate(shards):
        params = base + 0.01 * i
        index = shard.next_index(8)
        rows = shard.indices[index]
        x, y = shard.x.index_select(0, torch.from_numpy(index)), shard.y.index_select(0, torch.from_numpy(index))
        assert torch.equal(x, wl.train_x[torch.from_numpy(rows)])  # a shard's samples are rows of the split
        by_rows.submit_rows(i, params, rows)
        by_tensors.submit(i, params, x, y)
        singles[i] = wl.gradient(params, x, y)[0]
    for i in range(4):
        got = by_rows.take(i)
        assert torch.equal(got, by_tensors.take(i))
        assert torch.equal(got, singles[i])
    assert by_rows.calls == by_tensors.calls == 1


def test_a_group_on_one_model_passes_it_expanded_and_gets_the_same_bits():
    wl = _wl()
    shards = wl.make_shards(3, 0)
    model = wl.init_params(0)
    batcher = GradientBatcher(wl)
    seen = []
    gradients = wl.gradients
    wl.gradients = lambda params, x, y: (seen.append(params), gradients(params, x, y))[1]
    singles = {}
    for i, shard in enumerate(shards):
        x, y = shard.next_batch(8)
        batcher.submit(i, model, x, y)
        singles[i] = wl.gradient(model, x, y)[0]
    for i in range(3):
        assert torch.equal(batcher.take(i), singles[i])
    assert seen[0].stride(0) == 0  # one model, not three copies
    batcher.submit(0, model, *shards[0].next_batch(8))
    batcher.submit(1, model + 0.0, *shards[1].next_batch(8))  # an equal model, another tensor: stacked
    batcher.flush()
    assert seen[1].stride(0) == wl.n_params


def test_a_shard_draws_the_same_batches_by_index_and_by_tensors():
    wl = _wl()
    a, b = wl.make_shards(2, 5)[1], wl.make_shards(2, 5)[1]
    for size in (3, 100, 1, len(a), 2 * len(a) + 7):  # within an epoch, across one, several at once
        index = a.next_index(size)
        x, y = b.next_batch(size)
        assert torch.equal(a.x[torch.from_numpy(index)], x) and torch.equal(a.y[torch.from_numpy(index)], y)
