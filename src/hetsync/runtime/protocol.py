"""Wire format between the server (rank 0) and the workers (ranks 1..N).

Every message is a fixed header of 32 int64 values, optionally followed by
one flat float32 model-sized tensor (a model going to a worker, a gradient,
delta or model coming back). No pickled Python objects cross the wire.
Floats in a header are carried as the bits of a float64.

Parameter-server runs: one command message makes exactly one report message:

- server → worker: ``RESET`` (+ model: a run starts from the server's model),
  ``PULL`` (+ model, optionally with a chained step), ``COMPUTE`` (a step,
  optionally pushing right after), ``PUSH`` (a standalone push), ``STOP``
  (end of run), ``EXIT`` (end of process).
- worker → server: a report whose bits say which of pulled / computed /
  pushed (+ payload) happened, or ``BYE`` after ``STOP``, or ``LEAVING``
  + the worker's model (a worker running its own training loop,
  :mod:`hetsync.loop`, has reached its end: the server counts it as gone,
  keeps a peer-to-peer worker's model for the final evaluation, and
  answers ``EXIT``).

Peer-to-peer runs (``RESET`` with ``H_P2P`` set; rank 0 is then only the
coordinator, see :mod:`hetsync.runtime.p2p`) add:

- ``MULTICAST`` to the sender, followed by an int64 tensor of
  ``H_NPEERS`` receivers; it owes no report (the receivers report).
- ``EXPECT`` to each receiver (``H_PEER`` = the sender): answered by
  ``R_ARRIVED`` when the copy has arrived (``R_LOST`` if it never can).
- ``ALLREDUCE`` to each participant, followed by an int64 tensor of the
  ``H_NPEERS`` workers in ring order: answered by ``R_REDUCED`` (or
  ``R_LOST``).
- ``ABORT``: give up exchange ``H_EXCH`` (a participant died); no report.
- ``FETCH``: evaluation only: answered at once, even during a step, by
  ``R_FETCHED`` + the worker's current model.

Every peer-to-peer command carries the exchange id ``H_EXCH`` the server
gave it; the reports name it in ``R_EXCH``. Model copies and all-reduce
chunks travel worker to worker with the tag :func:`exchange_tag`, never
through rank 0.

Times are microseconds since the run's epoch, a wall-clock instant the server
sends with ``RESET`` (so workers on one machine share the server's clock).
"""

from __future__ import annotations

import struct

import torch
import torch.distributed as dist

HEADER_LEN = 32

# server → worker: H_TYPE bits
C_RESET, C_PULL, C_COMPUTE, C_PUSH, C_STOP, C_EXIT = 1, 2, 4, 8, 16, 32
C_MULTICAST, C_EXPECT, C_ALLREDUCE, C_ABORT, C_FETCH = 64, 128, 256, 512, 1024
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
) = range(16)

# worker → server: R_TYPE bits
R_PULLED, R_COMPUTED, R_PUSHED, R_BYE, R_RESET = 1, 2, 4, 8, 16
R_ARRIVED, R_REDUCED, R_FETCHED, R_LOST = 32, 64, 128, 256
R_LEAVING = 512  # the worker's own training loop has ended (hetsync.loop): it leaves the run
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
    R_LR_SCALE,  # float bits, with a push: the worker's schedule factor (hetsync.loop); 0 bits: none (1.0)
    R_WEIGHT,  # float bits, R_FETCHED / R_LEAVING (p2p): the model's push-sum weight; 0 bits: none (1.0)
) = range(27)

KINDS = {"grad": 1, "delta": 2}
KIND_NAMES = {v: k for k, v in KINDS.items()}


def header() -> torch.Tensor:
    return torch.zeros(HEADER_LEN, dtype=torch.int64)


def put_float(h: torch.Tensor, index: int, value: float) -> None:
    h[index] = struct.unpack("<q", struct.pack("<d", value))[0]


def get_float(h: torch.Tensor, index: int) -> float:
    return struct.unpack("<d", struct.pack("<q", int(h[index])))[0]


def weight_of(h: torch.Tensor) -> float:
    """A p2p report's push-sum weight (``R_WEIGHT``; 1.0 when unset)."""
    return get_float(h, R_WEIGHT) if int(h[R_WEIGHT]) else 1.0


def to_us(seconds: float) -> int:
    return round(seconds * 1e6)


def from_us(us: int) -> float:
    return us / 1e6


FUSE_LIMIT_PARAMS = 1 << 18  # models up to 1 MB travel in the same message as their header
_HDR_F32 = 2 * HEADER_LEN  # float32 slots that carry the int64 header


class Channel:
    """Sends and receives (header, optional model-sized payload) messages.

    For small models every message is one fixed-size float32 tensor whose
    first slots hold the header's bits and the rest the payload (present or
    not): one message instead of two, which halves the per-message latency
    that dominates small steps. Above ``FUSE_LIMIT_PARAMS`` the header and the
    payload travel separately so control messages stay small. Whether a
    payload is present is read from the header (``has_payload``).
    """

    def __init__(self, n_params: int, has_payload) -> None:  # type: ignore[no-untyped-def]
        self.n_params = n_params
        self.fused = n_params <= FUSE_LIMIT_PARAMS
        self.has_payload = has_payload

    def pack(self, hdr: torch.Tensor, payload: torch.Tensor | None) -> list[torch.Tensor]:
        """The tensors to send, in order."""
        if not self.fused:
            return [hdr] if payload is None else [hdr, payload.contiguous()]
        buf = torch.empty(_HDR_F32 + self.n_params, dtype=torch.float32)
        buf[:_HDR_F32].view(torch.int64).copy_(hdr)
        if payload is not None:
            buf[_HDR_F32:].copy_(payload)
        return [buf]

    def recv(self, src: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Blocking receive of one message from ``src``."""
        if self.fused:
            buf = torch.empty(_HDR_F32 + self.n_params, dtype=torch.float32)
            dist.recv(buf, src=src)
            hdr = buf[:_HDR_F32].view(torch.int64).clone()
            return hdr, (buf[_HDR_F32:] if self.has_payload(hdr) else None)
        hdr = header()
        dist.recv(hdr, src=src)
        if not self.has_payload(hdr):
            return hdr, None
        payload = torch.empty(self.n_params, dtype=torch.float32)
        dist.recv(payload, src=src)
        return hdr, payload


def command_has_payload(hdr: torch.Tensor) -> bool:
    return bool(int(hdr[H_TYPE]) & (C_RESET | C_PULL))


def command_has_peers(hdr: torch.Tensor) -> bool:
    """MULTICAST and ALLREDUCE are followed by an int64 tensor of workers."""
    return bool(int(hdr[H_TYPE]) & (C_MULTICAST | C_ALLREDUCE))


def report_has_payload(hdr: torch.Tensor) -> bool:
    return bool(int(hdr[R_TYPE]) & (R_PUSHED | R_FETCHED | R_LEAVING))


_TAG_SPAN = (1 << 31) - 2  # gloo tags are C ints; 0 is the control stream's


def exchange_tag(exchange: int) -> int:
    """The tag of every worker-to-worker message of one exchange. Exchange ids
    are unique over the server's life, so a receive abandoned with its
    exchange (a peer died) can never match a later message."""
    return 1 + exchange % _TAG_SPAN
