"""The data that flows between the rollout stages: Task -> Group(Samples) -> Batch.

Plain dataclasses so every stage (Generate, Filter, Control, Replay) and the trainer can be
swapped independently; no stage needs another's internals to read or produce these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Task:
    """One verifiable task: the user message the solver sees and what its verifier needs."""

    prompt: str
    answer: str
    family: str
    level: int
    uid: str
    meta: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)


@dataclass
class Sample:
    """One completion of a task, with the token ids and sampling log-probs it was drawn with."""

    text: str
    token_ids: list[int]
    logprobs: list[float]
    finished: bool  # ended with an EOS token (False: cut at the length limit)
    reward: float | None = None
    policy_version: int = 0


@dataclass
class Group:
    """All samples of one task; GRPO-style algorithms normalise rewards within a group."""

    task: Task
    prompt_ids: list[int]
    samples: list[Sample]
    dropped_by: str | None = None  # name of the filter that removed this group, if any

    @property
    def kept(self) -> bool:
        return self.dropped_by is None

    @property
    def rewards(self) -> list[float]:
        return [s.reward if s.reward is not None else 0.0 for s in self.samples]

    @property
    def num_completion_tokens(self) -> int:
        return sum(len(s.token_ids) for s in self.samples)
