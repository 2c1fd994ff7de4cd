"""LLM-as-judge: a local model grades each completion against a rubric.

Any ``PolicyBackend`` can judge, the policy being trained included. The judge only generates
(greedily, so a grade does not depend on sampling luck); it never steps the backend's optimizer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from autotelic.backends import PolicyBackend
from autotelic.types import Task

DEFAULT_RUBRIC = (
    "Score correctness above all: a response that answers the task correctly scores high, a wrong, "
    "off-topic or empty one scores low. Among correct responses, prefer clear and concise ones."
)

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_SCORE_TAG = re.compile(r"<score>\s*(-?\d+)\s*</score>", re.IGNORECASE)


def judge_message(prompt: str, response: str, rubric: str, low: int, high: int) -> str:
    """The user message the judge sees for one completion."""
    return (
        "You are grading a response to a task.\n\n"
        f"Task:\n{prompt}\n\n"
        f"Response:\n{response}\n\n"
        f"Rubric: {rubric}\n\n"
        f"Reply with only a score from {low} to {high}."
    )


def parse_score(text: str, low: int, high: int) -> float | None:
    """The score in a judge reply: its first number, if within [low, high]; else None.

    Only the first number counts, so "7/10" and "7 out of 10" give 7 and a reply such as "0/10"
    is rejected rather than read as 10. Decimals in range ("7.5") are accepted.
    """
    match = _NUMBER.search(text)
    if match is None:
        return None
    score = float(match.group())
    return score if low <= score <= high else None


def parse_tagged_score(text: str, low: int, high: int) -> int | None:
    """The grade in a reply that reasons first: the integer inside its last ``<score>N</score>`` tag, if within
    [low, high]; else None. Nothing outside a tag is read, so "1. The answer is wrong" is no grade (CoMAS's
    official scorer prompt asks for the tag after a brief explanation)."""
    tags = _SCORE_TAG.findall(text)
    if not tags:
        return None
    grade = int(tags[-1])
    return grade if low <= grade <= high else None


@dataclass
class LLMJudge:
    """Rubric scores from a local model, normalised to [0, 1]; nan where the reply has no score.

    ``calls`` counts completions judged and ``unparsed`` those whose reply held no valid score,
    so ``1 - unparsed / calls`` is the judge's parse rate.
    """

    backend: PolicyBackend
    rubric: str = DEFAULT_RUBRIC
    low: int = 1
    high: int = 10
    max_new_tokens: int = 8
    name: str = "judge"
    response_prefix: str = ""
    """The start of the judge's reply, already written (e.g. "Score:"): a small judge then mostly writes a
    number (greedy SmolLM2-135M graded 4 of 4 trajectories with it, 0 of 4 without)."""
    calls: int = field(default=0, init=False)
    unparsed: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.low >= self.high:
            raise ValueError(f"judge score range needs low < high, got [{self.low}, {self.high}]")

    def messages(self, task: Task, completions: list[str]) -> list[str]:
        return [judge_message(task.prompt, c, self.rubric, self.low, self.high) for c in completions]

    def __call__(self, task: Task, completions: list[str]) -> list[float]:
        if not completions:
            return []
        prompts = [self.backend.encode_prompt(message, self.response_prefix)
                   for message in self.messages(task, completions)]
        groups = self.backend.generate(prompts, 1, self.max_new_tokens, temperature=1.0, greedy=True)
        scores = [parse_score(self.backend.decode(group[0].token_ids), self.low, self.high) for group in groups]
        self.calls += len(scores)
        self.unparsed += sum(score is None for score in scores)
        span = self.high - self.low
        return [float("nan") if score is None else (score - self.low) / span for score in scores]
