"""Self-certainty: the policy's own confidence in a completion as a label-free reward.

Intuitor (Zhao et al. 2025, "Learning to Reason without External Rewards") rewards each completion by
its mean per-token KL divergence from the uniform distribution to the policy's next-token distribution:
peaked (confident) predictions score high. Unlike entropy it is mode-seeking in the right direction,
so it rewards committing to an answer rather than spreading mass. Scored by the policy being trained,
without gradients; values are in nats (0 for a uniform model, up to log(vocabulary size)).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from autotelic.backends import PolicyBackend
from autotelic.types import Task


@dataclass
class SelfCertaintyReward:
    backend: PolicyBackend
    name: str = field(default="self_certainty", init=False)

    def __call__(self, task: Task, completions: list[str]) -> list[float]:
        if not completions:
            return []
        # completions already include any response prefix; the prefix belongs to the prompt side
        prompt = self.backend.encode_prompt(task.chat, task.response_prefix)
        replies = [self.backend.encode_completion(text[len(task.response_prefix):]) for text in completions]
        return self.backend.self_certainty([prompt], replies, len(replies))
