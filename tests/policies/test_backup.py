import pytest

from hetsync.errors import BadInput
from hetsync.policies.backup import BackupWorkers
from hetsync.policies.base import Apply, Compute, Drop, Pull
from tests.policies.helpers import arrived, ctx


def pull(w):
    return Pull(worker=w, then=Compute(worker=w, batch_size=8, push="grad"))


def test_first_n_minus_b_close_the_round_and_late_ones_are_dropped():
    p = BackupWorkers(ctx(3), b=1)
    a = arrived(2, base=0)
    assert p.on_event(a) == []
    c = arrived(0, base=0)
    cmds = p.on_event(c)
    assert isinstance(cmds[0], Apply) and {i for i, _ in cmds[0].contributions} == {a.push_id, c.push_id}
    assert cmds[1:] == [pull(0), pull(2)]
    late = arrived(1, base=0)
    assert p.on_event(late) == [Drop(push_ids=(late.push_id,), reason="late"), pull(1)]


def test_b_must_leave_someone():
    with pytest.raises(BadInput, match="'b'"):
        BackupWorkers(ctx(3), b=3)
