"""The sans-IO policy core: events in, commands out.

A policy is a synchronization model written once and run by every driver (the
virtual-time simulator, the torch.distributed runtime). It never reads a
clock, sleeps, opens a socket or touches torch: time arrives as
``event.now_s``, randomness as the ``numpy.random.Generator`` in its context,
and models and gradients are opaque to it (it names pushes by the id the
driver gave them).

Data plane, as every driver executes it (parameter-server topology):

- ``Compute(worker, batch_size)``: the worker computes one gradient on its
  local model with a fresh mini-batch. With ``local_lr`` set, it also takes
  the SGD step locally (local SGD, WBSP). Answered by ``ComputeDone``. With
  ``push`` set, the worker pushes right after the step, as if the policy had
  answered ``ComputeDone`` with ``Push`` — but without a round trip to the
  server on a real network. With ``continuous`` set the worker trains
  nonstop: as each step ends it starts the same step again (each answered
  by its own ``ComputeDone``, the next one already under way), so the policy
  never sends this worker another ``Compute``; the driver stops it only
  when the step budget is spent or the run ends. On a real network this
  saves the server round trip between steps, which on fast steps is most
  of a worker's time (the optimized WBSP's training thread).
- ``Push(worker, kind)``: the worker uploads to the server either its latest
  gradient (``"grad"``) or its model delta since its last push or pull
  (``"delta"``). The driver numbers the push; ``PushArrived`` carries the id.
- ``Apply(contributions, lr)``: the server folds pushes into the global
  model, ``θ ← θ + Σ wᵢ·uᵢ`` with ``uᵢ = −lr·gᵢ`` for gradients and
  ``uᵢ = Δᵢ`` for deltas, and the version counter goes up by one. Two
  remedies for stale gradients ride on it (:mod:`hetsync.algos.staleness`):
  with ``compensate`` λ > 0 each gradient is first delay-compensated,
  ``gᵢ + λ·gᵢ⊙gᵢ⊙(θ − θᵢ)`` with θᵢ the model it was computed on (DC-ASGD;
  the server keeps those models while the policy's
  ``needs_base_models()`` says so); with ``implicit_momentum`` m > 0 the
  server's optimizer steps with its momentum lowered to max(0, μ − m).
  A staleness-dependent rate is the policy's own choice of ``lr`` (or of
  the weights); ``PushArrived.staleness`` gives it the push's staleness.
- ``Drop(push_ids)``: pushes the policy discards, so they are counted.
- ``Pull(worker)``: the worker downloads the global model as it is when the
  pull starts and replaces its local model with it on arrival
  (``PullDone``). Local steps not yet pushed are lost and counted as dropped.
  ``Pull(worker, then=Compute(...))`` starts that step as soon as the model
  has arrived (again saving a round trip); the policy still sees ``PullDone``
  first and must not start another step for that worker.
- ``SetTimer(at_s, tag)``: answered by ``TimerFired``.

Fragments (Streaming DiLoCo): a ``Fragment(lo, hi, bits)`` names the range
[lo, hi) of the flat parameter vector and the width its values travel at
(32, or 8 / 4 for uniform integers with one scale: :mod:`hetsync.algos.quantize`).

- ``Push(worker, "delta", fragment=f)``: the worker uploads the delta of that
  range only, ``local[lo:hi] − ref[lo:hi]`` with ``ref`` the global values it
  last merged there, quantized to ``f.bits`` (a real round trip); it carries
  the local steps since the worker's last push of any fragment, and the
  worker's ``ref`` is left as it is.
- ``Apply`` of fragment pushes (all of the same fragment) changes that range
  only: the weighted sum of the deltas is quantized to ``f.bits`` again (what
  the second half of the paper's low-precision all-reduce carries) and the
  outer optimizer takes one step on it, with its own state per fragment.
- ``Pull(worker, fragment=f, keep=α)``: the worker downloads that range of the
  global model (its bytes counted at ``f.bits``: on a real network the same
  bytes carry the quantized mean delta, from which each worker takes the
  same outer step itself). On arrival (``PullDone``) the worker holds it; it
  merges it as it starts the next step whose ``Compute`` sets ``merge``:
  ``θ[lo:hi] ← α·θ[lo:hi] + (1 − α)·global[lo:hi]`` and ``ref[lo:hi] ←
  global[lo:hi]``. No local step is lost.

Peer-to-peer topology (policies with ``topology = "p2p"``): there is no
server and no global model; a coordinator runs the policy and moves no model
data. Workers compute with ``local_lr`` (the step is the update), and:

- ``Multicast(worker, receivers)``: the worker sends a copy of its model as
  it is now to each receiver, point to point (one flow per receiver, all
  through the sender's uplink). Each arrival is answered by ``ModelArrived``.
  A receiver keeps what arrives and, at the start of its next step, mixes
  it into its model with push-sum weights (:mod:`hetsync.localmodel`).
- ``AllReduce(workers)``: ring all-reduce of those workers' models; each
  ends with the exact average. Answered by ``AllReduceDone``. No participant
  may be computing while it runs.

The accuracy of a peer-to-peer run is that of the average of the workers'
models. ``ComputeDone`` carries the worker's available link bandwidth, as a
monitor would report it, for policies that plan transfers.

A worker that has no command in progress is *waiting*; that is how barriers
are expressed: the policy simply does not give it work yet.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np

# a policy's parameters (policies import PolicyConfig and param from here, with the events and commands)
from hetsync.policies.config import PolicyConfig as PolicyConfig
from hetsync.policies.config import config_params, config_values, parse_config
from hetsync.policies.config import param as param

PushKind = Literal["grad", "delta"]


# --------------------------------------------------------------------- events
@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    now_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ComputeDone(Event):
    worker: int
    step: int  # the worker's step number, 0-based
    batch_size: int
    base_version: int  # global version the worker's model derives from
    duration_s: float
    # background load the worker saw during the step, as a resource monitor
    # would report it (1.0 = unloaded, 2.0 = steps take twice as long)
    load: float = 1.0
    # available uplink / downlink bandwidth (bytes/s) at the end of the step
    uplink_Bps: float = math.inf
    downlink_Bps: float = math.inf


@dataclass(frozen=True, slots=True, kw_only=True)
class PushArrived(Event):
    worker: int
    push_id: int
    kind: PushKind
    base_version: int
    steps: int  # local steps this push carries
    samples: int  # samples in those steps
    # the server's model version as the push arrived (None: not told); an
    # Apply given at once applies it at staleness ``server_version − base_version``
    server_version: int | None = None

    @property
    def staleness(self) -> int:
        """Versions the global model moved since the push's base (0 when not told)."""
        return 0 if self.server_version is None else max(0, self.server_version - self.base_version)


