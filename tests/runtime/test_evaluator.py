"""Evaluation beside the server loop (hetsync.runtime.evaluator): results
come back in order, stamped with the time of their copy, computed on a copy
of the model as it was when asked, and an evaluation's error reaches the loop."""

import threading
import time

import pytest
import torch

from hetsync.runtime.evaluator import BackgroundEvaluator


def test_results_are_of_the_model_as_it_was_when_asked_and_come_back_in_order():
    release = threading.Event()

    def evaluate(model):
        release.wait(5)  # the loop changes the model while this evaluation runs
        return {"sum": float(model.sum())}

    ev = BackgroundEvaluator(evaluate)
    model = torch.ones(4)
    ev.submit(1.0, model, version=3)
    model += 1  # (the server's optimizer steps in place)
    ev.submit(2.0, model, version=4)
    assert ev.ready() == [] and ev.pending == 2  # the loop is not held up
    release.set()
    assert ev.drain() == [(1.0, {"sum": 4.0}, 3), (2.0, {"sum": 8.0}, 4)]
    assert ev.pending == 0 and ev.last_s == 2.0
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
