"""Wire format between the server (rank 0) and the workers (ranks 1..N).

Every message is a fixed header of 24 int64 values, optionally followed by
one flat float32 model-sized tensor (a model going to a worker, a gradient or
delta coming back). No pickled Python objects cross the wire. Floats in a
header are carried as the bits of a float64.

One command message makes exactly one report message:

- server → worker: ``RESET`` (+ model: a run starts from the server's model),
  ``PULL`` (+ model, optionally with a chained step), ``COMPUTE`` (a step,
  optionally pushing right after), ``PUSH`` (a standalone push), ``STOP``
  (end of run), ``EXIT`` (end of process).
- worker → server: a report whose bits say which of pulled / computed /
  pushed (+ payload) happened, or ``BYE`` after ``STOP``.

Times are microseconds since the run's epoch, a wall-clock instant the server
sends with ``RESET`` (so workers on one machine share the server's clock).
"""

from __future__ import annotations

import struct

import torch
import torch.distributed as dist

HEADER_LEN = 24

# server → worker: H_TYPE bits
C_RESET, C_PULL, C_COMPUTE, C_PUSH, C_STOP, C_EXIT = 1, 2, 4, 8, 16, 32
# server → worker fields
H_TYPE, H_VERSION, H_BATCH, H_LR, H_HAS_LR, H_PUSH_AFTER, H_PUSH_KIND, H_SENT_US, H_EPOCH_US, H_RUN = range(10)

# worker → server: R_TYPE bits
R_PULLED, R_COMPUTED, R_PUSHED, R_BYE, R_RESET = 1, 2, 4, 8, 16
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
) = range(17)

KINDS = {"grad": 1, "delta": 2}
KIND_NAMES = {v: k for k, v in KINDS.items()}


def header() -> torch.Tensor:
    return torch.zeros(HEADER_LEN, dtype=torch.int64)


def put_float(h: torch.Tensor, index: int, value: float) -> None:
    h[index] = struct.unpack("<q", struct.pack("<d", value))[0]


def get_float(h: torch.Tensor, index: int) -> float:
    return struct.unpack("<d", struct.pack("<q", int(h[index])))[0]


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


def report_has_payload(hdr: torch.Tensor) -> bool:
    return bool(int(hdr[R_TYPE]) & R_PUSHED)