@dataclass(frozen=True, slots=True, kw_only=True)
class PullDone(Event):
    worker: int
    version: int


@dataclass(frozen=True, slots=True, kw_only=True)
class TimerFired(Event):
    tag: str


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerLeaving(Event):
    """The worker's own training loop has ended (hetsync.loop; no driver of a
    simulated run sends it): it will start no step, and the one it was given
    is withdrawn. The policy may still command it transfers, e.g. to push its
    unpushed local steps; ``WorkerLeft`` follows once it has done them."""

    worker: int


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerLeft(Event):
    worker: int


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerJoined(Event):
    """The worker, which had left (``WorkerLeft``) or had not started, is
    available again and holds the current global model (peer to peer: the
    average of the live workers' models); its place in the data goes on where
    it was. Only a policy with ``takes_joins`` is sent it (a driver refuses a
    run with joins for any other). The policy decides when it works again: a
    round policy from its next round, never the round in flight."""

    worker: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelArrived(Event):
    worker: int  # the receiver
    sender: int


@dataclass(frozen=True, slots=True, kw_only=True)
class AllReduceDone(Event):
    workers: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ForecastDone(Event):
    """The answer to the ``Forecast`` with the same ``ask``: each candidate's
    ``metric`` (``loss``: lower is better) at the end of each simulated seed,
    as ``(spec, (value per seed, ...))``; ``scores`` None: this driver does
    not forecast (``why`` says so), rank by what you measure."""

    ask: int
    metric: str = "loss"
    scores: tuple[tuple[str, tuple[float, ...]], ...] | None = None
    why: str = ""


