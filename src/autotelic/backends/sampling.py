"""Generation for the transformers backend, with prefix sharing: each prompt runs once and its KV cache is
repeated for the group's samples; finished samples leave the decoding batch. Across the turns of multi-turn
episodes (a ``PrefixCache``), each sequence's KV cache is kept when it ends and the next turn's prompt starts
from it, so a turn computes only its new tokens: on the web agent's episodes of about a thousand tokens, the
later turns' prefill shrinks to the reply and observation (tens of tokens)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from autotelic.backends import Completion, PrefixCache
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
# the fewest tokens a loop covers: digits are single tokens, so "7777" or "100000" repeat one token and are answers
LOOP_SPAN = 12


def looping(tokens: list[int], repeats: int, max_period: int = LOOP_PERIOD, min_span: int = LOOP_SPAN) -> bool:
    """Whether ``tokens`` end with one block of at most ``max_period`` tokens written ``repeats`` times in a row,
    and more often for short blocks, until the repeats cover ``min_span`` tokens (a degenerate loop: a small model
    that starts one rarely leaves it before the length cap)."""
    for period in range(1, max_period + 1):
        times = max(repeats, -(-min_span // period))
        if times * period > len(tokens):
            continue
        block = tokens[-period:]
        if all(tokens[-(k + 1) * period:len(tokens) - k * period] == block for k in range(1, times)):
            return True
    return False


@dataclass
class _Kept:
    """One sequence's attention state at the end of a call, pads removed."""

    tokens: torch.Tensor  # (L,) on the CPU: the tokens it covers
    layers: list[tuple[torch.Tensor, torch.Tensor]]  # each layer's (keys, values), (heads, L, head_dim)
    nbytes: int = field(init=False)  # the memory its state holds, for PrefixCache.max_bytes

    def __post_init__(self) -> None:
        self.nbytes = sum(keys.nbytes + values.nbytes for keys, values in self.layers)


def _shared_length(a: torch.Tensor, b: torch.Tensor) -> int:
    n = min(len(a), len(b))
    differ = (a[:n] != b[:n]).nonzero()
    return int(differ[0]) if len(differ) else n


def _starts(prompts: list[list[int]], kept: list[_Kept]) -> list[tuple[_Kept | None, int]]:
    """For each prompt, the kept sequence it shares the longest start with, and that start's length: at most all
    but the prompt's last token, whose logits the prefill must give."""
    found = []
    for prompt in prompts:
        ids, best, length = torch.tensor(prompt), None, 0
        for entry in kept:
            n = min(_shared_length(ids, entry.tokens), len(prompt) - 1)
            if n > length:
                best, length = entry, n
        found.append((best, length))
    return found


def _prefill(lm: torch.nn.Module, prompts: list[list[int]], pad_id: int, device: torch.device,
             starts: list[tuple[_Kept | None, int]]) -> tuple[object, torch.Tensor, torch.Tensor]:
    """The prompts' forward pass, each from its kept start (``starts``) when it has one: (the output, the
    attention mask over the cache, each row's last position). Rows are [pads, kept start][pads, new tokens]:
    the mask hides both runs of pads and the positions count each row's own tokens."""
    reused = max(n for _, n in starts)
    if reused == 0:
        ids, mask, positions = (t.to(device) for t in left_pad(prompts, pad_id))
        out = lm(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1)
        return out, mask, positions[:, -1]
    ids, new_mask, positions = left_pad([prompt[n:] for prompt, (_, n) in zip(prompts, starts)], pad_id)
    positions = positions + torch.tensor([n for _, n in starts])[:, None]
    old_mask = torch.zeros((len(prompts), reused), dtype=new_mask.dtype)
    template = next(entry for entry, _ in starts if entry is not None).layers
    layers = []
    for layer, (keys, values) in enumerate(template):
        shape = (len(prompts), keys.shape[0], reused, keys.shape[2])
        joined = (keys.new_zeros(shape), values.new_zeros(shape))
        for row, (entry, n) in enumerate(starts):
            if entry is not None:
                joined[0][row, :, reused - n:] = entry.layers[layer][0][:, :n]
                joined[1][row, :, reused - n:] = entry.layers[layer][1][:, :n]
        layers.append(joined)
    for row, (_, n) in enumerate(starts):
        old_mask[row, reused - n:] = 1
    mask = torch.cat([old_mask, new_mask], dim=1).to(device)
    positions = positions.to(device)
    out = lm(input_ids=ids.to(device), attention_mask=mask, position_ids=positions,
             past_key_values=DynamicCache(ddp_cache_data=layers), use_cache=True, logits_to_keep=1)
    return out, mask, positions[:, -1]


