"""``hetsync bench advise``: profile → advise → verify on emulated clusters.

For each cluster (a scenario this machine plays with ``--emulate``: its
injected delays, noise, stragglers and link bandwidths applied for real),
the bench runs the three steps a user runs, with the same functions:

1. ``hetsync profile --emulate CLUSTER``: a short real job (N workers and a
   server) whose fit is written as ``cluster.yaml``; the bench compares the
   fitted delays, bandwidths and transient stragglers with the injected ones.
2. ``hetsync advise -s cluster.yaml``: every candidate simulated over the
   seeds on the profiled cluster, ranked, one recommended.
3. ``advise --verify``: the recommended policy, the runner-up and BSP run
   on the real runtime (throttled links), once per real seed (the first
   ``--verify-seeds`` of advise's seeds); predicted against measured time
   to target (medians over the seeds) and throughput, their ratio, and
   whether the recommendation held.

A cluster with ``runtime_timing: modelled`` (``slow-links-4``,
``transient-4``) is played with its modelled timing: every real step
lasts the cluster's modelled step (``hetsync run --pace``), in the profile
and in verify, so that a cluster of 10 ms steps is one, whatever this
machine's gradient costs. ``hetero-4`` keeps the real timing of the
runtime's calibration (the real gradient plus the injected sleeps, as the
WBSP paper makes stragglers). Every cluster runs for :data:`MAX_TIME_S`
seconds with an evaluation every :data:`EVAL_EVERY_S` (``--set`` changes
them), so that times to target of a second or two are told apart.

Per cluster it prints the profile's recovery table and the verify table; the
page ``results-advise.md`` (and ``img/advise-*.png``) goes under ``--out``,
and into ``--docs DIR`` when given. Every figure is measured in the run that
prints it; where a prediction is far off, the page says so next to the
shares of time each run spent communicating and waiting, simulated and real.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import shlex
import shutil
import statistics
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hetsync.benches.common import Row, add_output_arguments, docs_dir, pct, split_list
from hetsync.errors import BadInput
from hetsync.scenario import add_override_argument, load_scenario, parse_override
from hetsync.summary import read_summary

NAME = "advise"

CLUSTERS = "hetero-4,slow-links-4,transient-4"
POLICIES = "asp,ssp:s=3,local-sgd:H=4,backup:b=1,wbsp,wbsp-overlap,diloco,lb-bsp:variant=cpu"
SEEDS = 5  # advise's default is 3; the bench takes 5 (with 3, seed noise decided hetero-4's verdict)
VERIFY_SEEDS = 5  # real runs of each verified candidate, compared as medians
MAX_TIME_S = 10.0  # every cluster's run length ...
EVAL_EVERY_S = 0.1  # ... and evaluation grid, unless --set gives them (times to target are 1-3 s here)
COMPUTE_S = 6.0
LINK_REPS = 5
DOC_NAME = "results-advise.md"
IMG_PREFIX = "advise"
OFF_BY = 0.15  # a prediction further than this from the measurement is discussed on the page
# --quick: one 2-worker cluster, short runs; the machinery of the full bench in well under a minute
QUICK = {
    "compute_s": 1.0,
    "link_reps": 2,
    "seeds": 1,
    "verify_seeds": 1,
    "policies": "asp",
    "paths": "ps",
    "max_time_s": 3.0,
}
PATHS = "ps,collective"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--clusters", default=CLUSTERS, help="scenarios to emulate, comma-separated (default: %(default)s)")
    p.add_argument(
        "--policies", "-p", default=POLICIES, help="advise's candidates (bsp always runs; default: %(default)s)"
    )
    p.add_argument(
        "--paths", default=PATHS, help="the data-plane paths advise weighs (ps always; default: %(default)s)"
    )
    p.add_argument("--seeds", type=int, default=SEEDS, help="seeds per candidate in advise (default: %(default)s)")
    p.add_argument(
        "--verify-seeds",
        type=int,
        default=VERIFY_SEEDS,
        help="real runs per verified candidate, the first of advise's seeds (default: %(default)s)",
    )
    p.add_argument(
        "--compute-s", type=float, default=COMPUTE_S, help="profile: seconds of timed steps (default: %(default)s)"
    )
    p.add_argument(
        "--link-reps", type=int, default=LINK_REPS, help="profile: transfers per size and link (default: %(default)s)"
    )
    p.add_argument("--jobs", "-j", type=int, default=None, help="advise: processes to simulate in (default: cores)")
    add_override_argument(p)
    p.add_argument(
        "--quick",
        action="store_true",
        help="the machinery on tiny settings: "
        + ", ".join(f"{k.replace('_', '-')} {v}" for k, v in QUICK.items())
        + " (give --clusters a 2-worker cluster)",
    )
    add_output_arguments(p, f"bench-{NAME}", DOC_NAME)


# ------------------------------------------------------------------ settings
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    clusters: tuple[str, ...]
    policies: tuple[str, ...]
    seeds: int
    paths: tuple[str, ...] = ("ps", "collective")
    verify_seeds: int
    compute_s: float
    link_reps: int
    overrides: tuple[str, ...]  # --set KEY=VALUE, applied to advise and verify (not to the emulation)
    jobs: int | None = None


def settings(args: argparse.Namespace) -> Settings:
    """The bench's settings from its arguments, checked (BadInput names the flag)."""
    seeds, compute_s, link_reps, policies = args.seeds, args.compute_s, args.link_reps, args.policies
    verify_seeds = args.verify_seeds
    paths = args.paths
    overrides = list(args.overrides)
    given = {o.split("=", 1)[0].strip() for o in overrides}
    if args.quick:
        seeds, compute_s, link_reps = QUICK["seeds"], QUICK["compute_s"], QUICK["link_reps"]
        verify_seeds = int(QUICK["verify_seeds"])
        policies = str(QUICK["policies"])
        paths = str(QUICK["paths"])
        if "max_time_s" not in given:
            overrides.append(f"max_time_s={QUICK['max_time_s']:g}")
    else:
        overrides += [
            f"{k}={v:g}" for k, v in (("max_time_s", MAX_TIME_S), ("eval_every_s", EVAL_EVERY_S)) if k not in given
        ]
    if not 1 <= seeds <= 100:
        raise BadInput(f"--seeds must be an integer in 1..100, got {seeds}")
    if not 1 <= verify_seeds <= seeds:
        raise BadInput(f"--verify-seeds must be an integer in 1..--seeds ({seeds}), got {verify_seeds}")
    if not 0 < compute_s <= 600:
        raise BadInput(f"--compute-s must be in (0, 600], got {compute_s}")
    if not 1 <= link_reps <= 100:
        raise BadInput(f"--link-reps must be an integer in 1..100, got {link_reps}")
    if args.jobs is not None and args.jobs < 1:
        raise BadInput(f"--jobs must be >= 1, got {args.jobs}")
    clusters = tuple(split_list(args.clusters, "--clusters"))
    from hetsync.advise import parse_paths

    chosen_paths = parse_paths(paths)
    parsed = dict(parse_override(o) for o in overrides)
    for name in clusters:  # bad names and keys fail before any process starts
        sc = load_scenario(name, **parsed)
        from hetsync.advise import candidates, check_verifiable

        check_verifiable(sc)
        candidates(sc, split_list(policies, "--policies"), paths=chosen_paths)
    return Settings(
        clusters=clusters,
        policies=tuple(split_list(policies, "--policies")),
        paths=chosen_paths,
        seeds=seeds,
        verify_seeds=verify_seeds,
        compute_s=compute_s,
        link_reps=link_reps,
        overrides=tuple(overrides),
        jobs=args.jobs,
    )


