"""Generate: turn tasks into groups of sampled completions from a policy backend.

``RolloutWorker`` is the seam for distribution: the in-process ``PolicySampler`` here, a Ray
actor wrapping the same call later.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from autotelic.backends import PolicyBackend
from autotelic.types import Group, Sample, Task


class RolloutWorker(Protocol):
    def generate(self, tasks: list[Task], n: int, max_new_tokens: int) -> list[Group]: ...


@dataclass
class PolicySampler:
    """n samples per task, decoded in one batch so prompts share their KV cache."""

    policy: PolicyBackend
    temperature: float = 1.0
    top_p: float = 1.0
    greedy: bool = False

    def generate(self, tasks: list[Task], n: int, max_new_tokens: int) -> list[Group]:
        if not tasks:
            return []
        prompts = [self.policy.encode_prompt(task.prompt) for task in tasks]
        outputs = self.policy.generate(prompts, n, max_new_tokens, self.temperature, self.top_p, greedy=self.greedy)
        return [
            Group(task=task, prompt_ids=prompt, samples=[
                Sample(text=self.policy.decode(c.token_ids), token_ids=c.token_ids, logprobs=c.logprobs,
                       finished=c.finished, policy_version=self.policy.version)
                for c in completions
            ])
            for task, prompt, completions in zip(tasks, prompts, outputs)
        ]
