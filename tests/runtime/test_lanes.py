"""The worker's lanes and its books (threads, no processes)."""

from __future__ import annotations

import threading

import pytest

from hetsync.runtime.lanes import BusyClock, Lane


def test_a_transfer_behind_a_step_costs_no_communication_time():
    c = BusyClock(0.0)
    c.compute(True, 1.0)
    c.transfer(True, 1.5)
    c.transfer(False, 1.9)  # entirely behind the step
    c.compute(False, 2.0)
    assert c.take_comm_s(2.0) == 0.0


def test_only_the_part_of_a_transfer_no_step_overlaps_counts_and_is_taken_once():
    c = BusyClock(0.0)
    c.transfer(True, 1.0)  # 1.0–1.5 alone
    c.compute(True, 1.5)  # 1.5–2.5 behind the step
    c.compute(False, 2.5)
    c.transfer(True, 2.7)  # a second one at once: 2.5–3.0 counts once
    c.transfer(False, 3.0)
    c.transfer(False, 3.0)
    assert c.take_comm_s(3.0) == pytest.approx(1.0)
    assert c.take_comm_s(4.0) == 0.0  # nothing in flight since: idle is waiting


def test_a_transfer_in_flight_is_booked_up_to_each_take():
    c = BusyClock(0.0)
    c.transfer(True, 0.0)
    assert c.take_comm_s(0.25) == pytest.approx(0.25)
    assert c.take_comm_s(1.0) == pytest.approx(0.75)


def test_a_start_before_the_last_booked_instant_is_booked_from_that_instant():
    c = BusyClock(0.0)
    c.take_comm_s(2.0)
    c.transfer(True, 1.0)  # sent at 1.0, seen at 2.0: nothing before 2.0 is rebooked
    c.transfer(False, 3.0)
    assert c.take_comm_s(3.0) == pytest.approx(1.0)


def test_a_transfer_that_never_started_cannot_end():
    with pytest.raises(RuntimeError, match="never started"):
        BusyClock().transfer(False, 1.0)


def test_a_lane_runs_its_jobs_in_order_and_drain_waits_for_them():
    done: list[int] = []
    gate = threading.Event()
    lane = Lane("t", on_error=done.append, clock=lambda: 5.0)
    lane.submit(lambda: gate.wait(5))
    for i in range(50):
        lane.submit(lambda i=i: done.append(i))
    assert done == []  # held behind the first job
    gate.set()
    lane.drain()
    assert done == list(range(50))
    assert lane.free_since_s == 5.0
    lane.close()


def test_a_failing_job_reports_once_and_the_lane_takes_no_more():
    errors: list[BaseException] = []
    ran: list[int] = []
    lane = Lane("t", on_error=errors.append, clock=lambda: 0.0)
    lane.submit(lambda: ran.append(1))
    lane.submit(lambda: 1 / 0)
    lane.submit(lambda: ran.append(2))
    lane.drain()
    assert ran == [1] and len(errors) == 1 and isinstance(errors[0], ZeroDivisionError)


def test_wait_below_returns_once_the_backlog_has_drained_below_the_bound():
    gate = threading.Event()
    lane = Lane("t", on_error=print, clock=lambda: 0.0)
    for _ in range(3):
        lane.submit(lambda: gate.wait(5))
    waited = threading.Event()
    waiter = threading.Thread(target=lambda: (lane.wait_below(1), waited.set()))
    waiter.start()
    assert not waited.wait(0.2)  # three jobs held
    gate.set()
    assert waited.wait(5)
    waiter.join()
