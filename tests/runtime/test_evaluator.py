"""Evaluation beside the server loop (hetsync.runtime.evaluator): results
come back in order, stamped with the time of their copy, computed on a copy
of the model as it was when asked, and an evaluation's error reaches the loop."""

import threading
import time

import pytest
import torch

from hetsync.runtime.evaluator import BackgroundEvaluator


def test_results_are_of_the_model_as_it_was_when_asked_and_come_back_in_order():
    release, began = threading.Event(), threading.Event()

    def evaluate(model):
        began.set()
        release.wait(5)  # the loop changes the model while this evaluation runs
        return {"sum": float(model.sum())}

    ev = BackgroundEvaluator(evaluate)
    model = torch.ones(4)
    ev.submit(1.0, model, version=3)
    assert began.wait(5)  # (one asked for before this began would be replaced by the next)
    model += 1  # (the server's optimizer steps in place)
    ev.submit(2.0, model, version=4)
    assert ev.ready() == [] and ev.pending == 2  # the loop is not held up
    release.set()
    assert ev.drain() == [(1.0, {"sum": 4.0}, 3), (2.0, {"sum": 8.0}, 4)]
    assert ev.pending == 0 and ev.last_s == 2.0 and ev.skipped == 0
    ev.close()


def test_evaluations_that_cannot_keep_up_are_coalesced_to_the_newest_model():
    """Asked for every interval while a slow evaluation runs, they are not
    queued: the newest replaces the one waiting, which is evaluated as soon as
    the running one ends."""
    release, began = threading.Event(), threading.Event()

    def evaluate(model):
        began.set()
        release.wait(5)
        return {"sum": float(model.sum())}

    ev = BackgroundEvaluator(evaluate)
    ev.submit(0.0, torch.zeros(2), version=0)
    assert began.wait(5)
    for k in range(1, 5):  # four more intervals go by during the first evaluation
        ev.submit(float(k), torch.full((2,), float(k)), version=k)
    assert ev.pending == 2 and ev.skipped == 3
    release.set()
    assert ev.drain() == [(0.0, {"sum": 0.0}, 0), (4.0, {"sum": 8.0}, 4)]
    assert len(ev.spent) == 2 and all(s.ended >= s.began and s.cpu_s >= 0 for s in ev.spent)
    ev.close()


def test_a_snapshot_is_taken_when_asked_and_handed_to_the_evaluation():
    """hetsync.loop's snapshot: the model with the workers' statistics of that moment."""
    stats = {"mean": 1.0}
    ev = BackgroundEvaluator(
        lambda snap: {"x": float(snap[0].sum()) + snap[1]}, snapshot=lambda m: (m.clone(), stats["mean"])
    )
    ev.submit(0.0, torch.ones(3), version=0)
    stats["mean"] = 100.0  # (newer statistics after the copy do not reach it)
    assert ev.drain() == [(0.0, {"x": 4.0}, 0)]
    ev.close()


def test_the_loop_keeps_running_while_an_evaluation_takes_its_time():
    ev = BackgroundEvaluator(lambda model: (time.sleep(0.3), {"x": 1.0})[1])
    t0 = time.perf_counter()
    ev.submit(0.0, torch.zeros(2), version=0)
    assert time.perf_counter() - t0 < 0.1  # submit returns at once
    deadline = time.perf_counter() + 5
    while not (done := ev.ready()) and time.perf_counter() < deadline:
        time.sleep(0.01)
    assert done == [(0.0, {"x": 1.0}, 0)]
    ev.close()


def test_an_evaluation_that_fails_raises_in_the_loop():
    def evaluate(model):
        raise ValueError("bad model")

    ev = BackgroundEvaluator(evaluate)
    ev.submit(0.5, torch.zeros(1), version=1)
    with pytest.raises(ValueError, match="bad model"):
        ev.drain()
    assert ev.pending == 0
    ev.close()
