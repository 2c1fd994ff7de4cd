"""The operator agent (OpAgent) for web episodes at inference: four roles around the environment.

- Planner: reads the task and the first page once and writes a short plan;
- Grounder: turns the plan, the history and the current page into one element action (``click(3)``);
- Reflector: after a step that failed or changed nothing (the environment's own step facts say so),
  explains what went wrong; its note goes into the grounder's next prompt;
- Summarizer: keeps the history short: the last ``keep_recent`` steps stay verbatim and older ones are
  folded into a one-sentence summary.

Each role is a backend: the trained policy, the base model, or any local model (``OperatorConfig.roles``).
Role calls are batched across the episodes that need them and decoded greedily. The agent is a
``RolloutWorker``, so held-out evaluation runs it exactly as it runs the policy alone; its samples hold
the grounder's tokens and the same step facts (``info["steps"]``) that the web rewards read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from autotelic.backends import PolicyBackend
from autotelic.envs.web.env import WebEnv, intro
from autotelic.rollout.generate import episode_sample, record_step, sizes_per_task
from autotelic.types import Group, Sample, Task

ROLES = ("planner", "grounder", "reflector", "summarizer")


@dataclass
class _Episode:
    env: WebEnv
    task: Task
    sample: Sample
    plan: str = ""
    summary: str = ""
    recent: list[str] = field(default_factory=list)  # "action -> outcome", newest last
    reflection: str = ""
    done: bool = False


def planner_prompt(ep: _Episode) -> str:
    return (f"Task: {ep.task.prompt}\n\nCurrent page:\n{ep.env.observation()}\n\nYou plan for a web agent. "
            "Write a short numbered plan (at most 4 steps) for doing the task on this site. Do not act yet.")


def grounder_prompt(ep: _Episode) -> str:
    parts = [intro(ep.task), f"Plan:\n{ep.plan}"]
    if ep.summary:
        parts.append(f"Earlier: {ep.summary}")
    if ep.recent:
        parts.append("Last actions: " + "; ".join(ep.recent))
    if ep.reflection:
        parts.append(f"Note: {ep.reflection}")
    return "\n".join(parts) + f"\n\n{ep.env.observation()}"


def reflector_prompt(ep: _Episode, action: str, outcome: str) -> str:
    return (f"Task: {ep.task.prompt}\nThe web agent did: {action}\nResult: {outcome}\n\nCurrent page:\n"
            f"{ep.env.observation()}\n\nIn one sentence, say what went wrong and what the agent should do next.")


def summarizer_prompt(ep: _Episode, step: str) -> str:
    return (f"Task: {ep.task.prompt}\nProgress so far: {ep.summary or 'nothing yet'}\nThen: {step}\n\n"
            "Rewrite the progress so far as one short sentence.")


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


@dataclass
class OperatorAgent:
    roles: dict[str, PolicyBackend]
    make_env: Callable[[], WebEnv]
    max_turns: int = 6
    plan_tokens: int = 64
    action_tokens: int = 32
    note_tokens: int = 32
    keep_recent: int = 2

    def __post_init__(self) -> None:
        missing = [role for role in ROLES if role not in self.roles]
        if missing:
            raise ValueError(f"the operator agent needs a backend for every role; missing: {', '.join(missing)}")

    def _ask(self, role: str, messages: list[str], tokens: int, prefixes: list[str] | None = None,
             ) -> list[tuple[str, list[int]]]:
        """Greedy replies of ``role`` to ``messages`` (each reply starting with its prefix, already written)."""
        if not messages:
            return []
        backend = self.roles[role]
        prompts = [backend.encode_prompt(m, p) for m, p in zip(messages, prefixes or [""] * len(messages))]
        outputs = backend.generate(prompts, 1, tokens, 1.0, greedy=True)
        return [(backend.decode(c.token_ids), list(c.token_ids)) for (c,) in outputs]

    def generate(self, tasks: list[Task], sizes: int | list[int], max_new_tokens: int) -> list[Group]:
        groups, episodes = [], []
        for task, size in zip(tasks, sizes_per_task(sizes, len(tasks))):
            group = Group(task, [], [])
            for _ in range(size):
                env = self.make_env()
                env.reset(task)
                episode = _Episode(env, task, episode_sample(self.roles["grounder"], roles={}))
                group.samples.append(episode.sample)
                episodes.append(episode)
            groups.append(group)
        for ep, (plan, _) in zip(episodes, self._ask("planner", [planner_prompt(e) for e in episodes],
                                                      self.plan_tokens)):
            ep.plan = plan.strip()
        for _ in range(self.max_turns):
            active = [ep for ep in episodes if not ep.done]
            if not active:
                break
            replies = self._ask("grounder", [grounder_prompt(ep) for ep in active], self.action_tokens,
                                [ep.task.response_prefix for ep in active])
            troubled: list[tuple[_Episode, str, str]] = []
            for ep, (reply, token_ids) in zip(active, replies):
                self._record(ep, reply, token_ids)
                facts = ep.sample.info["steps"][-1]
                action = facts.get("action") or _first_line(reply)[:60]
                outcome = (f"failed: {facts['error']}" if not facts["valid"] else
                           f"now at {facts['url']}" if facts["page_changed"] else "nothing changed")
                ep.recent.append(f"{action} -> {outcome}")
                ep.reflection = ""
                if not ep.done and (not facts["valid"] or not facts["page_changed"]):
                    troubled.append((ep, action, outcome))
            notes = self._ask("reflector", [reflector_prompt(ep, a, o) for ep, a, o in troubled], self.note_tokens)
            for (ep, _, _), (note, _) in zip(troubled, notes):
                ep.reflection = _first_line(note)
                ep.sample.info["roles"].setdefault("reflections", []).append(ep.reflection)
            crowded = [ep for ep in episodes if not ep.done and len(ep.recent) > self.keep_recent]
            summaries = self._ask("summarizer", [summarizer_prompt(ep, ep.recent[0]) for ep in crowded],
                                  self.note_tokens)
            for ep, (summary, _) in zip(crowded, summaries):
                ep.summary, ep.recent = _first_line(summary), ep.recent[1:]
                ep.sample.info["roles"].setdefault("summaries", []).append(ep.summary)
        for ep in episodes:
            ep.sample.info["roles"]["plan"] = ep.plan
            ep.env.close()
        return groups

    def _record(self, ep: _Episode, reply: str, token_ids: list[int]) -> None:
        result = ep.env.step(ep.task.response_prefix + reply)
        sample = ep.sample
        sample.token_ids += token_ids
        sample.logprobs += [0.0] * len(token_ids)
        sample.mask += [1] * len(token_ids)
        sample.text = (sample.text + "\n" + reply.strip()).strip()
        sample.info["turns"] += 1
        record_step(sample, result)
        ep.done = result.done
