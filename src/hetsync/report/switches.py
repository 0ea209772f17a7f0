"""What a policy that switches (``auto``) did and why, in words: one line per switch.

Read from a run's ``policy_notes`` (docs/formats.md): each ``switch`` note's
time, the policy left and the one taken, the predicted gain (the taken
policy's predicted samples a second over the left one's) and its cause, the
fitted change: the workers whose smoothed step time moved since the
reference (the start, or the last switch), which workers were the slowest of
the rounds replayed, the fitted fixed shares of a switch to or from LB-BSP.
Notes written before a field existed are described with what they hold.
``hetsync report`` (and every command that prints a table) prints
:func:`switch_lines`; the HTML and markdown pages list them too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hetsync.report.common import _finite, _fmt_rate, _fmt_seconds


def _seconds(value: float) -> str:
    """A step time: 3 significant digits (``0.0506``)."""
    return f"{value:.3g}"


def _gain(detail: Mapping[str, Any]) -> float | None:
    """The note's gain, else the ratio of its rates (a note from before ``gain``)."""
    if _finite(detail.get("gain")):
        return float(detail["gain"])
    rates = detail.get("rates")
    if isinstance(rates, Mapping):
        new, old = rates.get(detail.get("to")), rates.get(detail.get("from"))
        if _finite(new) and _finite(old) and old > 0:
            return float(new) / float(old)
    return None


def _cause(detail: Mapping[str, Any], t: Any) -> list[str]:
    """The fitted change that made the switch, clause by clause."""
    parts: list[str] = []
    moved = detail.get("moved")
    since = detail.get("since_s")
    since_text = f"since {_fmt_seconds(since)} s" if _finite(since) else "since the reference"
    if _finite(since) and _finite(t) and since >= t - 1e-9:  # the reference is this very window
        parts.append("the cluster as first measured (no earlier full window since the start or the last switch)")
    elif isinstance(moved, list):
        shown = [
            f"w{m['w']} {_seconds(m['from_s'])} → {_seconds(m['to_s'])} s ({m['to_s'] / m['from_s']:.2f}×)"
            for m in moved
            if isinstance(m, Mapping) and _finite(m.get("from_s")) and _finite(m.get("to_s")) and m["from_s"] > 0
        ]
        count = detail.get("moved_count")
        more = count - len(shown) if isinstance(count, int) and count > len(shown) else 0
        if shown:
            parts.append(f"step time {since_text}: " + ", ".join(shown) + (f" and {more} more" if more else ""))
        else:
            parts.append(f"no worker's step time moved by more than 10% {since_text}")
    slowest = detail.get("slowest")
    rounds = detail.get("rounds")
    if isinstance(slowest, list) and slowest:
        of = f" of the last {rounds} rounds" if isinstance(rounds, int) else ""
        parts.append(
            f"slowest worker{of}: "
            + ", ".join(f"w{s['w']} in {s['rounds']}" for s in slowest if isinstance(s, Mapping))
        )
    fixed = detail.get("fixed")
    if isinstance(fixed, list) and fixed:
        parts.append(
            "fitted fixed shares: " + ", ".join(f"w{f['w']} {f['share']:.2f}" for f in fixed if isinstance(f, Mapping))
        )
    said = detail.get("forecast")  # chosen by a forecast (auto:forecast=on): each candidate's simulated loss
    losses = said.get("losses") if isinstance(said, Mapping) else None
    if isinstance(losses, Mapping) and losses:
        shown = [
            f"{name} {sum(v) / len(v):.3g}"
            for name, v in sorted(losses.items(), key=lambda kv: sum(kv[1]) / max(len(kv[1]), 1))
            if isinstance(v, list) and v and all(_finite(x) for x in v)
        ]
        parts.append(
            f"forecast {said.get('metric', 'loss')} (mean of {len(next(iter(losses.values())))} seeds): "
            + ", ".join(shown)
        )
    return parts


def describe_switch(note: Mapping[str, Any]) -> str:
    """``10.35 s  bsp → lb-bsp: predicted 1.15× the samples a second (8,570 →
    9,828); step time since 0.40 s: w6 0.0183 → 0.0506 s (2.76×), ...``."""
    detail = note.get("detail")
    detail = detail if isinstance(detail, Mapping) else {}
    t = note.get("t")
    head = f"{f'{t:.2f}' if _finite(t) else '?'} s  {detail.get('from', '?')} → {detail.get('to', '?')}"
    gain = _gain(detail)
    rates = detail.get("rates")
    if gain is not None:
        head += f": predicted {gain:.2f}× the samples a second"
        if isinstance(rates, Mapping) and detail.get("from") in rates and detail.get("to") in rates:
            head += f" ({_fmt_rate(rates[detail['from']])} → {_fmt_rate(rates[detail['to']])})"
    return "; ".join([head, *_cause(detail, t)])


def run_switches(run: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The run's ``switch`` notes, in order."""
    notes = run.get("policy_notes")
    if not isinstance(notes, list):
        return []
    return [n for n in notes if isinstance(n, Mapping) and n.get("what") == "switch"]


def run_candidates(run: Mapping[str, Any]) -> str:
    """What the run's last ``candidates`` note says it chose among and by
    what (``among bsp, lb-bsp, backup, by measured samples a second ...``);
    "" without one. (A driver that cannot forecast narrows auto's set: asp and
    ssp leave it, and auto says so in a second note.)"""
    notes = run.get("policy_notes")
    for n in reversed(notes) if isinstance(notes, list) else []:  # (the last: a set narrowed midway, as it ended)
        detail = n.get("detail") if isinstance(n, Mapping) else None
        if n.get("what") == "candidates" and isinstance(detail, Mapping) and isinstance(detail.get("candidates"), list):
            among = ", ".join(str(c) for c in detail["candidates"])
            held = f"; {detail['held']}" if isinstance(detail.get("held"), str) else ""
            return f"among {among}, by {detail.get('by', '?')}{held}"
    return ""


def switch_lines(runs: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[str]]]:
    """Per run with switch notes or a ``candidates`` note: its heading
    (``auto: 1 switch of policy``, and what it chose among) and one line per
    switch (:func:`describe_switch`)."""
    out = []
    for run in runs:
        switches, among = run_switches(run), run_candidates(run)
        if switches or among:
            n = len(switches)
            heading = f"{run.get('label', '?')}: {n or 'no'} switch{'' if n == 1 else 'es'} of policy"
            out.append((heading + (f" ({among})" if among else ""), [describe_switch(s) for s in switches]))
    return out