# ------------------------------------------------------------------ fragments
FRAGMENT_BITS = (32, 8, 4)
"""Widths a fragment's values may travel at (hetsync.algos.quantize)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Fragment:
    """The range [lo, hi) of the flat parameter vector, and the width its
    values travel at (see the module docstring)."""

    lo: int
    hi: int
    bits: int = 32

    def __post_init__(self) -> None:
        if not 0 <= self.lo < self.hi:
            raise ValueError(f"Fragment must be a non-empty range [lo, hi) with lo >= 0, got [{self.lo}, {self.hi})")
        if self.bits not in FRAGMENT_BITS:
            raise ValueError(f"Fragment.bits must be one of {FRAGMENT_BITS}, got {self.bits!r}")

    @property
    def size(self) -> int:
        """Values in the range."""
        return self.hi - self.lo


# ------------------------------------------------------------------- commands
@dataclass(frozen=True, slots=True, kw_only=True)
class Command:
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class Compute(Command):
    worker: int
    batch_size: int
    local_lr: float | None = None  # take the SGD step locally with this rate
    push: PushKind | None = None  # push right after the step
    continuous: bool = False  # start the same step again as each ends (train nonstop)
    merge: bool = False  # first merge the fragment pulls that have arrived (Pull with a fragment)
    # first set the worker's schedule clock for local steps to the server's (Ledger.clock: samples applied,
    # in global batches): a handover from gradient rounds to local steps (auto) goes on with the schedule
    sync_clock: bool = False

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"Compute.batch_size must be >= 1, got {self.batch_size}")
        if self.sync_clock and (self.local_lr is None or self.continuous):
            raise ValueError(
                f"Compute.sync_clock is for a local step (local_lr) that is not continuous, "
                f"got local_lr={self.local_lr!r}, continuous={self.continuous}"
            )
        if self.push not in (None, "grad", "delta"):
            raise ValueError(f"Compute.push must be None, 'grad' or 'delta', got {self.push!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Push(Command):
    worker: int
    kind: PushKind = "grad"
    fragment: Fragment | None = None  # the delta of this range only (module docstring)

    def __post_init__(self) -> None:
        if self.fragment is not None and self.kind != "delta":
            raise ValueError(f"Push.fragment needs kind 'delta' (a fragment's model delta), got {self.kind!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Apply(Command):
    contributions: tuple[tuple[int, float], ...]  # (push_id, weight)
    lr: float = 0.0  # used for gradient contributions
    # DC-ASGD's λ: each gradient g computed on θ_then becomes g + λ·g⊙g⊙(θ − θ_then)
    compensate: float = 0.0
    # momentum the policy's asynchrony implies: the server's optimizer steps with max(0, μ − this)
    implicit_momentum: float = 0.0

    def __post_init__(self) -> None:
        if not self.contributions:
            raise ValueError("Apply.contributions must not be empty")
        if not (self.compensate >= 0 and math.isfinite(self.compensate)):
            raise ValueError(f"Apply.compensate must be a finite number >= 0, got {self.compensate!r}")
        if not 0 <= self.implicit_momentum < 1:
            raise ValueError(f"Apply.implicit_momentum must be in [0, 1), got {self.implicit_momentum!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Drop(Command):
    push_ids: tuple[int, ...]
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Pull(Command):
    worker: int
    then: Compute | None = None  # start this step on arrival
    fragment: Fragment | None = None  # this range only, held until a step merges it (module docstring)
    keep: float = 0.0  # a fragment's merge: the share α of the worker's own values kept

    def __post_init__(self) -> None:
        if self.then is not None and self.then.worker != self.worker:
            raise ValueError(f"Pull.then must compute on worker {self.worker}, not {self.then.worker}")
        if not 0.0 <= self.keep <= 1.0:
            raise ValueError(f"Pull.keep must be in [0, 1], got {self.keep!r}")
        if self.keep and self.fragment is None:
            raise ValueError("Pull.keep needs a fragment: a whole-model pull replaces the worker's model")


@dataclass(frozen=True, slots=True, kw_only=True)
class Multicast(Command):
    worker: int
    receivers: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.receivers:
            raise ValueError(f"Multicast.receivers of worker {self.worker} must not be empty")
        if self.worker in self.receivers:
            raise ValueError(f"Multicast.receivers of worker {self.worker} must not include the sender")
        if len(set(self.receivers)) != len(self.receivers):
            raise ValueError(f"Multicast.receivers of worker {self.worker} has duplicates: {self.receivers}")


@dataclass(frozen=True, slots=True, kw_only=True)
class AllReduce(Command):
    workers: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.workers:
            raise ValueError("AllReduce.workers must not be empty")
        if len(set(self.workers)) != len(self.workers):
            raise ValueError(f"AllReduce.workers has duplicates: {self.workers}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Forecast(Command):
    """Simulate each of ``candidates`` (policy specs) from the global model as
    it is now, on the cluster the run measured — ``step_s``, each live
    worker's latest step times at the common batch (a row each, oldest
    first), ``fixed``, the share of each worker's step that does not grow
    with the batch, ``overhead_s``, a round's time beyond its slowest step —
    for ``horizon_s`` of simulated time, over ``seeds`` seeds; the answer is
    a ``ForecastDone`` with the same ``ask`` (in the simulator at once; a
    driver that cannot forecast answers ``scores=None``). It moves nothing of
    the run's own."""

    ask: int
    candidates: tuple[str, ...]
    step_s: tuple[tuple[float, ...], ...]
    fixed: tuple[float, ...]
    overhead_s: float = 0.0
    horizon_s: float
    seeds: int = 2

    def __post_init__(self) -> None:
        if not self.candidates:
            raise ValueError("Forecast.candidates must name at least one policy")
        if not self.step_s or len(self.fixed) != len(self.step_s) or any(not row for row in self.step_s):
            raise ValueError(
                f"Forecast.step_s must be a non-empty row of step times per worker and fixed one share per row, "
                f"got {len(self.step_s)} rows and {len(self.fixed)} shares"
            )
        if not (self.horizon_s > 0 and self.overhead_s >= 0 and self.seeds >= 1):
            raise ValueError(
                f"Forecast needs horizon_s > 0, overhead_s >= 0 and seeds >= 1, got {self.horizon_s!r}, "
                f"{self.overhead_s!r} and {self.seeds!r}"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class SetTimer(Command):
    at_s: float
    tag: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Note(Command):
    """Something the policy decided that the run's record should show (auto's
    switch of policy): a trace record ``note`` and an entry of the summary's
    ``policy_notes``, at the time of the event it answers. ``what``: a short
    name; ``detail``: plain JSON-able values. It moves nothing. A note
    ``what="switch"`` whose detail names ``from`` and ``to`` (policy names)
    says the policy in force changed: the drivers name it on the progress
    line (``auto→lb-bsp``), the plots mark the phases, ``hetsync report``
    lists the switches (hetsync.summary.policy_phases)."""

    what: str
    detail: Mapping[str, Any]


def _quick_init(cls: type[Any]) -> None:
    """Give the frozen, slotted, keyword-only dataclass ``cls`` an
    ``__init__`` that stores each field through its slot's descriptor.

    The one ``dataclass`` writes for a frozen class goes through
    ``object.__setattr__`` field by field, about 3 µs for a ``ComputeDone``;
    this one takes under 1 µs, and a simulated step makes several events and
    commands. Same signature (keyword-only, same defaults), same
    ``__post_init__`` checks; the instances stay frozen, and equality, hash
    and repr are the dataclass's own (tests/policies/test_base.py).
    """
    params, body = [], []
    namespace: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if not f.init or f.default_factory is not dataclasses.MISSING:
            raise TypeError(f"{cls.__name__}.{f.name}: _quick_init handles plain fields only")
        namespace[f"_set_{f.name}"] = getattr(cls, f.name).__set__  # the slot's member descriptor
        if f.default is dataclasses.MISSING:
            params.append(f.name)
        else:
            namespace[f"_default_{f.name}"] = f.default
            params.append(f"{f.name}=_default_{f.name}")
        body.append(f"    _set_{f.name}(self, {f.name})")
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()")
    source = f"def __init__(self, *, {', '.join(params)}):\n" + ("\n".join(body) or "    pass") + "\n"
    exec(source, namespace)  # as dataclasses itself builds __init__
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = cls.__init__.__doc__
    init.__annotations__ = dict(cls.__init__.__annotations__)
    cls.__init__ = init


EVENT_TYPES: tuple[type[Event], ...] = (
    ComputeDone,
    PushArrived,
    PullDone,
    TimerFired,
    WorkerLeaving,
    WorkerLeft,
    WorkerJoined,
    ModelArrived,
    AllReduceDone,
    ForecastDone,
)
COMMAND_TYPES: tuple[type[Command], ...] = (
    Compute,
    Push,
    Apply,
    Drop,
    Pull,
    Multicast,
    AllReduce,
    SetTimer,
    Note,
    Forecast,
)
for _cls in EVENT_TYPES + COMMAND_TYPES:
    _quick_init(_cls)


# --------------------------------------------------------------------- policy
@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyContext:
    """What a policy knows about the job when it is created."""

    workers: int
    batch_size: int
    lr: float
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))
    # per-worker memory caps on the batch, as a cluster reports them (empty: none)
    max_batch: tuple[int, ...] = ()
    # bytes of one model transfer (the scenario's model_bytes or the real size)
    model_bytes: int = 0
    # values of each parameter tensor, in the flat vector's order (empty: not known)
    param_sizes: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"PolicyContext.workers must be >= 1, got {self.workers}")
        if self.batch_size < 1:
            raise ValueError(f"PolicyContext.batch_size must be >= 1, got {self.batch_size}")
        if not self.lr > 0:
            raise ValueError(f"PolicyContext.lr must be > 0, got {self.lr}")


