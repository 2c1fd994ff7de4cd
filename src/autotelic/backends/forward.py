"""The transformers backend's training forward, with prefix sharing: each prompt runs once and its KV cache
is repeated per sample (autograd flows through the repeat, so gradients are exact); the LM head runs on
real completion tokens only."""

from __future__ import annotations

import torch

from autotelic.backends.batching import left_pad, repeat_index, right_pad


def completion_logits(lm: torch.nn.Module, prompts: list[list[int]], completions: list[list[int]], sizes: list[int],
                      temperature: float, pad_id: int, device: torch.device,
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Next-token logits at every real completion token (N, V), those tokens (N,) and the (B, T) mask."""
    body, head = lm.get_decoder(), lm.get_output_embeddings()
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
    selected = hidden[completion_mask]  # (N, D): the LM head runs on real completion tokens only
    if head.bias is None:  # head(h) / T == head(h / T): scale D numbers per token, not V
        logits = head(selected / temperature).float()  # (N, V)
    else:
        logits = head(selected).float() / temperature
    return logits, completion_ids[completion_mask], completion_mask


def completion_logprobs(lm: torch.nn.Module, prompts: list[list[int]], completions: list[list[int]],
                        sizes: list[int], temperature: float, pad_id: int, device: torch.device,
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs of each completion token, (B, T) with B = sum(sizes), and the (B, T) mask."""
    logits, targets, completion_mask = completion_logits(lm, prompts, completions, sizes, temperature, pad_id, device)
    token_logprobs = logits.gather(1, targets[:, None]).squeeze(1) - torch.logsumexp(logits, dim=-1)
    logprobs = torch.zeros(completion_mask.shape, dtype=token_logprobs.dtype, device=completion_mask.device)
    logprobs = logprobs.masked_scatter(completion_mask, token_logprobs)
    return logprobs, completion_mask
