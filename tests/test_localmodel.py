import torch

from hetsync.localmodel import LocalModel


def test_delta_carries_the_local_steps_and_the_reference_moves():
    m = LocalModel(torch.zeros(3), version=4)
    m.finish_step(torch.ones(3), batch=8, base=4, local_lr=0.5)
    m.finish_step(torch.ones(3), batch=8, base=4, local_lr=0.5)
    p = m.take_push("delta")
    assert torch.equal(p.payload, torch.full((3,), -1.0))
    assert (p.steps, p.samples, p.base_version) == (2, 16, 4)
    assert torch.equal(m.take_push("delta").payload, torch.zeros(3))  # nothing new since


def test_a_step_begun_before_a_pull_reports_the_older_base():
    m = LocalModel(torch.zeros(3), version=1)
    assert m.load(torch.ones(3), version=2) == 0
    m.finish_step(torch.ones(3), batch=4, base=1, local_lr=0.1)  # started on version 1
    assert m.take_push("delta").base_version == 1


def test_pull_overwrites_unpushed_local_steps_and_reports_them():
    m = LocalModel(torch.zeros(2))
    m.finish_step(torch.ones(2), batch=4, base=0, local_lr=0.1)
    assert m.load(torch.ones(2), version=1) == 1
    assert m.take_push("delta").steps == 0


def test_gradient_replaced_before_push_is_reported():
    m = LocalModel(torch.zeros(2))
    assert m.finish_step(torch.ones(2), batch=4, base=0, local_lr=None) == 0
    assert m.finish_step(torch.ones(2), batch=4, base=0, local_lr=None) == 1
    p = m.take_push("grad")
    assert p.steps == 1
