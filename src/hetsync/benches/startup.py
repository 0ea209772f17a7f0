"""``hetsync bench startup``: how long ``hetsync launch`` takes to the first
training step, against torchrun running the equivalent plain DDP script.

The same training script (:mod:`hetsync.benches.startup_loop`: a small CNN,
generated data, AdamW, a DataLoader) runs as plain DDP under ``torchrun
--standalone --nproc-per-node=N`` and converted to hetsync (BSP, with an
``evaluate``) under ``hetsync launch --nproc N`` (N workers and rank 0),
alternately, ``--repeats`` times each (the order swapped every other
repeat, so a load that drifts weighs on both alike). A run's time to first
step is from the launching command's start (its interpreter included) to
the moment its last worker's first ``opt.step()`` returned; its time to
exit, to the command's end. Printed: the medians, their ratio (the target:
hetsync within 1.5× of DDP) and the machine's load average at the runs'
starts — on a shared machine the figures move with it, the ratio less.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hetsync.benches.common import Row
from hetsync.console import terminal_console
from hetsync.errors import BadInput

NAME = "startup"
SCRIPT = Path(__file__).with_name("startup_loop.py")
TARGET_RATIO = 1.5
RUN_LIMIT_S = 300.0  # one launch, start to exit: a run that hangs fails the bench
FORMS = {"ddp": "DDP (torchrun)", "hetsync": "hetsync launch (BSP)"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nproc", type=int, default=2, help="workers (default 2; hetsync starts one more: rank 0)")
    p.add_argument("--repeats", type=int, default=5, help="runs of each, alternately (default 5)")
    p.add_argument("--steps", type=int, default=5, help="steps each worker takes before it ends (default 5)")
    p.add_argument("--quick", action="store_true", help="one run of each (the figures are then one sample)")
    p.add_argument("--out", type=Path, default=None, help="keep the runs' logs here (default: a temporary folder)")


def run(args: argparse.Namespace) -> list[Row]:
    if args.nproc < 1 or args.repeats < 1 or args.steps < 1:
        raise BadInput("--nproc, --repeats and --steps must be >= 1")
    if args.out is not None:
        return _run(args, args.out)
    with tempfile.TemporaryDirectory() as tmp:
        return _run(args, Path(tmp))


def command(form: str, nproc: int, script: Path, marks: Path, steps: int, out: Path) -> list[str]:
    """The launching command of one run, as a user types it."""
    loop_args = [str(script), form, str(marks), str(steps)]
    if form == "ddp":
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", *loop_args]
    return [sys.executable, "-m", "hetsync", "launch", "--nproc", str(nproc), "--out", str(out), *loop_args]


def time_run(form: str, nproc: int, steps: int, folder: Path) -> dict[str, float]:
    """One run: seconds from the command's start to its workers' first step
    (the last one's) and to its end, and the load average at its start."""
    marks = folder / "marks"
    marks.mkdir(parents=True)
    # (run from its own folder: the benches' folder on sys.path would shadow top-level modules)
    script = Path(shutil.copyfile(SCRIPT, folder / SCRIPT.name))
    cmd = command(form, nproc, script, marks, steps, folder / "out")
    load = os.getloadavg()[0]
    with (folder / "launch.log").open("w") as log:
        t0 = time.time()
        try:
            done = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=RUN_LIMIT_S, check=False)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"{FORMS[form]} did not finish within {RUN_LIMIT_S:.0f} s; see {folder}") from None
        ended = time.time()
    firsts = [json.loads(p.read_text())["first_step"] for p in sorted(marks.glob("rank-*.json"))]
    if done.returncode != 0 or len(firsts) != nproc:
        tail = (folder / "launch.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"{FORMS[form]} failed (status {done.returncode}); see {folder}:\n{tail}")
    return {"first_step_s": max(firsts) - t0, "exit_s": ended - t0, "load": load}


def _run(args: argparse.Namespace, out: Path) -> list[Row]:
    repeats = 1 if args.quick else args.repeats
    con = terminal_console()
    times: dict[str, list[dict[str, float]]] = {form: [] for form in FORMS}
    for i in range(repeats):
        for form in FORMS if i % 2 == 0 else reversed(FORMS):
            t = time_run(form, args.nproc, args.steps, out / f"{form}-{i}")
            times[form].append(t)
            con.print(
                f"  {FORMS[form]}, run {i + 1}/{repeats}: first step after {t['first_step_s']:.2f} s, "
                f"exit after {t['exit_s']:.2f} s (load average {t['load']:.2f})",
                markup=False,
                highlight=False,
            )
    return rows(times, args.nproc)


def rows(times: dict[str, list[dict[str, float]]], nproc: int) -> list[Row]:
    """The table: per form the median time to first step and to exit
    (``[lowest–highest]`` of the runs), and the ratio to DDP's; the load average."""
    repeats = len(times["ddp"])
    runs = "1 run each" if repeats == 1 else f"{repeats} runs each, alternately: medians (lowest–highest)"
    setting = f"{nproc} workers (torchrun: {nproc} processes; hetsync launch: {nproc} + rank 0), small CNN, {runs}"

    def median(form: str, key: str) -> float:
        return statistics.median(t[key] for t in times[form])

    def figure(form: str, key: str, metric: str) -> Row:
        values = [t[key] for t in times[form]]
        shown = f"{median(form, key):.2f}" + (f" [{min(values):.2f}–{max(values):.2f}]" if len(values) > 1 else "")
        return {"policy": FORMS[form], "metric": metric, "value": median(form, key), "unit": "s", "shown": shown}

    ddp_first = median("ddp", "first_step_s")
    out: list[Row] = []
    for form in FORMS:
        ratio = median(form, "first_step_s") / ddp_first
        out += [
            {**figure(form, "first_step_s", "time to first step"), "setting": setting},
            {
                "policy": FORMS[form],
                "metric": f"÷ DDP's (target ≤ {TARGET_RATIO:g})",
                "value": ratio,
                "unit": "x",
                "shown": f"{ratio:.2f}",
                "setting": setting,
            },
            {**figure(form, "exit_s", "time to exit"), "setting": setting},
        ]
    loads = [t["load"] for ts in times.values() for t in ts]
    out.append(
        {
            "metric": "load average (1 min) at the runs' starts",
            "value": statistics.median(loads),
            "unit": "",
            "shown": f"{statistics.median(loads):.2f} [{min(loads):.2f}–{max(loads):.2f}] on {os.cpu_count()} CPUs",
        }
    )
    return out
