"""eva's creator (Ye et al. 2024, "Evolving Alignment via Asymmetric Self-Play"): grow the prompt pool
where the solver's samples disagree most.

Every ``every`` rounds, a ``fraction`` of the prompts observed since the last evolution is drawn without
replacement, weighted by min-max normalised informativeness (``regret.py``), and an LLM (the policy or a
second local model) rewrites each into ``variants`` new prompts, Evol-Instruct style: harder, more
specific, or on another topic. The new prompts form the next generation. From then on each round draws
``old_fraction`` of its tasks from earlier generations and the rest from the newest, so the training set
is mostly evolved prompts with a little of the old set mixed in.

Evolved prompts have no reference answer (``Task.answer`` is empty): they are scored by a label-free
reward (majority vote, self-certainty, a judge). Each evolution is recorded as an event (seeds with their
informativeness, children with their parent and operation) for the run's population log.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from autotelic.abilities import Learns
from autotelic.backends import PolicyBackend
from autotelic.curricula.regret import (
    EmptyPoolError,
    PromptPoolCurriculum,
    minmax_weights,
    sample_without_replacement,
)
from autotelic.curricula.rngstate import rng_state, set_rng_state
from autotelic.guardrails import CREATOR_VALIDITY
from autotelic.types import Group, Sample, Task

# Each operation: the instruction, and one demonstration (task, rewrite) so a small model sees the form.
OPERATIONS: dict[str, tuple[str, str, str]] = {
    "harder": ("Rewrite the task so that it is harder: add one more step, a larger number or an extra condition.",
               "What is 12 + 7?", "What is 12 + 7 + 30?"),
    "specific": ("Rewrite the task so that it is more specific and concrete, with the same kind of answer.",
                 "How many legs do 3 animals have?", "How many legs do 3 dogs and 2 birds have together?"),
    "topic": ("Write a new task of the same kind, but about a different topic or with different numbers.",
              "Tom has 3 apples and buys 5 more. How many apples does he have?",
              "A bus has 40 seats and 12 are taken. How many seats are free?"),
}
_LEADING_LABEL = re.compile(r"^\s*(?:new|rewritten)?\s*(?:task|question|problem)\s*:\s*", re.IGNORECASE)
REPLY_PREFIX = "New task:"
"""The evolver's reply starts with this (a response prefix), so even a small model answers with a task."""

# A trailing answer-format sentence ("Reply with only the number.") is kept out of the rewrite and put back
# on every child, so evolved prompts stay answerable in the form the reward extracts.
_FORMAT_INSTRUCTION = re.compile(r"\s*((?:Reply|Respond|Answer|Give)\b[^.?!]*[.!])\s*$")


def split_instruction(prompt: str) -> tuple[str, str]:
    """(the task, its trailing answer-format instruction or "")."""
    match = _FORMAT_INSTRUCTION.search(prompt)
    if match is None or match.start() == 0:
        return prompt.strip(), ""
    return prompt[:match.start()].strip(), match.group(1)


def evolve_message(task: str, operation: str) -> str:
    """The user message that asks the evolver for one rewrite of ``task`` (without its format instruction)."""
    instruction, example, rewrite = OPERATIONS[operation]
    return (f"{instruction} Keep it self-contained, with one short answer. Reply with only the new task.\n\n"
            f"Example:\nTask: {example}\n{REPLY_PREFIX} {rewrite}\n\nTask: {task}")


