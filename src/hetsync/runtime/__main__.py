"""Entry point of every runtime process: ``torchrun ... -m hetsync.runtime``.

All ranks get the same arguments. Rank 0 becomes the server, the others
workers; the world size fixes the number of workers (world size − 1), and
the scenario's per-worker settings are cut to that many.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from hetsync.errors import BadInput
from hetsync.scenario import load_scenario, parse_override


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m hetsync.runtime", description=__doc__.splitlines()[0])
    p.add_argument("--scenario", default="default")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--policies", default=None, help="comma-separated policy specs (default: the scenario's)")
    p.add_argument("--out", default="runs/dist")
    p.add_argument(
        "--worker-timeout-s",
        type=float,
        default=60.0,
        help="a worker silent this long while owing a report is declared gone",
    )
    p.add_argument("--checkpoint-dir", default=None)
    p.add_argument("--checkpoint-every-s", type=float, default=10.0)
    p.add_argument("--resume", action="store_true", help="continue each policy from its checkpoint in --checkpoint-dir")
    p.add_argument("--throttle", action="store_true", help="make transfers last model bytes / the worker's bandwidth")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--kill-worker", type=int, default=None, help=argparse.SUPPRESS)  # fault injection (tests, demos)
    p.add_argument("--kill-at-s", type=float, default=None, help=argparse.SUPPRESS)
    return p


def specs_of(args: argparse.Namespace, scenario) -> list[str]:  # type: ignore[no-untyped-def]
    return [s for s in args.policies.split(",") if s.strip()] if args.policies else list(scenario.policies)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    torch.set_num_threads(1)  # many processes share the cores
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    try:
        if world < 2:
            raise BadInput(
                "the runtime needs at least 2 processes (a server and a worker); launch with hetsync run or torchrun"
            )
        overrides = dict(parse_override(o) for o in args.overrides)
        if args.seed is not None:
            overrides["seed"] = args.seed
        scenario = load_scenario(args.scenario, **overrides).with_workers(world - 1)
        from hetsync.workloads import make_workload

        workload = make_workload(scenario.workload, **scenario.workload_args)
        specs = specs_of(args, scenario)
        from hetsync.runner import policy_labels

        policy_labels(scenario, specs)  # bad specs fail on every rank before any traffic
    except BadInput as e:
        print(f"hetsync.runtime: error: {e}", file=sys.stderr)
        return 2
    # a day: deaths are seen at once (connection reset), silence by the server's watchdog
    dist.init_process_group("gloo", timeout=timedelta(days=1))
    try:
        if rank == 0:
            return _serve_and_report(args, scenario, workload, specs)
        from hetsync.runtime.worker import WorkerProcess

        kill_at = args.kill_at_s if args.kill_worker == rank - 1 else None
        WorkerProcess(rank - 1, scenario, workload, throttle=args.throttle, kill_at_s=kill_at).serve()
        return 0
    finally:
        if rank != 0:
            dist.destroy_process_group()


EXIT_STATUS = "exit-status.json"


def _serve_and_report(args: argparse.Namespace, scenario, workload, specs: list[str]) -> int:  # type: ignore[no-untyped-def]
    """Serve, then leave ``exit-status.json`` as the very last act: a launcher
    stops waiting for the agents of workers that died once it appears
    (torchelastic's exit barrier would otherwise wait for them for minutes)."""
    status_path = Path(args.out) / EXIT_STATUS
    status_path.unlink(missing_ok=True)
    try:
        code, message = _serve(args, scenario, workload, specs), ""
    except BadInput as e:
        code, message = 2, str(e)
    except Exception as e:  # reported to the launcher, and in this rank's log
        import traceback

        traceback.print_exc()
        code, message = 1, f"{type(e).__name__}: {e}"
    status_path.parent.mkdir(parents=True, exist_ok=True)
    status_path.write_text(json.dumps({"code": code, "error": message}) + "\n")
    sys.stdout.flush()
    sys.stderr.flush()
    # dead workers leave gloo pairs that would block a clean teardown
    os._exit(code)


def _serve(args: argparse.Namespace, scenario, workload, specs: list[str]) -> int:  # type: ignore[no-untyped-def]
    from hetsync import report
    from hetsync.runner import write_json_atomic
    from hetsync.runtime.server import RuntimeOptions, ServerProcess

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    opts = RuntimeOptions(
        out_dir=out,
        worker_timeout_s=args.worker_timeout_s,
        checkpoint_dir=Path(args.checkpoint_dir) if args.checkpoint_dir else None,
        checkpoint_every_s=args.checkpoint_every_s,
        resume=args.resume,
    )
    server = ServerProcess(scenario, workload, opts)
    runs = []
    try:
        for i, spec in enumerate(specs):
            from hetsync.policies import make_policy
            from hetsync.sim.engine import policy_context

            label = make_policy(spec, policy_context(scenario)).label
            name = report.safe_name(label)
            runs.append(server.run(spec, out / f"trace-{name}.jsonl", run_index=i))
            torch.save(server.last_model, out / f"model-{name}.pt")  # the final global model
            write_json_atomic(out / "summary.json", runs)
    finally:
        server.shutdown()
    if not args.no_plots:
        report.write_report(runs, out)
    report.terminal_console().print(report.summary_table(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