class Policy:
    """Base class: subclasses set the class attributes and the two handlers.

    ``start`` returns the first commands; ``on_event`` returns the commands
    an event triggers. Commands are executed by the driver in list order.

    Parameters. A policy with parameters declares them as a frozen,
    keyword-only dataclass, one field per parameter with its default, help
    and bounds (:func:`param`), names it in ``config_class`` and narrows the
    type of ``config``; it then reads them typed, as ``self.config.s``::

        @dataclass(frozen=True, kw_only=True)
        class SSPConfig(PolicyConfig):
            s: int = param(3, help="staleness bound in steps", ge=0)

        class SSP(Policy):
            name = "ssp"
            summary = "..."
            config_class = SSPConfig
            config: SSPConfig

    The spec ``ssp:s=2`` (or ``make_policy("ssp", ctx, s=2)``) is parsed
    against it: unknown keys, types, choices and bounds are refused with a
    message naming the policy and the parameter; ``hetsync policies`` lists
    the fields with their defaults and help; the label shows their values. A
    policy without parameters declares nothing (its config is an empty
    ``PolicyConfig``). Checks that need the job (``b`` < workers) stay in
    ``__init__``, raising ``BadInput`` the same way.
    """

    name: ClassVar[str]
    summary: ClassVar[str]
    config_class: ClassVar[type[PolicyConfig]] = PolicyConfig
    config: PolicyConfig
    # "ps": parameter server (push / pull / apply); "p2p": peer to peer
    topology: ClassVar[str] = "ps"
    # every exchange is a round that closes with one Apply of the mean of its pushes
    # (``collective_kind`` "grad": the batch-weighted mean gradient over the workers that
    # computed in it; "delta": the equal-weight mean of every live worker's delta), each
    # of whom then pulls: a data plane may all-reduce the round among the workers instead
    # (hetsync.runtime.collective)
    collective: ClassVar[bool] = False
    collective_kind: ClassVar[str] = "grad"
    # the runtime (real processes) does not implement it yet: a run on real processes is
    # refused before any process starts (hetsync.driver.policy_labels with driver="dist")
    simulator_only: ClassVar[bool] = False
    # its pushes and pulls move fragments, ranges of the model (Streaming DiLoCo): the
    # parameter-server path on one server carries them (not sharded servers)
    fragmented: ClassVar[bool] = False
    # it handles ``WorkerJoined`` (a worker that left, or had not started, is back): a
    # driver refuses a run in which workers join for a policy without it (BadInput)
    takes_joins: ClassVar[bool] = False

    def __init__(self, ctx: PolicyContext, **params: object) -> None:
        self.ctx = ctx
        self.n = ctx.workers
        self.config = parse_config(self.name, self.config_class, params, workers=ctx.workers)

    def start(self, now_s: float) -> list[Command]:
        raise NotImplementedError

    def on_event(self, event: Event) -> list[Command]:
        raise NotImplementedError

    # Bounds the contract test checks; None where the policy promises none.
    def step_gap_bound(self) -> int | None:
        """Largest allowed (own step number − slowest worker's completed steps)
        when a worker starts a step."""
        return None

    # Checkpoints (runtime --checkpoint-dir, --resume): what the policy has
    # learned and must carry over a restart — predictors, measured intervals,
    # counters that decide what is late. Plain JSON-able data only: numbers,
    # strings, None, lists and dicts with string keys (the checkpoint loads
    # with weights_only=True and refuses pickles). What is in flight when the
    # checkpoint is saved (an open round's pushes, a worker's place in it)
    # does not survive: the resumed run starts every worker afresh from the
    # checkpoint's global model, as at a start, and ``start`` is called after
    # ``load_state_dict``. Policies that learn nothing keep nothing.
    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    # Stale gradients (hetsync.algos.staleness): a policy whose Apply commands
    # may set ``compensate`` returns True here, from its start on, so that the
    # server keeps the model each worker computes on (the one it last pulled,
    # and one on its way). That is up to two models per worker besides the
    # global one; the simulator's workers share those tensors anyway, the
    # runtime's server holds them as extra copies.
    def needs_base_models(self) -> bool:
        """Whether the server must keep the models workers compute on (delay compensation)."""
        return False

    # Optimizers (hetsync.recipe): a policy decides what is combined and when,
    # the optimizers how an update moves a model. Most policies take the
    # scenario's recipe. A policy whose recipe fixes one (DiLoCo's outer
    # Nesterov momentum, its inner AdamW) returns it here as a plain mapping
    # in the scenario's format, e.g. ``{"name": "sgd", "lr": 0.7,
    # "momentum": 0.9, "nesterov": True}``; None keeps the scenario's.
    def outer_optimizer(self) -> dict[str, Any] | None:
        """The server's step on delta pushes (pseudo-gradients)."""
        return None

    def local_optimizer(self) -> dict[str, Any] | None:
        """The workers' local steps."""
        return None

    @property
    def label(self) -> str:
        """The name with every parameter's value: ``ssp(s=3)``; a quiet
        parameter (a staleness remedy) only when it is set:
        ``ssp(s=3,lr_scale=inverse)``."""
        values = config_values(self.config)
        shown = [
            f"{p.name}={values[p.name]}"
            for p in config_params(type(self.config))
            if not p.quiet or values[p.name] != p.default
        ]
        return f"{self.name}({','.join(shown)})" if shown else self.name


