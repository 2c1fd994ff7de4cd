"""A generation mode outside the package: half of each task's group is sampled at generate.temperature and half
at twice it, so every group holds careful and adventurous answers to compare. A mode is a ``Mode``: a name and
a function from what the run built (``Built``: the config, the sampling policy, the held-out set, the agents) to
a generator with ``generate(tasks, sizes, max_new_tokens) -> list[Group]``; the trainer asks the mode and
knows none by name."""

from __future__ import annotations

from dataclasses import dataclass

from autotelic.backends import PolicyBackend
from autotelic.modes import Built, Mode
from autotelic.rollout.generate import PolicySampler, sizes_per_task
from autotelic.types import Group, Task


@dataclass
class TemperatureLadder:
    policy: PolicyBackend
    temperature: float
    top_p: float

    def generate(self, tasks: list[Task], sizes: int | list[int], max_new_tokens: int) -> list[Group]:
        sizes = sizes_per_task(sizes, len(tasks))
        cool = PolicySampler(self.policy, self.temperature, self.top_p)
        groups = cool.generate(tasks, [size - size // 2 for size in sizes], max_new_tokens)
        hot_tasks = [i for i, size in enumerate(sizes) if size // 2]
        hot = PolicySampler(self.policy, 2 * self.temperature, self.top_p)
        for i, group in zip(hot_tasks, hot.generate([tasks[i] for i in hot_tasks],
                                                    [sizes[i] // 2 for i in hot_tasks], max_new_tokens)):
            groups[i].samples += group.samples
        return groups


def ladder(built: Built) -> TemperatureLadder:
    return TemperatureLadder(built.policy, built.config.generate.temperature, built.config.generate.top_p)


MODE = Mode("temperature_ladder", ladder)
