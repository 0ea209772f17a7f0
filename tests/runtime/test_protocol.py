"""The typed wire protocol (hetsync.runtime.protocol): every message survives
encode/decode field for field, times to the microsecond and float fields bit
for bit, and the headers keep the layout that hand-indexing code reads."""

import dataclasses
import math
import struct

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hetsync.algos.quantize import encode
from hetsync.policies.base import Fragment
from hetsync.runtime import protocol as P

# times on the wire are whole microseconds: a time that is one comes back exactly
# (up to 2**51 µs: past any run clock, and time.time() epochs until 2041)
times = st.integers(-(2**51), 2**51).map(lambda us: us / 1e6)
ints = st.integers(-(2**63), 2**63 - 1)
counts = st.integers(0, 2**40)
workers = st.integers(0, 10_000)
floats = st.floats(allow_nan=False)  # every other float, inf and subnormals included, travels as its bits
kinds = st.sampled_from(["grad", "delta"])
peers = st.lists(workers, max_size=64).map(tuple)

pull_orders = st.builds(P.PullOrder, version=counts, sent_s=times, apply_lr=st.none() | floats)
step_orders = st.builds(
    P.StepOrder,
    batch_size=counts,
    local_lr=st.none() | floats,
    push_after=st.none() | kinds,
    continuous=st.booleans(),
)
# at least one part: an empty WorkCmd is refused
work_cmds = st.one_of(
    st.builds(P.WorkCmd, push=kinds, pull=st.none() | pull_orders, step=st.none() | step_orders),
    st.builds(P.WorkCmd, push=st.none() | kinds, pull=pull_orders, step=st.none() | step_orders),
    st.builds(P.WorkCmd, push=st.none() | kinds, pull=st.none() | pull_orders, step=step_orders),
)
commands = st.one_of(
    st.builds(
        P.ResetCmd,
        epoch_s=times,
        version=counts,
        run=counts,
        p2p=st.booleans(),
        first_step=counts,
        drawn=counts,
        collective=st.booleans(),
    ),
    work_cmds,
    st.builds(P.StopCmd),
    st.builds(P.HaltCmd),
    st.builds(P.ExitCmd),
    st.builds(P.FetchCmd),
    st.builds(P.LeaveGroupCmd),
    st.builds(P.SnapshotCmd, version=counts, send_model=st.booleans()),
    st.builds(P.MulticastCmd, exchange=counts, receivers=peers),
    st.builds(P.ExpectCmd, exchange=counts, sender=workers),
    st.builds(P.AllReduceCmd, exchange=counts, ring=peers),
    st.builds(P.AbortCmd, exchange=counts),
)

pulled = st.builds(P.Pulled, version=counts, start_s=times, end_s=times, overwritten=counts)
computed = st.builds(
    P.Computed,
    step=counts,
    batch_size=counts,
    base_version=counts,
    start_s=times,
    end_s=times,
    replaced=st.booleans(),
    committed=counts,
    load=floats,
    uplink_Bps=floats,
    downlink_Bps=floats,
)
hypers = st.none() | st.lists(floats, min_size=1, max_size=12).map(tuple)
pushed = st.builds(
    P.Pushed,
    kind=kinds,
    steps=counts,
    samples=counts,
    base_version=counts,
    start_s=times,
    hyper=hypers,
    carried=st.booleans(),
)
reports = st.one_of(
    st.builds(P.ResetDone),
    st.builds(P.Bye),
    st.builds(
        P.WorkDone,
        pulled=st.none() | pulled,
        computed=st.none() | computed,
        pushed=st.none() | pushed,
        comm_s=floats,
    ),
    st.builds(P.Leaving, weight=floats),
    st.builds(P.Buffers),
    st.builds(P.Fetched, weight=floats),
    st.builds(P.Snapshot, version=counts),
    st.builds(P.Arrived, exchange=counts, sender=workers, start_s=times, copy_start_s=times, end_s=times),
    st.builds(P.Reduced, exchange=counts, start_s=times, end_s=times),
    st.builds(P.Lost, exchange=counts, sender=st.none() | workers),
)


def _peers_of(cmd):
    return cmd.receivers if isinstance(cmd, P.MulticastCmd) else cmd.ring if isinstance(cmd, P.AllReduceCmd) else ()


