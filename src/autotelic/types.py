"""The data that flows between the rollout stages: Task -> Group(Samples) -> Batch.

Plain dataclasses so every stage (Generate, Filter, Control, Replay) and the trainer can be
swapped independently; no stage needs another's internals to read or produce these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

SHARE_PREFIX = "curriculum/share/"  # metrics key of the curriculum's draw share of each arm, after a step


@dataclass(frozen=True)
class Task:
    """One verifiable task: the user message the solver sees and what its verifier needs."""

    prompt: str
    answer: str
    family: str
    level: int
    uid: str
    meta: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    response_prefix: str = ""
    """Text the assistant's reply starts with, already written (ReST-GRPO partial-solution prompts):
    the policy continues it; verifiers score ``response_prefix + completion``."""
    messages: tuple[dict[str, str], ...] | None = field(default=None, hash=False, compare=False)
    """A chat prompt (``{role, content}`` messages, e.g. a system message then the user's) from a user's data
    file; ``prompt`` then holds its text for logs and identity. None: ``prompt`` is the one user message."""

    @property
    def chat(self) -> str | list[dict[str, str]]:
        """What the policy is prompted with: the chat messages, or the user message alone."""
        return list(self.messages) if self.messages is not None else self.prompt

    def full_response(self, completion: str) -> str:
        return self.response_prefix + completion


@dataclass
class Sample:
    """One completion of a task, with the token ids and sampling log-probs it was drawn with."""

    text: str
    token_ids: list[int]
    logprobs: list[float]
    finished: bool  # ended with an EOS token (False: cut at the length limit)
    reward: float | None = None
    policy_version: int = 0
    """Policy version of the oldest token (partial rollouts continue under newer ones)."""
    mask: list[int] | None = None
    """Per token: 1 = the policy's own token, trained on; 0 = environment/tool observation or a
    prefix shared with another sample. None means every token is trained on."""
    parent: int | None = None
    """Tree rollouts: index (within the group) of the sample this one branched from."""
    branch_at: int = 0
    """Tree rollouts: number of leading completion tokens shared with ``parent``."""
    info: dict[str, Any] = field(default_factory=dict)
    """Free-form per-sample facts (turns taken, tool calls, environment info) for logs and rewards."""

    def loss_mask(self) -> list[int]:
        return self.mask if self.mask is not None else [1] * len(self.token_ids)


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
    def agent(self) -> int:
        """Which agent trains on the group (multi-agent modes set ``task.meta["agent"]``; otherwise 0)."""
        return self.task.meta.get("agent", 0)

    @property
    def num_completion_tokens(self) -> int:
        return sum(len(s.token_ids) for s in self.samples)


class Move(NamedTuple):
    """What a two-player game's ``step`` returns (``envs.TwoPlayerGame``) to the self-play generator."""

    player: int  # who moved
    valid: bool  # False: the game rejected the move (a retry, or the loss when retries are spent)
    done: bool
    rewards: dict[int, float] | None  # each player's final game reward once done (+1 win, -1 loss, 0 draw)
    reason: str  # why the game ended, once done
