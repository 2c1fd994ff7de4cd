"""A value model: (task prompt, partial response) -> expected final reward in [0, 1].

ReST-RL's VM-MCTS trains it on node values that tree search measured with test-scored rollouts, so
it needs no annotation. The body is a causal LM's decoder (by default the trained policy's own
weights), cut to its lowest ``depth`` share of layers; the scalar head reads the mean hidden state there over
the response, standardised with the training set's statistics, and is trained with binary cross-entropy against
the soft targets. (Mid-depth states rank better than the last layer's: bench/value_depth.py cross-validates the
choice on training problems' value targets; 0.6 of the embedded model's depth also runs 1.75 times faster.) (On
held-out problems of the ReST-RL bench the response mean ranked correct above wrong partial
programs far better than the last token's state: AUC 0.97 vs 0.59, standardised, 62 test nodes.) By default the
body stays frozen (``body="frozen"``) and its features are computed once, which makes training a matter of seconds
on a CPU; with ``body="lora"`` the head, once fit alone, goes on training with LoRA adapters on the body (merged
into the saved body), with ``body="full"`` with all of the body (the paper's setting, for GPUs).

Outside training, a prompt's attention state is computed once and kept (``PROMPT_STATES`` prompts, the most recently
used): search asks for the value of many partial responses to the same problem, each call a line longer, and a
process reward for every step of every answer, so each pair runs only its response from the kept state.
"""

from __future__ import annotations

import json
import random
from collections import OrderedDict, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import DynamicCache
from transformers.utils import logging

from autotelic.backends.batching import left_pad, right_pad
from autotelic.backends.embedded import ModelFileError
from autotelic.backends.hf import encode_chat
from autotelic.backends.model_dir import resolve_model_dir
from autotelic.config.sections import LORA_TARGETS

HEAD_FILE = "value_head.pt"
META_FILE = "value_model.json"
PROMPT_STATES = 128  # prompts whose attention state is kept between calls: about 10 MB each for the embedded model


def value_model_problem(directory: Path) -> str | None:
    """What keeps ``directory`` from being loaded as a value model, found from its files; None when it is one."""
    if (directory / META_FILE).is_file():
        return None
    return (f"not a value model directory (no {META_FILE}); train one with `autotelic value RUN_DIR` (or "
            "value.enabled=true) and name its value_model directory")


class ValueHead(torch.nn.Module):
    """Standardised features -> one logit; the statistics are buffers, saved with the weights."""

    def __init__(self, width: int):
        super().__init__()
        self.register_buffer("feature_mean", torch.zeros(width))
        self.register_buffer("feature_std", torch.ones(width))
        self.linear = torch.nn.Linear(width, 1)

    def set_statistics(self, features: torch.Tensor) -> None:
        self.feature_mean.copy_(features.mean(0))
        self.feature_std.copy_(features.std(0).nan_to_num(1.0) + 1e-6)

    def forward(self, features: torch.Tensor) -> torch.Tensor:  # (N, D) -> (N,)
        return self.linear((features - self.feature_mean) / self.feature_std).squeeze(-1)


@dataclass(frozen=True)
class ValueExample:
    prompt: str  # the task's user message
    response: str  # a partial (or finished) response
    target: float  # expected reward from there, in [0, 1]
    weight: float = 1.0  # e.g. the node's visit count: better-measured targets count more


BODIES = ("frozen", "lora", "full")


def lower_layers(config: Any, depth: float) -> Any:
    """``config`` with only the lowest ``depth`` share of its decoder layers (at least one): the body is loaded
    without the rest, and the head reads the residual stream there (through the final norm)."""
    kept = max(1, round(depth * config.num_hidden_layers))
    layer_types = getattr(config, "layer_types", None)  # per-layer attention kinds, where the architecture has them
    if layer_types is not None:
        config.layer_types = layer_types[:kept]
    config.num_hidden_layers = kept
    return config


