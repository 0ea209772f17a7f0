"""Calling a policy: the bounds a driver holds every call to.

hetsync's own policies keep the contract (tests/test_contract.py runs them
under generated schedules). A policy of your own (``package.module:Class``)
may not: it may raise, return something that is not a list of commands,
return millions of them, or never return. The driver core
(:meth:`hetsync.driver.DriverCore.hear`) calls every policy through here and
turns each of those into a :class:`~hetsync.errors.PolicyError` naming the
policy, the event it was answering and the rule it broke — one line on the
command line (exit status 1), the policy's own traceback chained to it.

The time bound. A call of a policy of your own that runs longer than
``HETSYNC_POLICY_CALL_TIMEOUT_S`` seconds (default 10; 0: no bound) is
stopped: a watchdog thread raises an exception in the thread that made the
call (CPython's ``PyThreadState_SetAsyncExc``), which interrupts pure-Python
code at its next bytecode. That works the same in the simulator and in the
runtime's server, on any thread and without signals. What it cannot
interrupt is a call blocked in C code (a long ``time.sleep``, one huge numpy
operation): that one is stopped when it returns to Python. A policy that
catches ``BaseException`` in its loop is interrupted again every poll, and
may never be stopped. hetsync's own policies are not timed: their cost grows
with the cluster, and their parameters are bounded for it.
"""

from __future__ import annotations

import ctypes
import math
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from hetsync.errors import BadInput, PolicyError
from hetsync.policies.base import Event

TIMEOUT_ENV = "HETSYNC_POLICY_CALL_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 10.0
# Commands one call may return: a round's worth for every worker with room to spare
# (hetsync's policies return at most about 3 per worker), so a runaway list is refused
# before the driver executes any of it.
COMMANDS_BASE = 10_000
COMMANDS_PER_WORKER = 16


def call_timeout_s() -> float | None:
    """The bound on one call of a policy of your own, from ``HETSYNC_POLICY_CALL_TIMEOUT_S``
    (None: no bound); BadInput naming the variable for a value that is not a number >= 0."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise BadInput(f"{TIMEOUT_ENV} must be a number of seconds >= 0 (0: no bound), got {raw!r}")
    return value or None


def max_commands(workers: int) -> int:
    """Commands one policy call may return on a run of ``workers`` workers."""
    return COMMANDS_BASE + COMMANDS_PER_WORKER * workers


def is_own(policy: object) -> bool:
    """Whether ``policy`` is a policy of your own (not one hetsync ships)."""
    return not type(policy).__module__.startswith("hetsync.")


def one_line(text: object, limit: int = 200) -> str:
    """``text`` (an exception's message, a value's repr) as part of a one-line message:
    its first line, cut at ``limit`` characters."""
    first = str(text).strip().splitlines()[0] if str(text).strip() else ""
    return first if len(first) <= limit else first[:limit] + "…"


def describe(event: Event | None, now_s: float = 0.0) -> str:
    """The event a call answered, for a message: ``PushArrived of worker 1 at t=0.0734 s``."""
    if event is None:
        return f"start at t={now_s:.6g} s"
    worker = getattr(event, "worker", None)
    of = f" of worker {worker}" if worker is not None else ""
    tag = f" {event.tag!r}" if hasattr(event, "tag") else ""
    return f"{type(event).__name__}{tag}{of} at t={event.now_s:.6g} s"


def checked(what: str, commands: object, workers: int) -> list[Any]:
    """``commands`` as a policy's answer must be: a list (or tuple) of at most
    :func:`max_commands`; PolicyError's rule otherwise (the commands
    themselves are checked as the driver executes them)."""
    if type(commands) is not list:
        if not isinstance(commands, list | tuple):
            raise PolicyError(f"{what} returned {type(commands).__name__}, not a list of commands")
        commands = list(commands)
    limit = max_commands(workers)
    if len(commands) > limit:
        raise PolicyError(
            f"{what} returned {len(commands)} commands, more than the {limit} one call may return "
            f"({COMMANDS_BASE} + {COMMANDS_PER_WORKER} per worker)"
        )
    return commands


# ----------------------------------------------------------- the time bound
class _Overran(BaseException):
    """Raised inside a call that ran past its bound (a BaseException, so that
    the policy's ``except Exception`` does not swallow it)."""


class Overran(Exception):
    """A policy call ran past its bound and was stopped."""


class _Call:
    __slots__ = ("deadline", "fired", "thread")

    def __init__(self, thread: int, deadline: float) -> None:
        self.thread = thread
        self.deadline = deadline
        self.fired = 0.0  # when the watchdog last raised in it (0: never)


_lock = threading.Lock()
_calls: dict[int, _Call] = {}  # thread id -> the call it is in
_watchdog: threading.Thread | None = None
_POLL_S = 0.05  # the watchdog looks this often: a call is stopped within its bound + this


def _raise_in(thread: int, exc: type[BaseException] | None) -> None:
    """Raise ``exc`` in ``thread`` at its next bytecode (None: cancel one pending)."""
    arg = ctypes.py_object(exc) if exc is not None else ctypes.c_void_p(None)
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread), arg)


def _watch() -> None:
    while True:
        time.sleep(_POLL_S)
        now = time.monotonic()
        with _lock:
            for call in _calls.values():
                if now > call.deadline and now - call.fired > 4 * _POLL_S:
                    call.fired = now
                    _raise_in(call.thread, _Overran)


def _leave(call: _Call) -> None:
    """The call is over: the watchdog leaves its thread alone from now on (idempotent)."""
    with _lock:
        if _calls.get(call.thread) is call:
            del _calls[call.thread]
        if call.fired:
            _raise_in(call.thread, None)  # one raised as the call returned, not delivered yet


def bounded(fn: Callable[[Any], Any], arg: Any, timeout_s: float) -> Any:
    """``fn(arg)``, stopped with :class:`Overran` once it has run ``timeout_s`` seconds."""
    global _watchdog
    call = _Call(threading.get_ident(), time.monotonic() + timeout_s)
    try:
        try:
            with _lock:
                if _watchdog is None:
                    _watchdog = threading.Thread(target=_watch, name="hetsync-policy-watchdog", daemon=True)
                    _watchdog.start()
                _calls[call.thread] = call
            return fn(arg)
        finally:
            _leave(call)
    except _Overran:
        _leave(call)  # (if it was raised on the way out of the first)
        raise Overran from None
