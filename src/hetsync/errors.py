"""Exceptions shared by every layer of hetsync.

``BadInput`` is the one the CLI turns into exit status 2 with a one-line
message: raise it (or a subclass) whenever the *user* gave something wrong
(a scenario key, a policy name, a parameter value), and make the message name
the key or value and say how to fix it.
"""

from __future__ import annotations


class BadInput(ValueError):
    """The user's input is wrong; the message names what and how to fix it."""


class PolicyError(RuntimeError):
    """A policy issued a command the driver cannot execute (a policy bug)."""


class DeadlockError(RuntimeError):
    """The run stalled: no event is pending but the stop condition is not met."""