# ------------------------------------------------------------------- profile
def profile_cluster(cluster: str, out: Path, s: Settings, *, host: str = "127.0.0.1") -> tuple[Any, Path, float]:
    """``hetsync profile --emulate CLUSTER -o OUT``: the fitted Profile, the
    cluster.yaml it wrote, and the seconds it took."""
    from hetsync.advise import profile
    from hetsync.steptime import batch_sizes_for
    from hetsync.workloads import make_workload

    t0 = time.perf_counter()
    emulated, nproc = profile.check_emulation(cluster, None)
    sc = emulated.with_workers(nproc)
    workload = make_workload(sc.job.workload, **sc.job.workload_args)
    out.mkdir(parents=True, exist_ok=True)
    raw = profile.measure(
        sc,
        cluster,
        out,
        emulate=cluster,
        batch_sizes=batch_sizes_for(sc.job.batch_size),
        compute_s=s.compute_s,
        link_reps=s.link_reps,
        host=host,
        model_nbytes=workload.model_nbytes,
    )
    prof = profile.fit_profile(raw, sc.job.batch_size)
    header = f"measured by `hetsync bench {NAME}` (profile --emulate {cluster}) on {raw.get('host')}"
    description = f"profiled: {nproc} workers, emulating {cluster}"
    path = profile.write_profiled(sc, prof, out, header=header, description=description)
    return prof, path, time.perf_counter() - t0


def _error(fitted: float, injected: float) -> float | None:
    """fitted / injected − 1 (None where nothing was injected)."""
    if not injected or not math.isfinite(injected) or not math.isfinite(fitted):
        return None
    return fitted / injected - 1


def recovery(emulated: Any, prof: Any) -> dict[str, Any]:
    """What the profile recovered of what the cluster injected: per worker
    the compute and the bandwidth to the server (injected, fitted, error),
    and the transient stragglers. The compute compared is the whole step
    (the modelled ``base · slowdown + delay`` at the job's batch against the
    fitted one) on a paced cluster, whose step is all it injects; on a
    cluster with real timing it is the injected delay (the rest of a step
    is this machine's gradient, which nothing injected)."""
    paced = emulated.timing.modelled
    workers = []
    for w in range(emulated.cluster.workers):
        bw_in = emulated.cluster.bandwidth_Bps[w] if emulated.cluster.bandwidth_Bps else math.inf
        bw_fit = prof.bandwidth_Bps[w]
        if paced:
            injected, fitted = emulated.nominal_step_s(w, prof.batch_size), prof.step_s(w)
        else:
            injected, fitted = emulated.cluster.delay_s[w], prof.delay_s[w]
        workers.append(
            {
                "worker": w,
                "compute_injected_s": injected,
                "compute_fitted_s": fitted,
                "compute_error": _error(fitted, injected),
                "slowdown_injected": emulated.cluster.slowdown[w],
                "slowdown_fitted": prof.slowdown[w],
                "step_fitted_s": prof.step_s(w),
                "bandwidth_injected_Bps": bw_in if math.isfinite(bw_in) else None,
                "bandwidth_fitted_Bps": bw_fit if math.isfinite(bw_fit) else None,
                "bandwidth_error": _error(bw_fit, bw_in),
            }
        )
    return {
        "compared": "step" if paced else "delay",
        "paced": paced,
        "workers": workers,
        "straggler_prob_injected": emulated.timing.straggler_prob,
        "straggler_prob_fitted": prof.straggler_prob,
        "straggler_factor_injected": emulated.timing.straggler_factor if emulated.timing.straggler_prob else None,
        "straggler_factor_fitted": prof.straggler_factor if prof.straggler_prob else None,
        "jitter_injected": emulated.timing.jitter,
        "jitter_fitted": prof.jitter,
        "base_step_s": prof.fixed_s + prof.per_sample_s * prof.batch_size,
        "latency_injected_s": emulated.cluster.latency_s,
        "latency_fitted_s": prof.latency_s,
        "link_latency_fitted_s": prof.link_latency_s,
        "exchange_median_s": (statistics.median(x.median_s for x in prof.exchanges) if prof.exchanges else None),
        # the runtime's --throttle shapes the workers' links only: an emulated server is never slower than they are
        "server_bandwidth_fitted_Bps": _finite(prof.server_Bps),
        "server_s_per_message_fitted": prof.server_s_per_message,
    }


