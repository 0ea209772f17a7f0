"""Command-line values checked as they are parsed, before anything runs.

Each function here is an argparse ``type=``: it returns the value as the
command wants it or raises ``argparse.ArgumentTypeError`` with a message
that says what is allowed; the parser turns that into one line naming the
option (``hetsync run: argument --seed: ...``) and exit status 2. So a bad
option is refused before a simulation starts or a process is launched, and
before anything is written.
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from hetsync import limits

__all__ = [
    "checkpoint_dir",
    "host",
    "nproc",
    "out_dir",
    "out_file",
    "seconds",
    "seed",
]


def _int(text: str, low: int, high: int, what: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        raise argparse.ArgumentTypeError(f"must be an integer in {low}..{high}{what}, got {text!r}")
    return value


def seed(text: str) -> int:
    """``--seed``: an integer numpy and torch both accept."""
    return _int(text, 0, limits.MAX_SEED, "")


def nproc(text: str) -> int:
    """``--nproc``: worker processes on this machine."""
    return _int(text, 1, limits.MAX_NPROC, " (worker processes on this machine; use torchrun for more)")


def restarts(text: str) -> int:
    """``--max-restarts``: how many times a dead server's job is restarted."""
    return _int(text, 0, 1000, "")


def seconds(low: float, high: float, *, low_open: bool = False) -> Callable[[str], float]:
    """A finite number of seconds in [low, high] (``(low, high]`` with ``low_open``)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        ok = math.isfinite(value) and (low < value if low_open else low <= value) and value <= high
        if not ok:
            interval = f"{'(' if low_open else '['}{limits.shown(low)}, {limits.shown(high)}]"
            raise argparse.ArgumentTypeError(f"must be a number of seconds in {interval}, got {text!r}")
        return value

    parse.__name__ = "seconds"
    return parse


def host(text: str) -> str:
    """``--host``: a rendezvous address this machine can resolve (an
    unresolvable name is refused here, before any output folder is touched)."""
    import socket

    name = text.strip()
    if not name:
        raise argparse.ArgumentTypeError("must be a host name or address, e.g. 127.0.0.1")
    try:
        socket.getaddrinfo(name, None)
    except (OSError, UnicodeError) as e:
        raise argparse.ArgumentTypeError(
            f"cannot resolve {text!r} ({e}): give an address this machine can reach"
        ) from None
    return name


def out_dir(text: str) -> str:
    """``--out``: a folder that is there or can be made, and written to."""
    _check_folder(Path(text))
    return text


def checkpoint_dir(text: str) -> str:
    """``--checkpoint-dir``: as ``--out`` (whether it must hold checkpoints
    already, with ``--resume``, is checked with the scenario)."""
    _check_folder(Path(text))
    return text


def out_file(text: str) -> Path:
    """``--md``, ``--json``: a file to (over)write, in a folder that is there
    or can be made."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder: name a file to write (in it, or elsewhere)")
    if path.exists() and not path.is_file():
        raise argparse.ArgumentTypeError(f"{text!r} is not a regular file ({_kind(path)}): name a file to write")
    _check_folder(path.parent, file=text)
    return path


def _check_folder(path: Path, file: str | None = None) -> None:
    """``path`` is a folder, or can be created as one, and can be written to."""
    named = repr(file) if file is not None else repr(str(path))
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{str(path)!r} is not a folder ({_kind(path)}): name a folder")
    base = path
    while not base.exists():
        if base.parent == base:
            break
        base = base.parent
    if base.exists() and not base.is_dir():
        raise argparse.ArgumentTypeError(f"{named} lies under {str(base)!r}, which is a file, not a folder")
    try:  # os.access says yes to root even on a read-only file system: try it
        fd, probe = tempfile.mkstemp(prefix=".hetsync-probe-", dir=base)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        reason = e.strerror or type(e).__name__
        raise argparse.ArgumentTypeError(
            f"cannot write {named}: no file can be made in {str(base)!r} ({reason})"
        ) from None


def _kind(path: Path) -> str:
    if path.is_file():
        return "a file"
    if path.is_char_device() or path.is_block_device():
        return "a device"
    if path.is_fifo():
        return "a pipe"
    if path.is_socket():
        return "a socket"
    return "not a folder"