def state_list(policy: str, state: dict[str, Any], key: str, length: int) -> list[Any]:
    """``state[key]``, a list of ``length`` values (one per worker, usually);
    ValueError naming the key otherwise (a checkpoint of another run)."""
    values = state.get(key)
    if not isinstance(values, list) or len(values) != length:
        raise ValueError(f"policy {policy!r}: checkpoint state {key!r} must be a list of {length} values")
    return values


# ------------------------------------------------------------------ joins
def admit(alive: set[int], joining: set[int], worker: int) -> bool:
    """A round policy hears ``WorkerJoined(worker)``: True when the worker
    starts at once (no live worker, so no round is in flight; it is made live
    now), else it waits in ``joining`` for the round in flight to close."""
    if worker in alive:
        return False  # (already live: nothing to do)
    if alive:
        joining.add(worker)
        return False
    joining.discard(worker)
    alive.add(worker)
    return True


def take_joiners(alive: set[int], joining: set[int]) -> None:
    """A round closes: the workers that joined during it are live from the next one on."""
    if joining:
        alive |= joining
        joining.clear()


def slowest_clock(clock: Sequence[int], alive: AbstractSet[int], worker: int) -> int:
    """The clock a joining worker takes under a bounded gap (SSP, DSSP): the
    slowest live worker's, so it neither holds the others back (an old, low
    clock would) nor runs ahead of them; its own when no one else is live."""
    others = [clock[w] for w in alive if w != worker]
    return min(others) if others else clock[worker]


