"""Token batches for the transformers backend: group sizes, each prompt row repeated per sample, padding."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def group_sizes(n: int | Sequence[int], num_prompts: int) -> list[int]:
    sizes = [n] * num_prompts if isinstance(n, int) else list(n)
    if len(sizes) != num_prompts or min(sizes, default=1) < 1:
        raise ValueError(f"group sizes {sizes} do not fit {num_prompts} prompts (each needs at least 1 sample)")
    return sizes


def repeat_index(sizes: list[int]) -> torch.Tensor:
    """Row i of the prompt batch repeated sizes[i] times: [0, 0, 1, 1, 1] for sizes [2, 3]."""
    return torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))


def left_pad(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids, attention_mask, position_ids), each (B, L); positions count real tokens only."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, seq in enumerate(seqs):
        ids[row, width - len(seq):] = torch.tensor(seq)
        mask[row, width - len(seq):] = 1
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    return ids, mask, positions


def right_pad(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(1, max(len(s) for s in seqs))
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.bool)
    for row, seq in enumerate(seqs):
        ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        mask[row, : len(seq)] = True
    return ids, mask
