"""The torchrun agent under which hetsync starts plain DDP and the profiling
job (:func:`hetsync.runtime.launch.launch_module`), and what a rank does to
die with its launcher (:func:`die_with_parent`). ``hetsync run`` and
``hetsync launch`` start their ranks without an agent (see
:mod:`hetsync.runtime.launch`).

It is ``torch.distributed.run`` with two changes, made from outside:

- **The rendezvous store listens on the given address only.** torchrun's
  static rendezvous gives its TCPStore the ``--master-addr``, but torch uses
  that address only to connect: the store's server listens on every
  interface (``*:PORT``, IPv4 and IPv6). The ``hetsync-static`` rendezvous
  is the static one with the listening socket made here, bound to the
  endpoint's address, and handed to the store (``master_listen_fd``).
- **It dies with its launcher.** ``PR_SET_PDEATHSIG`` (Linux) makes the
  kernel kill the agent when its launcher dies, even by SIGKILL; the
  agent passes its own pid on, so its runtime process dies with it in turn
  (``hetsync.runtime.process``), stopped (SIGSTOP) or not. A rank that
  ``hetsync run`` started itself does the same with the launcher's pid.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys

from torch.distributed import TCPStore
from torch.distributed.elastic.rendezvous import RendezvousParameters, rendezvous_handler_registry
from torch.distributed.elastic.rendezvous.api import RendezvousInfo
from torch.distributed.elastic.rendezvous.static_tcp_rendezvous import StaticTCPRendezvous
from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint

from hetsync.runtime.config import PARENT_PID_ENV as PARENT_PID_ENV  # the process whose death kills this one
from hetsync.runtime.config import RDZV_BACKEND as BACKEND

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int | None = None) -> None:
    """Be killed (SIGKILL) when process ``parent`` (default: the one named by
    ``HETSYNC_PARENT_PID``) dies; exit at once if it already has. Nothing
    without either."""
    if parent is None:
        named = os.environ.get(PARENT_PID_ENV)
        if named is None:
            return
        parent = int(named)
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent:  # it died before the request took effect
        os._exit(1)


class BoundStaticRendezvous(StaticTCPRendezvous):
    """Static rendezvous whose store (on rank 0) listens on ``master_addr`` only."""

    def get_backend(self) -> str:
        return BACKEND

    def next_rendezvous(self) -> RendezvousInfo:
        if self._store is None and self.rank == 0:
            self._store = TCPStore(
                self.master_addr,
                self.master_port,
                self.world_size,
                True,
                self.timeout,
                multi_tenant=True,
                master_listen_fd=_listening_socket(self.master_addr, self.master_port),
            )
        return super().next_rendezvous()


def _listening_socket(host: str, port: int) -> int:
    """A socket listening on ``host:port``; the store owns (and closes) it."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    return socket.create_server((host, port), family=family).detach()


def _create_handler(params: RendezvousParameters) -> BoundStaticRendezvous:
    host, port = parse_rendezvous_endpoint(params.endpoint, default_port=-1)
    rank, timeout_s = params.get_as_int("rank"), params.get_as_int("timeout", 600)
    if port == -1 or rank is None or timeout_s is None:
        raise ValueError(f"{BACKEND} needs --rdzv-endpoint=HOST:PORT and --rdzv-conf=rank=R,timeout=S")
    return BoundStaticRendezvous(host, port, rank, params.max_nodes, params.run_id, timeout_s)


def main(argv: list[str] | None = None) -> None:
    die_with_parent()
    os.environ[PARENT_PID_ENV] = str(os.getpid())  # the runtime process dies with this agent
    rendezvous_handler_registry.register(BACKEND, _create_handler)
    from torch.distributed.run import main as torchrun

    torchrun(argv)


if __name__ == "__main__":
    main()
