"""Scores of (prompt, response) pairs kept between calls: model-backed rewards see the same pairs again (replayed
groups, the prompts a pool keeps drawing, the shared prefixes of a group's answers)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

Pair = tuple[str, str]


class ScoreCache:
    """The newest ``size`` scores; ``scores(pairs, compute)`` computes only the pairs it lacks, in one call."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.kept: OrderedDict[Pair, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self.kept)

    def scores(self, pairs: list[Pair], compute: Callable[[list[Pair]], list[float]]) -> list[float]:
        missing = list(dict.fromkeys(pair for pair in pairs if pair not in self.kept))
        if missing:
            self.kept.update(zip(missing, compute(missing)))
        found = [self.kept[pair] for pair in pairs]
        for pair in pairs:
            self.kept.move_to_end(pair)
        while len(self.kept) > self.size:
            self.kept.popitem(last=False)
        return found
