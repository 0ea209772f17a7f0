"""``hetsync bench runtime``: the real runtime against DDP, and the simulator
against the real runtime.

1. hetsync BSP (N worker processes + a server) and PyTorch DDP (N processes)
   train the same model from the same seed, shards and batch for the same
   number of steps, one after the other on this machine: time per step of
   each, their ratio, and the share of it spent computing.
2. Calibration: a heterogeneous scenario runs on the runtime; the simulator
   then runs it with its timing taken from that run's trace (each worker's
   mean measured step time, the mean measured transfer time as latency) and
   the two wall times are compared.

``--path`` (``ps``, ``collective`` or both, comma-separated: the default;
hetsync.driver.paths) is the data path of both parts, each in turn: of
hetsync BSP against DDP (one DDP run for all), of the real calibration runs
and of the simulated ones. On ``collective`` the simulator's round is a ring all-reduce
of 2(k−1) phases among the k workers rather than a push and a pull, so the
latency it is given is the mean push plus the mean pull of the real trace
spread over those phases: a simulated round communicates as long as a real
one did, as on ``ps``, where each transfer takes the mean measured one.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from hetsync.benches.common import Row
from hetsync.driver import policy_context
from hetsync.driver.paths import PATHS, parse_paths, uses_collective
from hetsync.driver.shards import parse_server_counts
from hetsync.errors import BadInput
from hetsync.policies import make_policy
from hetsync.runtime.config import ProcessOptions, RunConfig
from hetsync.runtime.launch import launch_ddp, launch_run, server_log_tail
from hetsync.scenario import load_scenario, scenario_from_dict
from hetsync.sim.engine import Simulation
from hetsync.summary import as_dicts, read_summary
from hetsync.trace import iter_records

NAME = "runtime"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nproc", type=int, default=4, help="workers (default 4)")
    p.add_argument("--steps", type=int, default=200, help="steps per worker for BSP vs DDP (default 200)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--calibrate-scenario", default="hetero-4", help="heterogeneous scenario for sim vs runtime")
    p.add_argument("--calibrate-steps", type=int, default=60)
    p.add_argument(
        "--policies",
        default=None,
        help="policies for the sim-vs-runtime comparison, on every path (default: bsp,asp,ssp:s=3 on ps, "
        "bsp,lb-bsp on collective)",
    )
    p.add_argument(
        "--path",
        default=",".join(PATHS),
        help="data paths of the real runs and of the simulated ones, comma-separated: ps (through the server), "
        "collective (all-reduced among the workers; bsp and lb-bsp) (default: %(default)s)",
    )
    p.add_argument(
        "--servers",
        default="1,2",
        help="sharded servers of the server path's calibration runs, comma-separated (default: %(default)s)",
    )
    p.add_argument("--out", type=Path, default=None, help="keep the runs here (default: a temporary folder)")


DEFAULT_POLICIES = {"ps": "bsp,asp,ssp:s=3", "collective": "bsp,lb-bsp"}


def paths_and_policies(args: argparse.Namespace) -> dict[str, list[str]]:
    """Each path's sim-vs-runtime policies; BadInput, before anything starts,
    for an unknown path or a policy that cannot take its path."""
    paths = parse_paths(str(getattr(args, "path", "ps")), "--path")
    ctx = policy_context(load_scenario(args.calibrate_scenario).with_workers(args.nproc))
    chosen = {}
    for path in paths:
        specs = getattr(args, "policies", None) or DEFAULT_POLICIES[path]
        for spec in (x for x in specs.split(",") if x):
            try:
                uses_collective(path, make_policy(spec, ctx))
            except BadInput as e:
                raise BadInput(f"--policies {specs} --path {path}: {e}") from None
        chosen[path] = [x for x in specs.split(",") if x]
    return chosen


def server_counts(args: argparse.Namespace) -> list[int]:
    """``--servers``: the server path's calibrations, one per count (BadInput in one line)."""
    return list(parse_server_counts(str(getattr(args, "servers", "1")), "--servers"))


def run(args: argparse.Namespace) -> list[Row]:
    paths_and_policies(args)
    server_counts(args)
    if args.out is not None:
        return _run(args, args.out)
    with tempfile.TemporaryDirectory() as tmp:
        return _run(args, Path(tmp))


def _launch(
    nproc: int,
    out: Path,
    scenario: str,
    overrides: dict[str, Any],
    policies: list[str],
    *,
    path: str = "ps",
    servers: int = 1,
) -> list[dict[str, Any]]:
    """``hetsync run``'s job: ``nproc`` workers (and ``servers`` servers); the runs' summaries."""
    process = ProcessOptions(out=out, path=path, servers=servers)
    config = RunConfig(scenario=scenario, overrides=overrides, policies=tuple(policies), process=process, plots=False)
    code = launch_run(config, nproc)
    if code != 0:
        raise RuntimeError(f"runtime run failed (status {code}):\n{server_log_tail(out)}")
    return as_dicts(read_summary(out / "summary.json"))


