"""Sharded servers (hetsync.runtime.shards): the model's ranges held by S
server processes, rank 0 still deciding."""

from __future__ import annotations

import json
import threading
import time

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsync.driver import policy_context
from hetsync.errors import BadInput
from hetsync.policies import make_policy
from hetsync.runtime.shards import check_servers, join_states, server_rank, shard_ranges, slice_state, unfinished
from hetsync.scenario import resolve_scenario


@given(n=st.integers(1, 10_000), servers=st.integers(1, 64))
def test_the_ranges_cover_the_model_in_order_and_differ_by_at_most_one(n, servers):
    if servers > n:
        with pytest.raises(BadInput, match="servers must be between 1 and the model's"):
            shard_ranges(n, servers)
        return
    ranges = shard_ranges(n, servers)
    assert len(ranges) == servers and ranges[0][0] == 0 and ranges[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))
    sizes = [hi - lo for lo, hi in ranges]
    assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1


def test_servers_follow_the_workers():
    assert [server_rank(k, 4) for k in range(3)] == [0, 5, 6]


def _policies(sc, *specs):
    return [make_policy(spec, policy_context(sc)) for spec in specs]


@pytest.mark.parametrize(
    ("servers", "scenario", "specs", "path", "message"),
    [
        (0, "hetero-4", ["asp"], "ps", r"--servers must be an integer in \[1, 64\], got 0"),
        (65, "hetero-4", ["asp"], "ps", r"--servers must be an integer in \[1, 64\], got 65"),
        (2, "hetero-4", ["bsp"], "collective", "the collective path holds no model"),
        (2, "elastic-4-signal", ["asp"], "ps", "clip_norm clips by the whole gradient's norm"),
        (2, "p2p-bw", ["selmcast"], "ps", "is peer to peer: no server holds a model"),
        (2, "hetero-4", ["asp:compensate=0.04"], "ps", "compensates delays against models the shards"),
    ],
)
def test_what_shards_cannot_carry_is_refused_in_one_line(servers, scenario, specs, path, message):
    sc = resolve_scenario(scenario, {})
    with pytest.raises(BadInput, match=message) as e:
        check_servers(servers, sc, _policies(sc, *specs), path=path)
    assert "\n" not in str(e.value)
    check_servers(1, sc, _policies(sc, *specs), path=path)  # one server: anything


