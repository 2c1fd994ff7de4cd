"""Micro-batches of the policy-gradient update: how a step's groups are cut into forward/backward passes that
bound activation memory (``algorithm.micro_batch_groups``, ``algorithm.micro_batch_tokens``). Advantages come
from whole groups before any cut and gradients accumulate over the passes, so a cut changes no number, only the
memory and the number of passes."""

from __future__ import annotations

import dataclasses

from autotelic.types import Group, Sample


def positions(prompt_ids: list[int], samples: list[Sample]) -> int:
    """What a forward of these samples costs, as the padded prefix-sharing forward runs it: the prompt once plus
    each sample at the longest completion."""
    return len(prompt_ids) + len(samples) * max((len(s.token_ids) for s in samples), default=0)


def pieces(group: Group, max_tokens: int | None) -> list[Group]:
    """The group whole, or where it costs more than ``max_tokens`` positions, runs of its samples (in order) that
    each fit; a sample too long alone is a piece alone."""
    runs: list[list[Sample]] = [[]]
    for sample in group.samples:
        if runs[-1] and max_tokens is not None and positions(group.prompt_ids, [*runs[-1], sample]) > max_tokens:
            runs.append([])
        runs[-1].append(sample)
    return [group] if len(runs) == 1 else [dataclasses.replace(group, samples=run) for run in runs]


def micro_batches(groups: list[Group], max_groups: int, max_tokens: int | None) -> list[list[Group]]:
    """Groups (or pieces of groups) per forward/backward: at most ``max_groups``, and at most ``max_tokens``
    positions, so long multi-turn samples (self-play, web episodes) take several passes instead of one that holds
    every activation at once."""
    batches: list[list[Group]] = []
    used = 0
    for piece in (piece for group in groups for piece in pieces(group, max_tokens)):
        cost = positions(piece.prompt_ids, piece.samples)
        if not batches or len(batches[-1]) == max_groups or (max_tokens is not None and used + cost > max_tokens):
            batches.append([])
            used = 0
        batches[-1].append(piece)
        used += cost
    return batches
