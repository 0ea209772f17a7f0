"""``hetsync advise --verify`` on a profiled script's cluster: **the user's
script** runs the shortlist, not a built-in workload.

``hetsync profile --script train.py`` writes into ``cluster.yaml`` what it
ran (its ``script`` key, :func:`hetsync.advise.profile.script_entry`): the script's
path, its arguments, the folder it ran from and the cluster it played
(``--emulate``'s, else the scenario the script passes to ``hetsync.init``;
its cluster keys only, the per-worker values resolved). ``advise --verify``
then launches that script, as ``hetsync launch`` does, once per verified
policy (the recommended one, the runner-up, BSP) and per real seed, each
run in ``verify/[seed-N/]<policy>/``, with :data:`hetsync.run_as.RUN_AS_ENV`
set so that ``hetsync.init`` runs

- the verified **policy** in place of the script's own (rank 0 says so in
  its log),
- on the **same emulated cluster** as the profile (``verify/emulated.yaml``:
  its speeds, delays, noise, stragglers and links applied as
  ``hetsync.init(scenario=...)`` applies any; a cluster with
  ``runtime_timing: modelled`` is paced, as the profile paced it), with the
  transfers throttled to its links as the profile's were,
- and **advise's job**: its time limit, evaluation interval, target,
  batch and seed, so that the measured time to target and samples/s answer
  the simulator's prediction (the script's other settings stay its own).

The time to target needs the script's metric: a script that passes no
``evaluate=`` (or whose evaluate returns another metric) has none, and the
table says so in place of the measured time; samples/s are compared anyway.
Each seed's runs are gathered in ``verify/[seed-N/]summary.json`` (their
traces linked beside it), which ``hetsync report`` reads.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hetsync.errors import BadInput
from hetsync.scenario import Scenario
from hetsync.summary import RunSummary, read_summary

EMULATED_YAML = "emulated.yaml"
BY = "hetsync advise --verify"
STARTUP_SLACK_S = 180.0  # a run's wall-clock bound beyond twice its time limit
STOP_S = 86_400.0  # an emulated cluster's time limit where the job has none (hetsync.loop's default)


def check(sc: Scenario) -> dict[str, Any]:
    """The script ``sc`` names (its ``script`` key), checked before anything
    runs: BadInput naming what is missing and how to fix it. Returns the
    entry with the emulated cluster loaded (``cluster``: a Scenario or None)."""
    from hetsync.scenario import load_scenario, scenario_from_dict

    entry = dict(sc.job.script or {})
    where = f"{sc.name}'s script"
    again = "or profile it again (hetsync profile --script SCRIPT ... -- ARGS)"
    path = Path(entry["path"])
    if not path.is_file():
        raise BadInput(
            f"--verify launches the script the profile ran, and {where}.path {str(path)!r} no longer exists: "
            f"put it back, set script: path: in the cluster file to where it is now, {again}"
        )
    cwd = entry.get("cwd")
    if cwd is not None and not Path(cwd).is_dir():
        raise BadInput(
            f"{where}.cwd {cwd!r} (the folder the profile ran it from, which its arguments are relative to) "
            f"no longer exists: set script: cwd: in the cluster file to such a folder, {again}"
        )
    emulate = entry.get("emulate")
    cluster: Scenario | None = None
    try:
        if isinstance(emulate, dict):
            stop = {} if emulate.keys() & {"max_time_s", "max_steps"} else {"max_time_s": STOP_S}  # (a cluster: no job)
            cluster = scenario_from_dict({**emulate, **stop}, default_name="emulated").with_workers(sc.cluster.workers)
        elif isinstance(emulate, str):
            cluster = load_scenario(emulate).with_workers(sc.cluster.workers)
    except BadInput as e:
        raise BadInput(
            f"{where}.emulate (the cluster the profile played) cannot be used: {e}; fix it in the cluster file, "
            f"or set script: emulate: null to run on this machine as it is"
        ) from None
    return entry | {"cluster": cluster}


def run_shortlist(
    sc: Scenario,
    specs: Sequence[str],
    labels: dict[str, str],
    folder: Path,
    seeds: Sequence[tuple[int, Path]],
    *,
    host: str,
    on_progress: Callable[[str, float, str], None] | None,
) -> dict[str, Any]:
    """Launch the user's script once per spec (its label in ``labels``) and
    real seed, in that seed's folder (``seeds``: (seed, folder) pairs under
    ``folder``, ``verify/``). Returns ``summaries`` (per seed, spec → its
    run), the ``script`` and the ``emulated`` cluster's name (None: none).
    RuntimeError naming the policy, the reason and the command that runs it
    alone if a run failed."""
    from hetsync.outdir import write_json_atomic

    entry = check(sc)
    folder.mkdir(parents=True, exist_ok=True)
    cluster: Scenario | None = entry["cluster"]
    emulated = None
    if cluster is not None:
        import yaml

        from hetsync.advise.profile import cluster_mapping

        emulated = folder.resolve() / EMULATED_YAML
        # (a scenario file needs a stop condition: the job's, which the runs impose anyway)
        mapping = cluster_mapping(cluster) | {
            "max_time_s": sc.stop.max_time_s if sc.stop.max_time_s is not None else STOP_S
        }
        emulated.write_text(
            f"# the cluster {sc.name}'s script played when profiled, emulated for every verified run\n"
            + yaml.safe_dump(mapping, sort_keys=False, allow_unicode=True, width=120),
            encoding="utf-8",
        )
    summaries = []
    for seed, base in seeds:
        base = base.resolve()  # (the ranks run in the script's folder)
        runs: dict[str, dict[str, Any]] = {}
        for spec in specs:
            runs[spec] = _run_one(sc, entry, spec, labels[spec], base, emulated, seed, host, on_progress)
        write_json_atomic(base / "summary.json", list(runs.values()))  # (hetsync report reads it)
        summaries.append(runs)
    return {
        "summaries": summaries,
        "script": entry["path"],
        "emulated": cluster.name if cluster is not None else None,
    }


def job_of(sc: Scenario, seed: int) -> dict[str, Any]:
    """Advise's job, imposed on the script's ``hetsync.init``: what the simulator ran."""
    target: dict[str, Any] = {"metric": sc.stop.target.metric, "value": sc.stop.target.value}
    if sc.stop.target.direction is not None:
        target["direction"] = sc.stop.target.direction
    job = {
        "max_time_s": sc.stop.max_time_s,
        "max_steps": sc.stop.max_steps,
        "eval_every_s": sc.stop.eval_every_s,
        "batch_size": sc.job.batch_size,
        "target": target,
        "seed": seed,
    }
    return {k: v for k, v in job.items() if v is not None}


def _run_one(
    sc: Scenario,
    entry: dict[str, Any],
    spec: str,
    label: str,
    base: Path,
    emulated: Path | None,
    seed: int,
    host: str,
    on_progress: Callable[[str, float, str], None] | None,
) -> dict[str, Any]:
    """One launch of the script under ``spec`` (advise's name of the
    candidate: ``@collective`` on that path); returns its summary's run, its
    trace named from ``base``, with the script it ran."""
    from hetsync.advise.advice import split_choice
    from hetsync.outdir import safe_name
    from hetsync.run_as import RUN_AS_ENV, RunAs
    from hetsync.runtime import launch
    from hetsync.runtime.collective import PATH_ENV

    spec, path, _ = split_choice(spec)  # (a script's loop: never sharded servers, advise.candidates)
    out = base / safe_name(label)
    run_as = RunAs(
        policy=spec,
        scenario=str(emulated) if emulated is not None else None,
        job=job_of(sc, seed),
        throttle=True,
        by=BY,
    )
    env = {RUN_AS_ENV: run_as.to_env()} | ({PATH_ENV: path} if path != "ps" else {})
    per_run_s = sc.stop.max_time_s if sc.stop.max_time_s is not None else 300.0
    tick = None if on_progress is None else (lambda _label, fraction, status="": on_progress(label, fraction, status))
    alone = (
        (f"cd {shlex.quote(entry['cwd'])} && " if entry.get("cwd") else "")
        + f"{RUN_AS_ENV}={shlex.quote(env[RUN_AS_ENV])} hetsync launch --nproc {sc.cluster.workers} "
        + (f"--path {path} " if path != "ps" else "")
        + f"-o {shlex.quote(str(out))} "
        + shlex.join([entry["path"], *entry["args"]])
    )
    try:
        code = launch.launch(
            sc.cluster.workers,
            list(entry["args"]),
            out,
            host=host,
            on_progress=tick,
            timeout_s=2 * per_run_s + STARTUP_SLACK_S,
            script=entry["path"],
            env=env,
            cwd=entry.get("cwd"),
        )
    except TimeoutError as e:
        raise RuntimeError(f"verify: your script under {label}: {e}; to run it alone: {alone}") from None
    if code != 0:
        why = launch.launcher_reason(out) or launch.server_log_tail(out)
        said = _last_line(out / "logs" / "rank-0.log")
        raise RuntimeError(
            f"verify: your script {entry['path']} under {label} failed (status {code}): {why}\n"
            + (f"rank 0's last line: {said}\n" if said and said not in why else "")
            + f"its logs are in {out}/logs; to run it alone: {alone}"
        )
    try:
        found: list[RunSummary] | None = read_summary(out / "summary.json")
    except BadInput:  # missing, not JSON, or not runs as hetsync writes them
        found = None
    if not isinstance(found, list) or not found:
        raise RuntimeError(
            f"verify: your script {entry['path']} under {label} finished without a summary in {out}/: does it call "
            f"hetsync.init, sync.optimizer and sync.finish()? To run it alone: {alone}"
        )
    # (the same policy on the other path: its own name in the gathered summary)
    run = gathered_run(found[-1], out, base, label if path != "ps" else None)
    return run | {"script": entry["path"], "folder": out.name}


def _last_line(log: Path) -> str | None:
    """The last line a rank's log holds (the script's own error, e.g. argparse's), if any."""
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return None
    return lines[-1][:300] if lines else None


def gathered_run(run: Mapping[str, Any], src: Path, dst: Path, label: str | None) -> dict[str, Any]:
    """``run`` (a summary's entry, its trace in ``src``) as a summary in
    ``dst`` gathering several folders' runs holds it: its trace linked
    beside that summary, as ``hetsync report`` wants it — under ``label``'s
    name, the run renamed so, when one is given (a policy that also ran on
    another path)."""
    from hetsync.outdir import safe_name

    run = dict(run)
    if label is not None:
        run["label"] = label
    trace = run.get("trace")
    if isinstance(trace, str) and (src / trace).is_file():
        run["trace"] = trace if label is None else f"trace-{safe_name(label)}.jsonl"
        link_file(src / trace, dst / run["trace"])
    return run


def link_file(src: Path, dst: Path) -> None:
    """``dst`` the same file as ``src`` (a hard link, else a copy)."""
    import os
    import shutil

    dst.unlink(missing_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
