"""Control: per-step sample and token budgets and the length cap.

``plan`` decides how many tasks to generate before sampling; ``enforce`` applies the
completion-token budget after sampling, dropping whole groups past it (as ``token_budget``).
"""

from __future__ import annotations

from dataclasses import dataclass

from autotelic.types import Group


@dataclass(frozen=True)
class Budget:
    tasks_per_step: int
    group_size: int
    max_new_tokens: int
    max_tokens_per_step: int | None = None

    def plan(self) -> int:
        """Tasks to generate this step: the sample budget, capped so the worst case fits the token budget."""
        if self.max_tokens_per_step is None:
            return self.tasks_per_step
        worst_case_per_task = self.group_size * self.max_new_tokens
        return max(1, min(self.tasks_per_step, self.max_tokens_per_step // worst_case_per_task))

    def enforce(self, groups: list[Group]) -> dict[str, float]:
        """Drop kept groups beyond the token budget; report truncation and tokens spent."""
        spent = 0
        for group in groups:
            spent += group.num_completion_tokens
            if self.max_tokens_per_step is not None and spent > self.max_tokens_per_step and group.kept:
                group.dropped_by = "token_budget"
        samples = [s for g in groups for s in g.samples]
        return {
            "control/completion_tokens": float(spent),
            "control/truncated_fraction": sum(not s.finished for s in samples) / max(1, len(samples)),
            "control/mean_completion_length": spent / max(1, len(samples)),
        }
