"""Policies of a user's own that break the contract, each in one way
(tests/test_user_policy.py): hetsync ends their runs with one line naming
the policy, the event and the rule, never a traceback of its own code, a
hang or unbounded memory."""

from __future__ import annotations

from hetsync.policies.base import Apply, Command, Compute, Event, Policy, PushArrived, SetTimer


class _Broken(Policy):
    """Starts every worker as EveryPush does; ``broken`` answers the first push."""

    summary = "a broken policy"

    def start(self, now_s: float) -> list[Command]:
        return [Compute(worker=w, batch_size=self.ctx.batch_size, push="grad") for w in range(self.n)]

    def on_event(self, event: Event) -> list[Command]:
        if isinstance(event, PushArrived):
            return self.broken(event)
        return []

    def broken(self, event: PushArrived) -> list[Command]:
        raise NotImplementedError


class Raises(_Broken):
    name = "raises"

    def broken(self, event: PushArrived) -> list[Command]:
        return {}["no such key"]  # type: ignore[no-any-return]  # a bug: KeyError


class RaisesLines(_Broken):
    name = "raises-lines"

    def broken(self, event: PushArrived) -> list[Command]:
        raise ValueError("the first line says it\n" + "and the rest is noise\n" * 1000)


class WordWeight(_Broken):
    name = "word-weight"

    def broken(self, event: PushArrived) -> list[Command]:
        return [Apply(contributions=((event.push_id, "half"),), lr=self.ctx.lr)]  # type: ignore[arg-type]


class ReturnsNone(_Broken):
    name = "returns-none"

    def broken(self, event: PushArrived) -> list[Command]:
        return None  # type: ignore[return-value]


class ReturnsText(_Broken):
    name = "returns-text"

    def broken(self, event: PushArrived) -> list[Command]:
        return ["pull worker 0"]  # type: ignore[list-item]


class NoSuchWorker(_Broken):
    name = "no-such-worker"

    def start(self, now_s: float) -> list[Command]:
        return [Compute(worker=self.n + 5, batch_size=self.ctx.batch_size)]


class StringWorker(_Broken):
    name = "string-worker"

    def start(self, now_s: float) -> list[Command]:
        return [Compute(worker="0", batch_size=self.ctx.batch_size)]  # type: ignore[arg-type]


class NeverContinues(_Broken):
    """Applies nothing and tells nobody to go on: the run stalls."""

    name = "never-continues"

    def broken(self, event: PushArrived) -> list[Command]:
        return []


class Forever(_Broken):
    name = "forever"

    def broken(self, event: PushArrived) -> list[Command]:
        while True:
            pass


class SwallowsEverything(_Broken):
    """Loops forever and catches whatever is raised inside the loop."""

    name = "swallows"

    def broken(self, event: PushArrived) -> list[Command]:
        while True:
            try:
                while True:
                    pass
            except BaseException:
                pass


class Flood(_Broken):
    name = "flood"

    def broken(self, event: PushArrived) -> list[Command]:
        return [SetTimer(at_s=event.now_s + 1.0, tag="x")] * 10_000_000


class RaisesInInit(_Broken):
    name = "raises-in-init"

    def __init__(self, ctx, **params):  # type: ignore[no-untyped-def]
        super().__init__(ctx, **params)
        raise RuntimeError("cannot start")
