"""Math answers checked by symbolic equivalence (math-verify): 1/2, 0.5 and \\boxed{\\frac{1}{2}} agree.

Parsing (and why timeouts hold only in the main thread) is ``autotelic.text``'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sympy
from math_verify import verify

from autotelic.text import alarm_timeout, parse_gold, parse_prediction
from autotelic.types import Task


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
        timeout = alarm_timeout(self.timeout_seconds)
        scores = []
        for completion in completions:
            prediction = parse_prediction(completion, self.timeout_seconds)
            scores.append(float(bool(prediction) and verify(gold, prediction, timeout_seconds=timeout)))
        return scores