# -------------------------------------------------------- advise and verify
def advise_and_verify(path: Path, out: Path, s: Settings, *, host: str = "127.0.0.1") -> Any:
    """``hetsync advise -s PATH --verify`` with the bench's candidates and
    seeds: the Advice with its Verification; advice.json written in ``out``."""
    from hetsync import advise

    sc = load_scenario(str(path), **dict(parse_override(o) for o in s.overrides))
    advise.check_verifiable(sc)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    result = advise.advise(sc, out, seeds=s.seeds, only=list(s.policies), jobs=s.jobs, paths=s.paths)
    forwarded = advise.verify_args(str(path), list(s.overrides), None, result.shortlist(), out / advise.VERIFY_DIR)
    checked = advise.verify(result, out, forwarded, host=host, seeds=s.verify_seeds)
    result = dataclasses.replace(result, verification=checked)
    advise.write_outputs(result, out, plots=False, command=f"hetsync bench {NAME}")
    return result


def verified_runs(result: Any, out: Path) -> list[dict[str, Any]]:
    """Per verified candidate: its role, predicted and measured figures, and
    the shares of time communicating and waiting, simulated (median over the
    seeds) and real."""
    from hetsync.advise import BASELINE

    v = result.verification
    reals: list[dict[str, Mapping[str, Any]]] = [
        {r["label"]: r for r in read_summary(out / f / "summary.json")} for f in v.run_folders
    ]
    ranked = {r.label: r for r in result.ranked}
    rows = []
    for r in v.rows:
        rk = ranked[r.label]
        m = {key: _median([real.get(r.label, {}).get(key) for real in reals]) for key in ("comm_share", "wait_share")}
        baseline = rk.candidate.policy == BASELINE and not rk.candidate.params
        role = "recommended" if r.recommended else ("BSP" if baseline else "runner-up")
        rows.append(
            {
                "label": r.label,
                "spec": r.spec,
                "role": role,
                "rank": rk.rank,
                "predicted_tta_s": r.predicted_tta_s,
                "predicted_tta_range_s": [r.predicted_tta_range[0], _finite(r.predicted_tta_range[1])],
                "measured_tta_s": r.measured_tta_s,
                "measured_tta_seeds_s": list(r.measured_tta_seeds_s),
                "tta_ratio": _ratio(r.measured_tta_s, r.predicted_tta_s),
                "predicted_samples_per_s": r.predicted_samples_per_s,
                "measured_samples_per_s": r.measured_samples_per_s,
                "samples_per_s_ratio": _ratio(r.measured_samples_per_s, r.predicted_samples_per_s),
                "predicted_comm_share": rk.median_of(rk.comm_share),
                "measured_comm_share": m.get("comm_share"),
                "predicted_wait_share": rk.median_of(rk.wait_share),
                "measured_wait_share": m.get("wait_share"),
                "measured_wall_s": r.measured_wall_s,
            }
        )
    return rows


def held_strictly(runs: list[dict[str, Any]]) -> bool | None:
    """The bench's rule: the recommended policy measured at least as fast as
    the runner-up and faster than BSP (None: nothing was recommended; a
    recommended BSP needs only to be at least as fast as the runner-up)."""
    rec = next((r for r in runs if r["role"] == "recommended"), None)
    if rec is None:
        return None
    if rec["measured_tta_s"] is None:
        return False
    t = rec["measured_tta_s"]
    for other in runs:
        if other is rec or other["measured_tta_s"] is None:
            continue
        if other["role"] == "BSP" and not t < other["measured_tta_s"]:
            return False
        if other["role"] == "runner-up" and not t <= other["measured_tta_s"]:
            return False
    return True


def _median(values: list[Any]) -> float | None:
    known = [float(v) for v in values if isinstance(v, (int, float))]
    return statistics.median(known) if known else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b <= 0 else a / b


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


