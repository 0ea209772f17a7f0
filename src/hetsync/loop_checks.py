"""Loud failures and warnings for a worker running a user's own loop (:mod:`hetsync.loop`).

A worker that fails leaves the run as the policy allows (the server sees its
connection drop and goes on with the others), so nothing else would tell
whoever started the run. The worker therefore says so as its last line,
:data:`~hetsync.runtime.launch.WORKER_FAILED` with what went wrong, which
``hetsync launch`` reads back from its log, prints, and turns into exit
status 1 (:mod:`hetsync.runtime.launch`); under plain torchrun the line is in
the job's output. Two ways to fail are the worker's to notice
(:meth:`WorkerChecks.watch_exit`):

- an exception ends the script: the user's own, a scheduler stepped past its
  end (OneCycleLR under LB-BSP, whose batches differ per worker), a refused
  collective — the line holds the exception's first line;
- the script ends without ``sync.finish()``: the worker exits with status 1.

Mistakes that would not fail, only go wrong quietly, get a warning line
each, once (:meth:`WorkerChecks.warn`):

- **a sampler split over the world size.** A ``DistributedSampler`` built
  with default arguments would read ``dist.get_world_size()`` and
  ``dist.get_rank()`` — rank 0, which trains nothing, counted — and leave a
  share of the data unused; on a worker hetsync gives it the workers' split
  instead (``num_replicas=sync.workers, rank=sync.worker``), as
  ``sync.sampler`` does, and warns about one built over the world size
  explicitly (:meth:`WorkerChecks.split_samplers_by_worker`);
- **``opt.step()`` twice without a backward in between**: each call is a
  step of the policy, so the batch's gradient would count twice
  (:class:`StepCheck`).

A collective on the process group after ``sync.optimizer`` would wait for
rank 0, which serves the policy and joins none, until the server dropped the
worker (``worker_timeout_s``): it is refused at once instead, as an error
(:meth:`WorkerChecks.refuse_collectives`). A ``dist.destroy_process_group()``
left after ``sync.finish()`` (which closes the group) does nothing.
"""

from __future__ import annotations

import atexit
import functools
import inspect
import os
import sys
from collections.abc import Callable, Iterable
from types import ModuleType, TracebackType
from typing import Any

import torch
import torch.distributed as dist

from hetsync.errors import BadInput
from hetsync.runtime.launch import WORKER_FAILED

# torch.distributed's collectives: once sync.optimizer has returned, rank 0 joins none of them
COLLECTIVES = (
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "all_reduce",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "broadcast",
    "broadcast_object_list",
    "gather",
    "gather_object",
    "monitored_barrier",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "scatter",
    "scatter_object_list",
)


def error_line(error: BaseException) -> str:
    """``Type: the message's first line`` (the type alone when it has none)."""
    lines = str(error).strip().splitlines()
    name = type(error).__name__
    return f"{name}: {lines[0].strip()}" if lines else name


