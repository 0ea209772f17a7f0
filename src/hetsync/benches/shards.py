"""``hetsync bench shards``: asynchronous SGD through 1, 2 or 4 sharded servers
against BSP on the collective path, on the same large model and equal workers.

Issue 27's target: ASP with sharded servers reaching at least 0.9× the
samples per second of BSP on the collective path with 4 equal workers at
50M parameters (the server no longer the bottleneck). Declared as
models × forms, each a ``hetsync run`` (:func:`hetsync.runtime.launch.launch_run`)
of ``--steps`` steps per worker on an MLP (``digits-mlp`` with a hidden layer
wide enough for the size; 75 parameters per hidden unit), equal workers, no
evaluation but the last, one form after the other (their order reversed
every other repeat). Figures per form: samples/s over the run's wall time,
its ratio to collective BSP's, rank 0's CPU share (``server_cpu_s`` over the
wall) and the bytes a push and a pull move at the busiest server process.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from hetsync.benches.common import Row
from hetsync.console import terminal_console
from hetsync.errors import BadInput
from hetsync.summary import as_dicts, read_summary

NAME = "shards"
MODELS = {"mlp-12": 160_000, "mlp-50": 666_667}  # digits-mlp hidden units: 75 parameters each
FORMS = {  # name -> (policy, path, servers)
    "bsp-collective": ("bsp", "collective", 1),
    "asp-1": ("asp", "ps", 1),
    "asp-2": ("asp", "ps", 2),
    "asp-4": ("asp", "ps", 4),
}
BASELINE = "bsp-collective"
TARGET_RATIO = 0.9


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    p.add_argument("--forms", default=",".join(FORMS), help=f"comma-separated, of {', '.join(FORMS)}")
    p.add_argument("--nproc", type=int, default=4, help="equal workers (default 4)")
    p.add_argument("--steps", type=int, default=12, help="steps each worker takes (default 12)")
    p.add_argument("--batch", type=int, default=64, help="each worker's batch (default 64)")
    p.add_argument("--repeats", type=int, default=1, help="runs of each form, alternately (default 1)")
    p.add_argument("--out", type=Path, default=None, help="keep the runs here (default: a temporary folder)")


def run(args: argparse.Namespace) -> list[Row]:
    models = [m for m in args.models.split(",") if m]
    forms = [f for f in args.forms.split(",") if f]
    bad = [m for m in models if m not in MODELS] + [f for f in forms if f not in FORMS]
    if bad or not models or not forms or args.nproc < 1 or args.steps < 2 or args.repeats < 1:
        raise BadInput(
            f"--models of {sorted(MODELS)}, --forms of {sorted(FORMS)}, --nproc >= 1, --steps >= 2; got {bad}"
        )
    if args.out is not None:
        return _run(args, models, forms, args.out)
    with tempfile.TemporaryDirectory() as tmp:
        return _run(args, models, forms, Path(tmp))


def one_run(form: str, hidden: int, args: argparse.Namespace, out: Path) -> dict[str, float]:
    """One ``hetsync run``: samples/s, rank 0's CPU share and the parameter count."""
    from hetsync.runtime.config import ProcessOptions, RunConfig
    from hetsync.runtime.launch import launch_run, server_log_tail

    policy, path, servers = FORMS[form]
    overrides = {
        "workers": args.nproc,
        "workload": "digits-mlp",
        "workload_args": {"hidden": hidden},
        "batch_size": args.batch,
        "lr": 0.05,
        "max_steps": args.steps,
        "max_time_s": 600,
        "eval_every_s": 600,  # (the first and last evaluations only: each fetches the whole model)
        "slowdown": [1.0] * args.nproc,
        "jitter": 0.0,
        "model_bytes": None,  # (the bytes counted: the real model's)
    }
    config = RunConfig(
        scenario="default",
        overrides=overrides,
        policies=(policy,),
        process=ProcessOptions(out=out, path=path, servers=servers),
        plots=False,
    )
    code = launch_run(config, args.nproc, timeout_s=900)
    if code != 0:
        raise RuntimeError(f"{form} failed (status {code}); see {out}:\n{server_log_tail(out)}")
    (summary,) = as_dicts(read_summary(out / "summary.json"))
    return {
        "samples_per_s": float(summary["samples_per_s"]),
        "server_share": summary["server_cpu_s"] / summary["wall_time_s"],
        "params": 75.0 * hidden + 10,
    }


def _run(args: argparse.Namespace, models: list[str], forms: list[str], out: Path) -> list[Row]:
    con = terminal_console()
    rows: list[Row] = []
    for model in models:
        got: dict[str, list[dict[str, float]]] = {f: [] for f in forms}
        for i in range(args.repeats):
            for form in forms if i % 2 == 0 else list(reversed(forms)):
                figures = one_run(form, MODELS[model], args, out / f"{model}-{form}-{i}")
                got[form].append(figures)
                con.print(f"  {model}, {form}: {figures['samples_per_s']:.0f} samples/s", markup=False, highlight=False)
        rows += cell_rows(model, args.nproc, got)
    return rows


def cell_rows(model: str, nproc: int, got: dict[str, list[dict[str, float]]]) -> list[Row]:
    params = next(iter(got.values()))[0]["params"]
    setting = f"{model} ({params / 1e6:.1f}M parameters), {nproc} equal workers"
    base_rate = statistics.median(f["samples_per_s"] for f in got[BASELINE]) if BASELINE in got else None
    rows: list[Row] = []
    for form, figures in got.items():
        rate = statistics.median(f["samples_per_s"] for f in figures)
        _, path, servers = FORMS[form]
        head = {"policy": form, "setting": setting}
        rows.append({**head, "metric": "samples/s", "value": rate, "unit": "", "shown": f"{rate:.0f}"})
        if base_rate:
            ratio = rate / base_rate
            name = f"÷ {BASELINE}'s (target ≥ {TARGET_RATIO:g} for asp)"
            rows.append({**head, "metric": name, "value": ratio, "unit": "x", "shown": f"{ratio:.2f}"})
        share = 100 * statistics.median(f["server_share"] for f in figures)
        rows.append({**head, "metric": "rank 0's CPU", "value": share, "unit": "%"})
        # a push and a pull of the model: into and out of the busiest server (ps: its 1/S of the model),
        # or out of and into each member of the ring (collective)
        model_mb = 4 * params / 1e6
        busiest = 2 * 2 * (nproc - 1) / nproc * model_mb if path == "collective" else 2 * model_mb / servers
        rows.append({**head, "metric": "MB per step at the busiest process", "value": busiest, "unit": "MB"})
    return rows