# ----------------------------------------------------------------------- run
def bench_cluster(cluster: str, out: Path, s: Settings) -> dict[str, Any]:
    """One cluster: profile, advise, verify; everything the rows and the page need."""
    emulated = load_scenario(cluster)
    prof, path, profile_s = profile_cluster(cluster, out / "profile", s)
    t0 = time.perf_counter()
    result = advise_and_verify(path, out / "advise", s)
    runs = verified_runs(result, out / "advise")
    v = result.verification
    return {
        "cluster": Path(cluster).stem if cluster.endswith((".yaml", ".yml")) else cluster,
        "description": emulated.description,
        "workers": emulated.cluster.workers,
        "profile_s": profile_s,
        "advise_s": result.elapsed_s,
        "verify_s": v.elapsed_s,
        "advise_verify_s": time.perf_counter() - t0,
        "cluster_yaml": str(path),
        "recovery": recovery(emulated, prof),
        "target": result.target,
        "max_time_s": result.scenario.stop.max_time_s,
        "candidates": len(result.candidates),
        "skipped": [spec for spec, _ in result.skipped],
        "seeds": list(result.seeds),
        "verify_seeds": list(v.seeds) or [result.scenario.job.seed],
        "recommendation": result.recommendation.to_dict(),
        "runs": runs,
        "held": held_strictly(runs),
        "held_within_10pct": v.held,
        "verdict": v.verdict(),
    }


def run(args: argparse.Namespace) -> list[Row]:
    s = settings(args)
    out = Path(args.out)
    t0 = time.perf_counter()
    results: dict[str, Any] = {
        "clusters": [bench_cluster(c, out / Path(c).stem, s) for c in s.clusters],
        "settings": {**dataclasses.asdict(s), "clusters": list(s.clusters), "policies": list(s.policies)},
    }
    results["host_time_s"] = time.perf_counter() - t0
    from hetsync.outdir import write_json_atomic

    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "results.json", results)
    command = shlex.join(["hetsync", "bench", NAME, *_argv(args)])
    for where in (out, docs_dir(args)):
        if where is not None:
            write_doc(results, where, command)
    return rows(results)


def _argv(args: argparse.Namespace) -> list[str]:
    argv = []
    for flag, value, default in (
        ("--clusters", args.clusters, CLUSTERS),
        ("--policies", args.policies, POLICIES),
        ("--paths", args.paths, PATHS),
        ("--seeds", args.seeds, SEEDS),
        ("--verify-seeds", args.verify_seeds, VERIFY_SEEDS),
        ("--compute-s", args.compute_s, COMPUTE_S),
        ("--link-reps", args.link_reps, LINK_REPS),
    ):
        if value != default:
            argv += [flag, str(value)]
    for o in args.overrides:
        argv += ["--set", o]
    if args.quick:
        argv.append("--quick")
    if docs_dir(args) is not None:
        argv += ["--docs", str(args.docs)]
    return argv


# ---------------------------------------------------------------------- rows
def rows(results: dict[str, Any]) -> list[Row]:
    """Per cluster: the verify table (one line per verified candidate), the
    profile's recovery (one line per worker), and the cluster's verdicts."""
    out: list[Row] = []
    for res in results["clusters"]:
        c = res["cluster"]
        keys = {"setting": f"{c} · advise → verify ({res['target']})", "row_name": "candidate"}
        for r in res["runs"]:
            pol = {"policy": r["label"], **keys}
            out += [
                {"metric": "role", "value": r["role"], "unit": "", **pol},
                {
                    "metric": "TTA predicted",
                    "value": r["predicted_tta_s"],
                    "unit": "s",
                    "shown": _tta_shown(r),
                    **pol,
                },
                {
                    "metric": "TTA measured",
                    "value": r["measured_tta_s"],
                    "unit": "s",
                    "shown": _s(r["measured_tta_s"]),
                    **pol,
                },
                {"metric": "TTA measured ÷ predicted", "value": r["tta_ratio"], "unit": "", **pol},
                {"metric": "samples/s predicted", "value": r["predicted_samples_per_s"], "unit": "", **pol},
                {"metric": "samples/s measured", "value": r["measured_samples_per_s"], "unit": "", **pol},
                {"metric": "samples/s measured ÷ predicted", "value": r["samples_per_s_ratio"], "unit": "", **pol},
                {"metric": "comm share sim", "value": pct(r["predicted_comm_share"]), "unit": "%", **pol},
                {"metric": "comm share real", "value": pct(r["measured_comm_share"]), "unit": "%", **pol},
            ]
        keys = {"setting": f"{c} · profile --emulate {c}: injected vs fitted", "row_name": "worker"}
        rec = res["recovery"]
        what = rec["compared"]
        for w in rec["workers"]:
            pol = {"policy": str(w["worker"]), **keys}
            out += [
                {"metric": f"{what} injected", "value": 1e3 * w["compute_injected_s"], "unit": "ms", **pol},
                {"metric": f"{what} fitted", "value": 1e3 * w["compute_fitted_s"], "unit": "ms", **pol},
                {"metric": f"{what} error", "value": pct(w["compute_error"]), "unit": "%", **pol},
                {"metric": "link injected", "value": _mbps(w["bandwidth_injected_Bps"]), "unit": "MB/s", **pol},
                {"metric": "link fitted", "value": _mbps(w["bandwidth_fitted_Bps"]), "unit": "MB/s", **pol},
                {"metric": "link error", "value": pct(w["bandwidth_error"]), "unit": "%", **pol},
                {"metric": "step fitted", "value": 1e3 * w["step_fitted_s"], "unit": "ms", **pol},
            ]
        whole = {"setting": c}
        out += [
            {"metric": "recommended", "value": res["recommendation"]["label"], "unit": "", **whole},
            {"metric": "held (≤ runner-up and < BSP, measured)", "value": res["held"], "unit": "", **whole},
            {
                "metric": "held (advise: within 10% of the fastest)",
                "value": res["held_within_10pct"],
                "unit": "",
                **whole,
            },
            {
                "metric": f"largest {what} error (absolute)",
                "value": _max_abs(rec, "compute_error"),
                "unit": "%",
                **whole,
            },
            {
                "metric": "largest samples/s error, sim vs real (absolute)",
                "value": _max_rate_error(res),
                "unit": "%",
                **whole,
            },
            {
                "metric": "largest link error (absolute)",
                "value": _max_abs(rec, "bandwidth_error"),
                "unit": "%",
                **whole,
            },
            {"metric": "transient stragglers injected", "value": _straggler(rec, "injected"), "unit": "", **whole},
            {"metric": "transient stragglers fitted", "value": _straggler(rec, "fitted"), "unit": "", **whole},
            {"metric": "per-message latency fitted", "value": _ms(rec.get("latency_fitted_s")), "unit": "ms", **whole},
            {
                "metric": "server time per message fitted",
                "value": _ms(rec.get("server_s_per_message_fitted")),
                "unit": "ms",
                **whole,
            },
            {
                "metric": "server link fitted",
                "value": _mbps(rec.get("server_bandwidth_fitted_Bps")),
                "unit": "MB/s",
                **whole,
            },
            {"metric": "profile / advise / verify time", "value": _times(res), "unit": "s", **whole},
        ]
    out.append({"metric": "bench time", "value": results["host_time_s"], "unit": "s", "setting": "all"})
    return out


