"""Entry point of every runtime process: ``torchrun ... -m hetsync.runtime``.

All ranks get the same arguments: ``--config FILE``, the run config that
``hetsync run`` writes (:mod:`hetsync.runtime.config`), or the same settings
as flags, for whoever calls torchrun by hand. Rank 0 becomes the server, the
others workers (see :mod:`hetsync.runtime.process`). This is the runtime's
command line: like ``hetsync.cli`` it is a caller of the runtime, and as one
it writes the report (plots unless --no-plots, and the table) after the runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hetsync.errors import BadInput
from hetsync.runtime.config import DEFAULT_STARTUP_TIMEOUT_S, ProcessOptions, RunConfig
from hetsync.runtime.process import run_process
from hetsync.scenario import add_override_argument, parse_override


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m hetsync.runtime", description=__doc__.splitlines()[0])
    p.add_argument("--config", default=None, help="a run-config.json (hetsync run writes one): no other flag then")
    p.add_argument("--scenario", default="default")
    add_override_argument(p)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--policies", default=None, help="comma-separated policy specs (default: the scenario's)")
    p.add_argument("--out", default="runs/dist")
    p.add_argument(
        "--worker-timeout-s",
        type=float,
        default=60.0,
        help="a worker silent this long while it owes a report is declared gone",
    )
    p.add_argument(
        "--startup-timeout-s",
        type=float,
        default=DEFAULT_STARTUP_TIMEOUT_S,
        help="every rank must have joined the process group within this long, else the run stops",
    )
    p.add_argument("--checkpoint-dir", default=None)
    p.add_argument("--checkpoint-every-s", type=float, default=10.0)
    p.add_argument("--resume", action="store_true", help="continue each policy from its checkpoint in --checkpoint-dir")
    p.add_argument("--throttle", action="store_true", help="make transfers last model bytes / the worker's bandwidth")
    p.add_argument("--pace", action="store_true", help="make steps last as long as the scenario models them")
    p.add_argument("--path", choices=["ps", "collective"], default="ps", help="how a round's gradients travel")
    p.add_argument(
        "--device", default="cpu", help="where the workers compute: cpu or cuda (worker w on cuda:w %% GPUs)"
    )
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--kill-worker", type=int, default=None, help="fault injection: this worker dies (SIGKILL) ...")
    p.add_argument("--kill-at-s", type=float, default=None, help="... this many seconds into each run")
    return p


def config_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> RunConfig:
    """The run config: read from ``--config``, or built from the flags."""
    if args.config is not None:
        given = [
            a.option_strings[0]
            for a in parser._actions
            if a.dest not in ("help", "config") and getattr(args, a.dest) != a.default
        ]
        if given:
            raise BadInput(f"--config holds every setting: drop {', '.join(given)} (or drop --config)")
        return RunConfig.read(Path(args.config))
    overrides = dict(parse_override(o) for o in args.overrides)
    if args.seed is not None:
        overrides["seed"] = args.seed
    policies = tuple(s.strip() for s in args.policies.split(",") if s.strip()) if args.policies else None
    return RunConfig(
        scenario=args.scenario,
        overrides=overrides,
        policies=policies or None,
        process=ProcessOptions(
            out=Path(args.out),
            worker_timeout_s=args.worker_timeout_s,
            startup_timeout_s=args.startup_timeout_s,
            checkpoint_dir=Path(args.checkpoint_dir) if args.checkpoint_dir else None,
            checkpoint_every_s=args.checkpoint_every_s,
            resume=args.resume,
            throttle=args.throttle,
            pace=args.pace,
            kill_worker=args.kill_worker,
            kill_at_s=args.kill_at_s,
            path=args.path,
            device=args.device,
        ),
        plots=not args.no_plots,
    )


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args, parser)
        scenario = config.load_scenario()
        from hetsync.workloads import make_workload

        workload = make_workload(scenario.job.workload, **scenario.job.workload_args)
        scenario.stop.target.direction_for(
            workload.name, workload.metrics
        )  # BadInput: a metric it lacks, on every rank
        specs = config.specs(scenario)
        from hetsync.runner import reporter

        report = reporter(config.process.out, plots=config.plots)
        return run_process(scenario, workload, specs, config.process, on_finished=report)
    except BadInput as e:
        print(f"hetsync.runtime: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