def _run(args: argparse.Namespace, out: Path) -> list[Row]:
    n, steps = args.nproc, args.steps
    common = {"jitter": 0, "batch_size": args.batch_size}
    where = f"homogeneous-8 settings, digits-mlp, batch {args.batch_size}, {n} workers, {steps} steps"
    sets = [x for key, value in common.items() for x in ("--set", f"{key}={value}")]
    code = launch_ddp(n, ["--scenario", "homogeneous-8", *sets, "--steps", str(steps)], out / "ddp")
    if code != 0:
        raise RuntimeError(f"DDP run failed (status {code}); see {out / 'ddp' / 'ddp.log'}")
    ddp = json.loads((out / "ddp" / "ddp.json").read_text())
    keys = {"setting": where}
    rows: list[Row] = [
        {"policy": "DDP", "metric": "time per step", "value": 1e3 * ddp["step_s"], "unit": "ms", **keys},
        {"policy": "DDP", "metric": "time per step ÷ DDP's (target ≤ 1.3)", "value": 1.0, "unit": "", **keys},
        # DDP's compute is timed in a communication-free replay
        {"policy": "DDP", "metric": "compute share", "value": 100 * ddp["compute_share"], "unit": "%", **keys},
    ]
    for path, policies in paths_and_policies(args).items():
        sub = out if path == "ps" else out / path
        rows += _versus_ddp(args, sub, path, ddp, common, where)
        for servers in server_counts(args) if path == "ps" else [1]:
            where_to = sub / ("calibrate" if servers == 1 else f"calibrate-servers-{servers}")
            rows += calibrate(
                args.calibrate_scenario, policies, n, args.calibrate_steps, where_to, path=path, servers=servers
            )
    return rows


def _versus_ddp(
    args: argparse.Namespace, out: Path, path: str, ddp: dict[str, Any], common: dict[str, Any], where: str
) -> list[Row]:
    """hetsync BSP on ``path``, the same job as DDP's: its step time against DDP's."""
    n, steps = args.nproc, args.steps
    ours_name = "hetsync BSP" if path == "ps" else f"hetsync BSP, path {path}"
    run = {**common, "max_steps": steps, "max_time_s": None}
    ours = _launch(n, out / "bsp", "homogeneous-8", run, ["bsp"], path=path)[0]
    ours_step = ours["wall_time_s"] / ours["updates"]
    keys = {"setting": where}
    return [
        {"policy": ours_name, "metric": "time per step", "value": 1e3 * ours_step, "unit": "ms", **keys},
        {
            "policy": ours_name,
            "metric": "time per step ÷ DDP's (target ≤ 1.3)",
            "value": ours_step / ddp["step_s"],
            "unit": "",
            **keys,
        },
        {"policy": ours_name, "metric": "compute share", "value": 100 * ours["compute_share"], "unit": "%", **keys},
    ]


def calibrated_scenario(scenario_name: str, trace_path: Path, n: int, steps: int, *, path: str = "ps") -> Any:
    """The scenario with the simulator's timing taken from a real run's trace
    on ``path`` (see the module docstring for the latency on ``collective``)."""
    compute = defaultdict(list)
    transfers = []
    pushes, pulls = [], []
    for r in iter_records(trace_path, kinds=("compute", "push", "pull")):
        if r["ev"] == "compute":
            compute[r["w"]].append(r["end"] - r["t"])
        else:
            transfers.append(r["end"] - r["t"])
            (pushes if r["ev"] == "push" else pulls).append(r["end"] - r["t"])
    latency_s = statistics.fmean(transfers)
    if path == "collective" and n > 1:  # a round's push and pull, spread over the ring's 2(n−1) phases
        latency_s = (statistics.fmean(pushes) + statistics.fmean(pulls)) / (2 * (n - 1))
    base = load_scenario(scenario_name).with_workers(n)
    raw = {
        k: v
        for k, v in base.to_dict().items()
        if k in ("name", "workload", "workload_args", "batch_size", "lr", "target", "seed")
    }
    raw.update(
        workers=n,
        max_steps=steps,
        fixed_s=1.0,
        per_sample_s=0.0,
        slowdown=[statistics.fmean(compute[w]) for w in range(n)],
        latency_s=latency_s,
        policies=["bsp"],
    )
    return scenario_from_dict(raw)


def calibrate(
    scenario_name: str, policies: list[str], n: int, steps: int, out: Path, *, path: str = "ps", servers: int = 1
) -> list[Row]:
    run = {"max_steps": steps, "max_time_s": None}
    real_runs = _launch(n, out, scenario_name, run, policies, path=path, servers=servers)
    rows = []
    on = ("" if path == "ps" else f", path {path}") + (f", {servers} servers" if servers > 1 else "")
    for spec, real in zip(policies, real_runs, strict=True):
        sc = calibrated_scenario(scenario_name, out / real["trace"], n, steps, path=path)
        sim = Simulation(sc, spec, path=path, servers=servers).run().summary
        keys = {
            "policy": real["label"],
            "setting": f"simulator vs runtime: {scenario_name}, {n} workers, {steps} steps per worker{on}",
        }
        rows += [
            {"metric": "runtime wall time", "value": real["wall_time_s"], "unit": "s", **keys},
            {"metric": "simulated wall time (calibrated)", "value": sim["wall_time_s"], "unit": "s", **keys},
            {
                "metric": "simulated ÷ runtime (target 0.8–1.2)",
                "value": sim["wall_time_s"] / real["wall_time_s"],
                "unit": "",
                **keys,
            },
        ]
    return rows
