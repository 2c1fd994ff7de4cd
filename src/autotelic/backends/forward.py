"""The transformers backend's training forward, with prefix sharing: each prompt runs once and its KV cache
is repeated per sample (autograd flows through the repeat, so gradients are exact); the LM head runs on
real completion tokens only, a chunk of tokens at a time when they are many (``LOGIT_CHUNK_TOKENS``)."""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from autotelic.backends.batching import left_pad, repeat_index, right_pad


# Rows of (N, V) full-vocabulary logits alive at once when log-probs are trained on: past this many completion
# tokens a micro-batch's log-probs are computed in chunks whose logits are recomputed in backward rather than kept
# (on an H200 the logits of 65536 tokens ran out of 139 GiB; bench/RESULTS.md).
LOGIT_CHUNK_TOKENS = 4096


def completion_hidden(lm: torch.nn.Module, prompts: list[list[int]], completions: list[list[int]], sizes: list[int],
                      pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The last hidden state before every real completion token (N, D), those tokens (N,) and the (B, T) mask."""
    body = lm.get_decoder()
    rows = repeat_index(sizes).to(device)
    ids, mask, positions = (t.to(device) for t in left_pad(prompts, pad_id))
    prompt_out = body(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
    cache = prompt_out.past_key_values
    cache.batch_select_indices(rows)
    hidden = prompt_out.last_hidden_state[:, -1:][rows]  # (B, 1, D): predicts token 0
    completion_ids, completion_mask = (t.to(device) for t in right_pad(completions, pad_id))  # (B, T)
    if completion_ids.shape[1] > 1:
        inputs = completion_ids[:, :-1]
        full_mask = torch.cat([mask[rows], completion_mask[:, :-1].long()], dim=1)
        start = positions[:, -1:][rows] + 1
        steps = torch.arange(inputs.shape[1], device=device)[None, :]
        rest = body(input_ids=inputs, attention_mask=full_mask, position_ids=start + steps,
                    past_key_values=cache, use_cache=True).last_hidden_state
        hidden = torch.cat([hidden, rest], dim=1)  # (B, T, D)
    # the LM head runs on real completion tokens only
    return hidden[completion_mask], completion_ids[completion_mask], completion_mask


def head_logits(head: torch.nn.Module, hidden: torch.Tensor, temperature: float) -> torch.Tensor:
    """fp32 logits (N, V) of hidden states (N, D) at ``temperature``."""
    if head.bias is None:  # head(h) / T == head(h / T): scale D numbers per token, not V
        return head(hidden / temperature).float()
    return head(hidden).float() / temperature


def completion_logits(lm: torch.nn.Module, prompts: list[list[int]], completions: list[list[int]], sizes: list[int],
                      temperature: float, pad_id: int, device: torch.device,
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Next-token logits at every real completion token (N, V), those tokens (N,) and the (B, T) mask."""
    hidden, targets, completion_mask = completion_hidden(lm, prompts, completions, sizes, pad_id, device)
    return head_logits(lm.get_output_embeddings(), hidden, temperature), targets, completion_mask


def _target_logprobs(head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor,
                     temperature: float) -> torch.Tensor:
    logits = head_logits(head, hidden, temperature)
    return logits.gather(1, targets[:, None]).squeeze(1) - torch.logsumexp(logits, dim=-1)


def completion_logprobs(lm: torch.nn.Module, prompts: list[list[int]], completions: list[list[int]],
                        sizes: list[int], temperature: float, pad_id: int, device: torch.device,
                        chunk_tokens: int = LOGIT_CHUNK_TOKENS) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs of each completion token, (B, T) with B = sum(sizes), and the (B, T) mask."""
    hidden, targets, completion_mask = completion_hidden(lm, prompts, completions, sizes, pad_id, device)
    head = lm.get_output_embeddings()
    if torch.is_grad_enabled() and len(targets) > chunk_tokens:
        token_logprobs = torch.cat([
            checkpoint(_target_logprobs, head, hidden[i:i + chunk_tokens], targets[i:i + chunk_tokens], temperature,
                       use_reentrant=False)
            for i in range(0, len(targets), chunk_tokens)])
    else:
        token_logprobs = _target_logprobs(head, hidden, targets, temperature)
    logprobs = torch.zeros(completion_mask.shape, dtype=token_logprobs.dtype, device=completion_mask.device)
    logprobs = logprobs.masked_scatter(completion_mask, token_logprobs)
    return logprobs, completion_mask
