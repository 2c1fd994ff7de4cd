"""Policy backends: what generates samples and computes log-probs for the trainer.

``PolicyBackend`` is the seam where engines plug in: the local transformers backend (CPU
default) lives in ``hf.py``; a vLLM backend adds a module here, imported lazily.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch


@dataclass
class Completion:
    token_ids: list[int]
    logprobs: list[float]  # log-prob of each sampled token under the sampling distribution
    finished: bool  # ended with EOS, or once its answer was complete (``answered``), rather than at the length limit
    entropies: list[float] = field(default_factory=list)  # entropy of each step's sampling distribution
    looped: bool = False  # cut early: its last tokens repeated one block (``control.stop_repeats``)
    answered: bool = False  # ended early: its text matched ``control.stop_pattern`` (finished too)


@dataclass(frozen=True)
class DecoderStops:
    """In-trajectory early stops of the transformers decoder: ``repeats`` (control.stop_repeats) ends a sample
    that loops, ``pattern`` (control.stop_pattern, a regular expression) one whose text holds a complete answer."""

    repeats: int = 0
    pattern: str = ""


@dataclass
class PrefixCache:
    """The attention state of a batch of multi-turn sequences, kept from one turn's call to the next: a backend
    that can (the transformers one) starts each prompt from the kept sequence it shares the longest start with,
    so a turn computes its new tokens (the last reply and observation), not the whole episode again. One per
    batch of episodes and model, dropped with the batch; the weights must not change while it lives."""

    entries: list[Any] = field(default_factory=list)  # the backend's own: the latest state of each sequence
    owner: int | None = None  # the model that computed them: another model's calls start afresh
    reused_tokens: int = 0  # prompt tokens read from kept state instead of computed, over every call
    max_bytes: int | None = None  # the newest sequences kept within this much memory: tree search keeps one per
    # expanded node otherwise, each holding its prompt and path again, so memory grows with trees and depth


class PolicyBackend(Protocol):
    version: int  # increments on every optimizer step; recorded on samples for staleness

    def tokenize(self, text: str) -> list[int]: ...

    def encode_prompt(self, user_message: str | list[dict[str, str]], response_prefix: str = "") -> list[int]: ...

    def encode_completion(self, text: str) -> list[int]: ...

    def encode_followup(self, observation: str, after_eos: bool, response_prefix: str = "") -> list[int]: ...

    def decode(self, token_ids: list[int]) -> str: ...

    def generate(
        self, prompts: list[list[int]], n: int | Sequence[int], max_new_tokens: int, temperature: float, top_p: float = 1.0,
        greedy: bool = False, stop_token_ids: Sequence[int] = (), prefixes: PrefixCache | None = None,
    ) -> list[list[Completion]]: ...
    """``stop_token_ids`` end a completion after that token (e.g. line ends for step-wise search);
    ``Completion.finished`` stays True only for end-of-sequence tokens (and, in the transformers decoder, complete
    answers: ``Completion.answered``). ``prefixes``: the prompts continue the sequences of the last call given the
    same cache (the next turn of its episodes); its state may be reused."""

    def token_ids_containing(self, text: str) -> list[int]: ...

    def completion_logprobs(
        self, prompts: list[list[int]], completions: list[list[int]], n: int | Sequence[int], temperature: float,
        reference: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]: ...

    def self_certainty(self, prompts: list[list[int]], completions: list[list[int]], n: int | Sequence[int],
                       ) -> list[float]: ...
    """Each completion's mean per-token KL(uniform || next-token distribution): the policy's confidence."""

    def zero_grad(self) -> None: ...

    def optimizer_step(self) -> dict[str, float]: ...
