"""Label-free rewards: the group's majority answer stands in for the reference answer.

TTRL (Zuo et al. 2025, "TTRL: Test-Time Reinforcement Learning") pays each completion 1 when its
answer agrees with the group's most common answer. Voting alone narrows the policy onto one answer
and one way of writing it; EVOL-RL (Zhou et al. 2025, "Evolving Language Models without Labels")
counters that with a bonus for completions unlike the rest of their group, added here as
``novelty_weight * novelty``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from autotelic.rewards.math import extract_answer
from autotelic.text import first_integer
from autotelic.types import Task

Extractor = Callable[[str], str | None]
Similarity = Callable[[str, str], float]


def default_extract(text: str) -> str | None:
    """The math answer of ``text`` (see ``extract_answer``), else its first integer, else None."""
    answer = extract_answer(text)
    if answer is not None:
        return answer
    integer = first_integer(text)
    return None if integer is None else str(integer)


def majority_answer(answers: list[str | None]) -> tuple[str | None, float]:
    """The most common non-None answer (ties: the one seen first) and its share of ALL answers.

    The share counts unanswered samples too, so it reads as the group's agreement: callers can use
    it to skip groups whose vote is too weak to trust as a label. (None, 0.0) when nothing answered.
    """
    counts = Counter(answer for answer in answers if answer is not None)
    if not counts:
        return None, 0.0
    best = max(counts, key=counts.__getitem__)  # Counter keeps first-seen order; max keeps the first tie
    return best, counts[best] / len(answers)


def word_ngrams(text: str, n: int = 3) -> set[tuple[str, ...]]:
    """Lower-cased word n-grams; a text shorter than n words is one gram of all its words."""
    words = text.lower().split()
    if len(words) < n:
        return {tuple(words)} if words else set()
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


def ngram_jaccard(a: str, b: str) -> float:
    """Jaccard similarity of word 3-grams: cheap, dependency-free; two empty texts are identical."""
    grams_a, grams_b = word_ngrams(a), word_ngrams(b)
    union = grams_a | grams_b
    return len(grams_a & grams_b) / len(union) if union else 1.0


def novelty(completions: list[str], similarity: Similarity = ngram_jaccard) -> list[float]:
    """1 - mean similarity of each completion to the others of its group (0 for a group of one)."""
    n = len(completions)
    if n < 2:
        return [0.0] * n
    sims = [[0.0] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            sims[i][j] = sims[j][i] = similarity(completions[i], completions[j])
    return [1.0 - sum(row) / (n - 1) for row in sims]  # the diagonal is 0, so sum(row) covers others only


@dataclass
class MajorityVoteReward:
    """1 for completions whose extracted answer is the group's majority answer, else 0, plus an
    optional novelty bonus. ``task.answer`` is never read.

    ``similarity`` is any symmetric (text, text) -> [0, 1] function: an embedding cosine, as in
    EVOL-RL, plugs in there; the default is word 3-gram Jaccard.
    """

    extract: Extractor = default_extract
    novelty_weight: float = 0.0
    similarity: Similarity = ngram_jaccard
    name: str = field(default="majority_vote", init=False)

    def __call__(self, task: Task, completions: list[str]) -> list[float]:
        answers = [self.extract(completion) for completion in completions]
        majority, _ = majority_answer(answers)
        rewards = [float(majority is not None and answer == majority) for answer in answers]
        if self.novelty_weight:
            bonus = novelty(completions, self.similarity)
            rewards = [r + self.novelty_weight * b for r, b in zip(rewards, bonus)]
        return rewards
