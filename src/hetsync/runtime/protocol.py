"""Wire format between the server (rank 0) and the workers (ranks 1..N).

Every message is a fixed header of 16 int64 values, optionally followed by
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

HEADER_LEN = 16

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
) = range(16)

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