def _s(x: float | None) -> str:
    return "not reached" if x is None else f"{x:.2f}"


def _tta_shown(r: dict[str, Any]) -> str:
    lo, hi = r["predicted_tta_range_s"]
    text = _s(r["predicted_tta_s"])
    if lo is not None and lo != hi:
        text += f" ({lo:.2f}–{'>' if hi is None else f'{hi:.2f}'})"
    return text


def _ms(s: float | None) -> float | None:
    return None if s is None else 1e3 * s


def _mbps(Bps: float | None) -> float | None:
    return None if Bps is None else Bps / 1e6


def _max_abs(rec: dict[str, Any], key: str) -> float | None:
    errs = [abs(w[key]) for w in rec["workers"] if w[key] is not None]
    return pct(max(errs)) if errs else None


def _max_rate_error(res: dict[str, Any]) -> float | None:
    """The verified runs' largest |measured / predicted − 1| of samples/s: how
    far the simulated run's wall time for the same work was from the real one."""
    errs = [abs(r["samples_per_s_ratio"] - 1) for r in res["runs"] if r["samples_per_s_ratio"] is not None]
    return pct(max(errs)) if errs else None


def _straggler(rec: dict[str, Any], which: str) -> str:
    prob, factor = rec[f"straggler_prob_{which}"], rec[f"straggler_factor_{which}"]
    return "none" if not prob else f"{100 * prob:.1f}% of steps × {factor:.3g}"


def _times(res: dict[str, Any]) -> str:
    return f"{res['profile_s']:.0f} / {res['advise_s']:.0f} / {res['verify_s']:.0f}"