def _same_bits(a, b):
    """Equal field for field, floats compared by their bits (0.0 is not -0.0)."""
    assert type(a) is type(b)
    for name in a.__dataclass_fields__:
        x, y = getattr(a, name), getattr(b, name)
        if hasattr(x, "__dataclass_fields__"):
            _same_bits(x, y)
        elif isinstance(x, float):
            assert struct.pack("<d", x) == struct.pack("<d", y), (name, x, y)
        else:
            assert x == y and type(x) is type(y), (name, x, y)


@settings(max_examples=300, deadline=None)
@given(commands)
def test_every_command_survives_encode_and_decode(cmd):
    hdr = cmd.encode()
    assert hdr.dtype == torch.int64 and hdr.shape == (P.HEADER_LEN,)
    peers = _peers_of(cmd)
    assert P.peer_count(hdr) == (len(peers) if isinstance(cmd, P.MulticastCmd | P.AllReduceCmd) else None)
    _same_bits(P.decode_command(hdr, peers), cmd)


@settings(max_examples=300, deadline=None)
@given(reports)
@example(P.Leaving(weight=-0.0))  # CI found this one: signed zeros once came back as +0.0
@example(P.Fetched(weight=0.0))
@example(P.Fetched(weight=math.nan))
def test_every_report_survives_encode_and_decode(rep):
    hdr = rep.encode()
    hyper = rep.pushed.hyper if isinstance(rep, P.WorkDone) and rep.pushed is not None else None
    assert P.hyper_count(hdr) == len(hyper or ())
    _same_bits(P.decode_report(hdr, hyper or ()), rep)


@settings(max_examples=200, deadline=None)
@given(st.floats(-1e9, 1e9))
def test_any_time_comes_back_to_the_microsecond(t):
    rep = P.Reduced(exchange=1, start_s=t, end_s=t)
    back = P.decode_report(rep.encode())
    assert isinstance(back, P.Reduced)
    assert abs(back.start_s - t) <= 0.5e-6 + 1e-9 * abs(t)


def test_the_type_bits_are_the_layout_hand_indexing_code_reads():
    pull = P.PullOrder(version=7, sent_s=1.25)
    step = P.StepOrder(batch_size=32, local_lr=0.05, push_after="delta")
    cases = {
        P.WorkCmd(push="grad"): P.C_PUSH,
        P.WorkCmd(pull=pull): P.C_PULL,
        P.WorkCmd(step=step): P.C_COMPUTE,
        P.WorkCmd(push="delta", pull=pull, step=step): P.C_PUSH | P.C_PULL | P.C_COMPUTE,
        P.ResetCmd(epoch_s=0.0, version=0, run=0): P.C_RESET,
        P.StopCmd(): P.C_STOP,
        P.HaltCmd(): P.C_HALT,
        P.ExitCmd(): P.C_EXIT,
        P.MulticastCmd(exchange=1, receivers=(2,)): P.C_MULTICAST,
        P.ExpectCmd(exchange=1, sender=0): P.C_EXPECT,
        P.AllReduceCmd(exchange=1, ring=(0, 1)): P.C_ALLREDUCE,
        P.AbortCmd(exchange=1): P.C_ABORT,
        P.FetchCmd(): P.C_FETCH,
        P.SnapshotCmd(version=3): P.C_SNAPSHOT,
        P.LeaveGroupCmd(): P.C_LEAVE_GROUP,
    }
    for cmd, bits in cases.items():
        assert int(cmd.encode()[P.H_TYPE]) == bits, cmd
    hdr = P.WorkCmd(push="delta", pull=pull, step=step).encode()
    assert [int(hdr[i]) for i in (P.H_PUSH_KIND, P.H_VERSION, P.H_SENT_US, P.H_BATCH, P.H_HAS_LR)] == [
        P.KINDS["delta"],
        7,
        1_250_000,
        32,
        1,
    ]
    assert P.get_float(hdr, P.H_LR) == 0.05 and int(hdr[P.H_PUSH_AFTER]) == P.KINDS["delta"]
    assert int(hdr[P.H_CONTINUOUS]) == 0
    assert int(P.WorkCmd(step=P.StepOrder(batch_size=1, continuous=True)).encode()[P.H_CONTINUOUS]) == 1
    handed = P.WorkCmd(step=P.StepOrder(batch_size=8, local_lr=0.05, clock=12.375))  # (auto's handover)
    assert P.decode_command(handed.encode()) == handed and P.decode_command(P.WorkCmd(step=step).encode()).step == step
    assert P.command_has_payload(hdr) and not P.command_has_payload(P.WorkCmd(step=step).encode())
    done = P.WorkDone(
        pulled=P.Pulled(version=1, start_s=0.0, end_s=0.0),
        computed=P.Computed(step=0, batch_size=1, base_version=0, start_s=0.0, end_s=0.0),
    )
    assert int(done.encode()[P.R_TYPE]) == P.R_PULLED | P.R_COMPUTED
    assert not P.report_has_payload(done.encode())
    for rep, bits in {
        P.ResetDone(): P.R_RESET,
        P.Bye(): P.R_BYE,
        P.Leaving(): P.R_LEAVING,
        P.Buffers(): P.R_BUFFERS,
        P.Fetched(): P.R_FETCHED,
        P.Snapshot(version=3): P.R_SNAPSHOT,
        P.Arrived(exchange=1, sender=0, start_s=0, copy_start_s=0, end_s=0): P.R_ARRIVED,
        P.Reduced(exchange=1, start_s=0, end_s=0): P.R_REDUCED,
        P.Lost(exchange=1): P.R_LOST,
    }.items():
        assert int(rep.encode()[P.R_TYPE]) == bits, rep
    assert int(P.Lost(exchange=3).encode()[P.R_PEER]) == -1  # an all-reduce's loss names no sender
    assert P.report_has_payload(P.Buffers().encode())  # the buffers ride in a model-sized payload
    assert not isinstance(P.Fetched(), P.Leaving) and P.Fetched() != P.Leaving()  # distinct kinds, same fields