class WorkerChecks:
    """The checks of worker ``worker`` (rank ``rank``) among ``workers``, in a world of ``world`` ranks."""

    def __init__(self, worker: int, rank: int, workers: int, world: int) -> None:
        self.worker = worker
        self.rank = rank
        self.workers = workers
        self.world = world
        self._warned: set[str] = set()
        self._raised = False

    def warn(self, key: str, message: str) -> None:
        """One line on this worker's log, the first time ``key`` comes up."""
        if key not in self._warned:
            self._warned.add(key)
            print(f"hetsync: worker {self.worker} (rank {self.rank}): warning: {message}", file=sys.stderr, flush=True)

    def failed(self, error: str) -> None:
        """This worker's last word: the line ``hetsync launch`` reads back."""
        print(WORKER_FAILED.format(worker=self.worker, rank=self.rank, error=error), file=sys.stderr, flush=True)

    # ------------------------------------------------------------ failures
    def watch_exit(self, finished: Callable[[], bool]) -> None:
        """Say so when an exception ends the script (after its traceback,
        which the hook in place prints: torch's, prefixed with the rank), or
        when the script ends before ``finished()`` — then exit with status 1."""
        previous = sys.excepthook

        def hook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
            self._raised = True
            previous(kind, value, tb)
            if not issubclass(kind, KeyboardInterrupt):  # (stopped from outside: not this worker's failure)
                self.failed(error_line(value))

        def at_exit() -> None:
            if self._raised or finished():
                return
            self.failed("the script ended without calling sync.finish() (call it once the loop is over)")
            sys.stdout.flush()
            os._exit(1)  # (atexit cannot change the exit status otherwise)

        sys.excepthook = hook
        atexit.register(at_exit)

    # ------------------------------------------------------------ samplers
    def split_samplers_by_worker(self, sampler_class: type[Any] | None = None) -> None:
        """A ``DistributedSampler`` (``sampler_class``) built here with
        neither ``num_replicas`` nor ``rank`` splits the data over the
        workers; one built over the world size is warned about."""
        from torch.utils.data.distributed import DistributedSampler

        cls = sampler_class if sampler_class is not None else DistributedSampler
        original = cls.__init__
        checks = self

        @functools.wraps(original)
        def __init__(
            sampler: Any, dataset: Any, num_replicas: int | None = None, rank: int | None = None, *args: Any, **kw: Any
        ) -> None:
            if num_replicas is None and rank is None:  # the workers' split, not the world's: rank 0 trains nothing
                num_replicas, rank = checks.workers, checks.worker
            original(sampler, dataset, num_replicas, rank, *args, **kw)
            if sampler.num_replicas == checks.world:
                checks.warn(
                    "sampler",
                    f"a DistributedSampler over num_replicas={checks.world} (the world size, counting rank 0, which "
                    f"trains nothing) leaves 1/{checks.world} of the data unused: give it num_replicas=sync.workers, "
                    "rank=sync.worker, or use sync.sampler(dataset) or sync.loader(dataset)",
                )

        cls.__init__ = __init__

    # --------------------------------------------------------- collectives
    def refuse_collectives(self, namespace: ModuleType | Any = dist) -> None:
        """From now on, a collective of ``namespace`` (``torch.distributed``)
        over a group that holds rank 0 raises at once, naming the call."""
        for name in COLLECTIVES:
            original = getattr(namespace, name, None)
            if original is not None and not hasattr(original, "__hetsync_refused__"):
                setattr(namespace, name, _refused(name, original, namespace))
        destroy = getattr(namespace, "destroy_process_group", None)
        if destroy is not None and not hasattr(destroy, "__hetsync_refused__"):
            namespace.destroy_process_group = _closed_by_finish(destroy, namespace)

    def check_steps(self, params: Iterable[torch.Tensor]) -> StepCheck:
        return StepCheck(params, self.warn)


def _refused(name: str, original: Callable[..., Any], namespace: Any) -> Callable[..., Any]:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            group = signature.bind(*args, **kwargs).arguments.get("group")
        except TypeError:  # a wrong call: torch's own error says what is wrong with it
            return original(*args, **kwargs)
        if not _holds_rank_0(group, namespace):
            return original(*args, **kwargs)
        if not namespace.is_initialized():
            raise BadInput(f"dist.{name}() after sync.finish(): hetsync closed the process group there; drop the call")
        raise BadInput(
            f"dist.{name}() after sync.optimizer would hang: rank 0 runs the policy and joins no collective; "
            "drop the call"
        )

    guarded.__hetsync_refused__ = original  # type: ignore[attr-defined]
    return guarded


def _holds_rank_0(group: Any, namespace: Any) -> bool:
    """Whether a collective over ``group`` (None: the default one) would wait for rank 0."""
    if group is None or group is namespace.GroupMember.WORLD:
        return True
    try:
        return 0 in namespace.get_process_group_ranks(group)
    except Exception:  # not a group torch knows: its own error says so
        return False


def _closed_by_finish(destroy: Callable[..., Any], namespace: Any) -> Callable[..., Any]:
    @functools.wraps(destroy)
    def guarded(group: Any = None) -> None:
        if group is not None and group is not namespace.GroupMember.WORLD:
            destroy(group)  # (a group of the user's own)
        elif namespace.is_initialized():
            raise BadInput(
                "dist.destroy_process_group() while the run goes on: call sync.finish() instead "
                "(it leaves the run, then closes the process group)"
            )
        # else: sync.finish() has closed it already (the end of a DDP script)

    guarded.__hetsync_refused__ = destroy  # type: ignore[attr-defined]
    return guarded


class StepCheck:
    """Warns once when ``opt.step()`` comes again with no backward pass
    since the last one (a hook on each trainable parameter's gradient)."""

    def __init__(self, params: Iterable[torch.Tensor], warn: Callable[[str, str], None]) -> None:
        self.warn = warn
        self.steps = 0
        self.backward = False
        for p in params:
            p.register_hook(self._gradient)

    def _gradient(self, grad: torch.Tensor) -> None:
        self.backward = True

    def step(self) -> None:
        """``opt.step()`` was called."""
        if self.steps and not self.backward:
            self.warn(
                "step",
                "opt.step() was called again without a backward() in between: each call is one step of the "
                "policy, so the same gradient counted twice; call it once per batch, after loss.backward()",
            )
        self.backward = False
        self.steps += 1
