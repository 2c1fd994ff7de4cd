"""Range checks: each config section's ``problems(key)`` lists what is wrong with it, one line each, built from
these helpers; a problem names the key, the rule it breaks and the value it has."""

from __future__ import annotations

import math
import re
from typing import Any


class ConfigError(ValueError):
    """A configuration problem, reported in one line naming the offending key."""


def rule(ok: bool, key: str, value: Any, requirement: str) -> list[str]:
    """[] where ``ok``, else the problem: the key, the rule it breaks and the value it has."""
    return [] if ok else [f"{key} must {requirement}, got {value!r}"]


def compiles(pattern: str) -> bool:
    """Whether ``pattern`` is a valid Python regular expression."""
    try:
        re.compile(pattern)
    except re.error:
        return False
    return True


def count(key: str, value: int | None, low: int = 1) -> list[str]:
    """A count (None allowed where the field is optional) of at least ``low``."""
    return rule(value is None or value >= low, key, value, f"be at least {low}" if low else "be 0 or more")


def positive(key: str, value: float | None) -> list[str]:
    return rule(value is None or math.isfinite(value) and value > 0, key, value, "be above 0")


def at_least_zero(key: str, value: float | None) -> list[str]:
    return rule(value is None or math.isfinite(value) and value >= 0, key, value, "be 0 or more")


def finite(key: str, value: float) -> list[str]:
    return rule(math.isfinite(value), key, value, "be a finite number")


def fraction(key: str, value: float | None, open_low: bool = False, open_high: bool = False) -> list[str]:
    """A share or probability in [0, 1], with either end excluded where it means nothing."""
    ok = value is None or (0 < value if open_low else 0 <= value) and (value < 1 if open_high else value <= 1)
    return rule(ok, key, value, f"lie in {'(' if open_low else '['}0, 1{')' if open_high else ']'}")


def band(key: str, value: list[float] | None) -> list[str]:
    ok = value is None or len(value) == 2 and 0 <= value[0] <= value[1] <= 1
    return rule(ok, key, value, "be [low, high] within [0, 1]")


def filled(key: str, value: list[Any] | str | None) -> list[str]:
    return [] if value is None or len(value) > 0 else [f"{key} is empty: give a value, or leave it out for the default"]