def test_a_report_built_by_hand_as_the_worker_does_decodes_to_its_fields():
    """Old and new code interoperate: the worker still fills headers by index."""
    rep = P.header()
    rep[P.R_TYPE] = P.R_COMPUTED | P.R_PUSHED
    rep[P.R_C_START_US], rep[P.R_C_END_US] = P.to_us(1.5), P.to_us(2.25)
    rep[P.R_STEP], rep[P.R_BATCH], rep[P.R_BASE], rep[P.R_REPLACED] = 4, 16, 3, 1
    P.put_float(rep, P.R_LOAD, 2.5)
    P.put_float(rep, P.R_UP_BPS, math.inf)
    P.put_float(rep, P.R_DOWN_BPS, 1e6)
    rep[P.R_P_KIND], rep[P.R_P_STEPS], rep[P.R_P_SAMPLES], rep[P.R_P_BASE] = P.KINDS["grad"], 1, 16, 3
    rep[P.R_P_START_US] = P.to_us(2.25)
    P.put_float(rep, P.R_COMM_S, 0.125)
    assert P.decode_report(rep) == P.WorkDone(
        computed=P.Computed(
            step=4,
            batch_size=16,
            base_version=3,
            start_s=1.5,
            end_s=2.25,
            replaced=True,
            load=2.5,
            uplink_Bps=math.inf,
            downlink_Bps=1e6,
        ),
        pushed=P.Pushed(kind="grad", steps=1, samples=16, base_version=3, start_s=2.25, hyper=None),  # 0: none follow
        comm_s=0.125,
    )
    fetched = P.header()
    fetched[P.R_TYPE] = P.R_FETCHED
    assert P.decode_report(fetched) == P.Fetched(weight=1.0)  # weight unset: 1.0


def test_a_zero_weight_is_not_read_as_unset():
    assert P.decode_report(P.Leaving(weight=0.0).encode()) == P.Leaving(weight=0.0)