# ---------------------------------------------------------------------- page
def plot(results: dict[str, Any], path: Path) -> Path:
    """Per cluster, predicted against measured time to target of each verified candidate."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    clusters = results["clusters"]
    fig, axes = plt.subplots(1, len(clusters), figsize=(4.2 * len(clusters), 3.6), squeeze=False)
    for ax, res in zip(axes[0], clusters, strict=True):
        labels = [r["label"] + (" ★" if r["role"] == "recommended" else "") for r in res["runs"]]
        xs = range(len(labels))
        pred = [r["predicted_tta_s"] or 0.0 for r in res["runs"]]
        meas = [r["measured_tta_s"] or 0.0 for r in res["runs"]]
        ax.bar([x - 0.2 for x in xs], pred, width=0.4, label="predicted (simulator, median)", color="#8fb3d9")
        ax.bar([x + 0.2 for x in xs], meas, width=0.4, label="measured (real processes)", color="#d98f6b")
        for x, r in zip(xs, res["runs"], strict=True):
            if r["measured_tta_s"] is None:
                ax.text(x + 0.2, 0, "not\nreached", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(list(xs), labels, rotation=20, ha="right", fontsize=7)
        verdict = "held" if res["held"] else "within 10% of the fastest" if res["held_within_10pct"] else "did not hold"
        ax.set_title(f"{res['cluster']}: {verdict}", fontsize=9)
        ax.set_ylabel(f"time to {res['target']} (s)")
    axes[0][0].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_doc(results: dict[str, Any], where: Path, command: str) -> Path:
    img = Path("img") / f"{IMG_PREFIX}-tta.png"
    plot(results, where / img)
    page = where / DOC_NAME
    page.write_text(doc_text(results, command, str(img)))
    return page


def doc_text(results: dict[str, Any], command: str, img: str) -> str:
    from hetsync.benches.common import markdown_tables

    st = results["settings"]
    lines = [
        "# Advise, checked: profile → advise → verify on emulated clusters",
        "",
        f"Produced by `{command}` ({results['host_time_s']:.0f} s of real time on a shared 2-core machine);",
        "every figure below is measured in that run. Per cluster, this machine plays the cluster",
        "(`hetsync profile --emulate`: its steps and transfers played for real on this machine, transfers",
        "throttled to the link bandwidths), `advise` simulates the candidates on the profiled `cluster.yaml`,",
        "and `--verify` runs the recommended policy, the runner-up and BSP as real processes, the same",
        "cluster.yaml, once per real seed.",
        f"Candidates: {', '.join(f'`{p}`' for p in st['policies'])} (and `bsp`; a bare name brings its grid),",
        f"on the paths {', '.join(f'`{p}`' for p in st.get('paths', ['ps']))} (a policy whose exchanges are rounds on each),",
        f"{st['seeds']} simulated seed{'s' if st['seeds'] != 1 else ''} each (advise's default is every policy's grid);",
        f"{st['verify_seeds']} real seed{'s' if st['verify_seeds'] != 1 else ''} of each verified candidate (the first of the simulated ones);",
        f"profile: {st['compute_s']:g} s of steps, {st['link_reps']} transfers per size"
        + (f"; overrides {', '.join(f'`{o}`' for o in st['overrides'])}" if st["overrides"] else "")
        + ".",
        "",
        "**How the clusters are played.** `slow-links-4` and `transient-4` say `runtime_timing: modelled`:",
        "every real step lasts the cluster's modelled step (`fixed_s + per_sample_s · b` = 2 ms + 0.25 ms",
        "per sample, 10 ms at batch 32, × noise × stragglers; `hetsync run --pace`), in the profile and in",
        "verify, and every transfer model bytes / bandwidth (`--throttle`). Their step costs were chosen",
        "as a CPU cluster's (a few milliseconds of fixed cost, most of a step per sample, 10 ms at the job's",
        "batch) before any policy ran on them, not to make one win: played as the real gradient of",
        "`digits-mlp` stretched by the injected factors (0.3 ms), a transient-4 straggler lasted 1.8 ms,",
        "machine noise of the same order, and the profile could not tell them apart. `hetero-4` keeps the",
        "runtime's calibration timing (the real gradient plus the injected sleeps of 10–40 ms, as the",
        "WBSP paper makes stragglers), so its profile is compared on the delays it injects, the others on",
        "their whole steps.",
        "",
        "*Held*: the recommended policy measured at least as fast as the runner-up and faster than BSP.",
        "*Advise's own rule* (`advise --verify`): the fastest of the three for real, or within 10% of it.",
        "Measured times to target are medians over the real seeds, as predicted ones are over the simulated.",
        "",
        "Times to target are read at the evaluations (every `eval_every_s`), so they move in steps of",
        "that size: with the bench's 0.1 s grid, times to target of 1–3 s span 10–30 evaluations.",
        "",
        *_summary(results),
        f"![predicted and measured time to target]({img})",
        "",
    ]
    for res in results["clusters"]:
        lines += _cluster_section(res)
    lines += ["## All figures", "", *markdown_tables(rows(results))]
    return "\n".join(lines).rstrip("\n") + "\n"


def _cluster_section(res: dict[str, Any]) -> list[str]:
    rec = res["recommendation"]
    r = res["recovery"]
    what = r["compared"]
    lines = [
        f"## `{res['cluster']}`",
        "",
        f"{res['description']}. Profile {res['profile_s']:.0f} s, advise {res['advise_s']:.0f} s "
        f"({res['candidates']} candidates × {len(res['seeds'])} seed{'s' if len(res['seeds']) != 1 else ''}), verify {res['verify_s']:.0f} s "
        f"(runs of {res['max_time_s']:g} s, {len(res['verify_seeds'])} real seed{'s' if len(res['verify_seeds']) != 1 else ''} each).",
        "",
        f"| worker | {what} injected | {what} fitted | error | link injected | link fitted | error | step fitted |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for w in r["workers"]:
        lines.append(
            f"| {w['worker']} | {1e3 * w['compute_injected_s']:.1f} ms | {1e3 * w['compute_fitted_s']:.1f} ms "
            f"| {_pct(w['compute_error'])} | {_mb(w['bandwidth_injected_Bps'])} | {_mb(w['bandwidth_fitted_Bps'])} "
            f"| {_pct(w['bandwidth_error'])} | {1e3 * w['step_fitted_s']:.1f} ms |"
        )
    base = "the paced step of the fastest worker" if r["paced"] else "the gradient alone"
    lines += [
        "",
        f"Base step ({base}) {1e3 * r['base_step_s']:.2f} ms; noise log-sd injected "
        f"{r['jitter_injected']:g}, fitted {r['jitter_fitted']:.3g}; transient stragglers injected "
        f"{_straggler(r, 'injected')}, fitted {_straggler(r, 'fitted')}.",
        "",
        *_message_note(r),
        *_emulation_note(r),
        f"Recommendation: {rec['headline']}",
        "",
        f"Why (advise): {rec['reason']}",
        "",
        "| candidate | role | TTA predicted (s) | TTA measured (s) | measured ÷ predicted | samples/s predicted "
        "| samples/s measured | measured ÷ predicted | comm share sim → real | wait share sim → real |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for v in res["runs"]:
        lines.append(
            f"| `{v['label']}` | {v['role']} | {_tta_shown(v)} | {_s(v['measured_tta_s'])} | {_x(v['tta_ratio'])} "
            f"| {_rate(v['predicted_samples_per_s'])} | {_rate(v['measured_samples_per_s'])} "
            f"| {_x(v['samples_per_s_ratio'])} | {_share(v['predicted_comm_share'])} → "
            f"{_share(v['measured_comm_share'])} | {_share(v['predicted_wait_share'])} → "
            f"{_share(v['measured_wait_share'])} |"
        )
    held = {True: "held", False: "did not hold", None: "could not be judged"}[res["held"]]
    verdict = res["verdict"].removeprefix("verify: ")
    lines += ["", f"**The recommendation {held}** (bench's rule). Advise's verdict: {verdict}.", ""]
    lines += _why_not(res)
    lines += _misses(res)
    return lines


def _summary(results: dict[str, Any]) -> list[str]:
    """One line per cluster: the recommendation, whether it held, what the profile recovered, the time spent."""
    lines = [
        "| cluster | recommended | held | advise's rule | max step/delay error | max link error "
        "| stragglers injected → fitted | max samples/s error, sim vs real | profile / advise / verify (s) |",
        "|---|---|---|---|---:|---:|---|---:|---:|",
    ]
    yes = {True: "yes", False: "no", None: "—"}
    for res in results["clusters"]:
        r = res["recovery"]
        compute, link = _max_abs(r, "compute_error"), _max_abs(r, "bandwidth_error")
        what = r["compared"]
        rate = _max_rate_error(res)
        lines.append(
            f"| `{res['cluster']}` | `{res['recommendation']['label']}` | {yes[res['held']]} "
            f"| {yes[res['held_within_10pct']]} | {'—' if compute is None else f'{compute:.1f}% ({what})'} "
            f"| {'—' if link is None else f'{link:.1f}%'} | {_straggler(r, 'injected')} → "
            f"{_straggler(r, 'fitted')} | {'—' if rate is None else f'{rate:.1f}%'} | {_times(res)} |"
        )
    slow = max(results["clusters"], key=lambda res: res["advise_s"])
    step_s = min(w["step_fitted_s"] for w in slow["recovery"]["workers"])
    lines += [
        "",
        f"The slowest advise was `{slow['cluster']}`'s ({slow['advise_s']:.0f} s of the bench's "
        f"{results['host_time_s']:.0f} s): its profiled step is {1e3 * step_s:.2f} ms, so each "
        f"{slow['max_time_s']:g} s run simulates about {slow['max_time_s'] / step_s:,.0f} steps per worker.",
        "",
    ]
    return lines


def _message_note(r: dict[str, Any]) -> list[str]:
    """What a message cost in the profile, and the server's link."""
    if r.get("latency_fitted_s") is None:
        return []
    text = (
        f"Per message (the scenario's `latency_s`): {1e3 * r['latency_fitted_s']:.2f} ms, the mean extra beyond "
        "bytes / bandwidth of the round trips each worker made with the server after every profiled step, "
        "less the server's own time on each"
    )
    if r.get("exchange_median_s") is not None:
        text += f" (median {1e3 * r['exchange_median_s']:.2f} ms)"
    text += (
        f"; the links alone, one pair at a time, {1e3 * r['link_latency_fitted_s']:.2f} ms; injected "
        f"{1e3 * r['latency_injected_s']:.2f} ms (the emulation adds no latency: what shows is this machine's)."
    )
    if r.get("server_s_per_message_fitted") is not None:
        text += (
            f" The server's own time per message (`server_s_per_message`): "
            f"{1e3 * r['server_s_per_message_fitted']:.3f} ms, its work on each push and its reply as the runtime's "
            "server does it (driver core, ASP policy, optimizer step, trace record, the reply encoded), timed on the "
            "server and halved; the simulator serves the messages one at a time, and with `control_latency` "
            "(written by the profile) every command and report travels `latency_s` as the runtime's do."
        )
    server = r.get("server_bandwidth_fitted_Bps")
    if server is not None:
        text += (
            f" Server's link, every worker sending to it at once: {_mb(server)} (the emulation does not throttle "
            "the server, as the runtime's `--throttle` does not)."
        )
    return [text, ""]


