"""Wire format between the server (rank 0) and the workers (ranks 1..N).

The messages are frozen dataclasses, one per kind (as h11 separates events
from the code that reads and writes them): ``encode()`` gives the header
tensor and the classmethod ``decode(hdr)`` reads it back, side by side in
each class; :func:`decode_command` / :func:`decode_report` pick the class from
the type bits, and :class:`Channel` sends and receives messages with their
payload (:meth:`Channel.pack_message`, :meth:`Channel.recv_command`,
:meth:`Channel.recv_report`).
On the Python side every time is a float in seconds since the run's epoch;
only the wire carries microseconds.

On the wire every message is a fixed header of 40 int64 values, optionally
followed by one flat float32 model-sized tensor (a model going to a worker, a
gradient, delta or model coming back) or by a fragment's (Streaming DiLoCo:
the float32 values of a range of the global model going to a worker, the
bytes of a range's quantized delta coming back,
:func:`hetsync.algos.quantize.encode`; the header gives the range and the
size), and by a short list where its header counts one (a multicast's receivers, an all-reduce's ring: int64; a push's
optimizer settings: float64, see :class:`Pushed`). No pickled Python objects
cross the wire. Floats in a header are carried as the bits of a float64. The header's
slots (``H_*``, ``R_*``) and type bits (``C_*``, ``R_*``) below are the
layout (``header()``, ``put_float``/``get_float`` read and write it by hand,
as the layout tests do).

Parameter-server runs: one command message makes exactly one report message:

- server → worker: :class:`ResetCmd` (+ model: a run starts from the
  server's model), :class:`WorkCmd` (a standalone push, a pull + model, a
  step that may push right after: any of the three, done in that order; a
  continuous step repeats, each reported, until :class:`HaltCmd`),
  :class:`StopCmd` (end of run), :class:`ExitCmd` (end of process).
- worker → server: :class:`WorkDone` saying which of pulled / computed /
  pushed (+ payload) happened, :class:`ResetDone` after a reset, :class:`Bye`
  after ``STOP``, or :class:`Leaving` + the worker's model (a worker running
  its own training loop, :mod:`hetsync.loop`, has reached its end: the server
  counts it as gone, keeps a peer-to-peer worker's model for the final
  evaluation, and answers ``EXIT``).

Peer-to-peer runs (``ResetCmd(p2p=True)``; rank 0 is then only the
coordinator, see :mod:`hetsync.runtime.coordinator`) add:

- :class:`MulticastCmd` to the sender, followed by an int64 tensor of its
  receivers; it owes no report (the receivers report).
- :class:`ExpectCmd` to each receiver (``sender``): answered by
  :class:`Arrived` when the copy has arrived (:class:`Lost` if it never can).
- :class:`AllReduceCmd` to each participant, followed by an int64 tensor of
  the workers in ring order: answered by :class:`Reduced` (or :class:`Lost`).
- :class:`AbortCmd`: give up an exchange (a participant died); no report.
- :class:`FetchCmd`: evaluation only: answered at once, even during a step,
  by :class:`Fetched` + the worker's current model.

On the collective path a checkpoint sends :class:`SnapshotCmd` (a version)
to every worker: each saves its copies of the server's optimizers once its
model is at that version, and the one asked answers :class:`Snapshot` + the
model.

Every peer-to-peer command carries the exchange id the server gave it; the
reports name it. Model copies (behind a :class:`CopyHeader`) and all-reduce
chunks travel worker to worker with the tag :func:`exchange_tag`, never
through rank 0.

Times on the wire are microseconds since the run's epoch, a wall-clock
instant the server sends with ``RESET`` (so workers on one machine share the
server's clock).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar, Literal, TypeVar

import torch

from hetsync.policies.base import Fragment
from hetsync.runtime.session import Link, as_link

HEADER_LEN = 40

# server → worker: H_TYPE bits
C_RESET, C_PULL, C_COMPUTE, C_PUSH, C_STOP, C_EXIT = 1, 2, 4, 8, 16, 32
C_MULTICAST, C_EXPECT, C_ALLREDUCE, C_ABORT, C_FETCH = 64, 128, 256, 512, 1024
C_HALT = 2048  # stop repeating a continuous COMPUTE (after the step in progress); no report
C_SNAPSHOT = 4096  # collective path: save the round state at a version (checkpoints); SNAPSHOT answers with the model
C_LEAVE_GROUP = 8192  # collective path: the workers' group is broken (a member died); no report
# server → worker fields
(
    H_TYPE,
    H_VERSION,
    H_BATCH,
    H_LR,
    H_HAS_LR,
    H_PUSH_AFTER,
    H_PUSH_KIND,
    H_SENT_US,
    H_EPOCH_US,
    H_RUN,
    H_P2P,  # RESET: the run is peer to peer
    H_EXCH,  # p2p commands: the exchange id
    H_PEER,  # EXPECT: the sender
    H_NPEERS,  # MULTICAST / ALLREDUCE: length of the worker list that follows
    H_FIRST_STEP,  # RESET: the worker's first step number (a resumed run goes on from its checkpoint)
    H_DRAWN,  # RESET: samples the worker's sampler drew before (skipped, so the data order goes on)
    H_CONTINUOUS,  # COMPUTE: repeat the step, each reported, until HALT (Compute.continuous)
    H_COLLECTIVE,  # RESET: gradient rounds are all-reduced among the workers (hetsync.runtime.collective)
    H_APPLY,  # PULL in a collective run: apply the round just reduced (no model follows)
    H_APPLY_LR,  # float bits: ... at this learning rate
    H_SEND_MODEL,  # SNAPSHOT: answer with the model
    H_PUSH_LO,  # PUSH of a fragment (Streaming DiLoCo): its range [lo, hi) ...
    H_PUSH_HI,
    H_PUSH_BITS,  # ... and the width its delta travels at (0: the whole model's push)
    H_PULL_LO,  # PULL of a fragment: the range [lo, hi) of the global model (hi 0: the whole model) ...
    H_PULL_HI,
    H_KEEP,  # float bits: ... and the share of its own values the worker keeps when it merges it
    H_MERGE,  # COMPUTE: merge the fragments pulled so far, then step (StepOrder.merge)
    H_PULL_BITS,  # PULL of a fragment: 0, its float32 values come; else the mean of its deltas, at this width ...
    H_PULL_NBYTES,  # ... in this many bytes (the worker takes the outer step itself)
    H_HAS_CLOCK,  # COMPUTE: set the worker's schedule clock first (Compute.sync_clock: the server's) ...
    H_CLOCK,  # float bits: ... to this
) = range(32)

# worker → server: R_TYPE bits
R_PULLED, R_COMPUTED, R_PUSHED, R_BYE, R_RESET = 1, 2, 4, 8, 16
R_ARRIVED, R_REDUCED, R_FETCHED, R_LOST = 32, 64, 128, 256
R_LEAVING = 512  # the worker's own training loop has ended (hetsync.loop): it leaves the run
R_BUFFERS = 1024  # the module's buffers (BatchNorm statistics) at the head of the payload (hetsync.loop)
R_SNAPSHOT = 2048  # answers SNAPSHOT: the model at the version asked for (+ the model)
# worker → server fields
(
    R_TYPE,
    R_VERSION,
    R_PULL_END_US,
    R_C_START_US,
    R_C_END_US,
    R_STEP,
    R_BATCH,
    R_BASE,
    R_P_KIND,
    R_P_STEPS,
    R_P_SAMPLES,
    R_P_BASE,
    R_P_START_US,
    R_REPLACED,
    R_OVERWRITTEN,
    R_LOAD,  # float bits: the background load the worker saw during the step
    R_PULL_START_US,  # when the pull began for the worker: sent, and the worker free to take it
    R_UP_BPS,  # float bits: available uplink at the end of the step (inf unthrottled)
    R_DOWN_BPS,  # float bits: available downlink at the end of the step
    R_COMMITTED,  # p2p: local steps the step committed (the step is the update)
    R_EXCH,  # p2p reports: the exchange id
    R_PEER,  # R_ARRIVED / R_LOST: the sender of the copy
    R_X_START_US,  # R_ARRIVED: the multicast's start at the sender; R_REDUCED: the ring's start here
    R_X_COPY_US,  # R_ARRIVED: when this copy began to leave the sender's uplink
    R_X_END_US,  # R_ARRIVED: arrival; R_REDUCED: the end of the ring here
    R_NHYPER,  # with a gradient push: how many float64 optimizer settings follow the message (Pushed.hyper)
    R_WEIGHT,  # float bits, R_FETCHED / R_LEAVING (p2p): the model's push-sum weight; 0 bits: none (1.0)
    R_COMM_S,  # float bits: the worker's transfer time since its previous report that no step overlapped
    R_P_CARRIED,  # the push went into the round's all-reduce (collective path): no payload follows
    R_P_LO,  # a fragment's push: its range [lo, hi) ...
    R_P_HI,
    R_P_BITS,  # ... its width (0: the whole model's push) ...
    R_P_NBYTES,  # ... and the bytes of its message (the payload: uint8)
    R_PULL_LO,  # a fragment's pull: the range [lo, hi) it moved (hi 0: the whole model)
    R_PULL_HI,
    R_PULL_BITS,  # ... and its width (0: the float32 values; else the mean of its deltas)
) = range(36)

KINDS = {"grad": 1, "delta": 2}
KIND_NAMES = {v: k for k, v in KINDS.items()}


PushKind = Literal["grad", "delta"]


def header() -> torch.Tensor:
    return torch.zeros(HEADER_LEN, dtype=torch.int64)


def put_float(h: torch.Tensor, index: int, value: float) -> None:
    h[index] = _bits(value)


def get_float(h: torch.Tensor, index: int) -> float:
    return _float(int(h[index]))


def to_us(seconds: float) -> int:
    return round(seconds * 1e6)


def from_us(us: int) -> float:
    return us / 1e6


def _bits(value: float) -> int:
    return int(struct.unpack("<q", struct.pack("<d", value))[0])


def _float(bits: int) -> float:
    return float(struct.unpack("<d", struct.pack("<q", bits))[0])


_ONE_BITS = struct.unpack("<q", struct.pack("<d", 1.0))[0]


def _bits_or_unset(value: float) -> int:
    """For slots whose 0 bits mean "unset, 1.0": the value's bits XOR 1.0's, so 1.0 travels as 0 and
    every float (0.0 and -0.0 included) comes back bit for bit."""
    return _bits(value) ^ _ONE_BITS


def _float_or_one(bits: int) -> float:
    return _float(bits ^ _ONE_BITS)


def _header(fields: dict[int, int]) -> torch.Tensor:
    h = [0] * HEADER_LEN
    for index, value in fields.items():
        h[index] = value
    return torch.tensor(h, dtype=torch.int64)


def _kind_name(number: int) -> PushKind:
    if number not in KIND_NAMES:
        raise ValueError(f"push kind {number} is not one of {sorted(KIND_NAMES)} (a header out of step?)")
    return KIND_NAMES[number]  # type: ignore[return-value]


def _check_kind(name: str, kind: str | None) -> None:
    if kind is not None and kind not in KINDS:
        raise ValueError(f"{name}={kind!r}: a push kind is one of {sorted(KINDS)}")


# ------------------------------------------------------------- commands
# Each message writes its slots in ``encode`` and reads them in ``decode``, side
# by side; decode_command / decode_report pick the class from the type bits.
@dataclass(frozen=True, slots=True, kw_only=True)
class ResetCmd:
    """A run starts (the payload: the server's model at ``version``)."""

    TYPE: ClassVar[int] = C_RESET
    epoch_s: float  # the run's epoch as time.time() (workers on one machine share the server's clock)
    version: int
    run: int  # the run's index among the process's policy specs
    p2p: bool = False  # the run is peer to peer
    first_step: int = 0  # the worker's first step number (a resumed run goes on from its checkpoint)
    drawn: int = 0  # samples the worker's sampler drew before (skipped, so the data order goes on)
    collective: bool = False  # gradient rounds are all-reduced among the workers (hetsync.runtime.collective)

    def encode(self) -> torch.Tensor:
        f = {H_TYPE: C_RESET, H_EPOCH_US: to_us(self.epoch_s), H_VERSION: self.version, H_RUN: self.run}
        f |= {H_COLLECTIVE: int(self.collective)}
        return _header(f | {H_P2P: int(self.p2p), H_FIRST_STEP: self.first_step, H_DRAWN: self.drawn})

    @classmethod
    def decode(cls, hdr: torch.Tensor, peers: tuple[int, ...] = ()) -> ResetCmd:
        h = hdr.tolist()
        return cls(
            epoch_s=from_us(h[H_EPOCH_US]),
            version=h[H_VERSION],
            run=h[H_RUN],
            p2p=bool(h[H_P2P]),
            first_step=h[H_FIRST_STEP],
            drawn=h[H_DRAWN],
            collective=bool(h[H_COLLECTIVE]),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class PullOrder:
    """The pull part of a :class:`WorkCmd` (the payload: the global model;
    none when ``apply_lr`` is set: a collective run's worker takes the round
    it has just reduced at that learning rate, and is then at ``version``)."""

    version: int
    sent_s: float  # when the server sent it
    apply_lr: float | None = None
    span: tuple[int, int] | None = None  # a fragment's range [lo, hi): its values come, held until a merge
    keep: float = 0.0  # ... and the share of the worker's own values its merge keeps
    mean_bits: int = 0  # ... or the mean of its deltas comes, at this width (the worker takes the outer step)
    nbytes: int = 0  # ... in this many bytes

    def __post_init__(self) -> None:
        if self.span is not None and not 0 <= self.span[0] < self.span[1]:
            raise ValueError(f"PullOrder.span={self.span!r} is not a range [lo, hi) with 0 <= lo < hi")
        if self.span is not None and self.apply_lr is not None:
            raise ValueError("PullOrder: a fragment's pull carries its values; apply_lr is the collective path's")


@dataclass(frozen=True, slots=True, kw_only=True)
class StepOrder:
    """The step part of a :class:`WorkCmd`."""

    batch_size: int
    local_lr: float | None = None  # a local step at this learning rate; None: compute a gradient
    push_after: PushKind | None = None  # push this right after the step
    continuous: bool = False  # start the step again as each is reported, until HaltCmd
    merge: bool = False  # first merge the fragments pulled and held (Streaming DiLoCo)
    clock: float | None = None  # the schedule clock to take this local step at (Compute.sync_clock: the server's)

    def __post_init__(self) -> None:
        _check_kind("push_after", self.push_after)


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkCmd:
    """A standalone push, a pull, a step: any of them, done in that order."""

    TYPE: ClassVar[int] = C_PUSH | C_PULL | C_COMPUTE  # any non-empty subset
    push: PushKind | None = None
    push_fragment: Fragment | None = None  # the push is of this range's delta only (Streaming DiLoCo)
    pull: PullOrder | None = None
    step: StepOrder | None = None

    def __post_init__(self) -> None:
        _check_kind("push", self.push)
        if self.push_fragment is not None and self.push != "delta":
            raise ValueError(f"WorkCmd.push_fragment needs push 'delta', got {self.push!r}")
        if self.push is None and self.pull is None and self.step is None:
            raise ValueError("WorkCmd: give push, pull or step (an empty command owes no report)")

    def encode(self) -> torch.Tensor:
        f = {H_TYPE: 0}
        if self.push is not None:
            f[H_TYPE] |= C_PUSH
            f[H_PUSH_KIND] = KINDS[self.push]
            if (frag := self.push_fragment) is not None:
                f |= {H_PUSH_LO: frag.lo, H_PUSH_HI: frag.hi, H_PUSH_BITS: frag.bits}
        if self.pull is not None:
            f[H_TYPE] |= C_PULL
            f |= {H_VERSION: self.pull.version, H_SENT_US: to_us(self.pull.sent_s)}
            if self.pull.apply_lr is not None:
                f |= {H_APPLY: 1, H_APPLY_LR: _bits(self.pull.apply_lr)}
            if self.pull.span is not None:
                f |= {H_PULL_LO: self.pull.span[0], H_PULL_HI: self.pull.span[1], H_KEEP: _bits(self.pull.keep)}
                f |= {H_PULL_BITS: self.pull.mean_bits, H_PULL_NBYTES: self.pull.nbytes}
        if (s := self.step) is not None:
            f[H_TYPE] |= C_COMPUTE
            f |= {H_BATCH: s.batch_size, H_CONTINUOUS: int(s.continuous), H_MERGE: int(s.merge)}
            if s.local_lr is not None:
                f |= {H_HAS_LR: 1, H_LR: _bits(s.local_lr)}
            if s.clock is not None:
                f |= {H_HAS_CLOCK: 1, H_CLOCK: _bits(s.clock)}
            f[H_PUSH_AFTER] = KINDS[s.push_after] if s.push_after is not None else 0
        return _header(f)

    @classmethod
    def decode(cls, hdr: torch.Tensor, peers: tuple[int, ...] = ()) -> WorkCmd:
        h = hdr.tolist()
        t, step = h[H_TYPE], None
        if t & C_COMPUTE:
            step = StepOrder(
                batch_size=h[H_BATCH],
                local_lr=_float(h[H_LR]) if h[H_HAS_LR] else None,
                push_after=_kind_name(h[H_PUSH_AFTER]) if h[H_PUSH_AFTER] else None,
                continuous=bool(h[H_CONTINUOUS]),
                merge=bool(h[H_MERGE]),
                clock=_float(h[H_CLOCK]) if h[H_HAS_CLOCK] else None,
            )
        return cls(
            push=_kind_name(h[H_PUSH_KIND]) if t & C_PUSH else None,
            push_fragment=Fragment(lo=h[H_PUSH_LO], hi=h[H_PUSH_HI], bits=h[H_PUSH_BITS])
            if t & C_PUSH and h[H_PUSH_BITS]
            else None,
            pull=PullOrder(
                version=h[H_VERSION],
                sent_s=from_us(h[H_SENT_US]),
                apply_lr=_float(h[H_APPLY_LR]) if h[H_APPLY] else None,
                span=(h[H_PULL_LO], h[H_PULL_HI]) if h[H_PULL_HI] else None,
                keep=_float(h[H_KEEP]) if h[H_PULL_HI] else 0.0,
                mean_bits=h[H_PULL_BITS],
                nbytes=h[H_PULL_NBYTES],
            )
            if t & C_PULL
            else None,
            step=step,
        )


_B = TypeVar("_B", bound="_Bare")


@dataclass(frozen=True, slots=True, kw_only=True)
class _Bare:
    """A command or report that is its type bits alone."""

    TYPE: ClassVar[int]

    def encode(self) -> torch.Tensor:
        return _header({H_TYPE: self.TYPE})  # (R_TYPE is the same slot)

    @classmethod
    def decode(cls: type[_B], hdr: torch.Tensor, peers: tuple[int, ...] = ()) -> _B:
        return cls()


@dataclass(frozen=True, slots=True, kw_only=True)
class StopCmd(_Bare):
    """The run is over: answer :class:`Bye`; nothing of the run reports after it."""

    TYPE: ClassVar[int] = C_STOP


@dataclass(frozen=True, slots=True, kw_only=True)
class HaltCmd(_Bare):
    """Stop repeating a continuous step once the one in progress is reported; no report."""

    TYPE: ClassVar[int] = C_HALT


@dataclass(frozen=True, slots=True, kw_only=True)
class ExitCmd(_Bare):
    """The process is over."""

    TYPE: ClassVar[int] = C_EXIT


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchCmd(_Bare):
    """Evaluation: answer at once, even during a step, with :class:`Fetched` + the model."""

    TYPE: ClassVar[int] = C_FETCH


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaveGroupCmd(_Bare):
    """Collective path: a member of the workers' group has died and the run
    goes on through rank 0; a round's all-reduce still waited for will not
    end, so stop waiting (no report). A survivor whose part of the ring did
    not touch the dead member learns it only from this."""

    TYPE: ClassVar[int] = C_LEAVE_GROUP


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotCmd:
    """Collective path, a checkpoint: once this worker's model is at
    ``version`` (the round's pull may still be on its way), save the state of
    its copies of the server's optimizers beside the checkpoint, and with
    ``send_model`` answer :class:`Snapshot` + the model (else no report)."""

    TYPE: ClassVar[int] = C_SNAPSHOT
    version: int
    send_model: bool = False

    def encode(self) -> torch.Tensor:
        return _header({H_TYPE: C_SNAPSHOT, H_VERSION: self.version, H_SEND_MODEL: int(self.send_model)})

    @classmethod
    def decode(cls, hdr: torch.Tensor, peers: tuple[int, ...] = ()) -> SnapshotCmd:
        return cls(version=int(hdr[H_VERSION]), send_model=bool(int(hdr[H_SEND_MODEL])))


@dataclass(frozen=True, slots=True, kw_only=True)
class MulticastCmd:
    """Send a snapshot of the model to ``receivers`` (followed by their list; owes no report)."""

    TYPE: ClassVar[int] = C_MULTICAST
    exchange: int
    receivers: tuple[int, ...]

    def encode(self) -> torch.Tensor:
        return _header({H_TYPE: C_MULTICAST, H_EXCH: self.exchange, H_NPEERS: len(self.receivers)})

    @classmethod
    def decode(cls, hdr: torch.Tensor, peers: tuple[int, ...] = ()) -> MulticastCmd:
        return cls(exchange=int(hdr[H_EXCH]), receivers=_listed(hdr, peers))


@dataclass(frozen=True, slots=True, kw_only=True)
class ExpectCmd:
    """A copy of ``sender``'s model is coming: answer :class:`Arrived` or :class:`Lost`."""

    TYPE: ClassVar[int] = C_EXPECT
    exchange: int
    sender: int

    def encode(self) -> torch.Tensor:
        return _header({H_TYPE: C_EXPECT, H_EXCH: self.exchange, H_PEER: self.sender})

    @classmethod
    def decode(cls, hdr: torch.Tensor, peers: tuple[int, ...] = ()) -> ExpectCmd:
        return cls(exchange=int(hdr[H_EXCH]), sender=int(hdr[H_PEER]))


@dataclass(frozen=True, slots=True, kw_only=True)
class AllReduceCmd:
    """Average the models of ``ring`` (followed by its list): answer :class:`Reduced` or :class:`Lost`."""

    TYPE: ClassVar[int] = C_ALLREDUCE
    exchange: int
    ring: tuple[int, ...]

    def encode(self) -> torch.Tensor:
        return _header({H_TYPE: C_ALLREDUCE, H_EXCH: self.exchange, H_NPEERS: len(self.ring)})

    @classmethod
    def decode(cls, hdr: torch.Tensor, peers: tuple[int, ...] = ()) -> AllReduceCmd:
        return cls(exchange=int(hdr[H_EXCH]), ring=_listed(hdr, peers))


@dataclass(frozen=True, slots=True, kw_only=True)
class AbortCmd:
    """Give up ``exchange`` (a participant died); no report."""

    TYPE: ClassVar[int] = C_ABORT
    exchange: int

    def encode(self) -> torch.Tensor:
        return _header({H_TYPE: C_ABORT, H_EXCH: self.exchange})

    @classmethod
    def decode(cls, hdr: torch.Tensor, peers: tuple[int, ...] = ()) -> AbortCmd:
        return cls(exchange=int(hdr[H_EXCH]))


def _listed(hdr: torch.Tensor, peers: tuple[int, ...]) -> tuple[int, ...]:
    if len(peers) != int(hdr[H_NPEERS]):
        raise ValueError(f"the command lists {int(hdr[H_NPEERS])} workers but {len(peers)} were given")
    return tuple(peers)


Command = (
    ResetCmd
    | WorkCmd
    | StopCmd
    | HaltCmd
    | ExitCmd
    | MulticastCmd
    | ExpectCmd
    | AllReduceCmd
    | AbortCmd
    | FetchCmd
    | LeaveGroupCmd
    | SnapshotCmd
)
_COMMANDS: dict[int, type[Command]] = {
    c.TYPE: c
    for c in (
        ResetCmd,
        StopCmd,
        HaltCmd,
        ExitCmd,
        MulticastCmd,
        ExpectCmd,
        AllReduceCmd,
        AbortCmd,
        FetchCmd,
        LeaveGroupCmd,
        SnapshotCmd,
    )
}


def peer_count(hdr: torch.Tensor) -> int | None:
    """How many workers (an int64 tensor) follow this command; None: no list follows."""
    return int(hdr[H_NPEERS]) if command_has_peers(hdr) else None


def decode_command(hdr: torch.Tensor, peers: tuple[int, ...] = ()) -> Command:
    """The command in ``hdr``; ``peers``: the list that follows a multicast or an all-reduce."""
    t = int(hdr[H_TYPE])
    cls = WorkCmd if t and not t & ~WorkCmd.TYPE else _COMMANDS.get(t)
    if cls is None:
        raise ValueError(f"not a command: type bits {t:#x} (a header out of step with the stream?)")
    return cls.decode(hdr, peers)


# -------------------------------------------------------------- reports
@dataclass(frozen=True, slots=True, kw_only=True)
class ResetDone(_Bare):
    """The worker has the run's model (answers :class:`ResetCmd`)."""

    TYPE: ClassVar[int] = R_RESET


@dataclass(frozen=True, slots=True, kw_only=True)
class Bye(_Bare):
    """The worker has ended the run (answers :class:`StopCmd`)."""

    TYPE: ClassVar[int] = R_BYE


@dataclass(frozen=True, slots=True, kw_only=True)
class Pulled:
    """The pull part of a :class:`WorkDone`."""

    version: int
    start_s: float  # when the pull began for the worker: sent, and the worker free to take it
    end_s: float
    overwritten: int = 0  # local steps the pulled model overwrote before they were pushed
    span: tuple[int, int] | None = None  # a fragment's pull: the range [lo, hi) it moved (held for a merge)
    bits: int = 0  # ... as its float32 values (0), or as the mean of its deltas at this width


@dataclass(frozen=True, slots=True, kw_only=True)
class Computed:
    """The step part of a :class:`WorkDone`."""

    step: int
    batch_size: int
    base_version: int  # the version the step computed on
    start_s: float
    end_s: float
    replaced: bool = False  # the step's model replaced the local one (a local step)
    committed: int = 0  # p2p: local steps the step committed (the step is the update)
    load: float = 1.0  # the background load the worker saw during the step
    uplink_Bps: float = float("inf")  # available at the end of the step (inf: unthrottled)
    downlink_Bps: float = float("inf")


@dataclass(frozen=True, slots=True, kw_only=True)
class Pushed:
    """The push part of a :class:`WorkDone` (the payload: the gradient or delta).

    ``hyper``: a training loop's optimizer settings for this gradient
    (:func:`hetsync.optim.hyperparameters`: each parameter group's lr,
    momentum, betas, weight decay), which the server's copy of that optimizer
    takes the step with (:mod:`hetsync.loop`). They travel only when they
    changed since the worker's previous push in the run (a schedule that
    moves them every step: a few floats per step; a constant one: once),
    after the message, as a float64 tensor of ``R_NHYPER`` values. None:
    unchanged, or no such optimizer."""

    kind: PushKind
    steps: int  # local steps in it
    samples: int
    base_version: int
    start_s: float
    hyper: tuple[float, ...] | None = None
    carried: bool = False  # it went into the round's all-reduce (collective path): no payload
    fragment: Fragment | None = None  # a fragment's delta (Streaming DiLoCo): the payload is its encoded bytes ...
    nbytes: int = 0  # ... this many

    def __post_init__(self) -> None:
        _check_kind("kind", self.kind)
        if self.fragment is not None and (self.kind != "delta" or self.carried):
            raise ValueError("Pushed.fragment: a fragment's push is a delta sent to the server")
        if self.hyper is not None and not self.hyper:
            raise ValueError("Pushed.hyper=(): give the optimizer's settings, or None when unchanged")


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkDone:
    """What a :class:`WorkCmd` did (none of the parts: nothing happened, the report is still owed)."""

    TYPE: ClassVar[int] = R_PULLED | R_COMPUTED | R_PUSHED  # any subset
    pulled: Pulled | None = None
    computed: Computed | None = None
    pushed: Pushed | None = None
    comm_s: float = 0.0  # the worker's transfer time since its previous report that no step overlapped

    def encode(self) -> torch.Tensor:
        f = {R_TYPE: 0, R_COMM_S: _bits(self.comm_s)}
        if (p := self.pulled) is not None:
            f[R_TYPE] |= R_PULLED
            f |= {R_VERSION: p.version, R_PULL_START_US: to_us(p.start_s), R_PULL_END_US: to_us(p.end_s)}
            f[R_OVERWRITTEN] = p.overwritten
            if p.span is not None:
                f |= {R_PULL_LO: p.span[0], R_PULL_HI: p.span[1], R_PULL_BITS: p.bits}
        if (c := self.computed) is not None:
            f[R_TYPE] |= R_COMPUTED
            f |= {R_STEP: c.step, R_BATCH: c.batch_size, R_BASE: c.base_version}
            f |= {R_C_START_US: to_us(c.start_s), R_C_END_US: to_us(c.end_s)}
            f |= {R_REPLACED: int(c.replaced), R_COMMITTED: c.committed, R_LOAD: _bits(c.load)}
            f |= {R_UP_BPS: _bits(c.uplink_Bps), R_DOWN_BPS: _bits(c.downlink_Bps)}
        if (s := self.pushed) is not None:
            f[R_TYPE] |= R_PUSHED
            f |= {R_P_KIND: KINDS[s.kind], R_P_STEPS: s.steps, R_P_SAMPLES: s.samples, R_P_BASE: s.base_version}
            f |= {R_P_START_US: to_us(s.start_s), R_NHYPER: len(s.hyper or ()), R_P_CARRIED: int(s.carried)}
            if (frag := s.fragment) is not None:
                f |= {R_P_LO: frag.lo, R_P_HI: frag.hi, R_P_BITS: frag.bits, R_P_NBYTES: s.nbytes}
        return _header(f)

    @classmethod
    def decode(cls, hdr: torch.Tensor, hyper: tuple[float, ...] = ()) -> WorkDone:
        """``hyper``: the float64 list that followed the header (:func:`hyper_count` values)."""
        h = hdr.tolist()
        t = h[R_TYPE]
        pulled = computed = pushed = None
        if t & R_PULLED:
            start, end = from_us(h[R_PULL_START_US]), from_us(h[R_PULL_END_US])
            pulled = Pulled(
                version=h[R_VERSION],
                start_s=start,
                end_s=end,
                overwritten=h[R_OVERWRITTEN],
                span=(h[R_PULL_LO], h[R_PULL_HI]) if h[R_PULL_HI] else None,
                bits=h[R_PULL_BITS],
            )
        if t & R_COMPUTED:
            computed = Computed(
                step=h[R_STEP],
                batch_size=h[R_BATCH],
                base_version=h[R_BASE],
                start_s=from_us(h[R_C_START_US]),
                end_s=from_us(h[R_C_END_US]),
                replaced=bool(h[R_REPLACED]),
                committed=h[R_COMMITTED],
                load=_float(h[R_LOAD]),
                uplink_Bps=_float(h[R_UP_BPS]),
                downlink_Bps=_float(h[R_DOWN_BPS]),
            )
        if t & R_PUSHED:
            pushed = Pushed(
                kind=_kind_name(h[R_P_KIND]),
                steps=h[R_P_STEPS],
                samples=h[R_P_SAMPLES],
                base_version=h[R_P_BASE],
                start_s=from_us(h[R_P_START_US]),
                hyper=_listed_floats(h[R_NHYPER], hyper),
                carried=bool(h[R_P_CARRIED]),
                fragment=Fragment(lo=h[R_P_LO], hi=h[R_P_HI], bits=h[R_P_BITS]) if h[R_P_BITS] else None,
                nbytes=h[R_P_NBYTES],
            )
        return cls(pulled=pulled, computed=computed, pushed=pushed, comm_s=_float(h[R_COMM_S]))


_W = TypeVar("_W", bound="_Weighted")


@dataclass(frozen=True, slots=True, kw_only=True)
class _Weighted:
    """A report that carries a model and its push-sum weight."""

    TYPE: ClassVar[int]
    weight: float = 1.0  # p2p: the model's push-sum weight

    def encode(self) -> torch.Tensor:
        return _header({R_TYPE: self.TYPE, R_WEIGHT: _bits_or_unset(self.weight)})

    @classmethod
    def decode(cls: type[_W], hdr: torch.Tensor) -> _W:
        return cls(weight=_float_or_one(int(hdr[R_WEIGHT])))


@dataclass(frozen=True, slots=True, kw_only=True)
class Leaving(_Weighted):
    """The worker's own training loop has ended (+ its model): it leaves the run."""

    TYPE: ClassVar[int] = R_LEAVING


@dataclass(frozen=True, slots=True, kw_only=True)
class Buffers(_Bare):
    """The worker module's buffers (BatchNorm running statistics), flat, at
    the head of a model-sized payload: the server averages the workers' last
    ones into the model it evaluates and saves (:mod:`hetsync.loop`). Owes
    nothing and answers nothing."""

    TYPE: ClassVar[int] = R_BUFFERS


@dataclass(frozen=True, slots=True, kw_only=True)
class Fetched(_Weighted):
    """The worker's model as it is (+ the model; answers :class:`FetchCmd`)."""

    TYPE: ClassVar[int] = R_FETCHED


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    """The worker's model at ``version`` (+ the model; answers :class:`SnapshotCmd`)."""

    TYPE: ClassVar[int] = R_SNAPSHOT
    version: int

    def encode(self) -> torch.Tensor:
        return _header({R_TYPE: R_SNAPSHOT, R_VERSION: self.version})

    @classmethod
    def decode(cls, hdr: torch.Tensor) -> Snapshot:
        return cls(version=int(hdr[R_VERSION]))


@dataclass(frozen=True, slots=True, kw_only=True)
class Arrived:
    """``sender``'s copy of exchange ``exchange`` has arrived here."""

    TYPE: ClassVar[int] = R_ARRIVED
    exchange: int
    sender: int
    start_s: float  # the multicast's start at the sender
    copy_start_s: float  # when this copy began to leave the sender's uplink
    end_s: float  # its arrival

    def encode(self) -> torch.Tensor:
        f = {R_TYPE: R_ARRIVED, R_EXCH: self.exchange, R_PEER: self.sender, R_X_START_US: to_us(self.start_s)}
        return _header(f | {R_X_COPY_US: to_us(self.copy_start_s), R_X_END_US: to_us(self.end_s)})

    @classmethod
    def decode(cls, hdr: torch.Tensor) -> Arrived:
        h = hdr.tolist()
        return cls(
            exchange=h[R_EXCH],
            sender=h[R_PEER],
            start_s=from_us(h[R_X_START_US]),
            copy_start_s=from_us(h[R_X_COPY_US]),
            end_s=from_us(h[R_X_END_US]),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Reduced:
    """The all-reduce ``exchange`` is done here; the model is the ring's average."""

    TYPE: ClassVar[int] = R_REDUCED
    exchange: int
    start_s: float  # the ring's start here
    end_s: float

    def encode(self) -> torch.Tensor:
        f = {R_TYPE: R_REDUCED, R_EXCH: self.exchange}
        return _header(f | {R_X_START_US: to_us(self.start_s), R_X_END_US: to_us(self.end_s)})

    @classmethod
    def decode(cls, hdr: torch.Tensor) -> Reduced:
        h = hdr.tolist()
        return cls(exchange=h[R_EXCH], start_s=from_us(h[R_X_START_US]), end_s=from_us(h[R_X_END_US]))


@dataclass(frozen=True, slots=True, kw_only=True)
class Lost:
    """Exchange ``exchange`` can never complete here (a member died)."""

    TYPE: ClassVar[int] = R_LOST
    exchange: int
    sender: int | None = None  # the copy's sender; None: an all-reduce

    def encode(self) -> torch.Tensor:
        sender = -1 if self.sender is None else self.sender
        return _header({R_TYPE: R_LOST, R_EXCH: self.exchange, R_PEER: sender})

    @classmethod
    def decode(cls, hdr: torch.Tensor) -> Lost:
        sender = int(hdr[R_PEER])
        return cls(exchange=int(hdr[R_EXCH]), sender=sender if sender >= 0 else None)


Report = ResetDone | Bye | WorkDone | Leaving | Buffers | Fetched | Snapshot | Arrived | Reduced | Lost
_REPORTS: dict[int, type[Report]] = {
    r.TYPE: r for r in (ResetDone, Bye, Leaving, Buffers, Fetched, Snapshot, Arrived, Reduced, Lost)
}


def decode_report(hdr: torch.Tensor, hyper: tuple[float, ...] = ()) -> Report:
    """The report in ``hdr``; ``hyper``: the optimizer settings that follow a push (:func:`hyper_count`)."""
    t = int(hdr[R_TYPE])
    if not t & ~WorkDone.TYPE:  # (any subset of its parts, none included)
        return WorkDone.decode(hdr, hyper)
    cls = _REPORTS.get(t)
    if cls is None:
        raise ValueError(f"not a report: type bits {t:#x} (a header out of step with the stream?)")
    return cls.decode(hdr)


HYPER_MAX = 1 << 16  # optimizer settings after one push, at most (a larger count: a header out of step)


def hyper_count(hdr: torch.Tensor) -> int:
    """How many float64 optimizer settings follow this report (0: none)."""
    t = int(hdr[R_TYPE])
    count = int(hdr[R_NHYPER]) if t & R_PUSHED and not t & ~WorkDone.TYPE else 0
    if not 0 <= count <= HYPER_MAX:
        raise ValueError(f"a push followed by {count} optimizer settings (a header out of step with the stream?)")
    return count


def _listed_floats(count: int, values: tuple[float, ...]) -> tuple[float, ...] | None:
    if len(values) != count:
        raise ValueError(f"the report lists {count} optimizer settings but {len(values)} were given")
    return tuple(values) if count else None


# ------------------------------------------------------ worker to worker
COPY_HDR_LEN = 8  # a model copy is one float32 message: this many int64 header slots, then the model
CP_EXCH, CP_SENDER, CP_START_US, CP_COPY_US, CP_UP_END_US, CP_WEIGHT = range(6)


@dataclass(frozen=True, slots=True, kw_only=True)
class CopyHeader:
    """What travels in front of a multicast's model copy (:mod:`hetsync.runtime.p2p`)."""

    exchange: int
    sender: int
    start_s: float  # the multicast's start at the sender
    copy_start_s: float  # when this copy begins to leave the sender's uplink
    up_end_s: float  # when it has left it
    weight: float  # the copy's push-sum weight

    def encode(self) -> torch.Tensor:
        h = [self.exchange, self.sender, to_us(self.start_s), to_us(self.copy_start_s), to_us(self.up_end_s)]
        return torch.tensor([*h, _bits(self.weight), 0, 0], dtype=torch.int64)

    @classmethod
    def decode(cls, hdr: torch.Tensor) -> CopyHeader:
        h = hdr.tolist()
        return cls(
            exchange=h[CP_EXCH],
            sender=h[CP_SENDER],
            start_s=from_us(h[CP_START_US]),
            copy_start_s=from_us(h[CP_COPY_US]),
            up_end_s=from_us(h[CP_UP_END_US]),
            weight=_float(h[CP_WEIGHT]),
        )


# --------------------------------------------------------------- channel
FUSE_LIMIT_PARAMS = 1 << 18  # models up to 1 MB travel in the same message as their header
_HDR_F32 = 2 * HEADER_LEN  # float32 slots that carry the int64 header


PayloadShape = tuple[torch.dtype, int]
"""A payload's dtype and length: a model's (float32, n_params), a fragment's values
(float32, hi − lo), a fragment's encoded delta (uint8, its bytes)."""


def command_payload(hdr: torch.Tensor, n_params: int) -> PayloadShape | None:
    """What follows a command: the model (RESET, a pull), a fragment's values, or nothing."""
    t = int(hdr[H_TYPE])
    if t & C_PULL and (hi := int(hdr[H_PULL_HI])):
        if int(hdr[H_PULL_BITS]):
            return torch.uint8, int(hdr[H_PULL_NBYTES])
        return torch.float32, hi - int(hdr[H_PULL_LO])
    return (torch.float32, n_params) if command_has_payload(hdr) else None


def report_payload(hdr: torch.Tensor, n_params: int) -> PayloadShape | None:
    """What follows a report: a model, a gradient or delta, a fragment's encoded delta, or nothing."""
    if int(hdr[R_TYPE]) & R_PUSHED and int(hdr[R_P_BITS]) and not int(hdr[R_P_CARRIED]):
        return torch.uint8, int(hdr[R_P_NBYTES])
    return (torch.float32, n_params) if report_has_payload(hdr) else None


def command_has_payload(hdr: torch.Tensor) -> bool:
    t = int(hdr[H_TYPE])
    return bool(t & C_RESET or (t & C_PULL and not int(hdr[H_APPLY])))


def command_has_peers(hdr: torch.Tensor) -> bool:
    """MULTICAST and ALLREDUCE are followed by an int64 tensor of workers."""
    return bool(int(hdr[H_TYPE]) & (C_MULTICAST | C_ALLREDUCE))


def report_has_payload(hdr: torch.Tensor) -> bool:
    t = int(hdr[R_TYPE])
    return bool(t & (R_FETCHED | R_SNAPSHOT | R_LEAVING | R_BUFFERS) or (t & R_PUSHED and not int(hdr[R_P_CARRIED])))


_COMMAND_TYPES = {WorkCmd, *_COMMANDS.values()}


class Channel:
    """Sends and receives (header, optional payload) messages.

    For small models every message is one fixed-size float32 tensor whose
    first slots hold the header's bits and the rest the payload (present or
    not; a fragment's at the head of that room): one message instead of two,
    which halves the per-message latency that dominates small steps. Above
    ``FUSE_LIMIT_PARAMS`` the header and the payload travel separately so
    control messages stay small, and a fragment's payload is only its own
    size. Whether a payload is present, and its size, is read from the header
    (:func:`command_payload`, :func:`report_payload`).
    """

    def __init__(self, n_params: int) -> None:
        self.n_params = n_params
        self.fused = n_params <= FUSE_LIMIT_PARAMS

    def pack(self, hdr: torch.Tensor, payload: torch.Tensor | None) -> list[torch.Tensor]:
        """The tensors to send, in order."""
        if not self.fused:
            return [hdr] if payload is None else [hdr, payload.contiguous()]
        buf = torch.empty(_HDR_F32 + self.n_params, dtype=torch.float32)
        buf[:_HDR_F32].view(torch.int64).copy_(hdr)
        if payload is not None and payload.nbytes > 4 * self.n_params:
            raise ValueError(f"a payload of {payload.nbytes} bytes does not fit a message of {self.n_params} values")
        if payload is not None and payload.dtype == torch.uint8:  # a fragment's encoded delta: at the head
            buf[_HDR_F32:].view(torch.uint8)[: payload.numel()].copy_(payload)
        elif payload is not None:  # a model, or a fragment's values: at the head
            buf[_HDR_F32 : _HDR_F32 + payload.numel()].copy_(payload)
        return [buf]

    def pack_message(self, msg: Command | Report, payload: torch.Tensor | None = None) -> list[torch.Tensor]:
        """The tensors that carry ``msg`` (and its payload, and the worker list of a multicast or an all-reduce)."""
        hdr = msg.encode()
        shape = self._shape(hdr, type(msg) in _COMMAND_TYPES)
        if shape is None and payload is not None:
            raise ValueError(f"{type(msg).__name__} goes without a payload")
        if shape is not None and (payload is None or (payload.dtype, payload.numel()) != shape):
            got = "none" if payload is None else f"{payload.numel()} {payload.dtype}"
            raise ValueError(f"{type(msg).__name__} goes with a payload of {shape[1]} {shape[0]}, got {got}")
        tensors = self.pack(hdr, payload)
        if isinstance(msg, MulticastCmd | AllReduceCmd):
            peers = msg.receivers if isinstance(msg, MulticastCmd) else msg.ring
            tensors.append(torch.tensor(peers, dtype=torch.int64))
        if isinstance(msg, WorkDone) and msg.pushed is not None and msg.pushed.hyper:
            tensors.append(torch.tensor(msg.pushed.hyper, dtype=torch.float64))
        return tensors

    def recv_command(self, src: int | Link) -> tuple[Command, torch.Tensor | None]:
        """Blocking receive of one command (and the worker list that may follow it) from ``src``
        (a rank of the world group, or a link: :mod:`hetsync.runtime.session`)."""
        link = as_link(src)
        hdr, payload = self._recv(link, command=True)
        count = peer_count(hdr)
        peers: tuple[int, ...] = ()
        if count is not None:
            listed = torch.empty(count, dtype=torch.int64)
            link.recv(listed)
            peers = tuple(int(x) for x in listed.tolist())
        return decode_command(hdr, peers), payload

    def recv_report(self, src: int | Link) -> tuple[Report, torch.Tensor | None]:
        """Blocking receive of one report (and the optimizer settings that may follow a push) from ``src``
        (a rank of the world group, or a link)."""
        link = as_link(src)
        hdr, payload = self._recv(link, command=False)
        hyper: tuple[float, ...] = ()
        if count := hyper_count(hdr):
            listed = torch.empty(count, dtype=torch.float64)
            link.recv(listed)
            hyper = tuple(listed.tolist())
        return decode_report(hdr, hyper), payload

    def _shape(self, hdr: torch.Tensor, command: bool) -> PayloadShape | None:
        return command_payload(hdr, self.n_params) if command else report_payload(hdr, self.n_params)

    def _recv(self, link: Link, *, command: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self.fused:
            buf = torch.empty(_HDR_F32 + self.n_params, dtype=torch.float32)
            link.recv(buf)
            hdr = buf[:_HDR_F32].view(torch.int64).clone()
            shape = self._shape(hdr, command)
            if shape is None:
                return hdr, None
            dtype, count = shape
            if (dtype, count) == (torch.float32, self.n_params):
                return hdr, buf[_HDR_F32:]
            room = buf[_HDR_F32:].view(torch.uint8) if dtype == torch.uint8 else buf[_HDR_F32:]
            if count > room.numel():
                raise ValueError(f"a payload of {count} {dtype} does not fit a message of {self.n_params} values")
            return hdr, room[:count].clone()
        hdr = header()
        link.recv(hdr)
        shape = self._shape(hdr, command)
        if shape is None:
            return hdr, None
        payload = torch.empty(shape[1], dtype=shape[0])
        link.recv(payload)
        return hdr, payload


_TAG_SPAN = (1 << 31) - 2  # gloo tags are C ints; 0 is the control stream's


def exchange_tag(exchange: int) -> int:
    """The tag of every worker-to-worker message of one exchange. Exchange ids
    are unique over the server's life, so a receive abandoned with its
    exchange (a peer died) can never match a later message."""
    return 1 + exchange % _TAG_SPAN
