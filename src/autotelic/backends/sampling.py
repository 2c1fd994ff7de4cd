"""Generation for the transformers backend, with prefix sharing: each prompt runs once and its KV cache is
repeated for the group's samples; finished samples leave the decoding batch."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch

from autotelic.backends import Completion
from autotelic.backends.batching import left_pad, repeat_index


def sample_token(logprobs: torch.Tensor, top_p: float, generator: torch.Generator) -> torch.Tensor:
    """One token per row by inverse-CDF sampling: B random numbers instead of torch.multinomial's
    B x V exponential draws, which cost more than the decode step's attention on a CPU."""
    probs = logprobs.exp()
    if top_p < 1.0:
        sorted_probs, order = probs.sort(-1, descending=True)
        outside = sorted_probs.cumsum(-1) - sorted_probs > top_p  # keep the smallest nucleus
        sorted_probs = sorted_probs.masked_fill(outside, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    cdf = probs.cumsum(-1)  # (B, V)
    threshold = torch.rand(cdf.shape[0], 1, generator=generator, device=cdf.device) * cdf[:, -1:]
    return torch.searchsorted(cdf, threshold).squeeze(1).clamp(max=cdf.shape[1] - 1)


LOOP_PERIOD = 16  # the longest repeated block, in tokens, that the in-trajectory early stop looks for


def looping(tokens: list[int], repeats: int, max_period: int = LOOP_PERIOD) -> bool:
    """Whether ``tokens`` end with one block of at most ``max_period`` tokens written ``repeats`` times in a row
    (a degenerate loop: a small model that starts one rarely leaves it before the length cap)."""
    for period in range(1, min(max_period, len(tokens) // repeats) + 1):
        block = tokens[-period:]
        if all(tokens[-(k + 1) * period:len(tokens) - k * period] == block for k in range(1, repeats)):
            return True
    return False


@torch.no_grad()
def sample_groups(lm: torch.nn.Module, prompts: list[list[int]], sizes: list[int], max_new_tokens: int, *,
                  pad_id: int, eos_ids: torch.Tensor, generator: torch.Generator, device: torch.device,
                  temperature: float = 1.0, top_p: float = 1.0, greedy: bool = False,
                  stop_token_ids: Sequence[int] = (), stop_repeats: int = 0) -> list[list[Completion]]:
    """sizes[i] completions of prompt i by the causal LM ``lm``, one list per prompt. A completion is
    ``finished`` when it ends with one of ``eos_ids``; it also ends after any of ``stop_token_ids``, and with
    ``stop_repeats`` once it loops (``looping``: then ``looped``, not finished)."""
    rows = repeat_index(sizes).to(device)
    ids, mask, positions = (t.to(device) for t in left_pad(prompts, pad_id))
    out = lm(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1)
    cache = out.past_key_values
    cache.batch_select_indices(rows)  # the prompt ran once; each sample gets its own copy of its cache
    logits = out.logits[:, -1][rows]  # (B, V)
    mask = mask[rows]
    next_position = positions[:, -1][rows] + 1  # (B,)
    total = len(rows)
    tokens: list[list[int]] = [[] for _ in range(total)]
    logps: list[list[float]] = [[] for _ in range(total)]
    entropies: list[list[float]] = [[] for _ in range(total)]
    finished, looped = [False] * total, [False] * total
    active = torch.arange(total)  # decoding-batch row -> sample index, on the CPU (read every step)
    stops = torch.tensor(sorted(stop_token_ids), dtype=torch.long, device=device)
    for step in range(max_new_tokens):
        if not bool(torch.isfinite(logits).all()):
            raise FloatingPointError("the model produced non-finite logits during generation")
        logprobs = torch.log_softmax(logits.float() / (1.0 if greedy else temperature), dim=-1)
        token = logprobs.argmax(-1) if greedy else sample_token(logprobs, top_p, generator)
        token_logprob = logprobs.gather(1, token[:, None]).squeeze(1)
        entropy = -(logprobs.exp() * logprobs).sum(-1)  # where tree rollouts branch
        ended = torch.isin(token, eos_ids)
        done = ended | torch.isin(token, stops)
        for row, (sample, tok, lp, h, is_end) in enumerate(zip(active.tolist(), token.tolist(),
                                                               token_logprob.tolist(), entropy.tolist(),
                                                               ended.tolist())):
            tokens[sample].append(tok)
            logps[sample].append(lp)
            entropies[sample].append(h)
            finished[sample] = is_end
            if stop_repeats and not is_end and looping(tokens[sample], stop_repeats):
                looped[sample] = True
                done[row] = True
        if step == max_new_tokens - 1 or bool(done.all()):
            break
        if bool(done.any()):  # drop finished rows so later steps cost only what is still running
            keep = (~done).nonzero().squeeze(1)
            cache.batch_select_indices(keep)
            mask, next_position, token, active = mask[keep], next_position[keep], token[keep], active[keep.cpu()]
        mask = torch.cat([mask, mask.new_ones(len(active), 1)], dim=1)
        out = lm(input_ids=token[:, None], attention_mask=mask, position_ids=next_position[:, None],
                 past_key_values=cache, use_cache=True)
        logits = out.logits[:, -1]
        next_position = next_position + 1
    completions = [Completion(tokens[i], logps[i], finished[i], entropies[i], looped[i]) for i in range(total)]
    starts = [0, *itertools.accumulate(sizes)]
    return [completions[starts[p]:starts[p + 1]] for p in range(len(prompts))]
