"""Guardrails for self-evolution: is the loop still learning from something real?

A run that writes its own tasks or its own labels can collapse without its reward showing it: an evolver
that copies its seeds, a proposer whose outputs stop parsing, a majority vote that agrees on a wrong answer.
Each step this measures, where the step has them:

- ``guard/prompt_novelty``: prompts the run created (eva's evolver, Agent0's proposer: ``task.meta
  ["created_by"]``) first drawn this step, 1 - their highest word 3-gram similarity to the created prompts
  drawn before and to their parent; ``guard/prompt_duplicates`` the share of them that are near-copies;
- ``guard/creator_validity``: the share of the creator's outputs kept (``creator/validity``, which the
  creator reports when it writes);
- ``guard/label_accuracy`` and ``guard/reward_accuracy`` when the training reward is label-free
  (``rewards.LABEL_FREE``) and a task carries a reference answer the reward never read: how often the answer
  the reward favours (the group's best-paid completion) is right, and how often a completion's reward
  (paid >= 0.5 or not) agrees with the family's verifier (TTRL's label and reward accuracy);
- ``guard/completion_diversity``: distinct completions per group, over the group size.

A signal below its threshold for ``patience`` measured steps in a row raises an alarm: ``guard/alarm`` is 1
that step, the progress output gets one line naming the signal and what usually causes it, and the run's
summary and report list every alarm.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from autotelic.config import GuardrailsConfig, RunConfig
from autotelic.rewards import LABEL_FREE
from autotelic.rewards.majority import ngram_jaccard
from autotelic.tasks import UnknownFamilyError, get_family
from autotelic.types import Group

CREATOR_VALIDITY = "creator/validity"
"""The metric a creator (prompt evolver, task proposer) reports: the share of its outputs that became tasks."""
NEAR_COPY = 0.8  # word 3-gram Jaccard at which a created prompt counts as a copy
MEMORY = 512  # created prompts remembered for novelty

# signal -> (metric, threshold field, what usually causes it)
SIGNALS: dict[str, tuple[str, str, str]] = {
    "prompt novelty": ("guard/prompt_novelty", "min_prompt_novelty",
                       "the creator rewrites its seeds into near-copies; a steadier evolver model "
                       "(curriculum.evolve.model) or a higher temperature usually helps"),
    "creator validity": ("guard/creator_validity", "min_creator_validity",
                         "the creator's outputs stop parsing into tasks"),
    "label accuracy": ("guard/label_accuracy", "min_label_accuracy",
                       "the label-free reward favours wrong answers: training now reinforces them"),
    "completion diversity": ("guard/completion_diversity", "min_completion_diversity",
                             "each group's completions are copies of one another: the policy has collapsed"),
}


def normalised(text: str) -> str:
    return " ".join(text.lower().split())


def created_prompts(groups: list[Group]) -> list[tuple[str, str]]:
    """(prompt, parent prompt or "") of each distinct task this step that the run created."""
    found: dict[str, str] = {}
    for group in groups:
        meta = group.task.meta
        if meta.get("created_by"):
            found.setdefault(group.task.prompt, meta.get("parent_prompt", ""))
    return list(found.items())


def completion_diversity(groups: list[Group]) -> float | None:
    sized = [g for g in groups if len(g.samples) > 1]
    if not sized:
        return None
    return sum(len({normalised(s.text) for s in g.samples}) / len(g.samples) for g in sized) / len(sized)


def label_checks(groups: list[Group], limit: int) -> tuple[list[float], list[float]]:
    """(per group: is the best-paid completion right; per completion: does its reward agree with the verifier),
    over at most ``limit`` groups whose task has a reference answer and a family that can check it."""
    labels: list[float] = []
    agreements: list[float] = []
    for group in groups:
        if len(labels) >= limit:
            break
        if not group.task.answer or not group.rewards or len(group.rewards) != len(group.samples):
            continue
        try:
            family = get_family(group.task.family)
        except UnknownFamilyError:  # a task the run made up (a proposer's), or a role's: nothing to check with
            continue
        right = [family.score(group.task, sample.text) >= 1.0 for sample in group.samples]
        best = max(range(len(right)), key=group.rewards.__getitem__)
        labels.append(float(right[best]))
        agreements += [float((reward >= 0.5) == ok) for reward, ok in zip(group.rewards, right)]
    return labels, agreements


@dataclass
class Guardrails:
    config: GuardrailsConfig
    label_free: bool  # the training reward never reads a task's reference answer
    memory: deque[str] = field(default_factory=lambda: deque(maxlen=MEMORY))
    below: dict[str, int] = field(default_factory=dict)  # signal -> measured steps below its threshold in a row
    alarms: list[dict[str, Any]] = field(default_factory=list)
    raised: list[str] = field(default_factory=list)  # the last step's alarm lines, for the progress output

    @classmethod
    def for_run(cls, config: RunConfig) -> Guardrails:
        return cls(config.guardrails, all(spec.name in LABEL_FREE for spec in config.filter.rewards))

    def observe(self, step: int, groups: list[Group], metrics: dict[str, float]) -> None:
        """Adds this step's ``guard/*`` metrics to ``metrics``; the alarms it raised go to ``raised`` (one line
        each) and ``alarms``."""
        self.raised = []
        if not self.config.enabled:
            return
        found = self._measure(groups, metrics)
        for signal, (metric, threshold_field, cause) in SIGNALS.items():
            threshold = getattr(self.config, threshold_field)
            if metric not in found or not threshold:
                continue
            self.below[signal] = self.below.get(signal, 0) + 1 if found[metric] < threshold else 0
            if self.below[signal] == self.config.patience:  # once per spell below
                self.alarms.append({"step": step, "signal": signal, "value": found[metric], "threshold": threshold})
                self.raised.append(f"guardrail alarm at step {step}: {signal} {found[metric]:.2f} < {threshold} "
                                   f"for {self.config.patience} step(s): {cause}")
        metrics.update(found, **{"guard/alarm": float(bool(self.raised))})

    def _measure(self, groups: list[Group], metrics: dict[str, float]) -> dict[str, float]:
        found: dict[str, float] = {}
        seen = {normalised(p) for p in self.memory}
        new = [(prompt, parent) for prompt, parent in created_prompts(groups) if normalised(prompt) not in seen]
        if new:
            similarity = [max((ngram_jaccard(prompt, other) for other in [*self.memory, *([parent] if parent else [])]),
                              default=0.0) for prompt, parent in new]
            found["guard/prompt_novelty"] = 1 - sum(similarity) / len(similarity)
            found["guard/prompt_duplicates"] = sum(s >= NEAR_COPY for s in similarity) / len(similarity)
            self.memory.extend(prompt for prompt, _ in new)
        if CREATOR_VALIDITY in metrics:
            found["guard/creator_validity"] = metrics[CREATOR_VALIDITY]
        if self.label_free:
            labels, agreements = label_checks(groups, self.config.label_groups)
            if labels:
                found["guard/label_accuracy"] = sum(labels) / len(labels)
                found["guard/reward_accuracy"] = sum(agreements) / len(agreements)
        diversity = completion_diversity(groups)
        if diversity is not None:
            found["guard/completion_diversity"] = diversity
        return found

    def state_dict(self) -> dict[str, Any]:
        return {"memory": list(self.memory), "below": dict(self.below), "alarms": list(self.alarms)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.memory = deque(state["memory"], maxlen=MEMORY)
        self.below, self.alarms = dict(state["below"]), list(state["alarms"])
