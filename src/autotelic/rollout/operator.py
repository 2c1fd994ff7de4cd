"""The operator agent (OpAgent) for web episodes at inference: four roles around the environment, in
OpAgent's order at every step.

- Reflector: from the second step on, reads the last action, its outcome (the environment's own step facts)
  and the page it led to, and says in one sentence whether it helped and what to do next;
- Planner: from the task, the steps so far, the reflection, its previous plan and the current page, writes
  the plan for what remains (every step: the plan follows what actually happened);
- Grounder: turns the plan, the last ``keep_recent`` steps and the current page into one element action
  (``click(3)``);
- Summarizer: once the episode ends, sums it up in one sentence (what was done, whether the task is done).

Each role is a backend: the trained policy, the base model, or any local model (``OperatorConfig.roles``).
Role calls are batched across the episodes that need them and decoded greedily. The agent is a
``RolloutWorker``, so held-out evaluation runs it exactly as it runs the policy alone; its samples hold
the grounder's tokens and the same step facts (``info["steps"]``) that the web rewards read, and the roles'
notes (``info["roles"]``: plans, reflections, summary).
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
    steps: list[str] = field(default_factory=list)  # "action -> outcome", oldest first
    reflection: str = ""
    done: bool = False

    def note(self, role: str, text: str) -> None:
        self.sample.info["roles"].setdefault(role, []).append(text)


def _history(ep: _Episode) -> str:
    return "; ".join(ep.steps) if ep.steps else "nothing yet"


def reflector_prompt(ep: _Episode) -> str:
    return (f"Task: {ep.task.prompt}\nThe web agent did: {ep.steps[-1]}\n\nCurrent page:\n{ep.env.observation()}"
            "\n\nIn one sentence, say whether this step brought the task closer and what the agent should do next.")


def planner_prompt(ep: _Episode) -> str:
    parts = [f"Task: {ep.task.prompt}", f"Done so far: {_history(ep)}"]
    if ep.reflection:
        parts.append(f"Reflection on the last step: {ep.reflection}")
    if ep.plan:
        parts.append(f"Previous plan:\n{ep.plan}")
    return ("\n".join(parts) + f"\n\nCurrent page:\n{ep.env.observation()}\n\nYou plan for a web agent. Write a "
            "short numbered plan (at most 4 steps) for what remains of the task from this page. Do not act yet.")


def grounder_prompt(ep: _Episode, keep_recent: int) -> str:
    parts = [intro(ep.task), f"Plan:\n{ep.plan}"]
    if ep.steps and keep_recent:
        parts.append("Last actions: " + "; ".join(ep.steps[-keep_recent:]))
    return "\n".join(parts) + f"\n\n{ep.env.observation()}"


def summarizer_prompt(ep: _Episode) -> str:
    ending = ("the task is done" if ep.sample.info["steps"] and ep.sample.info["steps"][-1].get("success")
              else "the episode ended")
    return (f"Task: {ep.task.prompt}\nSteps: {_history(ep)}\nThen {ending}.\n\n"
            "In one sentence, sum up what the web agent did and whether it finished the task.")


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _outcome(facts: dict) -> str:
    return (f"failed: {facts['error']}" if not facts["valid"] else
            f"now at {facts['url']}" if facts["page_changed"] else "nothing changed")


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
        for _ in range(self.max_turns):  # reflector -> planner -> grounder, every step
            active = [ep for ep in episodes if not ep.done]
            if not active:
                break
            looked_back = [ep for ep in active if ep.steps]
            for ep, (note, _) in zip(looked_back, self._ask("reflector", [reflector_prompt(ep) for ep in looked_back],
                                                            self.note_tokens)):
                ep.reflection = _first_line(note)
                ep.note("reflections", ep.reflection)
            for ep, (plan, _) in zip(active, self._ask("planner", [planner_prompt(ep) for ep in active],
                                                       self.plan_tokens)):
                ep.plan = plan.strip()
                ep.note("plans", ep.plan)
            replies = self._ask("grounder", [grounder_prompt(ep, self.keep_recent) for ep in active],
                                self.action_tokens, [ep.task.response_prefix for ep in active])
            for ep, (reply, token_ids) in zip(active, replies):
                self._record(ep, reply, token_ids)
                facts = ep.sample.info["steps"][-1]
                ep.steps.append(f"{facts.get('action') or _first_line(reply)[:60]} -> {_outcome(facts)}")
        for ep, (summary, _) in zip(episodes, self._ask("summarizer", [summarizer_prompt(ep) for ep in episodes],
                                                        self.note_tokens)):
            ep.sample.info["roles"]["summary"] = _first_line(summary)
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
