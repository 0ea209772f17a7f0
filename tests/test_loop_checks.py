"""hetsync.loop_checks without processes: the error's line, the samplers'
split, a second opt.step() without a backward, the refused collectives, and
how the launcher reads a worker's failure back. (Under real processes:
tests/runtime/test_loop.py, with tests/runtime/loop_faults.py.)"""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn
from torch.utils.data.distributed import DistributedSampler

from hetsync.errors import BadInput
from hetsync.loop_checks import StepCheck, WorkerChecks, error_line
from hetsync.runtime.launch import _WORKER_FAILED, WORKER_FAILED, _left_early


def checks(said: list[tuple[str, str]]) -> WorkerChecks:
    """Worker 1 (rank 2) of 3, its warnings collected in ``said``."""
    c = WorkerChecks(1, 2, 3, 4)
    c.warn = lambda key, message: said.append((key, message))  # type: ignore[method-assign]
    return c


def test_the_error_line_is_the_type_and_the_first_line_of_the_message():
    assert error_line(ValueError("Tried to step 213 times.\nmore")) == "ValueError: Tried to step 213 times."
    assert error_line(RuntimeError()) == "RuntimeError"
    line = WORKER_FAILED.format(worker=1, rank=2, error=error_line(KeyError("x")))
    assert _WORKER_FAILED.findall(f"[rank2]: noise\n{line}\n") == ["KeyError: 'x'"]


def test_a_default_distributed_sampler_splits_over_the_workers_and_one_over_the_world_is_warned_about():
    said: list[tuple[str, str]] = []

    class Sampler(DistributedSampler):  # (the check patches this class, not torch's)
        pass

    checks(said).split_samplers_by_worker(Sampler)
    mine = Sampler(list(range(12)), shuffle=False)  # as DDP scripts build it: no process group asked
    assert (mine.num_replicas, mine.rank, list(mine)) == (3, 1, [1, 4, 7, 10]) and not said
    assert Sampler(list(range(12)), num_replicas=3, rank=0).num_replicas == 3 and not said
    Sampler(list(range(12)), num_replicas=4, rank=2)  # dist.get_world_size(): rank 0 counted
    ((key, message),) = said
    assert key == "sampler" and "num_replicas=4" in message and "1/4 of the data unused" in message


def test_a_second_step_without_a_backward_is_warned_about():
    said: list[tuple[str, str]] = []
    model = nn.Linear(3, 2)
    check = StepCheck(model.parameters(), lambda key, message: said.append((key, message)))
    for _ in range(2):  # gradient accumulation: two backward passes, one step
        model(torch.ones(1, 3)).sum().backward()
    check.step()
    model(torch.ones(1, 3)).sum().backward()
    check.step()
    assert not said
    check.step()  # the same batch again
    assert [key for key, _ in said] == ["step"] and "without a backward()" in said[0][1]


class FakeDist:
    """torch.distributed's shape, as far as the checks read it; a group is its list of ranks."""

    class GroupMember:
        WORLD = object()

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []
        self.initialized = True

    def is_initialized(self) -> bool:
        return self.initialized

    def get_process_group_ranks(self, group: list[int]) -> list[int]:
        return group

    def all_gather_object(self, object_list: list, obj: object, group: object = None) -> None:
        self.calls.append(("all_gather_object", group))

    def barrier(self, group: object = GroupMember.WORLD, async_op: bool = False, device_ids: object = None) -> None:
        self.calls.append(("barrier", group))

    def destroy_process_group(self, group: object = None) -> None:
        self.calls.append(("destroy", group))


def test_a_collective_with_rank_0_is_refused_at_once_and_a_leftover_destroy_after_finish_does_nothing():
    fake = FakeDist()
    checks([]).refuse_collectives(fake)
    with pytest.raises(BadInput, match=r"dist\.all_gather_object\(\) after sync\.optimizer would hang"):
        fake.all_gather_object([None] * 3, 1.0)
    with pytest.raises(BadInput, match=r"dist\.barrier\(\)"):
        fake.barrier()
    with pytest.raises(BadInput, match="barrier"):
        fake.barrier([0, 1])
    fake.all_gather_object([None] * 2, 1.0, group=[1, 2])  # the workers' own group: rank 0 is not in it
    with pytest.raises(BadInput, match="call sync.finish"):
        fake.destroy_process_group()
    assert fake.calls == [("all_gather_object", [1, 2])]
    fake.initialized = False  # sync.finish() closed the group
    fake.destroy_process_group()  # the end of a DDP script: nothing to do
    with pytest.raises(BadInput, match=r"dist\.barrier\(\) after sync\.finish\(\)"):
        fake.barrier()
    assert fake.calls == [("all_gather_object", [1, 2])]


def test_the_launcher_counts_a_worker_gone_for_another_reason_than_its_loops_end(tmp_path):
    assert _left_early(tmp_path) == {}  # no summary: nothing to say
    left = [
        {"worker": 0, "t": 1.0, "reason": "its training loop ended"},
        {"worker": 1, "t": 2.0, "reason": "no reply within worker_timeout_s=60.0"},
    ]
    (tmp_path / "summary.json").write_text(json.dumps([{"label": "bsp", "workers_left": left}, "not a run"]))
    assert _left_early(tmp_path) == {1: "no reply within worker_timeout_s=60.0"}