def _keep(prefixes: PrefixCache, cache: DynamicCache, mask: torch.Tensor, rows: list[int],
          sequences: list[list[int]]) -> None:
    """Keep rows ``rows`` of the decoding batch's cache, each covering ``sequences[i]`` (its prompt and the
    tokens fed so far: a row's last sampled token never ran through the model)."""
    if not all(type(layer) is DynamicLayer for layer in cache.layers):  # sliding windows drop what they pass
        return
    # each row's unpadded positions, in order, found without reading the mask back: a boolean index would wait for
    # the device once per layer and row, which on a GPU costs more than the prefill the cache saves
    real_first = torch.argsort((mask[rows] == 0).to(torch.int8), dim=1, stable=True)
    for i, (row, tokens) in enumerate(zip(rows, sequences)):
        real = real_first[i, :len(tokens)]
        prefixes.entries.append(_Kept(torch.tensor(tokens), [(layer.keys[row].index_select(1, real),
                                                              layer.values[row].index_select(1, real))
                                                             for layer in cache.layers]))
    if prefixes.max_bytes is not None:  # the oldest go first: a later prompt that continued one only computes more
        total, first = sum(entry.nbytes for entry in prefixes.entries), 0
        while total > prefixes.max_bytes and first < len(prefixes.entries):
            total, first = total - prefixes.entries[first].nbytes, first + 1
        del prefixes.entries[:first]


@torch.no_grad()
def sample_groups(lm: torch.nn.Module, prompts: list[list[int]], sizes: list[int], max_new_tokens: int, *,
                  pad_id: int, eos_ids: torch.Tensor, generator: torch.Generator, device: torch.device,
                  temperature: float = 1.0, top_p: float = 1.0, greedy: bool = False,
                  stop_token_ids: Sequence[int] = (), stop_repeats: int = 0,
                  answered: Callable[[list[int]], bool] | None = None,
                  prefixes: PrefixCache | None = None) -> list[list[Completion]]:
    """sizes[i] completions of prompt i by the causal LM ``lm``, one list per prompt. A completion is
    ``finished`` when it ends with one of ``eos_ids``; it also ends after any of ``stop_token_ids``, with
    ``stop_repeats`` once it loops (``looping``: then ``looped``, not finished), and once ``answered`` says its
    tokens hold a complete answer (then ``answered`` and finished). With ``prefixes``, prompts start from the state
    its earlier calls kept, and this call's sequences are kept in place of those they continue."""
    if prefixes is not None and prefixes.owner != id(lm):
        prefixes.entries, prefixes.owner = [], id(lm)
    starts = _starts(prompts, prefixes.entries) if prefixes is not None else [(None, 0)] * len(prompts)
    out, mask, last_position = _prefill(lm, prompts, pad_id, device, starts)
    if prefixes is not None:  # the sequences these prompts continued are superseded by what this call keeps
        used = {id(entry) for entry, _ in starts}
        prefixes.entries = [entry for entry in prefixes.entries if id(entry) not in used]
        prefixes.reused_tokens += sum(n for _, n in starts)
    rows = repeat_index(sizes).to(device)
    cache = out.past_key_values
    cache.batch_select_indices(rows)  # the prompt ran once; each sample gets its own copy of its cache
    logits = out.logits[:, -1][rows]  # (B, V)
    mask = mask[rows]
    next_position = last_position[rows] + 1  # (B,)
    total = len(rows)
    prompt_of = rows.tolist()
    tokens: list[list[int]] = [[] for _ in range(total)]
    logps: list[list[float]] = [[] for _ in range(total)]
    entropies: list[list[float]] = [[] for _ in range(total)]
    finished, looped, complete = [False] * total, [False] * total, [False] * total
    active = torch.arange(total)  # decoding-batch row -> sample index, on the CPU (read every step)

    def fed(sample: int) -> list[int]:  # what a sample's cache covers: its last sampled token never ran
        return prompts[prompt_of[sample]] + tokens[sample][:-1]

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
            elif answered is not None and not is_end and answered(tokens[sample]):
                finished[sample] = complete[sample] = True
                done[row] = True
        if step == max_new_tokens - 1 or bool(done.all()):
            break
        if bool(done.any()):  # drop finished rows so later steps cost only what is still running
            if prefixes is not None:
                ended_rows = done.nonzero().squeeze(1).tolist()
                _keep(prefixes, cache, mask, ended_rows, [fed(i) for i in active[ended_rows].tolist()])
            keep = (~done).nonzero().squeeze(1)
            cache.batch_select_indices(keep)
            mask, next_position, token, active = mask[keep], next_position[keep], token[keep], active[keep.cpu()]
        mask = torch.cat([mask, mask.new_ones(len(active), 1)], dim=1)
        out = lm(input_ids=token[:, None], attention_mask=mask, position_ids=next_position[:, None],
                 past_key_values=cache, use_cache=True)
        logits = out.logits[:, -1]
        next_position = next_position + 1
    if prefixes is not None:
        _keep(prefixes, cache, mask, list(range(len(active))), [fed(i) for i in active.tolist()])
    completions = [Completion(tokens[i], logps[i], finished[i], entropies[i], looped[i], complete[i])
                   for i in range(total)]
    starts = [0, *itertools.accumulate(sizes)]
    return [completions[starts[p]:starts[p + 1]] for p in range(len(prompts))]