def test_hetsync_run_refuses_bad_servers_before_anything_starts(tmp_path, capsys):
    from hetsync.cli import main

    code = main(["run", "-s", "p2p-bw", "-p", "selmcast", "--nproc", "2", "--servers", "2", "-o", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--servers 2: selmcast" in err, err
    assert not (tmp_path / "o" / "logs").exists()  # (no process was started)


@pytest.mark.dist
def test_sharded_servers_train_the_model_one_server_trains(tmp_path):
    """BSP (momentum SGD, weight decay) and DiLoCo (inner AdamW, outer
    Nesterov on the averaged deltas) on 2 workers, 24 steps each: through
    rank 0 alone, or with the model in 3 ranges on 3 servers — the same
    model, the same bytes. WBSP (pushes on the workers' uplink lanes beside
    their steps) runs to its end with nobody lost."""
    from hetsync.cli import main

    models, runs = {}, {}
    for servers in (1, 3):
        out = tmp_path / f"s{servers}"
        args = ["run", "-s", "elastic-4-signal", "--set", "clip_norm=null", "-p", "bsp,diloco:H=4,wbsp"]
        args += ["--nproc", "2", "--servers", str(servers), "--no-plots", "--out", str(out)]
        assert main([*args, "--set", "max_steps=24", "--set", "max_time_s=120"]) == 0
        runs[servers] = {r["policy"]: r for r in json.loads((out / "summary.json").read_text())}
        models[servers] = {
            p: torch.load(next(out.glob(f"model-{p}*.pt")), weights_only=True) for p in ("bsp", "diloco")
        }
    for policy in ("bsp", "diloco"):
        one, three = models[1][policy], models[3][policy]
        assert max((one[k] - three[k]).abs().max().item() for k in one) <= 1e-6, policy
        assert runs[3][policy]["servers"] == 3 and runs[1][policy]["servers"] == 1
        assert runs[3][policy]["bytes_sent"] == runs[1][policy]["bytes_sent"]
        assert runs[3][policy]["final_metric"] == pytest.approx(runs[1][policy]["final_metric"], abs=1e-6)
    wbsp = runs[3]["wbsp"]
    assert wbsp["workers_left"] == [] and wbsp["updates"] > 0 and wbsp["stop_reason"] == "max_steps", wbsp


@pytest.mark.parametrize(
    "make", [lambda p: torch.optim.SGD([p], lr=0.1, momentum=0.9), lambda p: torch.optim.AdamW([p])]
)
@settings(deadline=None)  # (the first optimizer step imports torch's compiler: a second)
@given(n=st.integers(1, 40), servers=st.integers(1, 6))
def test_an_optimizer_state_cut_into_ranges_joins_back_whole(make, n, servers):
    """A checkpoint of a sharded run holds the whole model's optimizer state:
    the ranges' states joined end to end; a resumed run cuts it again, into
    as many ranges as it has servers."""
    servers = min(servers, n)
    p = torch.nn.Parameter(torch.randn(n))
    opt = make(p)
    for _ in range(2):
        p.grad = torch.randn(n)
        opt.step()
    whole = opt.state_dict()
    ranges = shard_ranges(n, servers)
    parts = [slice_state(whole, lo, hi, n) for lo, hi in ranges]
    joined = join_states(parts, [hi - lo for lo, hi in ranges])
    assert joined["param_groups"] == whole["param_groups"]
    for name, value in whole["state"][0].items():
        assert torch.equal(joined["state"][0][name], value), name
    for (lo, hi), part in zip(ranges, parts, strict=True):  # each range's part is what an optimizer over it holds
        for name, value in part["state"][0].items():
            want = whole["state"][0][name]
            assert torch.equal(value, want[lo:hi] if want.dim() else want), name
    assert join_states([{}, {}], [1, 1]) == {} and slice_state({}, 0, 1, 2) == {}


@pytest.mark.dist
def test_a_sharded_run_resumed_from_its_checkpoint_ends_where_an_uninterrupted_one_does(tmp_path):
    """BSP with momentum SGD and DiLoCo (Nesterov outer optimizer) on 2
    workers, 3 servers: 20 rounds with checkpoints, then resumed — with 2
    servers — to 40: the model an uninterrupted 40-round run ends with. The
    checkpoint holds the whole model and the whole optimizer states, joined
    from the servers' ranges, as one server's would."""
    from hetsync.cli import main

    base = ["run", "-s", "elastic-4-signal", "--set", "clip_norm=null", "-p", "bsp,diloco:H=4", "--nproc", "2"]
    base += ["--no-plots", "--set", "max_time_s=120"]

    def run(out, servers, steps, *extra):
        assert main([*base, "--servers", str(servers), "--out", str(out), "--set", f"max_steps={steps}", *extra]) == 0
        summary = {r["policy"]: r for r in json.loads((out / "summary.json").read_text())}
        return summary, {p: torch.load(next(out.glob(f"model-{p}*.pt")), weights_only=True) for p in summary}

    whole, models_whole = run(tmp_path / "whole", 2, 40)
    ckpt = ["--checkpoint-dir", str(tmp_path / "ckpt")]
    first, _ = run(tmp_path / "cut", 3, 20, *ckpt)
    saved = torch.load(tmp_path / "ckpt" / "ckpt-bsp.pt", weights_only=True)
    n = sum(t.numel() for t in models_whole["bsp"].values())
    assert saved["theta"].numel() == n and saved["optimizer_state"]["state"][0]["momentum_buffer"].numel() == n
    resumed, models_resumed = run(tmp_path / "cut", 2, 40, *ckpt, "--resume")
    for policy in ("bsp", "diloco"):
        assert resumed[policy]["resumed_from"]["version"] == first[policy]["updates"] > 0, resumed[policy]
        assert resumed[policy]["updates"] == whole[policy]["updates"]
        a, b = models_whole[policy], models_resumed[policy]
        assert max((a[k] - b[k]).abs().max().item() for k in a) <= 1e-6, policy


class _Send:
    """A send as gloo's: completed only once waited on; ``taken`` never set: a receiver that never reads."""

    def __init__(self, taken: bool) -> None:
        self.taken = threading.Event()
        if taken:
            self.taken.set()

    def is_completed(self) -> bool:
        return False

    def wait(self) -> bool:
        self.taken.wait()
        return True


def test_waiting_for_sends_ends_at_the_limit_when_a_receiver_never_reads():
    stuck, sent = _Send(taken=False), _Send(taken=True)
    assert unfinished([(sent, None), (stuck, None)], wait=False) == [(sent, None), (stuck, None)]
    assert unfinished([(sent, None)], wait=True, limit_s=5.0) == []
    t0 = time.monotonic()
    assert unfinished([(sent, None), (stuck, None)], wait=True, limit_s=0.2) == []  # a waiter keeps them
    assert 0.2 <= time.monotonic() - t0 < 5.0
    stuck.taken.set()  # (the waiter thread ends)
