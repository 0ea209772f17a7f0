"""Typed policy parameters: a frozen dataclass per policy, validated in one place.

A policy's parameters are the fields of a ``PolicyConfig`` subclass, each
declared with :func:`param` (its default, help text and bounds)::

    @dataclass(frozen=True, kw_only=True)
    class SSPConfig(PolicyConfig):
        s: int = param(3, help="staleness bound in steps", ge=0)

Everything else derives from that declaration: :func:`parse_config` turns a
spec's ``key=value`` strings into the config (unknown keys, types, choices and
bounds checked, errors naming the policy, the parameter and what it allows);
``PolicyConfig.__post_init__`` checks the same bounds when a config is built in
code; :func:`config_params` lists the parameters for ``hetsync policies``.
Field types are ``int``, ``float`` or ``str``.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass
from typing import Any, TypeVar

from hetsync.errors import BadInput

ParamValue = int | float | str
T = TypeVar("T", int, float, str)
C = TypeVar("C", bound="PolicyConfig")

# Sizes a policy spec may set. An integer parameter counts steps, pushes,
# rounds or lags, and a policy may keep that many values per worker (ZipLine's
# look-ahead R: R predicted pushes of every worker), so besides its own bound
# the product with the worker count is bounded too: memory stays well under a
# gigabyte whatever the spec says.
INT_PARAM_MAX = 10_000
INT_PARAM_TIMES_WORKERS_MAX = 10_000_000

_META_KEY = "hetsync.param"
_TYPES: dict[type, str] = {int: "an integer", float: "a number", str: "text"}


@dataclass(frozen=True, slots=True, kw_only=True)
class _Meta:
    default: ParamValue
    help: str
    ge: float | None
    gt: float | None
    le: float | None
    lt: float | None
    choices: tuple[str, ...]
    quiet: bool
    below_workers: bool


def param(
    default: T,
    *,
    help: str,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    choices: tuple[str, ...] = (),
    quiet: bool = False,
    below_workers: bool = False,
) -> T:
    """A config field: ``default``, one line of ``help``, bounds (``ge``: >=,
    ``gt``: >, ``le``: <=, ``lt``: <) and, for text, the allowed ``choices``
    (matched ignoring case and surrounding spaces). An integer without ``le``
    is bounded by ``INT_PARAM_MAX``. A ``quiet`` parameter (an option most
    runs leave off, such as a staleness remedy) is listed after the others
    and left out of the policy's label while at its default. A
    ``below_workers`` parameter counts workers (receivers per sender, backup
    workers): a value given for it must be less than the run's worker count
    (its default is the policy's to fit to a smaller cluster)."""
    meta = _Meta(
        default=default,
        help=help,
        ge=ge,
        gt=gt,
        le=le,
        lt=lt,
        choices=choices,
        quiet=quiet,
        below_workers=below_workers,
    )
    return dataclasses.field(default=default, metadata={_META_KEY: meta})


@dataclass(frozen=True, slots=True, kw_only=True)
class ParamSpec:
    """One parameter as its config declares it (``hetsync policies`` lists these)."""

    name: str
    type: type  # int, float or str
    default: ParamValue
    help: str
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: tuple[str, ...] = ()
    quiet: bool = False  # listed last; in the label only when set to another value than its default
    below_workers: bool = False  # a value given must be < the run's workers

    @property
    def maximum(self) -> float | None:
        """The inclusive upper bound: ``le``, or ``INT_PARAM_MAX`` for an integer."""
        return self.le if self.le is not None or self.type is not int else INT_PARAM_MAX

    @property
    def allowed(self) -> str:
        """What values are allowed, in words: ``"an integer >= 0"``, ``"one of bsp, ssp"``."""
        if self.choices:
            return "one of " + ", ".join(self.choices)
        what = _TYPES[self.type]
        low = (self.ge, "[", ">=") if self.ge is not None else (self.gt, "(", ">") if self.gt is not None else None
        high = (self.le, "]", "<=") if self.le is not None else (self.lt, ")", "<") if self.lt is not None else None
        fewer = ", < workers" if self.below_workers else ""
        if low and high:
            return f"{what} in {low[1]}{_num(low[0])}, {_num(high[0])}{high[1]}{fewer}"
        if low:
            return f"{what} {low[2]} {_num(low[0])}{fewer}"
        if high:
            return f"{what} {high[2]} {_num(high[0])}{fewer}"
        return what + fewer

    def describe(self) -> str:
        """One line for ``hetsync policies``: ``s=3  staleness bound in steps (an integer >= 0)``."""
        shown = f"{self.name}={self.default}  {self.help}"
        return shown if self.type is str and not self.choices else f"{shown} ({self.allowed})"

    def problem(self, value: object) -> str | None:
        """What is wrong with ``value`` (None: nothing)."""
        if isinstance(value, bool) or not isinstance(value, self.type):
            return f"must be {self.allowed}"
        if self.choices:
            return None if value in self.choices else f"must be {self.allowed}"
        if not isinstance(value, int | float):
            return None
        if isinstance(value, float) and not math.isfinite(value):
            return "must be a finite number"
        if self.ge is not None and not value >= self.ge:
            return f"must be >= {_num(self.ge)}"
        if self.gt is not None and not value > self.gt:
            return f"must be > {_num(self.gt)}"
        maximum = self.maximum
        if maximum is not None and not value <= maximum:
            return f"must be <= {_num(maximum)}"
        if self.lt is not None and not value < self.lt:
            return f"must be < {_num(self.lt)}"
        return None


def _num(bound: float) -> str:
    """A bound as people write it: 0 for 0.0, 0.01 as it is."""
    return str(int(bound)) if float(bound).is_integer() else repr(bound)


@dataclass(frozen=True, kw_only=True)
class PolicyConfig:
    """Base of every policy's config; on its own, the config of a policy
    without parameters. Building one checks every field against its
    declaration (BadInput naming the field); :func:`parse_config` is the
    way from a spec's strings, with the policy's name in its errors."""

    def __post_init__(self) -> None:
        for spec in config_params(type(self)):
            value = getattr(self, spec.name)
            if spec.type is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)  # 1 for a float field reads as 1.0 (labels, arithmetic)
                object.__setattr__(self, spec.name, value)
            problem = spec.problem(value)
            if problem is not None:
                raise BadInput(f"parameter {spec.name!r} {problem}, got {value!r}")


