"""Declared option constraints of a method (:class:`Interval`, tuples of allowed values), checked when the method
is constructed. See docs/heads.md ("Options and constraints")."""
from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass
from typing import Any


class OptionError(ValueError):
    """An unknown option name, a value of the wrong type, or a value outside the option's declared range."""


@dataclass(frozen=True)
class Interval:
    """The finite numbers between ``low`` and ``high`` (``None``: unbounded side); ``closed``: ``"both"``,
    ``"left"``, ``"right"`` or ``"neither"`` bound belongs to it."""

    low: float | None = None
    high: float | None = None
    closed: str = "both"

    def __post_init__(self) -> None:
        if self.closed not in ("both", "left", "right", "neither"):
            raise ValueError(f"Interval.closed must be both, left, right or neither, got {self.closed!r}")

    def __contains__(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return False  # NaN and +-inf are never an option's value
        if self.low is not None:
            if value < self.low or (value == self.low and self.closed in ("right", "neither")):
                return False
        if self.high is not None:
            if value > self.high or (value == self.high and self.closed in ("left", "neither")):
                return False
        return True

    def __str__(self) -> str:
        lo_in, hi_in = self.closed in ("both", "left"), self.closed in ("both", "right")
        if self.high is None and self.low is not None:
            return f"{'>=' if lo_in else '>'} {self.low:g}"
        if self.low is None and self.high is not None:
            return f"{'<=' if hi_in else '<'} {self.high:g}"
        if self.low is None:
            return "a number"
        return f"in {'[' if lo_in else '('}{self.low:g}, {self.high:g}{']' if hi_in else ')'}"

    def outside(self, integer: bool) -> list[float]:
        """Values just outside the interval: next to each bound, and NaN and +-inf for a float option."""
        step = 1 if integer else 1e-9
        out: list[float] = []
        if self.low is not None:
            out.append(self.low - step if self.closed in ("both", "left") else self.low)
        if self.high is not None:
            out.append(self.high + step if self.closed in ("both", "right") else self.high)
        if not integer:
            out += [float("nan"), float("inf"), float("-inf")]
        return out


Constraint = "Interval | tuple"


def check_constraints(method: str, options: dict[str, Any], constraints: dict[str, Any]) -> None:
    """Check ``options`` against ``constraints`` (``{option: Interval | tuple}``).

    Raises:
        OptionError: a value outside its interval, or not one of its allowed values; names method, option, range.
    """
    for key, rule in constraints.items():
        if key not in options:
            raise OptionError(f"{method}: constraint declared for unknown option {key!r}")
        value = options[key]
        if isinstance(rule, Interval):
            if value not in rule:
                raise OptionError(f"{method}: option {key} must be {rule}, got {value!r}")
        elif value not in tuple(rule):
            raise OptionError(f"{method}: option {key} must be one of {tuple(rule)}, got {value!r}")


def merge_options(kind: str, name: str, defaults: dict[str, Any], options: dict[str, Any],
                  constraints: dict[str, Any]) -> dict[str, Any]:
    """``defaults`` updated by ``options``, each coerced to its default's type (a CLI string parsed as JSON) and
    checked against ``constraints``; what a method's or a repair's constructor stores. ``kind`` (``method``,
    ``repair``) and ``name`` go into the messages.

    Raises:
        OptionError: an unknown option (the message lists the known ones), a wrong type, a value outside its
            constraint, or options that are not JSON-serialisable.
    """
    unknown = sorted(set(options) - set(defaults))
    if unknown:
        known = ", ".join(sorted(defaults)) or "(none)"
        raise OptionError(f"unknown option(s) {unknown} for {kind} '{name}'; known options: {known}")
    merged = copy.deepcopy(dict(defaults))
    for key, value in options.items():
        merged[key] = _coerce(kind, name, key, value, defaults[key])
    check_constraints(name, merged, constraints)
    try:
        json.dumps(merged)  # options go into every record and the config hash
    except TypeError as exc:
        raise OptionError(f"{kind} '{name}': options must be JSON-serialisable ({exc})") from exc
    return merged


def _coerce(kind: str, name: str, key: str, value: Any, default: Any) -> Any:
    """``value`` as the type of ``default`` (an int passes for a float; a CLI string is parsed as JSON)."""
    if default is None or value is None:
        return value
    target = type(default)
    if isinstance(value, str) and target is not str:
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise OptionError(
                f"option '{key}' of {kind} '{name}': cannot parse {value!r} as {target.__name__}"
            ) from exc
    if target is bool:
        if isinstance(value, bool):
            return value
    elif target is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif target is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif isinstance(value, target):
        return value
    raise OptionError(
        f"option '{key}' of {kind} '{name}' expects {target.__name__} (default {default!r}), got {value!r}"
    )
