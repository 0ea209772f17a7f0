"""The ``hetsync`` command line.

Exit status: 0 success, 2 bad input (a one-line message naming what is
wrong), 1 anything else — a policy that broke the contract in one line
naming it, its last event and the rule (``HETSYNC_DEBUG=1`` prints the
traceback too).
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hetsync.errors import BadInput, DeadlockError, PolicyError
from hetsync.summary import as_dicts, finished_runs, read_summary

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130
DEBUG_ENV = "HETSYNC_DEBUG"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # main() prints "hetsync: error: " before it: a sub-command names itself, the top level does not
        raise BadInput(f"{self.prog}: {message}" if " " in self.prog else message)


def _md_arg(p: argparse.ArgumentParser) -> None:
    from hetsync import argcheck

    p.add_argument(
        "--md",
        type=argcheck.out_file,
        default=None,
        metavar="FILE",
        help="also write the table and plots as a markdown page",
    )


def _write_md(args: argparse.Namespace, runs: list[dict[str, Any]], out: Path) -> None:
    from hetsync import report

    if getattr(args, "md", None) is not None:
        report.write_markdown(runs, out, args.md, command="hetsync " + " ".join(sys.argv[1:]))


def _scenario_args(p: argparse.ArgumentParser) -> None:
    from hetsync import argcheck
    from hetsync.scenario import add_override_argument

    p.add_argument("--scenario", "-s", default="default", help="built-in name or YAML file (default: default)")
    add_override_argument(p, "workers=16")
    p.add_argument("--seed", type=argcheck.seed, default=None, help="override the scenario's seed (0..2**32-1)")


class _Specs(argparse.Action):
    """``-p bsp -p asp`` is ``-p bsp,asp``: a repeated policy option adds its specs (it used to keep the last)."""

    def __call__(
        self, parser: Any, namespace: argparse.Namespace, values: Any, option_string: str | None = None
    ) -> None:
        before = getattr(namespace, self.dest, None)
        setattr(namespace, self.dest, values if before is None else f"{before},{values}")


def _path_arg(p: argparse.ArgumentParser, default: str | None) -> None:
    p.add_argument(
        "--path",
        choices=["ps", "collective"],
        default=default,
        help="how a round's gradients travel: ps (through rank 0, which steps and sends the model back, as the "
        "papers' systems did) or collective (all-reduced among the workers, each taking the step, as DDP does; "
        "rank 0 still runs the policy; bsp and lb-bsp)"
        + (f" (default: {default})" if default else " (default: what the script's hetsync.init says, else ps)"),
    )


def _servers_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--servers",
        type=int,
        default=1,
        help="server processes holding the model's shards, 1..64: rank 0 and S-1 more after the workers; "
        "pushes and pulls move every shard in parallel (asynchronous policies on large models; the simulator "
        "models S server nodes, each with the server's link; default: 1)",
    )


def _runtime_args(p: argparse.ArgumentParser) -> None:
    """The options of real processes: ``run`` and ``compare --runtime dist``."""
    from hetsync import argcheck, limits

    p.add_argument("--host", type=argcheck.host, default="127.0.0.1", help="rendezvous address (default: loopback)")
    _path_arg(p, "ps")
    _servers_arg(p)
    p.add_argument(
        "--device",
        default="cpu",
        help="where the workers compute the built-in workload: cpu (default) or cuda (worker w on cuda:w %% GPUs: "
        "model, optimizer state, buffers and batches; --path collective all-reduces on the GPUs over NCCL, one GPU "
        "per worker; rank 0 stays on the CPU, and the wire to it is gloo). Not the scenario's device: cpu|gpu, "
        "which only shapes simulated step times",
    )
    p.add_argument(
        "--worker-timeout-s",
        type=argcheck.seconds(0, limits.MAX_WORKER_TIMEOUT_S, low_open=True),
        default=60.0,
        help=f"declare a silent worker gone after this long, in (0, {limits.MAX_WORKER_TIMEOUT_S:g}] (default: 60)",
    )
    p.add_argument(
        "--startup-timeout-s",
        type=argcheck.seconds(0, limits.MAX_WORKER_TIMEOUT_S, low_open=True),
        default=60.0,
        help="seconds for every rank to join the process group, else the run stops with exit 1 (default: 60)",
    )
    p.add_argument(
        "--checkpoint-dir",
        type=argcheck.checkpoint_dir,
        default=None,
        help="save the global model and policy state here",
    )
    p.add_argument(
        "--checkpoint-every-s",
        type=argcheck.seconds(limits.MIN_CHECKPOINT_EVERY_S, limits.MAX_TIME_S),
        default=10.0,
        help=f"seconds between checkpoints, >= {limits.MIN_CHECKPOINT_EVERY_S:g} (default: 10)",
    )
    p.add_argument("--resume", action="store_true", help="continue from the checkpoints in --checkpoint-dir")
    p.add_argument(
        "--max-restarts",
        type=argcheck.restarts,
        default=0,
        help="if the server (rank 0) dies, restart the job from its last checkpoint up to this many times "
        "(needs --checkpoint-dir; default: 0)",
    )
    p.add_argument(
        "--max-worker-restarts",
        type=argcheck.restarts,
        default=0,
        help="if a worker process dies, start it again up to this many times in all: it comes back on a session "
        "of its own with the current model and goes on where its data was (path ps, one server, one policy that "
        "takes joins; a scenario's membership with leave_s and join_s restarts its workers anyway; default: 0)",
    )
    p.add_argument("--throttle", action="store_true", help="transfers last at least model bytes / bandwidth")
    p.add_argument(
        "--pace",
        action="store_true",
        help="steps last as long as the scenario models them (fixed_s + per_sample_s x batch, slowdown, noise, "
        "delay) instead of the real step stretched by the slowdown; with --throttle, the scenario's timing",
    )


def build_parser(bench_name: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; ``bench_name`` names the one bench whose own
    options are added (importing a bench imports torch and the simulator)."""
    from hetsync import argcheck, limits

    out_dir = argcheck.out_dir
    parser = _Parser(prog="hetsync", description="Synchronization policies for heterogeneous clusters.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("compare", help="simulate several policies on one scenario, side by side")
    _scenario_args(p)
    p.add_argument(
        "--policies",
        "--policy",
        "-p",
        default=None,
        action=_Specs,
        help="comma-separated or repeated, e.g. bsp,asp,ssp:s=3 (default: the scenario's)",
    )
    p.add_argument("--out", "-o", type=out_dir, default="runs/compare", help="output folder (default: runs/compare)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots, report.html and trace.json")
    p.add_argument("--runtime", choices=["sim", "dist"], default="sim", help="sim (default) or dist: real processes")
    _md_arg(p)
    p.add_argument(
        "--nproc",
        type=argcheck.nproc,
        default=None,
        help=f"with --runtime dist: worker processes, 1..{limits.MAX_NPROC} (default: scenario's workers)",
    )
    _runtime_args(p)  # with --runtime dist

    p = sub.add_parser("simulate", help="simulate one policy on one scenario")
    _scenario_args(p)
    p.add_argument("--policy", "--policies", "-p", required=True, help="one policy spec, e.g. ssp:s=3")
    _md_arg(p)
    p.add_argument("--out", "-o", type=out_dir, default="runs/simulate", help="output folder (default: runs/simulate)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots, report.html and trace.json")
    _path_arg(p, "ps")  # (the simulator models either path)
    _servers_arg(p)  # (and sharded servers)

    p = sub.add_parser("run", help="run policies for real: N worker processes and a server (torch.distributed, gloo)")
    _scenario_args(p)
    p.add_argument(
        "--policy",
        "--policies",
        "-p",
        dest="policies",
        default=None,
        action=_Specs,
        help="spec(s), comma-separated or repeated (default: the scenario's)",
    )
    _nproc_arg(p, 4, "the server")
    p.add_argument("--out", "-o", type=out_dir, default="runs/dist", help="output folder (default: runs/dist)")
    _runtime_args(p)
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots, report.html and trace.json")
    _md_arg(p)

    p = sub.add_parser(
        "launch",
        help="run your own training script (hetsync.init) on N workers + the policy's rank",
        description="Run a training script that uses hetsync.init / sync.optimizer on --nproc worker processes "
        "plus rank 0, which runs the policy. Like torchrun, but the launcher starts each rank on its own (no "
        "torchrun agent), so a worker that dies leaves the run instead of ending it.",
    )
    _nproc_arg(p, 2, "rank 0, which runs the policy,")
    p.add_argument("--out", "-o", type=out_dir, default="runs/loop", help="output folder (default: runs/loop)")
    p.add_argument("--host", type=argcheck.host, default="127.0.0.1", help="rendezvous address (default: loopback)")
    _path_arg(p, None)
    p.add_argument(
        "--max-restarts",
        type=argcheck.restarts,
        default=0,
        help="if rank 0 dies, start the script again up to this many times; hetsync.init goes on from its "
        "checkpoint_dir's checkpoint where there is one (default: 0)",
    )
    p.add_argument(
        "--max-worker-restarts",
        type=argcheck.restarts,
        default=0,
        help="if a worker process dies, start it again up to this many times in all: its hetsync.init comes back "
        "on a session of its own with the current model, and sync.first_step / sync.loader go on where its data "
        "was (path ps, one policy that takes joins; default: 0)",
    )
    p.add_argument(
        "--nproc-max",
        type=argcheck.nproc,
        default=None,
        help="the run has this many workers: --nproc start with it, and the others may join while it runs "
        "(hetsync launch --join OUT script.py ...; path ps; default: --nproc)",
    )
    p.add_argument(
        "--join",
        type=Path,
        default=None,
        metavar="OUT",
        help="start one more worker of the script into the job running in OUT (started with --nproc-max), on "
        "this machine; it takes the job's settings from OUT/rendezvous.json",
    )
    p.add_argument("script", help="the Python training script")
    p.add_argument("script_args", nargs=argparse.REMAINDER, help="its arguments")

    sub.add_parser("policies", help="list the policies with their parameters")
    sub.add_parser("scenarios", help="list the built-in scenarios")

    p = sub.add_parser(
        "report",
        help="rebuild a folder's table, plots and HTML page from its summary.json and traces",
        description="Rebuild the report of a finished (or interrupted) compare, simulate or run folder: "
        "print the table, redraw the plots, write DIR/report.html, DIR/trace.json (and --md FILE). Nothing is simulated.",
    )
    p.add_argument("dir", type=Path, metavar="DIR", help="a folder written by compare, simulate or run")
    p.add_argument("--no-plots", action="store_true", help="only print the table (no PNGs, HTML, trace.json)")
    _md_arg(p)

    p = sub.add_parser(
        "advise",
        help="simulate every applicable policy over several seeds and recommend one for this cluster",
        description="Simulate every applicable policy (a small parameter grid each) on the scenario over "
        "several seeds, rank them by median time to target, and say which to use, how much faster than BSP "
        "it is predicted to be, and why. Writes advice.json, summary.json (seed 0) and advice.html.",
    )
    _scenario_args(p)
    p.add_argument("--seeds", type=int, default=3, help="seeds per candidate, from the scenario's (default: 3)")
    p.add_argument(
        "--policies", "-p", default=None, help="restrict to these, e.g. ssp,asp,lb-bsp:variant=cpu (bsp always runs)"
    )
    p.add_argument(
        "--paths",
        default="ps,collective",
        help="the data-plane paths to weigh: ps (through rank 0) and collective (all-reduced among the workers, "
        "as DDP does) for the policies whose exchanges are rounds; the ranking names the path (bsp@collective) "
        "(default: ps,collective; ps is always weighed: BSP there is the reference)",
    )
    p.add_argument(
        "--servers",
        default="1",
        help="sharded-server counts to weigh too, e.g. 1,2,4: each policy the shards can carry also runs with "
        "its model on S servers (asp@servers=4; hetsync run --servers) (default: 1, rank 0 alone)",
    )
    p.add_argument("--out", "-o", type=out_dir, default="runs/advise", help="output folder (default: runs/advise)")
    p.add_argument("--jobs", "-j", type=int, default=None, help="processes to simulate in (default: one per core)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots and advice.html")
    p.add_argument(
        "--verify",
        action="store_true",
        help="then run the recommended policy, the runner-up and BSP for real (as hetsync run, with --throttle, "
        "in OUT/verify/) and print predicted against measured time to target and throughput",
    )
    p.add_argument(
        "--verify-seeds",
        type=int,
        default=1,
        help="with --verify: real runs per verified policy, the first of the simulated seeds; measured figures "
        "are their medians (default: 1)",
    )
    p.add_argument(
        "--host", type=argcheck.host, default="127.0.0.1", help="with --verify: rendezvous address (default: loopback)"
    )

    p = sub.add_parser(
        "profile",
        help="measure this cluster with a short real job and write a scenario the simulator runs",
        description="Start N worker processes and a server, time real steps at a few batch sizes on every "
        "worker and transfers on every link, and write OUT/cluster.yaml (a scenario: hetsync compare/advise "
        "-s OUT/cluster.yaml), profile.json and a page (profile.md, profile.html, profile.png). With "
        "--emulate SCENARIO this machine plays that cluster (its slowdowns, noise and link bandwidths applied "
        "for real), which the profile should then recover.",
    )
    p.add_argument(
        "--scenario",
        "-s",
        default=None,
        help="the job to time: its workload and batch size, kept in the written scenario "
        "(default: the --emulate scenario, else default)",
    )
    p.add_argument("--emulate", default=None, metavar="SCENARIO", help="play this cluster on this machine")
    p.add_argument(
        "--nproc",
        type=argcheck.nproc,
        default=None,
        help="worker processes; the server is one more (default: the emulated cluster's workers, else 4)",
    )
    p.add_argument(
        "--compute-s",
        type=argcheck.seconds(0, 600, low_open=True),
        default=6.0,
        help="seconds of timed steps per worker, in (0, 600] (default: 6)",
    )
    p.add_argument(
        "--batch-sizes", default=None, help="comma-separated batch sizes to time (default: b/2, b, 2b of the job's)"
    )
    p.add_argument("--link-reps", type=int, default=5, help="timed transfers per size and link, 1..100 (default: 5)")
    p.add_argument(
        "--from-raw",
        type=Path,
        default=None,
        metavar="FILE",
        help="fit the raw.json that `torchrun ... -m hetsync.advise.profile_job` wrote on a real cluster (starts nothing)",
    )
    p.add_argument(
        "--script",
        type=Path,
        default=None,
        metavar="FILE",
        help="profile your own training script (one that uses hetsync.init, sync.optimizer and sync.finish) "
        "instead of the built-in job: its steps are timed as your loop runs them; its arguments go after --",
    )
    p.add_argument(
        "--workload",
        default=None,
        metavar="MODULE:FUNCTION",
        help="with --script: your model for the simulator, a function returning hetsync.workloads.from_module(...) "
        "(a module beside the script, in this folder or installed, or path/to/file.py:function); cluster.yaml "
        "names it, so advise learns your model, not a built-in stand-in",
    )
    p.add_argument("--host", type=argcheck.host, default="127.0.0.1", help="rendezvous address (default: loopback)")
    p.add_argument("--out", "-o", type=out_dir, default="runs/profile", help="output folder (default: runs/profile)")
    p.add_argument("--no-plots", action="store_true", help="skip profile.png and profile.html")
    p.add_argument("script_args", nargs="*", metavar="-- ARGS", help="with --script: the script's own arguments")

    from hetsync.benches import BENCHES, HELP

    p = sub.add_parser("bench", help="benchmarks that print measured figures")
    bench = p.add_subparsers(dest="bench", required=True, parser_class=_Parser)
    for name, summary in HELP.items():
        b = bench.add_parser(name, help=summary, description=summary)
        if name == bench_name:  # only the bench that runs is imported (torch, the simulator)
            BENCHES[name].add_arguments(b)
        b.add_argument(
            "--json", type=argcheck.out_file, default=None, metavar="FILE", help="also write the figures as JSON"
        )
        b.add_argument(
            "--md", type=argcheck.out_file, default=None, metavar="FILE", help="also write them as a markdown table"
        )
    return parser


def _load(args: argparse.Namespace) -> Any:
    from hetsync.scenario import load_scenario, parse_override

    overrides = dict(parse_override(o) for o in args.overrides)
    if args.seed is not None:
        overrides["seed"] = args.seed
    return _prepare(args, load_scenario(args.scenario, **overrides))


def _launches(args: argparse.Namespace) -> bool:
    """Whether the command runs real processes (``run``, ``compare --runtime dist``)."""
    return args.command == "run" or (args.command == "compare" and getattr(args, "runtime", "sim") == "dist")


def _prepare(args: argparse.Namespace, scenario: Any) -> Any:
    """The scenario as the command will run it, checked before anything
    starts: fitted to ``--nproc`` worker processes, what that or ``--set
    workers=N`` changed said on the terminal (once), memory needs estimated
    for large sizes, and ``--resume``'s checkpoints read."""
    nproc = getattr(args, "nproc", None) if _launches(args) else None
    if _launches(args) and nproc is None:  # compare --runtime dist: a process per scenario worker
        from hetsync import limits

        if scenario.cluster.workers > limits.MAX_NPROC:
            raise BadInput(
                f"--runtime dist starts the scenario's {scenario.cluster.workers} workers as processes on this machine, "
                f"at most {limits.MAX_NPROC}: pass --nproc N (1..{limits.MAX_NPROC}), or use torchrun for more"
            )
    if nproc is not None and nproc != scenario.cluster.workers:
        fitted = scenario.with_workers(nproc)
        why = {note: f"{note} (--nproc {nproc})" for note in fitted.notes[len(scenario.notes) :]}
        scenario = fitted
    else:
        why = {}
    _show_notes(args, [why.get(note, note) for note in scenario.notes])
    if args.command in ("compare", "simulate", "run"):
        from hetsync.driver import policy_labels, policy_specs  # (the specs on this cluster, before the workload)

        specs = [args.policy] if args.command == "simulate" else policy_specs(args.policies, scenario)
        policy_labels(scenario, specs, driver="dist" if _launches(args) else "sim")  # (dist: simulator-only refused)
        if getattr(args, "path", None) not in (None, "ps"):  # a policy that cannot use the path: refused now
            from hetsync.driver import policy_context
            from hetsync.driver.paths import uses_collective
            from hetsync.policies import make_policy

            for spec in specs:
                uses_collective(args.path, make_policy(spec, policy_context(scenario)))
        if _launches(args) or getattr(args, "servers", 1) != 1:  # sharded servers: what they cannot carry, now
            from hetsync.driver import policy_context
            from hetsync.driver.shards import check_servers
            from hetsync.policies import make_policy

            policies = [make_policy(spec, policy_context(scenario)) for spec in specs]
            check_servers(args.servers, scenario, policies, path=args.path, driver="dist" if _launches(args) else "sim")
    processes = scenario.cluster.workers if _launches(args) else 1  # each worker process holds its own batch
    from hetsync.workloads import make_workload

    workload = make_workload(
        scenario.job.workload, **scenario.job.workload_args
    )  # an unknown one, bad arguments: refused now
    if scenario.stop.target.metric is not None:
        scenario.stop.target.direction_for(workload.name, workload.metrics)  # a metric the workload lacks: refused now
    if scenario.job.batch_size > _MEMORY_CHECK_BATCH or scenario.cluster.workers > _MEMORY_CHECK_WORKERS:
        from hetsync import limits

        limits.check_memory(scenario, workload, processes=processes)
    if _launches(args):
        _check_checkpoint_args(args, scenario)
    return scenario


_MEMORY_CHECK_BATCH = 1024  # sizes above these: estimate memory needs (builds the workload once more)
_MEMORY_CHECK_WORKERS = 256


def _say_switches(con: Any, runs: list[dict[str, Any]]) -> None:
    """What a switching policy (auto) chose among, each switch and why (:func:`hetsync.report.switch_lines`)."""
    from hetsync import report

    for heading, lines in report.switch_lines(runs):
        _say(con, heading)
        for line in lines:
            _say(con, f"  {line}")


def _show_notes(args: argparse.Namespace, notes: list[str]) -> None:
    """Print each note once per command (``_load`` may run twice)."""
    shown: set[str] = getattr(args, "_notes_shown", set())
    fresh = [note for note in notes if note not in shown]
    if not fresh:
        return
    from hetsync import report

    con = report.terminal_console()
    for note in fresh:
        con.print(f"note: {note}", style="yellow", markup=False, highlight=False)
    args._notes_shown = shown | set(fresh)


def _check_checkpoint_args(args: argparse.Namespace, scenario: Any) -> None:
    """``--resume`` needs ``--checkpoint-dir`` naming the folder of the run
    it continues, whose checkpoints this run can resume (checked here, before
    any process starts, rather than by the server after launch)."""
    if not getattr(args, "resume", False):
        return
    if getattr(args, "checkpoint_dir", None) is None:
        raise BadInput("--resume needs --checkpoint-dir DIR: the folder the interrupted run saved its checkpoints in")
    from hetsync import runner
    from hetsync.runtime.checkpoint_check import check_resume
    from hetsync.workloads import make_workload

    labels = runner.policy_labels(scenario, runner.policy_specs(args.policies, scenario))
    workload = make_workload(scenario.job.workload, **scenario.job.workload_args)
    check_resume(
        Path(args.checkpoint_dir), scenario=scenario, labels=labels, workload=workload, workers=scenario.cluster.workers
    )


def _progress_columns() -> tuple[Any, ...]:
    """One progress bar per policy run: name, bar, percent, time, and on real
    processes the server's status (steps, workers, the last evaluation)."""
    from rich.progress import BarColumn, TextColumn, TimeElapsedColumn

    return (
        TextColumn("{task.description:<18}"),
        BarColumn(),
        TextColumn("{task.percentage:>5.1f}%"),
        TimeElapsedColumn(),
        TextColumn("{task.fields[status]}"),
    )


def _finish(
    con: Any,
    args: argparse.Namespace,
    runs: list[dict[str, Any]],
    out: Path,
    *,
    plots: bool = True,
    notes: bool = False,
) -> list[Path]:
    """Print the table of the finished runs, what happened during them
    (workers that left, a policy's switches and why, notes), and write what goes with it: the plots
    (unless ``plots`` is false: the runtime's server drew them already) and
    ``trace.json`` and the HTML page unless --no-plots, and the markdown page with --md.
    ``notes``: print the runs' notes too (a live command printed them before
    it started).
    Returns the files written, ``summary.json`` and traces first."""
    from hetsync import report

    con.print(report.summary_table(runs))
    for run in runs:
        for x in run.get("workers_left") or []:
            _say(con, f"{run['label']}: worker {x['worker']} left at {x['t']:.2f}s ({x['reason']})")
        for x in run.get("workers_joined") or []:  # (the simulator's membership)
            _say(
                con, f"{run['label']}: worker {x['worker']} joined at {x['t']:.2f}s (the model by {x['ready_s']:.2f}s)"
            )
    _say_switches(con, runs)
    if notes:  # each note once (the notes are the scenario's, the same for every run)
        for note in dict.fromkeys(n for run in runs for n in run.get("notes") or []):
            _say(con, f"note: {note}", style="yellow")
    written = [out / "summary.json"] + [out / r["trace"] for r in runs if r.get("trace")]
    if not getattr(args, "no_plots", False):  # plots=False: the runtime's server drew them
        written += report.write_outputs(runs, out, command=_command_line(), draw=plots)
    _write_md(args, runs, out)
    return written


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hetsync")
    except PackageNotFoundError:  # run from a source tree without installing
        return "unknown"


def _command_line() -> str:
    return "hetsync " + " ".join(sys.argv[1:])


def _say(con: Any, text: str, style: str | None = None) -> None:
    """Print a line taken literally (paths, labels and errors come from outside)."""
    con.print(text, style=style, markup=False, highlight=False)


_OPEN: list[Any] = []  # the output folders the running command began (outdir.Replacing), settled by run()


def _begin_out(
    con: Any,
    args: argparse.Namespace,
    out: Path,
    *,
    inputs: Sequence[Path | str | None] = (),
    also: Sequence[str] = (),
    stay: Sequence[Path | str | None] = (),
    set_aside: bool = True,
    keep_traces: bool = False,
) -> None:
    """Make ``out`` ready once every input is checked (:func:`hetsync.outdir.begin`):
    the earlier results set aside, never deleted, until :func:`run` settles
    the folder by the command's outcome."""
    from hetsync import outdir

    scenario = getattr(args, "scenario", None)
    given = [*inputs, scenario if scenario and Path(scenario).is_file() else None]
    _check_md(args, out, given)
    replacing = outdir.begin(out, inputs=given, also=also, stay=stay, set_aside=set_aside, keep_traces=keep_traces)
    _OPEN.append(replacing)
    if replacing.set_aside:
        _say(
            con,
            f"set aside the results of an earlier run in {out}/ ({replacing.set_aside} files) "
            f"in {replacing.aside}/ until this run finishes",
            style="dim",
        )


def _metric_plot(scenario: Any) -> list[str]:
    """The name of the plot of the scenario's target metric (``loss.png``)."""
    from hetsync.outdir import safe_name

    return [f"{safe_name(scenario.stop.target.metric)}.png"]


def _check_md(args: argparse.Namespace, out: Path, inputs: Sequence[Path | str | None]) -> None:
    """``--md FILE`` may be neither one of the run's inputs nor a file the run writes in ``out``."""
    from hetsync import outdir

    md = getattr(args, "md", None)
    if md is None:
        return
    path = Path(md).resolve()
    if any(x is not None and Path(x).resolve() == path for x in inputs):
        raise BadInput(f"--md {md} is one of this command's inputs: write the page to another file")
    rel = outdir.inside(out, path)
    if rel is None:
        return
    if rel != "report.md" and outdir.hetsync_writes(rel):
        raise BadInput(
            f"--md {md} is a file hetsync writes in {out}/: write the page to another file, e.g. {out}/report.md"
        )


def _settle_out(ok: bool) -> None:
    """Settle every output folder the command began: drop the earlier results
    after a run that finished, else keep or restore them (outdir.Replacing.finish)."""
    from hetsync import report

    while _OPEN:
        line = _OPEN.pop().finish(ok)
        if line:
            _say(report.terminal_console(), line, style="yellow")


def _nproc_arg(p: argparse.ArgumentParser, default: int, extra: str) -> None:
    from hetsync import argcheck, limits

    p.add_argument(
        "--nproc",
        type=argcheck.nproc,
        default=default,
        help=f"worker processes, 1..{limits.MAX_NPROC}; {extra} is one more (default: {default})",
    )


def _cmd_compare(args: argparse.Namespace, specs: list[str] | None = None) -> int:
    if getattr(args, "runtime", "sim") == "dist":
        if args.policies is None and specs is not None:
            args.policies = ",".join(specs)
        return _cmd_run(args, args.nproc or _load(args).cluster.workers)
    _refuse_runtime_options(args)
    from rich.markup import escape
    from rich.progress import Progress

    from hetsync import report, runner

    con = report.terminal_console()
    scenario = _load(args)
    if specs is None:
        specs = runner.policy_specs(args.policies, scenario)
    labels = runner.policy_labels(scenario, specs)
    out = Path(args.out)
    con.print(
        f"[bold]{escape(scenario.name)}[/]: {scenario.cluster.workers} workers, {escape(scenario.job.workload)}, "
        f"policies {escape(', '.join(labels))}{' on path collective' if args.path == 'collective' else ''}"
        f"{f' with {args.servers} sharded servers' if args.servers > 1 else ''} "
        f"→ {escape(str(out))}/"
    )
    _begin_out(con, args, out, also=_metric_plot(scenario))
    runs: list[dict[str, Any]] = []
    columns = _progress_columns()
    interrupted = False
    with Progress(*columns, console=con, transient=False) as bar:
        tasks = {label: bar.add_task(escape(label), total=1.0, status="") for label in labels}

        def tick(label: str, fraction: float, status: str = "") -> None:
            bar.update(tasks[label], completed=fraction, status=escape(status))

        def done(summary: dict[str, Any]) -> None:
            runs.append(summary)
            bar.update(tasks[summary["label"]], completed=1.0)

        try:
            runner.compare(scenario, specs, out, progress=tick, on_result=done, path=args.path, servers=args.servers)
        except KeyboardInterrupt:
            interrupted = True
    if interrupted:  # summary.json, not the callbacks, says which runs finished
        return _interrupted(con, args, _finished_runs(out), labels, out)
    measured = next((r["measured_step"] for r in runs if r.get("measured_step")), None)
    written = _finish(con, args, runs, out)
    if measured is not None:  # one measurement serves every run of the comparison
        from hetsync.steptime import describe_measured

        _say(con, describe_measured(measured, scenario.job.workload))
    _say(con, "wrote " + ", ".join(str(p) for p in written))
    return 0


def _interrupted(con: Any, args: argparse.Namespace, runs: list[dict[str, Any]], labels: list[str], out: Path) -> int:
    """After Ctrl-C: report the runs that finished and say what did not; 130."""
    from hetsync.outdir import PARTIAL_SUFFIX

    finished = {r.get("label") for r in runs}
    missing = [label for label in labels if label not in finished]
    partial = sorted(p.name for p in out.glob("trace-*.jsonl" + PARTIAL_SUFFIX))
    if runs:
        written = _finish(con, args, runs, out)
        _say(con, "wrote " + ", ".join(str(p) for p in written))
    _say(
        con,
        f"interrupted: {len(runs)} of {len(labels)} runs finished; not finished: {', '.join(missing) or 'none'}"
        + (f" (partial trace kept as {', '.join(partial)})" if partial else ""),
        style="yellow",
    )
    return EXIT_INTERRUPTED


def _cmd_run(args: argparse.Namespace, nproc: int) -> int:
    from rich.markup import escape
    from rich.progress import Progress

    from hetsync import report, runner
    from hetsync.driver.core import policy_labels
    from hetsync.runtime import launch

    scenario = _load(args).with_workers(nproc)
    specs = runner.policy_specs(args.policies, scenario)
    labels = runner.policy_labels(scenario, specs)
    out = Path(args.out)
    config = _run_config(args, specs, out)
    opts = config.process  # (what the ranks would refuse, refused before any of them starts)
    policy_labels(scenario, specs, driver="dist")
    opts.check_rejoin(scenario, specs)
    opts.check_device(scenario, specs)
    throttle, pace = config.process.emulation(scenario)
    timing = {(True, True): "modelled step and transfer times", (False, True): "modelled step times"}.get(
        (throttle, pace), "throttled links" if throttle else ""
    )
    timing = f" ({timing})" if timing else ""
    con = report.terminal_console()
    con.print(
        f"[bold]{escape(scenario.name)}[/] on torch.distributed (gloo{'' if opts.device == 'cpu' else ', workers on cuda'}): "
        f"{nproc} worker processes + "
        f"{'1 server' if args.servers == 1 else f'{args.servers} sharded servers'}, "
        f"policies {escape(', '.join(labels))}{timing} → {escape(str(out))}/"
    )
    resumable = getattr(args, "checkpoint_dir", None) is not None
    _begin_out(
        con, args, out, also=_metric_plot(scenario), set_aside=not getattr(args, "resume", False)
    )  # (--resume continues the run in place)
    columns = _progress_columns()
    interrupted = False
    with Progress(*columns, console=con) as bar:
        tasks = {label: bar.add_task(escape(label), total=1.0, status="") for label in labels}
        done: set[str] = set()

        def tick(label: str, fraction: float, status: str = "") -> None:
            for earlier in labels[: labels.index(label)]:
                if earlier not in done:
                    done.add(earlier)
                    bar.update(tasks[earlier], completed=1.0)
            bar.update(tasks[label], completed=fraction, status=escape(status))

        try:

            def restarted(attempt: int, why: str) -> None:
                _say(con, f"{why}: restart {attempt} of {config.process.max_restarts}, from the checkpoints")

            host = getattr(args, "host", launch.LOOPBACK)
            code = launch.launch_run(config, nproc, host=host, on_progress=tick, on_restart=restarted)
        except KeyboardInterrupt:  # the launcher has stopped every process it started
            interrupted, code = True, EXIT_INTERRUPTED
        if code == 0:
            for label in labels:
                bar.update(tasks[label], completed=1.0)
    if interrupted:
        runs = _finished_runs(out)
        if not resumable:  # a trace that --resume cannot continue is no run: set it aside
            _set_aside_partial_traces(out, labels, runs)
        else:
            _say(con, f"continue with the same command and --resume (checkpoints in {args.checkpoint_dir})")
        return _interrupted(con, args, runs, labels, out)
    if code != 0:
        return _launch_failed(con, out, code)
    runs = as_dicts(read_summary(out / "summary.json"))
    written = _finish(con, args, runs, out, plots=False)
    _say(con, "wrote " + ", ".join(str(p) for p in written) + f" and {out}/logs/")
    return 0


def _run_config(args: argparse.Namespace, specs: list[str], out: Path) -> Any:
    """What every rank of ``run`` / ``compare --runtime dist`` is given (written to ``OUT/run-config.json``)."""
    from hetsync.runtime.config import ProcessOptions, RunConfig
    from hetsync.scenario import parse_override

    overrides = dict(parse_override(o) for o in args.overrides)
    if args.seed is not None:
        overrides["seed"] = args.seed
    return RunConfig(
        scenario=args.scenario,
        overrides=overrides,
        policies=tuple(specs),
        process=ProcessOptions(
            out=out,
            worker_timeout_s=args.worker_timeout_s,
            startup_timeout_s=args.startup_timeout_s,
            checkpoint_dir=Path(args.checkpoint_dir) if args.checkpoint_dir is not None else None,
            checkpoint_every_s=args.checkpoint_every_s,
            resume=args.resume,
            throttle=args.throttle,
            pace=args.pace,
            path=args.path,
            servers=args.servers,
            max_restarts=args.max_restarts,
            max_worker_restarts=args.max_worker_restarts,
            device=args.device,
        ),
        plots=not args.no_plots,
    )


def _launch_failed(con: Any, out: Path, code: int) -> int:
    """The processes ended with ``code`` != 0: say why in one line (BadInput
    when they refused their input, as a simulation does); returns 1."""
    from hetsync.runtime import launch

    refused = _bad_input_message(out)
    if refused is not None:
        raise BadInput(refused)
    breach = _policy_breach(out)
    if breach is not None:  # the policy broke the contract on rank 0: its one line, the traceback in the log
        line = f"{breach} (traceback in {out}/logs/rank-0.log)"
        con.print(line, style="red", markup=False, highlight=False, soft_wrap=True)  # (one line, however long)
        return 1
    stopped = launch.launcher_reason(out)
    if stopped is not None:  # the launcher stopped the run (start-up failed, the server died): its one line
        _say(con, stopped, style="red")
        if _finished_runs(out):
            _say(con, f"the runs that finished are in {out}/: `hetsync report {out}` shows them", style="dim")
        return 1
    _say(con, f"the server exited with status {code}; last lines of {out}/logs/rank-0.log:", style="red")
    _say(con, launch.server_log_tail(out))
    return 1


def _cmd_launch(args: argparse.Namespace) -> int:
    """Your own training script (hetsync.loop) on N workers + the policy's rank, each rank its own process."""
    from rich.markup import escape
    from rich.progress import Progress

    from hetsync.console import terminal_console
    from hetsync.runtime import launch  # (it imports no torch, nor hetsync.report matplotlib: the ranks start at once)
    from hetsync.runtime.config import RESUME_ENV

    script = Path(args.script)
    if not script.is_file():
        raise BadInput(f"no such script: {args.script!r} (hetsync launch runs a Python file under torch.distributed)")
    if args.join is not None:
        return _cmd_join(args, script)
    rejoins = _check_launch_membership(args)
    out = Path(args.out)
    con = terminal_console()
    con.print(
        f"[bold]{escape(script.name)}[/] on torch.distributed (gloo): {args.nproc} worker processes + 1 "
        f"for the policy (rank 0) → {escape(str(out))}/"
    )
    # (a script resuming from a checkpoint continues its trace)
    _begin_out(con, args, out, inputs=[script], keep_traces=True)
    with Progress(*_progress_columns(), console=con) as bar:
        task = bar.add_task(escape(script.name), total=1.0, status="")

        def tick(label: str, fraction: float, status: str = "") -> None:
            bar.update(task, description=escape(label), completed=fraction, status=escape(status))

        try:
            env = {} if args.path is None else {"HETSYNC_PATH": args.path}  # (hetsync.runtime.collective.PATH_ENV)
            if args.nproc_max is not None and args.nproc_max > args.nproc:
                joins = f"hetsync launch --join {out} {' '.join([str(script), *args.script_args])}"
                said = f"up to {args.nproc_max - args.nproc} more worker(s) may join: {joins}"
                con.print(said, style="dim", markup=False, highlight=False, soft_wrap=True)  # (one line: a command)

            def attempt(k: int) -> int:  # k > 0: the server died; hetsync.init resumes from its checkpoint_dir
                again = {RESUME_ENV: "1"} if k else {}
                return launch.launch(
                    args.nproc,
                    args.script_args,
                    out,
                    host=args.host,
                    on_progress=tick,
                    script=str(script),
                    env={**env, **again},
                    rejoins=rejoins,
                    nproc_max=args.nproc_max,
                )

            def restarted(k: int, why: str) -> None:
                _say(con, f"{why}: restart {k} of {args.max_restarts}, from the script's checkpoint_dir if it has one")

            code = launch.with_restarts(attempt, out, args.max_restarts, restarted)
        except KeyboardInterrupt:
            _say(con, f"interrupted; what the run wrote is in {out}/", style="red")
            return EXIT_INTERRUPTED
        if code == 0:
            bar.update(task, completed=1.0)
    if code != 0:
        return _launch_failed(con, out, code)
    try:
        runs = as_dicts(read_summary(out / "summary.json"))
    except BadInput as e:  # missing, not JSON, or not runs as hetsync writes them
        why = f"; {e}" if (out / "summary.json").is_file() else ""
        _say(con, f"the script finished without a summary in {out}/ (did it call hetsync.init?){why}", style="red")
        return 1
    from hetsync import report

    # what rank 0 said into its log: the scenario's notes (its job keys not applied) and an evaluation warning
    for note in dict.fromkeys(note for run in runs for note in run.get("notes") or []):
        con.print(f"note: {note}", style="yellow", markup=False, highlight=False)
    con.print(report.summary_table(runs))
    _say_switches(con, runs)
    for run in runs:
        if run.get("eval_warning"):
            con.print(f"warning: {run['label']}: {run['eval_warning']}", style="yellow", markup=False, highlight=False)
    _say(con, f"wrote {out}/summary.json, the traces, model-*.pt and {out}/logs/")
    return 0


def _check_launch_membership(args: argparse.Namespace) -> Any:
    """``hetsync launch``'s workers that come back (``--max-worker-restarts``)
    or join (``--nproc-max``), refused in one line before any process starts
    where they cannot (the script's own policy and path are checked by its
    ``hetsync.init``, on every rank, before any traffic: ProcessOptions.check_rejoin).
    Returns the launcher's plan (:class:`~hetsync.runtime.launch.Rejoins`), or None."""
    from hetsync.runtime.config import ProcessOptions
    from hetsync.runtime.launch import Rejoins

    nproc_max = args.nproc_max
    if nproc_max is not None and nproc_max < args.nproc:
        raise BadInput(
            f"--nproc-max {nproc_max} is below --nproc {args.nproc}: the job starts with --nproc workers and "
            "up to --nproc-max may be in it; give --nproc-max at least --nproc"
        )
    joinable = 0 if nproc_max is None else nproc_max - args.nproc
    if joinable and args.max_restarts:
        raise BadInput(
            f"--nproc-max {nproc_max} with --max-restarts {args.max_restarts}: a job started again from its "
            "checkpoint starts with --nproc workers, and those that had joined would have to join again; drop one"
        )
    # (ProcessOptions refuses the collective path with either, naming the option)
    ProcessOptions(path=args.path or "ps", max_worker_restarts=args.max_worker_restarts, joinable=joinable)
    return Rejoins(max_worker_restarts=args.max_worker_restarts) if args.max_worker_restarts else None


def _cmd_join(args: argparse.Namespace, script: Path) -> int:
    """``hetsync launch --join OUT script.py ...``: one more worker into the job running in OUT."""
    from rich.markup import escape

    from hetsync.console import terminal_console
    from hetsync.runtime import launch

    bare = build_parser().parse_args(["launch", str(script)])  # (the options' defaults, as the parser has them)
    given = [
        flag
        for flag in ("--nproc", "--out", "--path", "--max-restarts", "--max-worker-restarts", "--nproc-max")
        if getattr(args, name := flag[2:].replace("-", "_")) != getattr(bare, name)
        and not (flag == "--out" and Path(args.out) == args.join)  # (--out the job's folder: the same thing said)
    ]
    if given:
        raise BadInput(
            f"--join {args.join} takes the running job's settings from {args.join}/{launch.JOB_FILE}: drop {given[0]}"
        )
    con = terminal_console()
    out = args.join

    def started(worker: int, log: Path) -> None:
        said = (
            f"[bold]{escape(script.name)}[/]: worker {worker} joins the job in {escape(str(out))}/ → {escape(str(log))}"
        )
        con.print(said, soft_wrap=True)

    try:
        code = launch.join(out, args.script_args, script=str(script), on_start=started)
    except KeyboardInterrupt:
        _say(con, "interrupted; the worker left the job", style="red")
        return EXIT_INTERRUPTED
    if code != 0:
        try:
            launch.running_job(out)
            why = ""
        except BadInput:  # (the job ended while the worker started: it had nothing to join)
            why = " (the job ended while it started: join earlier, or give the job more to do)"
        _say(con, f"the worker exited with status {code}{why}; see {out}/logs/", style="red")
        return 1
    _say(con, f"the worker's loop ended; the job's results will be in {out}/")
    return 0


def _refuse_runtime_options(args: argparse.Namespace) -> None:
    """``compare`` in the simulator: options of real processes would be ignored, so say so."""
    probe = _Parser(add_help=False)
    _runtime_args(probe)
    if getattr(args, "nproc", None) is not None:
        raise BadInput("--nproc applies to --runtime dist only (the simulator runs the scenario's workers)")
    for action in probe._actions:
        if action.dest in ("path", "servers"):  # the simulator models either path, and sharded servers
            continue
        if getattr(args, action.dest, action.default) != action.default:
            raise BadInput(f"{action.option_strings[0]} applies to --runtime dist only: add --runtime dist or drop it")


def _finished_runs(out: Path) -> list[dict[str, Any]]:
    """The runs ``summary.json`` records (none if it is missing or unreadable)."""
    return as_dicts(finished_runs(out / "summary.json"))


def _set_aside_partial_traces(out: Path, labels: Sequence[str], runs: list[dict[str, Any]]) -> None:
    from hetsync.outdir import partial_name
    from hetsync.report import safe_name

    finished = {r.get("label") for r in runs}
    for label in labels:
        trace = out / f"trace-{safe_name(label)}.jsonl"
        if label not in finished and trace.exists():
            trace.replace(partial_name(trace))


def _policy_breach(out: Path) -> str | None:
    """The server's one line if a failed run ended because its policy broke
    the contract (a PolicyError or DeadlockError in its exit-status record)."""
    import json

    from hetsync.runtime.process import EXIT_STATUS

    try:
        error = str(json.loads((out / EXIT_STATUS).read_text()).get("error") or "")
    except (OSError, ValueError, AttributeError):
        return None
    for kind in (PolicyError, DeadlockError):
        if error.startswith(f"{kind.__name__}: "):
            return error.removeprefix(f"{kind.__name__}: ")
    return None


def _bad_input_message(out: Path) -> str | None:
    """What the server of a failed ``hetsync run`` refused as bad input (its
    exit-status record, else the error line its entry point logged), or None
    if it failed for another reason."""
    import json

    from hetsync.runtime.process import EXIT_STATUS

    try:
        status = json.loads((out / EXIT_STATUS).read_text())
        if status.get("code") == EXIT_BAD_INPUT and status.get("error"):
            return str(status["error"])
    except (OSError, ValueError, AttributeError):
        pass
    try:
        lines = (out / "logs" / "rank-0.log").read_text().splitlines()
    except OSError:
        return None
    markers = (
        "hetsync.runtime: error: ",  # runtime/__main__.py refused the scenario before starting
        "hetsync.errors.BadInput: ",  # a script under hetsync launch: hetsync.init refused its arguments
    )
    found = [ln.split(m, 1)[1] for ln in lines for m in markers if m in ln]
    return found[-1] if found else None


def _cmd_report(args: argparse.Namespace) -> int:
    from hetsync import outdir, report
    from hetsync.outdir import PARTIAL_SUFFIX, SUMMARY

    out: Path = args.dir
    if not out.is_dir():
        raise BadInput(f"{out} is not a folder: pass the --out folder of a compare, simulate or run")
    # missing: said below; not JSON or a damaged record: one line, now
    runs = as_dicts(read_summary(out / SUMMARY)) if (out / SUMMARY).is_file() else []
    if not runs:
        partial = sorted(p.name for p in out.glob("trace-*.jsonl" + PARTIAL_SUFFIX))
        why = f"; partial traces of interrupted runs: {', '.join(partial)}" if partial else ""
        raise BadInput(f"{out}/{SUMMARY} is missing, unreadable or lists no finished run{why}")
    con = report.terminal_console()
    _check_md(args, out, [out / SUMMARY, *(out / r["trace"] for r in runs if r.get("trace"))])
    with con.capture() as shown:  # shown once all is drawn: a damaged trace is one line, and nothing else
        missing = [r["trace"] for r in runs if r.get("trace") and not (out / r["trace"]).is_file()]
        if missing:
            _say(con, f"traces missing, so no timelines for them: {', '.join(missing)}", style="yellow")
        written = _finish(con, args, runs, out, notes=True)
    con.file.write(shown.get())
    outdir.record(out, written)
    drawn = [p for p in written if p.suffix in (".png", ".html") or p.name == "trace.json"]
    if drawn:
        _say(con, "wrote " + ", ".join(str(p) for p in drawn))
    return 0


def _cmd_advise(args: argparse.Namespace) -> int:
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from hetsync import advise, report

    if not 1 <= args.seeds <= 100:
        raise BadInput(f"--seeds must be an integer in 1..100, got {args.seeds}")
    if not 1 <= args.verify_seeds <= args.seeds:
        raise BadInput(
            f"--verify-seeds must be an integer in 1..{args.seeds} (the real runs take the first of the "
            f"--seeds {args.seeds} simulated seeds), got {args.verify_seeds}"
        )
    if args.jobs is not None and args.jobs < 1:
        raise BadInput(f"--jobs must be >= 1, got {args.jobs}")
    con = report.terminal_console()
    scenario = _load(args)
    only = [s.strip() for s in args.policies.split(",") if s.strip()] if args.policies else None
    if args.policies is not None and not only:
        raise BadInput("--policies is empty: name at least one policy, e.g. --policies ssp,asp")
    paths, servers = advise.parse_paths(args.paths), advise.parse_servers(args.servers)
    if only is not None:  # bad names and specs are refused before the folder is touched
        advise.candidates(scenario, only, paths=paths, servers=servers)
    if args.verify:
        advise.check_verifiable(scenario)
    out = Path(args.out)
    _begin_out(con, args, out)
    columns = (TextColumn("{task.description:<18}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=con, transient=False) as bar:
        task = bar.add_task("candidates × seeds", total=None)

        def start(cands: list[Any], skipped: list[tuple[str, str]], total: int) -> None:
            jobs = min(args.jobs or advise.default_jobs(), total)
            con.print(
                f"[bold]{escape(scenario.name)}[/]: {scenario.cluster.workers} workers, {escape(scenario.job.workload)}; "
                f"{len(cands)} candidates{advise.paths_clause(cands)} × {args.seeds} seeds, up to {jobs} processes "
                f"→ {escape(str(out))}/"
            )
            for spec, why in skipped:
                _say(con, f"skipped {spec}: {why}", style="dim")
            bar.update(task, total=total)

        def ran(done: int, total: int, label: str) -> None:
            bar.update(task, completed=done)

        result = advise.advise(
            scenario,
            out,
            seeds=args.seeds,
            only=only,
            jobs=args.jobs,
            on_start=start,
            on_run=ran,
            paths=paths,
            servers=servers,
        )
    con.print(advise.ranking_table(result))
    if result.workload_note is not None:  # the ranking is of a built-in's learning, not the user's model's
        _say(con, result.workload_note, style="yellow")
    for r in result.ranked:
        for seed, error in zip(r.seeds, r.errors, strict=False):
            if error:
                _say(con, f"{r.label} seed {seed} failed: {error}", style="yellow")
    if result.measured is not None:
        from hetsync.steptime import describe_measured

        _say(con, describe_measured(result.measured, scenario.job.workload))
    rec = result.recommendation
    style = {"switch": "bold green", "bsp": "bold green", "not-significant": "bold yellow"}.get(rec.verdict, "bold red")
    _say(con, f"recommendation: {rec.headline}", style=style)
    _say(con, f"why: {rec.reason}")
    code = 0
    if args.verify:
        result, code = _verify_advice(con, args, result, out)
    written = advise.write_outputs(result, out, plots=not args.no_plots, command=_command_line())
    traces = sum(p.name.startswith("trace-") for p in written)
    files = ", ".join(p.name for p in written if not p.name.startswith("trace-"))
    where = f"on {result.jobs} processes" if result.jobs > 1 else "in one process"
    _say(con, f"simulated in {result.elapsed_s:.0f} s {where}; wrote {out}/: {files} and {traces} seed-0 traces")
    _say_auto_start(con, args, result, out)
    return code


def _say_auto_start(con: Any, args: argparse.Namespace, result: Any, out: Path) -> None:
    """advise's last line: how to start auto from this advice (if it can), so that it adapts when the cluster changes."""
    from hetsync.driver.advised import advised_start

    spec = f"auto:start={out}"
    try:
        advised = advised_start(spec)
    except BadInput:
        return  # (no entry auto can start on)
    if advised is None:
        return
    if result.scenario.job.script is None:
        run = f"hetsync run -s {args.scenario} -p {spec}"
    else:
        run = f"hetsync.init({spec!r}, ...) in your script"
    _say(con, f"to start there and switch when the cluster changes: {run} ({advised.said})", style="bold")


def _verify_advice(con: Any, args: argparse.Namespace, result: Any, out: Path) -> tuple[Any, int]:
    """``advise --verify``: the shortlist on real processes; the advice with
    the verification in it, and the exit status (1: the runs failed, 130: Ctrl-C)."""
    import dataclasses

    from rich.markup import escape
    from rich.progress import Progress

    from hetsync import advise

    specs = result.shortlist()
    labels = {r.candidate.choice: r.label for r in result.ranked}
    folder = out / advise.VERIFY_DIR
    script = result.scenario.job.script
    if script is None:
        ran = f"{result.scenario.cluster.workers} worker processes + 1 server"
        forwarded = advise.verify_args(args.scenario, args.overrides, args.seed, specs, folder)
    else:  # a profiled script's cluster: the script itself, once per policy (hetsync.advise.verify_script)
        emulate = script.get("emulate")
        played = (emulate.get("name", "it") if isinstance(emulate, dict) else emulate) if emulate else None
        ran = f"your script {script['path']} under hetsync launch on {result.scenario.cluster.workers} workers, " + (
            f"emulating the cluster it was profiled on ({played})" if played else "no emulated cluster (as profiled)"
        )
        forwarded = None
    _say(con, f"verify: running {', '.join(labels[s] for s in specs)} for real: {ran} → {folder}/")
    with Progress(*_progress_columns(), console=con) as bar:
        tasks = {labels[s]: bar.add_task(escape(labels[s]), total=1.0, status="") for s in specs}

        def tick(label: str, fraction: float, status: str = "") -> None:
            if label in tasks:
                for earlier in list(tasks)[: list(tasks).index(label)]:
                    bar.update(tasks[earlier], completed=1.0)
                bar.update(tasks[label], completed=fraction, status=escape(status))

        try:
            checked = advise.verify(result, out, forwarded, host=args.host, on_progress=tick, seeds=args.verify_seeds)
        except KeyboardInterrupt:
            _say(con, "verify: interrupted; the advice is written without it", style="yellow")
            return result, EXIT_INTERRUPTED
        except RuntimeError as e:
            _say(con, str(e), style="red")
            return result, 1
        for task in tasks.values():
            bar.update(task, completed=1.0)
    con.print(advise.verification_table(checked, result))
    held = checked.held
    _say(con, checked.verdict(), style="bold green" if held else ("bold red" if held is False else "bold yellow"))
    return dataclasses.replace(result, verification=checked), 0


def _cmd_profile(args: argparse.Namespace) -> int:
    import time

    from hetsync import limits as L
    from hetsync import report
    from hetsync.advise import profile
    from hetsync.scenario import load_scenario
    from hetsync.steptime import batch_sizes_for
    from hetsync.workloads import make_workload

    if not 1 <= args.link_reps <= 100:
        raise BadInput(f"--link-reps must be an integer in 1..100, got {args.link_reps}")
    if args.script is not None:
        if args.from_raw is not None or args.scenario is not None:
            raise BadInput(
                "--script times your own loop with the scenario it passes to hetsync.init: drop --from-raw and --scenario"
            )
        if not args.script.is_file():
            raise BadInput(f"--script {str(args.script)!r}: no such file")
    elif args.script_args:
        raise BadInput(
            f"unexpected arguments {' '.join(args.script_args)!r}: arguments after -- go to --script's script"
        )
    if args.workload is not None and args.script is None:
        raise BadInput("--workload names your model for a profiled script: use it with --script")
    own = profile.script_workload(args.workload, args.script) if args.workload is not None else None
    measured = profile.read_raw(args.from_raw, args.nproc) if args.from_raw is not None else None
    emulated, nproc = profile.check_emulation(args.emulate, args.nproc)
    if measured is not None:
        nproc = int(measured["workers"])
    job_name = args.scenario or args.emulate or "default"
    sc = (profile.job_of_raw(measured) if measured is not None else None) or load_scenario(job_name).with_workers(nproc)
    if args.script is None:
        workload = make_workload(sc.job.workload, **sc.job.workload_args)
        sc.stop.target.direction_for(workload.name, workload.metrics)
    if args.batch_sizes is not None:
        try:
            sizes = sorted({int(b) for b in args.batch_sizes.split(",") if b.strip()})
        except ValueError:
            raise BadInput(f"--batch-sizes must be comma-separated whole numbers, got {args.batch_sizes!r}") from None
        if not sizes or sizes[0] < 1 or sizes[-1] > L.MAX_BATCH_SIZE:
            raise BadInput(
                f"--batch-sizes must be comma-separated whole numbers in 1..{L.MAX_BATCH_SIZE:,} (a scenario's "
                f"batch_size bound), got {args.batch_sizes!r}"
            )
    elif args.script is None:
        sizes = list(batch_sizes_for(sc.job.batch_size))
    else:
        sizes = None  # the script's scenario decides: b/2, b, 2b of its batch_size
    out = Path(args.out)
    con = report.terminal_console()
    emulate = args.emulate if args.emulate and Path(args.emulate).is_file() else None
    _begin_out(con, args, out, inputs=[args.script, emulate], stay=[args.from_raw])
    if measured is not None:
        _say(con, f"fitting {args.from_raw}: {nproc} workers measured on {measured.get('host')}")
    elif args.script is not None:
        _say(
            con,
            f"profiling {args.script} on {nproc} worker processes + rank 0: your loop's steps for "
            f"{args.compute_s:g} s, then every link"
            + (f"; emulating {args.emulate}" if emulated is not None else "")
            + f" → {out}/",
        )
    else:
        _say(
            con,
            f"profiling {nproc} worker processes + 1 server: {sc.job.workload}, batch sizes {sizes}, "
            f"{args.compute_s:g} s of steps each, then every link"
            + (f"; emulating {args.emulate}" if emulated is not None else "")
            + f" → {out}/",
        )
    if emulated is not None and measured is None:
        for note in emulated.notes:  # (another worker count than the cluster's: how its workers were mapped)
            _say(con, f"note: {note}")
    timing = {"emulate": args.emulate, "compute_s": args.compute_s, "link_reps": args.link_reps, "host": args.host}
    try:
        if args.script is not None:
            ref = own[0] if own is not None else None
            measured = profile.run_script(
                args.script, args.script_args, nproc, out, batch_sizes=sizes, workload=ref, **timing
            )
            sc = profile.job_of_raw(measured)
        raw = measured or profile.measure(
            sc, job_name, out, batch_sizes=sizes, model_nbytes=workload.model_nbytes, **timing
        )
    except RuntimeError as e:
        _say(con, str(e), style="red")
        return 1
    prof = profile.fit_profile(raw, sc.job.batch_size)
    header = f"measured by `{_command_line()}` on {raw.get('host')} ({time.strftime('%Y-%m-%d %H:%M')})\n"
    if raw.get("job") is not None:  # a profiled script: the cluster, and the simulator's job said apart
        header += profile.script_header(raw)
    else:
        header += "every timing key below was fitted to the profile; the rest is the job's"
    description = f"profiled: {nproc} workers on {raw.get('host')}" + (
        f", emulating {raw['emulate']}" if raw.get("emulate") else ""
    )
    path = profile.write_profiled(sc, prof, out, header=header, description=description)
    written = [path, out / profile.PROFILE_JSON]
    written += profile.write_page(prof, out, scenario_path=path, command=_command_line(), plots=not args.no_plots)
    con.print(profile.terminal_table(prof))
    for line in profile.summary_lines(prof):
        _say(con, line)
    if own is not None and own[1].model_nbytes != raw.get("model_bytes"):
        _say(
            con,
            f"--workload {args.workload}: its model has {own[1].model_nbytes} bytes of parameters, the script's "
            f"{raw.get('model')} {raw.get('model_bytes')}: is it the model your loop trains? (transfers cost the script's)",
            style="yellow",
        )
    if raw.get("emulated_by") == "script":
        _say(
            con,
            f"emulated the scenario the script passes to hetsync.init, {raw['emulate']!r}, as hetsync launch "
            "runs it (its workers' speeds, delays, noise, stragglers and links); --emulate SCENARIO plays another",
        )
    early = profile.loops_ended_early(raw)
    if early:
        ran = ", ".join(f"{w} after {s:.1f} s" for w, s in early)
        _say(
            con,
            f"the script's loop ended before --compute-s {raw.get('compute_s')} on worker {ran}: "
            "fewer steps were timed; give it more epochs or data to profile longer",
            style="yellow",
        )
    _say(con, "wrote " + ", ".join(str(p) for p in written))
    _say(con, f"next: hetsync advise -s {path}", style="bold")
    return 0


def _cmd_simulate(args: argparse.Namespace) -> int:
    return _cmd_compare(args, specs=[args.policy])


def _cmd_policies() -> int:
    from rich.markup import escape
    from rich.table import Table

    from hetsync.console import terminal_console
    from hetsync.policies import REGISTRY
    from hetsync.policies.config import config_params

    table = Table(title="policies", show_lines=False)
    table.add_column("name", style="bold")
    table.add_column("what it does")
    table.add_column("parameters")
    for name, cls in REGISTRY.items():
        params = "\n".join(p.describe() for p in config_params(cls.config_class)) or "—"
        table.add_row(name, escape(cls.summary), escape(params))
    terminal_console().print(table)
    return 0


def _cmd_scenarios() -> int:
    from rich.markup import escape
    from rich.table import Table

    from hetsync.console import terminal_console
    from hetsync.scenario import builtin_scenarios, load_scenario

    table = Table(title="built-in scenarios")
    table.add_column("name", style="bold")
    table.add_column("workers", justify="right")
    table.add_column("workload")
    table.add_column("description")
    for name in builtin_scenarios():
        sc = load_scenario(name)
        table.add_row(name, str(sc.cluster.workers), sc.job.workload, escape(sc.description))
    terminal_console().print(table)
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    from hetsync.benches import BENCHES
    from hetsync.benches.common import print_rows, write_markdown, write_rows

    rows = BENCHES[args.bench].run(args)
    print_rows(rows, title=f"hetsync bench {args.bench}")
    if args.json is not None:
        write_rows(rows, args.json)
    if args.md is not None:
        command = "hetsync " + " ".join(sys.argv[1:]) if sys.argv[1:2] == ["bench"] else f"hetsync bench {args.bench}"
        write_markdown(rows, args.md, title=f"hetsync bench {args.bench}", command=command)
    return 0


def run(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:  # bare `hetsync`: what it can do, not an error about a missing command
        build_parser().print_help()
        return 0
    bench_name = argv[1] if len(argv) > 1 and argv[0] == "bench" else None
    args = build_parser(bench_name).parse_args(argv)
    try:
        _resolve_advised(args)
        code = _dispatch(args)
    except BaseException:
        _settle_out(ok=False)
        raise
    _settle_out(ok=code == 0)
    return code


def _resolve_advised(args: argparse.Namespace) -> None:
    """``-p auto:start=runs/advise``: auto's start (and its h or b) read from
    that advice, once, here; the note says what it starts on and why."""
    if args.command not in ("compare", "simulate", "run"):
        return
    from hetsync.driver.advised import resolve_specs

    key = "policy" if args.command == "simulate" else "policies"
    given = getattr(args, key, None)
    if not given:
        return
    specs, said = resolve_specs([s.strip() for s in given.split(",") if s.strip()])
    setattr(args, key, ",".join(specs))
    _show_notes(args, said)


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "compare":
        return _cmd_compare(args)
    if args.command == "simulate":
        return _cmd_simulate(args)
    if args.command == "run":
        return _cmd_run(args, args.nproc)
    if args.command == "launch":
        return _cmd_launch(args)
    if args.command == "policies":
        return _cmd_policies()
    if args.command == "scenarios":
        return _cmd_scenarios()
    if args.command == "report":
        return _cmd_report(args)
    if args.command == "advise":
        return _cmd_advise(args)
    if args.command == "profile":
        return _cmd_profile(args)
    return _cmd_bench(args)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return run(argv)
    except BadInput as e:
        print(f"hetsync: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (PolicyError, DeadlockError) as e:  # a policy broke the contract: which, when, what rule
        if os.environ.get(DEBUG_ENV):
            traceback.print_exc()
        hint = f" ({DEBUG_ENV}=1 shows the traceback)" if e.__cause__ and not os.environ.get(DEBUG_ENV) else ""
        print(f"hetsync: error: {e}{hint}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("hetsync: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
