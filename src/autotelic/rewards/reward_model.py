"""A scalar reward model: a local sequence-classification model with one output (the usual form of RLHF reward
models, e.g. Skywork-Reward or ArmoRM's head) scores each (prompt, response), rendered with its tokenizer's chat
template. eva's informativeness needs graded rewards like these, not a 0/1 check.

The model is frozen and loaded once per process (reward workers load their own); scores are computed in batches
with no gradient, cached by (prompt, response), since the same answers come back (replayed groups, the prompts
eva's curriculum keeps drawing). Raw scores are the model's logit; ``scale: sigmoid`` maps them into (0, 1).
"""

from __future__ import annotations

from typing import Literal

from autotelic.rewards.cache import ScoreCache
from autotelic.types import Task


class RewardModelReward:
    name = "reward_model"

    def __init__(self, model: str, batch_size: int = 8, max_length: int = 1024,
                 scale: Literal["raw", "sigmoid"] = "raw", cache_size: int = 4096):
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        if scale not in ("raw", "sigmoid"):
            raise ValueError(f"reward_model option scale must be raw or sigmoid, got {scale!r}")
        self.tokenizer = AutoTokenizer.from_pretrained(model, truncation_side="left")  # keep the response's end
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForSequenceClassification.from_pretrained(model, dtype=torch.float32).eval()
        if self.model.config.num_labels != 1:
            raise ValueError(f"reward_model {model} has {self.model.config.num_labels} outputs; a reward model "
                             "has one (num_labels=1)")
        self.model.config.pad_token_id = self.tokenizer.pad_token_id  # where each sequence's score is read
        self.batch_size, self.max_length, self.scale = batch_size, max_length, scale
        self.cache = ScoreCache(cache_size)

    def render(self, prompt: str, response: str) -> str:
        if self.tokenizer.chat_template:
            return self.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}], tokenize=False)
        return f"{prompt}\n\n{response}"

    def scores(self, pairs: list[tuple[str, str]]) -> list[float]:
        """Each (prompt, response)'s score; the ones not cached are computed in batches."""
        return self.cache.scores(pairs, self._compute)

    def _compute(self, pairs: list[tuple[str, str]]) -> list[float]:
        import torch

        found: list[float] = []
        for start in range(0, len(pairs), self.batch_size):
            batch = pairs[start:start + self.batch_size]
            encoded = self.tokenizer([self.render(*pair) for pair in batch], return_tensors="pt", padding=True,
                                     truncation=True, max_length=self.max_length, add_special_tokens=False)
            with torch.no_grad():
                logits = self.model(**encoded).logits[:, 0]
            found += (torch.sigmoid(logits) if self.scale == "sigmoid" else logits).tolist()
        return found

    def __call__(self, task: Task, completions: list[str]) -> list[float]:
        return self.scores([(task.prompt, task.full_response(completion)) for completion in completions])