class ValueModel:
    def __init__(self, body_path: str | Path | None = None, body: str = "frozen", system_prompt: str | None = None,
                 lora_rank: int = 8, depth: float = 1.0):
        from transformers import AutoConfig, AutoModel, AutoTokenizer

        if body not in BODIES:
            raise ValueError(f"value-model body must be one of {', '.join(BODIES)}, got {body!r}")
        if not 0.0 < depth <= 1.0:
            raise ValueError(f"value-model depth is the share of the body's layers it keeps, in (0, 1]; got {depth}")
        self.body_dir = resolve_model_dir(None if body_path is None else str(body_path))
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(self.body_dir)
            config = lower_layers(AutoConfig.from_pretrained(self.body_dir), depth)
            verbosity = logging.get_verbosity()
            logging.set_verbosity_error()  # the load would list every weight of the layers left out
            try:
                self.body = AutoModel.from_pretrained(self.body_dir, config=config, dtype=torch.float32)
            finally:
                logging.set_verbosity(verbosity)
        except Exception as error:
            message = f"cannot load value-model body from {self.body_dir}: {error}"
            raise ModelFileError(message.splitlines()[0]) from error
        self.body.requires_grad_(body == "full")
        if body == "lora":  # adapters on the attention and MLP projections; the base weights stay frozen
            from peft import LoraConfig, get_peft_model

            targets = [t for t in LORA_TARGETS if any(n.endswith(t) for n, _ in self.body.named_modules())]
            self.body = get_peft_model(self.body, LoraConfig(r=lora_rank, lora_alpha=2 * lora_rank,
                                                             target_modules=targets))
        self.train_body = body != "frozen"
        self.body_trained = False  # features computed before then no longer hold
        self.body.train(self.train_body)
        self.body_kind, self.system_prompt, self.depth = body, system_prompt, depth
        self.head = ValueHead(self.body.config.hidden_size)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        # each prompt's keys and values per layer, valid while the body's weights do not change (fit drops them)
        self._prompt_states: OrderedDict[tuple[int, ...], list[tuple[torch.Tensor, torch.Tensor]]] = OrderedDict()

    # ---- features and predictions ------------------------------------------------------------
    def _encode(self, prompt: str, response: str) -> tuple[list[int], int]:
        """Token ids of the chat plus response, and how many of them belong to the prompt."""
        prompt_ids = encode_chat(self.tokenizer, prompt, "", self.system_prompt)
        ids = encode_chat(self.tokenizer, prompt, response, self.system_prompt)
        return ids, len(prompt_ids)

    def features(self, pairs: list[tuple[str, str]], batch_size: int = 16) -> torch.Tensor:
        """(N, D): the mean hidden state over the response tokens."""
        rows = []
        for start in range(0, len(pairs), batch_size):
            encoded = [self._encode(p, r) for p, r in pairs[start:start + batch_size]]
            ids, mask, positions = left_pad([e[0] for e in encoded], self.pad_id)
            hidden = self.body(input_ids=ids, attention_mask=mask, position_ids=positions).last_hidden_state
            width = ids.shape[1]
            response_mask = torch.zeros_like(mask, dtype=hidden.dtype)  # (B, L)
            for row, (seq, prompt_len) in enumerate(encoded):
                first = width - len(seq) + max(0, prompt_len - 1)  # the turn's opening token counts when empty
                response_mask[row, first:] = 1.0
            rows.append((hidden * response_mask[..., None]).sum(1) / response_mask.sum(1, keepdim=True))
        return torch.cat(rows)

    def _prompt_state(self, head: tuple[int, ...]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The body's keys and values over ``head`` (the chat up to the response), computed once and then kept
        (a sliding-window layer keeps its window, all that the response's tokens attend to)."""
        state = self._prompt_states.pop(head, None)
        if state is None:
            cache = self.body(input_ids=torch.tensor([head]), use_cache=True).past_key_values
            state = [(layer.keys, layer.values) for layer in cache.layers]  # each (1, heads, kept, head_dim)
        self._prompt_states[head] = state
        while len(self._prompt_states) > PROMPT_STATES:
            self._prompt_states.popitem(last=False)
        return state

    @torch.no_grad()
    def kept_prompt_features(self, pairs: list[tuple[str, str]], batch_size: int = 16) -> torch.Tensor:
        """``features`` without computing a prompt twice: the pairs of one prompt run their responses (from the
        turn's opening token) in batches from its kept state. No gradients: for predictions and frozen features."""
        encoded = [self._encode(p, r) for p, r in pairs]
        by_head: dict[tuple[int, ...], list[int]] = defaultdict(list)
        for index, (ids, prompt_len) in enumerate(encoded):
            by_head[tuple(ids[:max(1, prompt_len - 1)])].append(index)
        rows = torch.empty(len(pairs), self.body.config.hidden_size)
        for head, indices in by_head.items():
            state = self._prompt_state(head)
            for start in range(0, len(indices), batch_size):
                batch = indices[start:start + batch_size]
                ids, mask = right_pad([encoded[i][0][len(head):] for i in batch], self.pad_id)
                past = DynamicCache(ddp_cache_data=[(keys.expand(len(batch), -1, -1, -1),
                                                     values.expand(len(batch), -1, -1, -1)) for keys, values in state])
                positions = len(head) + torch.arange(ids.shape[1]).expand(len(batch), -1)
                attention = torch.cat([torch.ones(len(batch), len(head), dtype=torch.long), mask.long()], dim=1)
                hidden = self.body(input_ids=ids, attention_mask=attention, position_ids=positions,
                                   past_key_values=past, use_cache=True).last_hidden_state
                weights = mask.to(hidden.dtype)[..., None]
                rows[batch] = (hidden * weights).sum(1) / weights.sum(1)
        return rows

    @torch.no_grad()
    def predict(self, pairs: list[tuple[str, str]], batch_size: int = 16) -> list[float]:
        if not pairs:
            return []
        return torch.sigmoid(self.head(self.kept_prompt_features(pairs, batch_size))).tolist()

    # ---- training ----------------------------------------------------------------------------
    def fit(self, examples: list[ValueExample], epochs: int = 30, lr: float = 1e-3, batch_size: int = 16,
            seed: int = 0, features: torch.Tensor | None = None, body_epochs: int = 2,
            body_lr: float = 1e-4) -> dict[str, float]:
        """A fresh head by binary cross-entropy against soft targets, weighted per example: ``epochs`` passes on the
        body's features as they are, then, for a trained body (lora, full), ``body_epochs`` passes that train the
        body at ``body_lr`` with the head (a linear probe first, then fine-tuning: a fresh head's first gradients
        would disturb the body). ``features``: the examples' ``kept_prompt_features`` under the body's present
        weights, computed once by the caller for several fits (cross-validation). Returns the final losses."""
        if not examples:
            raise ValueError("no value examples to train on (the search found no scored nodes)")
        bad = [e for e in examples if not 0.0 <= e.target <= 1.0]
        if bad:
            raise ValueError(f"value targets must lie in [0, 1]; got {bad[0].target} for {bad[0].response[:40]!r}")
        torch.manual_seed(seed)
        pairs = [(e.prompt, e.response) for e in examples]
        targets = torch.tensor([e.target for e in examples])
        weights = torch.tensor([e.weight for e in examples])
        weights = weights / weights.mean()
        if features is not None and self.body_trained:
            raise ValueError("precomputed features hold for a body before it trains, and this one has trained")
        initial = self.kept_prompt_features(pairs, batch_size) if features is None else features
        self.head = ValueHead(self.body.config.hidden_size)
        self.head.set_statistics(initial)
        rng = random.Random(seed)

        def passes(count: int, optimizer: torch.optim.Optimizer,
                   features_of: Callable[[list[int]], torch.Tensor]) -> float:
            order, loss_value = list(range(len(examples))), 0.0
            for _ in range(count):
                rng.shuffle(order)
                total = 0.0
                for start in range(0, len(order), batch_size):
                    index = order[start:start + batch_size]
                    loss = torch.nn.functional.binary_cross_entropy_with_logits(
                        self.head(features_of(index)), targets[index], weight=weights[index])
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    total += loss.item() * len(index)
                loss_value = total / len(order)
            return loss_value

        head_params = list(self.head.parameters())
        loss_value = passes(epochs, torch.optim.AdamW(head_params, lr=lr, weight_decay=0.01), lambda i: initial[i])
        final = initial
        if self.train_body and body_epochs:
            self._prompt_states.clear()  # the states are of the body before it trains
            body_params = [p for p in self.body.parameters() if p.requires_grad]
            optimizer = torch.optim.AdamW([{"params": head_params, "lr": lr}, {"params": body_params, "lr": body_lr}],
                                          weight_decay=0.01)
            loss_value = passes(body_epochs, optimizer, lambda i: self.features([pairs[k] for k in i], batch_size))
            self.body_trained = True
            final = self.kept_prompt_features(pairs, batch_size)
        with torch.no_grad():
            predicted = torch.sigmoid(self.head(final))
        return {"value/train_loss": loss_value,
                "value/train_mae": float((predicted - targets).abs().mean()),
                "value/examples": float(len(examples))}

    # ---- persistence -------------------------------------------------------------------------
    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        body_path = str(self.body_dir)
        if self.train_body:
            if self.body_kind == "lora":  # the adapters folded into the base weights: a plain model to load
                self.body = self.body.merge_and_unload()
            self.body.save_pretrained(directory / "body")
            self.tokenizer.save_pretrained(directory / "body")
            body_path = str((directory / "body").resolve())
        torch.save(self.head.state_dict(), directory / HEAD_FILE)
        depth = 1.0 if self.train_body else self.depth  # a trained body is saved with only the layers it kept
        (directory / META_FILE).write_text(json.dumps({"body": body_path, "system_prompt": self.system_prompt,
                                                       "depth": depth}))

    @classmethod
    def load(cls, directory: str | Path) -> ValueModel:
        directory = Path(directory)
        problem = value_model_problem(directory)
        if problem is not None:
            raise ModelFileError(f"{directory}: {problem}")
        meta = json.loads((directory / META_FILE).read_text())
        model = cls(meta["body"], system_prompt=meta["system_prompt"], depth=meta.get("depth", 1.0))  # older: all
        model.head.load_state_dict(torch.load(directory / HEAD_FILE, weights_only=True))
        return model
