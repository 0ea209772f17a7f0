"""The driver core: what both drivers do with a policy, written once.

A driver moves bytes and keeps time — the simulator on a virtual clock and a
fluid network (:mod:`hetsync.sim.engine`), the runtime with gloo messages
between real processes (:mod:`hetsync.runtime.server`,
:mod:`hetsync.runtime.coordinator`). Everything around the policy is the
same in both and lives here:

- **Policy calls.** A driver asks the policy through :meth:`DriverCore.start_policy`
  and :meth:`DriverCore.hear`, which hold every call to the contract
  (:mod:`hetsync.driver.policycall`: what it returns, how many commands, and
  for a policy of your own what it raises and how long it runs).
- **Commands.** :meth:`DriverCore.check` refuses every command the policy
  may not give (one set of messages, each naming the policy, the rule and
  the last event it was given); :meth:`DriverCore.start_step` decides
  whether a step starts (the step budget) and refuses one the worker cannot
  take. The driver then only dispatches the command onto its data plane.
- **Facts.** Each data-plane fact — a step computed, a push arrived, a pull
  done, a model copy arrived, an all-reduce done, a worker gone — is one call
  that writes the trace record, updates the counters and returns the event
  for the policy. The driver delivers it when its data plane says (the
  simulator pushes before it delivers ``ComputeDone``, for instance).
- **Schedules.** The evaluation interval (:func:`eval_interval_s`), the
  progress fraction and the step budget.

The ledger (:mod:`hetsync.ledger`) holds the global model and the
accounting; this module turns facts into its calls. Bytes of all-reduce
chunks are the one count left to the drivers: the simulator sees each chunk
move, the runtime only hears that a ring has ended.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from hetsync.driver import policycall
from hetsync.errors import BadInput, PolicyError
from hetsync.ledger import ExchangeStats, Ledger
from hetsync.policies import PolicyContext, make_policy
from hetsync.policies.base import (
    AllReduce,
    AllReduceDone,
    Apply,
    Command,
    Compute,
    ComputeDone,
    Drop,
    Event,
    Forecast,
    Fragment,
    ModelArrived,
    Multicast,
    Note,
    Policy,
    Pull,
    PullDone,
    Push,
    PushArrived,
    SetTimer,
    WorkerJoined,
    WorkerLeft,
)
from hetsync.policies.staleness import StalenessConfig
from hetsync.scenario import Scenario
from hetsync.summary import policy_in_force

EVALS_PER_RUN = 40  # evaluations of a run whose scenario sets no eval_every_s


def policy_context(scenario: Scenario, model_bytes: int = 0, param_sizes: Sequence[int] = ()) -> PolicyContext:
    """What a policy knows of the run it drives (the same on both drivers);
    ``param_sizes``: the model's parameter tensors' sizes, where the driver has
    the model (Streaming DiLoCo cuts its fragments on them)."""
    return PolicyContext(
        workers=scenario.cluster.workers,
        batch_size=scenario.job.batch_size,
        lr=scenario.job.lr,
        rng=np.random.default_rng([scenario.job.seed, 0x9017]),
        max_batch=scenario.cluster.max_batch,
        model_bytes=model_bytes,
        param_sizes=tuple(int(s) for s in param_sizes),
    )


def policy_specs(text: str | None, scenario: Scenario) -> list[str]:
    """``--policies a,b:k=v`` as a list, or the scenario's own list without
    it; auto's start from an advice resolved (hetsync.driver.advised)."""
    from hetsync.driver.advised import resolve_specs

    specs = [s.strip() for s in text.split(",") if s.strip()] if text else list(scenario.job.policies)
    return resolve_specs(specs)[0]


