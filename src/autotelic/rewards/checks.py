"""Shape rewards: a format the answer must follow and a soft cap on length, to add to a correctness reward."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from autotelic.types import Task


@dataclass
class FormatReward:
    """1.0 when ``pattern`` occurs anywhere in the completion (``.`` spans lines), else 0.0."""

    pattern: str
    name: str = "format"

    def __post_init__(self) -> None:
        self._regex = re.compile(self.pattern, re.DOTALL)  # compile once; a bad pattern fails at build time

    def __call__(self, task: Task, completions: list[str]) -> list[float]:
        return [float(self._regex.search(completion) is not None) for completion in completions]


@dataclass
class LengthPenalty:
    """0 up to ``max_chars`` characters, then -(excess / max_chars), never below -1."""

    max_chars: int
    name: str = field(default="length", init=False)

    def __post_init__(self) -> None:
        if self.max_chars <= 0:
            raise ValueError(f"max_chars must be positive, got {self.max_chars}")

    def __call__(self, task: Task, completions: list[str]) -> list[float]:
        return [-min(1.0, max(0, len(c) - self.max_chars) / self.max_chars) for c in completions]
