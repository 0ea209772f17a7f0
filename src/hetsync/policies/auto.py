"""auto — run the synchronous policy the live cluster runs fastest, and switch
when the cluster changes (hetsync's own; issue 31's first part).

The candidates are the parameter-server round policies whose convergence per
sample is BSP's — every round applies a batch-weighted mean gradient of a
fixed global batch, only *which* gradients and *how big* each worker's batch
differ: ``bsp``; ``lb-bsp`` (Chen et al., SoCC 2020: per-worker batches sized
for an equal finish); ``backup`` (Chen et al. 2016: the round closes with the
first N − b gradients, the b slowest are dropped). Choosing among them
changes how many samples a second the job applies, not what a sample is
worth, so they can be ranked by throughput alone — what can be measured for
any model, a user's own included. (The policies that trade convergence for
throughput, ``asp`` and ``ssp``, are candidates only with forecasts, below.)

And one whose convergence per sample is only close to BSP's: ``local-sgd``
(Stich, ICLR 2019), every worker taking H local steps at the common batch,
then the mean of their deltas applied (its H is ``h``, default 4). BSP steps
once along the mean gradient of N·B samples, local SGD H times along each
worker's own gradient of B, then averages — close to H steps of BSP at a
small H (the models drift apart little between averages), further as H
grows, hence a small ``h``. auto assumes it is BSP's and ranks it by samples
a second like the others (the candidates note says so). It is in the default
set since 2026-12-07: on every ``hetsync bench auto`` case auto with it
reached the target sooner than without it (its H times fewer rounds pay
their transfers H times less often; its progress per sample, better than
BSP's on those clusters, is still not weighed). ``candidates=bsp+lb-bsp+backup``
leaves it out; so does a ``window`` under 2·h, when the set is the default
(a named one is refused: the ranking replays whole rounds of h steps).

Measuring: every ``ComputeDone`` gives a worker's step time at its batch;
the last ``window`` of each worker are kept, and a smoothed time per batch
size for its last few batch sizes, from which :func:`fixed_share` fits the
share of its step that does not grow with the batch (0 until its batches
have varied). So that it is known before LB-BSP is ranked, BSP's first
rounds are probe rounds (:meth:`Auto._probe`): pairs of workers, taking
turns, run B·(1 + 1/8) and B·(1 − 1/8) of the same global batch (BSP's
update is the batch-weighted mean of the global batch, only split
otherwise) until every worker has ``PROBE_STEPS`` steps at each of two sizes;
its share is fitted then, once, and the probe sizes are forgotten (their
times would go stale as the cluster changes). Without it a straggler slow by
fixed delays (hetero-4's) was taken for LB-BSP's case (``hetsync bench
auto``'s hetero: LB-BSP at 0.84 s, the worst fixed policy there; with it,
BSP stays). The fits are noisy at 4 steps a size (0.07–0.24 for a true 0.11
on stress-midway-8). Ranking (:func:`predicted_rates`): the window,
each step brought to the common batch with that share, is replayed as
rounds — round r takes each worker's r-th latest time — and each
candidate's round time is what it would be with those times: BSP waits for
the slowest at the common batch; LB-BSP waits for the slowest at the
batches that would have them finish together; backup waits for the
(N − b)-th and applies N − b batches; local SGD (when a candidate) holds a
round every H steps, each worker's H consecutive times of the window summed,
and waits for the slowest sum (every candidate then replays the window's
newest ⌊W/H⌋·H steps, whole rounds of it). The rate is the samples applied over the replayed time. So a
worker that is always slow favours LB-BSP, one that is slow now and then
(noise, a straggler that moves) favours backup or local SGD (backup drops
the late step, local SGD evens it out over H), and a homogeneous cluster
BSP (the others cost it nothing there, but win nothing either; local SGD's
sum of H evens out the noise, so it is never ranked below BSP). What a round
takes beyond its steps — the pushes, the server's turn, the pulls — is
measured too: at each round close, the time since the last close less the
longest any live worker computed since (:func:`round_overhead_s`; the
median of the window's rounds), and every candidate's replayed round pays
it once: so local SGD's H times fewer rounds count in its favour where
transfers are dear. (It also makes the others' predicted gains honest: a
straggler costs less, relatively, where every round pays for its
transfers. On the bench's stress case the switch to LB-BSP came 0.2 s
later for it, at 6.1 s.)

Starting: on ``start`` (BSP by default). ``start`` may also name an advice
(``hetsync advise``'s ``advice.json`` or its folder): the driver's set-up
(hetsync.driver.advised, before any policy is made: this module reads no
files) turns it into the best-ranked candidate there, with its ``h`` or
``b``, and ``keep_start=until-change``: advise ranked by simulated time to
target, convergence per sample included, which this ranking by measured
throughput cannot weigh (on hetero-4 on real processes, unheld, it left the
advised backup(b = 2) for LB-BSP at 0.97 s: a ranking by samples applied
sees only that backup drops two gradients of four). Held, it ranks only once
:func:`cluster_changed` says the cluster is no longer the first full
window's: a worker's median step time moved by more than ``CHANGED`` (25%;
a worker's smoothed time moved by 11% with nothing changed on 4 workers
sharing 2 cores), the newest rounds' overhead by more than that share of a
round, or a worker left or joined. From then on it ranks as below.

Switching: ranked at every round close once each live worker has ``window``
times; the best replaces the current policy only when its predicted rate
beats the current one's by more than ``margin`` (a switch is not free:
LB-BSP learns its batches again, backup's late steps are dropped), and the
gain stays above the margin when the window's rounds are drawn again
(:func:`gain_quantile`, a paired bootstrap: with ``confidence`` 0.9, nine
draws in ten must show it; a round of local SGD is drawn with the others'
rounds over the same H steps), so that a gain the window's noise could make
is not acted on; a window that straddles a change shows it once about half
its rounds are of the new cluster (on ``examples/stress-midway-8.yaml``
the switch came 0.45 s after the stress, 0.29–0.35 s without it). So the
newest half of the window is ranked too, with the same margin and guard,
when the whole window shows no gain: a change is acted on once it fills
most of that half (``hetsync bench auto``'s stress case: the switch at
5.2 s, 1.2 s after the change, instead of 6.1 s; no switch more on its
static and other cases; its shorter sample is what the guard is for). A switch
stands for at least ``window`` rounds (a round of local SGD counts as its
H), and twice as long after each switch
back to the policy it had just left: on a noisy machine (4 workers sharing
2 cores) the rankings of a short window disagree from round to round, and
without that it switched 70 times in 10 s. The handover is at
that round close: the old policy's ``Apply`` stands, every worker it pulls
starts the new policy's first step instead of the old one's next; a worker
still computing for the old policy (backup's late ones) has its push
dropped when it arrives (reason ``policy switch``, counted as every drop
is) and then pulls and starts. The model and the server's optimizer state
are the ledger's, untouched by the switch; the step accounting stays exact
(every push is applied or dropped). The new policy hears of the workers
that are gone, and counts versions from the ledger's (backup's lateness).

Local SGD's handover is the same, at the same round closes. To it: every
worker pulls the global model the round's ``Apply`` made and starts local
SGD's first local step from it (its delta is measured from that pull); a
worker still computing for backup has its gradient dropped as above, then
pulls and starts. From it: local SGD's round closes only once every live
worker's delta of its H local steps has arrived, so its open round has
drained when auto decides — the closing ``Apply`` (the equal-weight mean of
the deltas, through the scenario's ``outer_optimizer``, plain averaging by
default) stands, no worker holds an unpushed local step, and every worker
pulls into the new policy's first step. The server keeps both optimizers'
state across switches (the gradient one's for gradient rounds, the outer one's
for delta rounds); each worker's optimizer for local steps keeps its own. Its
schedule clock is handed over: local SGD's first steps ask the driver to
set it to the server's (``Compute.sync_clock``: the ledger's samples applied
so far, in global batches), so a learning-rate schedule goes on where the
gradient rounds left it rather than starting over. auto is not a
collective policy (backup drops gradients; local SGD's rounds are of deltas,
the others' of gradients): on ``path=collective`` it is refused, use
``path=ps``.

What it says: at the start a ``Note`` ``candidates`` (what it chooses
among, and that it ranks them by measured samples a second: in a user's own
loop, where no simulator knows the model, that is all it weighs, and the
report's heading says so); each switch is a ``Note`` — a trace record ``note`` and an
entry of the summary's ``policy_notes``: ``{t, what: switch, detail}``, the
detail small and JSON-able (docs/formats.md, "A switch note"): ``from``,
``to``; ``rates``, the samples a second each candidate was predicted, and
``gain``, the taken one's over the left one's; and the fitted change that
caused it. The reference is each worker's smoothed step time
(:func:`smoothed`: the exponential average of its window, each step brought
to the common batch) over the first full window after the start or the
last switch, taken at ``since_s``; ``moved`` lists the workers whose
smoothed time now differs from it by more than ``MOVED``
(:func:`switch_moves`: ``{w, from_s, to_s}``, the largest change first, at
most ``SHOWN``; ``moved_count`` counts them all); ``slowest``, in how many
of the ``rounds`` replayed each worker was the slowest (:func:`slowest_counts`:
one worker every round is LB-BSP's case, a different one each round
backup's); ``fixed``, for a switch to or from LB-BSP, the fitted fixed
shares (largest first, at most ``SHOWN``). The drivers name the policy in
force on the progress line from these notes (``auto→lb-bsp``), the plots mark
the phases and ``hetsync report`` lists each switch with its cause
(hetsync.report.switches).

Forecasts (``forecast=on``; off by default): a switch the throughput ranking
proposes is first forecast — a ``Forecast`` command asks the driver to
simulate every candidate from the global model as it is, on the cluster the
proposal was ranked on (each live worker's steps at the common batch that
the proposal came from — the window's newest half when the change showed
there, so that a cluster that changed midway is forecast as it is now, not
as a mix of before and after — its fitted fixed share, the round overhead;
the noise and stragglers fitted as ``hetsync profile`` fits them), for two windows' worth of steps,
two seeds each (hetsync.sim.forecast). The answer (``ForecastDone``, a note
``forecast``) gives each candidate's loss at the end: the lowest is taken at
the next round close if it beat the policy in force on every seed, else the
policy stays (and ranks again after ``dwell`` rounds). This is what weighs
convergence per sample (local SGD's loss 0.25 against BSP's 0.35 on the
bench's homogeneous-8 at 2.4 s). The simulator answers at once (in no
simulated time); real processes run it in a process of their own (``python
-m hetsync.sim.forecast_job``) while the workers train on, and answer when
it ends (about 5 s on a busy 2-core machine). A driver that cannot forecast
(a user's own loop, whose model the simulator cannot run; sharded servers)
answers with no scores; the proposal then stands, a round later (unless it
was asp or ssp), and no more forecasts are asked.

Asynchronous candidates: ``asp`` and ``ssp`` (SSP with bound ``s``) trade
convergence per sample for throughput, which only a forecast can weigh: they
are candidates only with ``forecast=on`` (the default set then includes them;
named without it, refused), never the start, and taken out of the set (a
second ``candidates`` note says so) once a driver answers that it cannot
forecast. The throughput ranking replays them as nobody waiting (each
worker's step and its own push and pull back to back: N / Σ 1/(T + overhead)
a round of N steps, SSP's the same upper bound), so they are proposed
whenever they are faster and the forecast decides. Into them: at a round
close, every worker pulls into their first step. Out of them: each Apply of
one push is a round close for auto (counted as 1/N of a round toward the
dwell); the worker pulled there starts the new policy, the others' steps in
flight for ASP are dropped on arrival (``policy switch``) and they pull and
start. On ``hetsync bench auto``'s hetero case the forecast took ASP at
0.88 s on every seed (2.17 s to the target; ASP fixed 2.0, BSP 3.33).
``forecast`` is off by default because on the bench's other cases it gained
nothing: the same switches, a round or a dwell later (docs/results-auto.md).
Not yet (issue 31): handover to and from local-model policies other than
local SGD (WBSP-overlap, DiLoCo).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from hetsync.algos.stepfit import fit_step_cost
from hetsync.errors import BadInput
from hetsync.policies.asp import ASP
from hetsync.policies.backup import BackupWorkers
from hetsync.policies.base import (
    Apply,
    Command,
    Compute,
    ComputeDone,
    Drop,
    Event,
    Forecast,
    ForecastDone,
    Note,
    Policy,
    PolicyConfig,
    PolicyContext,
    Pull,
    PushArrived,
    WorkerJoined,
    WorkerLeft,
    param,
    state_list,
)
from hetsync.policies.bsp import BSP
from hetsync.policies.lb_bsp import LBBSP
from hetsync.policies.local_sgd import LocalSGD
from hetsync.policies.ssp import SSP

CANDIDATES = ("bsp", "lb-bsp", "backup", "local-sgd", "asp", "ssp")
ASYNCHRONOUS = ("asp", "ssp")  # candidates whose convergence per sample is not BSP's: only forecasts rank them
DEFAULT_CANDIDATES = "bsp+lb-bsp+backup+local-sgd"
BATCHES_KEPT = 4  # batch sizes whose step times the fit keeps, per worker
SMOOTHING = 0.3  # the weight of a new step time in its batch size's average
MAX_FIXED_SHARE = 0.95  # (a step all fixed cost leaves LB-BSP no batch to move)
MOVED = 0.1  # a worker's step time "moved" when it changed by more than this share since the reference
CHANGED = 0.25  # keep_start=until-change: the cluster changed when a median step time moved by more than this share
# what its ranking weighs, said at the start (a ``candidates`` note): in a user's loop it is all it can know
RANKED_BY = "measured samples a second (each candidate's convergence per sample is BSP's)"
RANKED_BY_ASYNC = (  # (with asp or ssp among them: a switch to them only on a forecast)
    "; asp and ssp, whose convergence per sample is not BSP's, only by forecasts from the live model"
)
RANKED_BY_LOCAL = (  # (with local-sgd among them)
    "measured samples a second (each candidate's convergence per sample taken as BSP's: local SGD's is only "
    "close to it, at a small H)"
)
SHOWN = 8  # workers a switch note lists at most (moved, fixed shares), the largest first
PROBE_SHARE = 0.125  # probe rounds (BSP): pairs of workers at B·(1 ± this), the global batch unchanged
PROBE_STEPS = 4  # steps a worker takes at each of two batch sizes before its fixed share is fitted
FORECAST_SEEDS = 2  # seeds each candidate's forecast runs
FORECAST_WINDOWS = 2  # a forecast's horizon: this many windows of the measured steps (and their overheads)


@dataclass(frozen=True, kw_only=True)
class AutoConfig(PolicyConfig):
    candidates: str = param(
        DEFAULT_CANDIDATES,
        help="the policies to choose among, joined by '+' (of bsp, lb-bsp, backup, local-sgd; asp, ssp with "
        "forecast=on: their convergence per sample is not BSP's, only a forecast can weigh it)",
        quiet=True,
    )
    start: str = param(
        "bsp",
        help="the policy it starts with; or hetsync advise's advice.json (or its folder): the best-ranked "
        "candidate there, held until the cluster changes (keep_start)",
        choices=CANDIDATES,
        quiet=True,
    )
    keep_start: str = param(
        "no",
        help="until-change: stay on the start until the cluster changes (a worker's median step time or the "
        "round moves by more than 25% from the first window, or a worker leaves or joins), then rank as "
        "usual; what start=ADVICE sets: the advice weighed convergence, the measured ranking cannot",
        choices=("no", "until-change"),
        quiet=True,
    )
    window: int = param(20, help="steps per worker the ranking replays (the last ones)", ge=2, le=1000, quiet=True)
    margin: float = param(
        0.1, help="predicted gain a switch needs (0.1: 10% more samples a second)", ge=0.0, le=10.0, quiet=True
    )
    b: int = param(1, help="backup's b: gradients a round ignores", ge=1, below_workers=True, quiet=True)
    h: int = param(
        4,
        help="local SGD's H: local steps between averages (small: its convergence per sample is BSP's only then)",
        ge=1,
        le=32,
        quiet=True,
    )
    s: int = param(3, help="SSP's s, when ssp is a candidate: its staleness bound in steps", ge=0, quiet=True)
    forecast: str = param(
        "off",
        help="when the measured throughput proposes a switch, first simulate every candidate from the live model "
        "on the measured cluster and take the one with the lowest loss; the default candidates then include asp "
        "and ssp (the simulator: at once; real processes: "
        "in a process of its own; not in your own loop; off by default: on the bench auto cases it gained nothing)",
        choices=("on", "off"),
        quiet=True,
    )
    confidence: float = param(
        0.9,
        help="how sure a switch must be of its gain: the gain that many of the window's rounds, drawn again, "
        "still give must exceed the margin (0.5: the median's)",
        ge=0.5,
        le=0.999,
        quiet=True,
    )


def candidate_specs(config: AutoConfig) -> dict[str, str]:
    """Every candidate's policy spec with auto's settings for it (its
    backup's b, its local SGD's H, its SSP's s): what a forecast simulates,
    and what ``hetsync bench auto`` runs fixed beside auto."""
    return {
        "bsp": "bsp",
        "lb-bsp": "lb-bsp",
        "backup": f"backup:b={config.b}",
        "local-sgd": f"local-sgd:H={config.h}",
        "asp": "asp",
        "ssp": f"ssp:s={config.s}",
    }


def fixed_share(batches: np.ndarray, durations_s: np.ndarray, batch_size: int) -> float | None:
    """The share of a worker's step at ``batch_size`` that does not grow with
    the batch, fitted (least squares, ``t = a + p·b``, a and p ≥ 0: the
    profile's fit, :func:`~hetsync.algos.stepfit.fit_step_cost`) from steps at
    batches at least 10% apart; None when they are not (nothing to tell it by)."""
    if batches.min() * 1.1 > batches.max():
        return None
    a, p = fit_step_cost(list(zip(batches.tolist(), durations_s.tolist(), strict=True)))
    at = a + p * batch_size
    return min(a / at, MAX_FIXED_SHARE) if at > 0 else None


def smoothed(step_s: np.ndarray) -> float:
    """A worker's smoothed step time: the exponential average (weight
    ``SMOOTHING`` for each newer step) of its window, oldest first."""
    level = float(step_s[0])
    for x in step_s[1:]:
        level += SMOOTHING * (float(x) - level)
    return level


def switch_moves(before_s: dict[int, float], now_s: dict[int, float]) -> list[dict[str, Any]]:
    """The workers whose step time (``before_s`` → ``now_s``, each worker's
    :func:`smoothed` time at the common batch) changed by more than ``MOVED``, the largest
    change (by ratio) first: ``{w, from_s, to_s}``, times to 4 significant
    digits. A worker in one of the two only (joined, left) is not listed."""
    moved = []
    for w in sorted(before_s.keys() & now_s.keys()):
        a, b = before_s[w], now_s[w]
        if a > 0 and b > 0 and abs(b / a - 1.0) > MOVED:
            moved.append((abs(float(np.log(b / a))), w, a, b))
    moved.sort(key=lambda m: (-m[0], m[1]))
    return [{"w": w, "from_s": float(f"{a:.4g}"), "to_s": float(f"{b:.4g}")} for _, w, a, b in moved]


def cluster_changed(
    reference_s: dict[int, float],
    windows: dict[int, np.ndarray],
    reference_overhead_s: float,
    overhead_s: float,
    steps_per_round: int = 1,
) -> bool:
    """Whether the cluster changed since the reference window (``keep_start``):
    a worker's median step time (``reference_s``: each worker's median over the
    reference window; ``windows``: its window now) moved by more than
    ``CHANGED``, the round overhead by more than ``CHANGED`` of the
    reference's round (``steps_per_round`` of its slowest median step, plus
    its overhead: a few
    milliseconds of loopback overhead double with the machine's load and change
    no round), or the live workers are not the reference's. Medians and a
    threshold above ``MOVED``: on 4 workers sharing 2 cores a worker's
    smoothed step time moved by 11% with nothing changed."""
    if set(reference_s) != set(windows):
        return True
    for u, row in windows.items():
        before, now = reference_s[u], float(np.median(row))
        if before > 0 and abs(now / before - 1.0) > CHANGED:
            return True
    round_s = steps_per_round * max(reference_s.values(), default=0.0) + reference_overhead_s
    return abs(overhead_s - reference_overhead_s) > CHANGED * round_s


def slowest_counts(workers: list[int], step_s: np.ndarray) -> list[dict[str, int]]:
    """In how many of the replayed rounds (the columns of ``step_s``, one row
    per worker of ``workers``) each worker was the slowest, the most first:
    ``{w, rounds}``. One worker every round: a slow worker (LB-BSP's case);
    a different one from round to round: noise (backup's)."""
    counts = np.bincount(np.argmax(step_s, axis=0), minlength=len(workers))
    order = sorted((i for i in range(len(workers)) if counts[i]), key=lambda i: (-counts[i], workers[i]))
    return [{"w": workers[i], "rounds": int(counts[i])} for i in order]


def replayed(step_s: np.ndarray, h: int | None) -> np.ndarray:
    """The window's columns every candidate replays: all of them, or with
    local SGD among the candidates (``h`` its H) the newest ⌊W/H⌋·H, so that
    its rounds of H steps and the others' rounds of one cover the same steps."""
    if h is None:
        return step_s
    kept = (step_s.shape[1] // h) * h
    if not kept:
        raise ValueError(f"a window of {step_s.shape[1]} steps holds no round of local SGD's H = {h}")
    return step_s[:, step_s.shape[1] - kept :]


def round_times(
    step_s: np.ndarray,
    fixed: np.ndarray,
    batch_size: int,
    b: int,
    h: int | None = None,
    overhead_s: float = 0.0,
    asynchronous: bool = False,
) -> dict[str, tuple[int, np.ndarray]]:
    """Each candidate's samples applied per round and its round times when
    ``step_s`` (workers × rounds: each worker's step times at the common
    batch ``batch_size``, oldest first) is replayed as rounds; a worker's step at batch x
    takes ``T·(f + (1 − f)·x/batch_size)``, ``f`` its ``fixed`` share (see
    the module docstring). With ``h``, local SGD(H) too: a round of H steps
    per worker (each worker's H consecutive times, :func:`replayed` keeping
    whole rounds), which waits for the slowest worker's sum of H. Every
    round of every candidate also takes ``overhead_s``, the measured time a
    round spends beyond its slowest worker's steps (the push, the server,
    the pull: :func:`round_overhead_s`); local SGD pays it once per H steps.
    Backup waits for the (N − b)-th, or for the first where N ≤ b (workers
    have left: BackupWorkers closes a round with at least one). With
    ``asynchronous``, ASP and SSP too: no one waits, each worker's step and
    its own push and pull (the overhead, taken as a worker's own) back to
    back, so a round of N steps takes N / Σ 1/(T + overhead) — an upper bound
    for SSP, whose bound may make the fastest wait; only a forecast ranks
    them in earnest (their convergence per sample is not BSP's)."""
    step_s = replayed(step_s, h)
    n = step_s.shape[0]
    total = n * batch_size
    times = {"bsp": (total, np.max(step_s, axis=0))}
    # LB-BSP's batches for an equal finish τ on the mean times: x_i = B·(τ/T_i − f_i)/(1 − f_i), Σx = N·B
    mean_s, grow = step_s.mean(axis=1), 1.0 - fixed
    tau = (n + float((fixed / grow).sum())) / float((1.0 / (mean_s * grow)).sum())
    x = np.clip(batch_size * (tau / mean_s - fixed) / grow, 1.0, None)
    x *= total / x.sum()
    times["lb-bsp"] = (total, np.max(step_s * (fixed + grow * x / batch_size)[:, None], axis=0))
    need = max(1, n - b)  # the (N − b)-th to finish; at least one (backup's own rule, once workers have left)
    times["backup"] = (need * batch_size, np.sort(step_s, axis=0)[need - 1])
    if h is not None:
        sums = step_s.reshape(n, -1, h).sum(axis=2)  # each worker's H steps of each round
        times["local-sgd"] = (total * h, np.max(sums, axis=0))
    if overhead_s > 0:
        times = {k: (samples, t + overhead_s) for k, (samples, t) in times.items()}
    if asynchronous:
        rate = np.sum(1.0 / (step_s + overhead_s), axis=0)  # steps a second, the cluster's
        times["asp"] = times["ssp"] = (total, n / rate)
    return times


def round_overhead_s(period_s: float, busy_s: np.ndarray) -> float | None:
    """What one round took beyond computing: the time since the last
    round's close (``period_s``) less the longest any live worker computed
    in it (``busy_s``: each one's step times since that close, summed) — the
    transfers and the server's turn. None when a step that began before the
    last close makes it meaningless (a late backup step: busy longer than the
    round)."""
    if busy_s.size == 0:
        return None
    rest = period_s - float(np.max(busy_s))
    return rest if rest >= 0 else None


def rates_of(times: dict[str, tuple[int, np.ndarray]]) -> dict[str, float]:
    """Samples applied per second by each candidate of :func:`round_times`' answer."""
    return {k: samples * len(t) / float(t.sum()) for k, (samples, t) in times.items()}


def predicted_rates(
    step_s: np.ndarray, fixed: np.ndarray, batch_size: int, b: int, h: int | None = None, overhead_s: float = 0.0
) -> dict[str, float]:
    """Samples applied per second by each candidate over the replayed rounds
    (:func:`round_times`)."""
    return rates_of(round_times(step_s, fixed, batch_size, b, h, overhead_s))


def grouped(times: tuple[int, np.ndarray], rounds: int) -> tuple[int, np.ndarray]:
    """``times`` (samples a round, round times) as ``rounds`` groups of
    consecutive rounds (local SGD's round spans H of the others': a paired
    draw must pick the same steps for both); ValueError when its rounds do
    not split evenly."""
    samples, t = times
    if len(t) == rounds:
        return times
    if rounds < 1 or len(t) % rounds:
        raise ValueError(f"{len(t)} replayed rounds do not split into {rounds} groups")
    k = len(t) // rounds
    return samples * k, t.reshape(rounds, k).sum(axis=1)


def gain_quantile(
    now: tuple[int, np.ndarray], other: tuple[int, np.ndarray], q: float, rng: np.random.Generator, draws: int = 200
) -> float:
    """The ``q``-quantile of ``other``'s rate over ``now``'s when the replayed
    rounds are drawn again with replacement, the same rounds for both (a
    paired bootstrap): how much of a predicted gain is the window's noise.
    Each is (samples a round, round times) from :func:`round_times`; where
    one's round spans several of the other's (local SGD's), the draws pick
    its rounds and the other's rounds over the same steps (:func:`grouped`)."""
    rounds = min(len(now[1]), len(other[1]))
    now, other = grouped(now, rounds), grouped(other, rounds)
    picks = rng.integers(0, rounds, size=(draws, rounds))
    ratio = (other[0] * now[1][picks].sum(axis=1)) / (now[0] * other[1][picks].sum(axis=1))
    return float(np.quantile(ratio, q))


class Auto(Policy):
    name = "auto"
    summary = "of bsp, lb-bsp, backup, local-sgd (asp, ssp): the live cluster's fastest, switched as it changes"
    config_class = AutoConfig
    config: AutoConfig
    takes_joins = True

    def __init__(self, ctx: PolicyContext, **params: object) -> None:
        super().__init__(ctx, **params)
        names = tuple(s.strip().lower() for s in self.config.candidates.split("+") if s.strip())
        unknown = [s for s in names if s not in CANDIDATES]
        if unknown or not names:
            raise BadInput(
                f"policy 'auto' parameter 'candidates' must name some of {'+'.join(CANDIDATES)} joined by '+', "
                f"got {self.config.candidates!r}"
            )
        if self.config.start not in names:
            raise BadInput(
                f"policy 'auto' parameter 'start' ({self.config.start}) must be one of its candidates {'+'.join(names)}"
            )
        if self.config.start in ASYNCHRONOUS:
            raise BadInput(
                f"policy 'auto' parameter 'start' ({self.config.start}): auto starts on a policy whose convergence "
                "per sample is BSP's (bsp, lb-bsp, backup, local-sgd); asp and ssp it takes only on a forecast"
            )
        if any(c in ASYNCHRONOUS for c in names) and self.config.forecast != "on":
            raise BadInput(
                f"policy 'auto' parameter 'candidates' ({self.config.candidates}) names asp or ssp, whose convergence "
                "per sample is not BSP's: measured throughput cannot rank them, only forecasts can; add forecast=on"
            )
        if self.config.candidates == DEFAULT_CANDIDATES and self.config.forecast == "on":
            names = (*names, *ASYNCHRONOUS)  # (what forecasts can rank and the throughput cannot: the default widens)
        if self.config.b >= self.n:  # a cluster too small for backup workers
            if self.config.start == "backup":
                raise BadInput(
                    f"policy 'auto' starts with backup, whose b must be < workers ({self.n}), got {self.config.b}"
                )
            names = tuple(s for s in names if s != "backup")
        short = self.config.h * 2 > self.config.window  # (the ranking replays whole rounds of h steps)
        if short and self.config.candidates == DEFAULT_CANDIDATES and self.config.start != "local-sgd":
            names = tuple(s for s in names if s != "local-sgd")  # (not named: a short window leaves it out)
        if "local-sgd" in names and self.config.h * 2 > self.config.window:
            raise BadInput(
                f"policy 'auto' parameter 'h' ({self.config.h}) must be at most half its window "
                f"({self.config.window}): the ranking replays local SGD's rounds of h steps from it"
            )
        self.candidates = names
        self.alive = set(range(self.n))
        self.version = 0  # the ledger's: one per Apply
        self.steps: list[deque[tuple[int, float]]] = [deque(maxlen=self.config.window) for _ in range(self.n)]
        self.fixed = np.zeros(self.n)  # each worker's fixed share of a step, once batches varied (LB-BSP) tell it
        # each worker's step time at the batch sizes it ran lately (smoothed; the latest last): the fixed share's fit
        self.by_batch: list[dict[int, float]] = [{} for _ in range(self.n)]
        self.counts: list[dict[int, int]] = [{} for _ in range(self.n)]  # steps seen at each of those batch sizes
        self.probed: set[int] = set()  # workers whose fixed share BSP's probe rounds fitted (_probe)
        self.current = self.config.start
        self.inner = self._make(self.current)
        self.draining: dict[int, Compute] = {}  # computing for the old policy: its first step once its push is dropped
        self.switches: list[dict[str, Any]] = []
        self.since_switch = 0.0  # rounds since the last switch (an Apply; local SGD's counts H, ASP's 1/N)
        self.dwell = self.config.window  # rounds a switch stands at least: doubled by each switch back
        # each live worker's smoothed step time at the common batch over the first full window since the
        # start or the last switch (None: not measured yet), and when: what a switch's cause is measured from
        self.reference: dict[int, float] | None = None
        self.reference_s = 0.0
        self.held = self.config.keep_start == "until-change"  # on the start until the cluster changes
        # the cluster it is held on: each live worker's median step time at the common batch over the first full
        # window, and the round overhead then (cluster_changed)
        self.held_reference: tuple[dict[int, float], float] | None = None
        # each round's time beyond its slowest worker's steps (transfers, the server): round_overhead_s
        self.busy_s = np.zeros(self.n)  # each worker's step times since the last round's close
        self.closed_s: float | None = None  # when the last round closed
        self.overheads: deque[float] = deque(maxlen=self.config.window)
        # forecasts (the simulator's ranking): the ask in flight and the throughput ranking's choice that
        # prompted it; the forecast's choice, taken at the next round close; off once a driver says it cannot
        self.forecasting = self.config.forecast == "on"
        self.asks = 0
        self.asked: tuple[int, tuple[str, dict[str, float], dict[int, np.ndarray]]] | None = None
        self.decided: tuple[str, dict[str, float], dict[int, np.ndarray]] | None = None
        self.forecast_said: dict[str, Any] | None = None  # the forecast behind the decided switch (its note)
        self.ranked_steps = self.config.window  # how many of each worker's newest steps the last proposal was ranked on

    @property
    def local_steps_midway(self) -> bool:
        """Whether it may switch to local SGD after gradient rounds (what it
        ranks by then is measured throughput only: RANKED_BY_LOCAL)."""
        return "local-sgd" in self.candidates

    # ------------------------------------------------------------ policies
    def _make(self, name: str) -> Policy:
        if name == "bsp":
            return BSP(self.ctx)
        if name == "lb-bsp":
            return LBBSP(self.ctx)
        if name == "local-sgd":
            return LocalSGD(self.ctx, H=self.config.h)
        if name == "asp":
            return ASP(self.ctx)
        if name == "ssp":
            return SSP(self.ctx, s=self.config.s)
        policy = BackupWorkers(self.ctx, b=self.config.b)
        policy.load_state_dict({"version": self.version})  # (what is late is judged by the ledger's versions)
        return policy

    def state_dict(self) -> dict[str, Any]:
        return {
            "current": self.current,
            "version": self.version,
            "dwell": self.dwell,
            "switches": self.switches,
            "fixed": [float(f) for f in self.fixed],
            "held": self.held,
            "inner": self.inner.state_dict(),  # (what the current policy learned: LB-BSP's batches)
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.version = int(state["version"])
        self.dwell = int(state["dwell"])
        self.switches = list(state["switches"])
        self.current = str(state["current"])
        self.held = bool(state.get("held", False))  # (a resumed run's reference is measured again, held or not)
        self.fixed = np.array(state_list(self.name, state, "fixed", self.n), dtype=float)
        self.inner = self._make(self.current)
        self.inner.load_state_dict(state["inner"])

    # -------------------------------------------------------------- events
    def start(self, now_s: float) -> list[Command]:
        said = self._candidates_note()
        return [said, *self._from_inner(self.inner.start(now_s), now_s)]

    def on_event(self, event: Event) -> list[Command]:
        if isinstance(event, ComputeDone):
            self.busy_s[event.worker] += event.duration_s
            self.steps[event.worker].append((event.batch_size, event.duration_s))
            self._remember(event.worker, event.batch_size, event.duration_s)
            if event.worker in self.draining:
                return []  # a step of the old policy: the new one never ordered it
        if isinstance(event, PushArrived) and event.worker in self.draining:
            first = self.draining.pop(event.worker)
            return [Drop(push_ids=(event.push_id,), reason="policy switch"), Pull(worker=event.worker, then=first)]
        if isinstance(event, WorkerLeft):
            self.alive.discard(event.worker)
            self.draining.pop(event.worker, None)
        if isinstance(event, WorkerJoined):
            self.alive.add(event.worker)
        if isinstance(event, ForecastDone):
            return self._answered(event)
        return self._from_inner(self.inner.on_event(event), event.now_s)

    def _from_inner(self, cmds: list[Command], now_s: float) -> list[Command]:
        cmds = self._probe(cmds)
        applies = sum(isinstance(c, Apply) for c in cmds)
        if applies:
            self._round_closed(now_s)
        self.version += applies
        # (rounds of one step per worker: a round of local SGD counts its H, so a switch stands as many steps)
        self.since_switch += applies * self._round_share()
        if not applies or self.since_switch < self.dwell:
            return cmds
        if self.decided is not None:  # a forecast chose: the switch is at this round close
            choice, self.decided = self.decided, None
            return self._switch(choice, cmds, now_s)
        if self.asked is not None:
            return cmds  # a forecast in flight
        best = self._rank(now_s)
        if best is None:
            return cmds
        if self.forecasting:
            return [*cmds, self._ask(best)]
        return self._switch(best, cmds, now_s)

    def _candidates_note(self) -> Note:
        """What it starts with, chooses among and by what (said at the start,
        and again when a driver that cannot forecast narrows the set)."""
        return Note(
            what="candidates",
            detail={
                "start": self.config.start,
                "candidates": list(self.candidates),
                "by": self._ranked_by(),
                **({"held": "on the start until the cluster changes"} if self.held else {}),
            },
        )

    def _ranked_by(self) -> str:
        by = RANKED_BY_LOCAL if self.local_steps_midway else RANKED_BY
        if not any(c in ASYNCHRONOUS for c in self.candidates):
            return by
        return by.replace("each candidate's", "each synchronous candidate's") + RANKED_BY_ASYNC

    def _steps_per_round(self) -> int:
        """Each worker's steps in a round of the synchronous policy in force: local SGD's H, else 1."""
        return self.config.h if self.current == "local-sgd" else 1

    def _round_share(self) -> float:
        """What one Apply of the policy in force counts as, in rounds of one
        step per worker: local SGD's round is H steps each, an asynchronous
        policy's Apply one worker's step (N make a round)."""
        if self.current in ASYNCHRONOUS:
            return 1.0 / max(1, len(self.alive))
        return float(self._steps_per_round())

    # ------------------------------------------------------------ forecasts
    def _specs(self, live: int) -> dict[str, str]:
        """Each candidate's policy spec for a forecast on ``live`` workers."""
        specs = candidate_specs(self.config)
        return {name: specs[name] for name in self.candidates if name != "backup" or self.config.b < live}

    def _ask(self, proposal: tuple[str, dict[str, float], dict[int, np.ndarray]]) -> Forecast:
        """The throughput ranking proposes a switch: first simulate every
        candidate from the live model on the cluster as measured (the rows
        the proposal was ranked on, their fixed shares, the round overhead)."""
        self.asks += 1
        self.asked = (self.asks, proposal)
        # the steps the proposal was ranked on (the window's newest half, when that is where it showed: a
        # cluster that changed midway is forecast as it is now, not as the mix of before and after)
        windows = {u: row[row.size - self.ranked_steps :] for u, row in proposal[2].items()}
        live = sorted(windows)
        overhead_s = self.overhead_s()
        typical_s = float(np.median(np.concatenate([windows[u] for u in live])))
        return Forecast(
            ask=self.asks,
            candidates=tuple(self._specs(len(live)).values()),
            step_s=tuple(tuple(float(t) for t in windows[u]) for u in live),
            fixed=tuple(float(self.fixed[u]) for u in live),
            overhead_s=overhead_s,
            horizon_s=FORECAST_WINDOWS * self.config.window * (typical_s + overhead_s),
            seeds=FORECAST_SEEDS,
        )

    def _answered(self, event: ForecastDone) -> list[Command]:
        """A forecast's answer: the candidate with the lowest loss, if it beat
        the policy in force on every seed, is switched to at the next round
        close; else it stays (and ranks again after ``dwell`` rounds). A
        driver that cannot forecast: the throughput ranking's choice stands,
        and no more forecasts are asked."""
        if self.asked is None or event.ask != self.asked[0]:
            return []
        proposal = self.asked[1]
        self.asked = None
        if event.scores is None:
            self.forecasting = False
            # (asp and ssp only a forecast can rank: without one, they are candidates no more)
            before = self.candidates
            self.candidates = tuple(c for c in self.candidates if c not in ASYNCHRONOUS)
            self.decided = proposal if proposal[0] in self.candidates else None
            notes: list[Command] = [Note(what="forecast", detail={"by": "throughput", "why": event.why})]
            if self.decided is None:
                self.since_switch = 0.0  # (ranked again, among the rest, once the dwell has passed)
            if self.candidates != before:
                notes.append(self._candidates_note())  # (what it chooses among now)
            return notes
        names = {spec: name for name, spec in self._specs(len(proposal[2])).items()}
        losses = {names[spec]: values for spec, values in event.scores if spec in names}
        best = min(losses, key=lambda k: float(np.mean(losses[k])))
        now = losses.get(self.current)
        beats = best != self.current and (now is None or max(losses[best]) < min(now))
        said = {
            "metric": event.metric,
            "losses": {k: [round(v, 4) for v in vs] for k, vs in losses.items()},
            "proposed": proposal[0],
            "chosen": best if beats else self.current,
        }
        if beats:
            self.decided = (best, proposal[1], proposal[2])
            self.forecast_said = said
        else:
            self.since_switch = 0.0  # it stays; ranked again once the dwell has passed
        return [Note(what="forecast", detail=said)]

    # ------------------------------------------------------------- ranking
    def _round_closed(self, now_s: float) -> None:
        live = sorted(self.alive)
        # (an asynchronous policy's Apply closes one worker's step, not a round: nothing of a round to measure)
        if self.closed_s is not None and live and self.current not in ASYNCHRONOUS:
            rest = round_overhead_s(now_s - self.closed_s, self.busy_s[live])
            if rest is not None:
                self.overheads.append(rest)
        self.closed_s = now_s
        self.busy_s[:] = 0.0

    def overhead_s(self) -> float:
        """The median of the window's measured round overheads (0 before any)."""
        return float(np.median(self.overheads)) if self.overheads else 0.0

    def _remember(self, w: int, batch: int, duration_s: float) -> None:
        seen, counts = self.by_batch[w], self.counts[w]
        before = seen.pop(batch, None)
        seen[batch] = duration_s if before is None else before + SMOOTHING * (duration_s - before)
        counts[batch] = counts.get(batch, 0) + 1
        while len(seen) > BATCHES_KEPT:
            oldest = next(iter(seen))  # the batch size run longest ago
            del seen[oldest]
            counts.pop(oldest, None)
        if self.current == "bsp" and w not in self.probed and self._fitted(w):
            # probed: its share fitted once, and the probe sizes forgotten (left in, their times would go stale
            # as the cluster changes and mix with the common batch's in every later fit)
            f = fixed_share(np.array(list(seen)), np.array(list(seen.values())), self.ctx.batch_size)
            if f is not None:
                self.fixed[w] = f
            B = self.ctx.batch_size
            self.by_batch[w] = {B: seen[B]} if B in seen else {}
            self.counts[w] = {B: counts[B]} if B in counts else {}
            self.probed.add(w)

    # -------------------------------------------------------------- probes
    def _fitted(self, w: int) -> bool:
        """Whether worker ``w`` ran PROBE_STEPS steps at each of two batch
        sizes at least 10% apart (what :func:`fixed_share` needs)."""
        sizes = sorted(b for b, k in self.counts[w].items() if k >= PROBE_STEPS)
        return len(sizes) >= 2 and sizes[-1] >= 1.1 * sizes[0]

    def _probe(self, cmds: list[Command]) -> list[Command]:
        """Under BSP, until every live worker's fixed share can be fitted:
        pairs of workers (rotating, so each takes its turn) run B·(1 + p) and
        B·(1 − p), the sign alternating from round to round. BSP's round is
        the batch-weighted mean gradient of the same global batch, only split
        otherwise (as LB-BSP splits it), so the model's update is BSP's; what
        it buys is each worker's step time at two batch sizes, so that a
        step's fixed share is known before LB-BSP is ranked (a straggler by
        fixed delays — hetero-4's — is not LB-BSP's case)."""
        if not cmds or self.current != "bsp" or "lb-bsp" not in self.candidates or self.alive <= self.probed:
            return cmds  # (most events give no command: nothing sorted for them)
        live = sorted(self.alive)
        if len(live) < 2:
            return cmds
        B = self.ctx.batch_size
        delta = max(1, round(PROBE_SHARE * B))
        if B - delta < 1:
            return cmds
        k = self.version % len(live)
        turn = live[k:] + live[:k]
        sign = 1 if (self.version // len(live)) % 2 == 0 else -1
        sized: dict[int, int] = {}
        caps = self.ctx.max_batch
        for a, b in zip(turn[0::2], turn[1::2], strict=False):
            up, down = (a, b) if sign > 0 else (b, a)
            if caps and caps[up] < B + delta:
                continue
            sized[up], sized[down] = B + delta, B - delta
        out: list[Command] = []
        for c in cmds:
            step = c if isinstance(c, Compute) else c.then if isinstance(c, Pull) else None
            if step is None or step.worker not in sized or step.batch_size != B or step.local_lr is not None:
                out.append(c)
                continue
            resized = replace(step, batch_size=sized[step.worker])
            out.append(replace(c, then=resized) if isinstance(c, Pull) else resized)
        return out

    def _rank(self, now_s: float) -> tuple[str, dict[str, float], dict[int, np.ndarray]] | None:
        """The candidate to switch to, the predicted rates and each live
        worker's window at the common batch (its replayed step times), or
        None (stay). The first full window since the start or the last switch
        is the reference a switch's cause is measured from."""
        live = sorted(self.alive)
        if len(self.candidates) < 2 or not live or any(len(self.steps[u]) < self.config.window for u in live):
            return None
        B = self.ctx.batch_size
        rows = []
        for u in live:
            seen = self.by_batch[u]
            f = fixed_share(np.array(list(seen)), np.array(list(seen.values())), B)
            if f is not None:
                self.fixed[u] = f
            fu = self.fixed[u]
            obs = np.array(self.steps[u], dtype=float)
            rows.append(obs[:, 1] / (fu + (1.0 - fu) * obs[:, 0] / B))  # each step as it would take at B
        windows = dict(zip(live, rows, strict=True))
        overhead_s = self.overhead_s()
        if self.reference is None:
            self.reference = {u: smoothed(row) for u, row in windows.items()}
            self.reference_s = now_s
        if self.held:
            # the round overhead of the newest rounds (a window of local SGD's rounds is H times as long)
            per_round = self._steps_per_round()
            recent = list(self.overheads)[-max(3, self.config.window // (2 * per_round)) :]
            recent_s = float(np.median(recent)) if recent else 0.0
            if self.held_reference is None:  # (the cluster the start is held on: the first full window)
                self.held_reference = ({u: float(np.median(row)) for u, row in windows.items()}, recent_s)
            held_s, held_overhead_s = self.held_reference
            if not cluster_changed(held_s, windows, held_overhead_s, recent_s, per_round):
                return None
            self.held = False  # (from here on it ranks as usual)
        h = self.config.h if "local-sgd" in self.candidates else None
        steps = np.array(rows)
        half = steps.shape[1] // 2
        # the whole window, then its newest half: a change shows there about twice as soon
        for cols in (steps, steps[:, steps.shape[1] - half :]) if half >= max(4, 2 * (h or 1)) else (steps,):
            chosen = self._best_of(cols, live, h, overhead_s)
            if chosen is not None:
                self.ranked_steps = cols.shape[1]  # (the newest steps it was ranked on: a forecast's cluster)
                return chosen[0], chosen[1], windows
        return None

    def _best_of(
        self, steps: np.ndarray, live: list[int], h: int | None, overhead_s: float
    ) -> tuple[str, dict[str, float]] | None:
        """The candidate whose predicted gain over the current one clears the
        margin with ``confidence`` on these replayed steps, and the rates."""
        asynchronous = any(c in ASYNCHRONOUS for c in self.candidates)
        times = round_times(steps, self.fixed[live], self.ctx.batch_size, self.config.b, h, overhead_s, asynchronous)
        times = {k: v for k, v in times.items() if k in self.candidates}
        rates = rates_of(times)
        best = max(rates, key=lambda k: rates[k])
        if best == self.current or rates[best] <= rates[self.current] * (1.0 + self.config.margin):
            return None
        rng = np.random.default_rng(self.version)  # (the same run ranks alike: no draw from the job's generator)
        if (
            gain_quantile(times[self.current], times[best], 1.0 - self.config.confidence, rng)
            <= 1.0 + self.config.margin
        ):
            return None  # the gain is within the noise of the window
        return best, rates

    def _cause(self, name: str, windows: dict[int, np.ndarray]) -> dict[str, Any]:
        """What the window measured that made ``name`` the best (the note's
        detail beside from, to, rates, gain): see the module docstring."""
        moved = switch_moves(self.reference or {}, {u: smoothed(row) for u, row in windows.items()})
        live = sorted(windows)
        fixed: list[dict[str, Any]] = []
        if "lb-bsp" in (name, self.current):
            shares = sorted(((round(float(self.fixed[u]), 3), u) for u in live), key=lambda s: (-s[0], s[1]))
            fixed = [{"w": u, "share": f} for f, u in shares[:SHOWN] if f > 0]
        return {
            "since_s": self.reference_s,
            "moved": moved[:SHOWN],
            "moved_count": len(moved),
            "rounds": self.config.window,
            "round_overhead_s": round(self.overhead_s(), 4),
            "slowest": slowest_counts(live, np.array([windows[u] for u in live]))[:3],
            "fixed": fixed,
        }

    def _switch(
        self, choice: tuple[str, dict[str, float], dict[int, np.ndarray]], cmds: list[Command], now_s: float
    ) -> list[Command]:
        name, rates, windows = choice
        if self.switches and self.switches[-1]["from"] == name:  # back to what it just left: the noise, likelier
            self.dwell *= 2
        self.since_switch = 0.0
        detail = {
            "from": self.current,
            "to": name,
            "rates": {k: round(v, 3) for k, v in rates.items()},
            "gain": round(rates[name] / rates[self.current], 3),
            **self._cause(name, windows),
        }
        if self.forecast_said is not None:  # chosen by a forecast: its losses
            detail["forecast"] = self.forecast_said
            self.forecast_said = None
        self.switches.append({"t": now_s, **detail})
        self.reference = None  # (the next full window, under the new policy, is the next switch's reference)
        self.reference_s = now_s
        self.current, self.inner = name, self._make(name)
        for w in sorted(set(range(self.n)) - self.alive):  # (before its start: it sizes only the live)
            self.inner.on_event(WorkerLeft(now_s=now_s, worker=w))
        first = {c.worker: c for c in self.inner.start(now_s) if isinstance(c, Compute) and c.worker in self.alive}
        if name == "local-sgd":  # its local steps go on with the schedule where the rounds left it
            first = {w: replace(c, sync_clock=True) for w, c in first.items()}
        for w in self.draining:
            self.draining[w] = first[w]  # (still computing for the policy before the last)
        for steps in self.steps:
            steps.clear()  # (under the new policy: measured afresh)
        out: list[Command] = [Note(what="switch", detail=detail)]
        pulled = set()
        for c in cmds:
            if isinstance(c, Pull):
                pulled.add(c.worker)
                out.append(Pull(worker=c.worker, then=first[c.worker]))
            elif not isinstance(c, Compute):
                out.append(c)
        for w in sorted(self.alive - pulled):
            self.draining[w] = first[w]  # still computing for the old policy
        return out