def policy_labels(scenario: Scenario, specs: Sequence[str], *, driver: str = "sim") -> list[str]:
    """Validate the specs up front (before any run starts) and return labels.
    ``driver="dist"`` (real processes: ``hetsync run``, ``compare --runtime
    dist``, ``hetsync.init``) also refuses a policy the runtime does not
    implement yet (``Policy.simulator_only``)."""
    policycall.call_timeout_s()  # (HETSYNC_POLICY_CALL_TIMEOUT_S: a bad value is refused now)
    ctx = policy_context(scenario)
    policies = [make_policy(spec, ctx) for spec in specs]
    for spec, policy in zip(specs, policies, strict=True):
        if driver != "sim" and getattr(policy, "simulator_only", False):
            raise BadInput(
                f"policy {spec!r} is simulator only for now: the runtime (real processes) does not run "
                f"{policy.name} yet; use hetsync compare or simulate without --runtime dist"
            )
        config = policy.config
        if (
            isinstance(config, StalenessConfig)
            and config.momentum == "corrected"
            and scenario.job.optimizer.name != "sgd"
        ):
            raise BadInput(
                f"policy {spec!r}: momentum=corrected lowers an SGD server's momentum, "
                f"and this scenario's optimizer is {scenario.job.optimizer.name}"
            )
    for spec, policy in zip(specs, policies, strict=True):
        check_membership(scenario, policy, driver=driver, spec=spec)
    labels = [p.label for p in policies]
    seen: set[str] = set()
    for spec, label in zip(specs, labels, strict=True):
        if label in seen:
            raise BadInput(f"policy {spec!r} appears twice in the comparison (as {label})")
        seen.add(label)
    return labels


def check_membership(scenario: Scenario, policy: Policy, *, driver: str = "sim", spec: str | None = None) -> None:
    """BadInput (one line) for a run the scenario's ``membership`` cannot
    have: in a user's own training loop (``driver`` "loop"), with a
    peer-to-peer policy on real processes (``driver`` "dist": workers come
    back there on the parameter-server path only,
    :mod:`hetsync.runtime.session`), or with workers that join
    for a policy without ``Policy.takes_joins``."""
    absences = scenario.cluster.membership
    if not absences:
        return
    name = repr(spec) if spec is not None else policy.label
    if driver == "loop":
        raise BadInput(
            f"scenario {scenario.name!r} sets membership (workers that leave and join): a training loop of your "
            "own (hetsync launch) does not play it; use hetsync run, or simulate it"
        )
    if driver != "sim" and policy.topology == "p2p":
        raise BadInput(
            f"policy {name} is peer to peer, and scenario {scenario.name!r} sets membership: on real processes "
            "workers leave and come back on the parameter-server path only; simulate it, or pick another policy"
        )
    if any(a.join_s is not None for a in absences) and not getattr(policy, "takes_joins", False):
        raise BadInput(
            f"policy {name} cannot take a worker that joins (takes_joins is False), and scenario "
            f"{scenario.name!r} has workers join (membership); leave the policy out or the joins"
        )


def check_rejoin(
    scenario: Scenario,
    specs: list[str],
    *,
    path: str,
    servers: int,
    max_worker_restarts: int = 0,
    resumable: bool = False,
    joinable: int = 0,
) -> None:
    """BadInput (one line) for a run on real processes whose workers come
    back (the scenario's ``membership`` joins, ``--max-worker-restarts``) or
    join late (``joinable``: ``hetsync launch --nproc-max``, each comes in as
    one that comes back) that the runtime cannot give them: several policies in one run (each
    run starts from the workers of the first), the collective path, sharded
    servers, a peer-to-peer policy or one without ``Policy.takes_joins``;
    and ``membership`` in a run that may go on from a checkpoint
    (``resumable``: ``--resume``, ``--max-restarts``), where its leaves,
    on the run's clock, would be played again."""
    if scenario.cluster.membership and resumable:
        raise BadInput(
            f"scenario {scenario.name!r} sets membership, on the run's clock: a run that goes on from its "
            "checkpoint (--resume, --max-restarts) would play the leaves already past again; drop one of them"
        )
    joins = any(a.join_s is not None for a in scenario.cluster.membership)
    if not joins and max_worker_restarts == 0 and joinable == 0:
        return
    come = "workers come back"
    if joins:
        what = f"scenario {scenario.name!r} has workers come back (membership)"
    elif max_worker_restarts:
        what = f"--max-worker-restarts {max_worker_restarts}"
    else:
        what, come = f"--nproc-max ({joinable} may join)", "workers join"
    if len(specs) > 1:
        raise BadInput(f"{what}: one policy per run when {come}; run each policy on its own")
    if path != "ps":
        raise BadInput(
            f"{what}: {come} on path ps only (the collective path's group of workers is formed at "
            "start); drop --path collective"
        )
    if servers != 1:
        raise BadInput(f"{what}: {come} with one server only (sharded servers keep links of their own)")
    ctx = policy_context(scenario)
    for spec in specs:
        policy = make_policy(spec, ctx)
        if policy.topology == "p2p":
            raise BadInput(f"{what}: policy {spec!r} is peer to peer; {come} on the parameter-server path only")
        if not getattr(policy, "takes_joins", False):
            raise BadInput(f"{what}: policy {spec!r} cannot take a worker that joins (takes_joins is False)")