@pytest.mark.parametrize("fused", [True, False])
def test_a_push_carries_its_loops_optimizer_settings_in_a_float64_list_after_it(fused):
    """hetsync.loop: the settings the server's copy of the user's optimizer
    steps with (lr, momentum, betas, weight decay per group) travel bit for
    bit after the push's message, and only when given."""
    n = 10 if fused else P.FUSE_LIMIT_PARAMS + 1
    channel = P.Channel(n)
    hyper = (0.1 / 3, 0.95, 1e-4, 0.0, -0.0)
    done = P.WorkDone(pushed=P.Pushed(kind="grad", steps=1, samples=8, base_version=2, start_s=0.5, hyper=hyper))
    *_, listed = channel.pack_message(done, torch.zeros(n))
    assert listed.dtype == torch.float64 and tuple(listed.tolist()) == hyper
    hdr = done.encode()
    assert P.hyper_count(hdr) == len(hyper) == int(hdr[P.R_NHYPER])
    back = P.decode_report(hdr, tuple(listed.tolist()))
    _same_bits(back, done)
    assert [struct.pack("<d", x) for x in back.pushed.hyper] == [struct.pack("<d", x) for x in hyper]  # -0.0 too
    unchanged = dataclasses.replace(done, pushed=dataclasses.replace(done.pushed, hyper=None))
    assert len(channel.pack_message(unchanged, torch.zeros(n))) == (1 if fused else 2)  # nothing more
    assert P.hyper_count(P.Fetched().encode()) == 0
    with pytest.raises(ValueError, match="lists 5 optimizer settings but 0 were given"):
        P.decode_report(hdr)
    with pytest.raises(ValueError, match=r"hyper=\(\)"):
        P.Pushed(kind="grad", steps=1, samples=1, base_version=0, start_s=0.0, hyper=())
    hdr[P.R_NHYPER] = -1
    with pytest.raises(ValueError, match="out of step"):
        P.hyper_count(hdr)


@settings(max_examples=100, deadline=None)
@given(
    st.builds(
        P.CopyHeader,
        exchange=counts,
        sender=workers,
        start_s=times,
        copy_start_s=times,
        up_end_s=times,
        weight=floats,
    )
)
def test_a_copy_header_survives_encode_and_decode(copy):
    hdr = copy.encode()
    assert hdr.shape == (P.COPY_HDR_LEN,) and hdr.dtype == torch.int64
    _same_bits(P.CopyHeader.decode(hdr), copy)


@pytest.mark.parametrize("fused", [True, False])
def test_the_channel_packs_a_message_with_its_payload_and_its_worker_list(fused):
    n = 10 if fused else P.FUSE_LIMIT_PARAMS + 1
    channel = P.Channel(n)
    model = torch.arange(n, dtype=torch.float32)
    cmd = P.WorkCmd(pull=P.PullOrder(version=2, sent_s=0.5), step=P.StepOrder(batch_size=8))
    tensors = channel.pack_message(cmd, model)
    hdr = tensors[0][: 2 * P.HEADER_LEN].view(torch.int64) if fused else tensors[0]
    assert P.decode_command(hdr) == cmd
    assert torch.equal(tensors[0][2 * P.HEADER_LEN :] if fused else tensors[1], model)
    *_, listed = channel.pack_message(P.AllReduceCmd(exchange=5, ring=(3, 1, 2)))
    assert listed.tolist() == [3, 1, 2]
    with pytest.raises(ValueError, match="WorkCmd goes with a payload of .*float32, got none"):
        channel.pack_message(cmd)
    with pytest.raises(ValueError, match="Bye goes without"):
        channel.pack_message(P.Bye(), model)


def test_bad_messages_and_headers_are_refused_with_what_is_wrong():
    with pytest.raises(ValueError, match="give push, pull or step"):
        P.WorkCmd()
    with pytest.raises(ValueError, match="push_after='sum'"):
        P.StepOrder(batch_size=1, push_after="sum")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="kind='model'"):
        P.Pushed(kind="model", steps=1, samples=1, base_version=0, start_s=0.0)  # type: ignore[arg-type]
    hdr = P.header()
    with pytest.raises(ValueError, match="not a command: type bits 0x0"):
        P.decode_command(hdr)
    hdr[P.H_TYPE] = P.C_STOP | P.C_FETCH
    with pytest.raises(ValueError, match="not a command: type bits 0x410"):
        P.decode_command(hdr)
    rep = P.header()
    rep[P.R_TYPE] = P.R_BYE | P.R_PULLED
    with pytest.raises(ValueError, match="not a report: type bits 0x9"):
        P.decode_report(rep)
    rep[P.R_TYPE] = P.R_PUSHED
    rep[P.R_P_KIND] = 7
    with pytest.raises(ValueError, match="push kind 7"):
        P.decode_report(rep)
    with pytest.raises(ValueError, match="lists 2 workers but 1 were given"):
        P.decode_command(P.MulticastCmd(exchange=1, receivers=(1, 2)).encode(), (1,))