def _emulation_note(r: dict[str, Any]) -> list[str]:
    """What the emulation can make of injected multiplicative stragglers: they
    scale only the real gradient (the runtime's workers sleep the extra share)."""
    if not r["straggler_prob_injected"]:
        return []
    base_ms, factor = 1e3 * r["base_step_s"], r["straggler_factor_injected"]
    if r["paced"]:
        step_ms = 1e3 * statistics.median(w["compute_injected_s"] for w in r["workers"])
        return [
            f"The emulation paces every step: an injected {factor:g}× straggler step lasts about "
            f"{factor * step_ms:.0f} ms against {step_ms:.0f} ms, and the profile fits what it measured: the "
            "injected stragglers and whatever else on this shared machine made a step more than 1.5× its "
            "median (a sleep that woke late, a descheduled process).",
            "",
        ]
    return [
        f"The emulation multiplies only the real gradient ({base_ms:.2f} ms here): an injected "
        f"{factor:g}× straggler step lasts about {factor * base_ms:.2f} ms, {(factor - 1) * base_ms:.2f} ms "
        "more than a normal one; the "
        "profile fits what it measured (the noise and outliers of a sub-millisecond step on a shared machine, "
        "the injected ones among them), not the injected parameters.",
        "",
    ]


def _seeds_span(v: dict[str, Any]) -> str:
    ttas = v.get("measured_tta_seeds_s") or []
    reached = [t for t in ttas if t is not None]
    if len(ttas) < 2 or not reached:
        return ""
    return f" (seeds {min(reached):.2f}–{max(reached):.2f}{'' if len(reached) == len(ttas) else ', one missed'})"