def eval_interval_s(sc: Scenario, *, floor_s: float = 1e-9) -> float:
    """The scenario's ``eval_every_s``; else 1/40 of ``max_time_s``; else 1/40
    of the run's nominal length (``max_steps`` of the slowest worker's nominal
    step), at least ``floor_s`` — the runtime sets a floor because an
    evaluation there takes real time from the run it measures."""
    if sc.stop.eval_every_s is not None:
        return sc.stop.eval_every_s
    if sc.stop.max_time_s is not None:
        return sc.stop.max_time_s / EVALS_PER_RUN
    assert sc.stop.max_steps is not None  # a scenario sets one of the two (Scenario validates it)
    slowest = max(sc.nominal_step_s(w, sc.job.batch_size) for w in range(sc.cluster.workers))
    return max(sc.stop.max_steps * slowest / EVALS_PER_RUN, floor_s)


class DriverCore:
    """One policy's run, seen from the driver's side of the policy: command
    checks, step budget, trace records, counters and events. ``computing``
    holds the workers with a step in progress (from :meth:`start_step` to
    :meth:`computed`, or until they leave)."""

    def __init__(self, policy: Policy, ledger: Ledger, scenario: Scenario) -> None:
        self.policy = policy
        self.ledger = ledger
        self.trace = ledger.trace
        self.label = policy.label
        self.n = scenario.cluster.workers
        self.p2p = policy.topology == "p2p"
        self.max_batch = scenario.cluster.max_batch
        self.max_time_s = scenario.stop.max_time_s
        self.budget = scenario.stop.max_steps * self.n if scenario.stop.max_steps is not None else None
        self.computing: set[int] = set()
        # a step was refused because the budget was spent (a leaver's step in progress may give one
        # back later, which the workers already stopped then never take: the run still ended on it)
        self.refused = False
        self.stats = ExchangeStats()  # peer-to-peer exchanges (summary fields)
        self.heard: Event | None = None  # the last event the policy was given (its start: None)
        self.heard_s: float | None = None  # when it started (None: not yet)
        self.own = policycall.is_own(policy)  # a policy of your own: its calls are bounded in time too
        self.call_timeout_s = policycall.call_timeout_s() if self.own else None
        self.max_commands = policycall.max_commands(self.n)

    # -------------------------------------------------------------- policy
    def start_policy(self, now_s: float) -> list[Command]:
        """The policy's first commands (``Policy.start``), held to :meth:`hear`'s rules."""
        self.heard, self.heard_s = None, now_s
        return self._call(self.policy.start, now_s, "start")

    def hear(self, event: Event) -> list[Command]:
        """The commands ``event`` makes the policy give (``Policy.on_event``).
        PolicyError naming the policy, the event and the rule when it returns
        something other than a list of commands, or more than
        ``policycall.max_commands``; a policy of your own also when it raises
        or runs longer than its bound (:mod:`hetsync.driver.policycall`)."""
        self.heard = event
        if self.own:
            return self._call(self.policy.on_event, event, "on_event")
        commands = self.policy.on_event(event)  # hetsync's own: an exception is hetsync's bug, with its traceback
        if type(commands) is list and len(commands) <= self.max_commands:
            return commands  # (the usual answer, checked at the cost of two comparisons)
        return self._answer("on_event", commands)

    def _call(self, fn: Callable[[Any], Any], arg: Any, what: str) -> list[Command]:
        if not self.own:
            return self._answer(what, fn(arg))
        try:
            timeout_s = self.call_timeout_s
            commands = fn(arg) if timeout_s is None else policycall.bounded(fn, arg, timeout_s)
        except BadInput:
            raise
        except policycall.Overran:
            raise self.breach(
                f"{what} ran longer than {self.call_timeout_s:g} s and was stopped "
                f"({policycall.TIMEOUT_ENV} sets the bound)"
            ) from None
        except SystemExit as e:
            raise self.breach(f"{what} called sys.exit({e.code!r})") from e
        except Exception as e:
            raise self.breach(f"{what} raised {type(e).__name__}: {policycall.one_line(e)}") from e
        return self._answer(what, commands)

    def _answer(self, what: str, commands: object) -> list[Command]:
        """``commands`` if they are a policy's answer (policycall.checked), else the breach."""
        try:
            return policycall.checked(what, commands, self.n)
        except PolicyError as e:
            raise self.breach(str(e)) from None

    def breach(self, rule: str) -> PolicyError:
        """The error for a policy that broke ``rule``: one line naming the policy, the rule
        and the last event the policy was given."""
        if self.heard is None and self.heard_s is None:
            return PolicyError(f"policy {self.label}: {rule}")
        event = policycall.describe(self.heard, self.heard_s or 0.0)
        return PolicyError(f"policy {self.label}: {rule} (last event: {event})")

    # ------------------------------------------------------------ commands
    def check(self, cmd: Command) -> None:
        """Refuse (PolicyError) a command that this policy may not give:
        unknown, naming a worker that does not exist, or of the other
        topology; an all-reduce of fewer than two workers or of one that is
        computing. A step is checked again when it starts (:meth:`start_step`)."""
        if isinstance(cmd, Compute):
            self._worker(cmd, cmd.worker)
        elif isinstance(cmd, (Push, Pull)):
            if self.p2p:
                raise self.breach(f"{type(cmd).__name__} in a peer-to-peer run (there is no server)")
            self._worker(cmd, cmd.worker)
        elif isinstance(cmd, (Multicast, AllReduce)):
            if not self.p2p:
                raise self.breach(f"{type(cmd).__name__} is a peer-to-peer command; set topology = 'p2p'")
            workers = (cmd.worker, *cmd.receivers) if isinstance(cmd, Multicast) else cmd.workers
            for w in workers:
                self._worker(cmd, w)
            if isinstance(cmd, AllReduce):
                if len(cmd.workers) < 2:
                    raise self.breach(f"AllReduce needs at least 2 workers, got {cmd.workers}")
                for w in cmd.workers:
                    if w in self.computing:
                        raise self.breach(f"AllReduce includes worker {w}, which is computing")
        elif isinstance(cmd, (Apply, Drop)):
            if self.own:  # (hetsync's own build them right; the ledger checks which pushes they name)
                self._pushes(cmd)
        elif not isinstance(cmd, (SetTimer, Note, Forecast)):
            raise self.breach(f"unknown command {policycall.one_line(repr(cmd))}")

    def _worker(self, cmd: Command, index: object) -> None:
        if type(index) is int and 0 <= index < self.n:
            return
        if not (isinstance(index, numbers.Integral) and not isinstance(index, bool) and 0 <= index < self.n):
            shown = policycall.one_line(repr(index))
            raise self.breach(f"{type(cmd).__name__} names worker {shown}, not in 0..{self.n - 1}")

    def _pushes(self, cmd: Apply | Drop) -> None:
        """An Apply's (push id, weight) pairs, a Drop's push ids, as the ledger
        reads them (which pushes it holds, the ledger checks as it applies)."""
        name = type(cmd).__name__
        try:
            pairs = list(cmd.contributions) if isinstance(cmd, Apply) else [(i, 0.0) for i in cmd.push_ids]
            ok = all(len(pair) == 2 for pair in pairs)
        except TypeError:
            ok = False
        if not ok:
            what = "(push id, weight) pairs" if isinstance(cmd, Apply) else "push ids"
            raise self.breach(f"{name} must name {what}, got {policycall.one_line(repr(cmd))}")
        for push_id, weight in pairs:
            if isinstance(push_id, bool) or not isinstance(push_id, numbers.Integral):
                raise self.breach(f"{name} names push {policycall.one_line(repr(push_id))}, not a push id")
            if isinstance(weight, bool) or not isinstance(weight, numbers.Real):
                raise self.breach(
                    f"{name} gives push {push_id} the weight {policycall.one_line(repr(weight))}, not a number"
                )

    def start_step(self, cmd: Compute) -> bool:
        """The step ``cmd`` starts now: False when the step budget is spent
        (the worker stays idle and the run drains); PolicyError when the
        worker is computing already, when a peer-to-peer step has no
        ``local_lr``, or when the batch is above the worker's memory cap."""
        w = cmd.worker
        self._worker(cmd, w)  # (a Pull's ``then`` is first checked here)
        if w in self.computing:
            raise self.breach(f"worker {w} is already computing")
        if self.p2p and cmd.local_lr is None:
            raise self.breach("peer-to-peer steps must set Compute.local_lr (there is no server)")
        if self.max_batch and cmd.batch_size > self.max_batch[w]:
            raise self.breach(
                f"worker {w} asked for batch {cmd.batch_size} above its memory cap max_batch={self.max_batch[w]}"
            )
        if self.spent():
            self.refused = True
            return False
        self.ledger.started_steps += 1
        self.computing.add(w)
        return True

    def unstart_step(self, worker: int) -> None:
        """The step ``worker`` was given will never run (its own training loop
        ended first): it is neither computed nor owed."""
        if worker in self.computing:
            self.computing.discard(worker)
            self.ledger.started_steps -= 1

    def spent(self) -> bool:
        """The step budget (``max_steps`` per worker) is spent."""
        return self.budget is not None and self.ledger.started_steps >= self.budget

    # --------------------------------------------------------------- facts
    def computed(
        self,
        worker: int,
        *,
        start_s: float,
        end_s: float,
        now_s: float,
        step: int,
        batch_size: int,
        base_version: int,
        replaced: bool = False,
        committed: int = 0,
        load: float = 1.0,
        uplink_Bps: float = float("inf"),
        downlink_Bps: float = float("inf"),
    ) -> ComputeDone:
        """A step ran on ``worker`` from ``start_s`` to ``end_s``; ``replaced``:
        its gradient replaced an unpushed one; ``committed``: local steps it
        made the worker's model (peer-to-peer: the step is the update)."""
        led = self.ledger
        self.computing.discard(worker)
        led.steps += 1
        led.samples += batch_size
        led.applied_steps += committed
        if replaced:
            led.overwritten(worker, 1, now_s)
        self.trace.write(
            {
                "t": start_s,
                "ev": "compute",
                "w": worker,
                "end": end_s,
                "step": step,
                "batch": batch_size,
                "base": base_version,
            }
        )
        return ComputeDone(
            now_s=now_s,
            worker=worker,
            step=step,
            batch_size=batch_size,
            base_version=base_version,
            duration_s=end_s - start_s,
            load=load,
            uplink_Bps=uplink_Bps,
            downlink_Bps=downlink_Bps,
        )

    def push_arrived(self, push_id: int, *, start_s: float, now_s: float, nbytes: int) -> PushArrived:
        """The push ``push_id`` (held by the ledger) has arrived at the server."""
        rec = self.ledger.pushes[push_id]
        self.ledger.bytes_sent += nbytes
        self.ledger.count_bytes(rec.worker, nbytes)
        record = {
            "t": start_s,
            "ev": "push",
            "w": rec.worker,
            "end": now_s,
            "id": push_id,
            "kind": rec.kind,
            "nbytes": nbytes,
            "steps": rec.steps,
        }
        if rec.fragment is not None:  # (only then: other traces stay as they were)
            record.update(frag=[rec.fragment.lo, rec.fragment.hi], bits=rec.fragment.bits)
        self.trace.write(record)
        return PushArrived(
            now_s=now_s,
            worker=rec.worker,
            push_id=push_id,
            kind=rec.kind,  # type: ignore[arg-type]
            base_version=rec.base_version,
            steps=rec.steps,
            samples=rec.samples,
            server_version=self.ledger.version,  # (the policy's staleness remedies read it)
        )

    def pulled(
        self,
        worker: int,
        *,
        start_s: float,
        end_s: float,
        now_s: float,
        version: int,
        nbytes: int,
        overwritten: int,
        fragment: Fragment | None = None,
    ) -> PullDone:
        """``worker`` has the global model of ``version`` (or, with ``fragment``,
        that range of it, held for a merge); ``overwritten``: local steps the
        pull replaced before they were pushed."""
        led = self.ledger
        led.bytes_sent += nbytes
        led.count_bytes(worker, nbytes)
        if fragment is None:
            led.model_arrived(worker, version)
        if overwritten:
            led.overwritten(worker, overwritten, now_s)
        record = {"t": start_s, "ev": "pull", "w": worker, "end": end_s, "version": version, "nbytes": nbytes}
        if fragment is not None:  # (only then: other traces stay as they were)
            record.update(frag=[fragment.lo, fragment.hi], bits=fragment.bits)
        self.trace.write(record)
        return PullDone(now_s=now_s, worker=worker, version=version)

    def copy_arrived(
        self, sender: int, receiver: int, *, start_s: float, end_s: float, now_s: float, nbytes: int
    ) -> ModelArrived:
        """A multicast's copy of ``sender``'s model has arrived at ``receiver``."""
        self.ledger.bytes_sent += nbytes
        self.ledger.count_bytes(sender, nbytes)
        self.ledger.count_bytes(receiver, nbytes)
        self.trace.write({"t": start_s, "ev": "send", "w": sender, "to": receiver, "end": end_s, "nbytes": nbytes})
        return ModelArrived(now_s=now_s, worker=receiver, sender=sender)

    def reduced(self, worker: int, *, start_s: float, end_s: float, nbytes: int, members: int) -> None:
        """``worker``'s part of an all-reduce of ``members`` workers is done: it
        sent and received 2(k − 1) chunks of ⌈nbytes / k⌉ (the ring's bytes
        themselves are counted in ``bytes_sent`` by the driver)."""
        self.ledger.count_bytes(worker, 4 * (members - 1) * -(-nbytes // members))
        self.trace.write(
            {"t": start_s, "ev": "allreduce", "w": worker, "end": end_s, "nbytes": nbytes, "workers": members}
        )

    def exchange_done(self, start_s: float, now_s: float) -> None:
        """A multicast (all its copies) or an all-reduce has ended: one update."""
        self.stats.finished(now_s - start_s)
        self.ledger.version += 1

    def allreduce_done(self, workers: tuple[int, ...], *, start_s: float, now_s: float) -> AllReduceDone:
        self.exchange_done(start_s, now_s)
        return AllReduceDone(now_s=now_s, workers=workers)

    def left(self, worker: int, now_s: float, reason: str) -> WorkerLeft:
        """``worker`` is gone (its process died, or its own loop ended)."""
        self.computing.discard(worker)
        self.ledger.forget_worker(worker)
        self.ledger.left.append({"worker": worker, "t": now_s, "reason": reason})
        self.trace.write({"t": now_s, "ev": "left", "w": worker, "reason": reason})
        return WorkerLeft(now_s=now_s, worker=worker)

    def joined(
        self, worker: int, *, start_s: float, end_s: float, now_s: float, version: int, nbytes: int
    ) -> WorkerJoined:
        """``worker`` is back: it came at ``start_s`` and, from ``end_s``, holds
        the global model of ``version`` (``nbytes`` downloaded for it)."""
        led = self.ledger
        led.bytes_sent += nbytes
        led.count_bytes(worker, nbytes)
        led.joined.append({"worker": worker, "t": start_s, "ready_s": end_s})
        self.trace.write(
            {"t": start_s, "ev": "joined", "w": worker, "end": end_s, "version": version, "nbytes": nbytes}
        )
        return WorkerJoined(now_s=now_s, worker=worker)

    def note(self, cmd: Note) -> None:
        """The policy's ``Note``: a trace record and a summary entry, at the time of the event it answers."""
        t = self.heard.now_s if self.heard is not None else (self.heard_s or 0.0)
        detail = dict(cmd.detail)
        self.trace.write({"t": t, "ev": "note", "what": cmd.what, "detail": detail})
        self.ledger.notes.append({"t": t, "what": cmd.what, "detail": detail})

    # ------------------------------------------------------ run boundaries
    def started(self, t_s: float, *, model_nbytes: int, scenario: Scenario, **extra: Any) -> None:
        """The trace's first record."""
        self.trace.write(
            {
                "t": t_s,
                "ev": "start",
                "workers": self.n,
                "policy": self.label,
                "scenario": scenario.name,
                "seed": scenario.job.seed,
                "model_nbytes": model_nbytes,
                **extra,
            }
        )

    def ended(self, t_s: float, reason: str) -> None:
        """The trace's last record: the run stopped at ``t_s`` for ``reason``."""
        self.trace.write({"t": t_s, "ev": "end", "wall_time_s": t_s, "reason": reason})

    def fraction(self, now_s: float) -> float:
        """How far the run is, 0..1: the larger of its time and its step budget spent."""
        parts = []
        if self.max_time_s is not None:
            parts.append(now_s / self.max_time_s)
        if self.budget is not None:
            parts.append(self.ledger.started_steps / self.budget)
        return min(1.0, max(parts)) if parts else 0.0

    def policy_status(self) -> str:
        """The policy in force, for a progress line: ``auto→lb-bsp`` after a
        switch note, ``""`` for a run without one (read from the notes)."""
        return policy_in_force(self.policy.name, self.ledger.notes)

    def p2p_summary(self, wall_s: float) -> dict[str, Any]:
        """The peer-to-peer summary fields (none for a parameter-server run)."""
        if not self.p2p:
            return {}
        return self.stats.summary(steps=self.ledger.steps, workers=self.n, wall_s=wall_s)
