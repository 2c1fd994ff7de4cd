"""Reading answers out of text, shared by task families, environments and rewards (which import it; it imports
nothing of ours).

Integers are read strictly: the answer must be the first number in the completion, so the policy is paid for
answering, not for listing candidates and letting a lenient parser pick one. Math answers are math-verify's
parses (imported on first use: integer parsing costs nothing).

math-verify bounds parsing and comparison with ``signal.alarm``, which Python allows only in the main thread.
Elsewhere (a rollout worker thread) we call it without timeouts rather than have it raise, so there a
pathological expression (say 2^{2^{100}}) can stall that thread; the main thread keeps the guard.
"""

from __future__ import annotations

import re
import threading
from functools import cache
from typing import Any

_INTEGER = re.compile(r"-?\d[\d,]*")


def first_integer(text: str) -> int | None:
    """The first integer written in ``text`` (thousands separators allowed), or None."""
    match = _INTEGER.search(text)
    if match is None:
        return None
    digits = match.group().replace(",", "")
    return int(digits) if digits.lstrip("-") else None


def integers(text: str) -> list[int]:
    """Every integer written in ``text``, in order (thousands separators allowed)."""
    return [int(digits) for match in _INTEGER.finditer(text) if (digits := match.group().replace(",", "")).lstrip("-")]


def first_integer_matches(completion: str, answer: str) -> float:
    """1.0 when the first integer of the completion equals the integer ``answer``."""
    return float(first_integer(completion) == int(answer))


def normalise_answer(text: str) -> str:
    """Lower case, without surrounding quotes, a leading $ or trailing punctuation."""
    return re.sub(r"[\s\"'`$.,!]+$|^[\s\"'`$]+", "", text.strip().lower())


def _as_number(text: str) -> float | None:
    try:
        return float(text.replace(",", "").lstrip("$"))
    except ValueError:
        return None


def answer_matches(answer: str, expected: str) -> bool:
    """A free-text answer (a web agent's ``answer("...")``) against the expected one: numbers compare as
    numbers ("$8.5" is "8.50"), text as ``normalise_answer`` leaves it."""
    got, want = normalise_answer(answer), normalise_answer(expected)
    if _as_number(got) is not None and _as_number(want) is not None:
        return abs(_as_number(got) - _as_number(want)) < 1e-6
    return got == want


def alarm_timeout(seconds: int) -> int | None:
    """``seconds`` in the main thread, else None: math-verify's timeouts need ``signal.alarm``."""
    return seconds if threading.current_thread() is threading.main_thread() else None


@cache
def _extraction() -> tuple[Any, ...]:
    """Boxed answers, LaTeX (with or without $...$) and plain numbers/expressions."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig

    return LatexExtractionConfig(), ExprExtractionConfig()


def parse_prediction(text: str, timeout_seconds: int = 5) -> list[Any]:
    """math-verify's parse of a completion: [sympy expression, matched string], or [] if none."""
    from math_verify import parse

    return parse(text, extraction_config=_extraction(), parsing_timeout=alarm_timeout(timeout_seconds))


def parse_gold(answer: str, timeout_seconds: int = 5) -> list[Any]:
    """A reference answer, read as LaTeX first: bare "x^2 + 1" or "\\sqrt{2}" only parse that way."""
    from math_verify import parse

    timeout = alarm_timeout(timeout_seconds)
    return (parse(f"\\boxed{{{answer}}}", extraction_config=_extraction(), parsing_timeout=timeout)
            or parse(answer, extraction_config=_extraction(), parsing_timeout=timeout))
