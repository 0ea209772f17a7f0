"""The server's watchdog (hetsync.runtime.watchdog): who owes a report, since
when, and who has been silent for too long."""

from hetsync.runtime.watchdog import Watchdog


def test_a_worker_is_overdue_once_it_owes_a_report_for_longer_than_the_timeout():
    dog = Watchdog(3, timeout_s=2.0)
    assert not dog.busy({0, 1, 2})
    dog.owe(0, 1.0)
    dog.owe(0, 2.5)  # the oldest unreported command counts
    dog.owe(1, 2.0)
    assert dog.busy({0, 1, 2}) and not dog.busy({2})
    assert dog.overdue({0, 1, 2}, 3.0) == []
    assert dog.overdue({0, 1, 2}, 3.5) == [0]
    dog.paid(0, 3.5)  # one report in: the clock restarts for the one still owed
    assert dog.overdue({0, 1, 2}, 4.5) == [1]
    assert dog.overdue({0, 2}, 4.5) == []  # only live workers are watched
    dog.paid(0, 4.0)
    dog.paid(0, 4.0)  # a late or forgiven report owes nothing back
    assert dog.outstanding[0] == 0
    dog.forgive(1)
    assert not dog.busy({0, 1, 2}) and dog.overdue({0, 1, 2}, 100.0) == []
