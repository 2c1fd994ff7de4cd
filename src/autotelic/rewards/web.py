"""OpAgent's hybrid reward for web episodes, as Filter-stage parts that read the trajectory's step facts
(recorded by ``envs/web/env.py`` in ``sample.info["steps"]``):

- ``web_success``: 1 when the task's programmatic check held at the end (database state, final answer);
- ``web_progress``: the rule-based decision tree over every step, plus credit for each progress milestone
  reached (right item in the cart, right field filled), so long episodes earn before the end;
- ``web_judge``: an LLM reads the task and the trajectory and grades completion, action validity and
  efficiency, with no ground truth; a reply without a grade makes the trajectory unusable (nan), and the
  Filter stage discards its group.

These score whole groups of samples (``reads_trajectories``), not reply texts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autotelic.rewards.judge import LLMJudge
from autotelic.types import Group, Sample

WEB_RUBRIC = (
    "Grade the agent's trajectory: did it complete the task (most important), were its actions valid, and "
    "was it efficient (no wasted steps)? An agent that did not finish the task scores low."
)


def steps_of(sample: Sample) -> list[dict[str, Any]]:
    return sample.info.get("steps", [])


def succeeded(sample: Sample) -> bool:
    steps = steps_of(sample)
    return bool(steps and steps[-1].get("success"))


def progress_fraction(sample: Sample) -> float:
    steps = steps_of(sample)
    if not steps or not steps[-1].get("milestones_total"):
        return float(succeeded(sample))
    return steps[-1]["milestones"] / steps[-1]["milestones_total"]


def decision_tree(step: dict[str, Any], penalty: float) -> float:
    """OpAgent's per-step rules: an action that failed to execute -> penalty; the URL changed -> neutral;
    a click landed on an interactive element -> neutral; the page did not change at all -> penalty; the
    step made progress -> neutral; else penalty. Progress, where the paper asks a judge, is rule-based here:
    a milestone of the task reached, or a value the task names typed or chosen."""
    if not step.get("valid"):
        return -penalty
    if step.get("url_changed") or step.get("interactive"):
        return 0.0
    if not step.get("page_changed"):
        return -penalty
    return 0.0 if step.get("new_milestones") or step.get("echoes_task") else -penalty


@dataclass
class WebSuccess:
    name: str = "web_success"
    reads_trajectories: bool = field(default=True, init=False)

    def __call__(self, group: Group) -> list[float]:
        return [float(succeeded(s)) for s in group.samples]


@dataclass
class WebProgress:
    """Per step, the decision tree's penalty (the final answer is left to the outcome rewards); plus
    ``milestone_weight`` x the share of the task's milestones reached."""

    step_penalty: float = 0.1
    milestone_weight: float = 0.5
    name: str = "web_progress"
    reads_trajectories: bool = field(default=True, init=False)

    def __call__(self, group: Group) -> list[float]:
        return [sum(self.turn_values(s)) for s in group.samples]

    def turns(self, group: Group) -> list[list[float]]:
        return [self.turn_values(s) for s in group.samples]

    def turn_values(self, sample: Sample) -> list[float]:
        """Each step's share: its decision-tree value and the milestones it reached; they sum to the reward."""
        steps, reached, values = steps_of(sample), 0, []
        for step in steps:
            value = decision_tree(step, self.step_penalty) if step.get("answer") is None else 0.0
            if step.get("milestones_total"):
                value += self.milestone_weight * (step["milestones"] - reached) / step["milestones_total"]
                reached = step["milestones"]
            values.append(value)
        if values and not steps[-1].get("milestones_total"):  # no milestones: success is the whole progress
            values[-1] += self.milestone_weight * float(succeeded(sample))
        return values


def web_metrics(samples: list[Sample]) -> dict[str, float]:
    """Per-step logs of web episodes: success rate, share of milestones reached, steps the decision tree
    penalises per episode and share of actions that executed."""
    episodes = [s for s in samples if any("success" in step for step in steps_of(s))]
    if not episodes:
        return {}
    steps = [step for s in episodes for step in steps_of(s)]
    count = len(episodes)
    return {"web/success_rate": sum(map(succeeded, episodes)) / count,
            "web/progress": sum(map(progress_fraction, episodes)) / count,
            "web/penalized_steps": sum(decision_tree(step, 1.0) < 0 for step in steps if step.get("answer") is None)
            / count,
            "web/valid_actions": sum(bool(step.get("valid")) for step in steps) / max(1, len(steps))}


def trajectory_text(sample: Sample) -> str:
    """What the judge reads: each action with what became of it, then the final page and answer."""
    lines = []
    for i, step in enumerate(steps_of(sample), 1):
        outcome = f"failed: {step['error']}" if not step.get("valid") else f"now at {step.get('url')}"
        lines.append(f"{i}. {step.get('action') or 'unreadable reply'} -> {outcome}")
    steps = steps_of(sample)
    if steps and steps[-1].get("answer") is not None:
        lines.append(f"Final answer: {steps[-1]['answer']}")
    elif not steps or not steps[-1].get("success"):
        lines.append("The agent stopped without finishing.")
    return "\n".join(lines) or "The agent took no action."


@dataclass
class WebJudge(LLMJudge):
    """The outcome judge: an LLM grades the trajectory against ``rubric`` (0-1; nan when unparsed)."""

    rubric: str = WEB_RUBRIC
    name: str = "web_judge"
    response_prefix: str = "Score:"
    reads_trajectories: bool = field(default=True, init=False)

    def __call__(self, group: Group) -> list[float]:  # type: ignore[override]  # reads samples, not texts
        return super().__call__(group.task, [trajectory_text(s) for s in group.samples])