_PARAMS: dict[type[PolicyConfig], tuple[ParamSpec, ...]] = {}


def config_params(config_class: type[PolicyConfig]) -> tuple[ParamSpec, ...]:
    """The parameters ``config_class`` declares, in field order; TypeError for
    a field that was not declared with :func:`param` or has another type."""
    if config_class not in _PARAMS:
        _PARAMS[config_class] = _read_params(config_class)
    return _PARAMS[config_class]


def _read_params(config_class: type[PolicyConfig]) -> tuple[ParamSpec, ...]:
    if "__dataclass_fields__" not in vars(config_class):  # its fields would be silently ignored
        raise TypeError(f"{config_class.__name__}: decorate a policy config with @dataclass(frozen=True, kw_only=True)")
    hints = typing.get_type_hints(config_class)
    out = []
    for f in dataclasses.fields(config_class):
        meta = f.metadata.get(_META_KEY)
        kind = hints[f.name]
        if not isinstance(meta, _Meta) or kind not in _TYPES:
            raise TypeError(
                f"{config_class.__name__}.{f.name}: declare policy parameters as "
                f"'name: int | float | str = param(default, help=...)'"
            )
        bounds = {"ge": meta.ge, "gt": meta.gt, "le": meta.le, "lt": meta.lt}
        out.append(
            ParamSpec(
                name=f.name,
                type=kind,
                default=meta.default,
                help=meta.help,
                choices=meta.choices,
                quiet=meta.quiet,
                below_workers=meta.below_workers,
                **bounds,
            )
        )
    out.sort(key=lambda p: p.quiet)  # (stable) a policy's own parameters first, shared options after
    return tuple(out)


def parse_config(policy: str, config_class: type[C], given: dict[str, object], *, workers: int = 1) -> C:
    """The config of policy ``policy`` from ``given`` (a spec's strings, or
    typed values), defaults for the rest; BadInput naming the policy and the
    parameter otherwise. ``workers`` bounds an integer times the worker count,
    and a value given for a ``below_workers`` parameter."""
    specs = config_params(config_class)
    known = {p.name: p for p in specs}
    for key in given:
        if key not in known:
            allowed = ", ".join(known) or "none"
            raise BadInput(f"policy {policy!r} has no parameter {key!r} (parameters: {allowed})")
    values = {key: _coerce(policy, known[key], raw) for key, raw in given.items()}
    try:
        config = config_class(**values)
    except BadInput as e:
        raise BadInput(f"policy {policy!r} {e}") from None
    for p in specs:
        value = getattr(config, p.name)
        if p.below_workers and p.name in given and value >= workers:
            fix = (
                f"give {p.name} <= {workers - 1} or run more workers"
                if p.problem(workers - 1) is None
                else "run more workers"
            )
            raise BadInput(
                f"policy {policy!r} parameter {p.name!r} must be < workers, got {value} on {workers} workers: {fix}"
            )
        if p.type is int and value * workers > INT_PARAM_TIMES_WORKERS_MAX:
            raise BadInput(
                f"policy {policy!r} parameter {p.name!r} = {value} is too large for {workers} workers: "
                f"{p.name} × workers must be <= {INT_PARAM_TIMES_WORKERS_MAX} (the policy may keep "
                f"{p.name} values per worker), so {p.name} <= {INT_PARAM_TIMES_WORKERS_MAX // workers} here"
            )
    return config


def _coerce(policy: str, p: ParamSpec, raw: object) -> ParamValue:
    """``raw`` (a spec's string, or a value) as the parameter's type."""
    where = f"policy {policy!r} parameter {p.name!r}"
    try:
        value: ParamValue = p.type(raw)
    except (TypeError, ValueError, OverflowError):
        raise BadInput(f"{where} must be {p.allowed}, got {raw!r}") from None
    if p.type is int and isinstance(raw, float) and raw != value:
        raise BadInput(f"{where} must be an integer, got {raw!r}")
    if isinstance(value, str) and p.choices:
        wanted = value.strip().lower()
        value = next((c for c in p.choices if c.lower() == wanted), value)
    return value


def config_values(config: PolicyConfig) -> dict[str, Any]:
    """The config as a plain mapping, parameter name to value, in field order."""
    return {p.name: getattr(config, p.name) for p in config_params(type(config))}