def clean_prompt(text: str, parent: str, min_chars: int, max_chars: int) -> str | None:
    """The first line of the evolver's reply as a task, or None when it is empty, too short or long, or the
    parent again."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    text = _LEADING_LABEL.sub("", lines[0].strip(" *#`")).strip(" \t\"'*`") if lines else ""  # markdown, quotes
    if not min_chars <= len(text) <= max_chars:
        return None
    if " ".join(text.lower().split()) == " ".join(parent.lower().split()):
        return None
    return text


def unknown_operation(operations: list[str]) -> str | None:
    """The first entry of ``operations`` that is not an operation ("" when there is none at all), else None."""
    if not operations:
        return ""
    return next((op for op in operations if op not in OPERATIONS), None)


def generation_of(task: Task) -> int:
    return int(task.meta.get("generation", 0))


@dataclass
class Rewrite:
    """One reply of the evolver: the seed it rewrote, the prompt it was asked (token ids), what it wrote, and the
    child task it became (None: rejected). Rewrites of one seed from one prompt form a group for the creator."""

    seed: Task
    prompt_ids: list[int]
    reply: Sample
    child: Task | None

    @staticmethod
    def from_dict(state: dict[str, Any]) -> Rewrite:
        child = state["child"]
        return Rewrite(Task(**state["seed"]), state["prompt_ids"], Sample(**state["reply"]),
                       None if child is None else Task(**child))


@dataclass
class PromptEvolver:
    """Rewrites seed tasks into new ones with an LLM; each seed gets ``variants`` rewrites, operations in turn
    (``grouped``: one operation per seed, in turn over the seeds, and ``variants`` samples of that one prompt, so
    a trained creator can compare its rewrites of the same request)."""

    backend: PolicyBackend
    operations: list[str] = field(default_factory=lambda: list(OPERATIONS))
    variants: int = 2
    temperature: float = 0.9
    max_new_tokens: int = 64
    min_chars: int = 8
    max_chars: int = 400
    grouped: bool = False

    def __post_init__(self) -> None:
        unknown = unknown_operation(self.operations)
        if unknown is not None:
            raise ValueError(f"unknown evolution operation '{unknown}'; choose from {', '.join(OPERATIONS)}")

    def evolve(self, seeds: list[Task], generation: int) -> tuple[list[Task], int]:
        """New tasks from ``seeds`` and how many replies were rejected (empty, too long, copies)."""
        rewrites = self.rewrite(seeds, generation)
        children = [r.child for r in rewrites if r.child is not None]
        return children, len(rewrites) - len(children)

    def rewrite(self, seeds: list[Task], generation: int) -> list[Rewrite]:
        """Every reply to ``seeds``, with the child task it became or None when it was rejected."""
        ops = self.operations
        if self.grouped:
            jobs, samples = [(seed, ops[i % len(ops)]) for i, seed in enumerate(seeds)], self.variants
        else:
            jobs, samples = [(seed, ops[(i + j) % len(ops)]) for i, seed in enumerate(seeds)
                             for j in range(self.variants)], 1
        if not jobs:
            return []
        parts = {seed.uid: split_instruction(seed.prompt) for seed, _ in jobs}
        prompts = [self.backend.encode_prompt(evolve_message(parts[seed.uid][0], op), REPLY_PREFIX)
                   for seed, op in jobs]
        outputs = self.backend.generate(prompts, samples, self.max_new_tokens, self.temperature,
                                        stop_token_ids=self.backend.token_ids_containing("\n"))  # one line: one task
        rewrites, seen = [], set()
        for (seed, op), prompt_ids, completions in zip(jobs, prompts, outputs):
            task, instruction = parts[seed.uid]
            for completion in completions:
                reply = self.backend.decode(completion.token_ids)
                text = clean_prompt(reply, task, self.min_chars, self.max_chars)
                child = None
                if text is not None and text not in seen:
                    seen.add(text)
                    child = self._child(seed, f"{text} {instruction}" if instruction else text, op, generation)
                rewrites.append(Rewrite(seed, prompt_ids, Sample(reply, list(completion.token_ids),
                                                                 list(completion.logprobs), completion.finished),
                                        child))
        return rewrites

    @staticmethod
    def _child(seed: Task, prompt: str, operation: str, generation: int) -> Task:
        uid = "evo/" + hashlib.sha1(prompt.encode()).hexdigest()[:12]
        meta = {**seed.meta, "created_by": "evolver", "parent": seed.uid, "parent_prompt": seed.prompt,
                "generation": generation, "operation": operation}
        return dataclasses.replace(seed, prompt=prompt, answer="", uid=uid, meta=meta, response_prefix="")


def creator_groups(rewrites: list[Rewrite], informativeness: Callable[[str], float | None]) -> list[Group]:
    """The creator's training groups: its rewrites of each (seed, prompt), each rewarded with the solver's
    informativeness on the child it became, 0 when it was rejected; a child the solver has not yet been asked
    is left out, and so is a group with fewer than two rewards."""
    groups: dict[tuple[str, tuple[int, ...]], Group] = {}
    for rewrite in rewrites:
        reward = 0.0 if rewrite.child is None else informativeness(rewrite.child.uid)
        if reward is None:
            continue
        key = (rewrite.seed.uid, tuple(rewrite.prompt_ids))
        group = groups.setdefault(key, Group(rewrite.seed, rewrite.prompt_ids, []))
        group.samples.append(dataclasses.replace(rewrite.reply, reward=reward))
    return [g for g in groups.values() if len(g.samples) >= 2]


class EvolvingPromptPool:
    """A ``PromptPoolCurriculum`` whose prompts evolve (see the module docstring).

    The evolver is attached once a model is loaded (``attach``); until then, and with ``every=0`` (the
    fixed-pool ablation), this is the plain prompt pool. With a ``creator`` (``curriculum.evolve.train``) the
    evolver learns too: at each evolution, from its previous one's rewrites (``creator_groups``).
    """

    def __init__(self, pool: PromptPoolCurriculum, every: int, fraction: float, old_fraction: float, seed: int):
        if every < 0 or not 0 < fraction <= 1 or not 0 <= old_fraction <= 1:
            raise ValueError(f"curriculum.evolve needs every >= 0, fraction in (0, 1] and old_fraction in [0, 1]; "
                             f"got every={every}, fraction={fraction}, old_fraction={old_fraction}")
        self.pool, self.every, self.fraction, self.old_fraction = pool, every, fraction, old_fraction
        self.evolver: PromptEvolver | None = None
        self.creator: Learns | None = None
        self.rewrites: list[Rewrite] = []  # the last evolution's, waiting for the solver to measure them
        self.rng = random.Random(f"{seed}/evolve")
        self.generation = 0
        self.rounds = 0
        self.recent: list[str] = []  # uids observed since the last evolution, first-seen order
        self.drawn_evolved = self.drawn = 0  # this round's draws, for the evolved-share metric
        self.events: list[dict[str, Any]] = []  # evolutions not yet written to the population log

    def attach(self, evolver: PromptEvolver, creator: Learns | None = None) -> None:
        self.evolver, self.creator = evolver, creator

    def next_tasks(self, count: int) -> list[Task]:
        if self.generation == 0:
            tasks = self.pool.next_tasks(count)
        else:
            newest, old = self.generation, round(self.old_fraction * count)
            tasks = self._draw(old, lambda t: generation_of(t) < newest) + \
                self._draw(count - old, lambda t: generation_of(t) == newest)
        self.drawn += len(tasks)
        self.drawn_evolved += sum(generation_of(t) > 0 for t in tasks)
        return tasks

    def _draw(self, count: int, among: Callable[[Task], bool]) -> list[Task]:
        """From the tasks ``among`` selects; from the whole pool when the learnability gate left none."""
        if not count:
            return []
        try:
            return self.pool.next_tasks(count, among)
        except EmptyPoolError:
            return self.pool.next_tasks(count)

    def observe(self, groups: list[Group]) -> dict[str, float]:
        metrics = self.pool.observe(groups)
        for group in groups:
            if group.task.uid in self.pool.pool and group.task.uid not in self.recent:
                self.recent.append(group.task.uid)
        self.rounds += 1
        metrics["curriculum/evolved_share"] = self.drawn_evolved / max(1, self.drawn)
        self.drawn_evolved = self.drawn = 0
        if self.evolver is not None and self.every and self.rounds % self.every == 0:
            metrics.update(self._evolve())
        metrics["curriculum/generation"] = float(self.generation)
        return metrics

    def _evolve(self) -> dict[str, float]:
        metrics = self._train_creator()
        entries = [self.pool.pool[uid] for uid in self.recent if self.pool.pool[uid].score is not None]
        self.recent = []
        if not entries:  # nothing was asked of the creator
            return {**metrics, "evolve/children": 0.0, "evolve/rejected": 0.0}
        weights = minmax_weights([e.score for e in entries])
        picked = sample_without_replacement(weights, max(1, round(self.fraction * len(entries))), self.rng)
        seeds = [entries[i] for i in picked]
        rewrites = self.evolver.rewrite([e.task for e in seeds], self.generation + 1)
        # a copy of a pool prompt or of a held-out one is dropped: a rejected rewrite
        children = self.pool.add([r.child for r in rewrites if r.child is not None])
        added = {c.uid for c in children}
        rewrites = [r if r.child is None or r.child.uid in added else dataclasses.replace(r, child=None)
                    for r in rewrites]
        rejected = len(rewrites) - len(children)
        if self.creator is not None:
            self.rewrites = rewrites
        if children:  # a generation that produced nothing new keeps drawing from the current one
            self.generation += 1
        parents = {e.task.uid: e.score for e in seeds}
        self.events.append({
            "generation": self.generation, "pool_size": len(self.pool.pool),
            "seeds": [{"uid": e.task.uid, "prompt": e.task.prompt, "informativeness": e.score,
                       "pass_rate": e.pass_rate, "generation": generation_of(e.task)} for e in seeds],
            # the lineage: each child's parent, how it was made, and the parent's informativeness when it was
            "children": [{"uid": c.uid, "prompt": c.prompt, "parent": c.meta["parent_prompt"],
                          "parent_uid": c.meta["parent"], "operation": c.meta["operation"],
                          "generation": generation_of(c), "parent_informativeness": parents[c.meta["parent"]]}
                         for c in children],
            # and how the evolved prompts fared once drawn: their informativeness as the solver found them
            "drawn": [{"uid": e.task.uid, "generation": generation_of(e.task), "informativeness": e.score,
                       "pass_rate": e.pass_rate} for e in entries if generation_of(e.task) > 0],
            "informativeness_by_generation": self.informativeness_by_generation(),
        })
        return {**metrics, "evolve/children": float(len(children)), "evolve/rejected": float(rejected),
                CREATOR_VALIDITY: len(children) / max(1, len(children) + rejected)}

    def _train_creator(self) -> dict[str, float]:
        """The creator's update on its last evolution's rewrites, rewarded with the solver's informativeness on
        them by now (groups whose rewards all agree teach nothing and are skipped)."""
        if self.creator is None or not self.rewrites:
            return {}
        groups = creator_groups(self.rewrites, self._informativeness)
        self.rewrites = []
        rewards = [s.reward for g in groups for s in g.samples]
        metrics = {"creator/groups": float(len(groups)), "creator/reward_mean": sum(rewards) / max(1, len(rewards))}
        spread = [g for g in groups if max(g.rewards) > min(g.rewards)]
        if spread:
            update = self.creator.update(spread)
            metrics.update({f"creator/{k.removeprefix('train/')}": v for k, v in update.items()})
        return metrics

    def _informativeness(self, uid: str) -> float | None:
        entry = self.pool.pool.get(uid)
        return None if entry is None else entry.score

    def informativeness_by_generation(self) -> dict[str, float]:
        """Mean latest informativeness of the observed prompts of each generation."""
        scores: dict[int, list[float]] = {}
        for entry in self.pool.pool.values():
            if entry.score is not None:
                scores.setdefault(generation_of(entry.task), []).append(entry.score)
        return {str(g): sum(v) / len(v) for g, v in sorted(scores.items())}

    def take_events(self) -> list[dict[str, Any]]:
        """Evolutions since the last call (the trainer appends them to population.jsonl)."""
        events, self.events = self.events, []
        return events

    def mix(self) -> dict[str, float]:
        return self.pool.mix()

    def estimated_pass_rate(self, task: Task) -> float:
        return self.pool.estimated_pass_rate(task)

    def state_dict(self) -> dict[str, Any]:
        creator = {} if self.creator is None else {"creator": self.creator.state_dict()}
        return {"pool": self.pool.state_dict(), "generation": self.generation, "rounds": self.rounds,
                "recent": list(self.recent), "rng": rng_state(self.rng),
                "rewrites": [dataclasses.asdict(r) for r in self.rewrites], **creator}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pool.load_state_dict(state["pool"])
        self.generation, self.rounds, self.recent = state["generation"], state["rounds"], list(state["recent"])
        set_rng_state(self.rng, state["rng"])
        self.rewrites = [Rewrite.from_dict(r) for r in state.get("rewrites", [])]
        if self.creator is not None:
            self.creator.load_state_dict(state["creator"])