def test_a_collective_pull_and_a_carried_push_go_without_a_model():
    """The collective path (hetsync.runtime.collective): a pull that applies the
    round reduced among the workers and a push that went into it carry no
    model-sized payload; an ordinary pull and push still do."""
    channel = P.Channel(P.FUSE_LIMIT_PARAMS + 1)  # (unfused: the payload is a tensor of its own)
    apply = P.WorkCmd(pull=P.PullOrder(version=3, sent_s=1.0, apply_lr=0.05))
    assert len(channel.pack_message(apply)) == 1
    assert not P.command_has_payload(apply.encode())
    plain = P.WorkCmd(pull=P.PullOrder(version=3, sent_s=1.0))
    assert P.command_has_payload(plain.encode())
    with pytest.raises(ValueError, match="goes with a payload of"):
        channel.pack_message(plain)
    carried = P.WorkDone(pushed=P.Pushed(kind="grad", steps=1, samples=32, base_version=2, start_s=0.5, carried=True))
    assert not P.report_has_payload(carried.encode())
    assert len(channel.pack_message(carried)) == 1
    sent = dataclasses.replace(carried, pushed=dataclasses.replace(carried.pushed, carried=False))
    assert P.report_has_payload(sent.encode())


@pytest.mark.parametrize("fused", [True, False])
def test_a_fragment_travels_alone_its_range_and_size_in_the_header(fused):
    """Streaming DiLoCo: a fragment's pull carries the range's float32 values
    and the share kept at the merge; its push, the encoded delta's bytes (the
    header says how many); a step may merge what was pulled. Unfused, the
    payload is only the fragment's size."""
    n = 40 if fused else P.FUSE_LIMIT_PARAMS + 40
    channel = P.Channel(n)
    frag = Fragment(lo=10, hi=30, bits=4)
    cmd = P.WorkCmd(
        push="delta",
        push_fragment=frag,
        pull=P.PullOrder(version=4, sent_s=1.5, span=(0, 10), keep=0.25),
        step=P.StepOrder(batch_size=8, local_lr=0.1, merge=True),
    )
    hdr = cmd.encode()
    assert P.decode_command(hdr) == cmd
    assert P.command_payload(hdr, n) == (torch.float32, 10)
    values = torch.arange(10, dtype=torch.float32)
    tensors = channel.pack_message(cmd, values)
    if fused:
        assert len(tensors) == 1 and torch.equal(tensors[0][2 * P.HEADER_LEN : 2 * P.HEADER_LEN + 10], values)
    else:
        assert [t.numel() for t in tensors] == [P.HEADER_LEN, 10]
    with pytest.raises(ValueError, match="payload of 10 torch.float32, got 40"):
        channel.pack_message(cmd, torch.zeros(40))
    message = torch.from_numpy(encode(np.linspace(-1, 1, 20, dtype=np.float32), 4))
    pushed = P.Pushed(kind="delta", steps=3, samples=96, base_version=4, start_s=2.0, fragment=frag, nbytes=14)
    done = P.WorkDone(pushed=pushed, pulled=P.Pulled(version=4, start_s=1.5, end_s=1.6, span=(0, 10)))
    rep = done.encode()
    assert P.decode_report(rep) == done
    assert P.report_payload(rep, n) == (torch.uint8, 14) == (message.dtype, message.numel())
    tensors = channel.pack_message(done, message)
    if fused:
        assert torch.equal(tensors[0][2 * P.HEADER_LEN :].view(torch.uint8)[:14], message)
    else:
        assert torch.equal(tensors[1], message)
    with pytest.raises(ValueError, match="fragment"):
        P.Pushed(kind="grad", steps=1, samples=1, base_version=0, start_s=0.0, fragment=frag)
    with pytest.raises(ValueError, match="push_fragment needs push 'delta'"):
        P.WorkCmd(push="grad", push_fragment=frag)
    with pytest.raises(ValueError, match="span"):
        P.PullOrder(version=1, sent_s=0.0, span=(5, 5))
    # a pull of the round's mean delta, encoded: the worker takes the outer step itself
    mean = P.WorkCmd(pull=P.PullOrder(version=5, sent_s=2.5, span=(10, 30), keep=0.5, mean_bits=4, nbytes=14))
    assert P.decode_command(mean.encode()) == mean
    assert P.command_payload(mean.encode(), n) == (torch.uint8, 14)
    assert len(channel.pack_message(mean, message)) == (1 if fused else 2)
    back = P.WorkDone(pulled=P.Pulled(version=5, start_s=2.5, end_s=2.6, span=(10, 30), bits=4))
    assert P.decode_report(back.encode()) == back
