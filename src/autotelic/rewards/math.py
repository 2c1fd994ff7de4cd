"""Math answers checked by symbolic equivalence (math-verify): 1/2, 0.5 and \\boxed{\\frac{1}{2}} agree.

math-verify bounds parsing and comparison with ``signal.alarm``, which Python allows only in the
main thread. Elsewhere (a rollout worker thread) we call it without timeouts rather than have it
raise, so there a pathological expression (say 2^{2^{100}}) can stall that thread; the main thread
keeps the guard.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import sympy
from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

from autotelic.types import Task

# Boxed answers, LaTeX (with or without $...$) and plain numbers/expressions.
_EXTRACTION = (LatexExtractionConfig(), ExprExtractionConfig())


def _timeout(seconds: int) -> int | None:
    return seconds if threading.current_thread() is threading.main_thread() else None


def parse_prediction(text: str, timeout_seconds: int = 5) -> list[Any]:
    """math-verify's parse of a completion: [sympy expression, matched string], or [] if none."""
    return parse(text, extraction_config=_EXTRACTION, parsing_timeout=_timeout(timeout_seconds))


def parse_gold(answer: str, timeout_seconds: int = 5) -> list[Any]:
    """A reference answer, read as LaTeX first: bare "x^2 + 1" or "\\sqrt{2}" only parse that way."""
    timeout = _timeout(timeout_seconds)
    return (parse(f"\\boxed{{{answer}}}", extraction_config=_EXTRACTION, parsing_timeout=timeout)
            or parse(answer, extraction_config=_EXTRACTION, parsing_timeout=timeout))


def extract_answer(text: str) -> str | None:
    """A canonical string for the answer in ``text`` (None if none), so equal answers compare equal.

    Decimals become exact fractions (0.5 and \\frac{1}{2} both give "1/2") and "x = 2" gives "2".
    Nothing is simplified further: evaluating arbitrary policy output can take unbounded time.
    """
    parsed = parse_prediction(text)
    if not parsed:
        return None
    answer = parsed[0]
    if isinstance(answer, sympy.Eq) and isinstance(answer.lhs, sympy.Symbol):
        answer = answer.rhs
    if isinstance(answer, sympy.Float):
        answer = sympy.nsimplify(answer, rational=True)
    return str(answer).strip() or None


@dataclass
class MathVerifyReward:
    """1.0 when the completion's answer is mathematically equal to ``task.answer``, else 0.0.

    A reference answer that does not parse at all makes the whole group nan (unscorable).
    """

    timeout_seconds: int = 5
    """Per parse and per comparison; applies in the main thread only (see the module note)."""
    name: str = field(default="math_verify", init=False)

    def __call__(self, task: Task, completions: list[str]) -> list[float]:
        gold = parse_gold(task.answer, self.timeout_seconds)
        if not gold:
            return [float("nan")] * len(completions)
        timeout = _timeout(self.timeout_seconds)
        scores = []
        for completion in completions:
            prediction = parse_prediction(completion, self.timeout_seconds)
            scores.append(float(bool(prediction) and verify(gold, prediction, timeout_seconds=timeout)))
        return scores
