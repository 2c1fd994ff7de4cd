"""The transformers backend's training forward, with prefix sharing: each prompt runs once and its KV cache
is repeated per sample (autograd flows through the repeat, so gradients are exact); the LM head runs on
real completion tokens only, a chunk of tokens at a time when they are many (``LOGIT_CHUNK_TOKENS``). With
``model.gradient_checkpointing`` the completion pass's decoder layers keep only their inputs and are replayed in
backward; they read the prompt's cache without writing it (``PromptCache``), so the replay sees the same cache."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch.utils.checkpoint import checkpoint
from transformers import DynamicCache

from autotelic.backends.batching import left_pad, repeat_index, right_pad


# Rows of (N, V) full-vocabulary logits alive at once when log-probs are trained on: past this many completion
# tokens a micro-batch's log-probs are computed in chunks whose logits are recomputed in backward rather than kept
# (on an H200 the logits of 65536 tokens ran out of 139 GiB; bench/RESULTS.md).
LOGIT_CHUNK_TOKENS = 4096


class PromptCache(DynamicCache):
    """The prompt pass's KV cache, which the completion pass only reads once ``frozen``: a layer's update returns
    the prompt's states with the new ones appended and stores nothing. So a decoder layer that activation
    checkpointing replays in backward (``model.gradient_checkpointing``) sees the cache its forward saw."""

    frozen = False

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.frozen:
            return super().update(key_states, value_states, layer_idx, *args, **kwargs)
        layer = self.layers[layer_idx]
        return torch.cat([layer.keys, key_states], dim=-2), torch.cat([layer.values, value_states], dim=-2)


def checkpoint_completion_layers(lm: torch.nn.Module) -> None:
    """``model.gradient_checkpointing``: transformers' layer checkpointing, told to keep the cache the completion
    pass passes (a frozen ``PromptCache``, which a replay reads unchanged) instead of dropping it."""
    lm.gradient_checkpointing_enable({"use_reentrant": False})
    for layer in lm.get_decoder().layers:
        layer._can_checkpoint_with_cache = True
    # the layers' flags do the checkpointing; the text model's own is read only by vision-language wrappers
    # (Idefics3), which would then refuse generation its KV cache
    lm.get_decoder().gradient_checkpointing = False


@contextmanager
def layers_not_checkpointed(body: torch.nn.Module) -> Iterator[None]:
    """Decoder layers run whole inside: the prompt pass writes the cache, and a replay would write it again."""
    layers = list(body.layers)
    states = [layer.gradient_checkpointing for layer in layers]
    for layer in layers:
        layer.gradient_checkpointing = False
    try:
        yield
    finally:
        for layer, state in zip(layers, states):
            layer.gradient_checkpointing = state


def completion_hidden(lm: torch.nn.Module, prompts: list[list[int]], completions: list[list[int]], sizes: list[int],
                      pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The last hidden state before every real completion token (N, D), those tokens (N,) and the (B, T) mask."""
    body = lm.get_decoder()
    rows = repeat_index(sizes).to(device)
    ids, mask, positions = (t.to(device) for t in left_pad(prompts, pad_id))
    cache = PromptCache(config=lm.config)
    with layers_not_checkpointed(body):
        # the layers write the cache they are given; use_cache would only ask for a new one
        prompt_out = body(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache,
                          use_cache=False)
    cache.batch_select_indices(rows)
    cache.frozen = True  # the completion pass reads it (its layers may be checkpointed and replayed)
    hidden = prompt_out.last_hidden_state[:, -1:][rows]  # (B, 1, D): predicts token 0
    completion_ids, completion_mask = (t.to(device) for t in right_pad(completions, pad_id))  # (B, T)
    if completion_ids.shape[1] > 1:
        inputs = completion_ids[:, :-1]
        full_mask = torch.cat([mask[rows], completion_mask[:, :-1].long()], dim=1)
        start = positions[:, -1:][rows] + 1
        steps = torch.arange(inputs.shape[1], device=device)[None, :]
        rest = body(input_ids=inputs, attention_mask=full_mask, position_ids=start + steps,
                    past_key_values=cache, use_cache=False).last_hidden_state
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
    # image tokens (ids past the vocabulary, vision.py) are observations, masked out of training: any id will do
    targets = targets.clamp(max=logits.shape[-1] - 1)
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