# ------------------------------------------------------------- round closes
def everyone_pushed(pushes: Sequence[PushArrived], workers: AbstractSet[int]) -> bool:
    """True when the open round holds a push, and one from each of ``workers``
    (the live ones): a barrier round may close."""
    # (fewer pushes than workers cannot cover them: the set is built only then,
    # not on every arrival, which made a round of W pushes cost O(W^2))
    return bool(pushes) and len(pushes) >= len(workers) and workers <= {p.worker for p in pushes}


def apply_and_pull(
    pushes: Sequence[PushArrived], *, lr: float = 0.0, equal_weights: bool = False, next_steps: Iterable[Compute] = ()
) -> list[Command]:
    """Close a synchronous round: apply its ``pushes`` as one update, weighted
    by their samples (the round's mean gradient over its global batch) or, with
    ``equal_weights``, 1/k each (the mean of k model deltas); then every worker
    of ``next_steps`` pulls the new model and starts that step on arrival."""
    if equal_weights:
        weight = 1.0 / len(pushes)
        contributions = tuple((p.push_id, weight) for p in pushes)
    else:
        total = sum(p.samples for p in pushes)
        contributions = tuple((p.push_id, p.samples / total) for p in pushes)
    return [Apply(contributions=contributions, lr=lr), *(Pull(worker=c.worker, then=c) for c in next_steps)]