def _why_not(res: dict[str, Any]) -> list[str]:
    """Where the recommendation did not hold (bench's rule): the real seeds of
    the recommended and the fastest, and how far the simulator's throughput
    and waiting were off for each."""
    if res["held"] is not False:
        return []
    runs = [v for v in res["runs"] if v["measured_tta_s"] is not None]
    rec = next((v for v in res["runs"] if v["role"] == "recommended"), None)
    if rec is None or not runs:
        return []
    best = min(runs, key=lambda v: v["measured_tta_s"])
    if best is rec:
        best = min((v for v in runs if v is not rec), key=lambda v: v["measured_tta_s"], default=rec)
    text = (
        f"Why not: for real, `{best['label']}` reached the target in {_s(best['measured_tta_s'])} s{_seeds_span(best)}"
        f" and `{rec['label']}` in {_s(rec['measured_tta_s'])} s{_seeds_span(rec)}"
    )
    ra, rb = rec["samples_per_s_ratio"], best["samples_per_s_ratio"]
    if ra is not None and rb is not None:
        text += (
            f"; the measured samples/s were {_x(ra)} the simulator's for `{rec['label']}` against {_x(rb)} for "
            f"`{best['label']}`"
        )
    pw, mw = rec["predicted_wait_share"], rec["measured_wait_share"]
    if pw is not None and mw is not None:
        text += f", and `{rec['label']}` waited {_share(mw)} of the time for real against {_share(pw)} simulated"
    if _seeds_overlap(rec, best):
        gap = rec["measured_tta_s"] / best["measured_tta_s"] - 1
        text += (
            f". The two measured {gap:.1%} apart and their real seeds' times overlap: a difference these "
            "seeds do not resolve"
        )
    return [text + ".", ""]


def _seeds_overlap(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two runs' real seeds reached the target over overlapping ranges of time (each every seed)."""
    ta, tb = a.get("measured_tta_seeds_s") or [], b.get("measured_tta_seeds_s") or []
    if len(ta) < 2 or len(tb) < 2 or None in ta or None in tb:
        return False
    return max(min(ta), min(tb)) <= min(max(ta), max(tb))


def _misses(res: dict[str, Any]) -> list[str]:
    """A sentence per verified run whose prediction is off by more than OFF_BY, from its measured shares."""
    out = []
    for v in res["runs"]:
        ratio = v["tta_ratio"]
        if v["measured_tta_s"] is None or v["predicted_tta_s"] is None:
            what = "never reached the target for real" if v["measured_tta_s"] is None else "reached it"
            out.append(f"- `{v['label']}`: predicted {_s(v['predicted_tta_s'])} s, {what}.")
            continue
        rate = v["samples_per_s_ratio"]
        if ratio is None or (abs(ratio - 1) <= OFF_BY and (rate is None or abs(rate - 1) <= OFF_BY)):
            continue
        parts = [
            f"- `{v['label']}`: measured {ratio:.2f}× the predicted time to target "
            f"({v['measured_tta_s']:.2f} s against {v['predicted_tta_s']:.2f} s) and "
            f"{_x(v['samples_per_s_ratio'])} its samples/s"
        ]
        pc, mc = v["predicted_comm_share"], v["measured_comm_share"]
        if pc is not None and mc is not None:
            parts.append(f"communicating {_share(mc)} of the time for real against {_share(pc)} simulated")
        pw, mw = v["predicted_wait_share"], v["measured_wait_share"]
        if pw is not None and mw is not None:
            parts.append(f"waiting {_share(mw)} against {_share(pw)}")
        pred_n, meas_n = _samples_to_target(v, "predicted"), _samples_to_target(v, "measured")
        if pred_n and meas_n:
            parts.append(
                f"it needed about {meas_n:,.0f} samples to reach the target for real against {pred_n:,.0f} "
                f"predicted (time to target × samples/s; {meas_n / pred_n:.2f}×)"
            )
        out.append("; ".join(parts) + ".")
    if out:
        out = [f"Predictions more than {OFF_BY:.0%} off the measurement:", "", *out, ""]
    return out


def _samples_to_target(v: dict[str, Any], which: str) -> float | None:
    """About how many samples a run trained on before it reached the target:
    its time to target × its samples per second (the prediction: the seeds' medians)."""
    tta, rate = v[f"{which}_tta_s"], v[f"{which}_samples_per_s"]
    return None if tta is None or rate is None else tta * rate


def _pct(e: float | None) -> str:
    return "—" if e is None else f"{100 * e:+.1f}%"


def _share(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.0f}%"


def _x(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}×"


def _rate(x: float | None) -> str:
    return "—" if x is None else f"{x:,.0f}"


def _mb(Bps: float | None) -> str:
    return "∞" if Bps is None else f"{Bps / 1e6:.3g} MB/s"
